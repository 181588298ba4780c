"""Belief-shift vector (BSV, §3.4, Eq. 5-6): a learned read for pre-RL validation on a frozen policy.

A held-out chain is cut at t and continued in three regimes g ∈ {surge (+), steady (0), drop (−)}. Per layer,
the residual stream is averaged over the W_a tokens after the cut and the W_b tokens before it and differenced,
then the steady delta is subtracted:

    Δ_g^(L) = E_{(t, c): g(c) = g} [ h̄^(L)[t, t+W_a)(c) − h̄^(L)[t−W_b, t) ],   u_±^(L) = Δ_±^(L) − Δ_0^(L)   (Eq. 5)
    L* = argmin_L cos(u_+^(L), u_−^(L)),   s_t = ⟨u_−^(L*), h_t^(L*)⟩                                  (Eq. 6)

``h_t`` is the residual stream (after decoder layer L) at the last prefix token. The continuations are data
(``BSVExample``); how they are drafted is outside this module.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from bsb.engine.hf_model import ResidualCapture, decoder_layers
from bsb.tasks.base import hook

REGIMES = ("surge", "steady", "drop")


@dataclass(frozen=True)
class BSVExample:
    prefix: Sequence[int]  # prompt + chain up to the cut t = len(prefix)
    continuation: Sequence[int]  # the drafted continuation after the cut
    regime: str  # surge | steady | drop


@dataclass
class BSVDirection:
    layer: int  # L*, 0-based decoder layer
    u_plus: torch.Tensor  # (layers, d)
    u_minus: torch.Tensor  # (layers, d)
    cos: torch.Tensor  # (layers,) cos(u_+, u_−) per layer

    def save(self, path: str | Path) -> None:
        torch.save({"layer": self.layer, "u_plus": self.u_plus, "u_minus": self.u_minus, "cos": self.cos}, path)

    @classmethod
    def load(cls, path: str | Path) -> BSVDirection:
        try:
            d = torch.load(path, map_location="cpu", weights_only=True)
            direction = cls(int(d["layer"]), d["u_plus"], d["u_minus"], d["cos"])
        except Exception as err:  # noqa: BLE001 - weights_only runs no code; a hostile file raises anything else
            if isinstance(err, OSError):
                raise
            why = type(err).__name__
            raise ValueError(f"{path}: not a BSV direction file (bsb fits one with fit_bsv): {why}") from None
        if not all(isinstance(t, torch.Tensor) for t in (direction.u_plus, direction.u_minus, direction.cos)):
            raise ValueError(f"{path}: not a BSV direction file (its vectors are not tensors)")
        return direction


@dataclass(frozen=True)
class BSVChain:
    """Several cuts of one token sequence: each cut ``(t, n, regime)`` is an example whose prefix is ``ids[:t]`` and
    whose continuation is the ``n`` tokens after it (a sampled chain cut at its boundaries: one forward serves all)."""

    ids: Sequence[int]
    cuts: Sequence[tuple[int, int, str]]


def fit_bsv(model, examples: Sequence[BSVExample], window_after: int = 16, window_before: int = 16) -> BSVDirection:
    """Fit u_± per layer from the examples (Eq. 5) and choose L* by the antagonism criterion (Eq. 6)."""
    for i, ex in enumerate(examples):
        if not ex.prefix or not ex.continuation:
            raise ValueError(f"example {i}: prefix and continuation must be non-empty")
    chains = [
        BSVChain([*ex.prefix, *ex.continuation], [(len(ex.prefix), len(ex.continuation), ex.regime)]) for ex in examples
    ]
    return fit_bsv_chains(model, chains, window_after, window_before)


@torch.no_grad()
def fit_bsv_chains(model, chains: Sequence[BSVChain], window_after: int = 16, window_before: int = 16) -> BSVDirection:
    """:func:`fit_bsv` over chains cut at several places, one forward a chain: the residual stream at a position sees
    only the tokens before it, so a cut's windows read the same from the whole chain as from its own example."""
    if window_after < 1 or window_before < 1:
        raise ValueError("window_after and window_before must be >= 1")
    layers = decoder_layers(model)
    device = next(model.parameters()).device
    deltas: dict[str, list[torch.Tensor]] = {g: [] for g in REGIMES}
    for i, chain in enumerate(chains):
        windows = []
        for t, n, regime in chain.cuts:
            if regime not in REGIMES:
                raise ValueError(f"chain {i}: regime must be one of {REGIMES}, got {regime!r}")
            if not (0 < t and n > 0 and t + n <= len(chain.ids)):
                raise ValueError(f"chain {i}: cut {t} with {n} tokens after it does not fit {len(chain.ids)} tokens")
            windows.append((regime, range(max(0, t - window_before), t), range(t, t + min(window_after, n))))
        if not windows:
            continue
        positions = sorted({p for _, before, after in windows for p in (*before, *after)})
        where = {p: k for k, p in enumerate(positions)}
        ids = torch.as_tensor(list(chain.ids[: positions[-1] + 1]), dtype=torch.long, device=device)
        with ResidualCapture(layers, torch.as_tensor(positions, device=device)) as cap:
            model(ids[None])
        h = cap.stacked().float()  # (layers, positions, d)
        for regime, before, after in windows:
            rows = [where[p] for p in after], [where[p] for p in before]
            deltas[regime].append(h[:, rows[0]].mean(1) - h[:, rows[1]].mean(1))  # (layers, d)
    missing = [g for g in REGIMES if not deltas[g]]
    if missing:
        raise ValueError(f"no examples of regime(s) {missing}: BSV needs surge, steady and drop continuations")
    mean = {g: torch.stack(v).mean(0) for g, v in deltas.items()}
    u_plus, u_minus = mean["surge"] - mean["steady"], mean["drop"] - mean["steady"]
    cos = torch.nn.functional.cosine_similarity(u_plus, u_minus, dim=-1)  # (layers,)
    return BSVDirection(int(cos.argmin()), u_plus.cpu(), u_minus.cpu(), cos.cpu())


