"""One training step as named phases on plain data. :class:`bsb.train.trainer.Trainer` is the loop, the checkpoints
and the weight sync around them.

1. :func:`draw`: the task's training problems for one generation round (seed stream ``draw``).
2. :func:`generate_trees`: one tree per problem, as token ids: [Fork]'s tree rollout, [TwoStage]'s two-stage
   sampler, flat GRPO groups, or the flat warm-up before bifurcating (:func:`rollout_kind`).
3. :func:`score_trees`: the task's verdict on every leaf plus DAPO's overlong penalty → each leaf's reward.
4. :func:`keep_groups`: dynamic sampling keeps the trees whose outcomes differ (by accuracy, or by reward).
5. :func:`advantage_rows`: the kept trees' per-token advantages, flattened to one :class:`Row` per leaf.
6. :func:`update_policy`: the optimizer steps over the rows, the policy in train mode (and back to eval after).
7. :func:`step_metrics`: one JSON-serialisable dict per step.

Each phase takes and returns data (problems, trees, rows, dicts); the models and backends it needs come in the
:class:`RolloutContext` and as arguments, built once by the trainer.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from bsb.engine.device import autocast
from bsb.engine.selectors import Selector
from bsb.tasks.base import Problem, Task
from bsb.train.advantages import advantages
from bsb.train.config import TrainConfig
from bsb.train.distributed import SOLO, World
from bsb.train.loss import CLIP_STATS, LOSSES, response_logprobs, zero_grad_step
from bsb.train.rewards import RewardConfig, leaf_reward
from bsb.train.rollout import RolloutTimes, TreeConfig, flat_rollout, tree_rollout
from bsb.train.samplers import TwoStageConfig, two_stage_trees
from bsb.train.seeds import stream
from bsb.train.tree import PromptTree


@dataclass
class Row:
    """One trained sequence: a leaf with its per-token advantages."""

    prompt: list[int]
    response: list[int]
    advantage: torch.Tensor  # (len(response),) float32
    question: int  # index of its tree among the step's kept trees

    @property
    def active(self) -> bool:
        """Has a non-zero advantage (a zero row's gradient is exactly zero)."""
        return len(self.response) > 0 and bool(self.advantage.abs().max() > 0)


@dataclass
class RolloutContext:
    """What generating trees needs, built once by the trainer."""

    backend: object  # generation (vLLM or HF)
    reads: object  # the backend the selector's reads go to (bound to the selector)
    selector: Selector
    newline: torch.Tensor  # (V,) bool: tokens that contain a line break
    eos: int
    answer_tokens: Callable[[list[int]], list[int] | None] | None  # Lens-Shift's committed answer ids of a response


@dataclass
class Generated:
    trees: list[PromptTree]
    times: RolloutTimes = field(default_factory=RolloutTimes)
    census: Counter = field(default_factory=Counter)
    kind: str = "tree"


# ---------------------------------------------------------------------------------------------- 1. draw


def draw(task: Task, cfg: TrainConfig, step: int, round_: int, held_out: set[str]) -> list[Problem]:
    return task.draw(random.Random(stream(cfg.seed, step, round_, "draw")), cfg.gen_prompts, held_out)


# ---------------------------------------------------------------------------------------------- 2. generate


def rollout_kind(cfg: TrainConfig, active_steps: int) -> str:
    """The rollout of a step: [TwoStage]'s flat warm-up (``flat_warmup``) until ``bifurcate_after_active`` active
    steps have passed (the warm-up's own active steps count), then ``cfg.rollout``."""
    if cfg.rollout != "flat" and active_steps < cfg.bifurcate_after_active:
        return "flat_warmup"
    return cfg.rollout


def generate_trees(
    problems: Sequence[Problem],
    prompts: Sequence[list[int]],
    kind: str,
    cfg: TrainConfig,
    ctx: RolloutContext,
    seed: int,
    first: int = 0,
) -> Generated:
    """The trees of ``problems`` (the round's prompts from global index ``first`` on: each prompt's seeds derive from
    that index, so a data-parallel rank's share grows the trees one process would)."""
    ids, golds = [p.id for p in problems], [p.answer for p in problems]
    if kind == "tree":
        tcfg = TreeConfig(cfg.chains, cfg.siblings, cfg.max_response_len, cfg.temperature, cfg.top_p, cfg.max_refills)
        trees, times = tree_rollout(
            prompts,
            ids,
            golds,
            ctx.backend,
            ctx.selector,
            ctx.reads,
            ctx.newline,
            tcfg,
            ctx.eos,
            seed,
            ctx.answer_tokens,
            first,
        )
        return Generated(trees, times, Counter(), kind)
    if kind == "two_stage":
        scfg = TwoStageConfig(
            cfg.chains, cfg.siblings, cfg.two_stage_t_min, cfg.two_stage_t_max, cfg.max_response_len, cfg.early_eos
        )
        trees, times, census = two_stage_trees(
            prompts, ids, golds, ctx.backend, scfg, ctx.newline, ctx.eos, seed, cfg.temperature, cfg.top_p, first
        )
        return Generated(trees, times, Counter(census), kind)
    trees, times = flat_rollout(
        prompts,
        ids,
        golds,
        ctx.backend,
        cfg.group_size,
        cfg.max_response_len,
        ctx.eos,
        seed,
        cfg.temperature,
        cfg.top_p,
        first,
    )
    census = Counter({"flat_warmup_pairs": cfg.chains * len(prompts)}) if kind == "flat_warmup" else Counter()
    return Generated(trees, times, census, kind)


# ---------------------------------------------------------------------------------------------- 3. score


def score_trees(
    trees: Sequence[PromptTree],
    problems: Sequence[Problem],
    task: Task,
    decode: Callable[[list[int]], str],
    reward_cfg: RewardConfig,
    eos: int,
) -> Counter:
    """Fill every leaf's reward, correctness and truncation; returns the verdict reasons counted."""
    reasons: Counter = Counter()
    for tree, problem in zip(trees, problems, strict=True):
        for leaf in tree.leaves:
            leaf.truncated = not leaf.response or leaf.response[-1] != eos
            verdict = task.verify(decode(leaf.response), problem)
            leaf.reward, leaf.correct = leaf_reward(verdict, len(leaf.response), reward_cfg), verdict.correct
            reasons[verdict.reason] += 1
    return reasons


# ---------------------------------------------------------------------------------------------- 4. keep


def informative(tree: PromptTree, keep_by: str) -> bool:
    """Whether dynamic sampling keeps ``tree``: its leaves' correctness (``accuracy``) or rewards (``reward``)
    differ."""
    return not (tree.accuracy_homogeneous if keep_by == "accuracy" else tree.homogeneous)


def keep_groups(trees: Sequence[PromptTree], cfg: TrainConfig) -> list[PromptTree]:
    return [t for t in trees if not cfg.dynamic_sampling or informative(t, cfg.keep_by)]


# ---------------------------------------------------------------------------------------------- 5. advantages


def advantage_rows(kept: Sequence[PromptTree], cfg: TrainConfig, newline: torch.Tensor) -> list[Row]:
    rows = []
    for q, tree in enumerate(kept):
        advs = advantages(
            tree,
            cfg.advantage,
            newline,
            cfg.prefix_beta,
            cfg.prefix_alpha,
            cfg.subsegments,
            cfg.clamped_prefix,
            cfg.zero_cont_token_mass,
            cfg.grpo_std,
        )
        rows += [Row(leaf.prompt, leaf.response, a, q) for leaf, a in zip(tree.leaves, advs)]
    return rows


# ---------------------------------------------------------------------------------------------- 6. update


def unit_normalized_mean(
    grads: Sequence[Sequence[torch.Tensor]], window: int, world: World = SOLO
) -> list[torch.Tensor]:
    """[TwoStage] Arm 11's accumulation: ``(1/window) Σ_q g_q / ||g_q||`` over the questions of one optimizer step (each
    question's whole gradient scaled to unit L2 norm; a zero gradient adds nothing but counts in the window). Sharded
    gradients (FSDP2 DTensors) take the norm over every rank's shard."""
    out = [torch.zeros_like(g) for g in grads[0]]
    for g in grads:
        norm = math.sqrt(world.sum(sum((_local(x).double() ** 2).sum().item() for x in g)))
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
    pad: int,
    seed: int,
    compute_dtype: torch.dtype = torch.float32,
    world: World = SOLO,
) -> dict:
    """The optimizer steps over ``rows``; the policy is in train mode throughout and in eval mode afterwards.
    Forwards run under autocast in ``compute_dtype`` (fp32 master weights and optimizer state).

    Data parallel (``world``): every rank holds the same ``rows`` (the step's gathered trees) and the same schedule of
    mini-batches; each back-propagates its share of a mini-batch's rows (:func:`_share`) with the mini-batch's global
    token and sequence counts as the loss normalisers, and FSDP2 reduces the gradients, so N ranks take the step one
    process would on the same rows. A rank with fewer rows runs empty micro-batches (:func:`_backward`): FSDP's
    forwards are collectives, every rank issues the same number."""
    if not rows:
        return {
            "loss": 0.0,
            "grad_norm": 0.0,
            **dict.fromkeys(CLIP_STATS, 0.0),
            "optimizer": "no rows",
            "lr": sched.get_last_lr()[0],
        }
    policy.train()
    try:
        with autocast(next(policy.parameters()).device, compute_dtype):
            if cfg.unit_question_grad:
                return _unit_question_update(policy, opt, sched, rows, cfg, pad, world)
            return _minibatch_update(policy, opt, sched, rows, cfg, pad, seed, world)
    finally:
        policy.eval()


