"""The published schemas of the paper's data sets, each read into :class:`~bsb.tasks.base.Problem` rows.

A schema is recognised from a row's columns (or named with ``format=``). Each reader returns the problem text the
model sees, the gold answer and the *answer convention* (``problem.meta["convention"]``) its verifier applies:

* ``boxed``: the last ``\\boxed{}`` of the response (MATH, OlympiadBench, AIME, Omni-MATH, GSM8K);
* ``answer_line``: DAPO's ``Answer: ...`` line, the rule verl's ``math_dapo`` reward applies (the last match of
  ``Answer\\s*:\\s*(...)`` in the response's last 300 characters);
* ``choice``: a multiple-choice letter (GPQA), in ``\\boxed{}`` or on an ``Answer:`` line.

``meta["answers"]`` holds every acceptable gold answer and ``meta["match"]`` whether any one of them (``any``) or all
of them (``all``: OlympiadBench's multiple-answer problems, the box listing them separated by commas) must be
given. Chat-message prompts (verl rows) keep their messages in ``meta["messages"]`` for ``prompt_format=chat``.

========== ============================================================================================
schema     columns (as published)
========== ============================================================================================
verl       ``prompt`` (chat messages), ``reward_model.ground_truth``, ``reward_model.style``, ``data_source``,
           ``extra_info`` (DAPO-Math-17k and any verl RL parquet)
olympiad   ``question``, ``final_answer`` (a list), ``is_multiple_answer``, ``unit``, ``answer_type``, ``id``
gpqa       ``Question``, ``Correct Answer``, ``Incorrect Answer 1..3``, ``Record ID``
math500    ``problem``, ``solution``, ``answer``, ``subject``, ``level``, ``unique_id``
omni_math  ``problem``, ``answer``, ``solution``, ``domain``, ``difficulty``, ``source``
aime       ``ID``/``Problem``/``Answer`` (2024), ``id``/``problem``/``answer``/``url``/``year`` (2025),
           ``problem_idx``/``problem``/``answer`` (2026)
gsm8k      ``question``, ``answer`` (a worked solution ending ``#### 72``)
plain      ``prompt`` | ``problem`` | ``question`` and ``answer`` | ``final_answer`` | ``solution``, ``id``
========== ============================================================================================
"""

from __future__ import annotations

import math
import random
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from bsb.tasks.answers import extract_all_boxed
from bsb.tasks.base import Problem

CONVENTIONS = ("boxed", "answer_line", "choice")
LETTERS = "ABCD"


class RowError(ValueError):
    """A row that cannot be read; the loader adds the file and the row."""


class DataFileError(ValueError):
    """A problem file that cannot be read, whatever failed (a row, the format's own library, a size limit): the one
    error the loaders raise for a file's content, naming the file (and the row, where there is one)."""


LIMIT_ENV = "BSB_DATA_"  # BSB_DATA_MAX_ROWS=... raises bsb.tasks.data.files.MAX_ROWS for a run (and so on for each)


def over(limit: int, unit: str, name: str) -> str:
    """A limit crossed, and how to raise it: ``over the 2,097,152-row limit (BSB_DATA_MAX_ROWS raises it)``."""
    return f"over the {limit:,}-{unit} limit ({LIMIT_ENV}{name} raises it)"


def read_int(digits: str, field: str | None = None) -> int:
    """``digits`` as an int; more digits than Python converts (``sys.get_int_max_str_digits()``, 4,300 by default) is
    a :class:`RowError` (naming ``field`` where given), never Python's own message without the file."""
    try:
        return int(digits)
    except ValueError:
        what = f"field {field!r}: " if field else ""
        cap = sys.get_int_max_str_digits()
        raise RowError(f"{what}an integer of {len(digits):,} digits, over Python's {cap:,}-digit limit") from None


