"""The fork statistics of a step (bsb.train.fork_stats), counted by hand on two hand-built trees; the tree rollout records
each fork's selector score; step_metrics carries them."""

import math
from collections import Counter

import pytest
import torch

from bsb.engine.selectors import ChainInput, SelectorConfig, make_selector
from bsb.train import phases
from bsb.train.fork_stats import fork_metrics, node_advantages, step_fork_metrics, terciles, tree_forks
from bsb.train.rollout import RolloutTimes, tree_rollout
from bsb.train.sampling import Sampling
from bsb.train.tree import Leaf, PromptTree, Row
from bsb.train.tree_options import TreeOptions

NAN = math.nan


def _group(tree, group, fork, root_len, outcomes, own=3):
    """A fork group: the root chain (``root_len`` tokens) and its siblings (``own`` tokens after the fork), one leaf per
    (correct, reward) of ``outcomes``; a fork of None is an unforkable chain whose leaves share nothing."""
    cut = fork or 0
    for j, (correct, reward) in enumerate(outcomes):
        n = root_len if j == 0 else cut + own
        tree.leaves.append(Leaf([1], [5] * n, group, cut, reward, correct, origin="root" if j == 0 else "sibling"))
    tree.fork_positions.append(fork)


def hand_trees():
    a = PromptTree("a", "1", refills=2, fallbacks=1)
    _group(a, 0, 4, 10, [(True, 1.0), (False, 0.0), (True, 1.0)])  # disagree (both ways)
    _group(a, 1, 2, 8, [(False, 0.0), (False, -0.5), (False, 0.0)])  # agree on correctness, rewards differ
    _group(a, 2, None, 6, [(True, 1.0), (False, 0.0), (False, 0.0)])  # unforkable: no fork, whatever its leaves
    a.fork_scores = [0.9, 0.1, NAN]
    b = PromptTree("b", "1", refills=0, fallbacks=1)
    _group(b, 0, 6, 12, [(True, 1.0)] * 3)  # agree
    _group(b, 1, 3, 6, [(True, 1.0), (False, 0.0), (True, 1.0)])  # disagree; a fallback: no score
    _group(b, 2, 5, 10, [(False, 0.0), (True, 1.0), (False, 0.0)])  # disagree
    _group(b, 3, 1, 4, [(False, 0.0)] * 3)  # agree
    b.fork_scores = [0.5, NAN, 0.7, 0.3]
    return a, b


def hand_advantages(a):
    """Per-token advantages of tree a's leaves: the prefix tokens carry ±0.5 (group 0) and -0.2 (group 1); the tokens
    after the fork ±1 (group 0), 0 (group 1) and 0.3 (group 2, which shares no prefix)."""
    prefix = {0: 0.5, 1: -0.2, 2: 0.0}
    own = {0: 1.0, 1: 0.0, 2: 0.3}
    out = []
    for i, leaf in enumerate(a.leaves):
        sign = -1 if i % 2 else 1
        adv = torch.full((len(leaf.response),), sign * own[leaf.group])
        adv[: leaf.prefix_len] = sign * prefix[leaf.group]
        out.append(adv)
    return out


def test_terciles_split_by_rank_within_the_step():
    assert terciles([0.9, 0.1, 0.5, 0.7, 0.3]) == [2, 0, 1, 1, 0]  # ranks 4 0 2 3 1 of 5 -> floor(3r/5)
    assert terciles([6, 5, 4, 3, 2, 1]) == [2, 2, 1, 1, 0, 0] and terciles([1, 1, 1, 1]) == [0, 0, 1, 2]
    assert terciles([]) == []


