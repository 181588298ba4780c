"""Where a model runs and in what precision, resolved once before any model is loaded.

* ``device``: ``auto`` (CUDA when present, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.
* ``TORCHRUN_ENV``: what torchrun sets in each rank's environment (:func:`launched_by_torchrun`).
* ``dtype``: ``auto`` (bf16 on a GPU, fp32 on the CPU), ``bfloat16`` / ``bf16``, ``float16`` / ``fp16``, ``float32`` /
  ``fp32``.

Mixed precision in training keeps fp32 master weights and fp32 AdamW state, and runs every forward (rollout reads,
generation, the policy update) under ``torch.autocast`` in the chosen dtype: the optimizer never rounds an update away
(bf16 master weights lose updates below 2^-8 of a weight, which lr = 1e-6 is), and activations and matmuls run at the
bf16 rate. Inference-only commands load the weights in the chosen dtype directly.
"""

from __future__ import annotations

import contextlib
import os
import re

import torch

DEVICES = ("auto", "cpu", "cuda")  # and cuda:N
TORCHRUN_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE")  # set by torchrun; read by the trainer and vLLM's launcher
DTYPES = {
    "auto": None,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
}


def launched_by_torchrun() -> bool:
    return all(k in os.environ for k in TORCHRUN_ENV)


def check_device_name(device: str) -> None:
    if device not in DEVICES and not re.fullmatch(r"cuda:\d+", device or ""):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {device!r}")


def check_dtype_name(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")


def resolve_device(device: str = "auto") -> torch.device:
    """The torch device for ``device``; asking for CUDA where there is none is an error."""
    check_device_name(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={device} but this machine has no CUDA device (torch {torch.__version__}); "
                "use device=cpu or auto"
            )
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device={device} but only {torch.cuda.device_count()} CUDA device(s) exist")
    return torch.device(device)


def compute_device(model) -> torch.device:
    """The device ``model``'s forwards compute on: its parameters' device, or, for FSDP2 shards, the device of their
    mesh (``cuda:<current device>``, as FSDP2 itself resolves it). With ``fsdp_cpu_offload`` the shards live in host
    memory while FSDP2 moves each forward's inputs and gathered weights to the mesh's device, so what is made beside
    a forward's output (a result buffer, an engine's device) must come from here, not from the parameters."""
    from torch.distributed.tensor import DTensor

    param = next(model.parameters())
    if not isinstance(param, DTensor):
        return param.device
    kind = param.device_mesh.device_type
    if kind == "cpu":
        return torch.device("cpu")
    return torch.device(kind, torch.get_device_module(kind).current_device())


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The compute dtype: ``auto`` is bf16 on a GPU and fp32 on the CPU; bf16 on a GPU without it is an error."""
    check_dtype_name(dtype)
    out = DTYPES[dtype] or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    if out is torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"dtype=bfloat16 but {torch.cuda.get_device_name(device)} has no bf16 support; use dtype=float16 or float32"
        )
    return out


def autocast(device: torch.device, dtype: torch.dtype):
    """``torch.autocast`` in ``dtype`` on ``device``; a no-op context for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
