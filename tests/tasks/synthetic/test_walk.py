"""The embedded default's task: walks on a map, their detours, the probe examples, BSV's drafted regimes, the walk
tokenizer, and the task's verifier."""

import random
import re
import statistics

import pytest

from bsb.embedded.tokenizer import NUMBER_MAX, walk_tokenizer
from bsb.tasks.registry import make_task
from bsb.tasks.synthetic.walk import (
    MAX_STEPS,
    SUFFIX,
    SYMBOLS,
    WalkTask,
    bsv_continuations,
    cycles,
    make_chain,
    make_problem,
    probe_example,
    training_chains,
)

LINE = re.compile(rf"^(?:wait )?(\d+)([{SYMBOLS}])>([{SYMBOLS}])$")


def _steps(chain):
    """Every line is the steps left, the symbol, its successor as written; returns (left, here, there)."""
    out = []
    for line in chain.lines:
        m = LINE.match(line)
        assert m, line
        out.append((int(m.group(1)), m.group(2), m.group(3)))
    return out


def test_reference_chains_follow_the_map_one_line_a_step_counting_down():
    rng = random.Random(0)
    for _ in range(50):
        p = make_problem(rng, rng.randint(1, MAX_STEPS))
        assert p.prompt == f"{p.start} " + " ".join(f"{s}>{p.next(s)}" for s in SYMBOLS) + f" {p.n_ops}\n"
        assert all(p.next(s) != s and p.next(p.next(s)) != s for s in SYMBOLS)  # no fixed points, no 2-cycles
        assert cycles(p.succ) == [3] and len(set(p.path(steps=30)[10:])) == 3  # every walk ends in one 3-cycle
        c = make_chain(p, rng)
        steps = _steps(c)
        assert [left for left, _, _ in steps] == list(range(p.n_ops, 0, -1)) and steps[0][1] == p.start
        assert all(p.next(here) == there for _, here, there in steps)
        assert [t for _, _, t in steps[:-1]] == [h for _, h, _ in steps[1:]]  # each line starts where the last ended
        assert c.response.endswith(f"\n{SUFFIX}{p.answer}") and c.final_answer == p.answer == p.path()[-1]
    task = WalkTask()
    problem = task.held_out(1)[0]
    assert task.verify(task.reference(problem), problem).correct


def test_detours_are_wrong_or_corrected_as_labelled():
    rng = random.Random(1)
    for _ in range(50):
        p = make_problem(rng, rng.randint(2, 20))
        wrong, fixed = make_chain(p, rng, "wrong"), make_chain(p, rng, "corrected")
        assert wrong.final_answer != p.answer and fixed.final_answer == p.answer
        _, here, there = _steps(wrong)[wrong.pivot_line]
        assert p.next(here) != there
        left, here, there = _steps(fixed)[fixed.pivot_line + 1]
        assert (
            fixed.lines[fixed.pivot_line + 1].startswith("wait ")
            and p.next(here) == there
            and len(fixed.lines) == p.n_ops + 1
        )
    with pytest.raises(ValueError, match="kind must be"):
        make_chain(make_problem(rng, 3), rng, "sideways")
    with pytest.raises(ValueError, match="n_ops"):
        make_problem(rng, MAX_STEPS + 1)
    assert cycles(tuple("bcabcd")) == [3] and cycles(tuple("bafcde")) == [2, 4]  # a>b>c>a; a<->b and c>f>e>d>c


def test_training_set_is_deterministic_mixed_and_probe_examples_cut_at_boundaries():
    a, b = training_chains(300, 3, (8, 12)), training_chains(300, 3, (8, 12))
    assert [c.text for c in a] == [c.text for c in b]
    kinds = {k: sum(c.kind == k for c in a) for k in ("correct", "wrong", "corrected")}
    assert kinds["correct"] > 150 and kinds["wrong"] > 20 and kinds["corrected"] > 20
    rng, whole = random.Random(0), 0
    for c in a:
        prompt, partial, answer = probe_example(c, rng)
        assert prompt == c.problem.prompt and partial.endswith(SUFFIX) and answer == c.final_answer
        body = partial[: -len(SUFFIX)]
        assert c.response.startswith(body) and (body == "" or body.endswith("\n"))  # cut at a line boundary
        whole += len(body.splitlines()) == len(c.lines)
        if whole and len(body.splitlines()) == len(c.lines):
            assert c.response == body + SUFFIX + answer  # a complete chain: the answer is the one it states
    assert 50 < whole < 100  # a quarter of the cuts fall after the last line
    detours = [c for c in a if c.pivot_line is not None]
    at = [len(probe_example(c, rng, complete=0.0, at_detour=1.0)[1].splitlines()) - 1 for c in detours]
    assert all(j - c.pivot_line in ((1, 2) if c.kind == "corrected" else (1,)) for j, c in zip(at, detours))


