"""The ``math`` task: problem files in any published schema (:mod:`bsb.tasks.data.schemas`), graded by
:class:`MathGrader` under each problem's answer convention.

Conventions (``problem.meta["convention"]``, set by the schema reader):

* ``boxed``: the last ``\\boxed{}``; the probe suffix is ``So the final answer is \\boxed{``;
* ``answer_line``: DAPO's ``Answer: ...`` line (verl ``math_dapo``'s extraction rule); the probe reads after
  ``Answer: ``;
* ``choice``: a multiple-choice letter, boxed or on an ``Answer:`` line; compared as a letter.

Several acceptable answers (``meta["answers"]``, ``match="any"``) pass when any one matches; OlympiadBench's
multiple-answer problems (``match="all"``) need every gold answer among the comma-separated boxed answers, and no
extra. Extracted answers are compared by the grader (normalised match, exact numbers, bounded symbolic
equivalence), so ``1/2`` and ``\\frac{1}{2}`` agree where verl's exact string rule would not.

Options (``task_options``): ``train_file`` (training problems; ``bsb train`` needs it), ``val_file`` (held-out
problems; validation and the offline commands), ``format`` (a schema name; None: recognised per file), ``gate_chars``
([TwoStage]'s derivation gate, 30 in the paper; boxed answers only), ``choice_seed`` (the seed of multiple-choice
option orders). The probe's suffix is the convention's and L is 1; the run's ``probe_suffix`` / ``read_len`` override
them (one knob each, :class:`bsb.engine.probe.ProbeConfig`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection

from bsb.tasks.answers import ANSWER_PREFIX, extract_answer_line, extract_boxed, split_top_level
from bsb.tasks.base import Problem, Task, Verdict
from bsb.tasks.data.files import load_problem_set
from bsb.tasks.data.schemas import CONVENTIONS
from bsb.tasks.math.grader import MathGrader, gated_reward, normalize

SUFFIXES = {"boxed": ANSWER_PREFIX, "answer_line": "Answer: ", "choice": ANSWER_PREFIX}
# what a prompt asks for so that the convention's answer can be read (Task.answer_format)
FORMATS = {
    "boxed": "Put the final answer in \\boxed{}.",
    "answer_line": "End with a line 'Answer: ' followed by the final answer.",
    "choice": "End with a line 'Answer: ' followed by the letter of your choice.",
}
_LETTER = re.compile(r"^\W*([A-D])\b")


def extract(response: str, convention: str) -> str | None:
    """The committed answer of ``response`` under ``convention``."""
    if convention == "answer_line":
        return extract_answer_line(response)
    if convention == "choice":
        raw = extract_boxed(response) or extract_answer_line(response)
        m = _LETTER.match(raw.replace("\\text{", "")) if raw else None
        return m.group(1) if m else None
    return extract_boxed(response)


class MathTask(Task):
    name = "math"

    def __init__(
        self,
        train_file: str | None = None,
        val_file: str | None = None,
        format: str | None = None,
        gate_chars: int | None = None,
        choice_seed: int = 0,
    ):
        if gate_chars is not None and gate_chars < 0:
            raise ValueError(f"task option gate_chars must be >= 0 or None, got {gate_chars}")
        self.gate_chars = gate_chars
        self.grader = MathGrader()
        # Loaded now, so a malformed file is an error before any model is loaded.
        self.train_set = load_problem_set(train_file, format, choice_seed) if train_file else None
        self.val_set = load_problem_set(val_file, format, choice_seed) if val_file else None
        self.train = self.train_set.problems if self.train_set else None
        self.val = self.val_set.problems if self.val_set else None
        self.train_file, self.val_file = train_file, val_file
        first = (self.train or self.val or [None])[0]
        self.convention = first.meta.get("convention", "boxed") if first is not None else "boxed"
        self.probe_suffix = SUFFIXES[self.convention]

    def held_out(self, n: int) -> list[Problem]:
        if self.val is None:
            raise ValueError("task math has no held-out problems: set task option val_file (a problem file)")
        return self.val[:n]

    def draw(self, rng: random.Random, n: int, exclude: Collection[str]) -> list[Problem]:
        if self.train is None:
            raise ValueError("task math has no training problems: set task option train_file (a problem file)")
        pool = [p for p in self.train if p.prompt not in exclude] if exclude else self.train
        if not pool:
            raise ValueError(f"every problem of {self.train_file} is also held out")
        return [pool[i] for i in rng.sample(range(len(pool)), min(n, len(pool)))]

    def answer_span(self, response: str) -> str | None:
        return extract(response, self.convention)

    def answer_format(self) -> str:
        return FORMATS[self.convention]

    def gold_continuation(self, problem: Problem) -> str:
        # the closing brace ends a boxed answer ("5" is then no prefix of "52"); a line break ends an Answer: line
        return f"{problem.answer}}}" if _convention(problem) != "answer_line" else f"{problem.answer}\n"

    def verify(self, response: str, problem: Problem) -> Verdict:
        convention = _convention(problem)
        pred = extract(response, convention)
        answer = normalize(pred) if pred is not None else ""
        if not answer:
            return Verdict(0.0, False, "no_answer")
        seen = self.grader.stats.copy()
        golds = [str(a) for a in problem.meta.get("answers", [problem.answer])]
        if convention == "choice":
            correct = answer.upper() == golds[0].strip().upper()
        elif problem.meta.get("match") == "all":
            correct = self.grader.match_all(split_top_level(pred), golds)
        else:
            correct = any(self.grader.equivalent(pred, g) for g in golds)
        if correct:
            gated = self.gate_chars is not None and convention == "boxed"
            reward = gated_reward(response, True, self.gate_chars) if gated else 1.0
            return Verdict(reward, True, "correct" if reward else "gate", answer)
        return Verdict(
            0.0, False, next(iter(self.grader.stats - seen), "wrong"), answer
        )  # "hostile", "timeout" or "wrong"


def _convention(problem: Problem) -> str:
    c = problem.meta.get("convention", "boxed")
    if c not in CONVENTIONS:
        raise ValueError(
            f"problem {problem.id}: unknown answer convention {c!r}; conventions are {', '.join(CONVENTIONS)}"
        )
    return c
