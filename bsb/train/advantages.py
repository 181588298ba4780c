"""Per-token advantages of one prompt's tree: TreeRL ([Fork] Eq. 7), flat GRPO, and [TwoStage]'s prefix credit.

Every function takes a :class:`~bsb.train.tree.PromptTree` with rewards filled in and returns one float32
tensor per leaf, of the leaf's response length: the advantage of each response token.

* :func:`treerl_advantages`, Eq. 7: ``A = [(V − V̄) + (V − μ)] / sqrt(|L|)`` per node, with V the node's
  subtree-mean reward, μ the mean V of the node and its siblings, V̄ the tree mean and |L| its descendant
  leaves. A prefix node's advantage goes to the shared tokens ``response[:prefix_len]`` of each of its leaves; a
  leaf's to its own tokens. Not standardised (the paper uses no std normalisation). With ``newline_mask`` the
  segment advantage is subdivided width-proportionally across its sub-segments (App. A, the OLMo setting):
  a segment split at line breaks into pieces of widths w_j (summing to W) gives each token of piece j
  ``A · w_j / W``.
* :func:`treerl_released_advantages`, what TreeRL's released code computes (not Eq. 7): each node's value
  ``Ṽ = c (V − V̄) / sqrt(|L|)`` with the leave-one-out scale ``c = n / (n − 1)`` over the tree's n leaves (its
  ``leaf_normalize``) and ``Ṽ(root) = 0``, and each node's tokens get ``2 Ṽ(node) − Ṽ(parent)``: a leaf's own tokens
  ``c [2 (R − V̄) − (V_p − V̄) / sqrt(|L_p|)]`` where Eq. 7 gives ``(R − V̄) + (R − V_p)``. For reproducing numbers
  from TreeRL's scripts; Eq. 7 is the paper's and the default.
* :func:`grpo_advantages`, the flat chain baseline: ``(R − R̄) / (σ_R + 1e-4)`` on every token, σ_R the population
  standard deviation of the group's rewards (``grpo_std="population"``, bsb's default) or the sample one (``"sample"``,
  Bessel-corrected, as verl's and TRL's GRPO).
* :func:`prefix_credit_advantages`, [TwoStage] §4.3: for a group k with a shared prefix,
  ``A_prefix = (Ṽ_k − R̄)/(σ_R + 1e-4)`` with ``Ṽ_k = (1 − β) V̂_k + β M_k`` (descendant mean V̂, max backup M),
  and ``A_cont = ((1 − α)(R − R̄) + α (R − V̂_k))/(σ_R + 1e-4)`` on the continuation; a group with no shared
  prefix gets plain leaf credit ``(R − R̄)/(σ_R + 1e-4)`` on all tokens. ``clamped_prefix`` is [TwoStage]'s one-sided
  prefix clamping (``--clamped-prefix``, Proposition 3): in a group whose leaves disagree, a winning leaf (R = M_k)
  keeps its own credit ``(R − R̄)/(σ_R + 1e-4)`` on the shared prefix and a losing leaf's prefix credit is clamped
  to ``max(0, (Ṽ_k − R̄)/(σ_R + 1e-4))``; the paper shows the net prefix weight is then positive for all R̄ < 1.
* :func:`zero_continuation_mass`, [TwoStage] Arm 11 (``--zero-cont-token-mass``): the continuation tokens'
  advantages of a tree are shifted by a common constant so that their signed token mass ``Σ_tokens A`` is zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from bsb.registry import Registry
from bsb.train.tree import PromptTree
from bsb.train.tree_options import GRPO_STDS, CreditOptions

STD_EPS = 1e-4  # [TwoStage]'s σ_R + 1e-4


def _broadcast(
    tree: PromptTree, prefix_adv: dict[int, float], leaf_adv: list[float], leaf_prefix: dict[int, float] | None = None
) -> list[torch.Tensor]:
    """Per-token advantages: the group's prefix advantage (or a leaf's own, ``leaf_prefix[i]``) on the shared
    prefix, the leaf's advantage on its own tokens."""
    out = []
    for i, leaf in enumerate(tree.leaves):
        a = torch.full((len(leaf.response),), leaf_adv[i], dtype=torch.float32)
        a[: leaf.prefix_len] = (leaf_prefix or {}).get(i, prefix_adv.get(leaf.group, leaf_adv[i]))
        out.append(a)
    return out


