"""[TwoStage]'s two-stage branched rollout (§4.2): K root prefixes stopped at the causal newline time, B
continuations each, and three rules for a root that ends (EOS) before its stopping time.

Stage 1 samples K roots of up to ``t_max`` tokens. The causal stopping time of a root ``p`` is
``τ_causal = min(t_max, first t >= t_min whose token contains a line break)`` (1-based, so the prefix
``p[:τ]`` ends with that token), and ``T_EOS`` the 1-based position of its EOS. Sampling ``t_max`` tokens and
cutting at τ is the same in distribution as stopping there. When ``T_EOS > τ_causal`` every rule shares the
prefix ``u = p[:τ_causal]`` and draws B continuations of up to ``max_tokens − τ`` tokens. When
``T_EOS <= τ_causal`` (early EOS):

* ``terminal_dup`` (the F_t-stopped tree): ``τ = T_EOS``; ``u = p[:T_EOS]`` is an absorbing leaf and its B
  descendants have empty continuations. Every leaf has exactly the capped policy's marginal.
* ``root_resample``: ``τ`` is set to 0 after the fact; branch 1 keeps the early-EOS root, branches 2..B are
  drawn fresh from the prompt. Not F_0-measurable: branch b >= 2 ends early with probability p², not p.
* ``midpoint_fallback`` ([TwoStage] Arms 9-10): a root of at least ``min_split`` tokens keeps its completed
  text as branch 1 and re-rolls branches 2..B from the line break nearest its midpoint (or the midpoint when it
  has none), so the B leaves share that prefix; a shorter one is duplicated as in ``terminal_dup``.
  Outcome-dependent as well.

The ``generate`` argument is any backend's ``generate(prompts, max_new_tokens, temperature, top_p, seed,
eos_token_id)``, so the rules can be run on a scripted finite policy (see the tests).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from bsb.train.rollout import RolloutTimes
from bsb.train.sampling import Sampling
from bsb.train.seeds import derive
from bsb.train.tree import Leaf, PromptTree
from bsb.train.tree_options import TreeOptions, check_shape

EARLY_EOS_RULES = ("terminal_dup", "root_resample", "midpoint_fallback")


@dataclass(frozen=True)
class TwoStageConfig:
    """The stopping rule's options; the K roots and B branches are the tree's ``chains`` and ``siblings``
    (:class:`~bsb.train.tree_options.TreeOptions`), the response cap the :class:`~bsb.train.sampling.Sampling`'s."""

    t_min: int = 96  # T_min of the causal stopping time
    t_max: int = 160  # T_max: stage-1 length and the latest stop
    early_eos: str = "terminal_dup"
    min_split: int = 32  # midpoint_fallback: shortest early-EOS root that is split

    def __post_init__(self):
        if self.early_eos not in EARLY_EOS_RULES:
            raise ValueError(f"early_eos must be one of {', '.join(EARLY_EOS_RULES)}, got {self.early_eos!r}")

    def problem(self, max_tokens: int) -> str | None:
        """Why these stopping times do not fit a response cap of ``max_tokens``, or None: the one check, made by
        ``bsb train``'s config at start and by :func:`two_stage_rollout` for any other caller."""
        if not 1 <= self.t_min <= self.t_max < max_tokens:
            return (
                "two_stage needs 1 <= two_stage_t_min <= two_stage_t_max < max_response_len, "
                f"got {self.t_min}, {self.t_max}, {max_tokens}"
            )
        return None


def causal_tau(tokens: list[int], newline_mask: torch.Tensor, t_min: int, t_max: int) -> int:
    """τ_causal (1-based): the first position >= t_min holding a line-break token, else t_max."""
    for t in range(t_min, min(t_max, len(tokens)) + 1):
        if bool(newline_mask[tokens[t - 1]]):
            return t
    return t_max


