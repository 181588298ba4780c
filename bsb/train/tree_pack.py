"""The tree-packed log-prob pass: the update's forwards over a batch of trees, every shared token computed once.

The per-path update (:func:`bsb.train.loss.response_logprobs`) forwards each leaf as its own sequence, so a tree's
prompt is forwarded M(1 + k) times and each fork's prefix k + 1 times. Here the rows of a micro-batch become
*segments*: each distinct prompt once, each distinct (prompt, shared prefix) once, and each leaf's own continuation,
laid end to end in one flat sequence of exactly the unique tokens (no padding through the MLPs). Every token keeps
the position id it has in its path, and a custom attention (:func:`tree_attention`, registered with transformers as
``bsb_tree``) lets each segment's queries see its ancestors' keys in full and its own causally: per depth (prompts,
prefixes, continuations) one batched ``scaled_dot_product_attention`` over gathered keys, so the mask is
(segments, segment length, context length), never (tokens, tokens) over a whole tree. The log-prob of each unique
(context, token) is read once through the chunked linear + logsumexp head, and each row's (B, R) log-probs are
gathered from them by index: the loss sees the tensors of the per-path pass, and the gradient of a shared token is
the sum of what each of its paths gives it (autograd's index backward), so loss and gradients equal the per-path
update up to rounding.

A row's first response token is read from its prompt's last position; the first token after a shared prefix from
the prefix's last position; a group with ``prefix_len == 0`` shares only the prompt. Sliding-window layers
(OLMo-3) apply their window to the position ids, as a separate forward would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

ATTENTION = "bsb_tree"  # the attention implementation's name in transformers' registry


@dataclass
class _Level:
    """The segments of one depth, padded: ``q_idx`` (S, L) flat positions of their queries, ``kv_idx`` (S, K) of
    the keys each sees (ancestors, then itself), ``allowed`` (S, L, K), ``keep`` the real queries of the (S·L) rows
    in flat order; ``windowed``: a sliding window's (S, L, K) mask, made with the level (once a micro-batch)."""

    q_idx: torch.Tensor
    kv_idx: torch.Tensor
    allowed: torch.Tensor
    keep: torch.Tensor
    windowed: dict = field(default_factory=dict)  # sliding window -> its (S, L, K) mask


@dataclass
class _Flex:
    """The flat sequence as ``flex_attention`` reads it (CUDA): each token's segment ``seg`` (T,), each segment's
    ancestors ``up`` (S, 2) (-1: none), and a block mask per window (None: full attention), made once a micro-batch."""

    seg: torch.Tensor
    up: torch.Tensor
    block_masks: dict = field(default_factory=dict)


@dataclass
class TreeMask:
    """What :func:`tree_attention` needs to know of the flat sequence: its levels (the SDPA path), or its flex
    block masks (``flex``; CUDA), the inverse of the order in which the levels' outputs come back, and every token's
    position id (for sliding windows)."""

    levels: list[_Level]
    inverse: torch.Tensor  # (T,)
    positions: torch.Tensor  # (T,)
    flex: _Flex | None = None


@dataclass
class TreePack:
    """One micro-batch of rows as a flat sequence of its unique tokens (``ids``, ``positions``: (T,)), the unique
    log-prob entries (hidden state at flat ``read_at`` predicts ``targets``, (N,)), and how the rows' (B, R) tensor
    is gathered from them: ``out[rows, within] = lp[entry]``."""

    ids: torch.Tensor
    positions: torch.Tensor
    mask: TreeMask
    read_at: torch.Tensor
    targets: torch.Tensor
    rows: torch.Tensor
    within: torch.Tensor
    entry: torch.Tensor
    shape: tuple[int, int]
    tokens: int  # token positions the forward computes (T)
    path_tokens: int  # what the per-path forward of the same rows computes: Σ (prompt + response)


@dataclass
class _Segment:
    tokens: list[int]
    parent: int | None  # index of the segment it continues (None: a prompt)
    depth: int  # 0 prompt, 1 shared prefix, 2 a leaf's own continuation
    pos0: int  # position id of its first token
    start: int = 0  # flat offset
    entry0: int = 0  # its first log-prob entry (prefixes and continuations)


