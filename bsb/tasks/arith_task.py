"""The ``arith`` task: the embedded default's synthetic multi-step integer arithmetic (:mod:`bsb.tasks.synthetic`).

Problems are generated, never loaded: a fixed held-out set (seeded once, the same for every run and seed, so runs
compare question by question) and fresh training problems per step that are never held out. Answers are boxed
integers, graded like math (:class:`bsb.tasks.math_task.MathTask`).

Options: ``ops`` (operation counts of training problems; the held-out set cycles through them), ``max_operand``
(match the embedded model's), ``gate_chars``, ``suffix`` and ``read_len`` as for math.
"""

from __future__ import annotations

import random
from collections.abc import Collection

from bsb.tasks.math_grader import ANSWER_PREFIX
from bsb.tasks.math_task import MathTask
from bsb.tasks.synthetic import make_problem
from bsb.tasks.task import Problem, distinct_held_out, draw_fresh

HELD_OUT_SEED = 10**9  # the held-out set's generator seed (independent of the run's seed)
SAMPLE_SEED = 4242  # offset of the offline commands' problems (bsb validate / evaluate / demo)


class ArithTask(MathTask):
    name = "arith"

    def __init__(self, ops: tuple[int, ...] | list[int] = (2, 3), max_operand: int = 5, gate_chars: int | None = None,
                 suffix: str = ANSWER_PREFIX, read_len: int = 1):
        super().__init__(gate_chars=gate_chars, suffix=suffix, read_len=read_len)  # boxed answers, graded like math
        self.ops = tuple(int(n) for n in ops)
        if not self.ops or min(self.ops) < 1:
            raise ValueError(f"task option ops must be a non-empty list of operation counts >= 1, got {list(ops)}")
        if max_operand < 1:
            raise ValueError(f"task option max_operand must be >= 1, got {max_operand}")
        self.max_operand = max_operand

    def _problem(self, rng: random.Random, n_ops: int, pid: str) -> Problem:
        p = make_problem(rng, n_ops, self.max_operand)
        return Problem(pid, p.prompt, str(p.answer), {"ops": n_ops, "convention": "boxed"})

    def held_out(self, n: int) -> list[Problem]:
        return distinct_held_out(lambda rng, i: self._problem(rng, self.ops[i % len(self.ops)], f"val-{i}"), HELD_OUT_SEED, n,
                                 f"arith problems with ops={list(self.ops)} and max_operand={self.max_operand}")

    def draw(self, rng: random.Random, n: int, exclude: Collection[str]) -> list[Problem]:
        return draw_fresh(lambda r: self._problem(r, r.choice(self.ops), f"train-{r.getrandbits(48):012x}"), rng, n, exclude, "arith")

    def sample(self, n: int, seed: int = 0) -> list[Problem]:
        rng = random.Random(seed + SAMPLE_SEED)
        return [self._problem(rng, self.ops[i % len(self.ops)], f"arith-{seed}-{i}") for i in range(n)]
