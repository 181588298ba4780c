"""The ``code`` task: programs graded by hidden tests in the sandbox ([Fork]'s second domain).

* Problems: DeepCoder / LiveCodeBench files (``train_file``, ``val_file``; :mod:`bsb.tasks.code.problems`), or,
  without files, the embedded code default's synthetic recipes (:mod:`bsb.tasks.synthetic.code`).
* The probe: a fenced-code elicitation suffix and L = 16 read positions (§3.2, App. B: the belief over the program
  the model would write from here).
* The reward: binary, 1 when every hidden test passes (the last fenced block of the response is the program). Each
  test's sandbox status is kept in ``Verdict.details``; the reason is ``correct``, ``wrong`` (ran, wrong output),
  ``no_code``, ``syntax_error``, ``unreadable`` (beyond the read budget below), or the first failing run's sandbox
  status (``timeout``, ``memory``, ...).
* The comparison, LiveCodeBench's rules with a float bound: ``stdin`` output line by line, whitespace-trimmed, token
  by token. Text compares exactly (``Yes`` is not ``YES``); a number where the test expects an integer compares by
  exact value (LiveCodeBench's ``Decimal`` rule: ``1.0`` and ``1e3`` pass for ``1`` and ``1000``, ``1000000008`` never
  for ``1000000007``); where it expects a float (a ``.``, an exponent, ``inf``), within ``float_tol``, absolute or
  relative (``math.isclose``; ``nan`` never). A number is written in ASCII digits: ``1_000`` and other scripts'
  digits are text, though ``float`` reads them. ``function`` tests compare the returned JSON value by type: a
  boolean only equals a boolean (Python's ``True == 1`` is not taken), an integer an equal number, a float a number
  within ``float_tol``, lists item by item, objects key by key.
* The read budget: a program over :data:`MAX_CODE_CHARS` characters, or nested beyond the parser's depth (``ast.parse``
  raising RecursionError or MemoryError), is not run; a returned value that does not load (nested beyond the JSON
  decoder's depth, an integer of over 4,300 digits) or is nested over :data:`MAX_JSON_DEPTH` deep is not compared.
  Each is a zero with reason ``unreadable``, never an exception.

Options: ``train_file``, ``val_file``, ``format`` (deepcoder | livecodebench; None: recognised), ``ops`` and
``max_operand`` (the synthetic problems), ``timeout_s`` and ``memory_mb`` (per test run), ``workers`` (sandbox runs
at once), ``float_tol`` (the float bound, 1e-6 as the problems' usual "error at most 1e-6"; 0: exact values, as
LiveCodeBench's own checker). The probe reads L = 16 tokens after a fenced-code suffix; the run's ``probe_suffix`` /
``read_len`` override them.
"""

from __future__ import annotations

