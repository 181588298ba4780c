"""How the update forwards its rows (``update_packing``), decided once: :class:`PathPass` forwards each row as its
own sequence (the specification); :class:`TreePass` forwards each micro-batch's unique tokens once
(:mod:`bsb.train.tree_pack`), so its units are whole fork groups and a shared prefix never crosses ranks. Both hand the
loss the same (B, R) tensors. :func:`resolve_pass` checks the model once, at trainer start, and takes the per-path
pass where the tree-packed one cannot update it."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

from bsb.train.loss import response_logprobs
from bsb.train.tree_pack import tree_attention_on, tree_logprobs, tree_update_refusal


class PathPass:
    """Each row its own sequence: rank units are single rows."""

    name, groups, pads = "path", False, True  # a micro-batch's rows padded to its widest

    def context(self, policy):
        return contextlib.nullcontext()

    def logprobs(self, policy, prompts: Sequence, responses: Sequence, prefix_lens: Sequence[int], pad: int):
        """``(logp (B, R), mask (B, R), tokens computed, tokens per path)``."""
        logp, mask = response_logprobs(policy, prompts, responses, pad)
        tokens = sum(len(p) + len(r) for p, r in zip(prompts, responses))
        return logp, mask, tokens, tokens


class TreePass:
    """Each micro-batch's shared prompt and fork prefixes once: rank units are fork groups."""

    name, groups, pads = "tree", True, False  # one flat sequence of unique tokens

    def context(self, policy):
        return tree_attention_on(policy)

    def logprobs(self, policy, prompts: Sequence, responses: Sequence, prefix_lens: Sequence[int], pad: int):
        logp, mask, pack = tree_logprobs(policy, prompts, responses, prefix_lens, checked=True)
        return logp, mask, pack.tokens, pack.path_tokens


PASSES = {p.name: p for p in (TreePass(), PathPass())}
PASS_NAMES = tuple(PASSES)  # update_packing's choices


def resolve_pass(packing: str, model: torch.nn.Module) -> tuple[PathPass | TreePass, str]:
    """The pass ``packing`` names for ``model``, and why the tree-packed pass cannot update it ("" when it can or was
    not asked for): the per-path pass then, which computes the same loss."""
    why = tree_update_refusal(model) if packing == TreePass.name else ""
    return (PASSES[PathPass.name], why) if why else (PASSES[packing], "")
