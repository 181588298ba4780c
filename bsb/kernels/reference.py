"""Plain-torch reference implementations: the specification of every number bsb computes.

Every op validates its input with :mod:`bsb.kernels.checks`, computes in float32 whatever the input dtype (float64
for float64 input) and returns float32. The float64 path is the exact value: the fused implementations (C++, Triton)
are tested against the reference run on float64 copies of their inputs, because a float32 sum over a wide row is not
one number (over a 262,144-token row torch's own float32 entropy moves by 2.5e-4 nats between its AVX2 and AVX-512
kernels). Benchmarks compare with the float32 path, the one that serves when no fast path is built.
Equation numbers refer to "Fork Where the Model Changes Its Mind: Belief-Shift Branching for Tree-Structured RL".

Conventions shared by all implementations:

* ``-inf`` logits are legal (masked tokens). A token whose probability is 0 (log-prob ``-inf``) is not part of
  a support.
* Top-k ties are broken towards the lower token id, so that every implementation returns the same ids.
* Scores are fork-before attributed: the change between boundary ``j`` and ``j+1`` of a chain lands on ``j``;
  the last boundary of every chain gets NaN.
"""

from __future__ import annotations

import math

import torch

from bsb.kernels.checks import (
    check_chain_index,
    check_float,
    check_k,
    check_lens_inputs,
    check_logits,
    check_tokens,
    check_topk_pair,
    raise_if_lens_nonfinite,
)

__all__ = [
    "topk_logprobs",
    "floored_js",
    "probe_js",
    "probe_js_topk",
    "lens_logprobs",
    "lens_readouts",
    "surprisal_entropy",
    "logit_margin",
    "linear_token_logprobs",
]

_NEG_INF = float("-inf")


def _acc(x: torch.Tensor) -> torch.Tensor:
    """``x`` in the accumulation dtype: float64 stays float64 (the exact spec), everything else is float32."""
    return x if x.dtype == torch.float64 else x.float()


