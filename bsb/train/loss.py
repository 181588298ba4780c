"""Policy-gradient losses on token log-probabilities, and the zero-gradient optimizer step.

* :func:`composite_loss` ([Fork] App. A, DAPO-style): PPO ratios against the rollout policy's log-probs,
  asymmetric clipping ``clip(r, 1 − 0.2, 1 + 0.28)``, token-mean aggregation over every response token of
  the mini-batch, no KL term, no entropy bonus. The aggregation modes are verl's ``loss_agg_mode``:
  ``token-mean`` (Σ over the mini-batch's tokens / their count), ``seq-mean-token-mean`` (each sequence's token
  mean, averaged over its sequences: standard GRPO, the paper's updater ablation with symmetric clipping 0.2/0.2),
  and ``seq-mean-token-sum`` (each sequence's token sum, averaged over its sequences).
* :func:`flat_loss` ([TwoStage] §1): ``−(1/G) Σ_i Σ_t A_{i,t} log π(y_t)``, sequence-summed log-probs with each
  token's NLL weighted before the sum ([TwoStage]'s ``compute_weighted_logprob``).
* :func:`zero_grad_step` ([TwoStage] §3.2): ``param.grad = zeros_like(param); optimizer.step()``. It keeps the
  AdamW moment decay, bias correction and weight decay of a homogeneous step without a backward pass, and is
  bitwise equal to a 0-weighted backward on the same trajectory (tested).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from bsb.engine.device import compute_device
from bsb.engine.families import plain_unembedding
from bsb.kernels.linear_logprob import linear_token_logprobs
from bsb.registry import Registry

LOSS_AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def pad_batch(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int):
    """Right-padded ``ids`` (B, W), ``attn`` (B, W), and the response slice of each row as
    ``resp_mask`` (B, R) with R the longest response; response token j of row i sits at ``ids[i, len(p_i) + j]``."""
    if len(prompts) != len(responses) or not prompts:
        raise ValueError("pad_batch needs as many prompts as responses, at least one")
    lens = [len(p) + len(r) for p, r in zip(prompts, responses)]
    width, rmax = max(lens), max(1, max(len(r) for r in responses))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    resp_mask = torch.zeros((len(prompts), rmax), dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : lens[i]] = torch.tensor(list(p) + list(r), dtype=torch.long)
        attn[i, : lens[i]] = 1
        resp_mask[i, : len(r)] = True
    return ids, attn, resp_mask


def response_logprobs(
    model, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(y_t | x, y_<t) of every response token: ``(logp (B, R), mask (B, R))``, differentiable.

    On a model whose LM head is a plain unembedding (:func:`bsb.engine.families.plain_unembedding`),
    only the response positions' final hidden states go through a chunked linear + logsumexp
    (:func:`bsb.kernels.linear_logprob.linear_token_logprobs`), so no (B, W, V) logits are ever held; other models
    take the full-logits path (:func:`response_logprobs_full`)."""
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (the first response token is predicted from it)")
    if not plain_unembedding(model):
        return response_logprobs_full(model, prompts, responses, pad_id)
    ids, attn, mask = pad_batch(prompts, responses, pad_id)
    device = compute_device(model)  # offloaded FSDP2 shards sit on the host; the forward runs on the mesh's device
    rows = torch.cat([torch.full((len(r),), i) for i, r in enumerate(responses)])  # (N,)
    within = torch.cat([torch.arange(len(r)) for r in responses])  # (N,) response position
    starts = torch.tensor([len(p) for p in prompts])[rows]
    args = [t.to(device) for t in (ids, attn, rows, starts - 1 + within, ids[rows, starts + within])]
    lp = token_logprobs_forward(model)(*args)
    out = torch.zeros(mask.shape, dtype=torch.float32, device=device)
    out = out.index_put((rows.to(device), within.to(device)), lp)  # (B, R)
    return out, mask.to(device)


def token_logprobs_forward(model):
    """The update's forward of ``model``: a sharded policy's registered FSDP forward method (so its root's parameters
    are gathered for it, :func:`bsb.train.sharding.token_logprobs_method`), else :func:`hidden_token_logprobs`."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        return model.bsb_token_logprobs
    return functools.partial(hidden_token_logprobs, model)


def hidden_token_logprobs(model, ids, attn, rows, positions, targets, **model_kwargs) -> torch.Tensor:
    """log π of ``targets`` (N,) read at ``(rows, positions)`` of the batch ``ids`` (B, W): the final hidden states
    there through the chunked linear + logsumexp of the LM head (no (B, W, V) logits). ``model_kwargs`` go to the
    decoder's forward (the tree-packed pass's position ids and tree mask, :mod:`bsb.train.tree_pack`)."""
    hidden = model.model(input_ids=ids, attention_mask=attn, **model_kwargs).last_hidden_state  # (B, W, d), normed
    return linear_token_logprobs(hidden[rows, positions], model.get_output_embeddings().weight, targets)


def response_logprobs_full(
    model, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`response_logprobs` through the model's full (B, W, V) logits (any causal LM; the specification)."""
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (the first response token is predicted from it)")
    ids, attn, mask = pad_batch(prompts, responses, pad_id)
    device = compute_device(model)  # offloaded shards live on the CPU; the forward runs on the mesh's device
    logits = model(input_ids=ids.to(device), attention_mask=attn.to(device)).logits  # (B, W, V)
    rows = []
    for i, (p, r) in enumerate(zip(prompts, responses)):
        pred = logits[i, len(p) - 1 : len(p) - 1 + len(r)].float()  # (|r|, V): position t predicts token t + 1
        lp = -F.cross_entropy(pred, ids[i, len(p) : len(p) + len(r)].to(device), reduction="none")
        rows.append(F.pad(lp, (0, mask.shape[1] - len(r))))
    return torch.stack(rows), mask.to(device)