@torch.no_grad()
def bsv_scores(model, prefix: Sequence[int], cuts: Sequence[int], direction: BSVDirection) -> torch.Tensor:
    """s_t = ⟨u_−^(L*), h_t^(L*)⟩ at every cut, h_t at the last prefix token (one forward over the prefix)."""
    layers = decoder_layers(model)
    if not 0 <= direction.layer < len(layers):
        raise ValueError(f"the direction's layer {direction.layer} does not exist in a {len(layers)}-layer model")
    device = next(model.parameters()).device
    ids = torch.as_tensor(list(prefix), dtype=torch.long, device=device)
    with ResidualCapture([layers[direction.layer]], torch.as_tensor([t - 1 for t in cuts], device=device)) as cap:
        model(ids[None])
    h = cap.stacked()[0].float().cpu()  # (C, d)
    return h @ direction.u_minus[direction.layer].float()


def task_direction(
    checkpoint: str | Path, task, model, tokenizer, n_problems: int = 64, window: int = 8
) -> Path | None:
    """The BSV direction of ``task`` on the checkpoint, fitted once on the continuations the task drafts
    (``task.bsv_examples(n)``: (prompt, prefix, continuation, regime) texts) and cached in the checkpoint directory
    beside the weights (written to a temporary file, then renamed: never half-written). None when the task drafts
    none."""
    drafts = hook(task, "bsv_examples")(n_problems)  # first: a task that drafts none never gets another's direction
    if drafts is None:
        return None
    path = Path(checkpoint) / f"bsv_{task.name}_{n_problems}_w{window}.pt"
    if path.exists():
        return path

    def ids(text):
        return tokenizer.encode(text, add_special_tokens=False)

    examples = [BSVExample(ids(prompt + prefix), ids(cont), regime) for prompt, prefix, cont, regime in drafts]
    direction = fit_bsv(model, examples, window_after=window, window_before=window)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    direction.save(tmp)
    os.replace(tmp, path)
    return path
