"""The math verifier: extraction, normalisation, equivalent forms, hostile answers with a time bound, the gate."""

import time

import pytest

from bsb.tasks.answers import extract_boxed
from bsb.tasks.math.grader import MathGrader, gated_reward, normalize


@pytest.mark.parametrize(
    "text,want",
    [
        (r"so \boxed{42}.", "42"),
        (r"first \boxed{1} then \boxed{\frac{a}{b^{2}}}", r"\frac{a}{b^{2}}"),
        (r"answer: \boxed 5 done", "5"),
        (r"\fbox{x+1}", "x+1"),
        (r"\boxed{ {nested} {braces} }", " {nested} {braces} "),
        ("no box here", None),
        (r"\boxed{unclosed", None),
    ],
)
def test_extract_boxed(text, want):
    assert extract_boxed(text) == want


@pytest.mark.parametrize(
    "raw,want",
    [(r"\dfrac{1}{2}", r"\frac{1}{2}"), ("x = 5", "5"), ("1,000", "1000"), ("2.50", "2.5"), (r"90^\circ", "90"),
     (r"\text{(A)}", "(A)"), (r"\left( 1, 2 \right)", "(1,2)"), ("7.", "7"), (r"50\%", "50")],
)
def test_normalize(raw, want):
    assert normalize(raw) == want


@pytest.mark.parametrize(
    "response,gold,ok",
    [
        (r"\boxed{42}", "42", True),
        (r"\boxed{\dfrac{1}{2}}", r"\frac12", True),  # symbolic
        (r"\boxed{0.5}", r"\frac{1}{2}", True),
        (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", True),
        (r"\boxed{41}", "42", False),
        (r"\boxed{}", "42", False),
        ("42", "42", False),  # no boxed answer
        (r"\boxed{x^2+2x+1}", "(x+1)^2", True),
    ],
)
def test_grade(response, gold, ok):
    assert MathGrader().grade(response, gold) is ok


@pytest.mark.parametrize(
    "answer,kind",
    [("{" * 5000 + "1" + "}" * 5000, "hostile"), ("9" * 1_000_000, "hostile"), (r"\frac{1}{" * 40 + "2" + "}" * 40, "hostile")],
)
def test_hostile_answers_are_bounded_wrong_and_counted(answer, kind):
    g = MathGrader()
    start = time.perf_counter()
    assert g.grade(r"\boxed{" + answer + "}", "1") is False
    assert time.perf_counter() - start < 2.0
    assert g.stats[kind] == 1


def test_a_slow_symbolic_check_is_cut_at_the_time_bound(monkeypatch):
    import bsb.tasks.math.grader as mg

    def slow(pred, gold, conn):
        time.sleep(30)

    monkeypatch.setattr(mg, "_symbolic_equal", slow)
    g = MathGrader(timeout_s=0.5)
    start = time.perf_counter()
    assert g.grade(r"\boxed{2+2}", "4") is False
    assert time.perf_counter() - start < 3.0 and g.stats["timeout"] == 1


def test_derivation_gate():
    body = "Adding the two numbers gives us the total. "
    assert gated_reward(body + r"\boxed{5}", True) == 1.0
    assert gated_reward(r"\boxed{5}", True) == 0.0  # no derivation before the box
    assert gated_reward(body + r"\boxed{5}", False) == 0.0
    assert gated_reward(r"ab \boxed{5}", True, min_chars_before_box=3) == 1.0
