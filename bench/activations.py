"""Measure what a decoder layer keeps for its backward, per token, for each dense family bsb declares, and fit the
coefficients of ``bytes = a·d + b·f + c·q + e·kv + g·H + h`` (bsb.engine.activations) in fp32 and under bf16 autocast.

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

from bsb.engine.activations import RECORD, WIDTHS, saved_bytes, widths  # noqa: E402

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


def main() -> None:
    families, worst = {}, 0.0
    for name, kind in FAMILIES.items():
        families[name] = {}
        for dtype in ("float32", "bfloat16"):
            families[name][dtype], err = fit(kind, dtype)
            worst = max(worst, err)
            print(name, dtype, families[name][dtype], f"fit error {err:.1e}", flush=True)
    record = {
        "measured": f"python bench/activations.py, {time.strftime('%Y-%m-%d')}, transformers "
        f"{transformers.__version__}, torch {torch.__version__}, SDPA on the CPU",
        "widths": list(WIDTHS),
        "worst_fit_error": worst,
        "families": families,
    }
    RECORD.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
