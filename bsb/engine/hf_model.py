"""What the belief reads need from a Hugging Face causal LM: its decoder layers, final norm and unembedding.

Supported families are those whose residual stream, final norm and 4D-mask handling were checked against
separate forwards (tests/engine/test_packed.py): Qwen2, Qwen3, Llama, OLMo-2 and OLMo-3. Another family is a
clear error, not a silently wrong read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SUPPORTED_FAMILIES = ("qwen2", "qwen3", "llama", "olmo2", "olmo3")


@dataclass(frozen=True)
class LensParts:
    """The pieces of the logit lens (Eq. 3): the model's own final norm and unembedding."""

    layers: list[torch.nn.Module]  # decoder layers, in depth order
    norm_weight: torch.Tensor  # (d,)
    norm_eps: float
    unembed: torch.Tensor  # (V, d)


def model_family(model) -> str:
    return getattr(getattr(model, "config", None), "model_type", type(model).__name__)


def check_supported(model) -> None:
    family = model_family(model)
    if family not in SUPPORTED_FAMILIES:
        raise ValueError(
            f"the packed forward does not know model family {family!r}; supported: {', '.join(SUPPORTED_FAMILIES)}. "
            "Use the naive re-forward (bsb.engine.packed.naive_reads) for other families."
        )


def lens_parts(model) -> LensParts:
    check_supported(model)
    inner = model.model
    eps = getattr(model.config, "rms_norm_eps", None)
    if eps is None:
        raise ValueError(f"{model_family(model)} config has no rms_norm_eps; cannot rebuild its final norm")
    return LensParts(list(inner.layers), inner.norm.weight, float(eps), model.get_output_embeddings().weight)


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

    from bsb import floors
    from bsb.engine.device import resolve_device, resolve_dtype

    floors.check("transformers")

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dt).to(dev).eval()