def _segments(prompts, responses, prefix_lens) -> tuple[list[_Segment], list[tuple]]:
    """The unique segments in flat order (a segment after its ancestors) and each row's (prefix segment or None,
    its length, continuation segment or None)."""
    if not len(prompts) == len(responses) == len(prefix_lens) or not prompts:
        raise ValueError("pack_trees needs as many prompts, responses and prefix_lens, at least one")
    segs: list[_Segment] = []
    by_prompt: dict[tuple, int] = {}
    by_prefix: dict[tuple, int] = {}
    plan = []
    for p, r, s in zip(prompts, responses, prefix_lens):
        if len(p) == 0:
            raise ValueError("every prompt needs at least one token (the first response token is predicted from it)")
        if not 0 <= s <= len(r):
            raise ValueError(f"prefix_len {s} outside [0, {len(r)}]")
        key = tuple(p)
        if key not in by_prompt:
            by_prompt[key] = len(segs)
            segs.append(_Segment(list(p), None, 0, 0))
        parent = by_prompt[key]
        pre = None
        if s:
            pkey = (key, tuple(r[:s]))
            if pkey not in by_prefix:
                by_prefix[pkey] = len(segs)
                segs.append(_Segment(list(r[:s]), parent, 1, len(p)))
            pre = parent = by_prefix[pkey]
        cont = None
        if len(r) > s:
            cont = len(segs)
            segs.append(_Segment(list(r[s:]), parent, 2, len(p) + s))
        plan.append((pre, s, cont))
    flat, n_entries = 0, 0
    for seg in segs:
        seg.start, flat = flat, flat + len(seg.tokens)
        if seg.depth:
            seg.entry0, n_entries = n_entries, n_entries + len(seg.tokens)
    return segs, plan


def _ancestors(segs: list[_Segment], i: int) -> list[int]:
    """Segment ``i``'s ancestors, outermost first (at most two: its prompt, then its shared prefix)."""
    chain, at = [], segs[i].parent
    while at is not None:
        chain.insert(0, at)
        at = segs[at].parent
    return chain


def _spread(values: torch.Tensor, counts: list[int], device) -> torch.Tensor:
    """``values[i]`` repeated ``counts[i]`` times, on ``device`` (the total is known on the host: no sync)."""
    reps = torch.tensor(counts, dtype=torch.long, device=device)
    return torch.repeat_interleave(values, reps, output_size=sum(counts))


def _offsets(counts: list[int], device) -> torch.Tensor:
    """For runs of ``counts[i]`` items laid end to end: each item's index within its run."""
    total = sum(counts)
    starts = torch.tensor([0, *counts[:-1]], dtype=torch.long, device=device).cumsum(0)
    return torch.arange(total, device=device) - _spread(starts, counts, device)


