"""Activation memory of the policy update: what a forward keeps for its backward, per token and decoder layer.

A dense decoder layer (attention and MLP, as transformers writes each family) keeps, for every token, tensors whose
sizes are linear in the model's widths: the hidden size d, the MLP width f, the query width q = H·d_head, the key /
value width kv = H_kv·d_head and the head count H (attention's log-sum-exp). Per family and compute dtype the
coefficients of ``bytes = a·d + b·f + c·q + e·kv + g·H + h`` are measured by ``bench/activations.py`` (saved-tensor
hooks around a forward of tiny models of the family on the CPU, the difference of one and two layers at two lengths,
fitted exactly) and shipped in ``activations.json``; :func:`layer_bytes_per_token` evaluates them at a model's own
widths. With gradient checkpointing a layer keeps only its input (the fp32 residual stream, 4·d bytes a token) and one
layer's activations are rebuilt at a time during the backward.

What is not here: recurrent (Mamba-2) and mixture-of-experts layers (their kernels keep other things on a GPU than
transformers' torch path keeps on the CPU), the head's logits (bsb's update computes log-probs in chunks and never
keeps a full (T, V) tensor), and the tree-packed update's attention on the CPU (its SDPA levels gather each
segment's whole context, with the key heads repeated to the query heads). On CUDA the tree-packed update attends with
``flex_attention`` over its unique tokens, which keeps per token what a flat forward keeps, so its unique tokens
priced here bound it; that path has not run on a GPU yet.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

RECORD = Path(__file__).with_name("activations.json")
WIDTHS = ("d", "f", "q", "kv", "H", "1")


def widths(config) -> dict[str, int]:
    """The widths the coefficients multiply, read from a transformers config."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    return {
        "d": config.hidden_size,
        "f": config.intermediate_size,
        "q": heads * head_dim,
        "kv": kv * head_dim,
        "H": heads,
        "1": 1,
    }


@cache
def _record() -> dict:
    return json.loads(RECORD.read_text())


def layer_bytes_per_token(config, dtype: str = "bfloat16") -> float | None:
    """Bytes one decoder layer keeps for its backward, per token, at ``dtype`` compute (``bfloat16``: autocast over
    fp32 weights, as the update runs on a GPU; ``float32``); None for a family or dtype not measured."""
    coefficients = _record()["families"].get(getattr(config, "model_type", ""), {}).get(dtype)
    if coefficients is None:
        return None
    w = widths(config)
    return float(sum(c * w[name] for c, name in zip(coefficients, WIDTHS)))


def mask_bytes(config, rows: int, width: int, checkpointing: bool, dtype: str = "bfloat16") -> int:
    """The attention masks a micro-batch of ``rows`` sequences padded to ``width`` keeps. torch's SDPA turns a boolean
    mask into an additive one of the compute dtype in every layer that gets a mask and keeps it for the backward:
    every layer when rows are padded (``rows`` > 1), else only the sliding-window layers (an unpadded full-attention
    layer runs causal, maskless). With checkpointing one layer's is rebuilt at a time."""
    from bsb.engine.families import layer_kinds

    kinds = layer_kinds(config)
    masked = len(kinds) if rows > 1 else sum(k == "sliding_attention" for k in kinds)
    if not masked:
        return 0
    square = rows * width * width
    return square + square * (2 if dtype == "bfloat16" else 4) * (1 if checkpointing else masked)


def update_activation_bytes(
    config, rows: int, width: int, checkpointing: bool, dtype: str = "bfloat16"
) -> float | None:
    """Bytes a micro-batch of ``rows`` sequences padded to ``width`` tokens keeps between its forward and backward,
    over every layer: each layer's activations, or with ``checkpointing`` each layer's fp32 input plus one layer's
    activations (rebuilt in the backward); and the attention masks (:func:`mask_bytes`). None where
    :func:`layer_bytes_per_token` has no figure."""
    per = layer_bytes_per_token(config, dtype)
    if per is None:
        return None
    tokens, layers = rows * width, config.num_hidden_layers
    kept = tokens * (layers * 4 * config.hidden_size + per) if checkpointing else tokens * layers * per
    return kept + mask_bytes(config, rows, width, checkpointing, dtype)


def worst_micro_batch(config, shapes: list[tuple[int, int, bool]]) -> tuple[int, int, bool]:
    """Of the micro-batches ``(rows, width, checkpointing)`` an update can form, the one that keeps the most (the most
    token positions where ``config`` is None or its family has no figure)."""
    if config is None:
        return max(shapes, key=lambda s: (s[0] * s[1], s))
    return max(shapes, key=lambda s: (update_activation_bytes(config, *s) or 0, s[0] * s[1]))


def saved_bytes(model, ids, dtype: str = "float32", attention_mask=None) -> int:
    """What a forward of ``model`` (its decoder, no head) on ``ids`` keeps for the backward, measured: the bytes of
    the distinct storages its autograd graph saves, parameters left out; under CPU autocast when ``dtype`` is
    ``bfloat16``. The measurement ``bench/activations.py`` fits its coefficients to."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
            model.model(ids, attention_mask=attention_mask)
    return sum(seen.values())