def _midpoint_cut(tokens: list[int], newline_mask: torch.Tensor) -> int:
    n = len(tokens)
    cuts = [i + 1 for i, t in enumerate(tokens[: n - 1]) if bool(newline_mask[t])]
    return min(cuts, key=lambda c: (abs(c - n / 2), c)) if cuts else max(1, n // 2)


def two_stage_rollout(
    generate: Callable,
    prompt: list[int],
    shape: TreeOptions,
    stages: TwoStageConfig,
    sampling: Sampling,
    newline_mask: torch.Tensor,
    eos_id: int,
    seed: int = 0,
) -> tuple[list[Leaf], dict]:
    """K·B leaves for one prompt (group k = root k; K = ``shape.chains``, B = ``shape.siblings``) and the pair census
    ``{"causal_non_eos": …, "terminal_dup": …, "tau_zero": …, "midpoint_fallback": …}``."""
    check_shape(shape)
    why = stages.problem(sampling.max_tokens)
    if why:
        raise ValueError(why)
    kw, cap, branches = sampling.kwargs(eos_id), sampling.max_tokens, shape.siblings
    roots = generate([prompt] * shape.chains, max_new_tokens=stages.t_max, seed=seed, **kw)
    census = dict.fromkeys(("causal_non_eos", "terminal_dup", "tau_zero", "midpoint_fallback"), 0)
    plan = []  # (group, prefix tokens, prefix_len kept on the leaf, budget) of each continuation to draw
    leaves: list[Leaf] = []
    for k, p in enumerate(roots):
        tau = causal_tau(p, newline_mask, stages.t_min, stages.t_max)
        t_eos = p.index(eos_id) + 1 if eos_id in p else None
        if t_eos is None or t_eos > tau:
            census["causal_non_eos"] += 1
            plan += [(k, p[:tau], tau, cap - tau)] * branches
            continue
        done = p[:t_eos]
        rule = stages.early_eos
        if rule == "midpoint_fallback" and len(done) < stages.min_split:
            rule = "terminal_dup"
        if rule == "terminal_dup":
            census["terminal_dup"] += 1
            leaves += [Leaf(prompt, list(done), k, t_eos) for _ in range(branches)]
        elif rule == "root_resample":
            census["tau_zero"] += 1
            leaves.append(Leaf(prompt, list(done), k, 0))
            plan += [(k, [], 0, cap)] * (branches - 1)
        else:
            census["midpoint_fallback"] += 1
            cut = _midpoint_cut(done, newline_mask)
            leaves.append(Leaf(prompt, list(done), k, cut))
            plan += [(k, done[:cut], cut, cap - cut)] * (branches - 1)
    if plan:
        conts = generate(
            [prompt + u for _, u, _, _ in plan],
            max_new_tokens=[max(1, b) for *_, b in plan],  # each continuation to its own budget
            seed=derive(seed, "continuations"),
            **kw,
        )
        for (k, u, keep, budget), v in zip(plan, conts):
            leaves.append(Leaf(prompt, list(u) + list(v[:budget]), k, keep, origin="sibling"))
    leaves.sort(key=lambda leaf: leaf.group)  # stable: each group's leaves stay in the order drawn
    return leaves, census


def two_stage_trees(
    prompts: Sequence[list[int]],
    ids: Sequence[str],
    golds: Sequence,
    backend,
    shape: TreeOptions,
    stages: TwoStageConfig,
    sampling: Sampling,
    newline_mask: torch.Tensor,
    eos_id: int,
    seed: int,
    first: int = 0,
) -> tuple[list[PromptTree], RolloutTimes, dict]:
    """:func:`two_stage_rollout` for every prompt of a round (prompt j seeded by its own stream, from its global
    index ``first + j``): the trees, the timings and the summed pair census. Each tree's ``fork_positions`` are its
    groups' stopping times τ."""
    trees, times, census = [], RolloutTimes(), {}
    start = time.perf_counter()
    for j, (i, p, g) in enumerate(zip(ids, prompts, golds)):
        leaves, c = two_stage_rollout(
            backend.generate,
            list(p),
            shape,
            stages,
            sampling,
            newline_mask,
            eos_id,
            derive(seed, "two_stage", first + j),
        )
        tree = PromptTree(i, g, leaves)
        tree.fork_positions = [tree.leaves[idx[0]].prefix_len for idx in tree.groups().values()]
        tree.fork_scores = [math.nan] * len(tree.fork_positions)  # τ is a stopping time, not a selector's choice
        trees.append(tree)
        census = {k: census.get(k, 0) + v for k, v in c.items()}
    times.generate_s = time.perf_counter() - start
    times.tokens_generated = sum(len(leaf.response) - leaf.prefix_len for t in trees for leaf in t.leaves)
    return trees, times, census
