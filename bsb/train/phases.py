"""One training step as named phases on plain data; :class:`bsb.train.trainer.Trainer` runs them in its loop.

1. :func:`draw`: the task's training problems for one generation round (seed stream ``draw``).
2. :func:`generate_trees`: one tree per problem, as token ids: [Fork]'s tree rollout, [TwoStage]'s two-stage
   sampler, flat GRPO groups, or the flat warm-up before bifurcating (:func:`rollout_kind`).
3. :func:`score_trees`: the task's verdict on every leaf plus DAPO's overlong penalty → each leaf's reward.
4. :func:`keep_groups`: dynamic sampling keeps the trees whose outcomes differ (by accuracy, or by reward).
5. :func:`advantage_rows`: the kept trees' per-token advantages, flattened to one :class:`Row` per leaf.
6. :func:`bsb.train.update.update_policy`: the optimizer steps over the rows (its own module).
7. :func:`step_metrics`: one JSON-serialisable dict per step.

Each phase takes and returns data (problems, trees, rows, dicts); the engine and the selector (bound to its reader)
come in the :class:`RolloutContext`, built once by the trainer.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from bsb.engine.selectors import Selector
from bsb.tasks.base import NO_ANSWER_REASONS, Problem, Task
from bsb.train.advantages import advantages
from bsb.train.config import TrainConfig
from bsb.train.fork_stats import step_fork_metrics
from bsb.train.rewards import RewardConfig, leaf_reward
from bsb.train.rollout import RolloutTimes, flat_rollout, tree_rollout
from bsb.train.run_plan import RunPlan
from bsb.train.seeds import stream
from bsb.train.tree import PromptTree, Row
from bsb.train.two_stage import two_stage_trees


@dataclass
class RolloutContext:
    """What generating trees needs, built once by the trainer."""

    backend: object  # generation (vLLM or HF)
    selector: Selector  # bound to the backend its reads go to (bsb.engine.reader.bind_reader)
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
    plan: RunPlan,
    ctx: RolloutContext,
    seed: int,
    first: int = 0,
) -> Generated:
    """The trees of ``problems`` (the round's prompts from global index ``first`` on: each prompt's seeds derive from
    that index, so a data-parallel rank's share grows the trees one process would); ``cfg`` is the tree's shape (M, k,
    refills), ``plan`` holds the sampling and the two-stage rule."""
    ids, golds, sampling = [p.id for p in problems], [p.answer for p in problems], plan.sampling
    if kind == "tree":
        trees, times = tree_rollout(
            prompts,
            ids,
            golds,
            ctx.backend,
            ctx.selector,
            ctx.newline,
            cfg,
            sampling,
            ctx.eos,
            seed,
            ctx.answer_tokens,
            first,
        )
        return Generated(trees, times, Counter(), kind)
    if kind == "two_stage":
        trees, times, census = two_stage_trees(
            prompts, ids, golds, ctx.backend, cfg, plan.two_stage, sampling, ctx.newline, ctx.eos, seed, first
        )
        return Generated(trees, times, Counter(census), kind)
    trees, times = flat_rollout(prompts, ids, golds, ctx.backend, cfg.group_size, sampling, ctx.eos, seed, first)
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


def advantage_rows(
    kept: Sequence[PromptTree], cfg: TrainConfig, newline: torch.Tensor, estimator: Callable | None = None
) -> list[Row]:
    """A row per leaf of the kept trees, with ``estimator``'s advantages (the run plan's; None: ``cfg.advantage``'s)."""
    rows = []
    for q, tree in enumerate(kept):
        advs = advantages(tree, estimator or cfg.advantage, newline, cfg, cfg.subsegments)  # cfg is a CreditOptions
        rows += [
            Row(leaf.prompt, leaf.response, a, q, leaf.group, leaf.prefix_len) for leaf, a in zip(tree.leaves, advs)
        ]
    return rows


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
        # responses holding no answer the task reads (the prompt may not ask for the task's answer format)
        "no_answer_rate": sum(reasons[r] for r in NO_ANSWER_REASONS) / len(leaves) if leaves else math.nan,
        "kept_accuracy": _mean([float(leaf.correct) for leaf in kept_leaves]),
        "groups_generated": len(generated),
        "groups_kept": len(kept),
        "groups_homogeneous": sum(tr.accuracy_homogeneous for tr in generated),
        "adv_mean": adv.mean().item() if adv.numel() else 0.0,
        "adv_std": adv.std(correction=0).item() if adv.numel() else 0.0,
        "adv_absmax": adv.abs().max().item() if adv.numel() else 0.0,
        "fork_positions": [f for f, _ in forks],
        "unforked": sum(f is None for f, _ in forks),
        "sibling_disagreement": _mean([float(len({leaf.correct for leaf in g}) > 1) for g in groups if len(g) > 1]),
        "refills": sum(tr.refills for tr in generated),
        "fallbacks": sum(tr.fallbacks for tr in generated),
        # fork yield, its tercile split, fork_rel, |advantage| on prefix nodes, refill and fallback rates
        **step_fork_metrics(generated, kept, rows),
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
