"""The ``math`` task: problems from JSONL/Parquet files, answers in ``\\boxed{}``, graded by :class:`MathGrader`.

Options (``task_options`` in the trainer's config):

* ``train_file``: training problems (needed by ``bsb train``); ``val_file``: held-out problems (validation
  during training, and the problems of ``bsb validate`` / ``evaluate`` / ``demo``).
* ``gate_chars``: seed 001's derivation gate (§4.1): a correct answer pays only if ``\\boxed`` starts at least
  this many characters into the response (30 in the paper); None turns it off.
* ``suffix``: the probes' elicitation suffix (default ``So the final answer is \\boxed{``); ``read_len``: L.
"""

from __future__ import annotations

import random
from collections.abc import Collection

from bsb.tasks.math_grader import ANSWER_PREFIX, MathGrader, extract_boxed, gated_reward, normalize
from bsb.tasks.problems import load_problems
from bsb.tasks.task import Problem, Task, Verdict


class MathTask(Task):
    name = "math"

    def __init__(self, train_file: str | None = None, val_file: str | None = None, gate_chars: int | None = None,
                 suffix: str = ANSWER_PREFIX, read_len: int = 1):
        if gate_chars is not None and gate_chars < 0:
            raise ValueError(f"task option gate_chars must be >= 0 or None, got {gate_chars}")
        if not suffix:
            raise ValueError("task option suffix must be a non-empty elicitation suffix")
        if read_len < 1:
            raise ValueError(f"task option read_len must be >= 1, got {read_len}")
        self.gate_chars, self.probe_suffix, self.read_len = gate_chars, suffix, read_len
        self.grader = MathGrader()
        # Loaded now, so a malformed file is an error before any model is loaded.
        self.train = load_problems(train_file) if train_file else None
        self.val = load_problems(val_file) if val_file else None
        self.train_file, self.val_file = train_file, val_file

    def held_out(self, n: int) -> list[Problem]:
        if self.val is None:
            raise ValueError("task math has no held-out problems: set task option val_file (a JSONL/Parquet problem file)")
        return self.val[:n]

    def draw(self, rng: random.Random, n: int, exclude: Collection[str]) -> list[Problem]:
        if self.train is None:
            raise ValueError("task math has no training problems: set task option train_file (a JSONL/Parquet problem file)")
        pool = [p for p in self.train if p.prompt not in exclude] if exclude else self.train
        if not pool:
            raise ValueError(f"every problem of {self.train_file} is also held out")
        return [pool[i] for i in rng.sample(range(len(pool)), min(n, len(pool)))]

    def answer_span(self, response: str) -> str | None:
        return extract_boxed(response)

    def verify(self, response: str, problem: Problem) -> Verdict:
        pred = extract_boxed(response)
        answer = normalize(pred) if pred is not None else ""
        if not answer:
            return Verdict(0.0, False, "no_answer")
        seen = self.grader.stats.copy()
        if self.grader.grade(response, str(problem.answer)):
            reward = gated_reward(response, True, self.gate_chars) if self.gate_chars is not None else 1.0
            return Verdict(reward, True, "correct" if reward else "gate", answer)
        return Verdict(0.0, False, next(iter(self.grader.stats - seen), "wrong"), answer)  # "hostile", "timeout" or "wrong"

    def gold_continuation(self, problem: Problem) -> str:
        return f"{problem.answer}}}"  # the closing brace ends the boxed answer: "5" is then no prefix of "52"
