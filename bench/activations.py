"""Measure what a decoder layer keeps for its backward, per token, for each dense family bsb declares, and fit the
coefficients of ``bytes = a·d + b·f + c·q + e·kv + g·H + h`` (bsb.engine.activations) in fp32 and under bf16 autocast;
for Nemotron-H, each block type apart (attention and MLP by the same widths, the Mamba-2 mixer by its own,
bsb.engine.activations.MAMBA_WIDTHS, on transformers' PyTorch path).

    python bench/activations.py            # writes bsb/engine/activations.json (about a minute on 2 cores)

Per family: tiny random models at seven width settings, each with one and with two layers at two sequence lengths;
the difference of two and one layers is one layer, the difference of the lengths removes what does not grow with the
tokens; the seven per-token figures fit the six coefficients (least squares; the fit's worst relative error is
recorded and must be ~0).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bsb.engine.activations import MAMBA_WIDTHS, RECORD, WIDTHS, mamba_widths, saved_bytes, widths  # noqa: E402

FAMILIES = {
    "qwen2": transformers.Qwen2Config,
    "qwen3": transformers.Qwen3Config,
    "llama": transformers.LlamaConfig,
    "mistral": transformers.MistralConfig,
    "phi3": transformers.Phi3Config,
    "olmo2": transformers.Olmo2Config,
    "olmo3": transformers.Olmo3Config,
    "gemma3_text": transformers.Gemma3TextConfig,
}
# (d, f, H, H_kv, d_head): each width moved on its own from the first
SETTINGS = [
    (128, 256, 2, 1, 64),
    (256, 256, 2, 1, 64),
    (128, 512, 2, 1, 64),
    (128, 256, 4, 1, 64),
    (128, 256, 4, 2, 64),
    (128, 256, 2, 1, 32),
    (128, 256, 4, 1, 32),
]
LENGTHS = (64, 128)


def config(kind, d, f, heads, kv, head_dim, layers):
    return kind(
        vocab_size=128,
        hidden_size=d,
        intermediate_size=f,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        num_hidden_layers=layers,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


def per_token(kind, setting, dtype: str) -> float:
    """One layer's saved bytes per token at ``setting``."""
    out = {}
    for n in LENGTHS:
        total = []
        for layers in (1, 2):
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(config(kind, *setting, layers)).train()
            total.append(saved_bytes(model, torch.randint(0, 128, (1, n)), dtype))
        out[n] = total[1] - total[0]
    return (out[LENGTHS[1]] - out[LENGTHS[0]]) / (LENGTHS[1] - LENGTHS[0])


def fit(kind, dtype: str) -> tuple[list[float], float]:
    rows, ys = [], []
    for setting in SETTINGS:
        w = widths(config(kind, *setting, 1))
        rows.append([w[name] for name in WIDTHS])
        ys.append(per_token(kind, setting, dtype))
    a, y = np.array(rows, float), np.array(ys)
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    return [round(float(c), 3) for c in coef], float(np.max(np.abs(a @ coef - y) / y))


# Nemotron-H: (d, H, P, N, G, Q) of the Mamba-2 mixer, each moved on its own from the first, then two together
MAMBA_SETTINGS = [
    (128, 4, 16, 16, 2, 32),
    (256, 4, 16, 16, 2, 32),
    (128, 8, 16, 16, 2, 32),
    (128, 4, 32, 16, 2, 32),
    (128, 4, 16, 32, 2, 32),
    (128, 4, 16, 16, 4, 32),
    (128, 4, 16, 16, 2, 64),
    (128, 4, 16, 16, 2, 16),
    (128, 8, 32, 16, 2, 64),
    (128, 4, 16, 32, 4, 16),
]
HYBRID_LENGTHS = (128, 256)  # multiples of every chunk size above


def hybrid_config(block, layers, d=128, f=256, heads=2, kv=1, head_dim=64, mamba=(4, 16, 16, 2, 32)):
    h, p, n, g, q = mamba
    return transformers.NemotronHConfig(
        vocab_size=128, hidden_size=d, intermediate_size=f, num_attention_heads=heads, num_key_value_heads=kv,
        head_dim=head_dim, layers_block_type=[block] * layers, mamba_num_heads=h, mamba_head_dim=p,
        ssm_state_size=n, n_groups=g, chunk_size=q, conv_kernel=4, tie_word_embeddings=False, use_cache=False,
        attn_implementation="sdpa", pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )


def hybrid_per_token(block: str, dtype: str, **kw) -> float:
    out = {}
    for n in HYBRID_LENGTHS:
        total = []
        for layers in (1, 2):
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(hybrid_config(block, layers, **kw)).train()
            total.append(saved_bytes(model, torch.randint(0, 128, (1, n)), dtype))
        out[n] = total[1] - total[0]
    return (out[HYBRID_LENGTHS[1]] - out[HYBRID_LENGTHS[0]]) / (HYBRID_LENGTHS[1] - HYBRID_LENGTHS[0])


def hybrid_fit(block: str, dtype: str) -> tuple[list[float], float]:
    rows, ys = [], []
    if block == "mamba":
        for d, *mamba in MAMBA_SETTINGS:
            w = mamba_widths(hybrid_config("linear_attention", 1, d=d, mamba=tuple(mamba)))
            rows.append([w[name] for name in MAMBA_WIDTHS])
            ys.append(hybrid_per_token("linear_attention", dtype, d=d, mamba=tuple(mamba)))
    else:
        kind = {"attention": "full_attention", "mlp": "mlp"}[block]
        for d, f, heads, kv, head_dim in SETTINGS:
            w = widths(hybrid_config(kind, 1, d, f, heads, kv, head_dim))
            rows.append([w[name] for name in WIDTHS])
            ys.append(hybrid_per_token(kind, dtype, d=d, f=f, heads=heads, kv=kv, head_dim=head_dim))
    a, y = np.array(rows, float), np.array(ys)
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    return [round(float(c), 3) for c in coef], float(np.max(np.abs(a @ coef - y) / y))


def main() -> None:
    families, hybrids, worst = {}, {"nemotron_h": {}}, 0.0
    for name, kind in FAMILIES.items():
        families[name] = {}
        for dtype in ("float32", "bfloat16"):
            families[name][dtype], err = fit(kind, dtype)
            worst = max(worst, err)
            print(name, dtype, families[name][dtype], f"fit error {err:.1e}", flush=True)
    for block in ("attention", "mlp", "mamba"):
        hybrids["nemotron_h"][block] = {}
        for dtype in ("float32", "bfloat16"):
            hybrids["nemotron_h"][block][dtype], err = hybrid_fit(block, dtype)
            worst = max(worst, err)
            print("nemotron_h", block, dtype, hybrids["nemotron_h"][block][dtype], f"fit error {err:.1e}", flush=True)
    record = {
        "measured": f"python bench/activations.py, {time.strftime('%Y-%m-%d')}, transformers "
        f"{transformers.__version__}, torch {torch.__version__}, SDPA on the CPU",
        "widths": list(WIDTHS),
        "mamba_widths": list(MAMBA_WIDTHS),
        "worst_fit_error": worst,
        "families": families,
        "hybrids": hybrids,
    }
    RECORD.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
