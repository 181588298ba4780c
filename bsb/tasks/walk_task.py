"""The ``walk`` task: the embedded default's walks on a map (:mod:`bsb.tasks.synthetic_walk`).

Problems are generated, never loaded: a fixed held-out set (seeded once, the same for every run and seed) and fresh
training problems per step that are never held out. A response states its answer after ``=>`` (the probe's
two-token suffix); with the walk tokenizer the answer is one token, so Probe-JS reads the whole final answer.

Options: ``ops`` (step counts of the problems; the held-out set cycles through them; 14-20 gives chains of a median
17 candidate boundaries).

:meth:`WalkTask.bsv_examples` drafts BSV's surge / steady / drop continuations from reference chains.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection

from bsb.tasks.synthetic_walk import (
    MAX_STEPS,
    SUFFIX,
    SYMBOLS,
    WalkProblem,
    bsv_continuations,
    make_chain,
    make_problem,
)
from bsb.tasks.task import Problem, Task, Verdict, distinct_held_out, draw_fresh

HELD_OUT_SEED = 10**9 + 7  # the held-out set's generator seed (independent of the run's seed)
SAMPLE_SEED = 4242  # offset of the offline commands' problems (bsb validate / evaluate / demo)
BSV_SEED = 777  # the problems BSV's continuations are drafted on (disjoint from the sample's seeds)
_ANSWER = re.compile(re.escape(SUFFIX) + r"\s*([" + SYMBOLS + r"])")


class WalkTask(Task):
    name = "walk"
    embedded_model = "walk"
    probe_suffix = SUFFIX
    read_len = 1

    def __init__(self, ops: tuple[int, ...] | list[int] = tuple(range(14, 21))):
        self.ops = tuple(int(n) for n in ops)
        if not self.ops or min(self.ops) < 1 or max(self.ops) > MAX_STEPS:
            raise ValueError(f"task option ops must be step counts in [1, {MAX_STEPS}], got {list(ops)}")

    def _problem(self, rng: random.Random, n_ops: int, pid: str) -> Problem:
        p = make_problem(rng, n_ops)
        return Problem(pid, p.prompt, p.answer, {"ops": n_ops, "walk": p})

    def held_out(self, n: int) -> list[Problem]:
        return distinct_held_out(lambda rng, i: self._problem(rng, self.ops[i % len(self.ops)], f"val-{i}"), HELD_OUT_SEED, n,
                                 f"walk problems with ops={list(self.ops)}")

    def draw(self, rng: random.Random, n: int, exclude: Collection[str]) -> list[Problem]:
        return draw_fresh(lambda r: self._problem(r, r.choice(self.ops), f"train-{r.getrandbits(48):012x}"), rng, n, exclude, "walk")

    def sample(self, n: int, seed: int = 0) -> list[Problem]:
        rng = random.Random(seed + SAMPLE_SEED)
        return [self._problem(rng, self.ops[i % len(self.ops)], f"walk-{seed}-{i}") for i in range(n)]

    def answer_span(self, response: str) -> str | None:
        found = _ANSWER.findall(response)
        return found[-1] if found else None

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
            p = self._problem(rng, max(2, self.ops[i % len(self.ops)]), f"bsv-{i}")  # two steps at least: an interior cut
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
