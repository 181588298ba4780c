"""The code task: DeepCoder and LiveCodeBench rows load (or fail naming file, line and field), hidden tests in both
styles grade real programs in the sandbox, and the synthetic embedded problems are solved by their own programs."""

import base64
import json
import pickle
import random
import zlib

import pytest

from bsb.tasks.base import Problem
from bsb.tasks.code.problems import CodeTests, load_code_problems, parse_tests
from bsb.tasks.code.task import CODE_SUFFIX, RESULT, CodeTask, extract_code, returned_matches, stdout_matches
from bsb.tasks.registry import make_task
from bsb.tasks.synthetic.code import make_recipe, training_programs, wrong_steps


@pytest.fixture(scope="module")
def task():
    return CodeTask(workers=2, timeout_s=3.0, memory_mb=256)


def _lcb_compressed(tests: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


LCB_STDIN = {"question_title": "sum", "question_content": "Read two integers and print their sum.", "platform": "atcoder",
             "question_id": "abc001_a", "contest_id": "abc001", "contest_date": "2024-08-01T00:00:00", "starter_code": "",
             "difficulty": "easy", "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
             "private_test_cases": _lcb_compressed([{"input": "5 7\n", "output": "12\n", "testtype": "stdin"}]), "metadata": "{}"}
LCB_FUNC = {"question_title": "two", "question_content": "Return a + b.", "platform": "leetcode", "question_id": "lc-1",
            "contest_id": "w1", "contest_date": "2024-08-02T00:00:00", "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
            "difficulty": "easy", "public_test_cases": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"}]),
            "private_test_cases": json.dumps([{"input": "[1, 2]\n[3]", "output": "[1, 2, 3]", "testtype": "functional"}]),
            "metadata": json.dumps({"func_name": "add"})}
DC_PRIME = {"problem": "Print the square of n.", "tests": json.dumps([{"type": "stdin_stdout", "input": "4\n", "output": "16\n"},
                                                                      {"type": "stdin_stdout", "input": "5\n", "output": "25\n"}])}
DC_TACO = {"problem": "Return n doubled.", "tests": json.dumps({"inputs": [[2], [5]], "outputs": [[4], [10]], "fn_name": "double"})}
DC_LCB = {"problem": "Max of a list.", "tests": json.dumps([{"input": "[3, 1, 2]", "output": "3", "testtype": "functional",
                                                             "metadata": {"func_name": "biggest"}}])}


def test_livecodebench_rows_load_with_public_and_compressed_private_tests(tmp_path):
    probs = load_code_problems(_write(tmp_path / "lcb.jsonl", [LCB_STDIN, LCB_FUNC]))
    stdin, func = probs
    assert stdin.id == "abc001_a" and stdin.answer == CodeTests("stdin", ("1 2\n", "5 7\n"), ("3\n", "12\n"))
    assert func.answer.style == "function" and func.answer.fn_name == "add" and func.answer.inputs == ("1\n2", "[1, 2]\n[3]")
    assert func.meta["starter_code"].startswith("class Solution") and func.meta["platform"] == "leetcode"


def test_deepcoder_rows_load_in_each_sub_sets_shape(tmp_path):
    prime, taco, lcb = load_code_problems(_write(tmp_path / "dc.jsonl", [DC_PRIME, DC_TACO, DC_LCB]))
    assert prime.answer == CodeTests("stdin", ("4\n", "5\n"), ("16\n", "25\n"))
    assert taco.answer == CodeTests("function", ("2", "5"), ("4", "10"), "double")
    assert lcb.answer == CodeTests("function", ("[3, 1, 2]",), ("3",), "biggest")


@pytest.mark.parametrize("row, match", [
    ({**DC_PRIME, "tests": json.dumps([{"type": "stdin_stdout", "input": "4\n"}])}, "line 1: field 'tests', test 0: no expected 'output'"),
    ({**DC_PRIME, "tests": "not json at all"}, "line 1: field 'tests' is neither JSON nor base64"),
    ({**DC_PRIME, "tests": json.dumps([])}, "line 1: field 'tests': expected a non-empty list"),
    ({**DC_PRIME, "problem": ""}, "line 1: missing or empty field 'problem'"),
    ({**DC_LCB, "tests": json.dumps([{"input": "[1]", "output": "1", "testtype": "functional"}])}, "without a function name"),
    ({**DC_PRIME, "tests": json.dumps([{"type": "exotic", "input": "1", "output": "1"}])}, "unknown test type 'exotic'"),
    ({"title": "x"}, "line 1: not a DeepCoder"),
    # a null test input was run as the stdin "None"; a lone surrogate crashed verify
    ({**DC_PRIME, "tests": json.dumps([{"type": "stdin_stdout", "input": None, "output": "1"}])},
     "field 'tests\\[0\\].input': expected text, got null"),
    ({**DC_PRIME, "tests": '[{"type": "stdin_stdout", "input": "\\ud800", "output": "1"}]'}, "not valid Unicode"),
    ({**DC_PRIME, "tests": json.dumps([{"type": "stdin_stdout", "input": "1", "output": {"x": 1}}])},
     "field 'output': expected text, got dict"),
    ({**DC_PRIME, "tests": "[" * 100_000 + "]" * 100_000}, "nested too deeply"),
    ({**DC_LCB, "tests": json.dumps([{"input": "[1]", "output": "[" * 5000 + "]" * 5000, "testtype": "functional",
                                      "metadata": {"func_name": "f"}}])}, "expected output: JSON nested too deeply"),
])
def test_malformed_rows_name_file_line_and_field(tmp_path, row, match):
    path = _write(tmp_path / "bad.jsonl", [row])
    with pytest.raises(ValueError, match=match) as err:
        load_code_problems(path)
    assert str(path) in str(err.value)


def test_a_pickle_that_would_run_code_is_refused():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    raw = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(ValueError, match="only strings are accepted"):
        parse_tests(raw, "private_test_cases")


def test_a_compressed_field_that_inflates_without_end_is_refused(monkeypatch):
    import bsb.tasks.code.problems as problems

    monkeypatch.setattr(problems, "MAX_DECOMPRESSED", 1 << 16)
    raw = base64.b64encode(zlib.compress(pickle.dumps("x" * (1 << 20)))).decode()  # 1 MiB from ~1 kB
    with pytest.raises(ValueError, match="decompresses to over 65,536 bytes"):
        parse_tests(raw, "private_test_cases")


def test_the_code_task_is_registered_with_the_papers_probe():
    t = make_task("code", {"workers": 1})
    assert t.read_len == 16 and t.probe_suffix == CODE_SUFFIX and "```python" in CODE_SUFFIX
    with pytest.raises(ValueError, match="read_len"):
        make_task("code", {"read_len": 0})


def test_lens_shift_teacher_forces_the_programs_opening_and_math_its_whole_answer():
    """[Fork] §3.2: on code the answer is the opening of the solution program (L = 16 tokens); Lens-Shift teacher-forces
    that, not the whole program. A task that sets no answer_len (math) keeps its whole answer."""
    from bsb.engine.probe import answer_ids
    from bsb.tasks.base import hook

    class Chars:  # one token a character
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    program = "def f(x):\n    return sorted(set(x))[::-1]\n"
    ids = answer_ids(make_task("code"), Chars(), f"Here:\n```python\n{program}```")
    assert ids == [ord(c) for c in program[:16]] and hook(make_task("code"), "answer_len") == 16
    math = make_task("math")
    assert hook(math, "answer_len") is None
    assert answer_ids(math, Chars(), "so \\boxed{123456789012345678}") == [ord(c) for c in "123456789012345678"]
    assert answer_ids(make_task("code"), Chars(), "no code here") is None


def test_extract_code_takes_the_last_fenced_block():
    assert extract_code("think\n```python\nprint(1)\n```\nmore\n```\nprint(2)\n```") == "print(2)"
    assert extract_code("```python\nprint(3)") == "print(3)"  # an unclosed last fence runs to the end
    assert extract_code("no code") is None
    assert stdout_matches("3 \n4.0000001\n", "3\n4.0") and not stdout_matches("3", "4")
    assert not stdout_matches("3\n4.0000001", "3\n4")  # an integer is expected: exact (LiveCodeBench's Decimal rule)


def _row_problem(row, tmp_path, name):
    return load_code_problems(_write(tmp_path / name, [row]))[0]


def test_stdin_hidden_tests_grade_real_programs(task, tmp_path):
    p = _row_problem(LCB_STDIN, tmp_path, "a.jsonl")
    good = task.verify("```python\na, b = map(int, input().split())\nprint(a + b)\n```", p)
    assert good.correct and good.reward == 1.0 and good.reason == "correct" and [d[:2] for d in good.details] == [("ok", True)] * 2
    wrong = task.verify("```python\na, b = map(int, input().split())\nprint(a - b)\n```", p)
    assert not wrong.correct and wrong.reason == "wrong" and [d[1] for d in wrong.details] == [False, False]
    loop = task.verify("```python\nwhile True:\n    pass\n```", p)
    assert loop.reason == "timeout" and loop.reward == 0.0


def test_function_hidden_tests_call_the_named_function_or_solution_method(task, tmp_path):
    p = _row_problem(LCB_FUNC, tmp_path, "b.jsonl")
    sol = "```python\nclass Solution:\n    def add(self, a, b):\n        return a + b\n```"
    v = task.verify(sol, p)
    assert v.correct, v.details
    taco = _row_problem(DC_TACO, tmp_path, "c.jsonl")
    assert task.verify("```python\ndef double(n):\n    return 2 * n\n```", taco).correct
    assert not task.verify("```python\ndef double(n):\n    return 3 * n\n```", taco).correct
    assert task.verify("```python\ndef twice(n):\n    return 2 * n\n```", taco).reason == "error"  # no such function


def test_no_code_and_syntax_errors_fail_without_running(task, tmp_path):
    p = _row_problem(DC_PRIME, tmp_path, "d.jsonl")
    assert task.verify("I think the answer is 16.", p).reason == "no_code"
    v = task.verify("```python\nprint((\n```", p)
    assert v.reason == "syntax_error" and v.details[0][0] == "parse"


def test_a_hostile_program_is_a_failed_verdict_and_grading_goes_on(task, tmp_path):
    p = _row_problem(DC_PRIME, tmp_path, "e.jsonl")
    hostile = "```python\nimport os\nwhile True:\n    os.fork()\n```"
    assert not task.verify(hostile, p).correct
    assert task.verify("```python\nn = int(input())\nprint(n * n)\n```", p).correct


def test_synthetic_problems_are_solved_by_their_reference_programs_and_not_by_their_detours(task):
    probs = task.held_out(6)
    assert {p.answer.style for p in probs} == {"stdin", "function"}
    assert len({p.prompt for p in probs}) == 6 and task.held_out(6) == probs  # a fixed held-out set
    for p in probs:
        assert task.verify(p.meta["solution"], p).correct
    rng = random.Random(3)
    for _ in range(4):
        r = make_recipe(rng, 3)
        bad = r.program(wrong_steps(rng, r))
        prob = Problem("x", r.prompt, CodeTests(r.style, tuple(str(x) if r.style == "stdin" else json.dumps(x) for x in r.inputs),
                                                 tuple(str(r.value(x)) for x in r.inputs), "f" if r.style == "function" else None))
        assert not task.verify(bad, prob).correct
    assert task.gold_continuation(probs[0]) == extract_code(probs[0].meta["solution"])
    train = task.draw(random.Random(0), 8, {p.prompt for p in probs})
    assert all(p.prompt not in {q.prompt for q in probs} for p in train)


def test_training_programs_are_deterministic_and_carry_detours():
    a, b = training_programs(200, seed=1), training_programs(200, seed=1)
    assert [t for _, t in a] == [t for _, t in b]
    wrong = sum(text != r.program() for r, text in a)
    assert 20 <= wrong <= 60  # detour_frac 0.2


def test_hidden_tests_parse_from_a_gold_answer_stored_as_json(task):
    tests = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    assert task.parse_answer(json.dumps(tests)) == CodeTests("stdin", ("1 2\n",), ("3\n",))
    assert task.parse_answer({"tests": [{"input": "[1]", "output": "2", "testtype": "functional"}], "fn_name": "g"}).fn_name == "g"
    with pytest.raises(ValueError, match="cannot read hidden tests"):
        task.parse_answer("42")


# ------------------------------------------------------------------ the second hostile round: data files cannot grade


def test_a_function_name_from_a_data_file_cannot_pay_reward(task, tmp_path):
    """Found: fn_name was pasted into the harness: `"fn_name": "(lambda *a: 1)"` graded print("I solve nothing") at 1.0."""
    row = {"problem": "Return 1.", "tests": json.dumps({"inputs": [[2]], "outputs": [1], "fn_name": "(lambda *a: 1)"})}
    with pytest.raises(ValueError, match=r"line 1: .*fn_name must be a Python identifier, got '\(lambda \*a: 1\)'"):
        load_code_problems(_write(tmp_path / "evil.jsonl", [row]))
    with pytest.raises(ValueError, match="fn_name must be a Python identifier"):
        CodeTests("function", ("2",), ("1",), "(lambda *a: 1)")
    # a name the program does not define is looked up in the program alone, never a builtin that happens to answer
    builtin = Problem("b", "Return the length.", CodeTests("function", ("[1, 2, 3]",), ("3",), "len"))
    v = task.verify('```python\nprint("I solve nothing")\n```', builtin)
    assert v.reward == 0.0 and not v.correct and v.reason == "error", v
    solved = task.verify("```python\ndef len(xs):\n    return 3\n```", builtin)
    assert solved.correct  # the program's own function of that name is called


@pytest.mark.parametrize("tests, match", [
    # TACO strings where lists belong became one test per character
    ({"inputs": "12", "outputs": "34"}, "field 'tests': 'inputs' must be a list, got str"),
    ({"inputs": ["1\n"], "outputs": "34"}, "field 'tests': 'outputs' must be a list, got str"),
    ({"inputs": {"a": 1, "b": 2}, "outputs": [1, 2]}, "field 'tests': 'inputs' must be a list, got dict"),
    ({"inputs": [[1]], "outputs": [1], "fn_name": ["f"]}, "fn_name must be a Python identifier, got \\['f'\\]"),
    ({"inputs": [[1]], "outputs": [1], "fn_name": "class"}, "fn_name must be a Python identifier, got 'class'"),
    ([{"input": "[1]", "output": "1", "testtype": "functional", "metadata": "f"}],
     "field 'tests', test 0: 'metadata' must be an object, got str"),
    ([{"input": "[1]", "output": "1", "testtype": "functional", "metadata": ["func_name", "f"]}],
     "field 'tests', test 0: 'metadata' must be an object, got list"),
    ([{"input": "[1, 2", "output": "1", "testtype": "functional", "metadata": {"func_name": "f"}}],
     "test 0: a function test's input is one JSON value per line"),
    ([{"input": {"x": 1}, "output": "1", "type": "stdin_stdout"}], "expected text, got dict"),
])
def test_garbled_test_shapes_are_row_errors(tmp_path, tests, match):
    path = _write(tmp_path / "garbled.jsonl", [{"problem": "p", "tests": json.dumps(tests)}])
    with pytest.raises(ValueError, match=match) as err:
        load_code_problems(path)
    assert "garbled.jsonl, line 1" in str(err.value)


@pytest.mark.parametrize("row, match", [
    ({**DC_PRIME, "id": [1, 2]}, "field 'id': expected text, got list"),
    ({**DC_PRIME, "problem_id": {"a": 1}}, "field 'problem_id': expected text, got dict"),
    ({**LCB_STDIN, "question_id": ["abc"]}, "field 'question_id': expected text, got list"),
    ({**DC_PRIME, "metadata": json.dumps(["func_name", "f"])}, "field 'metadata': expected an object, got list"),
])
def test_list_or_dict_ids_and_metadata_are_row_errors(tmp_path, row, match):
    from bsb.tasks.data.files import DataFileError

    with pytest.raises(DataFileError, match=match):
        load_code_problems(_write(tmp_path / "ids.jsonl", [row]))


# ------------------------------------------------------------------ the third hostile round: a response and a program's
# output are untrusted input: beyond the grader's budget they are a counted zero ("unreadable"), never an exception


SQUARE = Problem("sq", "Print n squared.", CodeTests("stdin", ("4\n",), ("16\n",)))


@pytest.mark.parametrize("source, reason", [
    ("x = " + "-" * 100_000 + "1", "unreadable"),  # the parser's stack: a MemoryError escaped verify
    ("x = " + "not " * 100_000 + "1", "unreadable"),
    ("x = 1" + "+1" * 90_000, "unreadable"),  # a RecursionError in the AST's construction escaped verify
    ("x = a" + ".b" * 100_000, "unreadable"),
    ("x = f" + "()" * 100_000, "unreadable"),
    ("x = a" + "[0]" * 60_000, "unreadable"),
    ("print(1)\n" * 40_000, "unreadable"),  # 360,000 characters: over the size budget, never parsed nor run
    ("x = 1" + "+(1" * 3000 + ")" * 3000, "syntax_error"),  # Python's own bracket limit (200): a syntax error
    ("x = " + "[" * 50_000 + "]" * 50_000, "syntax_error"),
])
def test_a_response_beyond_the_parse_budget_is_a_counted_zero(task, source, reason):
    v = task.verify(f"```python\n{source}\n```", SQUARE)
    # refused before the sandbox: the only detail is the parse's
    assert (v.reward, v.correct, v.reason) == (0.0, False, reason) and [d[0] for d in v.details] == ["parse"], v.details


@pytest.mark.parametrize("body", [
    "import sys\n    sys.set_int_max_str_digits(0)\n    return int('7' * 5000)",  # json.loads: a ValueError escaped verify
    "import sys\n    sys.set_int_max_str_digits(0)\n    return [1, -int('9' * 6000)]",
    # a result line of 100,000 brackets (or objects) printed by the program itself: a RecursionError escaped verify
    "import os, sys\n    print('\\n@@bsb-result@@' + '[' * 100000 + ']' * 100000)\n    sys.stdout.flush()\n    os._exit(0)",
    "import os, sys\n    print('\\n@@bsb-result@@' + '{\"a\":' * 100000 + '1' + '}' * 100000)\n    sys.stdout.flush()\n    os._exit(0)",
    "import os, sys\n    print('\\n@@bsb-result@@' + '[' * 500 + ']' * 500)\n    sys.stdout.flush()\n    os._exit(0)",
])
def test_a_programs_output_beyond_the_read_budget_is_a_counted_zero(task, body):
    p = Problem("f", "Return 1.", CodeTests("function", ("1",), ("1",), "f"))
    v = task.verify(f"```python\ndef f(x):\n    {body}\n```", p)
    assert (v.reward, v.correct, v.reason) == (0.0, False, "unreadable"), v.details
    assert v.details[0][:2] == ("ok", False) and "unreadable" in v.details[0][2]
    assert task.verify("```python\ndef f(x):\n    return 1\n```", p).correct  # grading goes on


def _fake_runs(task, monkeypatch, stdout):
    from bsb.tasks.code.sandbox import SandboxResult

    monkeypatch.setattr(task.pool, "map", lambda jobs: [SandboxResult("ok", 0, stdout, "", "") for _ in jobs])


# (what the program printed, or returned as JSON, and what the hidden test expects): each a wrong answer a float
# comparison of integers, Python's True == 1, or float()'s lenient parsing let through
WRONG_STDOUT = [
    ("1000000008", "1000000007"),  # off by one on a big integer
    ("1000000000007", "1000000000000"),  # n * n + 7 over n = 10**6
    ("9876543000", "9876543210"),  # rounded to thousands
    ("9007199254740993", "9007199254740992"),  # equal as floats
    ("1000000008.0", "1000000007"),  # a decimal for an integer is compared exactly too
    ("0.0000001", "0"),
    ("1_000", "1000"),  # float() reads an underscore
    ("١٢٣", "123"),  # float() reads other scripts' digits
    ("True", "1"), ("False", "0"),
    ("yes", "Yes"), ("YES", "Yes"),  # strings compare exactly
    ("3 4", "3"), ("3\n4", "3"), ("3", "3 4"),  # extra or missing tokens and lines
    ("nan", "0.5"), ("NaN", "1"), ("inf", "1e308"),
    ("9" * 5000, "9" * 4999 + "8"), ("[" * 100_000, "1"),  # both inf as floats; a token is never parsed as JSON
    ("0.334", "0.333333"),  # a float outside the bound
    ("0x10", "16"), ("1e3", "1001"),
]
RIGHT_STDOUT = [
    ("3", "3"), (" 3 \n 4 ", "3\n4"), ("12345678901234567890", "12345678901234567890"), ("-0", "0"), ("+5", "5"),
    ("1.0", "1"), ("1e3", "1000"),  # a decimal equal in value to the integer (LiveCodeBench's Decimal rule)
    ("0.3333333", "0.333333333"), ("3", "3.000000"), ("2.5e-1", "0.25"),  # floats within float_tol (1e-6)
    ("Yes", "Yes"), ("a b  c", "a b c"), ("9" * 5000, "9" * 5000),
]
WRONG_RETURNED = [
    ("true", "1"), ("false", "0"), ("1", "true"), ("0", "false"),  # a boolean never equals a number
    ("[true, false]", "[1, 0]"), ('{"a": true}', '{"a": 1}'),
    ("1000000008", "1000000007"), ("9876543000", "9876543210"), ("1.0000001", "1"),
    ("[1, 2, 1000000008]", "[1, 2, 1000000007]"),
    ('"Yes"', '"yes"'), ('"1"', "1"), ("null", "0"), ("NaN", "1.5"), ("NaN", "NaN"), ("Infinity", "1e308"),
    ("[1, 2, 3]", "[1, 2]"), ("[2, 1]", "[1, 2]"), ('{"a": 1, "b": 2}', '{"a": 1}'), ('{"a": 2}', '{"b": 2}'),
    ("[[1]]", "[1]"), ("0.334", "0.333333"),
]
RIGHT_RETURNED = [
    ("3", "3"), ("true", "true"), ("[1, [2, 3]]", "[1, [2, 3]]"), ('{"a": [1.0]}', '{"a": [1]}'), ("1.0", "1"),
    ("0.30000000000000004", "0.3"), ("[0.30000000000000004]", "[0.3]"), ('"abc"', '"abc"'), ("null", "null"),
    ("12345678901234567890", "12345678901234567890"),
]


@pytest.mark.parametrize("got, want, ok", [(g, w, False) for g, w in WRONG_STDOUT] + [(g, w, True) for g, w in RIGHT_STDOUT])
def test_the_hostile_answer_set_on_stdin_tests(task, monkeypatch, got, want, ok):
    _fake_runs(task, monkeypatch, got + "\n")
    v = task.verify("```python\nprint(0)\n```", Problem("s", "p", CodeTests("stdin", ("",), (want + "\n",))))
    assert (v.reward, v.reason) == ((1.0, "correct") if ok else (0.0, "wrong")), (got, want)
    assert stdout_matches(got, want) is ok


@pytest.mark.parametrize("got, want, ok", [(g, w, False) for g, w in WRONG_RETURNED] + [(g, w, True) for g, w in RIGHT_RETURNED])
def test_the_hostile_answer_set_on_function_tests(task, monkeypatch, got, want, ok):
    _fake_runs(task, monkeypatch, f"noise\n{RESULT}{got}\n")
    v = task.verify("```python\ndef f(x):\n    return 0\n```", Problem("f", "p", CodeTests("function", ("1",), (want,), "f")))
    assert (v.reward, v.reason) == ((1.0, "correct") if ok else (0.0, "wrong")), (got, want)
    assert returned_matches(f"{RESULT}{got}", want) is ok


def test_real_programs_that_round_or_answer_a_boolean_fail_their_hidden_tests(task):
    big = Problem("n2", "Print n squared.", CodeTests("stdin", ("1000000\n", "999999\n"), ("1000000000000\n", "999998000001\n")))
    assert task.verify("```python\nn = int(input())\nprint(n * n)\n```", big).correct
    assert task.verify("```python\nn = int(input())\nprint(n * n + 7)\n```", big).reason == "wrong"
    assert task.verify("```python\nn = int(input())\nprint(round(n * n, -3) + 1000)\n```", big).reason == "wrong"
    one = Problem("b", "Return 1.", CodeTests("function", ("2",), ("1",), "f"))
    assert task.verify("```python\ndef f(x):\n    return True\n```", one).reason == "wrong"
    assert task.verify("```python\ndef f(x):\n    return 1\n```", one).correct


def test_the_float_bound_is_a_task_option(monkeypatch):
    strict = CodeTask(workers=1, float_tol=0)  # 0: exact values, as LiveCodeBench's own Decimal comparison
    _fake_runs(strict, monkeypatch, "0.3333333\n")
    third = Problem("t", "p", CodeTests("stdin", ("",), ("0.333333333\n",)))
    assert strict.verify("```python\nprint(0)\n```", third).reason == "wrong"
    loose = CodeTask(workers=1, float_tol=1e-3)
    _fake_runs(loose, monkeypatch, "0.3334\n")
    assert loose.verify("```python\nprint(0)\n```", third).correct
    assert stdout_matches("0.3334", "0.333333333", float_tol=1e-3) and not stdout_matches("0.3334", "0.333333333")
    for bad in (-1e-6, 1.5, True, "1e-6"):
        with pytest.raises(ValueError, match="float_tol"):
            make_task("code", {"workers": 1, "float_tol": bad})
