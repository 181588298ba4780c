"""Whether a step's forks produced credit, from the trees the step already has (no extra generation).

[Fork]'s argument is that a fork placed where the outcome is already settled yields siblings that agree, and siblings
that agree carry no group-relative credit; App. D checks it offline (sibling disagreement by Probe-JS tercile). These
statistics show it live, per training step, in ``metrics.jsonl``, on every ``report_to`` tracker and, reduced the
same way, in verl's logged metrics (:mod:`bsb.integrations.verl.metrics`).

A *fork* is a group of a tree with a recorded fork position (the selector's cut; [TwoStage]'s stopping time τ) and
at least two leaves. A chain that never became forkable (position None) is no fork: its leaves are fresh roots.

=====================  ==========================================================================================
``forks``              the step's forks (every generated tree, kept by dynamic sampling or not)
``fork_yield``         the share of forks whose leaves' correctness differs
``fork_yield_reward``  the share of forks whose leaves' rewards differ (partial rewards, the overlong penalty)
``forks_scored``       the forks with a finite selector score (not a fallback, not a single candidate)
``fork_yield_low``     ``fork_yield`` of the scored forks in the lowest tercile of the step's selector scores;
``_mid``, ``_high``    the middle and highest (ranked within the step; ties keep the rollout's order)
``fork_rel``           each recorded fork position as a fraction of its chain (the group's first leaf), a list
``fork_rel_mean``      their mean
``adv_abs_prefix``     the mean over the kept trees' prefix nodes of the mean |advantage| on their leaves' shared
                       prefix tokens (what the update credits to the text before the fork)
``adv_abs_leaf``       the same over each leaf's own tokens after the fork
``refill_rate``        fresh root chains drawn per root chain (chains that could not fork were replaced)
``fallback_rate``      the share of forked chains where the selector fell back to Midpoint (or had one candidate)
=====================  ==========================================================================================

A statistic with nothing to average (no fork in a flat step, an empty tercile) is NaN, which the trackers skip.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bsb.train.tree import PromptTree, Row

TERCILES = ("low", "mid", "high")


@dataclass(frozen=True)
class Fork:
    """One group of a tree with a recorded fork position: where it forked, and what its leaves got."""

    position: int  # response tokens before the fork
    chain_len: int  # the forked chain's length (the group's first leaf)
    score: float  # the selector's score at the fork (NaN: none)
    correct: tuple[bool, ...]  # each leaf's correctness
    rewards: tuple[float, ...]  # each leaf's reward

    @property
    def frac(self) -> float:
        return self.position / max(1, self.chain_len)

    @property
    def split(self) -> bool:
        """Has at least two leaves (something that can disagree)."""
        return len(self.correct) > 1


@dataclass
class TreeForks:
    """What one tree contributes to the step's fork statistics (small: a verl worker ships it to the trainer)."""

    forks: list[Fork] = field(default_factory=list)
    chains: int = 0  # root chains (fork groups)
    refills: int = 0
    fallbacks: int = 0


def tree_forks(tree: PromptTree) -> TreeForks:
    groups = list(tree.groups().values())
    forks = []
    for g, idx in enumerate(groups):
        position = tree.fork_positions[g] if g < len(tree.fork_positions) else None
        if position is None:
            continue
        score = tree.fork_scores[g] if g < len(tree.fork_scores) else math.nan
        leaves = [tree.leaves[i] for i in idx]
        forks.append(
            Fork(
                position,
                len(leaves[0].response),
                float(score),
                tuple(leaf.correct for leaf in leaves),
                tuple(float(leaf.reward) for leaf in leaves),
            )
        )
    return TreeForks(forks, len(groups), tree.refills, tree.fallbacks)


def terciles(scores: Sequence[float]) -> list[int]:
    """Each score's tercile within ``scores`` (0 low, 1 mid, 2 high) by rank: rank r of n goes to ⌊3r/n⌋, so six
    scores split 2/2/2 and four 2/1/1; equal scores keep their order."""
    order = sorted(range(len(scores)), key=scores.__getitem__)
    out = [0] * len(scores)
    for rank, i in enumerate(order):
        out[i] = 3 * rank // len(scores)
    return out


def node_advantages(trees: Sequence[PromptTree], advs: Sequence[Sequence]) -> tuple[list[float], list[float]]:
    """Per prefix node (a group whose leaves share a prefix): the mean |A| over its leaves' prefix tokens; per leaf
    with tokens after its fork: the mean |A| over those. ``advs[q][i]``: the per-token advantages of
    ``trees[q].leaves[i]`` (tensors)."""
    prefix, leaf = [], []
    for tree, adv in zip(trees, advs, strict=True):
        for idx in tree.groups().values():
            shared = sum(tree.leaves[i].prefix_len for i in idx)
            if shared:
                total = sum(float(adv[i][: tree.leaves[i].prefix_len].abs().sum()) for i in idx)
                prefix.append(total / shared)
        for lf, a in zip(tree.leaves, adv, strict=True):
            if len(lf.response) > lf.prefix_len:
                leaf.append(float(a[lf.prefix_len :].abs().mean()))
    return prefix, leaf


def fork_metrics(trees: Iterable[TreeForks], prefix_abs: Sequence[float] = (), leaf_abs: Sequence[float] = ()) -> dict:
    """The step's fork statistics (the module's table) from its trees and its nodes' mean |advantage|."""
    trees = list(trees)
    forks = [f for t in trees for f in t.forks]
    split = [f for f in forks if f.split]
    scored = [f for f in split if not math.isnan(f.score)]
    tier = terciles([f.score for f in scored])
    chains = sum(t.chains for t in trees)
    out = {
        "forks": len(split),
        "fork_yield": _mean(len(set(f.correct)) > 1 for f in split),
        "fork_yield_reward": _mean(len(set(f.rewards)) > 1 for f in split),
        "forks_scored": len(scored),
    }
    for k, name in enumerate(TERCILES):
        out[f"fork_yield_{name}"] = _mean(len(set(f.correct)) > 1 for f, t in zip(scored, tier) if t == k)
    fracs = [f.frac for f in forks]
    out.update(
        fork_rel=fracs,
        fork_rel_mean=_mean(fracs),
        adv_abs_prefix=_mean(prefix_abs),
        adv_abs_leaf=_mean(leaf_abs),
        refill_rate=sum(t.refills for t in trees) / chains if chains else math.nan,
        fallback_rate=sum(t.fallbacks for t in trees) / len(forks) if forks else math.nan,
    )
    return out


def step_fork_metrics(generated: Sequence[PromptTree], kept: Sequence[PromptTree], rows: Sequence[Row]) -> dict:
    """:func:`fork_metrics` of a ``bsb train`` step: forks from every generated tree, advantages from the kept trees'
    rows (``row.question``: its tree's index in ``kept``; a tree's rows in its leaves' order)."""
    advs: list[list] = [[] for _ in kept]
    for r in rows:
        advs[r.question].append(r.advantage)
    trained = [(t, a) for t, a in zip(kept, advs) if a]
    prefix, leaf = node_advantages([t for t, _ in trained], [a for _, a in trained])
    return fork_metrics(map(tree_forks, generated), prefix, leaf)


def _mean(xs) -> float:
    xs = [float(x) for x in xs]
    return sum(xs) / len(xs) if xs else math.nan