def topk_logprobs(logits: torch.Tensor, k: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k log-probabilities of a full-vocabulary softmax.

    ``logp = log_softmax(logits)`` over the last dimension (V), then the k largest, sorted descending, ties to the
    lower token id. This is the belief p_t of Probe-JS (Sec. 3.2) when ``logits`` is the read after the suffix.

    Args:
        logits: (..., V) any float dtype; ``-inf`` marks a masked token; NaN / +inf are rejected.
        k: 1 <= k <= V.
    Returns:
        ``(logp, idx)``: (..., k) float32 log-probs and (..., k) int64 token ids.
    """
    check_logits("logits", logits)
    check_k(k, logits.shape[-1])
    x = _acc(logits)
    # The ranking is the logits' own (exact in any dtype; a log-softmax can round two close logits to one value). A
    # stable descending sort keeps equal values in index order: the tie rule every implementation follows.
    idx = torch.sort(x, dim=-1, descending=True, stable=True).indices[..., :k]  # (..., k)
    logp = torch.log_softmax(x, dim=-1).gather(-1, idx)
    return logp.float().contiguous(), idx.contiguous()


def floored_js(logp_a: torch.Tensor, idx_a: torch.Tensor, logp_b: torch.Tensor, idx_b: torch.Tensor) -> torch.Tensor:
    """Floored Jensen–Shannon divergence between two top-k beliefs (Eq. 2 then Eq. 1), in nats.

    With supports S_a, S_b (the entries whose log-prob is finite) and S = S_a ∪ S_b, each side keeps its own
    probabilities on its support and puts ½·min of its own support probabilities on every token of S it does not
    have (Eq. 2); both are renormalised over S and ``JS = ½ KL(p̃_a‖m) + ½ KL(p̃_b‖m)``, ``m = (p̃_a + p̃_b)/2``
    (Eq. 1). The result lies in [0, ln 2].

    Args:
        logp_a, idx_a: (..., k_a) log-probs (any float dtype, <= 0, -inf = not in the support) and token ids.
        logp_b, idx_b: (..., k_b) the same for the other belief; leading dimensions equal to side a.
    Returns:
        (...) float32.
    """
    check_topk_pair(logp_a, idx_a, logp_b, idx_b)
    lead = logp_a.shape[:-1]
    la = _acc(logp_a).reshape(-1, logp_a.shape[-1])  # (R, ka)
    lb = _acc(logp_b).reshape(-1, logp_b.shape[-1])  # (R, kb)
    ia = idx_a.to(torch.int64).reshape(la.shape)
    ib = idx_b.to(torch.int64).reshape(lb.shape)
    va, vb = la > _NEG_INF, lb > _NEG_INF

    # Renormalisation over S cancels any common factor of a side, so scale by exp(-max) to keep the smallest
    # support probabilities (which set the floor) from underflowing in float32.
    pa = torch.exp(la - la.max(-1, keepdim=True).values)  # (R, ka); 0 off the support
    pb = torch.exp(lb - lb.max(-1, keepdim=True).values)
    inf = torch.tensor(float("inf"), dtype=pa.dtype)
    floor_a = 0.5 * torch.where(va, pa, inf).min(-1, keepdim=True).values  # (R, 1)
    floor_b = 0.5 * torch.where(vb, pb, inf).min(-1, keepdim=True).values

    same = (ia[:, :, None] == ib[:, None, :]) & va[:, :, None] & vb[:, None, :]  # (R, ka, kb)
    a_in_b = same.any(-1)  # (R, ka)
    b_in_a = same.any(1)  # (R, kb)
    pb_at_a = (same * pb[:, None, :]).sum(-1)  # (R, ka): ids are unique, so at most one match

    # The union S as a-entries followed by the b-entries a does not have.
    qa = torch.cat([pa, floor_a.expand_as(pb)], -1)  # (R, ka + kb)
    qb = torch.cat([torch.where(a_in_b, pb_at_a, floor_b), pb], -1)
    in_s = torch.cat([va, vb & ~b_in_a], -1)
    qa, qb = qa * in_s, qb * in_s
    qa = qa / qa.sum(-1, keepdim=True)
    qb = qb / qb.sum(-1, keepdim=True)
    m = 0.5 * (qa + qb)
    m = torch.where(m > 0, m, torch.ones_like(m))  # off S both sides are 0 and contribute 0·log 0 = 0
    js = 0.5 * (torch.xlogy(qa, qa / m) + torch.xlogy(qb, qb / m)).sum(-1)  # (R,)
    # JS is in [0, ln 2] exactly; clamping removes float rounding only (~1e-7).
    return js.clamp(0.0, math.log(2.0)).float().reshape(lead)


def _chain_pairs(chain_index: torch.Tensor, n: int) -> torch.Tensor:
    """(N-1,) bool: row i and row i+1 belong to the same chain (given a validated chain_index)."""
    ci = check_chain_index(chain_index, n)
    return ci[1:] == ci[:-1]


def probe_js(logits: torch.Tensor, chain_index: torch.Tensor, k: int = 20, defer_errors: bool = False):
    """Probe-JS scores of consecutive boundary reads (Sec. 3.2, Eq. 1-2), fork-before attributed.

    ``scores[i] = mean_l floored_js(topk(logits[i, l]), topk(logits[i+1, l]))`` when rows i and i+1 belong to
    the same chain, NaN for the last row of each chain. With L > 1 the JS is taken position by position and
    averaged over the L read positions.

    Args:
        logits: (N, V) or (N, L, V), any float dtype: the read(s) after the elicitation suffix at each boundary;
            the rows of one chain contiguous and in chain order.
        chain_index: (N,) integer chain id of each row.
        k: top-k size of the belief (K = 20 in the paper).
        defer_errors: return ``(scores, status)``. An implementation that finds the input errors on the device
            (Triton's fused kernel) leaves them there: ``status`` is a 0-d integer word with bit ``code`` set for
            each kind found (the codes of :mod:`bsb.kernels.checks`), which the caller copies with its results and
            passes to :func:`bsb.kernels.checks.raise_status` to raise the error this function raises. Every other
            implementation (this one, the C++ one, Triton's for k above its limit) raises at once: ``status`` None.
    Returns:
        (N,) float32; with ``defer_errors``, ``(scores, status)``.
    """
    check_logits("logits", logits, 2, 3)
    lg = logits if logits.ndim == 3 else logits[:, None, :]  # (N, L, V)
    logp, idx = topk_logprobs(lg, k)  # (N, L, k)
    scores = probe_js_topk(logp, idx, chain_index)
    return (scores, None) if defer_errors else scores


def probe_js_topk(logp: torch.Tensor, idx: torch.Tensor, chain_index: torch.Tensor, js=floored_js) -> torch.Tensor:
    """Probe-JS scores from beliefs already reduced to their top-k (what a black-box engine returns).

    ``scores[i] = mean_l floored_js(belief[i, l], belief[i+1, l])`` when rows i and i+1 belong to the same chain, NaN
    for the last row of each chain (fork-before). :func:`probe_js` is this after :func:`topk_logprobs`.

    Args:
        logp, idx: (N, k) or (N, L, k) log-probs and token ids of each boundary's belief, the rows of one chain
            contiguous and in chain order.
        chain_index: (N,) integer chain id of each row.
        js: the floored-JS implementation (``bsb.kernels`` passes its dispatched one).
    Returns:
        (N,) float32.
    """
    if logp.ndim not in (2, 3) or logp.shape != idx.shape:
        raise ValueError(
            f"logp and idx must both be (N, k) or (N, L, k), got {tuple(logp.shape)} and {tuple(idx.shape)}"
        )
    n = logp.shape[0]
    pairs = _chain_pairs(chain_index, n).to(logp.device)
    lp = logp if logp.ndim == 3 else logp[:, None]  # (N, L, k)
    ix = idx if idx.ndim == 3 else idx[:, None]
    scores = torch.full((n,), float("nan"), dtype=torch.float32, device=logp.device)
    if n > 1:
        d = js(lp[:-1], ix[:-1], lp[1:], ix[1:])  # (N-1, L)
        scores[:-1] = torch.where(pairs, d.mean(-1), scores[:-1])
    return scores


def lens_logprobs(
    hidden: torch.Tensor,
    norm_weight: torch.Tensor,
    unembed: torch.Tensor,
    targets: torch.Tensor,
    eps: float = 1e-6,
    norm: str = "rms",
    norm_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logit-lens log-probabilities of target tokens at every layer (Eq. 3).

    ``log P^(l)(targets[p]) = log_softmax(W_U · N(hidden[l, p]))[targets[p]]`` with the model's own final norm N
    and unembedding W_U. ``norm="rms"``: ``N(h) = h / sqrt(mean(h²) + eps) · w``; ``norm="layer"``:
    ``N(h) = (h - mean h) / sqrt(var h + eps) · w (+ b)``. Summing the result over the n answer positions of a
    boundary gives its depth profile b_t^(l).

    Args:
        hidden: (layers, P, d) residual stream after each layer at the P read positions (any float dtype).
        norm_weight: (d,) final-norm weight.
        unembed: (V, d) unembedding (lm_head) weight.
        targets: (P,) int token id to score at each position.
        eps: norm epsilon (use the model's config value).
        norm: "rms" or "layer".
        norm_bias: (d,) LayerNorm bias, only with ``norm="layer"``.
    Returns:
        (layers, P) float32.
    """
    check_lens_inputs(hidden, norm_weight, unembed, targets, eps, norm, norm_bias)
    wide = torch.float64 if torch.float64 in (hidden.dtype, norm_weight.dtype, unembed.dtype) else torch.float32
    bias = None if norm_bias is None else norm_bias.to(wide)
    x = apply_final_norm(hidden.to(wide), norm_weight.to(wide), eps, norm, bias)
    logits = x @ unembed.to(wide).T  # (layers, P, V)
    logp = torch.log_softmax(logits, dim=-1)
    tgt = targets.to(torch.int64)[None, :, None].expand(logp.shape[0], -1, 1)  # (layers, P, 1)
    out = logp.gather(-1, tgt)[..., 0].float()
    return raise_if_lens_nonfinite(out, hidden, norm_weight, unembed, norm_bias)


def apply_final_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, norm: str, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The model's final norm in float32 (shared by the reference and the chunked CPU lens)."""
    if norm == "rms":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    out = (x - mu) * torch.rsqrt(var + eps) * weight
    return out if bias is None else out + bias


def lens_readouts(profiles: torch.Tensor, eps: float = 0.1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lens-Shift change scores between consecutive boundaries of one chain (Eq. 3-4), fork-before attributed.

    With b_t the depth profile (one entry per probed layer) at boundary t:

    * shape  = ||b_{t+1} - b_t||_2                                   (Eq. 3)
    * height = |mean(b_{t+1}[deep]) - mean(b_t[deep])|, deep = the deepest ceil(layers/2) layers  (Eq. 4)
    * depth  = |l*_{t+1} - l*_t|, l*_t = min{l : |b_t[l] - b_t[last]| <= eps · (max b_t - min b_t)}  (Eq. 4),
      with layers counted 0..layers-1 in the order given.

    Args:
        profiles: (B, layers) float depth profiles of the B boundaries of one chain, in chain order.
        eps: lock-in tolerance ε (0.1 in the paper).
    Returns:
        ``(shape, height, depth)``, each (B,) float32 with NaN at the last boundary.
    """
    check_float("profiles", profiles, 2, 2)
    if not torch.isfinite(profiles).all():
        raise ValueError("profiles must be finite (a -inf log-prob means the answer token was masked)")
    if not (isinstance(eps, (int, float)) and eps >= 0):
        raise ValueError(f"eps must be a non-negative float, got {eps!r}")
    b = profiles.float()
    n_layers = b.shape[1]
    deep = b[:, n_layers - math.ceil(n_layers / 2) :].mean(-1)  # (B,)
    rng = b.max(-1, keepdim=True).values - b.min(-1, keepdim=True).values  # (B, 1)
    locked = (b - b[:, -1:]).abs() <= eps * rng  # (B, layers); the last layer always qualifies
    lstar = locked.int().argmax(-1).float()  # (B,) first qualifying layer

    def fork_before(change: torch.Tensor) -> torch.Tensor:
        return torch.cat([change, change.new_full((1,), float("nan"))])

    shape = fork_before(torch.linalg.vector_norm(b[1:] - b[:-1], dim=-1))
    height = fork_before((deep[1:] - deep[:-1]).abs())
    depth = fork_before((lstar[1:] - lstar[:-1]).abs())
    return shape, height, depth


def surprisal_entropy(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampled-token surprisal −log π(y_t) and full next-token entropy per position.

    The Entropy baseline of Sec. 3.5 (segment-mean surprisal) and TreeRL's token uncertainty read these.

    Args:
        logits: (..., V) any float dtype, -inf for masked tokens.
        tokens: (...) int, the sampled token at each position.
    Returns:
        ``(surprisal, entropy)`` (...) float32 each, in nats (surprisal is +inf for a masked token).
    """
    check_logits("logits", logits)
    check_tokens(tokens, logits.shape[:-1], logits.shape[-1])
    logp = torch.log_softmax(_acc(logits), dim=-1)
    surprisal = -logp.gather(-1, tokens.to(torch.int64)[..., None])[..., 0]
    entropy = torch.special.entr(logp.exp()).sum(-1)  # entr(0) = 0 for masked tokens
    return surprisal.float(), entropy.float()


def logit_margin(logits: torch.Tensor) -> torch.Tensor:
    """Top-1 minus top-2 raw logit per position, Δz_t of [TwoStage] §5.6 (MinMargin / FirstGap forks).

    Args:
        logits: (..., V) any float dtype, V >= 2.
    Returns:
        (...) float32, >= 0 (+inf when only one token is unmasked).
    """
    check_logits("logits", logits)
    if logits.shape[-1] < 2:
        raise ValueError(f"logits needs a vocabulary of at least 2 for a margin, got V={logits.shape[-1]}")
    top2 = _acc(logits).topk(2, dim=-1).values  # (..., 2)
    return (top2[..., 0] - top2[..., 1]).float()


def linear_token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(hidden @ weight.T) at ``targets``: the sampled tokens' training log-probs, from the full (N, V)
    logits in float32 (the specification of :mod:`bsb.kernels.linear_logprob`, which never holds them).

    Args:
        hidden: (N, d) float; weight: (V, d) float; targets: (N,) int token ids.
    Returns:
        (N,) float32, differentiable.
    """
    logits = _acc(hidden) @ _acc(weight).T  # (N, V)
    return torch.log_softmax(logits, -1).gather(-1, targets.long()[:, None])[:, 0].float()
