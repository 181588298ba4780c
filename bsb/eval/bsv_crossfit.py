"""BSV (§3.4) fitted on the validation's own chains, held out by problem: no drafted continuations needed.

A sampled chain cut at consecutive boundaries j and j + 1 is a continuation of the prefix up to cut j, and its V*
says which regime it is: a *surge* when V* rises by at least ``DELTA`` from t_j to t_{j+1}, a *drop* when it falls by
at least ``DELTA``, *steady* when it moves by less than ``DELTA / 2`` (the segments in between are left out). The
problems are dealt into two folds in the order they first appear; the chains of each fold are ranked by the direction
fitted on the other fold's chains, so no chain's own V* shapes the direction that ranks it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bsb.engine.bsv import BSVChain, BSVDirection, fit_bsv_chains

DELTA = 0.25  # two of eight Monte-Carlo completions changing verdict
WINDOW = 8  # W_a = W_b: a GSM-Symbolic line is ~13 tokens


def regimes(v_star: Sequence[float], delta: float = DELTA) -> list[str | None]:
    """The regime of each segment between consecutive cuts (None: between steady and a shift, left out)."""
    out = []
    for a, b in zip(v_star, v_star[1:]):
        d = b - a
        out.append("surge" if d >= delta else "drop" if d <= -delta else "steady" if abs(d) < delta / 2 else None)
    return out


@dataclass(frozen=True)
class CurveChain:
    """What the fit needs of one chain: its problem, its tokens, its cuts (response positions) and V* there."""

    problem: str
    prompt: Sequence[int]
    response: Sequence[int]
    cuts: Sequence[int]
    v_star: Sequence[float]

    def bsv_chain(self, delta: float = DELTA) -> BSVChain:
        p = len(self.prompt)
        segments = [
            (p + t, u - t, g) for t, u, g in zip(self.cuts, self.cuts[1:], regimes(self.v_star, delta)) if g and u > t
        ]
        return BSVChain([*self.prompt, *self.response], segments)


def folds(chains: Sequence[CurveChain]) -> list[int]:
    """Each chain's fold: its problem's rank of first appearance, mod 2 (a problem's chains share a fold)."""
    rank: dict[str, int] = {}
    for c in chains:
        rank.setdefault(c.problem, len(rank))
    return [rank[c.problem] % 2 for c in chains]


@dataclass
class CrossFit:
    directions: dict[int, BSVDirection]  # fold -> the direction fitted on the other fold's chains
    counts: dict[int, dict[str, int]]  # fold -> segments of each regime that direction was fitted on
    fold_of: list[int]  # each chain's fold


def cross_fit(model, chains: Sequence[CurveChain], delta: float = DELTA, window: int = WINDOW) -> CrossFit:
    """A direction for each fold, fitted on the other fold's segments; a ValueError names the fold whose other half
    holds no surge, steady or drop segment (too few moving chains to fit on)."""
    fold_of = folds(chains)
    if len(set(fold_of)) < 2:
        raise ValueError("cross-fitting BSV needs chains of at least two problems")
    directions, counts = {}, {}
    for k in (0, 1):
        train = [c.bsv_chain(delta) for c, f in zip(chains, fold_of) if f != k]
        counts[k] = {g: sum(s[2] == g for c in train for s in c.cuts) for g in ("surge", "steady", "drop")}
        try:
            directions[k] = fit_bsv_chains(model, train, window_after=window, window_before=window)
        except ValueError as err:
            raise ValueError(f"fold {k}'s direction cannot be fitted on the other fold's chains: {err}") from None
    return CrossFit(directions, counts, fold_of)