def test_the_corrected_share_and_the_probe_window_after_a_slip():
    """``corrected`` splits the detours (the default's even split keeps the earlier recipe's data); ``window`` spreads
    a wrong chain's detour cuts over the lines after its slip, never past its end."""
    a = training_chains(2000, 5, (8, 12), detour_frac=0.4, corrected=0.15)
    assert [c.text for c in training_chains(300, 3, (8, 12), corrected=0.5)] == [
        c.text for c in training_chains(300, 3, (8, 12))
    ]
    wrong, fixed = sum(c.kind == "wrong" for c in a), sum(c.kind == "corrected" for c in a)
    assert 0.10 < fixed / (wrong + fixed) < 0.20 and 0.35 < (wrong + fixed) / len(a) < 0.45
    rng = random.Random(1)
    wrongs = [c for c in a if c.kind == "wrong"]
    after = [
        len(probe_example(c, rng, complete=0.0, at_detour=1.0, window=3)[1].splitlines()) - 1 - c.pivot_line
        for c in wrongs
    ]
    assert set(after) == {1, 2, 3}  # within three lines after the slip, each of them drawn
    assert all(c.pivot_line + k <= len(c.lines) for c, k in zip(wrongs, after))
    with pytest.raises(ValueError, match="window"):
        probe_example(wrongs[0], rng, window=0)
    with pytest.raises(ValueError, match="corrected"):
        training_chains(3, 0, (8,), corrected=1.5)


def test_bsv_regimes_continue_the_reference_surge_drop_or_restate():
    rng = random.Random(2)
    for _ in range(30):
        p = make_problem(rng, 10)
        cut = rng.randint(1, 9)
        ref = make_chain(p, random.Random(0)).lines
        g = bsv_continuations(p, cut, rng)
        assert g["surge"].splitlines() == list(ref[cut : cut + 2])
        drop = g["drop"].splitlines()
        assert len(drop) == len(g["surge"].splitlines())
        _, here, there = LINE.match(drop[0]).groups()
        assert here == p.path()[cut] and p.next(here) != there  # the first drop line is a wrong step
        assert g["steady"] == f"wait {ref[cut - 1]}\n"
    with pytest.raises(ValueError, match="cut"):
        bsv_continuations(make_problem(rng, 5), 5, rng)


def test_walk_tokenizer_makes_counts_entries_and_answers_single_tokens_and_round_trips():
    tok = walk_tokenizer()
    for n in (1, 9, 10, 17, 99, 100, NUMBER_MAX):
        assert len(tok.encode(f"{n}:", add_special_tokens=False)) == 2
    assert len(tok.encode("a>d f>a", add_special_tokens=False)) == 3  # a map entry is one token
    assert len(tok.encode(f"{SUFFIX}c", add_special_tokens=False)) == 3  # "=", ">", "c": the answer is one token
    for text in [c.text for c in training_chains(20, 0, (5, 20))] + ["x = 2500 - 0123; f(-7) a>b>c\n"]:
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_task_problems_boundaries_verifier_and_options():
    task = make_task("walk")
    held = task.held_out(40)
    assert [p.prompt for p in held] == [p.prompt for p in WalkTask().held_out(40)] and len(
        {p.prompt for p in held}
    ) == 40
    assert not {p.prompt for p in task.draw(random.Random(0), 30, {p.prompt for p in held})} & {p.prompt for p in held}
    assert statistics.median(p.meta["ops"] for p in task.sample(100)) >= 40  # chains of >= 40 candidate boundaries
    p = held[0]
    assert task.verify(f"1a>b\n{SUFFIX}{p.answer}", p).correct
    other = next(s for s in SYMBOLS if s != p.answer)
    v = task.verify(f"{SUFFIX}{other}", p)
    assert not v.correct and v.reason == "wrong" and v.answer == other
    assert task.verify("1a>b\n", p).reason == "no_answer"
    assert task.answer_span(f"{SUFFIX}c\n{SUFFIX}d") == "d" and task.gold_continuation(p) == p.answer
    assert task.probe_suffix == SUFFIX and task.read_len == 1
    ex = task.bsv_examples(6)
    assert len(ex) == 18 and {r for *_, r in ex} == {"surge", "steady", "drop"}
    with pytest.raises(ValueError, match="ops"):
        make_task("walk", {"ops": [MAX_STEPS + 1]})
    with pytest.raises(TypeError, match="not a walk problem"):
        task.reference(make_task("arith").held_out(1)[0])
