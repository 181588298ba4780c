"""What a backend offers the selectors and the trainer: declared protocols and a capabilities record.

Every backend declares :class:`Capabilities` (a class attribute ``capabilities``); a selector asks for what its
reads need once, when it is bound to a backend (:func:`require`), and gets a clear error naming what is missing.
The protocols a capability promises:

==================  =========================================================================================
capability          methods
==================  =========================================================================================
``generate``        ``generate(prompts, max_new_tokens, temperature, top_p, seed, eos_token_id)`` (token ids);
                    request ``i`` samples from its own seed, ``seed + i`` (or ``seed[i]`` given a list): what it
                    draws does not depend on the other requests of the call (:func:`request_seeds`)
``belief_logits``   ``probe_logits(asks, suffix, read_len, seeds)``: each chain's read logits (C, L, V) on the
                    backend's device; Probe-JS runs the fused ``bsb.kernels.probe_js`` on them (white-box)
``belief_topk``     ``probe_topk(asks, suffix, read_len, k, seeds)``: each chain's top-k beliefs (C, L, k);
                    Probe-JS runs ``bsb.kernels.probe_js_topk`` on them (black-box engines)
``token_stats``     ``token_stats(prompt, response)``: :class:`TokenStats` (surprisal, margin; entropy when
                    ``token_entropy``)
``white_box``       ``model`` (the HF module), ``reads(...)`` (the packed forward) and
                    ``lens_profiles_many(asks, suffix)`` (``asks`` of ``(prefix, cuts, answer)``): Lens-Shift, BSV
``weight_sync``     ``load_weights(weights)``: the per-step sync into a running engine (a state dict or (name, tensor)
                    pairs)
==================  =========================================================================================

``asks`` is a list of ``(prefix, cuts)``: one chain's prompt + response token ids and its read positions.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

CAPABILITY_HELP = {
    "generate": "sampling continuations",
    "belief_logits": "probe read logits (white-box)",
    "belief_topk": "probe top-k beliefs",
    "token_stats": "the full next-token distribution at every response token (surprisal, logit margins)",
    "token_entropy": "full next-token entropy",
    "white_box": "hidden states and the model itself",
    "weight_sync": "loading new weights into the running engine",
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

    def names(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]


class BackendError(ValueError):
    """A selector or the trainer asked a backend for reads it does not declare."""


def capabilities(backend) -> Capabilities:
    """The declared :class:`Capabilities` of a backend or backend class (an object that declares none is not a
    backend)."""
    cls = backend if isinstance(backend, type) else type(backend)
    caps = getattr(cls, "capabilities", None)
    if not isinstance(caps, Capabilities):
        raise BackendError(
            f"{cls.__name__} is not a bsb backend: it declares no `capabilities: Capabilities` (see bsb.engine.backend)"
        )
    return caps


def require(backend, who: str, *any_of: str) -> str:
    """The first capability of ``any_of`` that ``backend`` declares; a :class:`BackendError` naming them otherwise."""
    if backend is None:
        raise BackendError(f"{who} reads the model: pass a backend")
    caps = capabilities(backend)
    for name in any_of:
        if getattr(caps, name):
            return name
    wanted = " or ".join(f"{n} ({CAPABILITY_HELP[n]})" for n in any_of)
    raise BackendError(
        f"{who} needs {wanted}, which {type(backend).__name__} does not provide (it declares: "
        f"{', '.join(caps.names())}); white-box reads need the HF backend"
    )


@dataclass
class TokenStats:
    surprisal: torch.Tensor  # (T,) −log π(y_t | y_<t) of each response token
    entropy: torch.Tensor  # (T,) entropy of the next-token distribution at each response token (NaN if unknown)
    margin: torch.Tensor  # (T,) top-1 − top-2 logit before each response token (Δz_t)
    token_forwards: int


def request_seeds(seed, n: int) -> list[int]:
    """The seed of each of ``n`` requests: ``seed + i`` for an int, or the list itself (one per request)."""
    if isinstance(seed, int):
        return [seed + i for i in range(n)]
    seeds = [int(s) for s in seed]
    if len(seeds) != n:
        raise ValueError(f"{len(seeds)} seeds for {n} requests")
    return seeds


def check_generation_args(prompts, max_new_tokens: int, temperature: float, top_p: float) -> None:
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs at least one non-empty prompt")
    if max_new_tokens < 1 or temperature < 0 or not 0 < top_p <= 1:
        raise ValueError("max_new_tokens must be >= 1, temperature >= 0 and top_p in (0, 1]")
