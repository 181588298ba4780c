"""The packed prefix-shared forward: every candidate's belief read from one pass over the chain.

One sequence holds ``[prefix ; suffix_1 ; … ; suffix_C]``. ``prefix`` is the prompt plus the chain, and each
``suffix_j`` is the elicitation suffix, plus the teacher-forced committed answer but its last token when Lens-Shift
needs it (the suffix's last position predicts the first answer token, and the last answer token predicts nothing
read: E + n − 1 tokens a segment).
Suffix j gets position ids starting at its cut ``t_j``. Its attention mask lets it see ``prefix[:t_j]`` and
itself causally, and nothing else, so each suffix reads exactly what a separate forward of
``prefix[:t_j] + suffix_j`` would (the paper's per-candidate re-forward, App. B, :func:`naive_reads`). No suffix
sees past the last cut, so the prefix is forwarded up to it: max_j t_j + C·(E + n − 1) token-forwards instead of
Σ_j (t_j + E + n).

When the chain was just generated in this process, its keys and values are already there (:class:`KeptKV`, what a
batched generation leaves): :func:`cached_reads` computes only the suffixes, C·(E + n − 1) token-forwards, each suffix
attending to the kept ``prefix[:t_j]`` and to itself (the floor of the reads).

The mask is an additive float mask (0 / finfo.min): with eager attention a boolean 4D mask is silently wrong
in transformers 5.x. Only the read positions reach the LM head (``logits_to_keep``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bsb.engine.families import ATTENTION_TYPES, layer_kinds
from bsb.engine.hf_model import ResidualCapture, check_supported, decoder_layers, head_logits


@dataclass
class CutReads:
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
) -> CutReads:
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
    seg = _segment(suffix, answer)
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


def packed_reads_many(model, chains, suffix, max_tokens: int = 1024, with_hidden: bool = False) -> list[CutReads]:
    """Reads of several chains ``[(prefix, cuts), ...]`` (Probe-JS) or ``[(prefix, cuts, answer), ...]`` (Lens-Shift,
    with ``with_hidden``) from grouped packed forwards: consecutive chains share one sequence (each chain's block sees
    only itself, positions restarting per chain) until ``max_tokens``; a chain longer than that alone is its own
    group. Consecutive chains that begin alike (one prompt's chains) forward their common prefix once. One forward
    and one host sync per group instead of per chain; the reads equal :func:`naive_reads` of each chain (tested)."""
    check_supported(model)
    blocks = _blocks(chains, suffix, with_hidden)
    suffix = _as_ids(suffix)
    out, group, size = [], [], 0
    for block in blocks:
        # the prefix up to the last cut, less what it shares with the group's run leader, then the suffixes
        shared = _sharing([*group, block])[-1][1] if group else 0
        q = max(block[1]) - shared + len(block[1]) * _width(suffix, block[2])
        if group and size + q > max_tokens:
            out += _packed_blocks(model, group, suffix, with_hidden)
            group, size, q = [], 0, q + shared
        group.append(block)
        size += q
    if group:
        out += _packed_blocks(model, group, suffix, with_hidden)
    return out


def _segment(suffix: torch.Tensor, answer: torch.Tensor | None) -> torch.Tensor:
    """What a read forwards after its cut: the suffix, then the answer but its last token (the suffix's last position
    predicts the first answer token, answer token i predicts token i + 1: the last predicts nothing read)."""
    return suffix if answer is None else torch.cat([suffix, answer[:-1]])


def _width(suffix: torch.Tensor, answer: torch.Tensor | None) -> int:
    return suffix.numel() + (0 if answer is None else answer.numel() - 1)


def _blocks(chains, suffix, with_hidden: bool) -> list[tuple[torch.Tensor, list[int], torch.Tensor | None]]:
    """Each chain as ``(prefix, cuts, answer)`` tensors, checked."""
    suffix = _as_ids(suffix)
    out = []
    for chain in chains:
        prefix, cuts = _as_ids(chain[0]), [int(t) for t in chain[1]]
        answer = _as_ids(chain[2]) if len(chain) > 2 and chain[2] is not None else None
        _check(prefix, cuts, suffix)
        if with_hidden and answer is None:
            raise ValueError("with_hidden needs the committed answer (Lens-Shift reads the teacher-forced answer)")
        if answer is not None and answer.numel() == 0:
            raise ValueError("answer is empty: pass the committed answer's token ids, or None")
        out.append((prefix, cuts, answer))
    return out


@dataclass
class KeptKV:
    """The keys and values a batched left-padded generation left: per decoder layer ``(keys, values)`` of shape
    (B, heads, W, head_dim), and row b's first real token at column ``starts[b]``."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    starts: list[int]

    @property
    def width(self) -> int:
        return self.layers[0][0].shape[2]

    def holds(self, row: int, cuts: list[int]) -> bool:
        """Whether row ``row`` has the keys of every position a suffix at ``cuts`` attends to."""
        return self.starts[row] + max(cuts) <= self.width


def cached_reads(
    model, kv: KeptKV, chains, suffix, with_hidden: bool = False, max_tokens: int = 4096
) -> list[CutReads]:
    """Reads of several chains ``[(row, prefix, cuts[, answer]), ...]`` whose keys and values ``kv`` holds at row
    ``row``: only the suffixes are forwarded (C·(E + n − 1) token-forwards a chain), suffix j attending to the kept
    ``prefix[:cuts[j]]`` and to itself, at positions from ``cuts[j]``. Chains are batched (one row each) in forwards
    of at most ``max_tokens`` key columns in all; the reads equal :func:`naive_reads` (tested)."""
    check_supported(model)
    blocks = _blocks([c[1:] for c in chains], suffix, with_hidden)
    rows = [int(c[0]) for c in chains]
    for row, (_, cuts, _) in zip(rows, blocks):
        if not 0 <= row < len(kv.starts) or not kv.holds(row, cuts):
            raise ValueError(f"row {row} of the kept KV does not hold every position cuts {cuts} attend to")
    suffix = _as_ids(suffix)
    out, group, size = [], [], 0
    for row, block in zip(rows, blocks):
        q = kv.width + len(block[1]) * _width(suffix, block[2])
        if group and size + q > max_tokens:
            out += _cached_group(model, kv, group, suffix, with_hidden)
            group, size = [], 0
        group.append((row, block))
        size += q
    if group:
        out += _cached_group(model, kv, group, suffix, with_hidden)
    return out


def _cached_group(model, kv: KeptKV, group, suffix, with_hidden) -> list[CutReads]:
    """One batched forward of ``group`` (``(row, (prefix, cuts, answer))``): row i's segments in one padded query
    row, its kept keys and values as the past."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    e, w_kv = suffix.numel(), kv.width
    widths = [_width(suffix, answer) for _, (_, _, answer) in group]
    q_len = max(len(cuts) * w for (_, (_, cuts, _)), w in zip(group, widths))
    b = len(group)
    ids = torch.zeros(b, q_len, dtype=torch.long)
    pos = torch.zeros(b, q_len, dtype=torch.long)
    allowed = torch.zeros(b, q_len, w_kv + q_len, dtype=torch.bool)
    qi = torch.arange(q_len)
    reads, answers, shapes = [], [], []
    for i, ((row, (_, cuts, answer)), w) in enumerate(zip(group, widths)):
        c, n = len(cuts), 0 if answer is None else answer.numel()
        seg = _segment(suffix, answer)
        q = c * w
        ids[i, :q] = seg.repeat(c)
        cut = torch.tensor(cuts)
        pos[i, :q] = (cut[:, None] + torch.arange(w)[None, :]).reshape(-1)
        which = torch.where(qi < q, qi // w, -1 - qi)  # each query's segment (padding: a segment of its own)
        start = kv.starts[row]
        col = torch.arange(w_kv)
        allowed[i, :q, :w_kv] = (col[None, :] >= start) & (col[None, :] < start + cut[which[:q]][:, None])
        allowed[i, :, w_kv:] = (which[:, None] == which[None, :]) & (qi[:, None] >= qi[None, :])
        read = torch.arange(c) * w + e - 1  # (C,) last suffix token of each segment
        reads.append(torch.stack([torch.full_like(read, i), read], 1))
        ans = (read[:, None] + torch.arange(n)[None, :]).reshape(-1)
        answers.append(torch.stack([torch.full_like(ans, i), ans], 1))
        shapes.append((c, n, q))
    index = torch.tensor([row for row, _ in group], device=device)
    past = DynamicCache(ddp_cache_data=[(k.index_select(0, index), v.index_select(0, index)) for k, v in kv.layers])
    mask = torch.zeros(b, 1, q_len, w_kv + q_len, dtype=dtype, device=device).masked_fill(
        ~allowed[:, None].to(device), torch.finfo(dtype).min
    )
    read_at = torch.cat(reads).to(device)  # (ΣC, 2): (batch row, query position)
    ans_at = torch.cat(answers).to(device)  # (ΣC·n, 2)
    at = torch.cat([read_at, ans_at])
    kw = dict(attention_mask=mask, position_ids=pos.to(device), past_key_values=past, use_cache=True)
    with torch.no_grad():
        if with_hidden:
            with ResidualCapture(decoder_layers(model), ans_at[:, 1], ans_at[:, 0]) as cap:
                hidden = model.model(ids.to(device), **kw).last_hidden_state
            layer_hidden = cap.stacked()  # (layers, ΣC·n, d)
        else:
            hidden = model.model(ids.to(device), **kw).last_hidden_state
        logits = head_logits(model, hidden[at[:, 0], at[:, 1]])  # (ΣC + ΣC·n, V)
    return _split(logits, layer_hidden if with_hidden else None, shapes)


def _packed_group(model, prefix, cuts, suffix, answer, with_hidden) -> CutReads:
    return _packed_blocks(model, [(prefix, cuts, answer)], suffix, with_hidden)[0]


def _common(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the common prefix of two id vectors."""
    m = min(a.numel(), b.numel())
    return int((a[:m] == b[:m]).long().cumprod(0).sum()) if m else 0


def _sharing(blocks) -> list[tuple[int, int]]:
    """Per block of one group, ``(leader, shared)``: a block shares its first ``shared`` prefix tokens with the group's
    latest leader (the M chains of one prompt share the prompt); a block that shares none leads its own run."""
    out, leader = [], 0
    for i, (prefix, cuts, _) in enumerate(blocks):
        shared = _common(blocks[leader][0][: max(blocks[leader][1])], prefix[: max(cuts)]) if i else 0
        if shared == 0:
            leader = i
        out.append((leader, shared))
    return out


def _packed_blocks(model, blocks, suffix, with_hidden) -> list[CutReads]:
    """One packed forward over ``blocks`` of ``(prefix, cuts, answer)``, each block ``[prefix ; suffix_1 ; …]`` as in
    the module docstring, side by side in one sequence and blind to each other, except that a block whose prefix
    begins like its run leader's (:func:`_sharing`) leaves those tokens out and attends to the leader's instead."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    e = suffix.numel()
    # per packed token: its block, segment (-1: a prefix token), position, how many context positions it sees, and
    # its block's run leader and shared length
    ids, chain, seg, pos, limit, run, shared_of, reads, answers, shapes = [], [], [], [], [], [], [], [], [], []
    offset, segments = 0, 0
    for b, ((prefix, cuts, answer), (leader, shared)) in enumerate(zip(blocks, _sharing(blocks))):
        prefix = prefix[: max(cuts)]  # no suffix sees beyond its cut
        s, n, c = prefix.numel(), 0 if answer is None else answer.numel(), len(cuts)
        body = _segment(suffix, answer)
        w = body.numel()  # tokens per suffix segment
        own = s - shared  # prefix tokens this block forwards itself
        q = own + c * w
        ids.append(torch.cat([prefix[shared:], body.repeat(c)]))
        cut = torch.tensor(cuts)
        p_pos = torch.arange(shared, s)
        pos.append(torch.cat([p_pos, (cut[:, None] + torch.arange(w)[None, :]).reshape(-1)]))
        limit.append(torch.cat([p_pos + 1, cut.repeat_interleave(w)]))  # a prefix token sees itself causally
        seg.append(torch.cat([torch.full((own,), -1), segments + torch.arange(c).repeat_interleave(w)]))
        chain.append(torch.full((q,), b))
        run.append(torch.full((q,), leader))
        shared_of.append(torch.full((q,), shared))
        read = offset + own + torch.arange(c) * w + e - 1  # (C,) last suffix token of each segment
        reads.append(read)
        answers.append((read[:, None] + torch.arange(n)[None, :]).reshape(-1))  # (C·n,)
        shapes.append((c, n, q))
        offset, segments = offset + q, segments + c
    ids, chain, seg, pos, limit, run, shared_of = (
        torch.cat(x).to(device) for x in (ids, chain, seg, pos, limit, run, shared_of)
    )
    qi = torch.arange(offset, device=device)
    # allowed[q, k]: a prefix key when it is before q's limit and q's own block's, or its leader's shared, token;
    # a suffix key when it is an earlier token of q's own segment
    prefix_key = (pos[None, :] < limit[:, None]) & (
        (chain[None, :] == chain[:, None]) | ((chain[None, :] == run[:, None]) & (pos[None, :] < shared_of[:, None]))
    )
    suffix_key = (seg[None, :] == seg[:, None]) & (qi[None, :] <= qi[:, None])
    allowed = torch.where(seg[None, :] < 0, prefix_key, suffix_key)  # (Q, Q)
    mask = layer_masks(model, allowed, pos, dtype)
    ans_pos = torch.cat(answers).to(device)
    keep = torch.cat([torch.cat(reads).to(device), ans_pos])
    with torch.no_grad():
        if with_hidden:
            with ResidualCapture(decoder_layers(model), ans_pos) as cap:
                out = model(ids[None], attention_mask=mask, position_ids=pos[None], logits_to_keep=keep)
            hidden = cap.stacked()  # (layers, Σ C·n, d)
        else:
            out = model(ids[None], attention_mask=mask, position_ids=pos[None], logits_to_keep=keep)
            hidden = None
    return _split(out.logits[0], hidden, shapes)


def layer_masks(model, allowed: torch.Tensor, pos: torch.Tensor, dtype: torch.dtype):
    """The additive (1, 1, Q, Q) mask of ``allowed`` (a boolean 4D mask is wrong with eager attention), for the layer
    types of the model's family (:func:`bsb.engine.families.layer_kinds`): a sliding layer (OLMo-3, Gemma 3, Mistral
    and Phi-3 with a window, Qwen with ``use_sliding_window``) sees a key only within ``sliding_window`` positions of
    its query's (by position id, as separate forwards see it), whatever the packing put between them. Layers of two
    types get the dict the model's forward takes, one mask per type; layers of one type one mask."""
    config = model.config
    kinds = set(layer_kinds(config))
    unknown = kinds - set(ATTENTION_TYPES)
    if unknown:
        raise ValueError(
            f"{type(model).__name__} has {', '.join(sorted(unknown))} layers, which the packed forward cannot mask; "
            f"it masks {' and '.join(ATTENTION_TYPES)} layers (read such a model per cut or with state, "
            "bsb.engine.families.plan)"
        )

    def additive(ok: torch.Tensor) -> torch.Tensor:
        return torch.zeros(ok.shape, dtype=dtype, device=ok.device).masked_fill(~ok, torch.finfo(dtype).min)[None, None]

    masks = {}
    for kind in kinds:
        if kind == "sliding_attention":
            near = (pos[:, None] - pos[None, :]) < config.sliding_window  # (Q, Q): HF's window, kv > q - W
            masks[kind] = additive(allowed & near)
        else:
            masks[kind] = additive(allowed)
    return masks.popitem()[1] if len(masks) == 1 else masks  # a 4D mask is taken as is by every layer