def pack_trees(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    prefix_lens: Sequence[int],
    device=None,
    windows: Sequence[int] = (),
    attention: str = "sdpa",
) -> TreePack:
    """The :class:`TreePack` of rows ``(prompt, response, prefix_len)``: rows with the same prompt share its
    segment, rows with the same prompt and the same first ``prefix_len`` response tokens share that prefix's (the
    sharing is by token ids, so a wrong ``prefix_len`` can only cost sharing, never change a number).

    The host walks the rows once (per segment: its offset, length and ancestors); every per-token index and every
    mask is then built on ``device`` (the model's; default the CPU) by vectorised ops whose sizes the host already
    knows, so a CUDA run copies the token ids and a few per-segment numbers, never a mask. ``windows``: the model's
    sliding windows, whose masks are made here, once (the layers share them). ``attention``: ``sdpa`` (the spec,
    any device) or ``flex`` (block masks for ``flex_attention``)."""
    if attention not in ("sdpa", "flex"):
        raise ValueError(f"attention must be 'sdpa' or 'flex', got {attention!r}")
    device = torch.device(device) if device is not None else torch.device("cpu")
    segs, plan = _segments(prompts, responses, prefix_lens)
    lens = [len(seg.tokens) for seg in segs]
    long = dict(dtype=torch.long, device=device)
    ids = torch.tensor([t for seg in segs for t in seg.tokens], **long)  # (T,)
    starts = torch.tensor([seg.start for seg in segs], **long)  # (S,)
    positions = _spread(torch.tensor([seg.pos0 - seg.start for seg in segs], **long), lens, device) + torch.arange(
        ids.numel(), device=device
    )  # (T,)
    # a segment's token j is read from the position before it: its own token j - 1, or its parent's last token
    reads = [i for i, seg in enumerate(segs) if seg.depth]
    counts = [lens[i] for i in reads]
    j = _offsets(counts, device)
    first = torch.tensor([segs[segs[i].parent].start + lens[segs[i].parent] - 1 for i in reads], **long)
    own = _spread(starts[torch.tensor(reads, **long)], counts, device) + j  # flat position of each entry's token
    read_at = torch.where(j == 0, _spread(first, counts, device), own - 1)
    targets = ids[own]
    # the rows: row b's entries are its prefix segment's first s, then its continuation's
    row_lens = [len(r) for r in responses]
    within = _offsets(row_lens, device)
    pre0 = torch.tensor([segs[pre].entry0 if pre is not None else 0 for pre, _, _ in plan], **long)
    cont0 = torch.tensor([segs[cont].entry0 if cont is not None else 0 for _, _, cont in plan], **long)
    cut = _spread(torch.tensor([s for _, s, _ in plan], **long), row_lens, device)
    entry = torch.where(within < cut, _spread(pre0, row_lens, device) + within,
                        _spread(cont0, row_lens, device) + within - cut)  # fmt: skip
    rows = _spread(torch.arange(len(plan), device=device), row_lens, device)
    build = _flex_mask if attention == "flex" else _tree_mask
    return TreePack(
        ids=ids,
        positions=positions,
        mask=build(segs, positions, device, tuple(windows)),
        read_at=read_at,
        targets=targets,
        rows=rows,
        within=within,
        entry=entry,
        shape=(len(prompts), max(1, max(row_lens))),
        tokens=int(ids.numel()),
        path_tokens=sum(len(p) + len(r) for p, r in zip(prompts, responses)),
    )


def _tree_mask(segs: list[_Segment], positions: torch.Tensor, device, windows: tuple = ()) -> TreeMask:
    """The SDPA levels, vectorised on ``device``: a segment's keys are at most three contiguous runs (its prompt,
    its shared prefix, itself), so every index is a ``where`` over per-segment offsets and lengths."""
    long = dict(dtype=torch.long, device=device)
    levels, order = [], []
    for depth in range(3):
        mine = [i for i, seg in enumerate(segs) if seg.depth == depth]
        if not mine:
            continue
        runs = []  # per segment: (start, length) of its outer ancestor, inner ancestor, itself
        for i in mine:
            up = _ancestors(segs, i)
            up = [None] * (2 - len(up)) + up
            runs.append([(segs[u].start, len(segs[u].tokens)) if u is not None else (0, 0) for u in up])
            runs[-1].append((segs[i].start, len(segs[i].tokens)))
        r = torch.tensor(runs, **long)  # (S, 3, 2)
        st, ln = r[..., 0], r[..., 1]  # (S, 3)
        n, a = ln[:, 2], ln[:, 0] + ln[:, 1]  # (S,) own length, ancestor keys
        width = max(len(segs[i].tokens) for i in mine)
        depth_k = max(sum(length for _, length in run) for run in runs)
        jq = torch.arange(width, device=device)[None, :]  # (1, L)
        q_idx = st[:, 2:3] + torch.minimum(jq, n[:, None] - 1)  # (S, L): padding repeats its last query
        kk = torch.arange(depth_k, device=device)[None, :]  # (1, K)
        l0, l01 = ln[:, :1], ln[:, :1] + ln[:, 1:2]
        kv_idx = torch.where(
            kk < l0,
            st[:, :1] + kk,
            torch.where(kk < l01, st[:, 1:2] + kk - l0, st[:, 2:3] + torch.minimum(kk - l01, n[:, None] - 1)),
        )  # (S, K): padding repeats its own last key
        qq = torch.minimum(jq, n[:, None] - 1)[:, :, None]  # (S, L, 1): a padded query sees what its last one sees
        aa = a[:, None, None]
        kk3 = kk[:, None, :]
        allowed = (kk3 < aa) | ((kk3 - aa <= qq) & (kk3 < aa + n[:, None, None]))  # (S, L, K)
        own = [len(segs[i].tokens) for i in mine]
        keep = _spread(torch.arange(len(mine), **long) * width, own, device) + _offsets(own, device)  # real queries
        order.append(q_idx.reshape(-1)[keep])
        level = _Level(q_idx, kv_idx, allowed, keep)
        for w in windows:
            level.windowed[w] = _window(level, positions, w)
        levels.append(level)
    inverse = torch.empty(positions.numel(), **long)
    inverse[torch.cat(order)] = torch.arange(positions.numel(), device=device)
    return TreeMask(levels, inverse, positions)


