"""Tree advantages on verl's batch: ``bsb_treerl``, ``bsb_treerl_released`` and ``bsb_prefix_credit``.

verl's advantage step hands a registered estimator only ``token_level_rewards`` (B, T), ``response_mask`` (B, T),
``index`` (each row's ``uid``) and ``config`` (the ``algorithm`` section). The tree therefore travels in the uid:
the ``bsb_tree`` worker writes ``"{prompt_uid}#{group}#{prefix_len}"`` (:func:`encode_uid`) into every leaf's row.
The estimator rebuilds each prompt's :class:`~bsb.train.tree.PromptTree` from the rows (reward = the row's summed
token-level reward, response length = the row's response-mask count) and returns exactly what
:func:`bsb.train.advantages.advantages` gives for that tree, placed on the row's response positions. Extra keyword
arguments are accepted, so the estimators keep working when verl starts passing ``non_tensor_batch``.

The options of ``bsb_prefix_credit`` (β, α, clamping, zero continuation mass) and ``zero_cont_token_mass`` of
either estimator come from the config's ``bsb:`` section (verl's ``algorithm`` dataclass rejects unknown keys);
the estimator reaches it through the ``algorithm`` node's root config.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bsb.integrations.verl.settings import ESTIMATORS, BsbSettings
from bsb.train.advantages import advantages
from bsb.train.tree import Leaf, PromptTree
from bsb.train.tree_options import CreditOptions

SEP = "#"


def encode_uid(uid: str, group: int, prefix_len: int) -> str:
    """A leaf's row key for the estimator: its prompt's uid, its fork group and its shared-prefix length."""
    return f"{uid}{SEP}{int(group)}{SEP}{int(prefix_len)}"


def decode_uid(key: str) -> tuple[str, int, int]:
    parts = str(key).rsplit(SEP, 2)
    if len(parts) != 3:
        raise ValueError(
            f"row uid {key!r} carries no bsb tree ({'uid#group#prefix_len'}): bsb's estimators need the "
            "bsb_tree agent loop and its worker (actor_rollout_ref.rollout.agent.agent_loop_manager_class)"
        )
    try:
        return parts[0], int(parts[1]), int(parts[2])
    except ValueError as err:
        raise ValueError(f"row uid {key!r}: group and prefix length must be integers") from err


def tree_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str],
    kind: str,
    options: CreditOptions | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), each (B, T): bsb's ``kind`` advantages of every prompt's tree (rows grouped by the
    prompt uid in ``index``) with ``options`` (None: the defaults), zero off the response mask. Returns equal
    advantages (outcome-reward estimators)."""
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
        raise ValueError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must be the same (B, T)"
        )
    if len(index) != token_level_rewards.shape[0]:
        raise ValueError(f"index has {len(index)} uids for {token_level_rewards.shape[0]} rows")
    mask = response_mask.bool()
    rewards = (token_level_rewards * mask).sum(-1).tolist()
    trees: dict[str, tuple[PromptTree, list[int]]] = {}
    for row, key in enumerate(index):
        uid, group, prefix_len = decode_uid(key)
        n = int(mask[row].sum())
        if prefix_len > n:
            raise ValueError(
                f"row {row} ({key}): shared prefix of {prefix_len} tokens longer than its {n}-token response"
            )
        tree, rows = trees.setdefault(uid, (PromptTree(uid, None), []))
        tree.leaves.append(Leaf([], [0] * n, group, prefix_len, reward=float(rewards[row])))
        rows.append(row)
    out = torch.zeros_like(token_level_rewards, dtype=torch.float32)
    for tree, rows in trees.values():
        for row, adv in zip(rows, advantages(tree, kind, options=options)):
            out[row, mask[row]] = adv  # a single-turn response's mask is its leading run of generated tokens
    return out, out.clone()


def estimator_options(config) -> BsbSettings:
    """The credit options (``prefix_beta``, ``prefix_alpha``, ``clamped_prefix``, ``zero_cont_token_mass``,
    ``grpo_std``) of the ``bsb:`` section of the config that ``config`` (verl's ``algorithm`` node) belongs to, as
    its :class:`BsbSettings` (a :class:`~bsb.train.tree_options.CreditOptions`); the defaults where there is none."""
    section = None
    root = getattr(config, "_get_root", None)
    if root is not None:
        section = root().get("bsb")
    return BsbSettings.from_mapping(section or {})


def _estimator(kind: str):
    def estimate(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        if index is None:
            raise ValueError(f"bsb's {kind} estimator needs each row's uid (verl passes it as index)")
        return tree_advantages(token_level_rewards, response_mask, list(index), kind, estimator_options(config))

    estimate.__name__ = f"bsb_{kind}"
    return estimate


ESTIMATOR_FNS = {name: _estimator(kind) for name, kind in ESTIMATORS.items()}


def register() -> None:
    """Register ``bsb_treerl`` and ``bsb_prefix_credit`` with verl's advantage-estimator registry (idempotent)."""
    from verl.trainer.ppo.core_algos import register_adv_est

    for name, fn in ESTIMATOR_FNS.items():
        register_adv_est(name)(fn)
