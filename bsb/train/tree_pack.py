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
    in flat order."""

    q_idx: torch.Tensor
    kv_idx: torch.Tensor
    allowed: torch.Tensor
    keep: torch.Tensor
    windowed: dict = field(default_factory=dict)  # sliding window -> its (S, L, K) mask

    def to(self, device) -> _Level:
        return _Level(*(t.to(device) for t in (self.q_idx, self.kv_idx, self.allowed, self.keep)))


@dataclass
class TreeMask:
    """What :func:`tree_attention` needs to know of the flat sequence: its levels, the inverse of the order in which
    their outputs come back, and every token's position id (for sliding windows)."""

    levels: list[_Level]
    inverse: torch.Tensor  # (T,)
    positions: torch.Tensor  # (T,)

    def to(self, device) -> TreeMask:
        return TreeMask([lv.to(device) for lv in self.levels], self.inverse.to(device), self.positions.to(device))


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


def pack_trees(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], prefix_lens: Sequence[int]
) -> TreePack:
    """The :class:`TreePack` of rows ``(prompt, response, prefix_len)``: rows with the same prompt share its
    segment, rows with the same prompt and the same first ``prefix_len`` response tokens share that prefix's (the
    sharing is by token ids, so a wrong ``prefix_len`` can only cost sharing, never change a number)."""
    if not len(prompts) == len(responses) == len(prefix_lens) or not prompts:
        raise ValueError("pack_trees needs as many prompts, responses and prefix_lens, at least one")
    segs: list[_Segment] = []
    by_prompt: dict[tuple, int] = {}
    by_prefix: dict[tuple, int] = {}
    plan = []  # per row: (prefix segment or None, its length, continuation segment or None)
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
    ids = torch.tensor([t for seg in segs for t in seg.tokens], dtype=torch.long)  # (T,)
    positions = torch.cat([seg.pos0 + torch.arange(len(seg.tokens)) for seg in segs])  # (T,)
    # a segment's token j is read from the position before it: its own token j - 1, or its parent's last token
    read_at, targets = [], []
    for seg in segs:
        if seg.depth:
            parent = segs[seg.parent]
            read_at.append(
                torch.cat(
                    [
                        torch.tensor([parent.start + len(parent.tokens) - 1]),
                        seg.start + torch.arange(len(seg.tokens) - 1),
                    ]
                )
            )
            targets.append(torch.tensor(seg.tokens))
    rows, within, entry = [], [], []
    for b, (pre, s, cont) in enumerate(plan):
        parts = ([segs[pre].entry0 + torch.arange(s)] if pre is not None else []) + (
            [segs[cont].entry0 + torch.arange(len(segs[cont].tokens))] if cont is not None else []
        )
        if parts:
            e = torch.cat(parts)
            entry.append(e)
            rows.append(torch.full_like(e, b))
            within.append(torch.arange(e.numel()))
    empty = torch.zeros(0, dtype=torch.long)
    cat = lambda xs: torch.cat(xs) if xs else empty  # noqa: E731
    return TreePack(
        ids=ids,
        positions=positions,
        mask=_tree_mask(segs, positions),
        read_at=cat(read_at),
        targets=cat(targets),
        rows=cat(rows),
        within=cat(within),
        entry=cat(entry),
        shape=(len(prompts), max(1, max(len(r) for r in responses))),
        tokens=int(ids.numel()),
        path_tokens=sum(len(p) + len(r) for p, r in zip(prompts, responses)),
    )


def _tree_mask(segs: list[_Segment], positions: torch.Tensor) -> TreeMask:
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


def _windowed(lv: _Level, positions: torch.Tensor, window: int) -> torch.Tensor:
    """A sliding layer's mask: also ``q_pos − k_pos < window`` on the position ids (transformers' overlay)."""
    if window not in lv.windowed:
        qp, kp = positions[lv.q_idx], positions[lv.kv_idx]  # (S, L), (S, K)
        lv.windowed[window] = lv.allowed & (qp[:, :, None] - kp[:, None, :] < window)
    return lv.windowed[window]


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
    pack = pack_trees(prompts, responses, prefix_lens)
    device = compute_device(model)  # offloaded FSDP2 shards sit on the host; the forward runs on the mesh's device
    args = (
        pack.ids[None].to(device),
        None,
        torch.zeros_like(pack.read_at).to(device),
        pack.read_at.to(device),
        pack.targets.to(device),
    )
    kw = dict(position_ids=pack.positions[None].to(device), bsb_tree=pack.mask.to(device), use_cache=False)
    lp = token_logprobs_forward(model)(*args, **kw)  # (N,)
    mask = torch.zeros(pack.shape, dtype=torch.bool)
    mask[pack.rows, pack.within] = True
    out = torch.zeros(pack.shape, dtype=torch.float32, device=device)
    out = out.index_put((pack.rows.to(device), pack.within.to(device)), lp[pack.entry.to(device)].float())  # (B, R)
    return out, mask.to(device), pack