def test_every_statistic_counted_by_hand():
    a, b = hand_trees()
    prefix, leaf = node_advantages([a], [hand_advantages(a)])
    assert prefix == pytest.approx([0.5, 0.2])  # group 2 shares no prefix: no prefix node
    assert leaf == pytest.approx([1.0] * 3 + [0.0] * 3 + [0.3] * 3)
    m = fork_metrics([tree_forks(a), tree_forks(b)], prefix, leaf)
    # six forks (a's unforkable chain is none): a0, a1, b0, b1, b2, b3
    assert m["forks"] == 6
    assert m["fork_yield"] == pytest.approx(3 / 6)  # a0, b1, b2 disagree on correctness
    assert m["fork_yield_reward"] == pytest.approx(4 / 6)  # and a1 on its rewards
    # scored: a1 .1, b3 .3 (low) | b0 .5, b2 .7 (mid) | a0 .9 (high); b1 fell back
    assert m["forks_scored"] == 5
    assert (m["fork_yield_low"], m["fork_yield_mid"], m["fork_yield_high"]) == pytest.approx((0.0, 0.5, 1.0))
    assert m["fork_rel"] == pytest.approx([4 / 10, 2 / 8, 6 / 12, 3 / 6, 5 / 10, 1 / 4])
    assert m["fork_rel_mean"] == pytest.approx(0.4)
    assert m["adv_abs_prefix"] == pytest.approx(0.35) and m["adv_abs_leaf"] == pytest.approx(3.9 / 9)
    assert m["refill_rate"] == pytest.approx(2 / 7)  # two fresh roots for seven root chains
    assert m["fallback_rate"] == pytest.approx(2 / 6)  # two of six forked chains fell back


def test_a_step_without_forks_has_nan_statistics():
    flat = PromptTree("f", "1", leaves=[Leaf([1], [5, 5], j, 0, 1.0, True) for j in range(3)])
    m = fork_metrics([tree_forks(flat)])
    assert m["forks"] == 0 and m["fork_rel"] == [] and m["refill_rate"] == 0.0
    assert all(math.isnan(m[k]) for k in ("fork_yield", "fork_yield_low", "fork_rel_mean", "fallback_rate", "adv_abs_prefix"))


def test_step_metrics_carry_the_fork_statistics_with_the_kept_trees_rows():
    a, b = hand_trees()
    rows = [Row([1], leaf.response, adv, 0) for leaf, adv in zip(a.leaves, hand_advantages(a))]
    want = step_fork_metrics([a, b], [a], rows)
    assert want["adv_abs_prefix"] == pytest.approx(0.35) and want["fork_yield"] == pytest.approx(0.5)
    timing = {"time_rollout": 1.0, "time_update": 1.0, "time_sync": 0.0, "time_step": 2.0}
    m = phases.step_metrics(1, [a, b], [a], rows, phases.Generated([a, b], RolloutTimes()), Counter(), {}, timing)
    for key, value in want.items():
        assert m[key] == pytest.approx(value, nan_ok=True)
    assert m["fork_positions"] == [4, 2, None, 6, 3, 5, 1] and m["refills"] == 2 and m["fallbacks"] == 2


class Scripted:
    def generate(self, prompts, max_new_tokens, seed=0, temperature=1.0, top_p=1.0, eos_token_id=None):
        return [[5, 5, 7, 6, 6, 7, 4, 4, 1] if len(p) == 2 else [9, 9, 1] for p in prompts]


@pytest.mark.parametrize("selector", ["uniform", "midpoint"])
def test_the_tree_rollout_records_the_selectors_score_at_each_fork(selector):
    mask = torch.zeros(16, dtype=torch.bool)
    mask[7] = True
    sel = make_selector(selector, SelectorConfig())
    (tree,), _ = tree_rollout([[2, 3]], ["a"], ["1"], Scripted(), sel, mask, TreeOptions(chains=2, siblings=1),
                              Sampling(20), 1, seed=0)
    assert len(tree.fork_scores) == len(tree.fork_positions) == 2
    pool = sel.pool(ChainInput([2, 3], tree.leaves[0].response), mask)
    if selector == "uniform":  # it forks at its top score, the candidate nearest the middle
        assert tree.fork_scores == [float(len(pool.positions))] * 2
    else:  # Midpoint cuts at the chain's middle, which is no candidate here: no score of its own
        assert all(math.isnan(s) for s in tree.fork_scores)
