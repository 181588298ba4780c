"""The embedded code default's synthetic task: programs that compute an arithmetic recipe through named variables.

A problem states a recipe ("Read an integer x, then compute:", one ``a = x + 3`` line per step, "Print b.") in one of
two styles, each tested like competitive programming: ``stdin`` (the program reads x and prints the result; hidden
tests are input/output pairs) or ``function`` (``def f(x)`` returns it; hidden tests call ``f``). Its reference
program writes one line per step, so candidate boundaries fall between steps, and training chains carry a
``wrong`` detour (one step's operator or constant changed, so some hidden tests fail) at ``detour_frac``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

NAMES = "abcdefgh"
OPS = "+-*"
TEST_INPUTS = 3  # hidden tests per problem


@dataclass(frozen=True)
class CodeRecipe:
    style: str  # "stdin" | "function"
    steps: tuple[tuple[str, str, str, str], ...]  # (name, left, op, right): name = left op right
    inputs: tuple[int, ...]  # the hidden tests' x

    @property
    def n_ops(self) -> int:
        return len(self.steps)

    @property
    def result(self) -> str:
        return self.steps[-1][0]

    def value(self, x: int, steps=None) -> int:
        env = {"x": x}
        for name, left, op, right in steps or self.steps:
            a, b = (env[v] if v in env else int(v) for v in (left, right))
            env[name] = a + b if op == "+" else a - b if op == "-" else a * b
        return env[self.result]

    @property
    def prompt(self) -> str:
        head = "Read an integer x, then compute:" if self.style == "stdin" else "Write a function f(x) that computes:"
        lets = "\n".join(f"{n} = {a} {o} {b}" for n, a, o, b in self.steps)
        tail = f"Print {self.result}." if self.style == "stdin" else f"Return {self.result}."
        return f"{head}\n{lets}\n{tail}\n"

    def program(self, steps=None) -> str:
        steps = steps or self.steps
        if self.style == "stdin":
            lines = ["x = int(input())", *(f"{n} = {a} {o} {b}" for n, a, o, b in steps), f"print({self.result})"]
        else:
            lines = ["def f(x):", *(f"    {n} = {a} {o} {b}" for n, a, o, b in steps), f"    return {self.result}"]
        return "```python\n" + "\n".join(lines) + "\n```"


def make_recipe(rng: random.Random, n_ops: int, max_operand: int = 9, style: str | None = None) -> CodeRecipe:
    """A recipe of ``n_ops`` steps; each step combines an earlier variable (or x) with a constant or another one."""
    if not 1 <= n_ops <= len(NAMES):
        raise ValueError(f"n_ops must be in [1, {len(NAMES)}], got {n_ops}")
    style = style or rng.choice(("stdin", "function"))
    known, steps = ["x"], []
    for i in range(n_ops):
        left = known[-1] if rng.random() < 0.7 else rng.choice(known)
        right = str(rng.randint(1, max_operand)) if rng.random() < 0.7 or len(known) == 1 else rng.choice(known)
        steps.append((NAMES[i], left, rng.choice(OPS), right))
        known.append(NAMES[i])
    inputs = tuple(rng.sample(range(0, 10), TEST_INPUTS))
    return CodeRecipe(style, tuple(steps), inputs)


def wrong_steps(rng: random.Random, recipe: CodeRecipe) -> tuple[tuple[str, str, str, str], ...]:
    """The steps with one operator or constant changed so that at least one hidden test fails (the detour)."""
    for _ in range(50):
        i = rng.randrange(recipe.n_ops)
        name, left, op, right = recipe.steps[i]
        if right.isdigit() and rng.random() < 0.5:
            right = str(int(right) + rng.choice((-1, 1)) or 2)
        else:
            op = rng.choice([o for o in OPS if o != op])
        steps = recipe.steps[:i] + ((name, left, op, right),) + recipe.steps[i + 1 :]
        if any(recipe.value(x, steps) != recipe.value(x) for x in recipe.inputs):
            return steps
    return recipe.steps


def training_programs(
    n: int, seed: int = 0, ops=(1, 2, 3, 4), detour_frac: float = 0.2, max_operand: int = 9
) -> list[tuple[CodeRecipe, str]]:
    """``n`` (recipe, response) pairs for supervised training."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        recipe = make_recipe(rng, rng.choice(ops), max_operand)
        steps = wrong_steps(rng, recipe) if rng.random() < detour_frac else recipe.steps
        out.append((recipe, recipe.program(steps)))
    return out
