"""A task defined outside the bsb package (tests load it as ``own_task:EvenOdd``): is a number even or odd?"""

import random

from bsb.tasks.base import Problem, Task, Verdict


class EvenOdd(Task):
    name = "even_odd"
    probe_suffix = "So the final answer is \\boxed{"

    def __init__(self, top: int = 50):
        self.top = top

    def _problem(self, n: int, pid: str) -> Problem:
        return Problem(pid, f"Compute {n} - {n % 2}.\n", str(n - n % 2))

    def held_out(self, n):
        return [self._problem(i, f"v{i}") for i in range(n)]

    def draw(self, rng: random.Random, n, exclude):
        out = []
        while len(out) < n:
            p = self._problem(rng.randint(0, self.top), f"t{len(out)}")
            if p.prompt not in exclude:
                out.append(p)
        return out

    def answer_span(self, response):
        return response.rsplit("{", 1)[-1].split("}")[0] if "{" in response else None

    def verify(self, response, problem):
        ans = self.answer_span(response)
        ok = ans is not None and ans.strip() == problem.answer
        return Verdict(float(ok), ok, "correct" if ok else "wrong", ans or "")


class NotATask:
    probe_suffix = "x"