def reference_tree_mask(segs: list[_Segment], positions: torch.Tensor) -> TreeMask:
    """The spec of :func:`_tree_mask`: the same levels built segment by segment on the host (the tests compare
    them; ``bench/update.py`` times both)."""
    levels, order = [], []
    for depth in range(3):
        mine = [seg for seg in segs if seg.depth == depth]
        if not mine:
            continue
        ctx = []
        for seg in mine:
            chain, at = [], seg.parent
            while at is not None:
                chain.insert(0, segs[at])
                at = segs[at].parent
            ctx.append(torch.cat([a.start + torch.arange(len(a.tokens)) for a in chain]) if chain else None)
        n = torch.tensor([len(seg.tokens) for seg in mine])  # (S,)
        a = torch.tensor([0 if c is None else c.numel() for c in ctx])  # (S,) ancestor keys
        width, depth_k = int(n.max()), int((a + n).max())
        q_idx = torch.zeros(len(mine), width, dtype=torch.long)
        kv_idx = torch.zeros(len(mine), depth_k, dtype=torch.long)
        for i, (seg, c) in enumerate(zip(mine, ctx)):
            own = seg.start + torch.arange(len(seg.tokens))
            q_idx[i] = own[torch.arange(width).clamp(max=len(own) - 1)]  # padding repeats its last query
            keys = own if c is None else torch.cat([c, own])
            kv_idx[i] = keys[torch.arange(depth_k).clamp(max=keys.numel() - 1)]
        # (S, L, 1): a padded query sees what its segment's last query sees
        qq = torch.arange(width)[None, :, None].clamp(max=(n - 1)[:, None, None])
        kk = torch.arange(depth_k)[None, None, :]  # (1, 1, K)
        aa = a[:, None, None]
        allowed = (kk < aa) | ((kk - aa <= qq) & (kk < aa + n[:, None, None]))  # (S, L, K)
        keep = (torch.arange(width)[None, :] < n[:, None]).reshape(-1).nonzero().squeeze(1)  # real queries, flat order
        order.append(q_idx.reshape(-1)[keep])
        levels.append(_Level(q_idx, kv_idx, allowed, keep))
    inverse = torch.empty(positions.numel(), dtype=torch.long)
    inverse[torch.cat(order)] = torch.arange(positions.numel())
    return TreeMask(levels, inverse, positions)


def _flex_mask(segs: list[_Segment], positions: torch.Tensor, device, windows: tuple = ()) -> TreeMask:
    """The flex path's mask: a token sees its own segment causally and its ancestors' in full, as a block mask over
    the flat sequence (no gathered contexts, no repeated K/V heads); one more per sliding window."""
    from torch.nn.attention.flex_attention import create_block_mask

    long = dict(dtype=torch.long, device=device)
    lens = [len(seg.tokens) for seg in segs]
    seg = _spread(torch.arange(len(segs), **long), lens, device)  # (T,)
    up = torch.tensor([[-1] * (2 - len(c)) + c for c in (_ancestors(segs, i) for i in range(len(segs)))], **long)
    flex = _Flex(seg, up)
    total = positions.numel()
    build = compiled(create_block_mask) if torch.device(device).type == "cuda" else create_block_mask
    for w in (None, *windows):
        flex.block_masks[w] = build(_mask_mod(seg, up, positions, w), None, None, total, total, device=device)
    empty = torch.zeros(0, **long)
    return TreeMask([], empty, positions, flex)


def _mask_mod(seg: torch.Tensor, up: torch.Tensor, positions: torch.Tensor, window: int | None):
    """``flex_attention``'s mask over the flat sequence: query q sees key k when k is in q's segment at or before
    it, or in one of its ancestors; within ``window`` positions on a sliding layer."""

    def mask_mod(b, h, q, k):
        sq, sk = seg[q], seg[k]
        seen = ((sk == sq) & (k <= q)) | (sk == up[sq, 0]) | (sk == up[sq, 1])
        return seen if window is None else seen & (positions[q] - positions[k] < window)

    return mask_mod


