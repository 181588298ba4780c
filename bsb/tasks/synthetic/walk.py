"""The synthetic task of the embedded default: a walk on a map given in the prompt, one step per line.

A problem is a map of six symbols (``a>d b>a c>e ...``: each symbol's successor), a start symbol and a length: ``c
a>d b>a ... f>e 42`` means "from c, follow the map 42 times; where do you end?". Every map has exactly one cycle, of
three symbols, and the other three lead into it (no fixed points, no 2-cycles): a walk reaches the cycle within three
steps and goes round it, so every step, a slip included, can change where it ends, and walks can still merge (a slip
onto a tail can be forgiven). Its reference chain writes one line per step (``3c>e``: the steps left, counting this
one, then the map entry it follows, as written), so a problem of ``n`` steps has ``n`` candidate boundaries, and ends
with ``=>`` and the final symbol after the line that counts down to 1 (whether a chain is complete can be read off its
last line, so the model can tell its final answer from a guess at one). With
:func:`bsb.embedded.tokenizer.walk_tokenizer` every map entry and every count is one token (a line is three tokens with
its newline), so a step is one lookup a tiny model learns in minutes, and the first token after the ``=>`` suffix is
the whole answer. The default lengths, 34-50 steps (median 42 boundaries), put ``bsb validate``'s B = 0.08·m at the
paper's ratio with three or four kept points a chain.

Training chains carry detours: ``wrong`` (one step writes a wrong successor and the walk carries on from it) and
``corrected`` (the next line, ``wait 3c>e``, restates the step correctly and the walk goes on from the right symbol);
``corrected`` sets their split, and with it what a model believes just after a wrong line (an even split leaves it
halfway until the next line shows whether a ``wait`` follows). :func:`probe_example` teaches the model to state the
walk's final symbol after ``=>`` at any line boundary, so the probe reads a belief over the *final* answer, and cuts
detour chains within a window of lines after their wrong line, where that answer has just moved.

:func:`bsv_continuations` drafts the three regimes BSV is fitted on from a reference chain cut at a boundary: surge
(the next steps, correct), drop (the next step wrong, the walk carried on from it), steady (the last line restated).
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass

from bsb.tasks.base import Problem, SyntheticTask, Verdict

SYMBOLS = string.ascii_lowercase[:6]  # a..f
MAX_STEPS = 64
SUFFIX = "=>"  # the final-answer marker: the probe's elicitation suffix


@dataclass(frozen=True)
class WalkProblem:
    start: str
    succ: tuple[str, ...]  # succ[i]: the successor of SYMBOLS[i]
    n_ops: int  # steps

    @property
    def prompt(self) -> str:
        return f"{self.start} " + " ".join(f"{s}>{t}" for s, t in zip(SYMBOLS, self.succ)) + f" {self.n_ops}\n"

    def next(self, symbol: str) -> str:
        return self.succ[SYMBOLS.index(symbol)]

    def path(self, start: str | None = None, steps: int | None = None) -> list[str]:
        """The symbols visited: the start first, then one per step."""
        out = [self.start if start is None else start]
        for _ in range(self.n_ops if steps is None else steps):
            out.append(self.next(out[-1]))
        return out

    @property
    def answer(self) -> str:
        return self.path()[-1]


def make_problem(rng: random.Random, n_ops: int) -> WalkProblem:
    """A random map with exactly one cycle, of three symbols, and no fixed point (the other three symbols lead into the
    cycle: a function, not a permutation, so walks can merge; a walk never settles into alternating two symbols), a
    random start, ``n_ops`` steps. Drawn by rejection: about one map without fixed points in four qualifies."""
    if not 1 <= n_ops <= MAX_STEPS:
        raise ValueError(f"n_ops must be in [1, {MAX_STEPS}], got {n_ops}")
    while True:
        succ = tuple(rng.choice([t for t in SYMBOLS if t != s]) for s in SYMBOLS)
        if cycles(succ) == [3]:
            return WalkProblem(rng.choice(SYMBOLS), succ, n_ops)


def cycles(succ: tuple[str, ...]) -> list[int]:
    """The lengths of the map's cycles, sorted."""
    on = set()
    for s in SYMBOLS:
        x = s
        for _ in range(len(SYMBOLS)):
            x = succ[SYMBOLS.index(x)]
        on.add(x)  # after len(SYMBOLS) steps every walk is on a cycle
    out, seen = [], set()
    for s in sorted(on):
        if s in seen:
            continue
        n, x = 0, s
        while True:
            seen.add(x)
            x, n = succ[SYMBOLS.index(x)], n + 1
            if x == s:
                break
        out.append(n)
    return sorted(out)


