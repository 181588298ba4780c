"""Tiny random models of every declared family, built from each family's real config quirks (sliding windows shorter
than the test chains, Gemma's (1 + w) norms and query scale, Qwen3-MoE's experts, Phi-3's fused projections,
Nemotron-H's Mamba-2 / attention / MLP / MoE blocks). Every norm weight is drawn at random, so a lens that scales by
the wrong weight (w for 1 + w) cannot agree by accident."""

import torch

transformers = __import__("transformers")

VOCAB = 97
WINDOW = 24  # shorter than the test chains: cuts beyond the window are read
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
              num_key_value_heads=1, max_position_embeddings=512, eos_token_id=1, pad_token_id=0, bos_token_id=2)
SLIDE = ["sliding_attention", "sliding_attention", "full_attention"]

T = transformers
CONFIGS = {  # family -> (config class, its quirks)
    "qwen2": (T.Qwen2Config, dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1, **COMMON)),
    "qwen3": (T.Qwen3Config, dict(head_dim=32, **COMMON)),
    "qwen3_moe": (T.Qwen3MoeConfig, dict(head_dim=32, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                                         use_sliding_window=True, sliding_window=WINDOW, **COMMON)),
    "llama": (T.LlamaConfig, COMMON),
    "mistral": (T.MistralConfig, dict(head_dim=32, sliding_window=WINDOW, **COMMON)),
    "phi3": (T.Phi3Config, dict(sliding_window=WINDOW, original_max_position_embeddings=512, **COMMON)),
    "olmo2": (T.Olmo2Config, COMMON),
    "olmo3": (T.Olmo3Config, dict(sliding_window=WINDOW, layer_types=SLIDE, **COMMON)),
    "gemma3_text": (T.Gemma3TextConfig, dict(head_dim=32, sliding_window=WINDOW, layer_types=SLIDE,
                                             query_pre_attn_scalar=24, **COMMON)),
    "nemotron_h": (T.NemotronHConfig, dict(
        vocab_size=VOCAB, hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        intermediate_size=96, layers_block_type=["linear_attention", "full_attention", "mlp", "linear_attention",
                                                 "moe", "full_attention"],
        mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=2, conv_kernel=4, chunk_size=8,
        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, moe_shared_expert_intermediate_size=48,
        max_position_embeddings=512, eos_token_id=1, pad_token_id=0, bos_token_id=2)),
}
# the families whose window is optional, without it (kept-KV reads need every layer to keep the whole sequence)
WINDOWLESS = {"qwen2": dict(use_sliding_window=False), "qwen3_moe": dict(use_sliding_window=False),
              "mistral": dict(sliding_window=None), "phi3": dict(sliding_window=None)}

_cache = {}


def tiny_model(family: str, attn: str = "sdpa", window: bool = True):
    """A tiny random ``family`` model in fp32 and eval mode (cached; callers that train copy it); ``window=False``
    drops the sliding window where the family's window is optional (:data:`WINDOWLESS`)."""
    if (family, attn, window) not in _cache:
        kind, kwargs = CONFIGS[family]
        cfg = kind(**{**kwargs, **({} if window else WINDOWLESS.get(family, {}))})
        cfg._attn_implementation = attn
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name and name.endswith("weight"):
                    p.copy_(p + 0.3 * torch.randn(p.shape, generator=g))
        _cache[family, attn, window] = model
    return _cache[family, attn, window]


def save_hybrid_checkpoint(path, head_dim: int = 32) -> str:
    """A tiny random Nemotron-H checkpoint (Mamba-2, attention, MLP and MoE blocks) with the embedded character
    tokenizer, saved at ``path``. Its chains break lines often, so the trainer's
    selectors have several boundaries to read: every token's embedding carries +1 on dimension 0, which survives the
    random layers into the final hidden state, and the head reads that dimension into the newline logit. Some chains
    end (EOS) before 48 tokens, so the overlong penalty tells siblings apart."""
    from bsb.embedded.tokenizer import char_tokenizer

    tok = char_tokenizer()
    kwargs = {**CONFIGS["nemotron_h"][1], "vocab_size": len(tok), "head_dim": head_dim, "tie_word_embeddings": False,
              "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.NemotronHConfig(**kwargs))
    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = 1.0
        model.lm_head.weight[tok.convert_tokens_to_ids("\n"), 0] = 0.35
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)
