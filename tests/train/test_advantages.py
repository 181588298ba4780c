"""Advantages: TreeRL Eq. 7 by hand, GRPO, [TwoStage]'s prefix credit and its Propositions 1-2."""

import math

import pytest
import torch

from bsb.train.advantages import STD_EPS, advantages, grpo_advantages, prefix_credit_advantages, treerl_advantages
from bsb.train.tree import Leaf, PromptTree
from bsb.train.tree_options import CreditOptions


def tree(rewards_by_group, prefix=2, tail=3):
    """Groups of leaves; each leaf's response is ``prefix`` shared tokens then ``tail`` own tokens."""
    t = PromptTree("p", "1")
    for g, rewards in enumerate(rewards_by_group):
        for r in rewards:
            p = prefix if isinstance(prefix, int) else prefix[g]
            t.leaves.append(Leaf([9], [5] * p + [6] * tail, g, p, reward=float(r)))
    return t


def test_treerl_matches_eq7_by_hand():
    t = tree([[1, 0, 0], [1, 1, 1]])  # M=2 chains, k=2 siblings
    adv = treerl_advantages(t)
    v_bar = 4 / 6
    v = [1 / 3, 1.0]
    mu = sum(v) / 2
    for i, leaf in enumerate(t.leaves):
        g = leaf.group
        a_prefix = ((v[g] - v_bar) + (v[g] - mu)) / math.sqrt(3)
        a_leaf = (leaf.reward - v_bar) + (leaf.reward - v[g])
        assert torch.allclose(adv[i][:2], torch.full((2,), a_prefix))
        assert torch.allclose(adv[i][2:], torch.full((3,), a_leaf))


def test_treerl_homogeneous_tree_is_all_zero_and_no_prefix_hangs_leaves_off_the_root():
    assert all((a == 0).all() for a in treerl_advantages(tree([[1, 1, 1], [1, 1, 1]])))
    t = tree([[1, 0, 0], [0, 0, 0]], prefix=[2, 0])  # group 1 shares nothing: its leaves are root children
    adv = treerl_advantages(t)
    v_bar = 1 / 6
    mu_root = (1 / 3 + 0 + 0 + 0) / 4  # the prefix node of group 0 and the three leaves of group 1
    assert torch.allclose(adv[3], torch.full((3,), (0 - v_bar) + (0 - mu_root)))
    assert len(adv[3]) == 3 and t.leaves[3].prefix_len == 0


def test_width_proportional_subsegments():
    nl = torch.zeros(10, dtype=torch.bool)
    nl[7] = True
    t = PromptTree("p", "1", [Leaf([9], [5, 7, 5, 5, 7, 5, 5, 5], 0, 2, 1.0), Leaf([9], [5, 7, 6, 6], 0, 2, 0.0)])
    plain, sub = treerl_advantages(t), treerl_advantages(t, nl)
    # own part of leaf 0 is [5, 5, 7 | 5, 5, 5]: two pieces of width 3 out of 6
    assert torch.allclose(sub[0][2:], plain[0][2:] * 0.5)
    # prefix [5, 7] ends with the line break: one piece, factor 1
    assert torch.allclose(sub[0][:2], plain[0][:2])
    assert torch.allclose(advantages(t, "treerl", nl, subsegments=True)[0], sub[0])


def test_grpo_is_standardised():
    t = tree([[1], [0], [0], [1]], prefix=0)
    a = torch.stack([x[0] for x in grpo_advantages(t)])
    assert torch.allclose(a, torch.tensor([1, -1, -1, 1.0]) / (0.5 + STD_EPS) * 0.5)


def test_prefix_credit_by_hand_and_beta_zero_equals_leaf_summed_grpo_on_the_prefix():
    t = tree([[1, 0], [1, 1], [0, 0], [0, 1]])
    r = torch.tensor(t.rewards)
    r_bar, s = r.mean().item(), r.std(correction=0).item() + STD_EPS
    a = prefix_credit_advantages(t, beta=0.25, alpha=0.5)
    v_hat, m = 0.5, 1.0
    assert a[0][0].item() == pytest.approx((0.75 * v_hat + 0.25 * m - r_bar) / s)
    assert a[0][-1].item() == pytest.approx((0.5 * (1 - r_bar) + 0.5 * (1 - v_hat)) / s)
    # Proposition 1: at beta = 0 the B prefix coefficients sum to the leaf-summed GRPO coefficients
    a0 = prefix_credit_advantages(t, beta=0.0)
    for _g, idx in t.groups().items():
        assert sum(a0[i][0].item() for i in idx) == pytest.approx(sum((r[i].item() - r_bar) / s for i in idx))


