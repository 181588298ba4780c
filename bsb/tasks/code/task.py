"""The ``code`` task: programs graded by hidden tests in the sandbox ([Fork]'s second domain).

* Problems: DeepCoder / LiveCodeBench files (``train_file``, ``val_file``; :mod:`bsb.tasks.code.problems`), or,
  without files, the embedded code default's synthetic recipes (:mod:`bsb.tasks.synthetic.code`).
* The probe: a fenced-code elicitation suffix and L = 16 read positions (§3.2, App. B: the belief over the program
  the model would write from here).
* The reward: binary, 1 when every hidden test passes (the last fenced block of the response is the program). Each
  test's sandbox status is kept in ``Verdict.details``; the reason is ``correct``, ``wrong`` (ran, wrong output),
  ``no_code``, ``syntax_error``, or the first failing run's sandbox status (``timeout``, ``memory``, ...).

Options: ``train_file``, ``val_file``, ``format`` (deepcoder | livecodebench; None: recognised), ``ops`` and
``max_operand`` (the synthetic problems), ``timeout_s`` and ``memory_mb`` (per test run), ``workers`` (sandbox runs
at once), ``suffix``, ``read_len``.
"""

from __future__ import annotations

import ast
import json
import math
import random
import re
from collections.abc import Collection

from bsb.tasks.base import Problem, SyntheticTask, Verdict
from bsb.tasks.code.problems import CodeTests, load_code_problems, parse_tests
from bsb.tasks.code.sandbox import SandboxPool
from bsb.tasks.data.schemas import RowError
from bsb.tasks.synthetic.code import make_recipe

CODE_SUFFIX = "\nFinal program:\n```python\n"
FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S)
RESULT = "@@bsb-result@@"
# The function's name is data (a quoted literal, looked up at run time in the program's own namespace), never code:
# a name from a data file cannot call anything the program did not define, a builtin included.
HARNESS = """

import json as _bsb_json, sys as _bsb_sys
_bsb_name = {fn!r}
_bsb_args = [_bsb_json.loads(_l) for _l in _bsb_sys.stdin.read().split("\\n") if _l.strip()]
_bsb_solution = globals().get("Solution")
if isinstance(_bsb_solution, type) and hasattr(_bsb_solution, _bsb_name):
    _bsb_fn = getattr(_bsb_solution(), _bsb_name)
else:
    _bsb_fn = globals()[_bsb_name]
print("\\n{marker}" + _bsb_json.dumps(_bsb_fn(*_bsb_args)))
"""


def extract_code(response: str) -> str | None:
    """The last fenced code block of a response (an unclosed last fence runs to the end), or None."""
    blocks = FENCE.findall(response)
    return blocks[-1].strip("\n") if blocks and blocks[-1].strip() else None


def _numbers_close(a: str, b: str) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-6)
    except ValueError:
        return False


def stdout_matches(got: str, want: str) -> bool:
    """Line by line, whitespace-trimmed; tokens that are numbers compare within 1e-6."""
    g, w = got.strip().splitlines(), want.strip().splitlines()
    if len(g) != len(w):
        return False
    for gl, wl in zip(g, w):
        gt, wt = gl.split(), wl.split()
        if gt != wt and (len(gt) != len(wt) or not all(x == y or _numbers_close(x, y) for x, y in zip(gt, wt))):
            return False
    return True


def returned_matches(stdout: str, want: str) -> bool:
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(RESULT)), None)
    if line is None:
        return False
    try:
        got, expected = json.loads(line[len(RESULT) :]), json.loads(want)
    except json.JSONDecodeError:
        return False
    return got == expected or (
        isinstance(got, (int, float)) and isinstance(expected, (int, float)) and _numbers_close(str(got), str(expected))
    )


