"""Monte-Carlo value curves ([Fork] §4): ``V*(t) = Pr[correct | x, y_<=t]`` at candidate boundaries of a chain,
estimated by ``n_mc`` independent completions of each prefix, scored by the verifier.

Completions go through the backend's batched ``generate`` (a vLLM engine reuses the shared prefix's cached KV
blocks). With a :class:`CompletionStore` every finished completion is appended to a JSONL file as soon as its
batch returns, so an interrupted estimate resumes without repeating finished completions. Each completion samples
from its own seed (:func:`draw_seed`, a hash of the run's seed and the completion's key), so a resumed or re-batched
estimate gives every completion the seed an uninterrupted one would (its tokens too, up to the engine's batch
composition: a bf16 near-tie can flip with the requests beside it), and two completions of a run share a seed with
odds ~n^2/2^64. ``seeding="offset"`` keeps the seeds of runs sampled before 2026-12-07, so that such a run finishes
with the seeds it began with.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from bsb.run_storage import appended_lines
from bsb.seeds import hashed

SEEDINGS = ("per-draw", "offset")  # the first: every run sampled since 2026-12-07


def draw_seed(seed: int, chain_id: str, cut: int, draw: int) -> int:
    """The seed of completion ``(chain_id, cut, draw)`` of a run seeded ``seed``: 63 bits of a hash of the four, so that
    it depends on nothing else (the batch, what was resumed) and two completions share one with odds ~n^2 / 2^64. An
    offset per chain (``seed + 7 i`` plus the request's place in its call, bsb before 2026-12-07: ``seeding="offset"``)
    gave neighbouring chains' completions the same seeds, and a resumed chain other seeds than an uninterrupted one."""
    return hashed(f"{int(seed)}\0{chain_id}\0{int(cut)}\0{int(draw)}", 63)


class CompletionStore:
    """Finished completions keyed by ``(chain id, cut, draw)``: whether each was correct and its extracted
    answer. With a path, an append-only JSONL file that a later store on the same path reads back (a last line
    cut short by a crash is dropped)."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self.done: dict[tuple[str, int, int], bool] = {}
        self.answers: dict[tuple[str, int, int], str] = {}
        if self.path is None:
            return
        for n, line in enumerate(appended_lines(self.path), 1):  # a record cut short by a crash is dropped
            try:
                r = json.loads(line)
                key = (r["chain"], r["cut"], r["draw"])
                answer = r.get("answer", "")
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(f"{self.path}:{n}: not a completion record") from None
            # a key of other types would never match a chain's (its completion drawn again), a "false" string is true
            if not (
                isinstance(key[0], str)
                and all(type(x) is int and x >= 0 for x in key[1:])
                and type(r["correct"]) is bool
                and isinstance(answer, str)
            ):
                raise ValueError(f"{self.path}:{n}: not a completion record (chain, cut, draw, correct, answer types)")
            self.done[key], self.answers[key] = r["correct"], answer
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def __contains__(self, key: tuple[str, int, int]) -> bool:
        return key in self.done

    def __len__(self) -> int:
        return len(self.done)

    def add(self, records: list[tuple[str, int, int, bool, str, int]]) -> None:
        """``(chain, cut, draw, correct, answer, tokens)`` rows, flushed to disk before returning."""
        for chain, cut, draw, correct, answer, _ in records:
            self.done[(chain, cut, draw)] = bool(correct)
            self.answers[(chain, cut, draw)] = answer
        if self.path is None:
            return
        with self.path.open("a") as f:
            for chain, cut, draw, correct, answer, tokens in records:
                f.write(
                    json.dumps(
                        {
                            "chain": chain,
                            "cut": cut,
                            "draw": draw,
                            "correct": bool(correct),
                            "answer": answer,
                            "tokens": tokens,
                        }
                    )
                    + "\n"
                )
            f.flush()


def mc_values(
    backend,
    prompt: Sequence[int],
    response: Sequence[int],
    cuts: Sequence[int],
    n_mc: int,
    grade: Callable[[list[int]], tuple[bool, str]],
    max_response: int,
    eos_id: int | Sequence[int] | None,
    temperature: float = 0.7,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 64,
    store: CompletionStore | None = None,
    chain_id: str = "chain",
    progress=None,
    seeding: str = "per-draw",
    offset_draws: int | None = None,
) -> list[float]:
    """V*(t) at each cut (a position in ``response``) from ``n_mc`` completions of ``prompt + response[:t]``.

    ``grade(full_response_ids) -> (correct, answer)`` scores a completed response (the prefix plus the
    completion) and gives its normalised final answer ("" when none);
    ``seed``: the run's; completion ``(chain_id, cut, draw)`` samples from :func:`draw_seed` of it, so ``chain_id``
    must tell the run's chains apart (``seeding="offset"``: the chain's seed, request ``k`` of the call starting at
    ``start`` in the chain's unfinished completions sampling from ``seed + 7919 start + k``, the seeds of runs sampled
    before 2026-12-07; ``offset_draws``: how many draws a boundary such a run began with, None for all: a draw past
    them samples from :func:`draw_seed`, for the offsets of a call extending ``n_mc`` would repeat the first call's
    seeds on the same prefixes and copy its completions);
    ``progress``: an optional callable taking the number of completions just finished (e.g. a tqdm ``update``).
    """
    if n_mc < 1:
        raise ValueError(f"n_mc must be >= 1, got {n_mc}")
    if seeding not in SEEDINGS:
        raise ValueError(f"seeding must be one of {', '.join(SEEDINGS)}, got {seeding!r}")
    if any(not 0 <= c <= len(response) for c in cuts):
        raise ValueError(f"cuts must lie in [0, {len(response)}], got {list(cuts)}")
    if any(c >= max_response for c in cuts):
        raise ValueError(f"a cut at or past max_response={max_response} leaves no budget for a completion")
    store = store if store is not None else CompletionStore()
    todo = [(c, j) for c in cuts for j in range(n_mc) if (chain_id, c, j) not in store]
    for start in range(0, len(todo), batch_size):
        part = todo[start : start + batch_size]
        prefixes = [list(prompt) + list(response[:c]) for c, _ in part]
        outs = backend.generate(
            prefixes,
            max_new_tokens=[max_response - c for c, _ in part],  # each completion to its own budget
            temperature=temperature,
            top_p=top_p,
            seed=_seeds(seed, chain_id, part, start, seeding, offset_draws),
            eos_token_id=eos_id,
        )
        rows = []
        for (c, j), out in zip(part, outs):
            full = list(response[:c]) + list(out[: max_response - c])
            ok, answer = grade(full)
            rows.append((chain_id, c, j, bool(ok), answer, len(full) - c))
        store.add(rows)
        if progress is not None:
            progress(len(part))
    return [sum(store.done[(chain_id, c, j)] for j in range(n_mc)) / n_mc for c in cuts]


def _seeds(seed: int, chain_id: str, part: list, start: int, seeding: str, offset_draws: int | None) -> int | list[int]:
    """The seeds of one ``generate`` call of :func:`mc_values` over ``part`` (its ``(cut, draw)`` requests): one a
    draw (``per-draw``), the offset of the call (``offset``, every draw below ``offset_draws``), or one a request
    where an offset run's call holds draws past them (``seed + 7919 start + k`` below, :func:`draw_seed` past)."""
    if seeding == "per-draw":
        return [draw_seed(seed, chain_id, c, j) for c, j in part]
    base = seed + 7919 * start
    if offset_draws is None or all(j < offset_draws for _, j in part):
        return base
    return [base + k if j < offset_draws else draw_seed(seed, chain_id, c, j) for k, (c, j) in enumerate(part)]


