"""Problem sets: JSONL or Parquet files of problems with a prompt, a gold answer and an id.

Field names follow the common styles: ``prompt`` | ``problem`` | ``question`` for the prompt, ``answer`` |
``final_answer`` | ``solution`` for the gold answer, ``id`` | ``unique_id`` for the id (default: ``<file stem>-<row>``).
Gold answers are reduced to the final answer: a MATH-style solution to its last ``\\boxed{}``, a GSM8K-style
answer to the text after ``####``, an AIME integer to its string. A malformed row is an error that names the
file, the line (or row) and the field.
"""

from __future__ import annotations

import json
from pathlib import Path

from bsb.tasks.math_grader import extract_boxed
from bsb.tasks.task import Problem

PROMPT_FIELDS = ("prompt", "problem", "question")
ANSWER_FIELDS = ("answer", "final_answer", "solution")
ID_FIELDS = ("id", "unique_id")


def load_problems(path: str | Path) -> list[Problem]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no problem file at {path}")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as err:
            raise ImportError("reading Parquet needs pyarrow (pip install pyarrow)") from err
        rows = [(f"row {i}", r) for i, r in enumerate(pq.read_table(path).to_pylist())]
    elif path.suffix in (".jsonl", ".json"):
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not a JSON object ({err.msg}); one problem per line") from None
    else:
        raise ValueError(f"{path}: unknown problem file type {path.suffix!r}; use .jsonl or .parquet")
    problems, seen = [], set()
    for i, (where, rec) in enumerate(rows):
        if not isinstance(rec, dict):
            raise ValueError(f"{path}, {where}: expected an object with prompt and answer fields")
        prompt = _field(rec, PROMPT_FIELDS, path, where)
        answer = _final_answer(_field(rec, ANSWER_FIELDS, path, where), path, where)
        pid = next((str(rec[f]) for f in ID_FIELDS if rec.get(f) is not None), f"{path.stem}-{i}")
        if pid in seen:
            raise ValueError(f"{path}, {where}: duplicate id {pid!r}")
        seen.add(pid)
        problems.append(Problem(pid, str(prompt), answer))
    if not problems:
        raise ValueError(f"{path} holds no problems")
    return problems


def _field(rec: dict, names: tuple[str, ...], path: Path, where: str):
    for name in names:
        if rec.get(name) is not None and str(rec[name]).strip():
            return rec[name]
    raise ValueError(f"{path}, {where}: missing field {names[0]!r} (or {', '.join(repr(n) for n in names[1:])})")


def _final_answer(raw, path: Path, where: str) -> str:
    text = str(raw).strip()
    if "####" in text:  # GSM8K
        return text.rsplit("####", 1)[1].strip().replace(",", "")
    if "\\boxed" in text or "\\fbox" in text:  # a MATH-style worked solution
        boxed = extract_boxed(text)
        if boxed is None:
            raise ValueError(f"{path}, {where}: the solution's \\boxed{{}} is not closed")
        return boxed.strip()
    return text
