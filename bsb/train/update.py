"""Phase 6 of a training step, the policy update: the optimizer steps over the step's :class:`Row` s (one per leaf
with its per-token advantages), the policy in train mode (and back to eval after).

Rows whose advantages are all zero are not back-propagated; a mini-batch with none takes the AdamW step on zero
gradients, skips it, or runs the 0-weighted backward, as ``homogeneous`` says. The PPO ratios are against the rollout
policy. [TwoStage] Arm 11's unit-norm accumulation is :func:`unit_normalized_mean`.

``update_packing``: the log-prob pass (:mod:`bsb.train.logprob_pass`, resolved at trainer start into the run's
:class:`~bsb.train.run_plan.RunPlan` with the loss): ``path`` forwards
each row as its own sequence (the specification); ``tree`` forwards each micro-batch's unique tokens once
(:mod:`bsb.train.tree_pack`), its micro-batches and a rank's share made of whole fork groups, so a shared prefix is
computed once where its rows are. Both hand the loss the same (B, R) tensors, and a
mini-batch's loss and gradient are sums over its rows, so how the rows are grouped changes no number but rounding.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from bsb.engine.device import autocast, compute_device
from bsb.train.config import TrainConfig
from bsb.train.distributed import SOLO, World
from bsb.train.logprob_pass import PathPass, TreePass
from bsb.train.loss import CLIP_STATS, zero_grad_step
from bsb.train.run_plan import RunPlan
from bsb.train.sharding import local, whole
from bsb.train.tree import Row


def unit_normalized_mean(
    grads: Sequence[Sequence[torch.Tensor]], window: int, world: World = SOLO
) -> list[torch.Tensor]:
    """[TwoStage] Arm 11's accumulation: ``(1/window) Σ_q g_q / ||g_q||`` over the questions of one optimizer step (each
    question's whole gradient scaled to unit L2 norm; a zero gradient adds nothing but counts in the window). Sharded
    gradients (FSDP2 DTensors) take the norm over every rank's shard."""
    out = [torch.zeros_like(g) for g in grads[0]]
    for g in grads:
        norm = math.sqrt(world.sum(sum((local(x).double() ** 2).sum().item() for x in g)))
        if norm > 0:
            for acc, x in zip(out, g):
                acc.add_(x / norm)
    return [acc / window for acc in out]


def update_policy(
    policy,
    opt,
    sched,
    rows: list[Row],
    cfg: TrainConfig,
    plan: RunPlan,
    pad: int,
    seed: int,
    compute_dtype: torch.dtype = torch.float32,
    world: World = SOLO,
) -> dict:
    """The optimizer steps over ``rows`` with ``plan``'s log-prob pass and loss; the policy is in train mode
    throughout and in eval mode afterwards. Forwards run under autocast in ``compute_dtype`` (fp32 master weights and
    optimizer state).

    Data parallel (``world``): every rank holds the same ``rows`` (the step's gathered trees) and the same schedule of
    mini-batches; each back-propagates its share of a mini-batch's rows (``World.part`` of its rows, or of its fork
    groups under ``update_packing=tree``) with the mini-batch's global token and sequence counts as the loss
    normalisers, and FSDP2 reduces the gradients, so N ranks take the step one process would on the same rows. A rank
    with fewer micro-batches runs empty ones (:func:`_backward`): FSDP's forwards are collectives, every rank issues
    the same number. ``update_tokens`` / ``update_tokens_paths`` in the result: the unpadded token positions the
    update's forwards computed, over every rank, and what the per-path forwards of the same rows compute (padding to
    a micro-batch's widest row not counted)."""
    if not rows:
        return {
            "loss": 0.0,
            "grad_norm": 0.0,
            **dict.fromkeys(CLIP_STATS, 0.0),
            "optimizer": "no rows",
            "lr": sched.get_last_lr()[0],
            "update_tokens": 0,
            "update_tokens_paths": 0,
        }
    policy.train()
    try:
        with (
            plan.logprob_pass.context(policy),
            autocast(compute_device(policy), compute_dtype),
        ):  # offloaded shards: the mesh's device
            if cfg.unit_question_grad:
                return _unit_question_update(policy, opt, sched, rows, cfg, plan, pad, world)
            return _minibatch_update(policy, opt, sched, rows, cfg, plan, pad, seed, world)
    finally:
        policy.eval()


