"""Math answers: extract the final boxed answer, normalise it, and grade it against the gold answer.

Grading order: a normalised string match first (cheap, and it covers most correct answers), then an exact
comparison when both sides are plain numbers (integers, decimals, integer fractions), then symbolic
equivalence with math-verify (or sympy when math-verify is not installed). The symbolic step runs in a forked
process with a time bound, because a hostile answer (deep nesting, a megabyte of digits, ``\\frac`` bombs) can
make a symbolic parser run for minutes. Answers over the size or nesting limits, and numbers too large to compute
(an exponent over :data:`MAX_EXPONENT`: ``9^{9^{9}}``, ``9**9**9``, ``1e999999``; a factorial of over
:data:`MAX_FACTORIAL`: ``(10^{100})!``), are graded wrong without being parsed. Each such case is counted in
:attr:`MathGrader.stats` and logged once per kind.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import re
from collections import Counter
from fractions import Fraction
from functools import lru_cache

from bsb.tasks.answers import extract_boxed, split_top_level

log = logging.getLogger(__name__)

_STRIP = [r"\left", r"\right", r"\!", r"\,", r"\;", r"\:", r"\$", "$", r"\displaystyle"]
# 1,000 and 32,349,000: groups of three digits after the first, no space after a comma ("32, 349" is a list)
_THOUSANDS = re.compile(r"(?<![\d.,(\[{])\d{1,3}(?:,\d{3})+(?![\d,)\]}\\])")  # never inside brackets: (1,100)
_UNITS = re.compile(r"(?<=\d)\s*(?:\\?(?:pct|percentage|percent|degrees|degree)\b|°)\s*$")  # after a number, at the end
_DECIMAL_COMMA = re.compile(r"\s*(-?\d+),(\d{1,2}|\d{4,})\s*")  # 1000,99: a decimal comma, not a thousands one


def normalize(answer: str) -> str:
    """A canonical string: no spaces or sizing commands, \\dfrac/\\tfrac → \\frac, no trailing period, no
    ``x =`` prefix, no thousands separators, no ``\\text{...}`` wrapper, no ``$`` or ``\\$``, no degree sign,
    ``\\%`` or trailing unit word (pct, percent, percentage, degrees). A comma followed by a space separates items:
    ``32, 349`` stays a list of two numbers."""
    s = answer.strip()
    for tok in _STRIP:
        s = s.replace(tok, "")
    s = s.replace(r"\dfrac", r"\frac").replace(r"\tfrac", r"\frac").replace("^\\circ", "").replace("^{\\circ}", "")
    s = s.replace("\\%", "").replace("%", "")
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    s = _UNITS.sub("", s.strip())
    s = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), s)
    s = re.sub(r"\s+", "", s)
    s = re.sub(r"^[a-zA-Z]\s*=", "", s)
    s = s.rstrip(".")
    if re.fullmatch(r"-?\d+\.\d*", s):  # 2.50 → 2.5, 3. → 3
        s = s.rstrip("0").rstrip(".")
    return s


def decimal_comma(answer: str) -> Fraction | None:
    """``1000,99`` (a comma then other than three digits, nothing else) as the number 1000.99; None otherwise."""
    m = _DECIMAL_COMMA.fullmatch(answer)
    return Fraction(f"{m.group(1)}.{m.group(2)}") if m else None


_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_FRAC = re.compile(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}")


def _number(s: str) -> Fraction | None:
    """A normalised answer that is a plain integer, decimal or \\frac of integers, as an exact Fraction."""
    if _NUMBER.fullmatch(s):
        return Fraction(s)
    m = _FRAC.fullmatch(s)
    if m and int(m.group(3)) != 0:
        value = Fraction(int(m.group(2)), int(m.group(3)))
        return -value if m.group(1) else value
    return None


MAX_EXPONENT = 10**5  # a power with a larger exponent (a number, or a power or factorial of numbers) is hostile
MAX_FACTORIAL = 10**5  # so is a factorial of a larger number
_OPEN, _CLOSE = "{([", "})]"
_POWER = re.compile(r"\^|\*\*")
_PLAIN = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_CHAIN = re.compile(r"\s*[+-]?[\d.]+(?:\s*(?:\^|\*\*)\s*[+-]?[\d.]+)*")  # 9**9 in 9**9**9, 9^9 in 9^9^9
_SCIENTIFIC = re.compile(r"\d[eE]\+?(-?\d+)")
_FACTORIAL = re.compile(r"(?<!\\)!")  # not \! (a negative thin space)


def _group_end(s: str, i: int) -> int:
    """The index after the bracket group that opens at ``s[i]`` (the end of ``s`` when it never closes)."""
    depth = 0
    for j in range(i, len(s)):
        depth += (s[j] in _OPEN) - (s[j] in _CLOSE)
        if depth <= 0:
            return j + 1
    return len(s)


def _group_start(s: str, end: int) -> int:
    """The index of the bracket that opens the group closing at ``s[end - 1]``."""
    depth = 0
    for j in range(end - 1, -1, -1):
        depth += (s[j] in _CLOSE) - (s[j] in _OPEN)
        if depth <= 0:
            return j
    return 0


def _value(text: str) -> float | None:
    """The size of ``text`` when it is a number, or a power or factorial of numbers (``9^{9^9}``, ``9**9**9``,
    ``(10^{100})!``): inf past a float's range; None for anything else (a symbol, a sum)."""
    t = text.strip()
    while t and t[0] in _OPEN and _group_end(t, 0) == len(t):
        t = t[1:-1].strip()
    if _PLAIN.fullmatch(t):
        return abs(float(t))
    if t.endswith("!") and not t.endswith("\\!"):
        n = _value(t[:-1])
        return None if n is None else math.inf if n > 170 else math.gamma(n + 1)
    depth, power = 0, None
    for j, ch in enumerate(t):
        depth += (ch in _OPEN) - (ch in _CLOSE)
        if depth == 0 and (ch == "^" or t.startswith("**", j)):
            power = j
            break
    if power is None:
        return None
    base, exp = _value(t[:power]), _value(t[power + 1 :].removeprefix("*"))
    if base is None or exp is None:
        return None
    return base if base <= 1 else math.inf if exp * math.log10(base) > 300 else base**exp


