"""The synthetic arithmetic task: reference chains verify as correct, detours are wrong or corrected as labelled."""

import random

import pytest

from bsb.tasks.math.grader import MathGrader
from bsb.tasks.synthetic.arith import Op, evaluate, make_chain, make_problem, render, training_chains


def test_render_parenthesises_only_what_left_associative_parsing_needs():
    t = Op("-", 9, Op("-", 4, Op("*", Op("+", 1, 2), 3)))
    assert render(t) == "9 - (4 - (1 + 2) * 3)"
    assert eval(render(t)) == evaluate(t) == 14
    assert render(Op("+", -3, 2)) == "(-3) + 2"
    # a right operand at equal precedence keeps its parentheses, so the text reads in the tree's order
    assert render(Op("+", Op("-", 0, 8), Op("-", 0, 9))) == "0 - 8 + (0 - 9)"
    assert render(Op("-", Op("+", 1, 2), 3)) == "1 + 2 - 3"


@pytest.mark.parametrize("n_ops", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("parens", [True, False])
def test_problems_have_n_ops_and_python_agrees(n_ops, parens):
    rng = random.Random(n_ops)
    for _ in range(20):
        p = make_problem(rng, n_ops, parens=parens)
        assert p.expression.count("+") + p.expression.count("*") + sum(
            1 for i, c in enumerate(p.expression) if c == "-" and p.expression[i + 1] == " ") == n_ops
        assert eval(p.expression) == p.answer


def test_reference_chains_reduce_one_op_per_step_and_verify():
    rng, grader = random.Random(0), MathGrader()
    for _ in range(50):
        p = make_problem(rng, rng.randint(1, 5))
        c = make_chain(p, rng)
        lines = c.response.splitlines()
        facts, exprs = lines[0:-1:2], lines[1:-1:2]
        assert len(lines) == 2 * p.n_ops + 1 and len(facts) == len(exprs) == p.n_ops
        for fact, expr in zip(facts, exprs):  # "a op b = c" is a true fact, and "= expr" keeps the value
            lhs, rhs = fact.split(" = ")
            assert eval(lhs) == eval(rhs) and expr.startswith("= ") and eval(expr[2:]) == p.answer
        assert exprs[-1] == f"= {render(p.answer)}"
        assert grader.grade(c.response, str(p.answer))


def test_detours_are_wrong_or_corrected_as_labelled():
    rng, grader = random.Random(1), MathGrader()
    for _ in range(50):
        p = make_problem(rng, rng.randint(2, 5))
        wrong = make_chain(p, rng, "wrong")
        fixed = make_chain(p, rng, "corrected")
        assert not grader.grade(wrong.response, str(p.answer)) and wrong.final_answer != p.answer
        assert grader.grade(fixed.response, str(p.answer)) and "wait," in fixed.response
        assert wrong.pivot_line is not None and fixed.pivot_line is not None


def test_training_set_is_deterministic_and_mixed():
    a, b = training_chains(200, seed=3), training_chains(200, seed=3)
    assert [c.text for c in a] == [c.text for c in b]
    kinds = {k: sum(c.kind == k for c in a) for k in ("correct", "wrong", "corrected")}
    assert kinds["correct"] > 100 and kinds["wrong"] > 10 and kinds["corrected"] > 10


def test_bad_arguments():
    with pytest.raises(ValueError):
        make_problem(random.Random(0), 0)
    with pytest.raises(ValueError, match="kind must be"):
        make_chain(make_problem(random.Random(0), 2), random.Random(0), "sideways")
