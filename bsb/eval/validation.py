"""Selectors against Monte-Carlo value curves ([Fork] §4): a chain's ``curves.jsonl`` row (its V*, the DP floor, and
every selector's scores, top-B, error and fallback) and the summary over the rows that ``bsb validate`` reports: mean
E with its standard error over the non-flat chains, the floor, the ranking, the flip mass each top-B captures, and the
lag diagnostic of every score.

A selector that cannot score a chain (no committed answer for Lens-Shift, no finite score) ranks its boundaries by
closeness to the midpoint, the engine's Midpoint scores, and the row counts the fallback."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from bsb.engine.boundaries import CandidatePool
from bsb.engine.selectors import CannotScore, ChainInput, midpoint_scores
from bsb.eval.bootstrap import Interval, cluster_mean
from bsb.eval.flip_mass import flip_mass
from bsb.eval.lag import jumps, lag_profile
from bsb.eval.read_store import ReadStore, read_key
from bsb.eval.reconstruction import is_flat, oracle_floor, reconstruction_error, top_b
from bsb.eval.value_curve import answer_belief


def boundary_scores(sel, chain: ChainInput, pool: CandidatePool, reads, index: int, seed: int):
    """Per-boundary scores of ``sel``, whether it fell back to the midpoint ranking, and the token-forwards its reads
    spent (those of a fallen-back read too: they were paid)."""
    try:
        scores, spent = sel.score(chain, pool, reads, index, seed)
    except CannotScore:
        return midpoint_scores(pool), True, 0
    if all(isinstance(s, float) and math.isnan(s) for s in scores):
        return midpoint_scores(pool), True, int(spent)
    return [float(s) for s in scores], False, int(spent)


def curve_row(
    session,
    i: int,
    response: list[int],
    cuts,
    v_star: list[float],
    selectors: dict,
    store,
    *,
    b: int,
    n_mc: int,
    seed: int,
    kept: ReadStore | None = None,
    read_options: dict | None = None,
) -> dict:
    """The ``curves.jsonl`` row of problem ``i`` of ``session``: its V* at ``cuts``, the DP floor of ``b`` points, every
    selector's scores, top-B, error and fallback, the seconds its read took, and the answers of the first two
    completions at each boundary (the fork contrast's siblings, from ``store``). With ``kept``, a read kept there
    (keyed by ``read_options`` and the chain: :func:`~bsb.eval.read_store.read_key`) is taken as it was, and every
    other read is kept there as soon as it is done, but for a selector that could not score the chain and read
    nothing (a judge that did not answer, a chain without a committed answer): free to try again, and maybe
    passing."""
    p = session.problems[i]
    text = session.decode(response)
    chain = ChainInput(session.prompts[i], response, answer=session.answer_ids(text))
    pool = CandidatePool(list(cuts), "newline", len(response))
    floor, best = oracle_floor(v_star, min(b, len(v_star)))
    row = {
        "id": p.id,
        "prompt": p.prompt,
        "gold": p.answer,
        "response": response,
        "text": text,
        "cuts": list(cuts),
        "v_star": v_star,
        "flat": is_flat(v_star),
        "scores": {},
        "top_b": {},
        "error": {},
        "fallback": {},
        "b": b,
        "floor": floor,
        "floor_points": best,
        "read_tokens": {},  # token-forwards each selector that reads the policy spent here (the chain forwarded again)
        "read_floor": {},  # ... and the fewest they cost on an engine that holds the chain's keys and values
        "read_seconds": {},  # wall seconds each selector's read of this chain took (when it was read)
    }
    for name, sel in selectors.items():
        answer = chain.answer if getattr(sel, "needs_answer", False) else None  # in the key of what reads it only
        inputs = (session.prompts[i], response, answer, cuts)
        key = None if kept is None else read_key(read_options or {}, sel, name, i, inputs)
        got = kept.get(key, len(cuts)) if key else None
        if got is None:
            start = time.perf_counter()
            s, fb, spent = boundary_scores(sel, chain, pool, session.hf, i, seed)
            floor = sel.read_floor(chain, pool) if sel.requires and spent else 0
            got = (s, fb, spent, floor, time.perf_counter() - start)
            if key and not (fb and spent == 0):
                kept.add(key, *got)
        s, fb, spent, floor, row["read_seconds"][name] = got
        if sel.requires:  # the policy's reads (a judge's tokens are another model's: its own stats line counts them)
            row["read_tokens"][name], row["read_floor"][name] = spent, floor
        top = top_b(s, b)
        row["scores"][name] = [None if math.isnan(x) else x for x in s]
        row["top_b"][name], row["fallback"][name] = top, fb
        row["error"][name] = reconstruction_error(v_star, top)
    row["siblings"] = [[store.answers.get((p.id, c, j), "") for j in range(min(2, n_mc))] for c in cuts]
    return row


@dataclass
class Summary:
    """The selectors over every chain's row; errors, the floor and flip mass over the non-flat chains only (every
    selector scores 0 on a flat one)."""

    names: list[str]
    chains: int  # every row
    live: list[dict]  # the non-flat rows
    mean_error: dict[str, float]
    sem: dict[str, float]
    floor: float  # mean DP floor
    ranking: list[str]  # by mean E, lowest first (empty when every curve is flat)
    b_over_m: float  # median share of a chain's boundaries kept
    whole: int  # non-flat chains whose every boundary B keeps
    captured: dict[str, float]  # share of the total flip mass the top-B re-rolls
    fallbacks: dict[str, int]  # chains ranked by the midpoint instead
    # E − Midpoint's E, paired by chain, with its 95% interval (chains of one prompt resampled together); None
    # where Midpoint was not scored or fewer than two chains are non-flat
    vs_midpoint: dict[str, Interval | None]
    problems: int  # distinct prompts among the non-flat chains (the interval's clusters)
    # per selector, over every chain that recorded it: its reads' token-forwards per token the chains sampled, as
    # spent here and at the floor of a prefix-cached engine (Eq. 8's C·(E + L − 1)); {} for rows of an older run
    read_cost: dict[str, tuple[float, float]]


def summarize(curves: list[dict], names: list[str]) -> Summary:
    live = [r for r in curves if not r["flat"]]
    mean_e = {n: float(np.mean([r["error"][n] for r in live])) if live else math.nan for n in names}
    sem = {
        n: float(np.std([r["error"][n] for r in live]) / math.sqrt(len(live))) if len(live) > 1 else 0.0 for n in names
    }
    total_flip = sum(flip_mass(r["v_star"], range(len(r["v_star"]))) for r in live)
    return Summary(
        names=list(names),
        chains=len(curves),
        live=live,
        mean_error=mean_e,
        sem=sem,
        floor=float(np.mean([r["floor"] for r in live])) if live else math.nan,
        ranking=sorted(names, key=lambda n: mean_e[n]) if live else [],
        b_over_m=float(np.median([r["b"] / len(r["cuts"]) for r in live])) if live else math.nan,
        whole=sum(len(r["cuts"]) <= r["b"] for r in live),
        captured={
            n: sum(flip_mass(r["v_star"], r["top_b"][n]) for r in live) / total_flip if total_flip else math.nan
            for n in names
        },
        fallbacks={n: sum(r["fallback"][n] for r in curves) for n in names},
        vs_midpoint={n: _vs_midpoint(live, n) if "midpoint" in names and len(live) > 1 else None for n in names},
        problems=len({r["prompt"] for r in live}),
        read_cost=_read_cost(curves, names),
    )


def _read_cost(curves: list[dict], names: list[str]) -> dict[str, tuple[float, float]]:
    """Each selector's read token-forwards (spent, floor) over the tokens its chains sampled (their sampling cost)."""
    out = {}
    for n in names:
        rows = [r for r in curves if n in r.get("read_tokens", {})]
        sampled = sum(len(r["response"]) for r in rows)
        if sampled:
            out[n] = (sum(r["read_tokens"][n] for r in rows) / sampled, sum(r["read_floor"][n] for r in rows) / sampled)
    return out


