"""The ``arith`` task: synthetic multi-step integer arithmetic (the earlier embedded miniature, ``--set task=arith``).

A problem is a random expression tree over ``+ - *`` with ``n_ops`` operations, operands in
``[0, max_operand]`` and, when ``parens`` is on, sub-expressions that need parentheses. Its reference chain
reduces one operation per step (the leftmost operation whose operands are both numbers, which respects
precedence because the tree encodes it) and ends with ``\\boxed{answer}``.

Training chains also carry realistic detours, so that a model trained on them changes its answer belief
mid-chain and its sampled chains have real pivots:

* ``wrong``: one step is computed wrong (off by 1-3) and the error propagates to a wrong final answer.
* ``corrected``: one step is computed wrong, the next line catches it ("wait, 3 * 4 = 12, not 13") and the
  chain continues from the right value to the right answer.

:class:`ArithTask` is the ``arith`` task on these problems: boxed integer answers graded like math
(:class:`bsb.tasks.math.task.MathTask`). Options: ``ops`` (operation counts; the held-out set cycles through them),
``max_operand`` (match the embedded model's), ``gate_chars`` as for math; the probe reads after ``Answer: ``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Union

from bsb.tasks.answers import ANSWER_PREFIX  # how every chain states its answer
from bsb.tasks.base import Problem, SyntheticTask
from bsb.tasks.math.task import MathTask

Tree = Union[int, "Op"]  # noqa: UP007


@dataclass(frozen=True)
class Op:
    op: str
    left: Tree
    right: Tree


_PREC = {"+": 1, "-": 1, "*": 2}


def _apply(op: str, a: int, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def render(t: Tree, parent: str | None = None, right: bool = False) -> str:
    """Parentheses where a child binds weaker than its parent, or is a right operand at equal precedence (so the
    text parses back, left-associatively, to this very tree and the reduction order reads left to right);
    negative numbers are parenthesised."""
    if isinstance(t, int):
        return f"({t})" if t < 0 else str(t)
    s = f"{render(t.left, t.op)} {t.op} {render(t.right, t.op, right=True)}"
    if parent is not None and (_PREC[t.op] < _PREC[parent] or (right and _PREC[t.op] == _PREC[parent])):
        return f"({s})"
    return s


def evaluate(t: Tree) -> int:
    return t if isinstance(t, int) else _apply(t.op, evaluate(t.left), evaluate(t.right))


@dataclass(frozen=True)
class ArithProblem:
    tree: Tree
    n_ops: int

    @property
    def expression(self) -> str:
        return render(self.tree)

    @property
    def answer(self) -> int:
        return evaluate(self.tree)

    @property
    def prompt(self) -> str:
        return f"Compute {self.expression}.\n"


def make_problem(rng: random.Random, n_ops: int, max_operand: int = 9, parens: bool = True) -> ArithProblem:
    """A random problem with exactly ``n_ops`` operations (``*`` at most once per three ops keeps values small)."""
    if n_ops < 1 or max_operand < 1:
        raise ValueError("n_ops and max_operand must be >= 1")

    def build(k: int) -> Tree:
        if k == 0:
            return rng.randint(0, max_operand)
        if parens:
            left_k = rng.randint(0, k - 1)
        else:  # a left-deep chain: evaluation order is left to right (apart from precedence)
            left_k = k - 1
        op = rng.choice("+-*" if rng.random() < 1 / 3 else "+-")
        return Op(op, build(left_k), build(k - 1 - left_k))

    return ArithProblem(build(n_ops), n_ops)


def _reduce_once(t: Tree, wrong_by: int = 0) -> tuple[Tree, tuple[str, int, int, int] | None]:
    """Reduce the leftmost operation with two number operands; returns the new tree and (op, a, b, written)."""
    if isinstance(t, int):
        return t, None
    if isinstance(t.left, int) and isinstance(t.right, int):
        value = _apply(t.op, t.left, t.right) + wrong_by
        return value, (t.op, t.left, t.right, value)
    left, step = _reduce_once(t.left, wrong_by)
    if step is not None:
        return Op(t.op, left, t.right), step
    right, step = _reduce_once(t.right, wrong_by)
    return Op(t.op, t.left, right), step


@dataclass(frozen=True)
class Chain:
    problem: ArithProblem
    response: str
    final_answer: int
    kind: str  # correct | wrong | corrected
    pivot_line: int | None  # the line (0-based) of the wrong step, if any

    @property
    def text(self) -> str:
        return self.problem.prompt + self.response


def make_chain(problem: ArithProblem, rng: random.Random, kind: str = "correct") -> Chain:
    """A chain for ``problem``: one reduced operation per step (two lines), then ``\\boxed{answer}``."""
    if kind not in ("correct", "wrong", "corrected"):
        raise ValueError(f"kind must be 'correct', 'wrong' or 'corrected', got {kind!r}")
    for _ in range(100):  # a wrong step can be erased later (· 0); draw again until it is not
        chain = _try_chain(problem, rng, kind)
        if chain is not None:
            return chain
    raise ValueError(f"could not build a {kind!r} chain for {problem.expression}")


def _num(x: int) -> str:
    return f"({x})" if x < 0 else str(x)


def _try_chain(problem: ArithProblem, rng: random.Random, kind: str) -> Chain | None:
    """Each step is two lines: the operation it reduces with its value (``4 * 5 = 20``), then the expression
    with that operation replaced (``= 3 + 20 - 2``). Stating the operation first makes every value a lookup of
    one small fact and every expression a copy, which a tiny model learns in minutes."""
    lines, tree = [], problem.tree
    bad_step = rng.randrange(problem.n_ops) if kind != "correct" else None
    pivot = None
    for step in range(problem.n_ops):
        if step == bad_step:
            wrong_by = rng.choice([-3, -2, -1, 1, 2, 3])
            wrong_tree, (op, a, b, written) = _reduce_once(tree, wrong_by)
            pivot = len(lines)
            lines.append(f"{_num(a)} {op} {_num(b)} = {_num(written)}")
            if kind == "wrong":
                tree = wrong_tree
                lines.append(f"= {render(tree)}")
                continue
            tree, _ = _reduce_once(tree)
            lines.append(f"wait, {_num(a)} {op} {_num(b)} = {_num(_apply(op, a, b))}, not {_num(written)}")
            lines.append(f"= {render(tree)}")
            continue
        tree, (op, a, b, value) = _reduce_once(tree)
        lines.append(f"{_num(a)} {op} {_num(b)} = {_num(value)}")
        lines.append(f"= {render(tree)}")
    final = evaluate(tree)
    if kind == "wrong" and final == problem.answer:
        return None
    response = "\n".join(lines) + f"\n{ANSWER_PREFIX}{final}}}."
    return Chain(problem, response, final, kind, pivot)


def training_chains(
    n: int, seed: int, ops: tuple[int, ...] = (1, 2, 3, 4), detour_frac: float = 0.3, max_operand: int = 9
) -> list[Chain]:
    """A deterministic training set: difficulties drawn from ``ops``; a fraction ``detour_frac`` of the chains
    take a detour, split evenly between wrong and corrected."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        problem = make_problem(rng, rng.choice(ops), max_operand)
        r = rng.random()
        kind = "correct" if r >= detour_frac else ("wrong" if r < detour_frac / 2 else "corrected")
        out.append(make_chain(problem, rng, kind))
    return out