CLIP_STATS = ("clip_frac", "clip_frac_lower", "ratio_out_frac")  # token fractions a loss reports (see composite_loss)


def composite_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    n_tokens: int | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    agg: str = "token-mean",
    n_sequences: int | None = None,
    clip_ratio_c: float | None = 3.0,
) -> tuple[torch.Tensor, dict]:
    """Clipped surrogate aggregated by ``agg`` (:data:`LOSS_AGGS`). ``n_tokens`` / ``n_sequences``: the whole
    mini-batch's token / sequence count when it is split into micro-batches (default: this batch's).

    ``clip_ratio_c``: dual clip (Ye et al. 2020, verl's ``clip_ratio_c``, default 3 as verl's): a negative-advantage
    token's loss is capped at ``−A·c``, so a ratio far above 1 cannot blow it up; None turns it off. Returns the loss
    and, as fractions of the batch's tokens, verl's definitions: ``clip_frac`` (``pg_clipfrac``: the clipped term
    binds), ``clip_frac_lower`` (``pg_clipfrac_lower``: the dual clip binds), and ``ratio_out_frac`` (the ratio lies
    outside ``[1 − clip_low, 1 + clip_high]``, bsb's earlier ``clip_frac``)."""
    if agg not in LOSS_AGGS:
        raise ValueError(f"loss aggregation must be one of {', '.join(LOSS_AGGS)}, got {agg!r}")
    if clip_ratio_c is not None and not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (or None: no dual clip), got {clip_ratio_c}")
    m = mask.float()
    ratio = torch.exp((logp - old_logp).clamp(-20.0, 20.0))  # as verl: an overflowing ratio would make NaN grads
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    # verl's terms: pg_losses1 = −A·r, pg_losses2 = −A·clip(r); the loss is their max, then the dual clip
    loss1, loss2 = -adv * ratio, -adv * clipped
    token_loss = torch.maximum(loss1, loss2)
    lower = torch.zeros_like(token_loss, dtype=torch.bool)
    if clip_ratio_c is not None:
        cap = -adv * clip_ratio_c
        lower = (adv < 0) & (token_loss > cap)
        token_loss = torch.where(adv < 0, torch.minimum(token_loss, cap), token_loss)
    token_loss = token_loss * m  # (B, R)
    if agg == "token-mean":
        loss = token_loss.sum() / (n_tokens if n_tokens is not None else max(1, int(mask.sum())))
    else:
        per_seq = token_loss.sum(-1)  # (B,)
        if agg == "seq-mean-token-mean":
            per_seq = per_seq / m.sum(-1).clamp(min=1.0)
        loss = per_seq.sum() / (n_sequences if n_sequences is not None else logp.shape[0])
    count = max(1.0, m.sum().item())
    fracs = torch.stack([(loss2 > loss1).float(), lower.float(), ((ratio - clipped).abs() > 0).float()])
    stats = ((fracs * m).sum((1, 2)) / count).tolist()  # one host sync
    return loss, dict(zip(CLIP_STATS, stats))


def flat_loss(
    logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, n_sequences: int | None = None
) -> tuple[torch.Tensor, dict]:
    """Sequence-summed weighted NLL averaged over ``n_sequences`` (default: the rows given); nothing is clipped."""
    g = n_sequences if n_sequences is not None else logp.shape[0]
    return -((adv * logp) * mask.float()).sum() / g, dict.fromkeys(CLIP_STATS, 0.0)


def zero_grad_step(optimizer: torch.optim.Optimizer) -> None:
    """The optimizer step of a homogeneous group without its backward pass."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    optimizer.step()


def _a_loss(obj) -> str:
    return "" if callable(obj) and not isinstance(obj, type) else "not a loss function"


# A loss is ``fn(logp, old_logp, adv, mask, *, n_tokens, n_seqs, clip_low, clip_high, clip_ratio_c, agg) ->
# (loss, info)`` with ``info["clip_frac"]`` (and any of CLIP_STATS it has: a missing one logs 0); one of your own
# registers with ``@LOSSES.register("name")`` and takes ``**options``. A loss that takes ratios against the rollout
# policy sets ``fn.needs_old_logp = True``: with several mini-batches a step, the trainer then records the rollout
# policy's log-probs before the first optimizer step moves it.
LOSSES: Registry = Registry("loss", _a_loss, noun="function")


@LOSSES.register("composite", "PPO clip, token-mean")
def _composite(logp, old_logp, adv, mask, *, n_tokens, n_seqs, clip_low, clip_high, agg, clip_ratio_c=3.0, **_):
    return composite_loss(logp, old_logp, adv, mask, n_tokens, clip_low, clip_high, agg, n_seqs, clip_ratio_c)


_composite.needs_old_logp = True


@LOSSES.register("flat", "sequence-summed log-probs, [TwoStage]")
def _flat(logp, old_logp, adv, mask, *, n_seqs, **_):
    return flat_loss(logp, adv, mask, n_sequences=n_seqs)
