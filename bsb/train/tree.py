"""The rollout tree of one prompt, as the trainer sees it: leaves grouped by the root chain they forked from.

A prompt's tree ([Fork] §3.5, App. A) is: the prompt at the root; one *prefix node* per root chain (the
response tokens before its fork, shared by its leaves); and under it the chain's own ending plus its k sibling
continuations, the *leaves*. Each leaf is trained as a separate sequence, prefix included, so a leaf only needs
to know where its shared prefix ends (``prefix_len``). ``prefix_len == 0`` means the leaves of that group share
nothing (a fork at the very start, or a [TwoStage] root restart); they then hang directly off the root.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Leaf:
    prompt: list[int]  # prompt token ids
    response: list[int]  # full response token ids: shared prefix + own continuation (EOS included when generated)
    group: int  # index of the root chain (fork group) within the prompt's tree
    prefix_len: int  # response tokens shared with the other leaves of the group (0: none)
    reward: float = 0.0
    correct: bool = False
    truncated: bool = False  # hit the response budget without EOS
    origin: str = "root"  # "root" (the chain that was forked), "sibling" (a re-rolled continuation)

    def __post_init__(self):
        if not 0 <= self.prefix_len <= len(self.response):
            raise ValueError(f"prefix_len {self.prefix_len} outside [0, {len(self.response)}]")


@dataclass
class PromptTree:
    """All leaves of one prompt (a training group)."""

    prompt_id: str
    gold: object  # the problem's gold answer, as its task's verifier reads it
    leaves: list[Leaf] = field(default_factory=list)
    fork_positions: list[int | None] = field(default_factory=list)  # per group: fork position (None: refill failed)
    # per group: the selector's score at its fork (NaN: no selector score there: a fallback, a single candidate, an
    # unforkable chain, or a rollout without a selector)
    fork_scores: list[float] = field(default_factory=list)
    refills: int = 0  # root chains that could not fork and were replaced by fresh ones
    fallbacks: int = 0  # forks where the selector fell back to Midpoint
    probe_tokens: int = 0  # token-forwards the selector's reads spent

    @property
    def rewards(self) -> list[float]:
        return [leaf.reward for leaf in self.leaves]

    @property
    def homogeneous(self) -> bool:
        """Every leaf has the same reward (zero reward variance: no group-relative signal)."""
        return len(set(self.rewards)) <= 1

    @property
    def accuracy_homogeneous(self) -> bool:
        """Every leaf is correct, or every leaf is wrong (DAPO's filter on "metric: accuracy", [Fork] App. A):
        leaves that differ only by the overlong penalty still count as one outcome."""
        return len({leaf.correct for leaf in self.leaves}) <= 1

    def groups(self) -> dict[int, list[int]]:
        """Leaf indices by fork group, in order."""
        out: dict[int, list[int]] = {}
        for i, leaf in enumerate(self.leaves):
            out.setdefault(leaf.group, []).append(i)
        return out


@dataclass
class Row:
    """One trained sequence: a leaf of a kept tree with its per-token advantages (what the update trains on)."""

    prompt: list[int]
    response: list[int]
    advantage: torch.Tensor  # (len(response),) float32
    question: int  # index of its tree among the step's kept trees
    group: int = 0  # its fork group within the tree (the leaf's root chain)
    prefix_len: int = 0  # response tokens it shares with its group (0: only the prompt)

    def __post_init__(self):
        if not 0 <= self.prefix_len <= len(self.response):
            raise ValueError(f"prefix_len {self.prefix_len} outside [0, {len(self.response)}]")

    @property
    def active(self) -> bool:
        """Has a non-zero advantage (a zero row's gradient is exactly zero)."""
        return len(self.response) > 0 and bool(self.advantage.abs().max() > 0)