@dataclass(frozen=True)
class WalkChain:
    problem: WalkProblem
    lines: tuple[str, ...]  # the step lines (no answer line)
    final_answer: str  # the symbol the chain states
    kind: str  # correct | wrong | corrected
    pivot_line: int | None  # the line of the wrong step, if any

    @property
    def response(self) -> str:
        return "".join(line + "\n" for line in self.lines) + f"{SUFFIX}{self.final_answer}"

    @property
    def text(self) -> str:
        return self.problem.prompt + self.response


def step_line(p: WalkProblem, i: int, here: str, there: str) -> str:
    """``3c>e``: the steps left (counting this one), then the map entry the step follows as written (the symbol the
    walk stands on, the one it moves to): three tokens with the newline."""
    return f"{p.n_ops - i}{here}>{there}"


def _wrong(p: WalkProblem, here: str, rng: random.Random) -> str:
    return rng.choice([s for s in SYMBOLS if s != p.next(here)])


def make_chain(problem: WalkProblem, rng: random.Random, kind: str = "correct") -> WalkChain:
    """A chain for ``problem``; a ``wrong`` or ``corrected`` chain writes one step's successor wrong."""
    if kind not in ("correct", "wrong", "corrected"):
        raise ValueError(f"kind must be 'correct', 'wrong' or 'corrected', got {kind!r}")
    for _ in range(100):  # a wrong walk can merge back into the right one; draw again until it ends elsewhere
        bad = rng.randrange(problem.n_ops) if kind != "correct" else None
        lines, here, pivot = [], problem.start, None
        for i in range(problem.n_ops):
            right = problem.next(here)
            if i != bad:
                lines.append(step_line(problem, i, here, right))
                here = right
                continue
            written = _wrong(problem, here, rng)
            pivot = len(lines)
            lines.append(step_line(problem, i, here, written))
            if kind == "corrected":
                lines.append("wait " + step_line(problem, i, here, right))
                here = right
            else:
                here = written
        if kind != "wrong" or here != problem.answer:
            return WalkChain(problem, tuple(lines), here, kind, pivot)
    raise ValueError(f"could not build a wrong chain for {problem.prompt.strip()!r}")