def test_proposition_2_subset_example():
    # one shared pair with rewards (0, 0), three root-restarted pairs with (1, 1): R̄ = 0.75
    t = tree([[0, 0], [1, 1], [1, 1], [1, 1]], prefix=[3, 0, 0, 0])
    r = torch.tensor(t.rewards)
    s = r.std(correction=0).item() + STD_EPS
    for beta in (0.0, 0.25):
        a = prefix_credit_advantages(t, beta=beta)
        shared_sum = sum(a[i][0].item() for i in t.groups()[0])
        assert shared_sum * s == pytest.approx(-1.5)  # B Σ_S (V̂ − R̄) = 2 (0 − 0.75), not 0
        assert a[2][0].item() == pytest.approx((1 - 0.75) / s)  # unshared pairs: plain leaf credit everywhere
    # the bonus increment is nonnegative on any subset
    t2 = tree([[1, 0], [0, 0], [1, 1]], prefix=[3, 3, 0])
    inc = [sum(prefix_credit_advantages(t2, beta=b)[i][0].item() for g in (0, 1) for i in t2.groups()[g]) for b in (0.0, 0.25)]
    assert inc[1] - inc[0] >= 0


def test_bad_kind_and_arguments():
    with pytest.raises(ValueError, match="unknown advantage"):
        advantages(tree([[1, 0]]), "ppo")
    with pytest.raises(ValueError, match="beta and alpha"):
        prefix_credit_advantages(tree([[1, 0]]), beta=2.0)
    with pytest.raises(ValueError, match="prefix_len"):
        Leaf([1], [2, 3], 0, 5)


def test_treerl_released_code_on_a_hand_tree_m4_k2():
    """TreeRL's released code on M = 4 chains with k = 2 siblings each (12 leaves, groups of 3 sharing a prefix): the
    leave-one-out scale c = 12/11, node values c(V − V̄)/sqrt|L| (root 0), tokens 2Ṽ(node) − Ṽ(parent)."""
    from bsb.train.advantages import treerl_released_advantages

    t = tree([[1, 1, 0], [0, 0, 0], [1, 0, 0], [1, 1, 1]])
    adv = treerl_released_advantages(t)
    c, v_bar = 12 / 11, 6 / 12
    v = [2 / 3, 0.0, 1 / 3, 1.0]  # each group's mean reward
    for i, leaf in enumerate(t.leaves):
        g, r = leaf.group, leaf.reward
        prefix = c * 2 * (v[g] - v_bar) / math.sqrt(3)  # peers: c·2(V_p − V̄)/sqrt(L_p)
        own = c * (2 * (r - v_bar) - (v[g] - v_bar) / math.sqrt(3))  # peers: c·[2(R − V̄) − (V_p − V̄)/sqrt(L_p)]
        torch.testing.assert_close(adv[i], torch.tensor([prefix] * 2 + [own] * 3), atol=1e-6, rtol=0)
    # the first leaf by the numbers: c·[2·0.5 − (1/6)/sqrt(3)] = 0.98594; its prefix c·2·(1/6)/sqrt(3) = 0.20994
    assert adv[0][2].item() == pytest.approx(0.98594, abs=1e-5) and adv[0][0].item() == pytest.approx(0.20994, abs=1e-5)
    eq7 = treerl_advantages(t)
    assert not torch.allclose(eq7[0], adv[0])  # not Eq. 7: (R − V̄) + (R − V_p) = 0.5 + 1/3 on the first leaf
    assert eq7[0][2].item() == pytest.approx(0.5 + 1 / 3)


def test_treerl_released_code_leaves_off_the_root_and_a_lone_leaf():
    from bsb.train.advantages import treerl_released_advantages

    t = tree([[1, 0, 0], [0, 1]], prefix=[2, 0])  # group 1 forked at 0: its leaves hang off the root (Ṽ = 0)
    adv = treerl_released_advantages(t)
    c, v_bar = 5 / 4, 2 / 5
    assert adv[3][0].item() == pytest.approx(2 * c * (0 - v_bar)) and adv[4][0].item() == pytest.approx(2 * c * (1 - v_bar))
    assert all((a == 0).all() for a in treerl_released_advantages(tree([[1]])))
    assert advantages(t, "treerl_released")[0].tolist() == adv[0].tolist()  # registered under its own name


def test_grpo_std_population_or_sample():
    t = tree([[1, 0]], prefix=0)
    pop = grpo_advantages(t)  # σ = 0.5: (1 − 0.5) / (0.5 + 1e-4)
    sample = grpo_advantages(t, std="sample")  # σ = sqrt(0.5): verl's and TRL's torch.std
    assert pop[0][0].item() == pytest.approx(0.5 / (0.5 + STD_EPS)) and pop[0][0].item() == pytest.approx(0.9998, abs=1e-4)
    assert sample[0][0].item() == pytest.approx(0.5 / (math.sqrt(0.5) + STD_EPS)) and sample[0][0].item() == pytest.approx(0.7070, abs=1e-4)
    credit = advantages(tree([[1, 0, 0], [1, 1, 0]]), "prefix_credit", options=CreditOptions(grpo_std="sample"))
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 0])
    assert credit[0][-1].item() == pytest.approx(((1 - 0.5) * (1 - 0.5) + 0.5 * (1 - 1 / 3)) / (rewards.std().item() + STD_EPS))
    assert grpo_advantages(tree([[1]], prefix=0), std="sample")[0].tolist() == [0.0] * 3  # one leaf: no spread
    with pytest.raises(ValueError, match="grpo_std must be one of"):
        grpo_advantages(t, std="bessel")