@dataclass
class _Tally:
    """Token positions the update's forwards computed (this rank), and what per-path forwards of the same rows
    compute (prompt + response each)."""

    tokens: int = 0
    paths: int = 0


def _units(rows: list[Row], todo: list[int], groups: bool) -> list[list[int]]:
    """``todo`` as the units a rank takes whole: single rows, or (a pass whose units are groups) fork groups in order
    of first appearance: a shared prefix never crosses ranks."""
    if not groups:
        return [[i] for i in todo]
    out: dict[tuple[int, int], list[int]] = {}
    for i in todo:
        out.setdefault((rows[i].question, rows[i].group), []).append(i)
    return list(out.values())


def _unit_tokens(rows: list[Row], unit: list[int]) -> int:
    """Token positions a forward of ``unit`` computes at most: its rows' prompt and shared prefix once (the rows of a
    fork group share both), then each row's own tail; for a single row, its prompt + response."""
    first = rows[unit[0]]
    return len(first.prompt) + first.prefix_len + sum(len(rows[i].response) - rows[i].prefix_len for i in unit)


def _positions(rows: list[Row], units: list[list[int]], pads: bool) -> int:
    """Token positions a forward of one micro-batch made of ``units`` computes: every row padded to the widest where
    the pass pads (per path), else each unit's prompt and shared prefix once and its rows' own tails (tree-packed)."""
    if pads:
        idx = [i for u in units for i in u]
        return len(idx) * max(len(rows[i].prompt) + len(rows[i].response) for i in idx)
    return sum(_unit_tokens(rows, u) for u in units)


def _chunks(units: list[list[int]], size: int, cost=None, budget: int = 0) -> list[list[int]]:
    """Micro-batches from ``units`` in order, each at most ``size`` rows and, with a ``budget``, at most ``budget``
    token positions (``cost(pieces)``: what a micro-batch of those pieces computes, padding included); a unit that fits
    is not split, one that does not goes in runs of its rows (a row over the budget alone)."""

    def fits(pieces: list[list[int]]) -> bool:
        return sum(map(len, pieces)) <= size and (not budget or cost(pieces) <= budget)

    out, cur = [], []
    for unit in units:
        for piece in [unit] if fits([unit]) else [[i] for i in unit]:
            if cur and not fits([*cur, piece]):
                out.append([i for p in cur for i in p])
                cur = []
            cur.append(piece)
    return out + ([[i for p in cur for i in p]] if cur else [])


def _plan(
    rows: list[Row], todos: list[list[int]], cfg: TrainConfig, lp: PathPass | TreePass, world: World
) -> tuple[list[list[int]], int]:
    """This rank's micro-batches over its share of each of ``todos`` (mini-batches) for log-prob pass ``lp``, and the
    busiest rank's count of micro-batches (FSDP's forwards are collectives: every rank issues that many)."""

    def chunks(w: World) -> list[list[int]]:
        mine = [i for todo in todos for unit in w.part(_units(rows, todo, lp.groups)) for i in unit]
        units = _units(rows, mine, lp.groups)
        return _chunks(units, cfg.micro_batch, lambda pieces: _positions(rows, pieces, lp.pads), cfg.micro_batch_tokens)

    most = max(len(chunks(replace(world, rank=r))) for r in range(world.size))
    return chunks(world), most


