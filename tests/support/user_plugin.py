"""A user's plugin module, outside the bsb package (tests import it as ``user_plugin``): it registers its own fork
selector and advantage estimator with bsb's registry decorators, the way a config's ``plugins: [user_plugin]`` or
``selector: user_plugin:UserLast`` reaches them.

* ``user_last`` (:class:`UserLast`): reads no model and scores the later candidate boundaries higher, so it forks at
  the last candidate of each chain (the opposite of ``newline``, which forks at the first).
* ``user_signed`` (:func:`user_signed`): each leaf's reward minus its tree's mean reward, on every token of the leaf.

``CALLS`` counts what ran and ``PICKS`` records every fork choice, so a test can prove that training went through
these and not through bsb's own. :func:`not_a_selector` is a plain function that a config may wrongly name as a
selector; it must never be called.
"""

from __future__ import annotations

import torch

from bsb.engine.selectors import SELECTORS, Selection, Selector
from bsb.train.advantages import ADVANTAGES
from bsb.train.tree import PromptTree

CALLS = {"select": 0, "score": 0, "advantage": 0, "not_a_selector": 0}
# one (response ids, candidate positions, chosen fork) per chain that UserLast.select chose for
PICKS: list[tuple[tuple[int, ...], tuple[int, ...], int | None]] = []


def reset() -> None:
    for key in CALLS:
        CALLS[key] = 0
    PICKS.clear()


@SELECTORS.register("user_last")
class UserLast(Selector):
    """Later boundaries first: boundary j of the pool scores j."""

    name = "user_last"

    def score(self, chain, pool, backend, index, seed=0):
        CALLS["score"] += 1
        return [float(j) for j in range(len(pool.positions))], 0

    def select(self, chains, newline_mask, *, seed=None, indices=None) -> Selection:
        CALLS["select"] += 1
        out = super().select(chains, newline_mask, seed=seed, indices=indices)
        PICKS.extend((tuple(chain.response), tuple(c.pool.positions), c.fork) for chain, c in zip(chains, out.choices))
        return out


@ADVANTAGES.register("user_signed")
def user_signed(tree: PromptTree, **_) -> list[torch.Tensor]:
    """Reward minus the tree's mean reward, broadcast over each leaf's response tokens (float32)."""
    CALLS["advantage"] += 1
    if not tree.leaves:
        return []
    mean = sum(tree.rewards) / len(tree.leaves)
    return [torch.full((len(leaf.response),), leaf.reward - mean, dtype=torch.float32) for leaf in tree.leaves]


def not_a_selector(*args, **kwargs):
    """Not a Selector subclass: naming it as a selector must be refused before it is ever called."""
    CALLS["not_a_selector"] += 1
    raise AssertionError("not_a_selector was called")