def _split(logits: torch.Tensor, hidden: torch.Tensor | None, shapes) -> list[CutReads]:
    """Per chain :class:`CutReads` from one forward's rows: every chain's C read rows first, then every chain's C·n
    answer rows; ``hidden`` (layers, ΣC·n, d) in the answer rows' order; ``shapes``: each chain's (C, n, tokens)."""
    total_c = sum(c for c, _, _ in shapes)
    results, r0, a0 = [], 0, 0
    for c, n, q in shapes:
        results.append(
            CutReads(
                read_logits=logits[r0 : r0 + c],
                answer_hidden=hidden[:, a0 : a0 + c * n].reshape(-1, c, n, hidden.shape[-1])
                if hidden is not None
                else None,
                answer_logits=logits[total_c + a0 : total_c + a0 + c * n].reshape(c, n, -1) if n else None,
                token_forwards=q,
            )
        )
        r0, a0 = r0 + c, a0 + c * n
    return results


def _concat(parts: list[CutReads]) -> CutReads:
    if len(parts) == 1:
        return parts[0]
    cat = lambda xs, dim: None if xs[0] is None else torch.cat(xs, dim)  # noqa: E731
    return CutReads(
        read_logits=cat([p.read_logits for p in parts], 0),
        answer_hidden=cat([p.answer_hidden for p in parts], 1),
        answer_logits=cat([p.answer_logits for p in parts], 0),
        token_forwards=sum(p.token_forwards for p in parts),
    )


def naive_reads(model, prefix, cuts: list[int], suffix, answer=None, with_hidden: bool = False) -> CutReads:
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
                with ResidualCapture(decoder_layers(model), positions.to(device)) as cap:
                    logits = model(ids[None]).logits[0]
                hiddens.append(cap.stacked())  # (layers, n, d)
            else:
                logits = model(ids[None]).logits[0]
        reads.append(logits[read])
        if n:
            ans_logits.append(logits[read : read + n])
    return CutReads(
        read_logits=torch.stack(reads),
        answer_hidden=torch.stack(hiddens, 1) if with_hidden else None,
        answer_logits=torch.stack(ans_logits) if n else None,
        token_forwards=forwards,
    )
