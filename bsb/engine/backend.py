"""What a backend offers the selectors and the trainer: a declared capabilities record and the protocols it promises.

Every backend declares :class:`Capabilities`: the class attribute ``capabilities`` says what the class can serve, and
an instance whose facts depend on how it was built (its device) records its own (:func:`capabilities` returns the
instance's). A selector asks for what its reads need once, when it is bound to a backend (:func:`require`), and gets
a clear error naming what is missing. Each capability promises the methods of one runtime-checkable
:class:`typing.Protocol`, so a backend of your own can check itself (:func:`check_backend`):

* every backend, :class:`Backend`: ``capabilities`` and ``close()`` (a no-op where there is nothing to release);
* ``generate``, :class:`Generates`: ``generate(prompts, max_new_tokens, temperature, top_p, seed, eos_token_id)``
  (token ids); request ``i`` samples from its own seed, ``seed + i`` (or ``seed[i]`` given a list): what it draws
  does not depend on the other requests of the call (:func:`request_seeds`); ``eos_token_id``: one id or several
  (:func:`stop_ids`), any of which ends a request and is kept as its last token;
* ``belief_logits``, :class:`ProbeLogits`: ``probe_logits(asks, suffix, read_len, seeds)``, each chain's read logits
  (C, L, V) on the backend's device; Probe-JS runs the fused ``bsb.kernels.probe_js`` on them (white-box);
* ``belief_topk``, :class:`ProbeTopK`: ``probe_topk(asks, suffix, read_len, k, seeds)``, each chain's top-k beliefs
  (C, L, k); Probe-JS runs ``bsb.kernels.probe_js_topk`` on them (black-box engines);
* ``token_stats`` (and ``token_entropy``), :class:`TokenStatsReader`: ``token_stats(prompt, response)``, a
  :class:`TokenStats` (surprisal, margin; the entropy when ``token_entropy``), and ``token_stats_many(pairs)`` for
  several ``(prompt, response)`` pairs in one engine call;
* ``white_box``, :class:`WhiteBox`: ``model`` (the HF module), ``packed_reads(...)`` (the packed forward) and
  ``lens_profiles_many(asks, suffix, layers=None)`` (``asks`` of ``(prefix, cuts, answer)``): Lens-Shift, BSV;
* ``weight_sync``, :class:`WeightSync`: ``sleep()`` (frees the engine's memory for the update; a GPU engine drops
  its weights, which the sync overwrites anyway), ``load_weights(pairs)`` (``(name, tensor)`` pairs: wakes a sleeping
  engine itself, weights before the KV cache) and ``wake_up()`` (the weights mapped back without a sync): the per-step
  sync into a running engine;
* ``reuses_kv``, :class:`KVReuse`: ``keep_kv_for_reads(on)`` and ``drop_kv()``: reads of the chains its last
  generation produced, from the keys and values it kept (the engine layer turns it on, :mod:`bsb.engine.reader`);
* ``on_cpu``: a fact, no methods: the backend computes on the CPU.

``asks`` is a list of ``(prefix, cuts)``: one chain's prompt + response token ids and its read positions. A read
method returns one result per chain; a :class:`ChainResults` also says, per chain, the prompt tokens the backend took
from a cache instead of computing them (a plain list: none).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Protocol, runtime_checkable

import torch

BACKEND_NAMES = ("auto", "vllm", "hf")  # the rollout backends a config names (rollout_engine.make_rollout_backend)
# where a CPU vLLM engine runs (make_rollout_backend's cpu_process): the trainer's process or one of its own
CPU_PROCESS_MODES = ("in", "own")

CAPABILITY_HELP = {
    "generate": "sampling continuations",
    "belief_logits": "probe read logits (white-box)",
    "belief_topk": "probe top-k beliefs",
    "token_stats": "the full next-token distribution at every response token (surprisal, logit margins)",
    "token_entropy": "full next-token entropy",
    "white_box": "hidden states and the model itself",
    "weight_sync": "loading new weights into the running engine",
    "reuses_kv": "reads from the keys and values its own generation kept",
    "on_cpu": "computing on the CPU",
}


@dataclass(frozen=True)
class Capabilities:
    generate: bool = True
    belief_logits: bool = False
    belief_topk: bool = False
    token_stats: bool = False
    token_entropy: bool = False
    white_box: bool = False
    weight_sync: bool = False
    reuses_kv: bool = False
    on_cpu: bool = False

    def has(self, name: str) -> bool:
        """Whether the capability ``name`` (a field of this record) is declared."""
        if name not in CAPABILITY_HELP:
            raise ValueError(f"unknown capability {name!r}; capabilities: {', '.join(CAPABILITY_HELP)}")
        return getattr(self, name)

    def names(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]


class BackendError(ValueError):
    """A selector or the trainer asked a backend for reads it does not declare."""


@dataclass
class TokenStats:
    surprisal: torch.Tensor  # (T,) −log π(y_t | y_<t) of each response token
    entropy: torch.Tensor  # (T,) entropy of the next-token distribution at each response token (NaN if unknown)
    margin: torch.Tensor  # (T,) top-1 − top-2 logit before each response token (Δz_t)
    token_forwards: int


class ChainResults(list):
    """The per-chain results of one read call (``probe_logits``, ``probe_topk``, ``lens_profiles_many``), in the order
    of its ``asks``, with ``cached``: per chain, the prompt tokens the backend took from a cache (vLLM's prefix cache,
    the keys and values its own generation kept) instead of computing them."""

    def __init__(self, results: Iterable = (), cached: Sequence[int] | None = None):
        super().__init__(results)
        self.cached = [int(n) for n in cached] if cached is not None else [0] * len(self)
        if len(self.cached) != len(self):
            raise ValueError(f"{len(self.cached)} cached-token counts for {len(self)} chains")


def cached_tokens(results: Sequence) -> list[int]:
    """Per chain, the tokens a read call's ``results`` took from a cache (a plain list, as a backend of your own may
    return: none)."""
    return list(results.cached) if isinstance(results, ChainResults) else [0] * len(results)


# ---------------------------------------------------------------------------------------------- the protocols


@runtime_checkable
class Backend(Protocol):
    """What every backend has: its declared :class:`Capabilities` and ``close()``."""

    capabilities: Capabilities

    def close(self) -> None:
        """Release what the backend holds (an engine, kept keys and values); a no-op where there is nothing."""


@runtime_checkable
class Generates(Protocol):
    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int | Sequence[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] = 0,
        eos_token_id: int | Sequence[int] | None = None,
    ) -> list[list[int]]: ...


@runtime_checkable
class ProbeLogits(Protocol):
    def probe_logits(
        self, asks: list, suffix: Sequence[int], read_len: int = 1, seeds: Sequence[int] | None = None
    ) -> list[tuple[torch.Tensor, int]]: ...


@runtime_checkable
class ProbeTopK(Protocol):
    def probe_topk(
        self, asks: list, suffix: Sequence[int], read_len: int = 1, k: int = 20, seeds: Sequence[int] | None = None
    ) -> list[tuple[torch.Tensor, torch.Tensor, int]]: ...


@runtime_checkable
class TokenStatsReader(Protocol):
    def token_stats(self, prompt: Sequence[int], response: Sequence[int]) -> TokenStats: ...

    def token_stats_many(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[TokenStats]: ...


@runtime_checkable
class WhiteBox(Protocol):
    model: torch.nn.Module

    def packed_reads(self, prefix, cuts, suffix, answer=None, with_hidden: bool = False): ...

    def lens_profiles_many(
        self, asks: list, suffix: Sequence[int], layers: Sequence[int] | None = None
    ) -> list[tuple[torch.Tensor, int]]: ...


@runtime_checkable
class WeightSync(Protocol):
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None: ...

    def sleep(self) -> None: ...

    def wake_up(self) -> None: ...


@runtime_checkable
class KVReuse(Protocol):
    def keep_kv_for_reads(self, on: bool) -> None: ...

    def drop_kv(self) -> None: ...


PROTOCOLS: dict[str, type] = {
    "generate": Generates,
    "belief_logits": ProbeLogits,
    "belief_topk": ProbeTopK,
    "token_stats": TokenStatsReader,
    "token_entropy": TokenStatsReader,
    "white_box": WhiteBox,
    "weight_sync": WeightSync,
    "reuses_kv": KVReuse,
}  # on_cpu is a fact about the instance, with no methods of its own


# ---------------------------------------------------------------------------------------------- checks


def capabilities(backend) -> Capabilities:
    """The declared :class:`Capabilities` of a backend (the instance's own record when it has one) or of a backend
    class; an object that declares none is not a backend."""
    caps = getattr(backend, "capabilities", None)  # the declaration itself: what replaces probing for methods
    if not isinstance(caps, Capabilities):
        cls = backend if isinstance(backend, type) else type(backend)
        raise BackendError(
            f"{cls.__name__} is not a bsb backend: it declares no `capabilities: Capabilities` (see bsb.engine.backend)"
        )
    return caps


def check_backend(backend) -> list[str]:
    """Every way ``backend`` (an instance) falls short of the protocols of what it declares, one message each (empty:
    it conforms). A backend of your own can assert this is empty in its tests."""
    name = type(backend).__name__
    try:
        caps = capabilities(backend)
    except BackendError as err:
        return [str(err)]
    out = [] if isinstance(backend, Backend) else [f"{name} has no close() (every backend has one; a no-op is fine)"]
    for cap in caps.names():
        protocol = PROTOCOLS.get(cap)
        if protocol is not None and not isinstance(backend, protocol):
            out.append(f"{name} declares {cap} but lacks the methods of {protocol.__name__}")
    return out


def require(backend, who: str, *any_of: str) -> str:
    """The first capability of ``any_of`` that ``backend`` declares and serves (its protocol's methods are there); a
    :class:`BackendError` naming them otherwise."""
    if backend is None:
        raise BackendError(f"{who} reads the model: pass a backend")
    caps = capabilities(backend)
    for name in any_of:
        if caps.has(name):
            protocol = PROTOCOLS.get(name)
            if protocol is not None and not isinstance(backend, protocol):
                raise BackendError(
                    f"{type(backend).__name__} declares {name} but lacks the methods of {protocol.__name__} "
                    "(bsb.engine.backend)"
                )
            return name
    wanted = " or ".join(f"{n} ({CAPABILITY_HELP[n]})" for n in any_of)
    why = [w for n in any_of if (w := getattr(backend, "missing", {}).get(n))]  # a backend's reason, for this model
    raise BackendError(
        f"{who} needs {wanted}, which {type(backend).__name__} does not provide "
        + (
            f"for this model: {'; '.join(why)}"
            if why
            else f"(it declares: {', '.join(caps.names())}); white-box reads need the HF backend"
        )
    )


def best_k(entries: Iterable[tuple[int, float]], k: int) -> list[tuple[int, float]]:
    """The ``k`` best ``(token, log-prob)`` pairs of a position, best first, ties broken by the lower token id: one rule
    for every engine that returns more than ``k`` (vLLM adds the sampled token when it is outside the top-k)."""
    return sorted(entries, key=lambda e: (-e[1], e[0]))[:k]


def token_ids(ids) -> list[int]:
    """Token ids (a list, tuple or tensor of any shape) as a flat list of Python ints."""
    return [int(x) for x in torch.as_tensor(ids, dtype=torch.long).reshape(-1).tolist()]


def probe_prompts(prefix, cuts: Iterable[int], suffix) -> list[list[int]]:
    """The probe sequence ``prefix[:t] + suffix`` of each cut ``t`` (§3.2), after which a belief is read: one builder
    for every backend and the verl client (the packed forward lays the same sequences side by side)."""
    prefix, suffix = token_ids(prefix), token_ids(suffix)
    return [prefix[: int(t)] + suffix for t in cuts]


def stop_ids(eos_token_id: int | Sequence[int] | None) -> list[int]:
    """The token ids that end a request: the EOS, or several (a base model's EOS and the token it writes between
    few-shot examples, ``--stop``); empty for none."""
    if eos_token_id is None:
        return []
    if isinstance(eos_token_id, int):
        return [eos_token_id]
    return [int(t) for t in eos_token_id]


def request_seeds(seed, n: int) -> list[int]:
    """The seed of each of ``n`` requests: ``seed + i`` for an int, or the list itself (one per request)."""
    if isinstance(seed, int):
        return [seed + i for i in range(n)]
    seeds = [int(s) for s in seed]
    if len(seeds) != n:
        raise ValueError(f"{len(seeds)} seeds for {n} requests")
    return seeds


def request_budgets(max_new_tokens: int | Sequence[int], n: int) -> list[int]:
    """Each of ``n`` requests' token cap: one int for all, or one per request (a fork's siblings, Monte-Carlo
    completions from several cuts: each decodes to its own budget, not to the batch's largest)."""
    if isinstance(max_new_tokens, int):
        return [max_new_tokens] * n
    budgets = [int(b) for b in max_new_tokens]
    if len(budgets) != n:
        raise ValueError(f"{len(budgets)} max_new_tokens for {n} requests")
    return budgets


def check_generation_args(prompts, max_new_tokens: int | Sequence[int], temperature: float, top_p: float) -> list[int]:
    """One error for bad generation arguments; returns each request's token cap (:func:`request_budgets`)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs at least one non-empty prompt")
    budgets = request_budgets(max_new_tokens, len(prompts))
    if min(budgets) < 1 or temperature < 0 or not 0 < top_p <= 1:
        raise ValueError("max_new_tokens must be >= 1, temperature >= 0 and top_p in (0, 1]")
    return budgets
