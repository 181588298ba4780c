"""Leaf rewards: verifier, DAPO soft overlong penalty, derivation gate."""

import pytest

from bsb.tasks.base import Problem, Verdict
from bsb.tasks.math.grader import gated_reward
from bsb.tasks.math.task import MathTask
from bsb.train.rewards import RewardConfig, leaf_reward, overlong_penalty


def test_soft_overlong_penalty_is_zero_then_linear_then_the_full_factor():
    cfg = RewardConfig(max_response=100, overlong_buffer=20, overlong_factor=0.5)
    assert overlong_penalty(80, cfg) == 0.0
    assert overlong_penalty(90, cfg) == pytest.approx(-0.25)
    assert overlong_penalty(100, cfg) == pytest.approx(-0.5)
    assert overlong_penalty(130, cfg) == pytest.approx(-0.5)
    assert overlong_penalty(100, RewardConfig(max_response=100)) == 0.0  # buffer 0: off


def test_leaf_reward_is_the_task_verdict_plus_the_penalty():
    task = MathTask(gate_chars=30)
    derivation = "2 + 3 = 5\n= 5\nSo the final answer is \\boxed{5}."
    p, q = Problem("a", "2 + 3?", "5"), Problem("b", "2 + 4?", "6")
    assert task.verify(derivation, p) == Verdict(1.0, True, "correct", "5")
    assert leaf_reward(task.verify(derivation, p), 10, RewardConfig(100)) == 1.0
    assert task.verify("\\boxed{5}", p) == Verdict(0.0, True, "gate", "5")  # correct, but no derivation: gated
    assert leaf_reward(task.verify(derivation, q), 95, RewardConfig(100, overlong_buffer=10)) == -0.5
    assert task.verify("no box here", p).reason == "no_answer"


def test_derivation_gate_is_twostage_rule_on_boxed_only():
    """[TwoStage]: text.rfind("\\boxed") >= 30. The boxed answer starting at character 30 pays, at 29 it does not,
    and an \\fbox never opens the gate (it is still graded correct)."""
    at = lambda n, box="\\boxed": "x" * n + box + "{5}"  # noqa: E731
    assert gated_reward(at(30), True) == 1.0 and gated_reward(at(29), True) == 0.0
    assert gated_reward(at(30), False) == 0.0
    assert gated_reward(at(40, "\\fbox"), True) == 0.0
    assert gated_reward(at(40, "\\fbox") + " " + at(0), True) == 1.0  # the last \\boxed is 45 characters in
    task = MathTask(gate_chars=30)
    v = task.verify(at(40, "\\fbox"), Problem("a", "", "5"))
    assert v.correct and v.reward == 0.0 and v.reason == "gate"


def test_bad_reward_configs():
    with pytest.raises(ValueError, match="overlong_buffer"):
        RewardConfig(max_response=10, overlong_buffer=20)
    with pytest.raises(ValueError, match="overlong_factor"):
        RewardConfig(max_response=10, overlong_factor=-1)
