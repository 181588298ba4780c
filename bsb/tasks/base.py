"""The Task protocol: what is being learned, as the trainer, validation, evaluation and the demo see it.

A task owns everything domain-specific, so the layers above it hold none:

* its problems: a fixed held-out set (:meth:`Task.held_out`), fresh training problems per step (:meth:`Task.draw`)
  and a sample for the offline commands (:meth:`Task.sample`);
* the prompt format (:meth:`Task.format_prompt`);
* the probe: the elicitation suffix text after which a belief is read (:attr:`Task.probe_suffix`) and the read
  length L (:attr:`Task.read_len`, 1 for math, 16 for code in the paper);
* the committed-answer span that Lens-Shift teacher-forces (:meth:`Task.answer_span`), at most
  :attr:`Task.answer_len` tokens of it where the task sets one (code: the program's first L tokens);
* the verifier (:meth:`Task.verify`), whose :class:`Verdict` carries the reward, the correctness the trainer
  reports as accuracy, a reason, and the normalised answer that votes and fork contrasts compare.

Optional hooks, declared here with their defaults (a task overrides what it supports):

* :attr:`Task.embedded_model`: which embedded default ``model: embedded`` resolves to (``walk``, ``arith``, ``code``;
  None: the arithmetic model);
* :meth:`Task.bsv_examples`: BSV's fitting drafts (§3.4), or None when the task drafts none;
* :meth:`Task.parse_answer`: a gold answer stored elsewhere (a verl row's ground truth) as the task's answer;
* :meth:`Task.answer_format`: an instruction asking for the answer the verifier reads (the trainer names it when
  nearly every response holds none: a verdict reason in :data:`NO_ANSWER_REASONS`).

Subclass :class:`Task` (its options are the keyword arguments of ``__init__``), or write any class with the same
attributes; :func:`bsb.tasks.registry.make_task` checks either before a model is loaded. Generated tasks subclass
:class:`SyntheticTask`, which writes the held-out / draw / sample triplet once.
"""

from __future__ import annotations

import functools
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

# What a task object must offer (checked by bsb.tasks.registry.check_task for classes that do not subclass Task).
METHODS = ("held_out", "draw", "sample", "format_prompt", "answer_span", "verify", "gold_continuation")
ATTRIBUTES = ("name", "probe_suffix", "read_len")
# The optional hooks, with the defaults :class:`Task` gives them (a class that does not subclass Task gets these).
HOOKS = ("embedded_model", "bsv_examples", "parse_answer", "answer_format", "answer_len")
# Verdict reasons meaning the response holds no answer the task can read (counted as ``no_answer_rate``)
NO_ANSWER_REASONS = frozenset({"no_answer", "no_code"})


@dataclass(frozen=True)
class Problem:
    id: str  # unique within a problem set
    prompt: str  # the problem text (before the task's prompt format)
    answer: Any  # the gold answer in the form the task's verifier reads (a string for math)
    meta: Mapping[str, Any] = field(default_factory=dict)  # anything else the task keeps (difficulty, source row)


@dataclass(frozen=True)
class Verdict:
    reward: float  # the verifier's reward (after task rules such as the derivation gate; before the overlong penalty)
    correct: bool  # the ungated verdict: what accuracy counts
    reason: str = ""  # "correct", "wrong", "no_answer", "gate", "hostile", "timeout", ... (counted in metrics)
    answer: str = ""  # the normalised committed answer ("" when there is none): what votes compare
    details: tuple = ()  # per-check results kept for analysis (code: one (status, passed, reason) per hidden test)


def distinct_held_out(make: Callable[[random.Random, int], Problem], seed: int, n: int, what: str) -> list[Problem]:
    """A synthetic task's :meth:`Task.held_out`: ``n`` distinct problems ``make(rng, i)`` (``i``: the index of the
    next one) from a generator seeded with ``seed``; an error naming ``what`` when the generator keeps repeating."""
    rng, out, seen = random.Random(seed), [], set()
    for _ in range(1000 * n):
        if len(out) == n:
            return out
        p = make(rng, len(out))
        if p.prompt not in seen:
            seen.add(p.prompt)
            out.append(p)
    raise ValueError(f"only {len(out)} distinct {what}; ask for fewer held-out problems or widen the task")


def draw_fresh(
    make: Callable[[random.Random], Problem], rng: random.Random, n: int, exclude: Collection[str], what: str
) -> list[Problem]:
    """``n`` generated problems (``make(rng)``) whose prompts are not in ``exclude``: a synthetic task's
    :meth:`Task.draw`; an error when the generator keeps repeating held-out prompts."""
    out = []
    for _ in range(1000 * n):
        if len(out) == n:
            return out
        p = make(rng)
        if p.prompt not in exclude:
            out.append(p)
    raise ValueError(
        f"the held-out set covers (almost) every {what} problem of this difficulty: hold out fewer problems"
    )


