"""The ``reasoning_gym`` task: problems drawn from a `reasoning-gym <https://github.com/open-thought/reasoning-gym>`_
procedural dataset (``task_options.dataset``, ``gsm_symbolic`` by default: GSM8K's own templates with new numbers),
graded by that dataset's own ``score_answer``.

* Problems: ``reasoning_gym.create_dataset(dataset, size, seed, **options)``, every other task option being the
  dataset's own (``difficulty=...``; reasoning-gym checks them when the task is made). The held-out set is the
  dataset drawn with :data:`HELD_OUT_SEED`; each training draw takes a seed below :data:`TRAIN_SEEDS` from the run's
  generator. reasoning-gym generates item ``i`` of seed ``s`` from ``Random(s + i)``, so the two ranges of
  generator seeds never meet (held-out sets under 2**30 items), and a drawn problem whose text is held out is drawn
  again.
* The answer: read from the format the prompt asks for (``answer=boxed``: the last ``\\boxed{}``, the default;
  ``answer_line``: an ``Answer:`` line); a response without one is ``no_answer`` (counted as ``no_answer_rate``).
* The reward: binary, 1.0 where ``score_answer`` gives 1.0 (correct) and 0 otherwise. reasoning-gym gives a wrong
  answer partial scores (gsm_symbolic 0.01 for any number that is not the answer): that is not a reward here; the
  score is kept in ``Verdict.details``. A scorer that raises on an answer is a zero with reason ``score_error``.

Optional: ``pip install 'belief-shift-branching[gym]'`` installs reasoning-gym.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from typing import Any

from bsb.tasks.base import Problem, Task, Verdict
from bsb.tasks.math.grader import normalize
from bsb.tasks.math.task import FORMATS, SUFFIXES, extract

HELD_OUT_SEED = 2**31 + 7  # the held-out set's generator seeds are HELD_OUT_SEED + i
TRAIN_SEEDS = 2**30  # a training draw's seed is below this (its items' generator seeds below 2**30 + its size)
ANSWERS = ("boxed", "answer_line")


def _gym():
    try:
        import reasoning_gym
    except ImportError as err:
        raise ImportError(
            "task reasoning_gym needs reasoning-gym: pip install 'belief-shift-branching[gym]' (reasoning-gym==0.1.25)"
        ) from err
    return reasoning_gym


class ReasoningGymTask(Task):
    name = "reasoning_gym"
    read_len = 1

    def __init__(self, dataset: str = "gsm_symbolic", answer: str = "boxed", **options: Any):
        if answer not in ANSWERS:
            raise ValueError(f"task option answer must be one of {', '.join(ANSWERS)}, got {answer!r}")
        gym = _gym()
        from reasoning_gym.factory import DATASETS

        if dataset not in DATASETS:
            near = sorted(n for n in DATASETS if dataset.split("_")[0] in n)[:8]
            raise ValueError(
                f"task reasoning_gym: no reasoning-gym dataset {dataset!r}"
                + (f"; similar: {', '.join(near)}" if near else f"; there are {len(DATASETS)}, e.g. gsm_symbolic")
            )
        self.dataset, self.options, self.convention = dataset, dict(options), answer
        self.probe_suffix = SUFFIXES[answer]
        try:  # the dataset's own options checked now, before any model is loaded
            self._scorer = gym.create_dataset(dataset, size=1, seed=HELD_OUT_SEED, **self.options)
        except (TypeError, ValueError, AssertionError) as err:  # its config's own check (an assert, often bare)
            why = str(err) or f"{type(err).__name__} in its config's check"
            raise ValueError(
                f"task reasoning_gym: dataset {dataset!r} refuses the options {self.options}: {why}"
            ) from None
        self._held: list[Problem] = []

    def _problems(self, seed: int, n: int, tag: str) -> list[Problem]:
        data = _gym().create_dataset(self.dataset, size=n, seed=seed, **self.options)
        out = []
        for i in range(n):
            entry = data[i]
            out.append(
                Problem(
                    f"{self.dataset}-{tag}{seed}-{i}",
                    entry["question"],
                    str(entry["answer"]),
                    {"entry": entry, "dataset": self.dataset, "convention": self.convention},
                )
            )
        return out

    def held_out(self, n: int) -> list[Problem]:
        if n > len(self._held):
            self._held = self._problems(HELD_OUT_SEED, n, "heldout-")
        return self._held[:n]

    def sample(self, n: int, seed: int = 0) -> list[Problem]:
        return self.held_out(n)

    def draw(self, rng: random.Random, n: int, exclude: Collection[str]) -> list[Problem]:
        out: list[Problem] = []
        for _ in range(100):
            out += [p for p in self._problems(rng.randrange(TRAIN_SEEDS), n, "") if p.prompt not in exclude]
            if len(out) >= n:
                return out[:n]
        raise ValueError(f"task reasoning_gym: {self.dataset} keeps drawing held-out problems; hold out fewer")

    def answer_span(self, response: str) -> str | None:
        return extract(response, self.convention)

    def answer_format(self) -> str:
        return FORMATS[self.convention]

    def gold_continuation(self, problem: Problem) -> str:
        return f"{problem.answer}}}" if self.convention == "boxed" else f"{problem.answer}\n"

    def score(self, answer: str, problem: Problem) -> float:
        """The dataset's own ``score_answer`` of an extracted answer (its partial credit included)."""
        return float(self._scorer.score_answer(answer, problem.meta["entry"]))

    def verify(self, response: str, problem: Problem) -> Verdict:
        pred = extract(response, self.convention)
        answer = normalize(pred) if pred is not None else ""
        if not answer:
            return Verdict(0.0, False, "no_answer")
        try:
            score = self.score(pred, problem)
        except Exception as err:  # a dataset's scorer on a hostile answer: a counted zero, never a crash
            return Verdict(0.0, False, "score_error", answer, (("score_answer", f"{type(err).__name__}: {err}"),))
        ok = score == 1.0
        return Verdict(float(ok), ok, "correct" if ok else "wrong", answer, (("score_answer", score),))
