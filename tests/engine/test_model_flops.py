"""Body and head FLOPs from a model's config (bsb.engine.model_flops) against torch's FlopCounterMode counting the
same forwards' matmuls, on the Gemma-3-270M and Qwen3-0.6B shapes (built on the meta device: no weights, no time)."""

import pytest
import torch

from bsb.engine.known_models import KNOWN_MODELS
from bsb.engine.model_flops import model_flops

transformers = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

QWEN3_06B = KNOWN_MODELS["Qwen3-0.6B"][1]
GEMMA3_270M = dict(model_type="gemma3_text", hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144, sliding_window=512,
                   tie_word_embeddings=True, query_pre_attn_scalar=256)
SHAPES = {"qwen3-0.6b": QWEN3_06B, "gemma3-270m": GEMMA3_270M}


def config(shape):
    fields = dict(SHAPES[shape])
    return transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)


def meta_model(cfg):
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    return model.eval()


def counted(model, prefix: int, tokens: int, keep: int, hidden: bool = False) -> float:
    """FLOPs FlopCounterMode counts for ``tokens`` tokens after a cached ``prefix``, logits at the last ``keep`` (0:
    none, every layer's hidden states kept when ``hidden``)."""
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.zeros(1, prefix, dtype=torch.long, device="meta"), past_key_values=cache,
              use_cache=True, logits_to_keep=1)
        ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")
        with FlopCounterMode(display=False) as fc:
            if keep:
                model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=keep)
            else:  # the body alone (logits_to_keep=0 would keep every position)
                model.model(input_ids=ids, past_key_values=cache, use_cache=True, output_hidden_states=hidden)
    return fc.get_total_flops()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_embedding_is_free_and_the_head_is_2dv_a_position(shape):
    cfg = config(shape)
    f = model_flops(cfg)
    model = meta_model(cfg)
    total = sum(p.numel() for p in model.parameters())
    norms = sum(p.numel() for p in model.parameters() if p.dim() < 2)
    assert f.embed_params == cfg.vocab_size * cfg.hidden_size and f.tied
    assert f.body_params + f.embed_params + norms == total
    assert f.head_per_position == 2 * cfg.hidden_size * cfg.vocab_size
    if shape == "gemma3-270m":  # most of the parameters are the embedding, which costs nothing
        assert f.embed_params / total > 0.6 and f.head_per_position > 2 * f.body_params


@pytest.mark.parametrize("read_len", [1, 2, 4])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_probe_read_is_its_forwards_matmuls(shape, read_len):
    cfg = config(shape)
    f, model = model_flops(cfg), meta_model(cfg)
    prefix, suffix_len = 300, 9
    q = suffix_len + read_len - 1
    assert f.probe_read(prefix, suffix_len, read_len) == pytest.approx(counted(model, prefix, q, read_len), rel=0.01)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_lens_read_pays_the_head_at_every_read_layer(shape):
    cfg = config(shape)
    f, model = model_flops(cfg), meta_model(cfg)
    prefix, suffix_len, answer_len, layers = 200, 9, 3, cfg.num_hidden_layers
    body = counted(model, prefix, suffix_len + answer_len - 1, 0, hidden=True)  # no logits in the forward
    with FlopCounterMode(display=False) as fc:  # the lens: each layer's answer positions through the head
        hidden = torch.zeros(layers, answer_len, cfg.hidden_size, device="meta")
        torch.nn.functional.linear(hidden, model.get_output_embeddings().weight)
    assert f.lens_read(prefix, suffix_len, answer_len, layers) == pytest.approx(body + fc.get_total_flops(), rel=0.01)


def test_a_sliding_layer_attends_its_window():
    f = model_flops(config("gemma3-270m"))  # 3 full layers, 15 sliding ones with a 512-key window; H·d_head = 1024
    assert f.attention_per_token(2000) == 4 * 1024 * (3 * 2000 + 15 * 512)
    assert f.attention_per_token(100) == 4 * 1024 * 18 * 100  # within the window every layer attends it all


def test_moe_experts_count_at_their_active_share():
    cfg = transformers.AutoConfig.for_model("qwen3_moe", hidden_size=64, intermediate_size=128,
                                            moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            num_key_value_heads=2, head_dim=16, vocab_size=100, num_experts=8,
                                            num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[])
    dense_share = model_flops(cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in f".{n}.")
    others = sum(p.numel() for n, p in model.named_parameters() if ".experts." not in f".{n}." and p.dim() >= 2)
    assert experts > 0
    embedding_and_head = 100 * 64 * (1 if cfg.tie_word_embeddings else 2)
    assert dense_share.body_params == pytest.approx(others - embedding_and_head + experts * 2 / 8)  # top-2 of 8
