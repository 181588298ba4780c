"""The ``reasoning_gym`` task: problems drawn from a `reasoning-gym <https://github.com/open-thought/reasoning-gym>`_
procedural dataset (``task_options.dataset``, ``gsm_symbolic`` by default: GSM8K's own templates with new numbers),
graded by that dataset's own ``score_answer``.

* Problems: ``reasoning_gym.create_dataset(dataset, size, seed, **options)``, every other task option being the
  dataset's own (``difficulty=...``; reasoning-gym checks them when the task is made). The held-out set is the
  dataset drawn with :data:`HELD_OUT_SEED`; each training draw takes a seed below :data:`TRAIN_SEEDS` from the run's
  generator. reasoning-gym generates item ``i`` of seed ``s`` from ``Random(s + i)``, so the two ranges of
  generator seeds never meet (held-out sets under 2**30 items), and a drawn problem whose text is held out is drawn
  again.
* A held-out file (``task_options.val_file``): the held-out set as :func:`held_out_file` writes it (``bsb data
  --dataset NAME --write FILE``), one JSONL row a problem with its provenance (dataset, options, generator seed and
  index, the reasoning-gym version that wrote it). Loading regenerates every row from its seed with the installed
  reasoning-gym and refuses the file where a question or an answer differs (another version, an edited file), so a
  committed benchmark is the benchmark it says it is; the file's row count bounds ``val_problems``.
* The answer: read from the format the prompt asks for (``answer=boxed``: the last ``\\boxed{}``, the default;
  ``answer_line``: an ``Answer:`` line); a response without one is ``no_answer`` (counted as ``no_answer_rate``).
* The reward: binary, 1.0 where ``score_answer`` gives 1.0 (correct) and 0 otherwise. reasoning-gym gives a wrong
  answer partial scores (gsm_symbolic 0.01 for any number that is not the answer): that is not a reward here; the
  score is kept in ``Verdict.details``. A scorer that raises on an answer is a zero with reason ``score_error``.

Optional: ``pip install 'belief-shift-branching[gym]'`` installs reasoning-gym.
"""

from __future__ import annotations

import json
import random
from collections.abc import Collection
from pathlib import Path
from typing import Any

from bsb.tasks.base import Problem, Task, Verdict
from bsb.tasks.math.grader import normalize
from bsb.tasks.math.task import FORMATS, SUFFIXES, extract

HELD_OUT_SEED = 2**31 + 7  # the held-out set's generator seeds are HELD_OUT_SEED + i
TRAIN_SEEDS = 2**30  # a training draw's seed is below this (its items' generator seeds below 2**30 + its size)
ANSWERS = ("boxed", "answer_line")
FILE_FIELDS = {"id": str, "question": str, "answer": str, "dataset": str, "options": dict, "seed": int, "index": int}


def gym_version() -> str:
    """The installed reasoning-gym's version, as its package metadata says (its ``__version__`` lags it)."""
    from importlib.metadata import version

    return version("reasoning-gym")


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

    def __init__(
        self, dataset: str = "gsm_symbolic", answer: str = "boxed", val_file: str | None = None, **options: Any
    ):
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
        self.val_file = val_file
        self._held: list[Problem] = self._read_held_out(Path(val_file)) if val_file else []

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
        if self.val_file and n > len(self._held):
            raise ValueError(f"task reasoning_gym: {n} held-out problems asked, {len(self._held)} in {self.val_file}")
        if n > len(self._held):
            self._held = self._problems(HELD_OUT_SEED, n, "heldout-")
        return self._held[:n]

    def _read_held_out(self, path: Path) -> list[Problem]:
        """The problems of a held-out file, each checked against what the installed reasoning-gym generates from the
        row's seed and index (module docstring)."""
        from bsb.tasks.data.files import read_rows

        rows = read_rows(path)  # the problem files' limits; a malformed line is one error naming it
        if not rows:
            raise ValueError(f"{path}: no problems")
        first = rows[0][1]
        for i, (where, row) in enumerate(rows):
            bad = [k for k, kind in FILE_FIELDS.items() if not isinstance(row, dict) or type(row.get(k)) is not kind]
            if bad:
                raise ValueError(
                    f"{path} {where}: not a held-out row (fields {', '.join(bad)} missing or of the wrong type); "
                    "write the file with bsb data --dataset NAME --write FILE"
                )
            if any(row[k] != first[k] for k in ("dataset", "options", "seed")) or row["index"] != i:
                raise ValueError(f"{path} {where}: rows must be items 0, 1, ... of one dataset, options and seed")
        if (first["dataset"], first["options"]) != (self.dataset, self.options):
            raise ValueError(
                f"{path} holds {first['dataset']} {first['options']}, the task is {self.dataset} {self.options}"
            )
        if first["seed"] < 2 * TRAIN_SEEDS:
            raise ValueError(f"{path}: seed {first['seed']} is in the training draws' range (held-out seeds >= 2**31)")
        made = self._problems(first["seed"], len(rows), "heldout-")
        for (where, row), p in zip(rows, made):
            if (row["id"], row["question"], row["answer"]) != (p.id, p.prompt, p.answer):
                raise ValueError(
                    f"{path} {where}: reasoning-gym {gym_version()} generates another problem {p.id} from this seed "
                    f"than the file holds (written by reasoning-gym {row.get('reasoning_gym', '?')}, or edited); "
                    f"install the version that wrote it"
                )
        return made

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


def held_out_file(dataset: str, n: int, **options: Any) -> str:
    """The first ``n`` held-out problems of ``dataset`` as the JSONL text the task reads back as ``val_file``: a row
    a problem with its provenance (module docstring)."""
    if n < 1:
        raise ValueError(f"a held-out file holds at least one problem, got {n}")
    task = ReasoningGymTask(dataset=dataset, **options)
    rows = []
    for i, p in enumerate(task.held_out(n)):
        row = {"id": p.id, "question": p.prompt, "answer": p.answer, "dataset": dataset, "options": task.options}
        rows.append(json.dumps(row | {"seed": HELD_OUT_SEED, "index": i, "reasoning_gym": gym_version()}) + "\n")
    return "".join(rows)
