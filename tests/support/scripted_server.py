"""A scripted model behind an OpenAI-compatible ``/v1/completions`` endpoint and a scripted async generator, for
the verl integration's tests (no model, no vLLM; aiohttp only).

The script: over a vocabulary of ``VOCAB`` tokens, the next-token log-probs after a token sequence are a
log-softmax of logits that depend on the sequence's sum and length (:func:`belief`), so beliefs move along a chain.
Generation (:func:`scripted_tokens`) is a deterministic function of the prompt and the seed; EOS is ``EOS``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from bsb.tasks.base import Problem, Task, Verdict

VOCAB, EOS, NL = 64, 1, 7


def belief(tokens: list[int]) -> torch.Tensor:
    """(VOCAB,) log-probs of the next token after ``tokens``."""
    g = torch.Generator().manual_seed(sum(tokens) * 131 + len(tokens))
    return torch.log_softmax(3 * torch.randn(VOCAB, generator=g, dtype=torch.float64), -1).float()


def topk(tokens: list[int], k: int) -> tuple[list[float], list[int]]:
    lp = belief(tokens)
    order = sorted(range(VOCAB), key=lambda i: (-float(lp[i]), i))[:k]
    return [float(lp[i]) for i in order], order


def scripted_tokens(prompt: list[int], max_tokens: int, seed: int, length: int | None = None) -> list[int]:
    """A response: newline-separated runs of tokens ending in EOS, ``length`` tokens (or seed-dependent)."""
    g = torch.Generator().manual_seed(int(seed) * 7 + sum(prompt))
    n = length if length is not None else 20 + int(torch.randint(0, 20, (1,), generator=g))
    body = (torch.randint(8, VOCAB, (n,), generator=g)).tolist()
    for i in range(4, n, 5):
        body[i] = NL
    out = body[: max(0, n - 1)] + [EOS]
    return out[:max_tokens]


class ScriptedServer:
    """``/v1/models`` and ``/v1/completions`` on localhost in a background thread. ``mode``: ``ok``, ``http_error``
    (500), ``no_logprobs`` (a reply without them), ``text_keys`` (ignores return_tokens_as_token_ids), ``slow``."""

    def __init__(self, mode: str = "ok", cached: int = 0):
        self.mode, self.cached, self.requests = mode, cached, []
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self._ready.wait(30)

    def _serve(self):
        from aiohttp import web

        async def models(_):
            return web.json_response({"data": [{"id": "scripted"}]})

        async def completions(request):
            body = await request.json()
            self.requests.append(body)
            if self.mode == "http_error":
                return web.Response(status=500, text="boom")
            if self.mode == "slow":
                await asyncio.sleep(5)
            prompt, k, n = list(body["prompt"]), int(body["logprobs"]), int(body["max_tokens"])
            tops, seq = [], list(prompt)
            for _ in range(n):
                lps, ids = topk(seq, k)
                key = (lambda i: f"token_id:{i}") if self.mode != "text_keys" else (lambda i: f"t{i}")
                tops.append({key(i): lp for i, lp in zip(ids, lps)})
                seq.append(ids[0])
            choice = {"text": "", "logprobs": {"top_logprobs": tops}} if self.mode != "no_logprobs" else {"text": ""}
            usage = {
                "prompt_tokens": len(prompt),
                "prompt_tokens_details": {"cached_tokens": min(self.cached, len(prompt))},
            }
            return web.json_response({"choices": [choice], "usage": usage})

        async def start():
            app = web.Application()
            app.router.add_get("/v1/models", models)
            app.router.add_post("/v1/completions", completions)
            self.runner = web.AppRunner(app)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
            self._ready.set()

        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(start())
        self.loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class ScriptedGenerate:
    """verl's generate call, scripted: ``(prompt_ids, params) -> (ids, logprobs)`` (or ``(ids, extra_fields)`` with
    ``extra=True``: prompt log-probs in verl's format). ``short``: the first ``short`` calls answer 1-token chains
    (unforkable, so the tree refills them)."""

    def __init__(self, extra: bool = False, short: int = 0):
        self.extra, self.short, self.calls = extra, short, []

    async def __call__(self, prompt_ids: list[int], params: dict):
        self.calls.append((list(prompt_ids), dict(params)))
        if "prompt_logprobs" in params:
            k = int(params["prompt_logprobs"])
            ids, lps = [], []
            for j in range(1, len(prompt_ids)):  # verl drops position 0 and pads a dummy last entry
                lp, tok = topk(prompt_ids[:j], k)
                ids.append(tok)
                lps.append(lp)
            ids.append([0] * k)
            lps.append([0.0] * k)
            return [5], {"prompt_ids": ids, "prompt_logprobs": lps}
        length = 1 if len(self.calls) <= self.short else None
        seed = int(params.get("seed", 0))
        toks = scripted_tokens(prompt_ids, int(params["max_tokens"]), seed, length)
        if params.get("min_tokens"):
            toks = (toks + [9] * int(params["min_tokens"]))[: int(params["max_tokens"])]
        lps = [-0.01 * (i + 1) for i in range(len(toks))]
        return (toks, {}) if self.extra else (toks, lps)


class ScriptedTask(Task):
    """A task for the word-level tiny tokenizer ("t0" … "t255"): a response is correct when its last token is an even
    one. Loaded as ``scripted_server:ScriptedTask``."""

    name = "scripted"
    probe_suffix = "t50 t51"

    def held_out(self, n):
        return [Problem(f"v{i}", "t5 t6 t7", "even") for i in range(n)]

    def draw(self, rng, n, exclude):
        return self.held_out(n)

    def answer_span(self, response):
        toks = response.split()
        return toks[-1] if toks else None

    def verify(self, response, problem):
        last = self.answer_span(response)
        ok = last is not None and last.startswith("t") and int(last[1:]) % 2 == 0
        return Verdict(float(ok), ok, "correct" if ok else "wrong", last or "")


# ---------------------------------------------------------------------------------------------- verl's side

ROW = dict(
    raw_prompt=[{"role": "user", "content": "t5 t6 t7"}],
    reward_model={"ground_truth": "even"},
    uid="abc123",
    data_source="scripted",
    extra_info={"index": 0},
    session_id=0,
    global_steps=3,
)


class _Remote:
    def __init__(self, value):
        self.value = value

    def remote(self):
        async def get():
            return self.value

        return get()


class FakeServers:
    """verl's LLMServerClient, scripted: generation from ScriptedGenerate, the probe endpoint on a ScriptedServer."""

    def __init__(self, server: ScriptedServer, short: int = 0):
        self.gen, self.port, self.request_ids, self.acquired = ScriptedGenerate(short=short), server.port, [], 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.request_ids.append(request_id)
        ids, lps = await self.gen(list(prompt_ids), dict(sampling_params))
        return TokenOutput(
            token_ids=ids, log_probs=lps if sampling_params.get("logprobs") else None, extra_fields={"global_steps": 3}
        )

    async def _acquire_server(self, request_id, **extra):
        self.request_ids.append(request_id)
        self.acquired += 1
        return "replica-0", type("Handle", (), {"get_server_address": _Remote(("127.0.0.1", self.port))})()

    def _release_server(self, server_id, request_id=None):
        self.acquired -= 1


# ---------------------------------------------------------------------------------------------- an LLM judge


def n_steps(prompt: str) -> int:
    """The number of steps the judge prompt asks to rate."""
    return int(prompt.split("numbered 1 to ")[1].split(";")[0])


class JudgeScript:
    """What the scripted server replies: ``reply(prompt) -> (status, body)``; it records every request."""

    def __init__(self):
        self.requests, self.reply, self.delay = [], None, 0.0


def judge_server(script: JudgeScript):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the stdlib's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append((self.path, body, self.headers.get("Authorization")))
            if script.delay:
                time.sleep(script.delay)
            prompt = body["messages"][0]["content"] if "messages" in body else body["prompt"]
            status, text = script.reply(prompt)
            if status != 200:
                payload = b"server error"
            else:
                choice = {"message": {"role": "assistant", "content": text}} if "messages" in body else {"text": text}
                payload = json.dumps(
                    {"choices": [choice], "usage": {"prompt_tokens": 100, "completion_tokens": 20}}
                ).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv
