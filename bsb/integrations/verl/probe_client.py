"""Probe-JS reads through an OpenAI-compatible vLLM server: the top-K belief after ``prefix[:t] + suffix``.

verl's rollout servers turn a ``logprobs`` request into the sampled token's log-prob only, so the belief comes from
the replica's own OpenAI API instead (every verl vLLM replica serves one):

* :class:`CompletionsProbe` (default) posts one ``/v1/completions`` request per boundary: the token-id prompt
  ``prefix[:t] + suffix``, ``max_tokens = min_tokens = L``, ``logprobs = K``, ``temperature = 1``, ``top_p = 1``
  (verl runs vLLM with ``processed_logprobs``: T = 1 and top-p = 1 make them the raw beliefs), ``ignore_eos`` and
  ``return_tokens_as_token_ids``. The request goes to the replica that holds the chain (sticky routing), so the
  prefix's KV blocks are read from its cache and only the suffix and the L read tokens are computed. This is the
  read :meth:`bsb.engine.vllm_backend.VLLMBackend.probe_topk` makes in-process.
* :class:`PromptLogprobsProbe` (``bsb.probe_endpoint=prompt_logprobs``), where the HTTP endpoint is unreachable:
  ``prompt_logprobs = K`` through verl's own generate call on ``prefix[:t] + suffix + reads`` (the L read tokens
  sampled first when L > 1, a placeholder token when L = 1). vLLM computes prompt log-probs without reading the
  prefix cache, so every read recomputes the whole prefix: it warns once.

Each returns, per chain, ``(logp, idx, spent)``: (C, L, K) log-probs and token ids, best first (ties: the lower id),
and the tokens the server computed (cached prompt tokens excluded when the server reports them).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import weakref
from collections.abc import Awaitable, Callable, Sequence

import torch

from bsb.engine.backend import best_k, probe_prompts
from bsb.engine.web_client import MAX_REPLY_BYTES

log = logging.getLogger(__name__)


class ProbeError(RuntimeError):
    """A probe read failed (server unreachable, HTTP error, a reply without the asked log-probs)."""


def _best(entries: Sequence[tuple[int, float]], k: int) -> tuple[list[float], list[int]]:
    """The k best (token, logprob) pairs (:func:`bsb.engine.backend.best_k`: ties to the lower id, as VLLMBackend). A
    log-prob that is NaN, positive or +inf, or a negative token id, is not a belief: a :class:`ProbeError`."""
    for tok, lp in entries:
        if math.isnan(lp) or lp > 0 or tok < 0:
            raise ProbeError(f"the server returned log-prob {lp!r} for token {tok}: not a log-probability")
    best = best_k(entries, k)
    if len(best) < k:
        raise ProbeError(f"the server returned {len(best)} log-probs where {k} were asked")
    return [lp for _, lp in best], [tok for tok, _ in best]


TOKEN_KEY = re.compile(r"token_id:([0-9]{1,18})")  # ASCII digits only ("²".isdigit() is true), within int64


def _token_id(key: str) -> int:
    m = TOKEN_KEY.fullmatch(key) if isinstance(key, str) else None
    if m is None:
        raise ProbeError(f"top_logprobs key {key!r} is not a token id: the server ignored return_tokens_as_token_ids")
    return int(m.group(1))


def _id(value) -> int:
    """A token id from a reply's list: an int within int64, never a bool, a float or a string."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ProbeError(f"the server returned {value!r} as a token id")
    return value


def _logprob(value) -> float:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**64:  # no float: an OverflowError
        raise ProbeError(f"the server returned a {len(str(abs(value)))}-digit integer as a log-prob")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProbeError(f"the server returned {value!r} as a log-prob")
    return float(value)


def parse_completion(reply: dict, read_len: int, k: int) -> tuple[list[list[float]], list[list[int]], int]:
    """(logp (L, k), ids (L, k), cached prompt tokens) of one ``/v1/completions`` reply."""
    try:
        choice = reply["choices"][0]
        tops = choice["logprobs"]["top_logprobs"]
    except (KeyError, IndexError, TypeError) as err:
        raise ProbeError(f"completions reply without logprobs.top_logprobs: {str(reply)[:200]}") from err
    if not isinstance(tops, list) or len(tops) < read_len or not all(isinstance(p, dict) for p in tops[:read_len]):
        raise ProbeError(f"completions reply has no {read_len} read positions of top log-probs: {str(tops)[:200]}")
    logp, ids = [], []
    for pos in tops[:read_len]:
        lp, tok = _best([(_token_id(key), _logprob(v)) for key, v in pos.items()], k)
        logp.append(lp)
        ids.append(tok)
    usage = reply.get("usage") or {}
    details = (usage.get("prompt_tokens_details") if isinstance(usage, dict) else None) or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is not None and (isinstance(cached, bool) or not isinstance(cached, int) or cached < 0):
        raise ProbeError(f"completions reply reports {cached!r} cached tokens")
    return logp, ids, cached or 0


