"""A strict base for stand-ins of vLLM's ``LLM``: every call bsb makes is bound against the installed vLLM's own
signatures before a stand-in records it, so a misspelled keyword, a sleep level or wake-up tag vLLM does not know, or
an RPC no worker has fails the test the way it would fail a real engine (``tests/engine/test_strict_vllm.py`` shows
it does).

What is checked, all read from the installed vLLM (0.32 here):

* ``LLM(**kwargs)``: ``LLM.__init__``'s own parameters, and the rest among ``EngineArgs``' fields (``LLM`` passes its
  ``**kwargs`` on to ``EngineArgs``);
* ``sleep``, ``wake_up``, ``reset_prefix_cache``, ``generate``, ``collective_rpc``: bound against ``LLM``'s methods;
  a sleep level in :data:`SLEEP_LEVELS` and wake-up tags in :data:`WAKE_TAGS` (``LLM.sleep`` / ``LLM.wake_up``'s
  docstrings: vLLM checks them deep in its allocator, where a stand-in never goes);
* ``collective_rpc(method, kwargs=...)``: ``method`` a method of vLLM's GPU ``Worker``, its ``args`` / ``kwargs``
  bound against it, or against the model runner's method of that name where the worker only passes them on
  (``Worker.reload_weights(*args, **kwargs)`` calls ``GPUModelRunner.reload_weights(weights_iterator=...)``).
"""

from __future__ import annotations

import dataclasses
import inspect

SLEEP_LEVELS = (0, 1, 2)
WAKE_TAGS = ("weights", "kv_cache", "scheduling")


def _llm():
    """The real ``LLM`` class, where a test's ``monkeypatch.setattr(vllm, "LLM", ...)`` does not reach."""
    from vllm.entrypoints.llm import LLM

    return LLM


def bind(fn, *args, **kwargs) -> inspect.BoundArguments:
    """``fn``'s signature bound to the call (a ``TypeError`` naming the bad argument otherwise)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        raise TypeError(f"vLLM's {fn.__qualname__} rejects this call: {err}") from None
    bound.apply_defaults()
    return bound


def check_llm_kwargs(kwargs: dict) -> None:
    """``LLM(**kwargs)`` as vLLM reads it: its own parameters, then EngineArgs' fields."""
    from vllm.engine.arg_utils import EngineArgs

    own = inspect.signature(_llm().__init__).parameters
    known = {n for n, p in own.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    known |= {f.name for f in dataclasses.fields(EngineArgs)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"vLLM's LLM and EngineArgs take no argument(s) {', '.join(unknown)}")
    bind(_llm().__init__, None, **kwargs)


def rpc_target(method: str):
    """The function a ``collective_rpc(method, ...)`` ends in on a GPU worker."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.gpu_worker import Worker

    fn = getattr(Worker, method, None)
    if not callable(fn):
        raise AttributeError(f"vLLM's GPU Worker has no method {method!r} for collective_rpc")
    kinds = {p.kind for n, p in inspect.signature(fn).parameters.items() if n != "self"}
    passes_on = kinds <= {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    if passes_on and callable(getattr(GPUModelRunner, method, None)):
        fn = getattr(GPUModelRunner, method)
    return fn


class StrictLLM:
    """Checks each call against vLLM and returns its bound arguments; a stand-in subclasses it, calls ``super()``
    first and records what it needs."""

    def __init__(self, **kwargs):
        check_llm_kwargs(kwargs)
        self.kwargs = kwargs

    def sleep(self, *args, **kwargs):
        got = bind(_llm().sleep, self, *args, **kwargs).arguments
        if got["level"] not in SLEEP_LEVELS:
            raise ValueError(f"vLLM sleeps at level {', '.join(map(str, SLEEP_LEVELS))}, not {got['level']!r}")
        return got

    def wake_up(self, *args, **kwargs):
        got = bind(_llm().wake_up, self, *args, **kwargs).arguments
        tags = got["tags"]
        if tags is not None and (not isinstance(tags, list) or not set(tags) <= set(WAKE_TAGS)):
            raise ValueError(f"vLLM wakes up tags among {WAKE_TAGS}, not {tags!r}")
        return got

    def collective_rpc(self, *args, **kwargs):
        got = bind(_llm().collective_rpc, self, *args, **kwargs).arguments
        bind(rpc_target(got["method"]), None, *got["args"], **(got["kwargs"] or {}))
        return got

    def reset_prefix_cache(self, *args, **kwargs):
        return bind(_llm().reset_prefix_cache, self, *args, **kwargs).arguments

    def generate(self, *args, **kwargs):
        return bind(_llm().generate, self, *args, **kwargs).arguments