def _term_start(s: str, end: int) -> int:
    """Where the term ending at ``s[end - 1]`` starts: a number or a bracket group, with the powers whose exponent it
    is (``10^{100}!`` is the factorial of ``10^{100}``)."""
    while True:
        j = _group_start(s, end) if end and s[end - 1] in _CLOSE else end
        while j and (s[j - 1].isdigit() or s[j - 1] == "."):
            j -= 1
        op = 2 if s.endswith("**", 0, j) else 1 if s.endswith("^", 0, j) else 0
        if not op or j == end:
            return j
        end = j - op


def huge_number(answer: str) -> str | None:
    """Why ``answer`` holds a number too large to compute (a symbolic parser would compute it digit by digit): an
    exponent over :data:`MAX_EXPONENT`, a factorial of over :data:`MAX_FACTORIAL`; None when it holds none."""
    for m in _SCIENTIFIC.finditer(answer):
        if abs(int(m.group(1))) > MAX_EXPONENT:
            return f"exponent {m.group(1)[:20]}"
    for m in _POWER.finditer(answer):
        j = m.end()
        while j < len(answer) and answer[j].isspace():
            j += 1
        chain = _CHAIN.match(answer, j)
        exp = answer[j : _group_end(answer, j)] if j < len(answer) and answer[j] in _OPEN else chain and chain.group()
        size = _value(exp) if exp else None
        if size is not None and size > MAX_EXPONENT:
            return f"a power with exponent {exp.strip()[:40]}"
    for m in _FACTORIAL.finditer(answer):
        term = answer[_term_start(answer, m.start()) : m.start()]
        size = _value(term)
        if size is not None and size > MAX_FACTORIAL:
            return f"the factorial of {term[:40]}"
    return None


@lru_cache(maxsize=1)
def _load_symbolic() -> None:
    """Import the symbolic checker here, once, before the first fork: a forked check then starts with it loaded
    (importing math-verify and sympy in every child took about 0.4 s a check, most of the check's time)."""
    try:
        import math_verify  # noqa: F401
    except ImportError:
        import sympy  # noqa: F401


def _symbolic_equal(pred: str, gold: str, conn) -> None:
    try:
        try:
            from math_verify import parse, verify

            conn.send(bool(verify(parse(f"${gold}$"), parse(f"${pred}$"))))
        except ImportError:
            import sympy

            conn.send(bool(sympy.simplify(sympy.sympify(pred) - sympy.sympify(gold)) == 0))
    except Exception:
        conn.send(False)


