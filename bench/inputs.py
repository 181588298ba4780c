"""Deterministic benchmark inputs, built from a shape description (also inside the memory-measuring child)."""

from __future__ import annotations

import torch

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def make(op: str, shape: dict, device: str) -> tuple:
    g = torch.Generator().manual_seed(0)
    dtype = _DTYPES[shape.get("dtype", "fp32")]
    if op in ("probe_js", "topk_logprobs", "surprisal_entropy", "logit_margin"):
        n, n_pos, v = shape["N"], shape.get("L", 1), shape["V"]
        dims = (n, v) if n_pos == 1 else (n, n_pos, v)
        # Generated in fp32 on the CPU for every device, so CPU and GPU runs see the same numbers.
        x = (torch.randn(dims, generator=g) * 3).to(dtype).to(device)
        if op == "probe_js":
            chains = (torch.arange(n) // 8).to(device)  # chains of 8 boundaries
            return x, chains, shape.get("k", 20)
        if op == "topk_logprobs":
            return x, shape.get("k", 20)
        if op == "surprisal_entropy":
            return x, torch.randint(0, v, dims[:-1], generator=g).to(device)
        return (x,)
    if op == "lens_logprobs":
        layers, p, d, v = shape["layers"], shape["P"], shape["d"], shape["V"]
        hidden = (torch.randn(layers, p, d, generator=g) * 4).to(dtype).to(device)
        w = (torch.rand(d, generator=g) + 0.5).to(dtype).to(device)
        unembed = (torch.randn(v, d, generator=g) / d**0.5).to(dtype).to(device)
        targets = torch.randint(0, v, (p,), generator=g).to(device)
        return hidden, w, unembed, targets
    if op == "train_logprobs":
        n, d, v = shape["N"], shape["d"], shape["V"]
        hidden = (torch.randn(n, d, generator=g)).to(dtype).to(device).requires_grad_()
        weight = (torch.randn(v, d, generator=g) / d**0.5).to(dtype).to(device).requires_grad_()
        return hidden, weight, torch.randint(0, v, (n,), generator=g).to(device)
    raise ValueError(f"unknown op {op!r}")


def label(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def test_id(shape: dict) -> str:
    """A pytest id that -k can select, e.g. ``V151936-N64-L1-fp32``."""
    return "-".join(str(v) if k == "dtype" else f"{k}{v}" for k, v in shape.items())