def tree_attention(
    module,
    query,
    key,
    value,
    attention_mask,
    scaling=None,
    dropout=0.0,
    sliding_window=None,
    softcap=None,
    bsb_tree=None,
    **_,
):
    """transformers attention (``bsb_tree``) over a :class:`TreeMask`'s flat sequence: ``query`` (1, H, T, d), ``key``
    and ``value`` (1, H_kv, T, d) → (1, T, H, d). Each level: the segments' queries and their contexts' keys
    gathered, one masked SDPA, the outputs put back in flat order."""
    if bsb_tree is None:
        raise ValueError("the bsb_tree attention runs only inside the tree-packed pass (update_packing=tree)")
    if softcap is not None:  # SDPA has no score softcap (Gemma 2): refuse rather than attend wrongly
        raise ValueError(f"the tree-packed attention has no attention softcap (softcap={softcap}): update_packing=path")
    if bsb_tree.flex is not None:
        return _flex_attention(module, query, key, value, bsb_tree.flex, sliding_window, scaling, dropout), None
    q, k, v = query[0], key[0], value[0]  # (H, T, d), (H_kv, T, d)
    heads, _, d = q.shape
    rep = heads // k.shape[0]
    outs = []
    for lv in bsb_tree.levels:
        s, width = lv.q_idx.shape
        depth_k = lv.kv_idx.shape[1]
        qs = q[:, lv.q_idx.reshape(-1)].reshape(heads, s, width, d).transpose(0, 1)  # (S, H, L, d)
        ks = k[:, lv.kv_idx.reshape(-1)].reshape(-1, s, depth_k, d).transpose(0, 1)  # (S, H_kv, K, d)
        vs = v[:, lv.kv_idx.reshape(-1)].reshape(-1, s, depth_k, d).transpose(0, 1)
        if rep > 1:  # as transformers' repeat_kv: query head h reads key head h // rep
            ks, vs = ks.repeat_interleave(rep, dim=1), vs.repeat_interleave(rep, dim=1)
        allowed = lv.allowed if sliding_window is None else _windowed(lv, bsb_tree.positions, sliding_window)
        o = F.scaled_dot_product_attention(
            qs, ks, vs, attn_mask=allowed[:, None], dropout_p=dropout if module.training else 0.0, scale=scaling
        )  # (S, H, L, d)
        outs.append(o.transpose(1, 2).reshape(s * width, heads, d)[lv.keep])
    return torch.cat(outs)[bsb_tree.inverse][None], None  # (1, T, H, d)


def _window(lv: _Level, positions: torch.Tensor, window: int) -> torch.Tensor:
    """A sliding layer's mask: also ``q_pos − k_pos < window`` on the position ids (transformers' overlay)."""
    qp, kp = positions[lv.q_idx], positions[lv.kv_idx] + window  # (S, L), (S, K)
    return lv.allowed & torch.lt(qp[:, :, None], kp[:, None, :])  # q − k < window, with no (S, L, K) integers


def _windowed(lv: _Level, positions: torch.Tensor, window: int) -> torch.Tensor:
    """The level's mask for ``window``: made with the pack (the model's windows), else here and kept."""
    if window not in lv.windowed:
        lv.windowed[window] = _window(lv, positions, window)
    return lv.windowed[window]


# Compiled variants a process may build of each flex function: its lengths are dynamic (one graph for every flat
# sequence length), so what varies is the mask (full, and one per sliding window: OLMo-3 has one), grad mode (the
# update's forward and backward, the recomputation's), and the first static call before dynamo marks a size dynamic.
FLEX_RECOMPILES = 16
_COMPILED: dict = {}


def compiled(fn):
    """``torch.compile(fn, dynamic=True)``, built once a process, with dynamo's recompile limit raised to
    :data:`FLEX_RECOMPILES` (past its limit, 8 in torch 2.13, dynamo runs ``fn`` eagerly: flex attention would then
    materialise every score)."""
    if fn not in _COMPILED:
        import torch._dynamo

        config = torch._dynamo.config
        name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # torch < 2.6: the old
        setattr(config, name, max(getattr(config, name), FLEX_RECOMPILES))
        _COMPILED[fn] = torch.compile(fn, dynamic=True)
    return _COMPILED[fn]