import ast
import json
import math
import random
import re
import secrets
from collections.abc import Collection
from decimal import Decimal

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
CHECK_MARK = "@@bsb-check-passed@@"
# A check-style test (HumanEval's): what runs before the problem's code and the completion. It reads the run's nonce
# and the check program from stdin before any model-written line runs, and keeps them, a copy of the builtins and
# the plain value types in a closure. CHECK_END then calls it once: the check program runs in a fresh scope of its
# own (the pristine builtins, the problem's own code run anew: a helper or `check` the completion redefines is not
# the test's; the function's own name bound to the completion's), on the completion's function wrapped so that a
# value of any but a plain built-in type (an object whose __eq__ always says yes, a subclass of str) fails; only a
# check that returns prints the nonce. An exit, a swallowed error or a printed "success" never prints it: the
# completion cannot know it. What it does not stop: a completion that reads the harness's closure on purpose
# (introspection) or patches a stdlib module the check imports (math.isclose): the sandbox still holds it.
CHECK_START = """def _bsb_check_harness():
    import builtins, json, sys
    nonce = sys.stdin.readline().strip()
    given = json.loads(sys.stdin.read())
    prefix, test, entry = given["prefix"], given["test"], given["entry"]
    pristine = dict(vars(builtins))
    plain = (int, float, complex, str, bytes, bool, type(None), list, tuple, dict, set, frozenset)
    containers = (list, tuple, set, frozenset)
    write, flush, done = sys.stdout.write, sys.stdout.flush, []

    def plain_value(value):
        stack = [(value, 0)]
        while stack:
            v, depth = stack.pop()
            if type(v) not in plain or depth > 100:
                raise AssertionError("the function returned a value that is not a plain built-in one: "
                                     + type(v).__name__)
            if type(v) in containers:
                stack.extend((x, depth + 1) for x in v)
            elif type(v) is dict:
                stack.extend((x, depth + 1) for kv in v.items() for x in kv)

    def finish(namespace):
        if done:
            return
        done.append(1)
        fn = namespace.get(entry)
        if not callable(fn):
            raise NameError("the program defines no function " + entry)

        def candidate(*args, **kwargs):
            out = fn(*args, **kwargs)
            plain_value(out)
            return out

        scope = {"__builtins__": dict(pristine), "__name__": "__bsb_check__"}
        exec(compile(prefix, "<prompt>", "exec"), scope)
        scope[entry] = candidate  # a check that names the function itself (HumanEval/33) gets the completion's
        exec(compile(test, "<check>", "exec"), scope)
        scope["check"](candidate)
        write("\\n" + __MARK__ + nonce + "\\n")
        flush()

    return finish


_bsb_check = _bsb_check_harness()
del _bsb_check_harness
"""
CHECK_END = "\n\n_bsb_check(globals())\n"


def extract_code(response: str) -> str | None:
    """The last fenced code block of a response (an unclosed last fence runs to the end), or None."""
    blocks = FENCE.findall(response)
    return blocks[-1].strip("\n") if blocks and blocks[-1].strip() else None


def defines(code: str, name: str) -> bool:
    """Whether ``code`` parses on its own and defines the function ``name`` at its top level."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return False
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name for n in tree.body)


def program(response: str, tests: CodeTests) -> str | None:
    """The program a response is graded as: its last fenced block (stdin and function tests), or None. A check test
    starts from the problem's own code (``tests.prefix``): a completion that defines the whole function (fenced, as
    instruct models write it, or not) follows it and replaces its stub; anything else (a fenced body, or the raw
    response: a base model's continuation) is the body that continues it."""
    fenced = extract_code(response)
    if tests.style != "check":
        return fenced
    code = fenced if fenced is not None else response.strip("\n")
    if not code.strip():
        return None
    if defines(code, tests.fn_name):
        return f"{tests.prefix.rstrip()}\n\n\n{code}\n"
    prefix = tests.prefix if tests.prefix.endswith("\n") or not tests.prefix else tests.prefix + "\n"
    return f"{prefix}{code}\n"


FLOAT_TOL = 1e-6  # the default float bound of a hidden test's comparison (task option float_tol)
MAX_CODE_CHARS = 200_000  # a longer program is not parsed nor run ("unreadable")
MAX_JSON_DEPTH = 100  # a returned value nested deeper is not compared ("unreadable")
_INT = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.I)


class Unreadable(ValueError):
    """A program's output beyond what the grader reads: a value nested too deeply, an integer of too many digits."""


def check_source(code: str) -> tuple[str, str] | None:
    """Why ``code`` is not run, as (reason, why): ``unreadable`` over :data:`MAX_CODE_CHARS` or nested beyond the
    parser's depth, ``syntax_error`` when it does not parse; None when it parses."""
    if len(code) > MAX_CODE_CHARS:
        return "unreadable", f"{len(code):,} characters, over the {MAX_CODE_CHARS:,} a program may have"
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, OverflowError) as err:
        return "syntax_error", str(err)
    except (RecursionError, MemoryError) as err:  # the parser's stack or the tree's construction: nested too deeply
        return "unreadable", f"nested beyond the parser's depth ({type(err).__name__})"
    return None


