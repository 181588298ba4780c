"""The LLM judge behind the ``llm_judge`` selector ([Fork] §4's black-box baseline): a model rates each candidate
boundary's importance from the chain's text alone.

* :func:`judge_prompt`: the repository's template (``judge_prompt.txt``, or your own file) filled with the problem
  and the response cut at the candidate boundaries into numbered steps; step j is the segment a fork at boundary j
  re-rolls (fork-before, as every selector here), so its rating is boundary j's score.
* :func:`parse_scores`: the reply's ``{"scores": [...]}`` (or a bare list), anywhere in the text; a reply that does
  not parse, holds the wrong number of scores, or a score outside [0, 10] is a :class:`JudgeError` (the selector then
  falls back to Midpoint and counts it).
* Clients: :class:`OpenAIJudge`, any OpenAI-compatible ``/v1/chat/completions`` or ``/v1/completions`` endpoint (URL
  and model from config, key from an environment variable; one deadline per call, no redirect followed, the reply's
  size capped (:mod:`bsb.engine.web_client`); errors, timeouts and malformed replies are :class:`JudgeError`), and
  :class:`LocalJudge`, a local model through a bsb backend's ``generate``. Each keeps :class:`JudgeStats`: calls,
  tokens, latency, failures by reason.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bsb.engine.web_client import HTTPFailure, post_json

TEMPLATE = Path(__file__).with_name("judge_prompt.txt")
MAX_SCORE = 10.0


class JudgeError(Exception):
    """The judge gave no usable rating (its reason is counted)."""


@dataclass
class JudgeStats:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    failures: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        fails = ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items())) or "none"
        per = self.latency_s / self.calls if self.calls else 0.0
        return (
            f"{self.calls} calls, {self.prompt_tokens} prompt + {self.completion_tokens} completion tokens, "
            f"{per:.2f} s per call; fallbacks: {fails}"
        )


@dataclass(frozen=True)
class JudgeReply:
    text: str
    prompt_tokens: int
    completion_tokens: int


def judge_prompt(problem: str, context: str, steps: list[str], template: str | Path | None = None) -> str:
    text = Path(template or TEMPLATE).read_text()
    numbered = "\n".join([context.rstrip()] if context.strip() else []) + ("\n" if context.strip() else "")
    numbered += "\n".join(f"[{j + 1}] {s.strip()}" for j, s in enumerate(steps))
    return text.replace("{problem}", problem.strip()).replace("{steps}", numbered).replace("{n}", str(len(steps)))


_OBJECT = re.compile(r"\{[^{}]*\"scores\"\s*:\s*\[[^\[\]]*\][^{}]*\}", re.S)
_LIST = re.compile(r"\[[^\[\]]*\]", re.S)


def parse_scores(reply: str, n: int) -> list[float]:
    """The n scores of a reply, each in [0, 10]; :class:`JudgeError` naming what is wrong otherwise."""
    values = None
    for match in reversed(_OBJECT.findall(reply)):
        try:
            values = json.loads(match)["scores"]
            break
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    if values is None:
        for match in reversed(_LIST.findall(reply)):
            try:
                values = json.loads(match)
                break
            except json.JSONDecodeError:
                continue
    if not isinstance(values, list):
        raise JudgeError("unparseable reply")
    if len(values) != n:
        raise JudgeError("wrong number of scores")
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):  # true is no 1, "5" no 5
        raise JudgeError("non-numeric score")
    if any(not (0 <= v <= MAX_SCORE) for v in values):  # NaN fails both; a 400-digit int is compared, never floated
        raise JudgeError("score out of range")
    return [float(v) for v in values]


class OpenAIJudge:
    """A judge behind an OpenAI-compatible endpoint: ``endpoint`` ``chat`` (``/v1/chat/completions``) or
    ``completions`` (``/v1/completions``); the API key from the environment variable ``key_env`` (optional)."""

    def __init__(
        self,
        url: str,
        model: str,
        endpoint: str = "chat",
        key_env: str = "BSB_JUDGE_API_KEY",
        timeout_s: float = 60.0,
        max_tokens: int = 256,
        temperature: float = 0.0,
    ):
        if endpoint not in ("chat", "completions"):
            raise ValueError(f"judge endpoint must be chat or completions, got {endpoint!r}")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"judge url must be http(s)://..., got {url!r}")
        if timeout_s <= 0:
            raise ValueError(f"judge timeout_s must be > 0, got {timeout_s}")
        base = url.rstrip("/")
        self.url = (
            base + ("/chat/completions" if endpoint == "chat" else "/completions")
            if base.endswith("/v1")
            else base + ("/v1/chat/completions" if endpoint == "chat" else "/v1/completions")
        )
        self.model, self.endpoint, self.timeout_s = model, endpoint, timeout_s
        self.max_tokens, self.temperature, self.key = max_tokens, temperature, os.environ.get(key_env)
        self.stats = JudgeStats()

    def complete(self, prompt: str) -> JudgeReply:
        body = dict(model=self.model, max_tokens=self.max_tokens, temperature=self.temperature)
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        start = time.perf_counter()
        self.stats.calls += 1
        try:
            reply = post_json(self.url, body, headers, self.timeout_s)
        except HTTPFailure as err:
            raise JudgeError(err.reason) from None
        finally:
            self.stats.latency_s += time.perf_counter() - start
        try:
            choice = reply["choices"][0]
            text = choice["message"]["content"] if self.endpoint == "chat" else choice["text"]
        except (KeyError, IndexError, TypeError):
            raise JudgeError("reply without choices") from None
        if not isinstance(text, str | None):
            raise JudgeError("reply without choices")
        usage = reply.get("usage") or {}
        if not isinstance(usage, dict):
            raise JudgeError("malformed usage")
        out = JudgeReply(text or "", _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")))
        self.stats.prompt_tokens += out.prompt_tokens
        self.stats.completion_tokens += out.completion_tokens
        return out


def _count(value) -> int:
    """A token count from a reply's ``usage``: absent is 0; anything but a whole number in [0, 2**53) is refused."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise JudgeError("malformed usage")
    if value != int(value) or not 0 <= value < 2**53:
        raise JudgeError("malformed usage")
    return int(value)


class LocalJudge:
    """A local model as the judge, through a bsb backend's ``generate`` and its tokenizer (greedy)."""

    def __init__(self, backend, tokenizer, max_tokens: int = 256):
        self.backend, self.tok, self.max_tokens = backend, tokenizer, max_tokens
        self.stats = JudgeStats()

    def complete(self, prompt: str) -> JudgeReply:
        ids = self.tok.encode(prompt, add_special_tokens=False)
        start = time.perf_counter()
        self.stats.calls += 1
        try:
            out = self.backend.generate([ids], self.max_tokens, temperature=0.0, eos_token_id=self.tok.eos_token_id)[0]
        finally:
            self.stats.latency_s += time.perf_counter() - start
        self.stats.prompt_tokens += len(ids)
        self.stats.completion_tokens += len(out)
        return JudgeReply(self.tok.decode(out, skip_special_tokens=True), len(ids), len(out))