def as_text(value, field: str) -> str:
    """``value`` as text where text belongs: a string (or a finite number, written as read); a null, a mapping, a list
    or a bool is a :class:`RowError`, never its ``repr`` as a prompt, a gold answer or a test's stdin; so is a string
    that is not valid Unicode (a lone surrogate), refused here rather than when it is graded."""
    if isinstance(value, bool) or value is None or isinstance(value, Mapping | list | tuple | set):
        raise RowError(f"field {field!r}: expected text, got {'null' if value is None else type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise RowError(f"field {field!r}: expected text, got {value!r}")
    try:
        text = value if isinstance(value, str) else str(value) if isinstance(value, int | float) else None
    except ValueError:  # an integer of more digits than Python writes
        raise RowError(f"field {field!r}: an integer over Python's {sys.get_int_max_str_digits():,} digits") from None
    if text is None:
        raise RowError(f"field {field!r}: expected text, got {type(value).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RowError(f"field {field!r}: not valid Unicode text (a lone surrogate)") from None
    return text


def as_id(row: Mapping, names: tuple[str, ...], default: str, field: str | None = None) -> str:
    """A row's id: the first of ``names`` that holds a value, as text (a list or a mapping is a :class:`RowError`,
    never its ``repr``), else ``default``. ``field`` names it in errors (default: the column's name)."""
    for name in names:
        value = row.get(name)
        if value is not None and not _blank(value):
            return as_text(value, field or name)
    return default


def _blank(value) -> bool:
    return isinstance(value, str) and not value.strip()


def _text(row: Mapping, name: str) -> str:
    value = row.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RowError(f"missing or empty field {name!r}")
    text = as_text(value, name).strip()
    if not text:
        raise RowError(f"missing or empty field {name!r}")
    return text


def _strip_dollars(s: str) -> str:
    s = s.strip()
    while len(s) >= 2 and s.startswith("$") and s.endswith("$"):
        s = s[1:-1].strip()
    return s


def _problem(pid: str, prompt: str, answers: list[str], convention: str, match: str = "any", **meta: Any) -> Problem:
    answers = [a for a in (x.strip() for x in answers) if a]
    if not answers:
        raise RowError("the gold answer is empty")
    gold = answers[0] if len(answers) == 1 else (", ".join(answers) if match == "all" else answers[0])
    return Problem(pid, prompt, gold, {"convention": convention, "answers": answers, "match": match, **meta})


# ---------------------------------------------------------------------------------------------- readers


def read_verl(row: Mapping, index: int, path_stem: str, seed: int) -> Problem:
    messages = row.get("prompt")
    if not isinstance(messages, (list, tuple)) or not messages or not all(isinstance(m, Mapping) for m in messages):
        raise RowError("field 'prompt' must be a non-empty list of chat messages ({role, content})")
    for m in messages:
        if "role" not in m or "content" not in m:
            raise RowError("field 'prompt': every message needs 'role' and 'content'")
    rm = row.get("reward_model")
    if not isinstance(rm, Mapping) or rm.get("ground_truth") is None:
        raise RowError("missing field 'reward_model.ground_truth'")
    gold = as_text(rm["ground_truth"], "reward_model.ground_truth")
    if not gold.strip():
        raise RowError("missing field 'reward_model.ground_truth'")
    msgs = [
        {"role": as_text(m["role"], "prompt.role"), "content": as_text(m["content"], "prompt.content")}
        for m in messages
    ]
    user = [m["content"] for m in msgs if m["role"] == "user"]
    if not user:
        raise RowError("field 'prompt' has no user message")
    text = user[-1]
    convention = "answer_line" if row.get("data_source") == "math_dapo" or "Answer:" in text else "boxed"
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), Mapping) else {}
    pid = as_id(extra, ("index",), f"{path_stem}-{index}", "extra_info.index")
    return _problem(
        pid,
        text,
        [gold],
        convention,
        messages=msgs,
        style=str(rm.get("style", "")),
        data_source=str(row.get("data_source", "")),
    )


