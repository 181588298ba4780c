"""Answer text: how a response states its answer and how to read it back (the boxed answer, DAPO's ``Answer:`` line, a
multiple-answer list), shared by the math grader, the problem-file schemas and the synthetic arithmetic chains."""

from __future__ import annotations

import re

_BOX = re.compile(r"\\(?:boxed|fbox)\s*")
ANSWER_PREFIX = "So the final answer is \\boxed{"  # how a boxed-answer chain states its answer; the math probes' suffix


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces kept), or of ``\\boxed 5``: how a
    prediction's answer is read (a response that boxes several answers is graded on its last)."""
    boxes = extract_all_boxed(text)
    return boxes[-1] if boxes else None


def extract_all_boxed(text: str) -> list[str]:
    """The content of every closed ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed 5``, in order."""
    out = []
    for m in _BOX.finditer(text):
        start = m.end()
        if start < len(text) and text[start] == "{":
            depth, j = 0, start
            while j < len(text):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    out.append(text[start + 1 : j])
                    break
                j += 1
        else:
            word = re.match(r"[^\s$]+", text[start:])
            if word:
                out.append(word.group(0))
    return out


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