class Task(ABC):
    """Base class of a task. Subclasses set :attr:`name` and implement the abstract methods."""

    name: ClassVar[str] = "task"
    probe_suffix: str = ""  # elicitation suffix text: the probe reads the belief after prefix[:t] + suffix
    read_len: int = 1  # L, probe read positions after the suffix
    embedded_model: ClassVar[str | None] = None  # the embedded default `model: embedded` resolves to (None: arith)
    # the committed answer Lens-Shift teacher-forces (and the figures' gold answer): its first answer_len tokens
    # (None: all of it)
    answer_len: ClassVar[int | None] = None

    @abstractmethod
    def held_out(self, n: int) -> list[Problem]:
        """The first ``n`` problems of a fixed held-out set (the same for every run and seed)."""

    @abstractmethod
    def draw(self, rng: random.Random, n: int, exclude: Collection[str]) -> list[Problem]:
        """``n`` training problems for one generation round, drawn with ``rng``; never one whose prompt is in
        ``exclude`` (the held-out prompts)."""

    def sample(self, n: int, seed: int = 0) -> list[Problem]:
        """``n`` problems for the offline commands (validate, evaluate, demo); the held-out set by default."""
        return self.held_out(n)

    def format_prompt(self, problem: Problem) -> str:
        """The text the model sees before its response."""
        return problem.prompt

    @abstractmethod
    def answer_span(self, response: str) -> str | None:
        """The committed answer in ``response`` (the text Lens-Shift teacher-forces after the suffix), or None."""

    @abstractmethod
    def verify(self, response: str, problem: Problem) -> Verdict:
        """Grade a decoded response against the problem."""

    def gold_continuation(self, problem: Problem) -> str:
        """The gold answer as it follows the elicitation suffix (the figures draw the model's belief in it)."""
        return str(problem.answer)

    # ------------------------------------------------------------------ optional hooks
    def bsv_examples(self, n: int) -> list[tuple[str, str, str, str]] | None:
        """(prompt, reference prefix, continuation, regime) drafts for BSV's fit (§3.4), or None: this task drafts
        none (BSV then needs drafts from elsewhere)."""
        return None

    def answer_format(self) -> str:
        """An instruction a prompt can carry to ask for the answer :meth:`verify` reads, as the model should read it
        (e.g. ``Put the final answer in \\boxed{}.``); empty where the task names none."""
        return ""

    def parse_answer(self, raw: Any) -> Any:
        """A gold answer stored outside the task's own loaders (a verl row's ``reward_model.ground_truth``) in the
        form :meth:`verify` reads; unchanged by default."""
        return raw


def hook(task: Any, name: str) -> Any:
    """An optional hook of ``task`` (one of :data:`HOOKS`); :class:`Task`'s default where the task has none, sets it
    to None, or is None itself (a verl row read without a task)."""
    if name not in HOOKS:
        raise KeyError(f"{name!r} is not an optional Task hook; the hooks are {', '.join(HOOKS)}")
    value = getattr(task, name, None)
    if value is not None:
        return value
    default = getattr(Task, name)
    return functools.partial(default, task) if callable(default) else default


class SyntheticTask(Task):
    """A task whose problems are generated, never loaded: a fixed held-out set (seeded once with
    :attr:`held_out_seed`, the same for every run and seed), fresh training problems per step that are never held
    out, and a sample for the offline commands (offset by :attr:`sample_seed`). Subclasses set :attr:`ops` (the
    difficulties; the held-out set and the sample cycle through them) and implement :meth:`make`."""

    held_out_seed: ClassVar[int] = 10**9 + 7
    sample_seed: ClassVar[int] = 4242
    kind: ClassVar[str] = "synthetic"  # how errors name this task's problems
    ops: tuple[int, ...] = ()

    @abstractmethod
    def make(self, rng: random.Random, n_ops: int, pid: str) -> Problem:
        """One problem of difficulty ``n_ops`` with id ``pid``, drawn with ``rng``."""

    def describe(self) -> str:
        return f"{self.kind} problems with ops={list(self.ops)}"

    def held_out(self, n: int) -> list[Problem]:
        return distinct_held_out(
            lambda rng, i: self.make(rng, self.ops[i % len(self.ops)], f"val-{i}"),
            self.held_out_seed,
            n,
            self.describe(),
        )

    def draw(self, rng: random.Random, n: int, exclude: Collection[str]) -> list[Problem]:
        return draw_fresh(
            lambda r: self.make(r, r.choice(self.ops), f"train-{r.getrandbits(48):012x}"), rng, n, exclude, self.kind
        )

    def sample(self, n: int, seed: int = 0) -> list[Problem]:
        rng = random.Random(seed + self.sample_seed)
        return [self.make(rng, self.ops[i % len(self.ops)], f"{self.name}-{seed}-{i}") for i in range(n)]