def _stack(rows: list[tuple[list[list[float]], list[list[int]]]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([r[0] for r in rows], dtype=torch.float32), torch.tensor([r[1] for r in rows], dtype=torch.long)


class CompletionsProbe:
    """Top-K beliefs from ``{base_url}/v1/completions`` (one request per boundary, all of a call at once)."""

    def __init__(self, timeout_s: float = 120.0, model: str | None = None):
        self.timeout_s, self.model = timeout_s, model
        self._models: dict[str, str] = {}
        # one HTTP session per event loop (a session is bound to its loop); an entry goes with its loop
        self._sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def _http(self):
        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            session = self._sessions[loop] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return session

    async def close(self) -> None:
        """Close this event loop's session."""
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()

    async def _json(self, method: str, url: str, **kw) -> dict:
        import aiohttp

        session = await self._http()
        try:  # never a redirect (the reply would come from elsewhere), at most MAX_REPLY_BYTES, within the timeout
            async with session.request(method, url, allow_redirects=False, **kw) as resp:
                body = b""
                async for chunk in resp.content.iter_any():
                    body += chunk
                    if len(body) > MAX_REPLY_BYTES:
                        raise ProbeError(f"{method} {url}: a reply over {MAX_REPLY_BYTES} bytes")
                if resp.status != 200:
                    raise ProbeError(f"{method} {url}: HTTP {resp.status}: {body[:300]!r}")
        except (
            aiohttp.ClientError,
            aiohttp.http_exceptions.HttpProcessingError,
            asyncio.TimeoutError,
            ValueError,
        ) as err:
            raise ProbeError(f"{method} {url}: {type(err).__name__}: {err}") from err
        try:
            reply = json.loads(body.decode("utf-8"))
        except (ValueError, RecursionError):
            raise ProbeError(f"{method} {url}: the reply is not JSON: {body[:200]!r}") from None
        if not isinstance(reply, dict):
            raise ProbeError(f"{method} {url}: the reply is not a JSON object: {body[:200]!r}")
        return reply

    async def model_name(self, base_url: str) -> str:
        if self.model:
            return self.model
        if base_url not in self._models:
            listing = await self._json("GET", f"{base_url}/v1/models")
            try:
                self._models[base_url] = listing["data"][0]["id"]
            except (KeyError, IndexError, TypeError) as err:
                raise ProbeError(f"{base_url}/v1/models lists no model: {str(listing)[:200]}") from err
        return self._models[base_url]

    async def read(
        self,
        base_url: str,
        prefix: Sequence[int],
        cuts: Sequence[int],
        suffix: Sequence[int],
        read_len: int,
        k: int,
        seed: int,
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One chain's reads at ``cuts`` (positions in ``prefix``): (C, L, k) log-probs, ids, tokens computed."""
        model = await self.model_name(base_url)

        async def one(prompt: list[int]):
            body = dict(
                model=model,
                prompt=prompt,
                max_tokens=read_len,
                min_tokens=read_len,
                ignore_eos=True,
                logprobs=k,
                temperature=1.0,
                top_p=1.0,
                seed=seed,
                return_tokens_as_token_ids=True,
            )
            return await self._json("POST", f"{base_url}/v1/completions", json=body)

        prompts = probe_prompts(prefix, cuts, suffix)
        replies = await asyncio.gather(*(one(p) for p in prompts))
        rows, spent = [], 0
        for prompt, reply in zip(prompts, replies):
            logp, ids, cached = parse_completion(reply, read_len, k)
            rows.append((logp, ids))
            spent += len(prompt) - cached + read_len
        return (*_stack(rows), spent)


# generate(prompt_ids, sampling_params) -> (token_ids, extra_fields): verl's server call, bound to a request id
GenerateExtra = Callable[[list[int], dict], Awaitable[tuple[list[int], dict]]]


class PromptLogprobsProbe:
    """Top-K beliefs as ``prompt_logprobs`` through verl's own generate call (no HTTP endpoint needed). vLLM skips
    the prefix cache for prompt log-probs, so each read recomputes its whole prefix."""

    warned = False

    async def read(
        self,
        generate: GenerateExtra,
        prefix: Sequence[int],
        cuts: Sequence[int],
        suffix: Sequence[int],
        read_len: int,
        k: int,
        seed: int,
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        if not PromptLogprobsProbe.warned:
            log.warning(
                "bsb probe reads use prompt_logprobs: vLLM recomputes every read's prefix (no prefix cache); "
                "serve /v1/completions and set bsb.probe_endpoint=completions to read from the cache"
            )
            PromptLogprobsProbe.warned = True

        async def one(context: list[int]):
            if read_len > 1:  # sample the L read tokens first (T = 1), then read the beliefs along them
                reads, _ = await generate(
                    list(context),
                    dict(
                        max_tokens=read_len - 1,
                        min_tokens=read_len - 1,
                        ignore_eos=True,
                        temperature=1.0,
                        top_p=1.0,
                        seed=seed,
                    ),
                )
                reads = list(reads[: read_len - 1])
            else:
                reads = []
            _, extra = await generate(
                context + reads + [0], dict(max_tokens=1, prompt_logprobs=k, temperature=1.0, top_p=1.0)
            )
            ids, lps = extra.get("prompt_ids"), extra.get("prompt_logprobs")
            if ids is None or lps is None:
                raise ProbeError(
                    "the server returned no prompt_logprobs (verl's vLLM server puts them in extra_fields)"
                )
            logp, tok = [], []
            for pos in range(len(context) - 1, len(context) + read_len - 1):  # entry j: the belief over token j + 1
                try:
                    row = list(zip(ids[pos], lps[pos]))
                except (TypeError, IndexError, KeyError):
                    raise ProbeError(f"the server's prompt_logprobs have no list at position {pos}") from None
                pairs = [(_id(i), _logprob(v)) for i, v in row if i is not None and v is not None]
                lp, tk = _best(pairs, k)
                logp.append(lp)
                tok.append(tk)
            return logp, tok, len(context) + read_len

        results = await asyncio.gather(*(one(p) for p in probe_prompts(prefix, cuts, suffix)))
        return (*_stack([(lp, tk) for lp, tk, _ in results]), sum(n for _, _, n in results))