# ---------------------------------------------------------------------- the task


class ArithTask(SyntheticTask, MathTask):
    name = "arith"
    kind = "arith"
    held_out_seed = 10**9  # the held-out set's generator seed (independent of the run's seed)
    sample_seed = 4242  # offset of the offline commands' problems (bsb validate / evaluate / demo)

    def __init__(
        self,
        ops: tuple[int, ...] | list[int] = (2, 3),
        max_operand: int = 5,
        gate_chars: int | None = None,
    ):
        super().__init__(gate_chars=gate_chars)  # boxed answers, graded like math
        self.probe_suffix = ANSWER_PREFIX
        self.ops = tuple(int(n) for n in ops)
        if not self.ops or min(self.ops) < 1:
            raise ValueError(f"task option ops must be a non-empty list of operation counts >= 1, got {list(ops)}")
        if max_operand < 1:
            raise ValueError(f"task option max_operand must be >= 1, got {max_operand}")
        self.max_operand = max_operand

    def make(self, rng: random.Random, n_ops: int, pid: str) -> Problem:
        p = make_problem(rng, n_ops, self.max_operand)
        return Problem(pid, p.prompt, str(p.answer), {"ops": n_ops, "convention": "boxed"})

    def describe(self) -> str:
        return f"{super().describe()} and max_operand={self.max_operand}"
