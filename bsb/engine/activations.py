"""Activation memory of the policy update: what a forward keeps for its backward, per token and decoder layer.

A dense decoder layer (attention and MLP, as transformers writes each family) keeps, for every token, tensors whose
sizes are linear in the model's widths: the hidden size d, the MLP width f, the query width q = H·d_head, the key /
value width kv = H_kv·d_head and the head count H (attention's log-sum-exp). Per family and compute dtype the
coefficients of ``bytes = a·d + b·f + c·q + e·kv + g·H + h`` are measured by ``bench/activations.py`` (saved-tensor
hooks around a forward of tiny models of the family on the CPU, the difference of one and two layers at two lengths,
fitted exactly) and shipped in ``activations.json``; :func:`layer_bytes_per_token` evaluates them at a model's own
widths. With gradient checkpointing a layer keeps only its input (the fp32 residual stream, 4·d bytes a token) and one
layer's activations are rebuilt at a time during the backward.

A hybrid (Nemotron-H) is priced a block at a time: its attention and MLP blocks by the same six widths, its Mamba-2
mixers by ``d, H·P, H·N, G·N, H·Q, H·P·N/Q, H, 1`` (heads H of width P, state N, groups G, scan chunk Q), measured on
transformers' PyTorch path, which is what a GPU without ``mamba-ssm`` / ``causal-conv1d`` runs too: the chunked scan
keeps B and C repeated to every head and a (Q x Q) decay matrix a chunk and head. With those kernels installed the
mixer keeps less; a model with MoE blocks has no figure.

What is not here: mixture-of-experts layers (their kernels keep other things on a GPU than transformers' torch path
keeps on the CPU), the head's logits (bsb's update computes log-probs in chunks and never
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
MAMBA_WIDTHS = ("d", "HP", "HN", "GN", "HQ", "HPN/Q", "H", "1")
# a hybrid's block types (config.layers_block_type) and the record's name for each
BLOCKS = {"linear_attention": "mamba", "full_attention": "attention", "mlp": "mlp"}


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


def mamba_widths(config) -> dict[str, float]:
    """The widths a Mamba-2 mixer's coefficients multiply (:data:`MAMBA_WIDTHS`)."""
    h, p, n, g = config.mamba_num_heads, config.mamba_head_dim, config.ssm_state_size, config.n_groups
    q = config.chunk_size
    return {
        "d": config.hidden_size,
        "HP": h * p,
        "HN": h * n,
        "GN": g * n,
        "HQ": h * q,
        "HPN/Q": h * p * n / q,
        "H": h,
        "1": 1,
    }


def layers_bytes_per_token(config, dtype: str = "bfloat16") -> list[float] | None:
    """Bytes each decoder layer keeps for its backward, per token (a dense family's layers alike; a hybrid's by its
    block types); None where a family, block type or dtype was not measured."""
    blocks = getattr(config, "layers_block_type", None)
    if getattr(config, "model_type", "") not in _record().get("hybrids", {}) or not blocks:
        per = layer_bytes_per_token(config, dtype)
        return None if per is None else [per] * config.num_hidden_layers
    record = _record()["hybrids"][config.model_type]
    out = []
    for kind in blocks:
        coefficients = record.get(BLOCKS.get(kind, kind), {}).get(dtype)
        if coefficients is None:
            return None
        w = mamba_widths(config) if BLOCKS.get(kind) == "mamba" else widths(config)
        names = MAMBA_WIDTHS if BLOCKS.get(kind) == "mamba" else WIDTHS
        out.append(float(sum(c * w[name] for c, name in zip(coefficients, names))))
    return out


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
    from bsb.engine.families import ATTENTION_TYPES, layer_kinds

    kinds = layer_kinds(config)  # a hybrid's Mamba-2 and MLP blocks take no mask
    masked = sum(k in ATTENTION_TYPES for k in kinds) if rows > 1 else sum(k == "sliding_attention" for k in kinds)
    if not masked:
        return 0
    square = rows * width * width
    return square + square * (2 if dtype == "bfloat16" else 4) * (1 if checkpointing else masked)


def update_activation_bytes(
    config, rows: int, width: int, checkpointing: bool, dtype: str = "bfloat16", input_bytes: int = 4
) -> float | None:
    """Bytes a micro-batch of ``rows`` sequences padded to ``width`` tokens keeps between its forward and backward,
    over every layer: each layer's activations, or with ``checkpointing`` each layer's input plus the largest layer's
    activations (rebuilt in the backward, one at a time); and the attention masks (:func:`mask_bytes`). A layer's
    input is ``input_bytes`` a value: 4 in one process (the weights stay fp32 under autocast, so the residual stream
    is fp32), the compute dtype's 2 under FSDP2's mixed precision (:func:`input_bytes`). None where
    :func:`layers_bytes_per_token` has no figure."""
    per = layers_bytes_per_token(config, dtype)
    if per is None:
        return None
    tokens = rows * width
    kept = tokens * (len(per) * input_bytes * config.hidden_size + max(per)) if checkpointing else tokens * sum(per)
    return kept + mask_bytes(config, rows, width, checkpointing, dtype)


def input_bytes(sharded: bool, compute_bytes: int = 2) -> int:
    """Bytes of a layer's input value: FSDP2 (torchrun) gathers the weights in the compute dtype, so the residual
    stream is in it too (``compute_bytes``: 2 for bf16); one process keeps fp32 weights under autocast (4)."""
    return compute_bytes if sharded else 4


def worst_micro_batch(config, shapes: list[tuple[int, int, bool]], inputs: int = 4) -> tuple[int, int, bool]:
    """Of the micro-batches ``(rows, width, checkpointing)`` an update can form, the one that keeps the most (the most
    token positions where ``config`` is None or its family has no figure); ``inputs``: a layer input's bytes."""
    if config is None:
        return max(shapes, key=lambda s: (s[0] * s[1], s))
    return max(shapes, key=lambda s: (update_activation_bytes(config, *s, input_bytes=inputs) or 0, s[0] * s[1]))


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