def answer_belief(
    backend,
    prompt: Sequence[int],
    response: Sequence[int],
    cuts: Sequence[int],
    suffix: Sequence[int],
    answer: Sequence[int],
    closers: Sequence[int] | None = None,
) -> list[float]:
    """The model's elicited belief in a whole answer at each cut: ``p(answer | x, y_<=t, suffix)``, teacher-forced
    through the HF backend's packed reads (the curve drawn beside V* in the case plots). ``closers``: the tokens any
    of which may stand for the answer's last token (its closing brace written alone or merged with what follows,
    ``}`` or ``}.``); the last factor is then their summed probability."""
    import torch

    if not answer:
        raise ValueError("answer_belief needs the answer's token ids")
    prefix, at = list(prompt) + list(response), [len(prompt) + t for t in cuts]
    reads = backend.packed_reads(prefix, at, list(suffix), list(answer))
    lp = torch.log_softmax(reads.answer_logits.float(), -1)  # (C, n, V)
    ids = torch.as_tensor(list(answer), device=lp.device).expand(lp.shape[0], -1)  # (C, n)
    each = lp.gather(-1, ids[..., None]).squeeze(-1)  # (C, n)
    if closers:
        last = torch.as_tensor(sorted(set(closers) | {int(answer[-1])}), device=lp.device)
        each = torch.cat([each[:, :-1], lp[:, -1, last].logsumexp(-1, keepdim=True)], 1)
    return each.sum(-1).exp().tolist()
