"""A bsb backend over async server calls, so bsb's own tree rollout runs unchanged inside an async agent loop.

:func:`bsb.train.rollout.tree_rollout` and the selectors are synchronous and batch per phase (all roots, then the
reads, then all siblings). :class:`ServerBackend` runs them in a worker thread: each of its methods submits the
phase's requests as coroutines to the agent loop's event loop (all at once, so the servers batch them) and waits
for their results. The event loop stays free for every other tree while one waits.

It declares ``generate`` and ``belief_topk``; the selectors that need hidden states or full distributions get
bsb's usual :class:`~bsb.engine.backend.BackendError` when bound to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import torch

from bsb.engine.backend import Capabilities, check_generation_args, request_seeds, stop_ids, token_ids

# generate(prompt_ids, sampling_params) -> (response token ids, their log-probs or None)
Generate = Callable[[list[int], dict], Awaitable[tuple[list[int], list[float] | None]]]
# read(prefix, cuts, suffix, read_len, k, seed) -> ((C, L, k) log-probs, (C, L, k) ids, tokens computed)
Read = Callable[[list[int], list[int], list[int], int, int, int], Awaitable[tuple[torch.Tensor, torch.Tensor, int]]]


class ServerBackend:
    capabilities = Capabilities(generate=True, belief_topk=True)

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        generate: Generate,
        read: Read | None = None,
        max_logprobs: int = 20,
        sampling: dict | None = None,
    ):
        """``loop``: the event loop the coroutines run on (not the calling thread's); ``sampling``: extra sampling
        parameters of every generation (verl's ``top_k``, ``repetition_penalty``, ``logprobs``)."""
        self.loop, self._generate, self._read = loop, generate, read
        self.max_logprobs, self.sampling = max_logprobs, dict(sampling or {})
        self.logprobs: dict[
            tuple[tuple[int, ...], tuple[int, ...]], list[float]
        ] = {}  # (request prompt, response) -> log-probs

    def close(self) -> None:
        """Nothing to release: the servers and the event loop belong to verl's agent loop."""

    def _wait(self, make):
        """Run the coroutine ``make()`` on the agent loop's event loop and wait for it (from a worker thread)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise RuntimeError("ServerBackend methods block: call them from a worker thread, not the event loop's")
        return asyncio.run_coroutine_threadsafe(make(), self.loop).result()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int | Sequence[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] = 0,
        eos_token_id: int | Sequence[int] | None = None,
    ) -> list[list[int]]:
        budgets = check_generation_args(prompts, max_new_tokens, temperature, top_p)
        prompts = [[int(x) for x in p] for p in prompts]

        seeds = request_seeds(seed, len(prompts))

        def params(i: int) -> dict:
            p = dict(self.sampling, max_tokens=budgets[i], temperature=temperature, top_p=top_p, seed=seeds[i])
            if eos_token_id is not None:
                p["stop_token_ids"] = stop_ids(eos_token_id)
            return p

        async def run():
            return await asyncio.gather(*(self._generate(p, params(i)) for i, p in enumerate(prompts)))

        out = []
        for prompt, budget, (ids, lps) in zip(prompts, budgets, self._wait(run)):
            ids = [int(x) for x in ids][:budget]
            if lps is not None:
                self.logprobs[(tuple(prompt), tuple(ids))] = [float(x) for x in lps][: len(ids)]
            out.append(ids)
        return out

    def probe_topk(self, asks, suffix, read_len: int = 1, k: int = 20, seeds=None):
        """Per chain ``(logp, idx, spent)`` (C, L, k), as :meth:`bsb.engine.vllm_backend.VLLMBackend.probe_topk`."""
        if self._read is None:
            raise ValueError("this ServerBackend was built without a probe reader")
        if k > self.max_logprobs:
            raise ValueError(f"k={k} exceeds the servers' logprob limit max_logprobs={self.max_logprobs}")
        if read_len < 1:
            raise ValueError(f"read_len must be >= 1, got {read_len}")
        seeds = list(seeds) if seeds is not None else [0] * len(asks)
        suffix = token_ids(suffix)

        async def run():
            return await asyncio.gather(
                *(
                    self._read(token_ids(prefix), [int(t) for t in cuts], suffix, read_len, k, s)
                    for (prefix, cuts), s in zip(asks, seeds)
                )
            )

        return list(self._wait(run)) if asks else []

    def leaf_logprobs(
        self, prompt: Sequence[int], root: Sequence[int], response: Sequence[int], prefix_len: int
    ) -> list[float] | None:
        """Rollout log-probs of a leaf whose group's root chain is ``root``: the root's own, or (a sibling) the root's
        on the shared prefix joined to the continuation's. None when the server returned none."""
        prompt, root, response = [int(x) for x in prompt], [int(x) for x in root], [int(x) for x in response]
        head = self.logprobs.get((tuple(prompt), tuple(root)))
        if response == root:
            return head
        tail = self.logprobs.get((tuple(prompt + response[:prefix_len]), tuple(response[prefix_len:])))
        if tail is None or (prefix_len and head is None):
            return None
        return (head[:prefix_len] if prefix_len else []) + tail