def tokens_match(got: str, want: str, float_tol: float = FLOAT_TOL) -> bool:
    """One output token against the expected one: text exactly; a number by exact value where an integer is expected
    (or ``float_tol`` is 0), within ``float_tol`` where a float is."""
    if got == want:
        return True
    if not (_NUMBER.fullmatch(got) and _NUMBER.fullmatch(want)):
        return False
    if float_tol == 0 or _INT.fullmatch(want):
        try:
            return Decimal(got) == Decimal(want)
        except ArithmeticError:  # an exponent past Decimal's
            return False
    return math.isclose(float(got), float(want), rel_tol=float_tol, abs_tol=float_tol)


def stdout_matches(got: str, want: str, float_tol: float = FLOAT_TOL) -> bool:
    """Line by line, whitespace-trimmed, token by token (:func:`tokens_match`)."""
    g, w = got.strip().splitlines(), want.strip().splitlines()
    if len(g) != len(w):
        return False
    for gl, wl in zip(g, w):
        gt, wt = gl.split(), wl.split()
        if len(gt) != len(wt) or not all(tokens_match(x, y, float_tol) for x, y in zip(gt, wt)):
            return False
    return True


def _load(text: str):
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError, MemoryError) as err:  # an int of over 4,300 digits; nested too deeply
        raise Unreadable(f"the value does not load ({type(err).__name__})") from None
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (list, dict)):
            if depth >= MAX_JSON_DEPTH:
                raise Unreadable(f"the value is nested over {MAX_JSON_DEPTH} deep")
            stack += [(x, depth + 1) for x in (v.values() if isinstance(v, dict) else v)]
    return value


def values_match(got, want, float_tol: float = FLOAT_TOL) -> bool:
    """JSON values compared by type: a boolean only equals a boolean, an integer an equal number (``1.0`` is ``1``), a
    float a number within ``float_tol``, a string or null itself; lists item by item, objects key by key."""
    if isinstance(want, bool) or isinstance(got, bool) or not isinstance(want, (int, float, list, dict)):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float)):
        if not isinstance(got, (int, float)):
            return False
        if isinstance(want, int):
            return got == want  # exact, an int against a float included
        try:
            return math.isclose(got, want, rel_tol=float_tol, abs_tol=float_tol)
        except OverflowError:  # an int past a float's range
            return False
    if type(got) is not type(want) or len(got) != len(want):
        return False
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(values_match(got[k], want[k], float_tol) for k in want)
    return all(values_match(g, w, float_tol) for g, w in zip(got, want))


def returned_matches(stdout: str, want: str, float_tol: float = FLOAT_TOL) -> bool:
    """The function's value (the last result line of ``stdout``) against the JSON value ``want``
    (:func:`values_match`); :class:`Unreadable` when the value is beyond the read budget."""
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(RESULT)), None)
    if line is None:
        return False
    try:
        got, expected = _load(line[len(RESULT) :]), _load(want)
    except json.JSONDecodeError:
        return False
    return values_match(got, expected, float_tol)


