"""Leaf rewards: verifier, DAPO soft overlong penalty, derivation gate."""

import pytest

from bsb.tasks.math_grader import MathGrader
from bsb.train.rewards import RewardConfig, leaf_reward, overlong_penalty


def test_soft_overlong_penalty_is_zero_then_linear_then_the_full_factor():
    cfg = RewardConfig(max_response=100, overlong_buffer=20, overlong_factor=0.5)
    assert overlong_penalty(80, cfg) == 0.0
    assert overlong_penalty(90, cfg) == pytest.approx(-0.25)
    assert overlong_penalty(100, cfg) == pytest.approx(-0.5)
    assert overlong_penalty(130, cfg) == pytest.approx(-0.5)
    assert overlong_penalty(100, RewardConfig(max_response=100)) == 0.0  # buffer 0: off


def test_leaf_reward_gate_and_verdict():
    g = MathGrader()
    derivation = "2 + 3 = 5\n= 5\nSo the final answer is \\boxed{5}."
    assert leaf_reward(derivation, "5", 10, RewardConfig(100), g) == (1.0, True)
    assert leaf_reward("\\boxed{5}", "5", 3, RewardConfig(100, gate_chars=30), g) == (0.0, True)  # correct, but no derivation
    assert leaf_reward(derivation, "5", 10, RewardConfig(100, gate_chars=30), g) == (1.0, True)
    assert leaf_reward(derivation, "6", 95, RewardConfig(100, overlong_buffer=10), g) == (-0.5, False)


def test_bad_reward_configs():
    with pytest.raises(ValueError, match="overlong_buffer"):
        RewardConfig(max_response=10, overlong_buffer=20)
    with pytest.raises(ValueError, match="overlong_factor"):
        RewardConfig(max_response=10, overlong_factor=-1)