def _logprobs(
    policy, rows: list[Row], chunk: list[int], pad: int, lp: PathPass | TreePass, tally: _Tally
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, R) log-probs and mask of rows ``chunk``, per path or tree-packed; an empty chunk forwards one pad token
    (the same collectives as the others; its log-prob is weighted 0, its tokens not counted)."""
    picked = [rows[i] for i in chunk] or [Row([pad], [pad], torch.zeros(1), -1)]
    prompts, responses, prefixes = (
        [r.prompt for r in picked],
        [r.response for r in picked],
        [r.prefix_len for r in picked],
    )
    logp, mask, tokens, paths = lp.logprobs(policy, prompts, responses, prefixes, pad)
    if chunk:
        tally.tokens += tokens
        tally.paths += paths
    return logp, mask


def _backward(
    policy,
    rows: list[Row],
    todo: list[int],
    cfg: TrainConfig,
    plan: RunPlan,
    pad: int,
    n_tokens: int,
    n_seqs: int,
    old: dict[int, torch.Tensor],
    tally: _Tally,
    world: World = SOLO,
) -> tuple[float, tuple[float, float]]:
    """Loss backward over this rank's share of rows ``todo`` in micro-batches; returns the loss summed over every
    rank and (clipped tokens, tokens) summed over every rank. The loss is scaled by the world size: FSDP2 averages
    gradients over ranks, the normalisers are already global."""
    total, tokens = 0.0, 0.0
    clipped = dict.fromkeys(CLIP_STATS, 0.0)  # tokens of each clip statistic
    mine, most = _plan(rows, [todo], cfg, plan.logprob_pass, world)
    for j0 in range(most):
        chunk = mine[j0] if j0 < len(mine) else []
        logp, mask = _logprobs(policy, rows, chunk, pad, plan.logprob_pass, tally)  # (B, R)
        if not chunk:  # an empty micro-batch: no gradient
            (logp.sum() * 0.0).backward()
            continue
        adv = torch.zeros_like(logp)
        old_lp = torch.zeros_like(logp)
        for j, i in enumerate(chunk):
            n = len(rows[i].response)
            adv[j, :n] = rows[i].advantage
            old_lp[j, :n] = (
                old[i] if i in old else logp[j, :n].detach()
            )  # one mini-batch: the rollout policy is this one
        loss, info = plan.loss(
            logp,
            old_lp,
            adv,
            mask,
            n_tokens=n_tokens,
            n_seqs=n_seqs,
            clip_low=cfg.clip_low,
            clip_high=cfg.clip_high,
            clip_ratio_c=cfg.clip_ratio_c,
            agg=cfg.loss_agg,
        )
        (loss * world.size).backward()
        total += loss.item()
        n = float(mask.sum().item())
        tokens += n
        for k in CLIP_STATS:
            clipped[k] += info.get(k, 0.0) * n
    return world.sum(total), ({k: world.sum(v) for k, v in clipped.items()}, world.sum(tokens))


def _old_logprobs(
    policy, rows: list[Row], todos: list[list[int]], cfg: TrainConfig, lp_pass, pad: int, tally: _Tally, world: World
) -> dict:
    """The rollout policy's log-probs of the rows this rank back-propagates in ``todos`` (its share of each
    mini-batch), before the first step moves it; every rank runs as many forwards as the busiest. Tree-packed, a fork
    group's rows of every mini-batch share one forward."""
    mine, most = _plan(rows, todos, cfg, lp_pass, world)
    old: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for j0 in range(most):
            chunk = mine[j0] if j0 < len(mine) else []
            lp, _ = _logprobs(policy, rows, chunk, pad, lp_pass, tally)
            for j, i in enumerate(chunk):
                old[i] = lp[j, : len(rows[i].response)]
    return old


def _step(policy, opt, sched, cfg: TrainConfig) -> float:
    norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
    norm = whole(norm).item()  # sharded: the global norm
    opt.step()
    sched.step()
    return norm


def _homogeneous(opt, sched, cfg: TrainConfig) -> str:
    if cfg.homogeneous == "zero_grad_step":
        zero_grad_step(opt)
        sched.step()
    return cfg.homogeneous