class CodeTask(SyntheticTask):
    """Problem files when given; else the synthetic recipes through :class:`~bsb.tasks.base.SyntheticTask`."""

    name = "code"
    kind = "synthetic code"
    embedded_model = "code"  # `model: embedded` resolves to the embedded code default (bsb.embedded.model)
    held_out_seed, sample_seed = 10**9 + 7, 7373
    probe_suffix = CODE_SUFFIX
    read_len = 16
    # [Fork] §3.2: on code "the answer is the opening of the solution program", read L = 16 tokens deep; Lens-Shift
    # (§3.3) teacher-forces that answer after the same suffix. The whole program instead (median 188 tokens) made its
    # lens, an unembedding per layer and token, 118 of a HumanEval chain's 147 s of reads on Qwen2.5-Coder-0.5B.
    answer_len = 16

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
        float_tol: float = FLOAT_TOL,
    ):
        for name, value, lo, hi in (
            ("timeout_s", timeout_s, 0.1, 3600),  # <= 0 would grade every program a timeout, silently
            ("memory_mb", memory_mb, 16, 1 << 20),
            ("workers", workers, 1, 1024),
            ("max_operand", max_operand, 1, 10**6),
            ("float_tol", float_tol, 0, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
                raise ValueError(f"task option {name} must be a number in [{lo}, {hi}], got {value!r}")
        self.ops = tuple(int(n) for n in ops)
        if not self.ops or min(self.ops) < 1 or max(self.ops) > 8:
            raise ValueError(f"task option ops must be operation counts in [1, 8], got {list(ops)}")
        self.max_operand, self.float_tol = max_operand, float_tol
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
        if isinstance(problem.answer, CodeTests) and problem.answer.style == "check":  # HumanEval: code to complete
            return f"Complete this Python function.\n\n```python\n{problem.prompt.rstrip()}\n```\n"
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

    def runs(self, code: str, tests: CodeTests) -> list[tuple[str, str, str]]:
        """(source, stdin, what passes) of every hidden test run; ``code`` is the whole program (:func:`program`)."""
        if tests.style == "stdin":
            return [(code, i, o) for i, o in zip(tests.inputs, tests.outputs)]
        if tests.style == "function":
            harness = HARNESS.format(fn=tests.fn_name, marker=RESULT)
            return [(code + harness, i, o) for i, o in zip(tests.inputs, tests.outputs)]
        nonce = secrets.token_hex(16)  # a fresh one a run: the program never sees it before the check has passed
        given = json.dumps({"prefix": tests.prefix, "test": tests.inputs[0], "entry": tests.fn_name})
        source = CHECK_START.replace("__MARK__", repr(CHECK_MARK)) + code + CHECK_END
        return [(source, f"{nonce}\n{given}", CHECK_MARK + nonce)]

    def answer_format(self) -> str:
        return "Write the whole program in one ```python code block."

    def verify(self, response: str, problem: Problem) -> Verdict:
        tests = problem.answer
        if not isinstance(tests, CodeTests):
            raise TypeError(f"problem {problem.id!r} carries no CodeTests: the code task grades hidden tests")
        code = program(response, tests)
        if code is None:
            return Verdict(0.0, False, "no_code", "")
        refused = check_source(code)
        if refused:
            return Verdict(0.0, False, refused[0], code, (("parse", refused[1]),))
        jobs = self.runs(code, tests)
        results = self.pool.map((source, stdin) for source, stdin, _ in jobs)
        graded = [self._grade(run, want, tests.style) for run, (_, _, want) in zip(results, jobs)]
        reason = next((why for _, why in graded if why), "correct")
        ok = reason == "correct"
        return Verdict(float(ok), ok, reason, code, tuple(detail for detail, _ in graded))

    def _grade(self, run, want: str, style: str) -> tuple[tuple, str]:
        """One hidden test's (status, passed, reason) detail and its failure reason ("" when it passed)."""
        if style == "check":  # the check returned and printed the run's nonce, and the program then ended well
            if not run.ok:
                failed = run.status == "error" and run.reason.startswith("AssertionError")
                return (run.status, False, run.reason), "wrong" if failed else run.status
            passed = want in run.stdout.splitlines()
            return (run.status, passed, run.reason), "" if passed else "wrong"
        if not run.ok:
            return (run.status, False, run.reason), run.status
        check = stdout_matches if style == "stdin" else returned_matches
        try:
            passed = check(run.stdout, want, self.float_tol)
        except Unreadable as err:
            return (run.status, False, f"unreadable: {err}"), "unreadable"
        return (run.status, passed, run.reason), "" if passed else "wrong"
