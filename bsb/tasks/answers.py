"""Answer text: how a response states its answer and how to read it back (the boxed answer, DAPO's ``Answer:`` line, a
multiple-answer list), shared by the math grader, the problem-file schemas and the synthetic arithmetic chains."""

from __future__ import annotations

import re

_BOX = re.compile(r"\\(?:boxed|fbox)\s*")
ANSWER_PREFIX = "So the final answer is \\boxed{"  # how a boxed-answer chain states its answer; the math probes' suffix


_BRACE = re.compile(r"[{}]")
_WORD = re.compile(r"[^\s$]+")


def _closing(text: str) -> dict[int, int]:
    """Where each ``{`` of ``text`` that closes is closed, in one pass (nested braces matched)."""
    close, opened = {}, []
    for m in _BRACE.finditer(text):
        if m.group() == "{":
            opened.append(m.start())
        elif opened:
            close[opened.pop()] = m.start()
    return close


def _box_content(text: str, start: int, close: dict[int, int]) -> str | None:
    if text.startswith("{", start):
        return text[start + 1 : close[start]] if start in close else None
    word = _WORD.match(text, start)
    return word.group() if word else None


def extract_boxed(text: str) -> str | None:
    """The content of the last closed ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces kept), or of ``\\boxed 5``: how
    a prediction's answer is read (a response that boxes several answers is graded on its last). One pass over
    ``text``: 20,000 unclosed ``\\boxed{`` are read in milliseconds (a scan on from every box took minutes)."""
    close = _closing(text)
    for m in reversed(list(_BOX.finditer(text))):
        content = _box_content(text, m.end(), close)
        if content is not None:
            return content
    return None


def extract_all_boxed(text: str) -> list[str]:
    """The content of every closed ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed 5``, in order."""
    close = _closing(text)
    found = (_box_content(text, m.end(), close) for m in _BOX.finditer(text))
    return [c for c in found if c is not None]


_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")


def extract_answer_line(text: str) -> str | None:
    """DAPO's convention, the extraction rule of verl's ``math_dapo`` reward: the last ``Answer: ...`` line within
    the response's last 300 characters (the rest of that line)."""
    found = _ANSWER_LINE.findall(text[-300:])
    return found[-1].strip() if found else None


def split_top_level(answer: str) -> list[str]:
    """Split a multiple-answer string at commas outside brackets (``1, (2, 3)`` -> ``["1", "(2, 3)"]``)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(answer):
        depth += {"{": 1, "(": 1, "[": 1, "}": -1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(answer[start:i])
            start = i + 1
    parts.append(answer[start:])
    return [p.strip() for p in parts if p.strip()]
