"""The packed prefix-shared forward: every candidate's belief read from one pass over the chain.

One sequence holds ``[prefix ; suffix_1 ; … ; suffix_C]``. ``prefix`` is the prompt plus the chain, and each
``suffix_j`` is the elicitation suffix, plus the teacher-forced committed answer when Lens-Shift needs it.
Suffix j gets position ids starting at its cut ``t_j``. Its attention mask lets it see ``prefix[:t_j]`` and
itself causally, and nothing else, so each suffix reads exactly what a separate forward of
``prefix[:t_j] + suffix_j`` would (the paper's per-candidate re-forward, App. B, :func:`naive_reads`). That
costs T + C·(E + n) token-forwards instead of Σ_j (t_j + E + n).

The mask is an additive float mask (0 / finfo.min): with eager attention a boolean 4D mask is silently wrong
in transformers 5.x. Only the read positions reach the LM head (``logits_to_keep``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bsb.engine.hf_model import ResidualCapture, check_supported, lens_parts


@dataclass
class Reads:
    """Belief reads of C candidate cuts of one chain."""

    read_logits: torch.Tensor  # (C, V) final-layer logits at each suffix's last token (predicts answer token 1)
    answer_hidden: torch.Tensor | None  # (layers, C, n, d) residual stream predicting each answer token
    answer_logits: torch.Tensor | None  # (C, n, V) final-layer logits predicting each answer token
    token_forwards: int  # tokens the model processed for these reads


def _as_ids(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.long).reshape(-1)


def _check(prefix: torch.Tensor, cuts: list[int], suffix: torch.Tensor) -> None:
    if prefix.numel() == 0:
        raise ValueError("prefix is empty: pass the prompt and chain token ids")
    if suffix.numel() == 0:
        raise ValueError("suffix is empty: the elicitation suffix needs at least one token")
    if not cuts:
        raise ValueError("cuts is empty: pass at least one candidate boundary")
    if any(not 1 <= t <= prefix.numel() for t in cuts):
        raise ValueError(f"every cut must be in [1, {prefix.numel()}] (a position in prefix), got {cuts}")


def packed_reads(
    model,
    prefix,
    cuts: list[int],
    suffix,
    answer=None,
    with_hidden: bool = False,
    max_tokens: int | None = None,
) -> Reads:
    """Belief reads at every cut from packed forwards (one, or more when ``max_tokens`` splits the suffixes).

    Args:
        model: a Hugging Face causal LM of a supported family (:mod:`bsb.engine.hf_model`).
        prefix: (S,) token ids, prompt + chain.
        cuts: C positions in ``prefix``; suffix j sees ``prefix[:cuts[j]]``.
        suffix: (E,) elicitation suffix ids.
        answer: (n,) committed answer ids to teacher-force after the suffix (Lens-Shift), or None.
        with_hidden: also return every layer's residual stream at the answer-predicting positions.
        max_tokens: cap on one packed sequence's length; the suffixes are split into groups that fit (each
            group re-forwards the prefix). None: one pass.
    """
    check_supported(model)
    prefix, suffix = _as_ids(prefix), _as_ids(suffix)
    answer = _as_ids(answer) if answer is not None else None
    cuts = [int(t) for t in cuts]
    _check(prefix, cuts, suffix)
    seg = suffix if answer is None else torch.cat([suffix, answer])
    if with_hidden and answer is None:
        raise ValueError("with_hidden needs the committed answer (Lens-Shift reads the teacher-forced answer)")
    per_group = len(cuts)
    if max_tokens is not None:
        room = max_tokens - prefix.numel()
        if room < seg.numel():
            raise ValueError(
                f"max_tokens={max_tokens} cannot hold the prefix ({prefix.numel()}) plus one suffix ({seg.numel()})"
            )
        per_group = max(1, room // seg.numel())
    parts = [
        _packed_group(model, prefix, cuts[i : i + per_group], suffix, answer, with_hidden)
        for i in range(0, len(cuts), per_group)
    ]
    return _concat(parts)


def packed_reads_many(model, chains, suffix, max_tokens: int = 1024) -> list[Reads]:
    """Probe reads (no answer) of several chains ``[(prefix, cuts), ...]`` from grouped packed forwards: consecutive
    chains share one sequence (each chain's block sees only itself: a block-diagonal mask, positions restarting per
    chain) until ``max_tokens``; a chain longer than that alone is its own group. One forward and one host sync per
    group instead of per chain; the reads equal :func:`packed_reads` of each chain (tested)."""
    check_supported(model)
    suffix = _as_ids(suffix)
    blocks = []
    for prefix, cuts in chains:
        prefix, cuts = _as_ids(prefix), [int(t) for t in cuts]
        _check(prefix, cuts, suffix)
        blocks.append((prefix, cuts, None))
    out, group, size = [], [], 0
    for block in blocks:
        q = block[0].numel() + len(block[1]) * suffix.numel()
        if group and size + q > max_tokens:
            out += _packed_blocks(model, group, suffix, False)
            group, size = [], 0
        group.append(block)
        size += q
    if group:
        out += _packed_blocks(model, group, suffix, False)
    return out


def _packed_group(model, prefix, cuts, suffix, answer, with_hidden) -> Reads:
    return _packed_blocks(model, [(prefix, cuts, answer)], suffix, with_hidden)[0]


def _packed_blocks(model, blocks, suffix, with_hidden) -> list[Reads]:
    """One packed forward over ``blocks`` of ``(prefix, cuts, answer)``, each block ``[prefix ; suffix_1 ; …]`` as in
    the module docstring, blocks side by side in one sequence and blind to each other."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    e = suffix.numel()
    ids, pos, allowed, reads, answers, shapes = [], [], [], [], [], []
    offset = 0
    for prefix, cuts, answer in blocks:
        s, n, c = prefix.numel(), 0 if answer is None else answer.numel(), len(cuts)
        w = e + n  # tokens per suffix segment
        q = s + c * w
        seg = suffix if answer is None else torch.cat([suffix, answer])
        ids.append(torch.cat([prefix, seg.repeat(c)]))
        # Built on the model's device, without a Python loop over the Q×Q mask.
        cut = torch.tensor(cuts, device=device)  # (C,)
        offs = torch.arange(w, device=device)
        pos.append(torch.cat([torch.arange(s, device=device), (cut[:, None] + offs[None, :]).reshape(-1)]))  # (Q,)
        # allowed[q, k]: the prefix is causal; segment j sees prefix[:cut_j] and its own earlier tokens.
        qi = torch.arange(q, device=device)
        which = torch.where(qi < s, -1, (qi - s) // w)  # (Q,) segment of each position (-1: the prefix)
        causal = qi[:, None] >= qi[None, :]
        same_seg = (which[:, None] == which[None, :]) & causal  # the prefix causally, a segment within itself
        sees_prefix = (which[:, None] >= 0) & (qi[None, :] < s) & (qi[None, :] < cut[which.clamp(min=0)][:, None])
        allowed.append(same_seg | sees_prefix)  # (Q, Q)
        read = offset + s + torch.arange(c, device=device) * w + e - 1  # (C,) last suffix token of each segment
        reads.append(read)
        answers.append((read[:, None] + torch.arange(n, device=device)[None, :]).reshape(-1))  # (C·n,)
        shapes.append((c, n, q))
        offset += q
    ids = torch.cat(ids).to(device)  # (Q,)
    pos = torch.cat(pos)
    mask = torch.zeros(offset, offset, dtype=dtype, device=device).masked_fill(
        ~torch.block_diag(*allowed), torch.finfo(dtype).min
    )[None, None]  # (1, 1, Q, Q): additive (a boolean 4D mask is wrong with eager attention)
    ans_pos = torch.cat(answers)
    keep = torch.cat([*reads, ans_pos])
    with torch.no_grad():
        if with_hidden:
            with ResidualCapture(lens_parts(model).layers, ans_pos) as cap:
                out = model(ids[None], attention_mask=mask, position_ids=pos[None], logits_to_keep=keep)
            hidden = cap.stacked()  # (layers, Σ C·n, d)
        else:
            out = model(ids[None], attention_mask=mask, position_ids=pos[None], logits_to_keep=keep)
            hidden = None
    logits = out.logits[0]  # (len(keep), V)
    total_c = sum(c for c, _, _ in shapes)
    results, r0, a0 = [], 0, total_c
    for c, n, q in shapes:
        results.append(
            Reads(
                read_logits=logits[r0 : r0 + c],
                answer_hidden=hidden[:, a0 - total_c : a0 - total_c + c * n].reshape(-1, c, n, hidden.shape[-1])
                if with_hidden
                else None,
                answer_logits=logits[a0 : a0 + c * n].reshape(c, n, -1) if n else None,
                token_forwards=q,
            )
        )
        r0, a0 = r0 + c, a0 + c * n
    return results


def _concat(parts: list[Reads]) -> Reads:
    if len(parts) == 1:
        return parts[0]
    cat = lambda xs, dim: None if xs[0] is None else torch.cat(xs, dim)  # noqa: E731
    return Reads(
        read_logits=cat([p.read_logits for p in parts], 0),
        answer_hidden=cat([p.answer_hidden for p in parts], 1),
        answer_logits=cat([p.answer_logits for p in parts], 0),
        token_forwards=sum(p.token_forwards for p in parts),
    )


def naive_reads(model, prefix, cuts: list[int], suffix, answer=None, with_hidden: bool = False) -> Reads:
    """The paper's per-candidate re-forward (App. B): one separate forward of ``prefix[:t] + suffix (+ answer)``
    per cut. The specification the packed forward is tested against; works for any causal LM (the hidden
    states need a supported family)."""
    prefix, suffix = _as_ids(prefix), _as_ids(suffix)
    answer = _as_ids(answer) if answer is not None else None
    cuts = [int(t) for t in cuts]
    _check(prefix, cuts, suffix)
    if with_hidden and answer is None:
        raise ValueError("with_hidden needs the committed answer (Lens-Shift reads the teacher-forced answer)")
    device = next(model.parameters()).device
    e, n = suffix.numel(), 0 if answer is None else answer.numel()
    reads, hiddens, ans_logits, forwards = [], [], [], 0
    for t in cuts:
        ids = torch.cat([prefix[:t], suffix] + ([answer] if n else [])).to(device)
        forwards += ids.numel()
        read = t + e - 1
        positions = torch.arange(read, read + n)
        with torch.no_grad():
            if with_hidden:
                with ResidualCapture(lens_parts(model).layers, positions.to(device)) as cap:
                    logits = model(ids[None]).logits[0]
                hiddens.append(cap.stacked())  # (layers, n, d)
            else:
                logits = model(ids[None]).logits[0]
        reads.append(logits[read])
        if n:
            ans_logits.append(logits[read : read + n])
    return Reads(
        read_logits=torch.stack(reads),
        answer_hidden=torch.stack(hiddens, 1) if with_hidden else None,
        answer_logits=torch.stack(ans_logits) if n else None,
        token_forwards=forwards,
    )