def read_olympiad(row: Mapping, index: int, path_stem: str, seed: int) -> Problem:
    if "proof" in str(row.get("question_type", "")).lower():
        raise RowError(
            "a theorem-proving row has no final answer: use the open-ended subset (e.g. OE_TO_maths_en_COMP)"
        )
    if any(row.get(f"image_{i}") for i in range(1, 6)) or str(row.get("modality", "Text-only")) not in (
        "Text-only",
        "",
    ):
        raise RowError("a multimodal row needs its images: use the text-only subset (e.g. OE_TO_maths_en_COMP)")
    question = _text(row, "question")
    final = row.get("final_answer")
    if not isinstance(final, (list, tuple)):
        raise RowError(f"field 'final_answer' must be a list of answers, got {type(final).__name__}")
    answers = [_strip_dollars(as_text(a, "final_answer")) for a in final if a is not None]
    if not any(answers):
        raise RowError("field 'final_answer' is a list of nothing")
    multiple = bool(row.get("is_multiple_answer"))
    unit = row.get("unit") or ""
    return _problem(
        as_id(row, ("id",), f"{path_stem}-{index}"),
        question,
        answers,
        "boxed",
        "all" if multiple else "any",
        unit=str(unit),
        answer_type=str(row.get("answer_type", "")),
    )


def read_gpqa(row: Mapping, index: int, path_stem: str, seed: int) -> Problem:
    question = _text(row, "Question")
    correct = _text(row, "Correct Answer")
    wrong = []
    for i in (1, 2, 3):
        name = f"Incorrect Answer {i}"
        value = row.get(name)
        if value is None or not as_text(value, name).strip():
            raise RowError(f"GPQA needs 4 options: missing or empty field {name!r}")
        wrong.append(as_text(value, name).strip())
    pid = as_id(row, ("Record ID",), f"{path_stem}-{index}")
    options = [correct] + wrong
    order = list(range(4))
    random.Random(f"{seed}-{pid}").shuffle(order)  # a fixed permutation per question and seed
    shown = [options[i] for i in order]
    letter = LETTERS[order.index(0)]
    prompt = question + "\n\n" + "\n".join(f"{LETTERS[j]}) {opt}" for j, opt in enumerate(shown))
    return _problem(pid, prompt, [letter], "choice", options=shown)


def read_math500(row: Mapping, index: int, path_stem: str, seed: int) -> Problem:
    return _problem(
        as_id(row, ("unique_id",), f"{path_stem}-{index}"),
        _text(row, "problem"),
        [_text(row, "answer")],
        "boxed",
        subject=str(row.get("subject", "")),
        level=row.get("level"),
    )


def read_omni(row: Mapping, index: int, path_stem: str, seed: int) -> Problem:
    return _problem(
        f"{path_stem}-{index}",
        _text(row, "problem"),
        [_strip_dollars(_text(row, "answer"))],
        "boxed",
        domain=list(row.get("domain") or []),
        difficulty=row.get("difficulty"),
        source=str(row.get("source", "")),
    )


def read_aime(row: Mapping, index: int, path_stem: str, seed: int) -> Problem:
    text = next(
        (
            as_text(row[k], k).strip()
            for k in ("Problem", "problem", "question")
            if row.get(k) is not None and as_text(row[k], k).strip()
        ),
        None,
    )
    if text is None:
        raise RowError("missing field 'problem' (or 'Problem', 'question')")
    raw = next((row[k] for k in ("Answer", "answer") if row.get(k) is not None and as_text(row[k], k).strip()), None)
    if raw is None:
        raise RowError("missing field 'answer' (or 'Answer')")
    answer = _strip_dollars(as_text(raw, "answer"))
    if not re.fullmatch(r"-?[0-9]+", answer):  # ASCII digits: str.isdigit() also passes '²', which int() refuses
        raise RowError(f"an AIME answer is an integer, got {raw!r}")
    pid = as_id(row, ("ID", "id", "problem_idx"), f"{path_stem}-{index}")
    return _problem(pid, text, [str(read_int(answer, "answer"))], "boxed", year=row.get("year"))