def _width_factors(tokens: list[int], newline_mask: torch.Tensor) -> torch.Tensor:
    """(len(tokens),) factor w_j / W for each token of a segment cut after every line-break token."""
    n = len(tokens)
    if n == 0:
        return torch.ones(0)
    ends = [i + 1 for i, t in enumerate(tokens) if bool(newline_mask[t])]
    bounds = sorted({0, n, *ends})
    f = torch.empty(n)
    for a, b in zip(bounds[:-1], bounds[1:]):
        f[a:b] = (b - a) / n
    return f


def treerl_advantages(tree: PromptTree, newline_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
    leaves = tree.leaves
    if not leaves:
        return []
    rewards = [leaf.reward for leaf in leaves]
    v_bar = sum(rewards) / len(rewards)
    groups = tree.groups()
    shared = {g: idx for g, idx in groups.items() if leaves[idx[0]].prefix_len > 0}
    v_group = {g: sum(rewards[i] for i in idx) / len(idx) for g, idx in shared.items()}
    # The root's children: one prefix node per sharing group, and every leaf of a non-sharing group.
    root_children = list(v_group.values()) + [rewards[i] for g, idx in groups.items() if g not in shared for i in idx]
    mu_root = sum(root_children) / len(root_children)
    prefix_adv = {g: ((v - v_bar) + (v - mu_root)) / math.sqrt(len(shared[g])) for g, v in v_group.items()}
    leaf_adv = [(r - v_bar) + (r - v_group.get(leaf.group, mu_root)) for r, leaf in zip(rewards, leaves)]
    return _subsegments(tree, _broadcast(tree, prefix_adv, leaf_adv), newline_mask)


def treerl_released_advantages(tree: PromptTree, newline_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
    leaves = tree.leaves
    n = len(leaves)
    if n < 2:  # no leave-one-out baseline for a lone leaf
        return [torch.zeros(len(leaf.response)) for leaf in leaves]
    rewards = [leaf.reward for leaf in leaves]
    v_bar, c = sum(rewards) / n, n / (n - 1)
    groups = tree.groups()
    shared = {g: idx for g, idx in groups.items() if leaves[idx[0]].prefix_len > 0}
    v_node = {
        g: c * (sum(rewards[i] for i in idx) / len(idx) - v_bar) / math.sqrt(len(idx)) for g, idx in shared.items()
    }
    prefix_adv = {g: 2 * v for g, v in v_node.items()}  # 2 Ṽ(prefix) − Ṽ(root), Ṽ(root) = 0
    leaf_adv = [2 * c * (r - v_bar) - v_node.get(leaf.group, 0.0) for r, leaf in zip(rewards, leaves)]
    return _subsegments(tree, _broadcast(tree, prefix_adv, leaf_adv), newline_mask)


def _subsegments(tree: PromptTree, out: list[torch.Tensor], newline_mask: torch.Tensor | None) -> list[torch.Tensor]:
    """App. A's width-proportional subdivision of each segment's advantage at line breaks (in place)."""
    if newline_mask is not None:
        for a, leaf in zip(out, tree.leaves):
            p = leaf.prefix_len
            a[:p] *= _width_factors(leaf.response[:p], newline_mask)
            a[p:] *= _width_factors(leaf.response[p:], newline_mask)
    return out


def _mean_std(rewards: list[float], std: str = "population") -> tuple[float, float]:
    if std not in GRPO_STDS:
        raise ValueError(f"grpo_std must be one of {', '.join(GRPO_STDS)}, got {std!r}")
    r = torch.tensor(rewards, dtype=torch.float64)
    if std == "sample" and r.numel() < 2:
        return r.mean().item(), 0.0  # one reward: no spread (verl then divides by 1; the advantage is 0 either way)
    return r.mean().item(), r.std(correction=0 if std == "population" else 1).item()


def grpo_advantages(tree: PromptTree, std: str = "population") -> list[torch.Tensor]:
    if not tree.leaves:
        return []
    mean, std = _mean_std(tree.rewards, std)
    return [
        torch.full((len(leaf.response),), (leaf.reward - mean) / (std + STD_EPS), dtype=torch.float32)
        for leaf in tree.leaves
    ]


def prefix_credit_advantages(
    tree: PromptTree, beta: float = 0.0, alpha: float = 0.5, clamped: bool = False, std: str = "population"
) -> list[torch.Tensor]:
    if not 0.0 <= beta <= 1.0 or not 0.0 <= alpha <= 1.0:
        raise ValueError(f"beta and alpha must be in [0, 1], got beta={beta}, alpha={alpha}")
    if not tree.leaves:
        return []
    rewards = tree.rewards
    r_bar, sigma = _mean_std(rewards, std)
    scale = 1.0 / (sigma + STD_EPS)
    prefix_adv, v_hat = {}, {}
    for g, idx in tree.groups().items():
        if tree.leaves[idx[0]].prefix_len > 0:
            v_hat[g] = sum(rewards[i] for i in idx) / len(idx)
            m = max(rewards[i] for i in idx)
            prefix_adv[g] = ((1 - beta) * v_hat[g] + beta * m - r_bar) * scale
    leaf_adv = []
    for r, leaf in zip(rewards, tree.leaves):
        if leaf.group in v_hat:
            leaf_adv.append(((1 - alpha) * (r - r_bar) + alpha * (r - v_hat[leaf.group])) * scale)
        else:
            leaf_adv.append((r - r_bar) * scale)
    leaf_prefix = {}
    if clamped:  # Proposition 3: winners keep their own credit on the prefix, losers are clamped at 0 from below
        for g, idx in tree.groups().items():
            if g not in prefix_adv or len({rewards[i] for i in idx}) < 2:
                continue
            m = max(rewards[i] for i in idx)
            for i in idx:
                leaf_prefix[i] = (rewards[i] - r_bar) * scale if rewards[i] == m else max(0.0, prefix_adv[g])
    return _broadcast(tree, prefix_adv, leaf_adv, leaf_prefix)


def zero_continuation_mass(tree: PromptTree, advs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Shift every continuation token's advantage (``response[prefix_len:]`` of each leaf) by one constant so that
    their sum over the tree is zero; shared-prefix tokens are unchanged ([TwoStage] Arm 11)."""
    conts = [a[leaf.prefix_len :] for a, leaf in zip(advs, tree.leaves)]
    n = sum(c.numel() for c in conts)
    if n == 0:
        return advs
    shift = sum(c.double().sum().item() for c in conts) / n
    out = []
    for a, leaf in zip(advs, tree.leaves):
        a = a.clone()
        a[leaf.prefix_len :] -= shift
        out.append(a)
    return out


def _an_estimator(obj) -> str:
    return "" if callable(obj) and not isinstance(obj, type) else "not a function tree -> per-leaf advantages"


# An estimator is ``fn(tree, *, newline_mask, subsegments, options) -> [Tensor per leaf]``, ``options`` a
# :class:`~bsb.train.tree_options.CreditOptions` (``options.prefix_beta``, ``options.grpo_std``, ...: the config's
# names); one of yours registers with ``@ADVANTAGES.register("name")`` and takes ``**_`` for what it does not read.
ADVANTAGES: Registry = Registry("advantage", _an_estimator, noun="function")


@ADVANTAGES.register("treerl", "TreeRL Eq. 7")
def _treerl(tree: PromptTree, *, newline_mask=None, subsegments: bool = False, **_) -> list[torch.Tensor]:
    return treerl_advantages(tree, newline_mask if subsegments else None)


@ADVANTAGES.register("treerl_released", "TreeRL's released code, not Eq. 7")
def _treerl_released(tree: PromptTree, *, newline_mask=None, subsegments: bool = False, **_) -> list[torch.Tensor]:
    return treerl_released_advantages(tree, newline_mask if subsegments else None)


@ADVANTAGES.register("grpo", "group-standardised rewards")
def _grpo(tree: PromptTree, *, options: CreditOptions, **_) -> list[torch.Tensor]:
    return grpo_advantages(tree, options.grpo_std)


@ADVANTAGES.register("prefix_credit", "[TwoStage] §4.3")
def _prefix_credit(tree: PromptTree, *, options: CreditOptions, **_) -> list[torch.Tensor]:
    o = options
    return prefix_credit_advantages(tree, o.prefix_beta, o.prefix_alpha, o.clamped_prefix, o.grpo_std)


def advantages(
    tree: PromptTree,
    kind: str | Callable,
    newline_mask: torch.Tensor | None = None,
    options: CreditOptions | None = None,
    subsegments: bool = False,
) -> list[torch.Tensor]:
    """The estimator ``kind`` (registered in :data:`ADVANTAGES`, ``package.module:function``, or the function itself,
    as a run plan holds it) with ``options``
    (a :class:`~bsb.train.tree_options.CreditOptions`, or a config that inherits it; None: the defaults):
    ``grpo_std`` for the estimators that standardise, the ``prefix_*`` options for ``prefix_credit``, and
    ``zero_cont_token_mass`` then centres the continuations."""
    options = CreditOptions() if options is None else options
    estimator = kind if callable(kind) else ADVANTAGES.get(kind)
    out = estimator(tree, newline_mask=newline_mask, subsegments=subsegments, options=options)
    return zero_continuation_mass(tree, out) if options.zero_cont_token_mass else out