def _update_summary(losses, norms, clips, kinds, sched, tally: _Tally, world: World) -> dict:
    """One step's update metrics: mean loss and gradient norm, the clip fractions (tokens over the step's
    back-propagated tokens, :data:`~bsb.train.loss.CLIP_STATS`), the optimizer's moves, the lr, and the token
    positions the update's forwards computed (``update_tokens``, every rank) beside the per-path count."""
    tokens = sum(n for _, n in clips)
    frac = {k: sum(c[k] for c, _ in clips) / tokens if tokens else math.nan for k in CLIP_STATS}
    return {
        "loss": _mean(losses),
        "grad_norm": _mean(norms),
        **frac,
        "optimizer": ",".join(kinds),
        "lr": sched.get_last_lr()[0],
        "update_tokens": int(world.sum(tally.tokens)),
        "update_tokens_paths": int(world.sum(tally.paths)),
    }


def _minibatch_update(
    policy, opt, sched, rows: list[Row], cfg: TrainConfig, plan: RunPlan, pad: int, seed: int, world: World = SOLO
) -> dict:
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    minis = [order[i :: cfg.minibatches] for i in range(cfg.minibatches)]
    # each mini-batch's rows to back-propagate (None: no active row, the homogeneous rule instead)
    batches = []
    for mb in (m for m in minis if m):
        active = [i for i in mb if rows[i].active]
        batches.append((mb, mb if cfg.homogeneous == "backward" else (active or None)))
    tally = _Tally()
    old: dict[int, torch.Tensor] = {}
    if plan.needs_old_logp and cfg.minibatches > 1:
        todos = [todo for _, todo in batches if todo]
        old = _old_logprobs(policy, rows, todos, cfg, plan.logprob_pass, pad, tally, world)
    losses, norms, clips, kinds = [], [], [], []
    for mb, todo in batches:
        if todo is None:
            kinds.append(_homogeneous(opt, sched, cfg))
            continue
        opt.zero_grad(set_to_none=True)
        n_tokens = max(1, sum(len(rows[i].response) for i in mb))
        total, c = _backward(policy, rows, todo, cfg, plan, pad, n_tokens, len(mb), old, tally, world)
        clips.append(c)
        norms.append(_step(policy, opt, sched, cfg))
        losses.append(total)
        kinds.append("step")
    return _update_summary(losses, norms, clips, kinds, sched, tally, world)


def _unit_question_update(
    policy, opt, sched, rows: list[Row], cfg: TrainConfig, plan: RunPlan, pad: int, world: World = SOLO
) -> dict:
    """[TwoStage] Arm 11: one optimizer step per ``grad_accum_questions`` questions, each question's gradient scaled to
    unit norm (:func:`unit_normalized_mean`)."""
    params = [p for p in policy.parameters() if p.requires_grad]
    questions = sorted({r.question for r in rows})
    tally = _Tally()
    losses, norms, clips, kinds = [], [], [], []
    for w0 in range(0, len(questions), cfg.grad_accum_questions):
        window = questions[w0 : w0 + cfg.grad_accum_questions]
        grads, total = [], 0.0
        for q in window:
            mine = [i for i, r in enumerate(rows) if r.question == q]
            todo = [i for i in mine if rows[i].active]
            if not todo:
                continue
            opt.zero_grad(set_to_none=True)
            n_tokens = max(1, sum(len(rows[i].response) for i in mine))
            loss, c = _backward(policy, rows, todo, cfg, plan, pad, n_tokens, len(mine), {}, tally, world)
            total += loss
            clips.append(c)
            grads.append([p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params])
        if not grads:
            kinds.append(_homogeneous(opt, sched, cfg))
            continue
        for p, g in zip(params, unit_normalized_mean(grads, len(window), world)):
            p.grad = g
        norms.append(_step(policy, opt, sched, cfg))
        losses.append(total)
        kinds.append("step")
    return _update_summary(losses, norms, clips, kinds, sched, tally, world)


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else math.nan