class MathGrader:
    """``grade(response, gold) -> bool``: the response's last boxed answer against the gold answer."""

    def __init__(
        self,
        timeout_s: float = 2.0,
        max_answer_chars: int = 500,
        max_depth: int = 32,
        max_fracs: int = 16,
        max_powers: int = 64,
    ):
        self.timeout_s, self.max_answer_chars, self.max_depth = timeout_s, max_answer_chars, max_depth
        self.max_fracs, self.max_powers = max_fracs, max_powers
        self.stats: Counter[str] = Counter()

    def _count(self, kind: str, detail: str) -> None:
        if self.stats[kind] == 0:
            log.warning("math grader: %s (%s); graded wrong, counted in MathGrader.stats[%r]", kind, detail, kind)
        self.stats[kind] += 1

    def _hostile(self, answer: str) -> str | None:
        if len(answer) > self.max_answer_chars:
            return f"answer of {len(answer)} characters"
        depth = peak = 0
        for ch in answer:
            depth += {"{": 1, "(": 1, "[": 1, "}": -1, ")": -1, "]": -1}.get(ch, 0)
            peak = max(peak, depth)
        if peak > self.max_depth:
            return f"nesting depth {peak}"
        if answer.count("\\frac") > self.max_fracs:
            return f"{answer.count(chr(92) + 'frac')} \\frac"
        powers = len(_POWER.findall(answer)) + answer.count("!")
        if powers > self.max_powers:
            return f"{powers} powers and factorials"
        return huge_number(answer)

    def grade(self, response: str, gold: str) -> bool:
        """The response's last boxed answer against ``gold``."""
        pred = extract_boxed(response)
        if pred is None:
            self.stats["no_answer"] += 1
            return False
        return self.equivalent(pred, gold)

    def equivalent(self, pred: str, gold: str) -> bool:
        """An extracted answer against ``gold``: normalised match, exact numbers, then bounded symbolic equivalence."""
        why = self._hostile(pred)
        if why:
            self._count("hostile", why)
            return False
        p, g = normalize(pred), normalize(gold)
        if not p:
            self.stats["no_answer"] += 1
            return False
        if p == g:
            return True
        pn, gn = _number(p), _number(g)
        if gn is not None and pn is None:  # a predicted decimal comma against one number: 1000,99 is 1000.99
            pn = decimal_comma(pred)  # (never on the gold side: a gold "10,20" is a list)
        if pn is not None and gn is not None:  # plain numbers: exact, no symbolic parse
            return pn == gn
        ps, gs = split_top_level(p), split_top_level(g)
        if len(ps) != len(gs):  # a list never equals one answer (\boxed{32, 349} is not 32349)
            return False
        if len(ps) > 1:  # lists as sets, as math-verify compares them: each gold item matched by a distinct one
            return self.match_all(ps, gs)
        return self._bounded_symbolic(p, g)

    def match_all(self, preds: list[str], golds: list[str]) -> bool:
        """Every gold answer matched by a distinct predicted one, and nothing extra (order free)."""
        if len(preds) != len(golds):
            return False
        left = list(preds)
        for g in golds:
            hit = next((p for p in left if self.equivalent(p, g)), None)
            if hit is None:
                return False
            left.remove(hit)
        return True

    def _bounded_symbolic(self, pred: str, gold: str) -> bool:
        _load_symbolic()
        ctx = mp.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_symbolic_equal, args=(pred, gold, send), daemon=True)
        proc.start()
        ok = recv.poll(self.timeout_s)
        result = recv.recv() if ok else False
        if proc.is_alive():
            proc.kill()
        proc.join()
        if not ok:
            self._count("timeout", f"symbolic check over {self.timeout_s}s")
        return result


def gated_reward(response: str, correct: bool, min_chars_before_box: int = 30) -> float:
    """[TwoStage]'s derivation gate (§4.1), its rule verbatim: ``text.rfind("\\boxed") >= 30``. A correct answer pays
    only if the last ``\\boxed`` starts at least ``min_chars_before_box`` characters into the response, so a bare
    answer with no derivation earns 0. Only ``\\boxed`` counts (an ``\\fbox`` is graded but never opens the gate)."""
    return float(correct and response.rfind("\\boxed") >= min_chars_before_box)
