"""What the belief reads need from a Hugging Face causal LM: its decoder layers, final norm and unembedding.

Where these sit and what they compute is the family's declaration (:mod:`bsb.engine.families`): a family whose
residual stream, final norm and mask handling were checked against separate forwards (tests/engine/test_families.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bsb.engine.families import check_declared, family_of, head_quirks, model_family, plan


@dataclass(frozen=True)
class LensParts:
    """The pieces of the logit lens (Eq. 3): the model's own final norm and unembedding."""

    layers: list[torch.nn.Module]  # decoder layers, in depth order
    norm_weight: torch.Tensor  # (d,) the weight the norm's output is scaled by (Gemma's 1 + w included)
    norm_eps: float
    unembed: torch.Tensor  # (V, d)


def check_supported(model) -> None:
    """That the packed forward can read ``model`` (a declared family whose layers it can mask), else one error."""
    how = plan(model)
    if how.reads != "packed":
        raise ValueError(f"the packed forward cannot read this model: {how.why}. Read it per cut (naive_reads)")


def decoder_layers(model) -> list[torch.nn.Module]:
    """The decoder layers of a declared family, in depth order (the residual stream after each is the lens's input)."""
    check_declared(model)
    return list(model.model.layers)


def lens_parts(model) -> LensParts:
    """The model's own final norm (as a scale and epsilon) and unembedding, from its family's declaration."""
    family = check_declared(model)
    quirks = head_quirks(model)
    if quirks:
        raise ValueError(
            f"the logit lens applies a plain unembedding; this {family.label} head has {', '.join(quirks)}"
        )
    eps = getattr(model.config, family.eps, None)
    if eps is None:
        raise ValueError(f"{model_family(model)} config has no {family.eps}; cannot rebuild its final norm")
    norm = getattr(model.model, family.norm)
    weight = norm.weight if not family.norm_offset else norm.weight + family.norm_offset
    return LensParts(decoder_layers(model), weight, float(eps), model.get_output_embeddings().weight)


def head_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """The model's logits from final hidden states, as its own forward computes them: the LM head, then the family's
    tanh softcap or logit scale where its config sets one (:func:`bsb.engine.families.head_quirks`)."""
    logits = model.get_output_embeddings()(hidden)
    family = family_of(model)
    cap = getattr(model.config, family.softcap, None) if family and family.softcap else None
    scale = getattr(model.config, family.logit_scale, None) if family and family.logit_scale else None
    if scale not in (None, 1, 1.0):
        logits = logits / scale
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


class ResidualCapture:
    """Forward hooks that keep each decoder layer's output (the residual stream, before the final norm) at the
    given sequence positions of batch row 0, or of the given ``rows`` (one per position): (layers, len(positions), d).
    Used as a context manager around one forward."""

    def __init__(self, layers: list[torch.nn.Module], positions: torch.Tensor, rows: torch.Tensor | None = None):
        self.layers, self.positions = layers, positions
        self.rows = rows if rows is not None else 0
        self.captured: list[torch.Tensor] = []
        self._hooks: list = []

    def _hook(self, module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output  # (B, Q, d)
        self.captured.append(hidden[self.rows, self.positions].detach())

    def __enter__(self) -> ResidualCapture:
        self._hooks = [layer.register_forward_hook(self._hook) for layer in self.layers]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()

    def stacked(self) -> torch.Tensor:
        return torch.stack(self.captured)  # (layers, P, d)


def load_for_inference(path, device: str = "auto", dtype: str = "auto"):
    """A checkpoint for the inference-only commands (validate, evaluate, demo): on ``device``, weights in the
    compute dtype (bf16 on a GPU, fp32 on the CPU by default), eval mode. Bad device or dtype strings, or CUDA where
    there is none, fail before the weights load."""
    import transformers

    from bsb import min_versions
    from bsb.engine.device import resolve_device, resolve_dtype

    min_versions.check("transformers")

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dt).to(dev).eval()