def _flex_attention(module, query, key, value, flex: _Flex, window, scaling, dropout):
    """The flex path (CUDA): one ``flex_attention`` over the flat sequence, the model's GQA heads read in place;
    compiled once a process (uncompiled it materialises every score). ``query``, ``key`` and ``value`` are cast to the
    autocast dtype first (under autocast with fp32 weights q and k come out of their norms and rotary in fp32 while v
    is bf16, which flex_attention refuses before torch 2.13). (1, H, T, d) → (1, T, H, d)."""
    from torch.nn.attention.flex_attention import flex_attention

    if dropout and module.training:
        raise ValueError(f"the flex tree attention has no attention dropout (dropout={dropout}): set the model's to 0")
    if window not in flex.block_masks:
        raise ValueError(f"no block mask for sliding window {window}: pack_trees(windows=...) must list the model's")
    kind = query.device.type
    dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else query.dtype
    query, key, value = (t.to(dtype) for t in (query, key, value))
    run = compiled(flex_attention) if kind == "cuda" else flex_attention
    gqa = query.shape[1] != key.shape[1]
    out = run(query, key, value, block_mask=flex.block_masks[window], scale=scaling, enable_gqa=gqa)
    return out.transpose(1, 2).contiguous()  # (1, T, H, d)


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, tree_attention)


@contextlib.contextmanager
def tree_attention_on(model):
    """``model``'s attention is :func:`tree_attention` for the duration (forwards and the backward's recomputation
    under gradient checkpointing alike), then what it was."""
    _register()
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before


def tree_update_refusal(model) -> str:
    """Why the tree-packed pass cannot update ``model`` ("" when it can): it masks attention only (no recurrent
    layers) and reads log-probs through the chunked head (a plain unembedding); :func:`bsb.engine.families.plan`."""
    from bsb.engine.families import plan

    how = plan(model)
    return "" if how.tree_update else how.why or "the tree-packed pass does not support it"


def check_tree_model(model) -> None:
    """One error where the tree-packed pass cannot update ``model`` (the trainer picks the per-path update instead)."""
    why = tree_update_refusal(model)
    if why:
        raise ValueError(f"update_packing=tree cannot update this model: {why}; set update_packing=path")


def model_windows(model) -> tuple[int, ...]:
    """The sliding windows of ``model``'s attention layers (empty: full attention everywhere)."""
    from bsb.engine.families import layer_kinds

    config = model.config
    window = getattr(config, "sliding_window", None)
    return (int(window),) if window and "sliding_attention" in layer_kinds(config) else ()


def tree_attention_kind(device) -> str:
    """Which tree attention a forward on ``device`` runs: ``flex`` on CUDA (block masks, GQA in place), else
    ``sdpa`` (the spec)."""
    return "flex" if torch.device(device).type == "cuda" else "sdpa"


def tree_logprobs(
    model,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    prefix_lens: Sequence[int],
    checked: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, TreePack]:
    """:func:`bsb.train.loss.response_logprobs` of the rows, from one tree-packed forward (inside
    :func:`tree_attention_on`): ``(logp (B, R), mask (B, R), pack)``, differentiable; the pack says how many token
    positions it computed. ``checked``: the model was checked already (:func:`bsb.train.logprob_pass.resolve_pass`,
    once a run), not on every micro-batch."""
    from bsb.engine.device import compute_device
    from bsb.train.loss import token_logprobs_forward

    if not checked:
        check_tree_model(model)
    device = compute_device(model)  # offloaded FSDP2 shards sit on the host; the forward runs on the mesh's device
    pack = pack_trees(
        prompts, responses, prefix_lens, device, windows=model_windows(model), attention=tree_attention_kind(device)
    )  # indices and masks made on the device
    args = (pack.ids[None], None, torch.zeros_like(pack.read_at), pack.read_at, pack.targets)
    kw = dict(position_ids=pack.positions[None], bsb_tree=pack.mask, use_cache=False)
    lp = token_logprobs_forward(model)(*args, **kw)  # (N,)
    mask = torch.zeros(pack.shape, dtype=torch.bool, device=device)
    mask[pack.rows, pack.within] = True
    out = torch.zeros(pack.shape, dtype=torch.float32, device=device)
    out = out.index_put((pack.rows, pack.within), lp[pack.entry].float())  # (B, R)
    return out, mask, pack