class CodeTask(SyntheticTask):
    """Problem files when given; else the synthetic recipes through :class:`~bsb.tasks.base.SyntheticTask`."""

    name = "code"
    kind = "synthetic code"
    embedded_model = "code"  # `model: embedded` resolves to the embedded code default (bsb.embedded.model)
    held_out_seed, sample_seed = 10**9 + 7, 7373

    def __init__(
        self,
        train_file: str | None = None,
        val_file: str | None = None,
        format: str | None = None,
        ops: tuple[int, ...] | list[int] = (2, 3),
        max_operand: int = 5,
        timeout_s: float = 6.0,
        memory_mb: int = 512,
        workers: int = 2,
        suffix: str | None = None,
        read_len: int = 16,
    ):
        for name, value, lo, hi in (
            ("read_len", read_len, 1, 65536),
            ("timeout_s", timeout_s, 0.1, 3600),  # <= 0 would grade every program a timeout, silently
            ("memory_mb", memory_mb, 16, 1 << 20),
            ("workers", workers, 1, 1024),
            ("max_operand", max_operand, 1, 10**6),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
                raise ValueError(f"task option {name} must be a number in [{lo}, {hi}], got {value!r}")
        if suffix is not None and not suffix:
            raise ValueError("task option suffix must be a non-empty elicitation suffix (or None: the fenced-code one)")
        self.ops = tuple(int(n) for n in ops)
        if not self.ops or min(self.ops) < 1 or max(self.ops) > 8:
            raise ValueError(f"task option ops must be operation counts in [1, 8], got {list(ops)}")
        self.max_operand, self.read_len = max_operand, read_len
        self.probe_suffix = suffix or CODE_SUFFIX
        # Loaded now, so a malformed file is an error before any model is loaded.
        self.train = load_code_problems(train_file, format) if train_file else None
        self.val = load_code_problems(val_file, format) if val_file else None
        self.pool = SandboxPool(
            workers, timeout_s=timeout_s, memory_mb=memory_mb, total_memory_mb=max(memory_mb, workers * memory_mb)
        )

    # ------------------------------------------------------------------ problems
    def make(self, rng: random.Random, n_ops: int, pid: str) -> Problem:
        r = make_recipe(rng, n_ops, self.max_operand)
        tests = CodeTests(
            r.style,
            tuple(str(x) if r.style == "stdin" else json.dumps(x) for x in r.inputs),
            tuple(str(r.value(x)) for x in r.inputs),
            "f" if r.style == "function" else None,
        )
        return Problem(pid, r.prompt, tests, {"ops": n_ops, "solution": r.program()})

    def held_out(self, n: int) -> list[Problem]:
        if self.val is None:
            return super().held_out(n)
        if n > len(self.val):
            raise ValueError(f"task code: {n} held-out problems asked, {len(self.val)} in val_file")
        return self.val[:n]

    def draw(self, rng: random.Random, n: int, exclude: Collection[str]) -> list[Problem]:
        if self.train is None:
            return super().draw(rng, n, exclude)
        pool = [p for p in self.train if p.prompt not in exclude]
        if not pool:
            raise ValueError("task code: every training problem is held out")
        return [pool[rng.randrange(len(pool))] for _ in range(n)]

    def sample(self, n: int, seed: int = 0) -> list[Problem]:
        if self.val is not None:
            return self.held_out(n)
        return self.train[:n] if self.train is not None else super().sample(n, seed)

    def format_prompt(self, problem: Problem) -> str:
        starter = (problem.meta or {}).get("starter_code")
        if starter:
            return f"{problem.prompt}\n\nStarter code:\n```python\n{starter}\n```\n"
        return problem.prompt

    # ------------------------------------------------------------------ grading
    def parse_answer(self, raw) -> CodeTests:
        """Hidden tests from a gold answer stored elsewhere (a verl row's ``reward_model.ground_truth``): CodeTests, or
        the tests in any shape the loaders read (JSON text, a list, a dict), with ``fn_name`` inside."""
        if isinstance(raw, CodeTests):
            return raw
        if isinstance(raw, dict) and "tests" in raw:
            return parse_tests(raw["tests"], "ground_truth.tests", raw.get("fn_name"))
        try:
            return parse_tests(raw, "ground_truth")
        except RowError as err:
            raise ValueError(f"the code task cannot read hidden tests from this gold answer: {err}") from None

    def answer_span(self, response: str) -> str | None:
        return extract_code(response)

    def gold_continuation(self, problem: Problem) -> str:
        solution = (problem.meta or {}).get("solution", "")
        return extract_code(solution) or ""

    def programs(self, code: str, tests: CodeTests) -> list[tuple[str, str]]:
        """(source, stdin) of every hidden test run."""
        if tests.style == "stdin":
            return [(code, i) for i in tests.inputs]
        harness = HARNESS.format(fn=tests.fn_name, marker=RESULT)
        return [(code + harness, i) for i in tests.inputs]

    def answer_format(self) -> str:
        return "Write the whole program in one ```python code block."

    def verify(self, response: str, problem: Problem) -> Verdict:
        tests = problem.answer
        if not isinstance(tests, CodeTests):
            raise TypeError(f"problem {problem.id!r} carries no CodeTests: the code task grades hidden tests")
        code = extract_code(response)
        if code is None:
            return Verdict(0.0, False, "no_code", "")
        try:
            ast.parse(code)
        except (SyntaxError, ValueError) as err:
            return Verdict(0.0, False, "syntax_error", code, (("parse", str(err)),))
        results = self.pool.map(self.programs(code, tests))
        check = stdout_matches if tests.style == "stdin" else returned_matches
        details, reason = [], ""
        for run, want in zip(results, tests.outputs):
            passed = run.ok and check(run.stdout, want)
            details.append((run.status, passed, run.reason))
            if not passed and not reason:
                reason = "wrong" if run.ok else run.status
        ok = all(d[1] for d in details)
        return Verdict(float(ok), ok, "correct" if ok else reason, code, tuple(details))