def training_chains(
    n: int, seed: int, ops: tuple[int, ...], detour_frac: float = 0.3, corrected: float = 0.5
) -> list[WalkChain]:
    """A deterministic training set: lengths drawn from ``ops``; ``detour_frac`` of the chains take a detour, the
    share ``corrected`` of those corrected (the rest wrong). The share sets what a model trained on them believes just
    after a wrong line: the chain's new end with probability ``1 - corrected`` (the line after it may restate the step
    with ``wait``), so an even split leaves the belief halfway and moves it again one line later."""
    if not 0.0 <= detour_frac <= 1.0 or not 0.0 <= corrected <= 1.0:
        raise ValueError(f"detour_frac and corrected must be in [0, 1], got {detour_frac} and {corrected}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        problem = make_problem(rng, rng.choice(ops))
        r = rng.random()
        kind = "correct" if r >= detour_frac else ("wrong" if r < detour_frac * (1 - corrected) else "corrected")
        out.append(make_chain(problem, rng, kind))
    return out


def probe_example(
    chain: WalkChain, rng: random.Random, complete: float = 0.25, at_detour: float = 0.5, window: int = 1
) -> tuple[str, str, str]:
    """(prompt, partial response, answer): the chain cut at a line boundary, then the suffix; the answer is the symbol
    the whole chain states. The cut falls after the last line (the chain complete: the answer is its last symbol) with
    probability ``complete``; in a chain with a detour, with probability ``at_detour`` within ``window`` lines after
    its wrong line (uniformly: just after it, or up to ``window - 1`` lines later; corrected, just after the wrong line
    or the line that restates it), where the answer has just changed (or changed back); else at a random earlier
    boundary (0 = before the first line), where the answer is what the walk will come to. The loss falls on the answer
    only, so the model learns the final answer's distribution from partial work, and to tell it from the answer of a
    complete chain, without learning to stop early. A window of several lines puts the loss where a model that copies
    its answer from the latest line of the answer's phase is wrong (the lines after a slip, before that phase comes
    round): the shortcut behind a belief that lags the walk (``bench/walk_lag.py``)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    r = rng.random()
    if r < complete:
        j = len(chain.lines)
    elif chain.pivot_line is not None and r < complete + (1 - complete) * at_detour:
        later = (rng.random() < 0.5) if chain.kind == "corrected" else (rng.randrange(window) if window > 1 else 0)
        j = min(len(chain.lines), chain.pivot_line + 1 + later)
    else:
        j = rng.randrange(len(chain.lines))
    return chain.problem.prompt, "".join(line + "\n" for line in chain.lines[:j]) + SUFFIX, chain.final_answer


def bsv_continuations(problem: WalkProblem, cut: int, rng: random.Random, steps: int = 2) -> dict[str, str]:
    """The three BSV regimes after the first ``cut`` (>= 1) lines of the reference chain: ``surge`` the next
    ``steps`` lines as the reference writes them, ``drop`` the next line with a wrong successor and the following
    lines carried on from it, ``steady`` the last line restated."""
    if not 1 <= cut < problem.n_ops:
        raise ValueError(f"cut must be in [1, {problem.n_ops - 1}], got {cut}")
    path = problem.path()
    idx = range(cut, min(problem.n_ops, cut + steps))
    surge = [step_line(problem, i, path[i], path[i + 1]) for i in idx]
    drop, here = [], path[cut]
    for n, i in enumerate(idx):
        there = _wrong(problem, here, rng) if n == 0 else problem.next(here)
        drop.append(step_line(problem, i, here, there))
        here = there
    steady = ["wait " + step_line(problem, cut - 1, path[cut - 1], path[cut])]
    return {
        g: "".join(line + "\n" for line in lines) for g, lines in (("surge", surge), ("steady", steady), ("drop", drop))
    }


# ---------------------------------------------------------------------- the task
BSV_SEED = 777  # the problems BSV's continuations are drafted on (disjoint from the sample's seeds)
_ANSWER = re.compile(re.escape(SUFFIX) + r"\s*([" + SYMBOLS + r"])")


class WalkTask(SyntheticTask):
    name = "walk"
    kind = "walk"
    embedded_model = "walk"
    probe_suffix = SUFFIX
    read_len = 1
    held_out_seed = 10**9 + 7  # the held-out set's generator seed (independent of the run's seed)
    sample_seed = 4242  # offset of the offline commands' problems (bsb validate / evaluate / demo)

    def __init__(self, ops: tuple[int, ...] | list[int] = tuple(range(34, 51))):
        self.ops = tuple(int(n) for n in ops)
        if not self.ops or min(self.ops) < 1 or max(self.ops) > MAX_STEPS:
            raise ValueError(f"task option ops must be step counts in [1, {MAX_STEPS}], got {list(ops)}")

    def make(self, rng: random.Random, n_ops: int, pid: str) -> Problem:
        p = make_problem(rng, n_ops)
        return Problem(pid, p.prompt, p.answer, {"ops": n_ops, "walk": p})

    def answer_span(self, response: str) -> str | None:
        found = _ANSWER.findall(response)
        return found[-1] if found else None

    def answer_format(self) -> str:
        return f"End with '{SUFFIX} ' and the final letter ({', '.join(SYMBOLS)})."

    def verify(self, response: str, problem: Problem) -> Verdict:
        answer = self.answer_span(response)
        if answer is None:
            return Verdict(0.0, False, "no_answer")
        correct = answer == str(problem.answer)
        return Verdict(float(correct), correct, "correct" if correct else "wrong", answer)

    def reference(self, problem: Problem) -> str:
        """The reference chain of a problem of this task (what the embedded model was trained to write)."""
        return make_chain(_walk(problem), random.Random(0)).response

    def bsv_examples(self, n: int, seed: int = BSV_SEED) -> list[tuple[str, str, str, str]]:
        """(prompt, reference prefix, continuation, regime) for ``n`` problems, one cut each, every regime: BSV's
        fitting data (§3.4), drafted by the task from its own reference chains."""
        rng, out = random.Random(seed), []
        for i in range(n):
            p = self.make(rng, max(2, self.ops[i % len(self.ops)]), f"bsv-{i}")  # two steps at least: an interior cut
            walk = _walk(p)
            lines = make_chain(walk, rng).lines
            cut = rng.randrange(1, walk.n_ops)
            prefix = "".join(line + "\n" for line in lines[:cut])
            for regime, text in bsv_continuations(walk, cut, rng).items():
                out.append((p.prompt, prefix, text, regime))
        return out


def _walk(problem: Problem) -> WalkProblem:
    walk = (problem.meta or {}).get("walk")
    if not isinstance(walk, WalkProblem):
        raise TypeError(f"problem {problem.id!r} is not a walk problem")
    return walk
