"""[TwoStage]'s switches, each checked against numbers derived from the paper's own statements."""

import math

import pytest
import torch

from bsb.eval.branching import eff_caps
from bsb.train import phases, update
from bsb.train.advantages import STD_EPS, advantages, prefix_credit_advantages
from bsb.train.config import TrainConfig
from bsb.train.tree import Leaf, PromptTree
from bsb.train.tree_options import CreditOptions


def pairs_tree(rewards, prefix=3, tail=2):
    """K pairs (B=2) sharing a prefix of ``prefix`` tokens, each leaf ``tail`` tokens after it."""
    leaves = [Leaf([1], [5] * (prefix + tail), k, prefix, reward=float(r)) for k, pair in enumerate(rewards) for r in pair]
    return PromptTree("q", "1", leaves)


@pytest.mark.parametrize("r_bar", [0.625, 0.75, 0.875])
def test_proposition_3_clamping_gives_a_below_average_prefix_positive_net_weight(r_bar):
    """Prop. 3: on a divergent pair (V̂ = 0.5, M = 1, β = 0.25, so Ṽ = 0.625) the winner keeps (1 − R̄)/(σ + 1e-4) on
    the prefix and the loser is clamped to max(0, (0.625 − R̄)/(σ + 1e-4)): the net prefix weight is positive for
    every R̄ < 1, where unclamped prefix credit gives the below-average prefix a non-positive weight."""
    others = {0.625: [(1, 1), (1, 1), (0, 0)], 0.75: [(1, 1), (1, 1), (1, 0)], 0.875: [(1, 1), (1, 1), (1, 1)]}[r_bar]
    tree = pairs_tree([(1, 0)] + others)
    rewards = torch.tensor(tree.rewards, dtype=torch.float64)
    assert rewards.mean().item() == r_bar
    scale = 1 / (rewards.std(correction=0).item() + STD_EPS)
    clamped = prefix_credit_advantages(tree, beta=0.25, clamped=True)
    win, lose = clamped[0][0].item(), clamped[1][0].item()
    assert win == pytest.approx((1 - r_bar) * scale, rel=1e-6)
    assert lose == pytest.approx(max(0.0, (0.625 - r_bar) * scale), rel=1e-6, abs=1e-7)
    assert win + lose > 0
    plain = prefix_credit_advantages(tree, beta=0.25)
    assert plain[0][0].item() + plain[1][0].item() == pytest.approx(2 * (0.625 - r_bar) * scale, rel=1e-5, abs=1e-6)
    assert plain[0][0].item() <= 0  # Ṽ = 0.625 <= R̄: standard credit does not reinforce this prefix
    # continuations are untouched by the clamp
    for a, b in zip(clamped, plain):
        assert torch.equal(a[3:], b[3:])


def test_zero_signed_token_mass_centres_the_continuations():
    """Arm 11: after centring, Σ over every continuation token of a question's advantages is 0; prefixes keep theirs."""
    tree = pairs_tree([(1, 0), (1, 1), (0, 0), (1, 0)], prefix=3, tail=2)
    tree.leaves[0].response += [6, 6, 6]  # unequal continuation lengths, so centring is not a no-op
    plain = advantages(tree, "prefix_credit", options=CreditOptions(prefix_beta=0.25))
    centred = advantages(tree, "prefix_credit", options=CreditOptions(prefix_beta=0.25, zero_cont_token_mass=True))
    mass = sum(a[leaf.prefix_len :].double().sum().item() for a, leaf in zip(centred, tree.leaves))
    assert abs(mass) < 1e-5
    shift = sum(a[leaf.prefix_len :].double().sum().item() for a, leaf in zip(plain, tree.leaves)) / sum(
        len(leaf.response) - leaf.prefix_len for leaf in tree.leaves)
    assert shift != 0
    for a, b, leaf in zip(plain, centred, tree.leaves):
        assert torch.equal(a[: leaf.prefix_len], b[: leaf.prefix_len])
        torch.testing.assert_close(b[leaf.prefix_len :], a[leaf.prefix_len :] - shift)


def test_unit_normalised_accumulation_over_four_questions():
    """Arm 11: each question's gradient scaled to unit norm, averaged over the 4-question window."""
    g = [[torch.tensor([3.0, 4.0]), torch.tensor([0.0])], [[0.0, 0.0], [2.0]], [[0.0, 0.0], [0.0]], [[1.0, 0.0], [0.0]]]
    g = [[torch.as_tensor(x, dtype=torch.float32) for x in q] for q in g]
    out = update.unit_normalized_mean(g, window=4)
    torch.testing.assert_close(out[0], torch.tensor([(0.6 + 0 + 0 + 1.0) / 4, (0.8 + 0 + 0 + 0) / 4]))
    torch.testing.assert_close(out[1], torch.tensor([(0 + 1.0 + 0 + 0) / 4]))


def test_flat_warmup_counts_the_papers_pairs():
    """[TwoStage] Arm 5, seed 42: (flat_warmup_pairs, causal, terminal_dup) = (24, 163, 13) of 200 pairs: K = 4 pairs per
    step, so 24 warm-up pairs are 6 flat steps; with --bifurcate-after-active 3, the 3rd active step is step 6."""
    cfg = TrainConfig(rollout="two_stage", chains=4, siblings=2, bifurcate_after_active=3, max_response_len=512)
    activity = [0, 1, 0, 0, 1, 1] + [1, 0] * 22  # 50 steps; the third active step is the sixth
    kinds, active = [], 0
    for a in activity:
        kinds.append(phases.rollout_kind(cfg, active))
        active += a
    assert kinds.count("flat_warmup") * cfg.chains == 24 and kinds[6] == "two_stage"
    assert len(kinds) * cfg.chains == 200 and cfg.group_size == 8  # K·B leaves per prompt, in warm-up too


def test_eff_cap_is_twostage_batched_budget():
    """eff_cap_i = 2048 − max_j K_j + K_i <= 2048 in a batch of 64 sorted by prompt + prefix length; max_gen never
    falls below 64."""
    ks = [10, 30, 50]
    assert eff_caps(ks, ks, 2048) == [2008, 2028, 2048]
    assert eff_caps([2000, 100], [2000, 100], 2048) == [2064, 164]  # the 64-token floor
    # two batches of 64: each is capped by its own longest prefix
    ks = list(range(128))
    caps = eff_caps(ks, ks, 1000)
    assert caps[:64] == [1000 - 63 + k for k in range(64)] and caps[64:] == [1000 - 127 + k for k in range(64, 128)]
    assert max(caps) == 1000 and all(c <= 1000 for c in caps)
    with pytest.raises(ValueError, match="one entry per row"):
        eff_caps([1], [1, 2], 10)


def test_config_rejects_inconsistent_switches():
    with pytest.raises(ValueError, match="clamped_prefix modifies prefix_credit"):
        TrainConfig(clamped_prefix=True)
    with pytest.raises(ValueError, match="unit_question_grad"):
        TrainConfig(unit_question_grad=True, minibatches=2)
    with pytest.raises(ValueError, match="keep_by"):
        TrainConfig(keep_by="variance")
    assert math.isclose(TrainConfig(rollout="two_stage", two_stage_t_min=8, two_stage_t_max=16).group_size, 8)
