"""Packed prefix-shared forward versus the paper's per-candidate re-forward (App. B), side by side.

A tiny randomly initialised Qwen3 (the CPU) or a small real-architecture shape (a GPU), a 1,024-token chain,
C = 16 cuts evenly spaced over the whole chain (ρ = 1), a 9-token suffix and a 3-token answer. Reported:
time, token-forwards of each path and the ratio. Target on the CPU: packed >= 5x faster. The ``kv`` path reads
from the keys and values the chain's generation left (built here by one forward of the chain, outside the timing):
only the C suffixes are computed. Target: >= 40x fewer token-forwards than naive.
"""

import harness
import pytest
import torch
import transformers

from bsb.engine.packed import KeptKV, cached_reads, naive_reads, packed_reads

CHAIN, C, E, N_ANS = 1024, 16, 9, 3


def _model():
    if harness.HAS_CUDA:  # a Qwen3-0.6B-like shape, random weights
        cfg = transformers.Qwen3Config(vocab_size=151_936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=4096)
        dtype = torch.bfloat16
    else:
        cfg = transformers.Qwen3Config(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096)
        dtype = torch.float32
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).to(harness.device(), dtype).eval(), cfg.vocab_size


_MODEL = {}


@pytest.mark.parametrize("read", ["probe_js", "lens_shift"])
@pytest.mark.parametrize("path", ["naive", "packed", "kv"])
def test_packed_vs_naive(benchmark, read, path):
    if "m" not in _MODEL:
        _MODEL["m"] = _model()
    model, vocab = _MODEL["m"]
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab, (32 + CHAIN,), generator=g)  # 32 prompt tokens + the chain
    cuts = [32 + round(1 + j * (CHAIN - 3) / (C - 1)) for j in range(C)]
    suffix = torch.randint(0, vocab, (E,), generator=g)
    answer = torch.randint(0, vocab, (N_ANS,), generator=g) if read == "lens_shift" else None
    hidden = read == "lens_shift"
    if path == "kv":  # what the generation of the chain leaves behind
        with torch.no_grad():
            past = model(prefix.to(harness.device())[None], use_cache=True).past_key_values
        kv = KeptKV([(layer.keys, layer.values) for layer in past.layers], [0])
        fn = _kv_reads(model, kv)
    else:
        fn = packed_reads if path == "packed" else naive_reads
    result = {}

    def call():
        result["r"] = fn(model, prefix, cuts, suffix, answer, with_hidden=hidden)
        harness.sync()

    benchmark.pedantic(call, rounds=3, warmup_rounds=1)
    ms = benchmark.stats.stats.median * 1e3
    harness.record(op=f"{read} reads (1024-token chain, C=16)", shape=f"chain={CHAIN} C={C} E={E} n={N_ANS if hidden else 0}",
                   provider={"naive": "reference"}.get(path, path), ms=round(ms, 1),
                   ceiling=f"token-forwards {result['r'].token_forwards}", vs_ceiling=None)


def _kv_reads(model, kv):
    """:func:`cached_reads` of one chain (row 0 of ``kv``) with the signature of the other paths."""

    def reads(model_, prefix, cuts, suffix, answer, with_hidden):
        chain = (0, prefix, cuts) if answer is None else (0, prefix, cuts, answer)
        return cached_reads(model, kv, [chain], suffix, with_hidden, max_tokens=1 << 20)[0]

    return reads