def _share(todo: list[int], world: World) -> tuple[list[int], int]:
    """This rank's rows of ``todo`` (every ``size``-th, from its rank on) and the most any rank has."""
    return todo[world.rank :: world.size], -(-len(todo) // world.size)


def _backward(
    policy,
    rows: list[Row],
    todo: list[int],
    cfg: TrainConfig,
    pad: int,
    n_tokens: int,
    n_seqs: int,
    old: dict[int, torch.Tensor],
    world: World = SOLO,
) -> tuple[float, tuple[float, float]]:
    """Loss backward over this rank's share of rows ``todo`` in micro-batches; returns the loss summed over every
    rank and (clipped tokens, tokens) summed over every rank. The loss is scaled by the world size: FSDP2 averages
    gradients over ranks, the normalisers are already global."""
    mine, most = _share(todo, world)
    total, tokens = 0.0, 0.0
    clipped = dict.fromkeys(CLIP_STATS, 0.0)  # tokens of each clip statistic
    for i0 in range(0, most, cfg.micro_batch):
        chunk = mine[i0 : i0 + cfg.micro_batch]
        if not chunk:  # an empty micro-batch: the same collectives as the others, no gradient
            logp, _ = response_logprobs(policy, [[pad]], [[pad]], pad)
            (logp.sum() * 0.0).backward()
            continue
        logp, mask = response_logprobs(
            policy, [rows[i].prompt for i in chunk], [rows[i].response for i in chunk], pad
        )  # (B, R)
        adv = torch.zeros_like(logp)
        old_lp = torch.zeros_like(logp)
        for j, i in enumerate(chunk):
            n = len(rows[i].response)
            adv[j, :n] = rows[i].advantage
            old_lp[j, :n] = (
                old[i] if i in old else logp[j, :n].detach()
            )  # one mini-batch: the rollout policy is this one
        loss, info = LOSSES.get(cfg.loss)(
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
        (loss * world.size if world.launched else loss).backward()
        total += loss.item()
        n = float(mask.sum().item())
        tokens += n
        for k in CLIP_STATS:
            clipped[k] += info.get(k, 0.0) * n
    return world.sum(total), ({k: world.sum(v) for k, v in clipped.items()}, world.sum(tokens))


def _old_logprobs(policy, rows: list[Row], plan: list[list[int]], cfg: TrainConfig, pad: int, world: World) -> dict:
    """The rollout policy's log-probs of the rows this rank back-propagates in ``plan`` (its share of each
    mini-batch), before the first step moves it; every rank runs as many forwards as the busiest."""
    shares = [[i for todo in plan for i in todo[r :: world.size]] for r in range(world.size)]
    mine, most = shares[world.rank], max(map(len, shares))
    old: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for i0 in range(0, most, cfg.micro_batch):
            chunk = mine[i0 : i0 + cfg.micro_batch]
            if not chunk:
                response_logprobs(policy, [[pad]], [[pad]], pad)
                continue
            lp, _ = response_logprobs(policy, [rows[i].prompt for i in chunk], [rows[i].response for i in chunk], pad)
            for j, i in enumerate(chunk):
                old[i] = lp[j, : len(rows[i].response)]
    return old


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _step(policy, opt, sched, cfg: TrainConfig) -> float:
    norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
    norm = (norm.full_tensor() if hasattr(norm, "full_tensor") else norm).item()  # sharded: the global norm
    opt.step()
    sched.step()
    return norm


def _homogeneous(opt, sched, cfg: TrainConfig) -> str:
    if cfg.homogeneous == "zero_grad_step":
        zero_grad_step(opt)
        sched.step()
    return cfg.homogeneous


def _update_summary(losses, norms, clips, kinds, sched) -> dict:
    """One step's update metrics: mean loss and gradient norm, the clip fractions (tokens over the step's
    back-propagated tokens, :data:`~bsb.train.loss.CLIP_STATS`), the optimizer's moves, the lr."""
    tokens = sum(n for _, n in clips)
    frac = {k: sum(c[k] for c, _ in clips) / tokens if tokens else math.nan for k in CLIP_STATS}
    return {
        "loss": _mean(losses),
        "grad_norm": _mean(norms),
        **frac,
        "optimizer": ",".join(kinds),
        "lr": sched.get_last_lr()[0],
    }


def _minibatch_update(
    policy, opt, sched, rows: list[Row], cfg: TrainConfig, pad: int, seed: int, world: World = SOLO
) -> dict:
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    minis = [order[i :: cfg.minibatches] for i in range(cfg.minibatches)]
    # each mini-batch's rows to back-propagate (None: no active row, the homogeneous rule instead)
    plan = []
    for mb in (m for m in minis if m):
        active = [i for i in mb if rows[i].active]
        plan.append((mb, mb if cfg.homogeneous == "backward" else (active or None)))
    old: dict[int, torch.Tensor] = {}
    if getattr(LOSSES.get(cfg.loss), "needs_old_logp", False) and cfg.minibatches > 1:
        old = _old_logprobs(policy, rows, [todo for _, todo in plan if todo], cfg, pad, world)
    losses, norms, clips, kinds = [], [], [], []
    for mb, todo in plan:
        if todo is None:
            kinds.append(_homogeneous(opt, sched, cfg))
            continue
        opt.zero_grad(set_to_none=True)
        n_tokens = max(1, sum(len(rows[i].response) for i in mb))
        total, c = _backward(policy, rows, todo, cfg, pad, n_tokens, len(mb), old, world)
        clips.append(c)
        norms.append(_step(policy, opt, sched, cfg))
        losses.append(total)
        kinds.append("step")
    return _update_summary(losses, norms, clips, kinds, sched)


def _unit_question_update(policy, opt, sched, rows: list[Row], cfg: TrainConfig, pad: int, world: World = SOLO) -> dict:
    """[TwoStage] Arm 11: one optimizer step per ``grad_accum_questions`` questions, each question's gradient scaled to
    unit norm (:func:`unit_normalized_mean`)."""
    params = [p for p in policy.parameters() if p.requires_grad]
    questions = sorted({r.question for r in rows})
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
            loss, c = _backward(policy, rows, todo, cfg, pad, n_tokens, len(mine), {}, world)
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
    return _update_summary(losses, norms, clips, kinds, sched)


# ---------------------------------------------------------------------------------------------- 7. metrics


def step_metrics(
    step: int,
    generated: Sequence[PromptTree],
    kept: Sequence[PromptTree],
    rows: Sequence[Row],
    gen: Generated,
    reasons: Counter,
    update: dict,
    timing: dict,
) -> dict:
    leaves = [leaf for tr in generated for leaf in tr.leaves]
    kept_leaves = [leaf for tr in kept for leaf in tr.leaves]
    adv = torch.cat([r.advantage for r in rows]) if rows else torch.zeros(0)
    # per fork group: the fork position the rollout recorded (None: a chain that never became forkable) and its
    # root's length
    forks = [
        (f, len(tr.leaves[idx[0]].response))
        for tr in generated
        for f, idx in zip(tr.fork_positions, tr.groups().values())
    ]
    groups = [[tr.leaves[i] for i in idx] for tr in generated for idx in tr.groups().values()]
    total = timing["time_step"]
    return {
        "step": step,
        "rollout": gen.kind,
        "reward_mean": _mean([leaf.reward for leaf in leaves]),
        "accuracy": _mean([float(leaf.correct) for leaf in leaves]),
        "kept_accuracy": _mean([float(leaf.correct) for leaf in kept_leaves]),
        "groups_generated": len(generated),
        "groups_kept": len(kept),
        "groups_homogeneous": sum(tr.accuracy_homogeneous for tr in generated),
        "adv_mean": adv.mean().item() if adv.numel() else 0.0,
        "adv_std": adv.std(correction=0).item() if adv.numel() else 0.0,
        "adv_absmax": adv.abs().max().item() if adv.numel() else 0.0,
        "fork_positions": [f for f, _ in forks],
        "unforked": sum(f is None for f, _ in forks),
        "fork_rel_mean": _mean([f / max(1, n) for f, n in forks if f is not None]),
        "sibling_disagreement": _mean([float(len({leaf.correct for leaf in g}) > 1) for g in groups if len(g) > 1]),
        "refills": sum(tr.refills for tr in generated),
        "fallbacks": sum(tr.fallbacks for tr in generated),
        "probe_tokens": sum(tr.probe_tokens for tr in generated),
        "probe_tokens_cached": gen.times.probe_cached,
        "probe_tokens_floor": gen.times.probe_floor,
        "probe_frac": gen.times.select_s / total if total else 0.0,
        "truncated_frac": _mean([float(leaf.truncated) for leaf in leaves]),
        "tokens_generated": gen.times.tokens_generated,
        "tokens_trained": sum(len(r.response) for r in rows),
        "time_generate": gen.times.generate_s,
        "time_select": gen.times.select_s,
        **timing,
        **update,
        **{f"verdict_{k}": v for k, v in sorted(reasons.items())},
        **{f"census_{k}": v for k, v in sorted(gen.census.items())},
    }


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else math.nan
