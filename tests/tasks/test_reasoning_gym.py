"""The reasoning_gym task on reasoning-gym's ``gsm_symbolic`` (GSM8K's templates, new numbers): the held-out set is
fixed and disjoint from training draws, gold answers score 1 and wrong ones 0 (reasoning-gym's 0.01 is no reward),
the answer is read from the format the prompt asks for, and bsb's math grader and ``score_answer`` agree on a set of
answers a model writes except where listed."""

import random
from collections import Counter

import pytest

pytest.importorskip("reasoning_gym", reason="reasoning-gym is not installed (pip install 'belief-shift-branching[gym]')")

from bsb.tasks.math.grader import MathGrader  # noqa: E402
from bsb.tasks.reasoning_gym import HELD_OUT_SEED, ReasoningGymTask  # noqa: E402
from bsb.tasks.registry import make_task  # noqa: E402


@pytest.fixture(scope="module")
def task():
    return make_task("reasoning_gym", {"dataset": "gsm_symbolic"})


def test_the_held_out_set_is_fixed_and_training_draws_never_meet_it(task):
    held = task.held_out(30)
    assert held == ReasoningGymTask().held_out(30) and len({p.prompt for p in held}) == 30
    assert all(p.id.startswith(f"gsm_symbolic-heldout-{HELD_OUT_SEED}-") for p in held)
    exclude = {p.prompt for p in held}
    a = task.draw(random.Random(1), 40, exclude)
    assert a == task.draw(random.Random(1), 40, exclude) and a != task.draw(random.Random(2), 40, exclude)
    assert not exclude & {p.prompt for p in a}
    q = held[0]
    assert q.prompt.endswith("Give the result as your final answer. Do not include units.")
    assert q.meta["entry"]["metadata"]["source_dataset"] == "gsm_symbolic"


def test_gold_answers_score_one_and_a_wrong_answer_zero(task):
    for p in task.held_out(50):
        right = task.verify(f"Step 1 ... so the total is \\boxed{{{p.answer}}}.", p)
        assert right.correct and right.reward == 1.0 and right.details == (("score_answer", 1.0),), p.id
        wrong = task.verify(f"\\boxed{{{int(p.answer) + 1}}}", p)
        # reasoning-gym's partial score for a wrong number is kept for analysis, never paid as a reward
        assert wrong.reward == 0.0 and wrong.reason == "wrong" and wrong.details == (("score_answer", 0.01),), p.id


def test_the_answer_is_read_from_the_format_the_prompt_asks_for(task):
    p = task.held_out(1)[0]
    assert task.answer_format() == "Put the final answer in \\boxed{}." and task.probe_suffix.endswith("\\boxed{")
    assert task.verify(f"The answer is {p.answer}.", p).reason == "no_answer"  # not boxed: not read
    assert task.gold_continuation(p) == f"{p.answer}}}"
    line = make_task("reasoning_gym", {"dataset": "gsm_symbolic", "answer": "answer_line"})
    assert line.verify(f"So:\nAnswer: {p.answer}", p).correct and line.answer_format().startswith("End with a line")


def test_a_scorer_that_raises_is_a_counted_zero(task, monkeypatch):
    p = task.held_out(1)[0]
    monkeypatch.setattr(task._scorer, "score_answer", lambda *a: 1 / 0)
    v = task.verify("\\boxed{3}", p)
    assert v.reward == 0.0 and v.reason == "score_error" and "ZeroDivisionError" in v.details[0][1]


@pytest.mark.parametrize("options,match", [
    ({"dataset": "gsm_symbolc"}, "no reasoning-gym dataset 'gsm_symbolc'; similar: gsm_symbolic"),
    ({"dataset": "gsm_symbolic", "bogus": 1}, "refuses the options .*bogus"),
    ({"dataset": "gsm_symbolic", "difficulty": 7}, "refuses the options .*AssertionError"),
    ({"answer": "tag"}, "answer must be one of boxed, answer_line"),
])
def test_bad_options_are_one_clear_error(options, match):
    with pytest.raises(ValueError, match=match):
        make_task("reasoning_gym", options)