def _vs_midpoint(live: list[dict], name: str) -> Interval:
    """``name``'s E minus Midpoint's, paired by chain, bootstrapped over prompts (a problem listed several times
    gives correlated chains: they travel together)."""
    d = [r["error"][name] - r["error"]["midpoint"] for r in live]
    return cluster_mean(d, [r["prompt"] for r in live])


def gold_beliefs(
    session, live: list[dict], suffix, kept: ReadStore | None = None, read_options: dict | None = None
) -> dict[str, list[float]]:
    """By row id: the probe's belief in the gold answer (as the task continues ``suffix`` with it) at each cut. With
    ``kept``, each chain's beliefs are kept there as a read named ``gold_belief`` (keyed by ``read_options``, the
    chain, the gold answer's ids and the tokens that may close it), so that a rerun of a finished run reads none
    again."""
    first = {}
    for i, p in enumerate(session.problems):
        first.setdefault(p.id, i)
    out = {}
    for r in live:
        i = first[r["id"]]
        gold, prompt = session.gold_ids(session.problems[i]), session.prompts[i]
        closers = session.closing_ids(gold)
        answer = [*gold, -1, *sorted(closers or ())]  # what the read depends on beyond the chain (-1: a separator)
        key = (
            None
            if kept is None
            else read_key(read_options or {}, None, "gold_belief", i, (prompt, r["response"], answer, r["cuts"]))
        )
        got = kept.get(key, len(r["cuts"])) if key else None
        if got is None:
            start = time.perf_counter()
            beliefs = answer_belief(session.hf, prompt, r["response"], r["cuts"], suffix, gold, closers)
            if key:
                kept.add(key, beliefs, False, 0, 0, time.perf_counter() - start)
            got = (beliefs,)
        out[r["id"]] = list(got[0])
    return out


def lag_profiles(live: list[dict], beliefs: dict, names: list[str], seed: int) -> dict:
    """The lag diagnostic of the probe belief's own moves (``beliefs``: by row id, the belief in the gold answer at
    each cut) and of every selector's scores, over the non-flat rows."""
    lags = {"belief": lag_profile([(jumps(beliefs[r["id"]], score=True), r["v_star"]) for r in live], seed=seed)}
    lags.update({n: lag_profile([(r["scores"][n], r["v_star"]) for r in live], seed=seed) for n in names})
    return lags


def moving_most(live: list[dict], k: int) -> list[dict]:
    """The ``k`` rows whose V* moves most (the largest total flip mass; the case plots' chains)."""
    return sorted(live, key=lambda r: -flip_mass(r["v_star"], range(len(r["v_star"]))))[:k]
