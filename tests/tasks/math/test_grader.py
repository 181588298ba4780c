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


# What math-verify's own cases showed bsb grading differently, each kind correct and incorrect (docs/peers.md).
@pytest.mark.parametrize(
    "response,gold,ok",
    [
        (r"\boxed{32, 349}", "32349", False),  # a comma then a space separates two numbers: a list, not 32,349
        (r"\boxed{32,349}", "32349", True),  # a thousands separator
        (r"\boxed{1,500}", "1.5", False),  # three digits after the comma: thousands, never a decimal comma
        (r"\boxed{1000,99}", "1000.99", True),  # a decimal comma where it cannot be thousands
        (r"\boxed{1000.99}", "1000,99", False),  # a gold's comma is never a decimal one: "10,20" is a list
        (r"\boxed{-2.1}", "-2,1", False),
        (r"\boxed{(1, 100)}", "(1,100)", True),  # inside brackets a comma separates, with a space or without
        (r"\boxed{\{1, 100\}}", r"\{1,100\}", True),
        (r"\boxed{1100}", "(1,100)", False),
        (r"\boxed{1000,5}", "10005", False),
        (r"\boxed{1,2}", "1.2", True),  # against one number, a decimal comma
        (r"\boxed{1,2}", "1, 2", True),  # against a list, a list
        (r"\boxed{\$16386.17}", "16386.17", True),  # an escaped dollar
        (r"\boxed{\$16386.17}", "16386.71", False),
        (r"\boxed{28 pct}", r"28\%", True),
        (r"\boxed{28\text{ percent}}", r"28\%", True),
        (r"\boxed{28 percentage}", "28", True),
        (r"\boxed{29 percent}", r"28\%", False),
        (r"\boxed{90 degrees}", r"90^\circ", True),
        (r"\boxed{90 degrees}", "45", False),
        (r"\boxed{2, 1}", "1, 2", True),  # lists compare as sets
        (r"\boxed{1, 2, 3}", "1, 2", False),
        (r"\boxed{1, 3}", "1, 2", False),
        (r"\boxed{1} and then \boxed{2}", "2", True),  # a prediction is read by its last box
        (r"\boxed{1} and then \boxed{2}", "1", False),
        (r"\boxed{x = -5,\ p = \frac{14}{3}}", r"-5, \frac{14}{3}", False),  # variable names inside a list: kept
        (r"\boxed{2x+4y-3=0}", r"y=-\frac{1}{2}x+\frac{3}{4}", False),  # equations are not solved
    ],
)
def test_lists_separators_and_units(response, gold, ok):
    assert MathGrader().grade(response, gold) is ok