def read_gsm8k(row: Mapping, index: int, path_stem: str, seed: int) -> Problem:
    solution = _text(row, "answer")
    if "####" not in solution:
        raise RowError("a GSM8K answer ends with '#### <number>'")
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return _problem(f"{path_stem}-{index}", _text(row, "question"), [final], "boxed", solution=solution)


PROMPT_FIELDS = ("prompt", "problem", "question")
ANSWER_FIELDS = ("answer", "final_answer", "solution")
ID_FIELDS = ("id", "unique_id")
MAX_BOXES = 64  # boxed answers in one worked solution: each box's text is kept, so 5,000 nested ones held ~n² bytes


def read_plain(row: Mapping, index: int, path_stem: str, seed: int) -> Problem:
    prompt = next((row[n] for n in PROMPT_FIELDS if row.get(n) is not None and as_text(row[n], n).strip()), None)
    if prompt is None:
        raise RowError(f"missing field {PROMPT_FIELDS[0]!r} (or {', '.join(repr(n) for n in PROMPT_FIELDS[1:])})")
    raw = next((row[n] for n in ANSWER_FIELDS if row.get(n) is not None and not _blank(row[n])), None)
    if raw is None:
        raise RowError(f"missing field {ANSWER_FIELDS[0]!r} (or {', '.join(repr(n) for n in ANSWER_FIELDS[1:])})")
    if isinstance(raw, (list, tuple)):
        raise RowError(
            "the answer field is a list: name the schema (e.g. format=olympiad) so its answers are read, "
            "not stringified"
        )
    text = as_text(raw, "answer").strip()
    pid = as_id(row, ID_FIELDS, f"{path_stem}-{index}")
    if "####" in text:  # a GSM8K-style worked answer
        text = text.rsplit("####", 1)[1].strip().replace(",", "")
    elif "\\boxed" in text or "\\fbox" in text:  # a MATH-style worked solution
        if text.count("\\boxed") + text.count("\\fbox") > MAX_BOXES:
            raise RowError(f"a solution with over {MAX_BOXES} \\boxed{{}} answers (one answer, or a short list)")
        boxes = [b.strip() for b in extract_all_boxed(text) if b.strip()]
        if not boxes:
            raise RowError("the solution's \\boxed{} is not closed")
        # several boxes are one answer together (a list or set, as math-verify reads them), not the last one
        unique = list(dict.fromkeys(boxes))
        return _problem(pid, as_text(prompt, "prompt"), unique, "boxed", match="all" if len(unique) > 1 else "any")
    return _problem(pid, as_text(prompt, "prompt"), [text], "boxed")


# ---------------------------------------------------------------------------------------------- detection

# name -> (reader, whether a row's columns identify it); checked in order, plain last
SCHEMAS: dict[str, tuple[Callable[..., Problem], Callable[[set[str], Mapping], bool]]] = {
    "verl": (read_verl, lambda c, r: {"prompt", "reward_model"} <= c),
    "olympiad": (read_olympiad, lambda c, r: {"question", "final_answer", "is_multiple_answer"} <= c),
    "gpqa": (read_gpqa, lambda c, r: {"Question", "Correct Answer", "Incorrect Answer 1"} <= c),
    "math500": (read_math500, lambda c, r: {"problem", "answer", "subject", "level", "unique_id"} <= c),
    "omni_math": (read_omni, lambda c, r: {"problem", "answer", "domain", "difficulty", "source"} <= c),
    "aime": (
        read_aime,
        lambda c, r: (
            {"Problem", "Answer"} <= c
            or {"problem_idx", "problem", "answer"} <= c
            or {"problem", "answer", "url", "year"} <= c
        ),
    ),
    "gsm8k": (read_gsm8k, lambda c, r: c == {"question", "answer"} and "####" in str(r.get("answer", ""))),
    "plain": (read_plain, lambda c, r: bool(c & set(PROMPT_FIELDS + ANSWER_FIELDS))),  # names the field it misses
}


def detect(row: Mapping) -> str | None:
    """The first schema whose columns ``row`` has (None: none does)."""
    columns = set(row)
    return next((name for name, (_, match) in SCHEMAS.items() if match(columns, row)), None)
