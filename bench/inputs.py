"""Deterministic benchmark inputs, built from a shape description (also inside the memory-measuring child)."""

from __future__ import annotations

import torch

from bsb.engine.known_models import KNOWN_MODELS

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# the Qwen3-0.6B shape (width, heads, MLP, vocabulary) of the GPU scripts' random models; each picks its layer count
QWEN3_06B = {
    **{k: v for k, v in KNOWN_MODELS["Qwen3-0.6B"][1].items() if k not in ("model_type", "num_hidden_layers")},
    "max_position_embeddings": 40_960,
    "rope_theta": 1_000_000.0,
}  # bsb's one table of public shapes (bsb.engine.known_models), less the layer count each benchmark sets
# the toy shape of their --smoke runs on the CPU
QWEN3_TOY = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    max_position_embeddings=8192,
)


def make(op: str, shape: dict, device: str, seed: int = 0) -> tuple:
    """Inputs of ``op`` at ``shape``, drawn on ``device`` itself (a GPU draws its gigabytes in milliseconds)."""
    g = torch.Generator(device).manual_seed(seed)
    dtype = _DTYPES[shape.get("dtype", "fp32")]
    if op in ("probe_js", "topk_logprobs", "surprisal_entropy", "logit_margin"):
        n, n_pos, v = shape["N"], shape.get("L", 1), shape["V"]
        dims = (n, v) if n_pos == 1 else (n, n_pos, v)
        x = (torch.randn(dims, generator=g, device=device) * 3).to(dtype)
        if op == "probe_js":
            chains = torch.arange(n, device=device) // 8  # chains of 8 boundaries
            return x, chains, shape.get("k", 20)
        if op == "topk_logprobs":
            return x, shape.get("k", 20)
        if op == "surprisal_entropy":
            return x, torch.randint(0, v, dims[:-1], generator=g, device=device)
        return (x,)
    if op == "lens_logprobs":
        layers, p, d, v = shape["layers"], shape["P"], shape["d"], shape["V"]
        hidden = (torch.randn(layers, p, d, generator=g, device=device) * 4).to(dtype)
        w = (torch.rand(d, generator=g, device=device) + 0.5).to(dtype)
        unembed = (torch.randn(v, d, generator=g, device=device) / d**0.5).to(dtype)
        targets = torch.randint(0, v, (p,), generator=g, device=device)
        return hidden, w, unembed, targets
    if op == "train_logprobs":
        n, d, v = shape["N"], shape["d"], shape["V"]
        hidden = torch.randn(n, d, generator=g, device=device).to(dtype).requires_grad_()
        weight = (torch.randn(v, d, generator=g, device=device) / d**0.5).to(dtype).requires_grad_()
        return hidden, weight, torch.randint(0, v, (n,), generator=g, device=device)
    raise ValueError(f"unknown op {op!r}")


def label(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def test_id(shape: dict) -> str:
    """A pytest id that -k can select, e.g. ``V151936-N64-L1-fp32``."""
    return "-".join(str(v) if k == "dtype" else f"{k}{v}" for k, v in shape.items())
