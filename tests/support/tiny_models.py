"""Test-size causal LMs: the two sizes most tests use, so a test names a size and only the fields it depends on.

``xs``: a 40-token Qwen3 of width 32 (one layer), for the reads, the value curves and the sharded update. ``s``: a
61-token Qwen3 of width 64 (two layers), for the backends, readers and selectors. Family matrices (every family bsb
reads, public model shapes) keep their own configs beside the family they test."""

import torch
import transformers

SIZES = {
    "xs": dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=1, head_dim=16,
               max_position_embeddings=128),
    "s": dict(vocab_size=61, hidden_size=64, intermediate_size=96, num_hidden_layers=2, head_dim=32,
              max_position_embeddings=256),
}


def tiny_config(size: str = "xs", **fields) -> transformers.Qwen3Config:
    """A Qwen3 config of ``size`` (2 query heads, 1 key-value head) with ``fields`` on top."""
    return transformers.Qwen3Config(**{"num_attention_heads": 2, "num_key_value_heads": 1, **SIZES[size], **fields})


def tiny_model(size: str = "xs", seed: int = 0, **fields) -> transformers.Qwen3ForCausalLM:
    """A randomly initialised model of :func:`tiny_config` (torch seeded with ``seed`` first), in eval mode."""
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(tiny_config(size, **fields)).eval()