# Answers as a model writes them, each against the gold number a: (the form, whether score_answer and bsb's grader
# should take it). Where the two disagree the note of issue 61 lists it; the test pins each disagreement.
FORMS = {
    "plain": lambda a: a, "float": lambda a: a + ".0", "dollar": lambda a: "\\$" + a, "unit": lambda a: a + " apples",
    "text": lambda a: "\\text{" + a + "}", "percent": lambda a: a + "\\%", "x=": lambda a: "x = " + a,
    "off by one": lambda a: str(int(a) + 1), "half": lambda a: a + ".5", "words first": lambda a: f"3 boxes, so {a}",
    "thousands": lambda a: f"{int(a):,}", "fraction": lambda a: f"\\frac{{{2 * int(a)}}}{{2}}",
    "sum": lambda a: f"{int(a) - 1}+1", "negated": lambda a: "-" + a, "approx": lambda a: "\\approx " + a,
}
# score_answer takes the first number it finds (r"\b-?\d+(?:\.\d+)?\b"): "17,280" is 17, "-918" is 918 (no word
# boundary before the sign), "\frac{1836}{2}" 1836; bsb's grader reads the expression and refuses "\approx"
DISAGREE = {"thousands": (False, True), "fraction": (False, True), "sum": (False, True), "negated": (True, False),
            "approx": (True, False)}


def test_bsbs_grader_and_score_answer_agree_but_where_listed(task):
    grader, seen = MathGrader(), Counter()
    for p in task.held_out(40):
        for form, write in FORMS.items():
            pred = write(p.answer)
            got = (task.score(pred, p) == 1.0, grader.equivalent(pred, p.answer))
            if form == "thousands" and int(p.answer) < 1000:
                assert got[0] == got[1], (form, pred)  # no separator below 1,000
                continue
            assert got == DISAGREE.get(form, (got[0], got[0])), (form, pred, got)
            seen[form, got[0] == got[1]] += 1
    agree, total = sum(n for (f, same), n in seen.items() if same), sum(seen.values())
    print(f"score_answer and bsb's grader agree on {agree} of {total} answers; disagree on "
          f"{', '.join(f'{f} ({n})' for (f, same), n in sorted(seen.items()) if not same)}")
    assert {f for f, same in seen if not same} == set(DISAGREE)


def test_a_held_out_file_reads_back_as_written_and_refuses_any_other(task, tmp_path):
    import json

    from bsb.tasks.reasoning_gym import gym_version, held_out_file

    path = tmp_path / "held.jsonl"
    path.write_text(held_out_file("gsm_symbolic", 5))
    written = task.held_out(5)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(5)) and {r["seed"] for r in rows} == {HELD_OUT_SEED}
    assert rows[0]["reasoning_gym"] == gym_version() and rows[0]["options"] == {}
    from_file = make_task("reasoning_gym", {"val_file": str(path)})
    assert from_file.held_out(5) == written  # the same problems, the scorer's entries included
    assert from_file.verify(f"\\boxed{{{written[2].answer}}}", from_file.held_out(5)[2]).correct
    with pytest.raises(ValueError, match=r"6 held-out problems asked, 5 in .*held.jsonl"):
        from_file.held_out(6)

    def refused(edit, match, options=None):
        bad = [dict(r) for r in rows]
        edit(bad)
        path.write_text("".join(json.dumps(r) + "\n" for r in bad))
        with pytest.raises(ValueError, match=match):
            make_task("reasoning_gym", {"val_file": str(path), **(options or {})})

    refused(lambda b: b[3].update(answer="7"), r"line 4: reasoning-gym .* generates another problem")
    refused(lambda b: b[0].update(question=b[0]["question"] + " Hint: 918."), "line 1: .*written by reasoning-gym 0")
    refused(lambda b: b[1].pop("seed"), r"line 2: not a held-out row \(fields seed missing")
    refused(lambda b: b[2].update(index="2"), "fields index missing or of the wrong type")
    refused(lambda b: b.reverse(), r"rows must be items 0, 1, \.\.\. of one dataset, options and seed")
    refused(lambda b: [r.update(seed=12345) for r in b], "seed 12345 is in the training draws' range")
    refused(lambda b: None, "holds gsm_symbolic {}, the task is gsm_symbolic {'difficulty'", {"difficulty": 1.0})
    path.write_text("")
    with pytest.raises(ValueError, match="no problems"):
        make_task("reasoning_gym", {"val_file": str(path)})
    path.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="not a held-out row"):
        make_task("reasoning_gym", {"val_file": str(path)})


def test_the_committed_held_out_file_is_the_held_out_set():
    """examples/problems/gsm_symbolic_heldout.jsonl: the fixed benchmark of docs/RESULTS.md, 256 problems."""
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "problems" / "gsm_symbolic_heldout.jsonl"
    held = make_task("reasoning_gym", {"val_file": str(path)}).held_out(256)
    assert held == ReasoningGymTask().held_out(256) and len({p.prompt for p in held}) == 256