def test_a_gold_solution_with_several_boxes_is_one_answer_of_all_of_them(tmp_path):
    import json

    from bsb.tasks.math.task import MathTask

    path = tmp_path / "p.jsonl"
    rows = [{"problem": "Solve x^2 = 3x - 2.", "solution": r"So $x = \boxed{1}$ or $x = \boxed{2}$."},
            {"problem": "1 + 1?", "solution": r"It is \boxed{2}, and \boxed{2} again."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = MathTask(train_file=str(path))
    both, one = task.train
    assert both.meta["answers"] == ["1", "2"] and both.meta["match"] == "all" and one.meta["answers"] == ["2"]
    grade = lambda r, p: task.verify(r, p).correct  # noqa: E731
    assert grade(r"\boxed{2, 1}", both) and grade(r"\boxed{1,2}", both)
    assert not grade(r"\boxed{2}", both) and not grade(r"\boxed{1, 2, 3}", both)
    assert grade(r"\boxed{2}", one)


# ------------------------------------------------------------------ the third hostile round: a response is untrusted
# input: every one below is a zero with a reason within a second, never an exception nor a hang (a symbolic parser
# computes 9^{9^{9}} digit by digit until the 2 s bound; the boxes' scan was quadratic in their number)


HOSTILE_RESPONSES = {
    "100k nested braces": r"\boxed{" + "{" * 100_000 + "1" + "}" * 100_000 + "}",
    "5000 digits": r"\boxed{" + "9" * 5000 + "}",
    "9**9**9": r"\boxed{9**9**9}",
    "9^{9^{9}}": r"\boxed{9^{9^{9}}}",
    "9^9^9": r"\boxed{9^9^9}",
    "2^{2^{64}}": r"\boxed{2^{2^{64}}}",
    "10^{10^{10}}": r"\boxed{10^{10^{10}}}",
    "(2)^{(10^{10})}": r"\boxed{(2)^{(10^{10})}}",
    "1e999999": r"\boxed{1e999999}",
    "1.5 x 10^999999999": r"\boxed{1.5\times10^{999999999}}",
    "10^{-999999999}": r"\boxed{10^{-999999999}}",
    "(10^{100})!": r"\boxed{(10^{100})!}",
    "2^{100!}": r"\boxed{2^{100!}}",
    "10^{100}!": r"\boxed{10^{100}!}",
    "unclosed boxes": r"\boxed{" * 20_000,
    "unclosed fboxes": r"\fbox{" * 20_000,
    "nested boxes": r"\boxed{" * 5000 + "1" + "}" * 5000,
    "a million characters": "x " * 500_000 + r"\boxed{3}",
}


class _Hang(Exception):
    pass


def _bounded(seconds):
    import signal

    def stop(*_):
        raise _Hang(f"no verdict within {seconds} s")

    signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)


@pytest.mark.parametrize("name", list(HOSTILE_RESPONSES))
def test_hostile_responses_are_a_zero_with_a_reason_never_a_hang(name):
    import signal

    from bsb.tasks.base import Problem
    from bsb.tasks.math.task import MathTask

    task, response = MathTask(), HOSTILE_RESPONSES[name]
    problem = Problem("p", "q", "7", {"convention": "boxed"})
    _bounded(10)  # a hang guard, not a benchmark: before the fix some took minutes
    try:
        v = task.verify(response, problem)
        graded = task.grader.grade(response, "7")
    finally:
        signal.alarm(0)
    assert (v.reward, v.correct, graded) == (0.0, False, False) and v.reason in ("hostile", "wrong", "no_answer"), v
    assert task.grader.stats["timeout"] == 0, f"{name}: reached the symbolic step's time bound ({v.reason})"


@pytest.mark.parametrize("answer", [r"9^{9^{9}}", "9**9**9", r"2^{2^{64}}", r"(10^{100})!", r"2^{100!}", "1e999999",
                                    r"1.5\times10^{999999999}", r"10^{-999999999}", r"99999999!"])
def test_numbers_too_large_to_compute_are_hostile_before_any_symbolic_parse(answer):
    g = MathGrader()
    assert g.equivalent(answer, "7") is False and g.stats["hostile"] == 1 and g.stats["timeout"] == 0


@pytest.mark.parametrize("response,gold", [
    (r"\boxed{2^{10}}", "1024"), (r"\boxed{2^{2024}}", "2^{2024}"), (r"\boxed{e^{-x^2}}", r"e^{-x^{2}}"),
    (r"\boxed{2^{2^{3}}}", "256"), (r"\boxed{10!}", "3628800"), (r"\boxed{3 \times 10^{8}}", "300000000"),
    (r"\boxed{\frac{(2n)!}{(n!)^2}}", r"\frac{(2n)!}{(n!)^{2}}"), (r"\boxed{(n+1)!}", r"(n+1)n!"), (r"\boxed{5!}", "120"),
    (r"\boxed{x^{n+1}}", r"x^{n+1}"),
])
def test_ordinary_powers_and_factorials_are_still_graded(response, gold):
    g = MathGrader()
    assert g.grade(response, gold) is True and g.stats["hostile"] == 0


def _boxes_reference(text: str) -> list[str]:
    """The spec: from every box, scan on counting braces until its own closes (quadratic in the boxes)."""
    import re

    out = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*", text):
        start = m.end()
        if start < len(text) and text[start] == "{":
            depth, j = 0, start
            while j < len(text):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    out.append(text[start + 1 : j])
                    break
                j += 1
        else:
            word = re.match(r"[^\s$]+", text[start:])
            if word:
                out.append(word.group(0))
    return out


def test_boxes_are_read_in_one_pass_as_the_reference_reads_them():
    """Found: 20,000 unclosed \\boxed{ (or 5,000 nested boxes) took minutes: a scan on from every box."""
    import signal

    from hypothesis import given
    from hypothesis import strategies as st

    from bsb.tasks.answers import extract_all_boxed

    def same(text):
        want = _boxes_reference(text)
        assert extract_all_boxed(text) == want and extract_boxed(text) == (want[-1] if want else None), text

    given(st.lists(st.sampled_from([r"\boxed", r"\fbox", "{", "}", " ", "1", "x", "$", r"\boxed ", "\n"]), max_size=40))(
        lambda parts: same("".join(parts))
    )()
    for text in (r"so \boxed{42}.", r"first \boxed{1} then \boxed{\frac{a}{b^{2}}}", r"answer: \boxed 5 done",
                 r"\boxed{unclosed", r"\boxed{1} \boxed{2", r"\boxed{\boxed{3}}", "no box"):
        same(text)
    _bounded(10)  # a hang guard: the quadratic scan took minutes
    try:
        assert extract_boxed(r"\boxed{" * 20_000) is None
        assert extract_boxed(r"\boxed{" * 5_000 + "1" + "}" * 5_000) == "1"  # the last box is the innermost
    finally:
        signal.alarm(0)
