"""Prefix-reused belief reads for hybrid models with recurrent (Mamba-2) layers, such as Nemotron-H.

No attention mask restricts a recurrent layer, so the packed forward (:mod:`bsb.engine.packed`) cannot read these
models. Instead each chain is forwarded once, up to its last cut, in segments that end at its cuts, with a
transformers cache; after each segment every recurrent layer's conv state and SSM state (the state at that cut)
are cloned. Then one batched forward (C rows, or chunks of at most ``max_rows``, and of at most
:data:`KV_ROW_TOKENS` cached keys in all: every row holds its own copy of the chain's keys and values, so a chain of 26k
tokens is read 2 rows at a time) runs the C suffix segments ``suffix (+
answer)``, row j starting from the state at cut t_j: its recurrent layers hold that cut's states, its attention
layers the chain's keys and values masked to keys < t_j, its position ids start at t_j. The reads equal
:func:`bsb.engine.packed.naive_reads` (tests/engine/test_stateful.py): max_j t_j + C·(E + n − 1) token-forwards a
chain instead of Σ_j (t_j + E + n).

One-token continuations are avoided: transformers 5.x runs a one-token forward from a cached state through the
recurrent step (``mamba2_selective_state_update``), which does not clamp dt to ``time_step_limit`` as the chunked
scan of a whole forward does, so it drifts from a whole forward wherever softplus(dt) < ``time_step_min`` (tested).
A cut one token after the previous one is read from that previous cut's state with its one prefix token put
before the suffix (such rows are batched apart, one token wider), and a one-token suffix is padded to two; those
tokens are counted in ``token_forwards``: ``done + Σ_j max(2, E + n + s_j)``, s_j = 1 for a cut one token after
another, else 0.
"""

from __future__ import annotations

import torch

from bsb.engine.hf_model import ResidualCapture
from bsb.engine.packed import CutReads, _as_ids, _blocks, _segment

LAYER_TYPES = ("linear_attention", "full_attention", "mlp", "moe")  # what this module carries, masks or ignores
KV_ROW_TOKENS = 65_536  # cached key positions a batched read holds over its rows (each row copies the chain's)
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")  # those that honour an additive 4D mask


def stateful_reads(model, chains, suffix, with_hidden: bool = False, max_rows: int = 64) -> list[CutReads]:
    """Reads of several chains ``[(prefix, cuts), ...]`` or ``[(prefix, cuts, answer), ...]`` (Lens-Shift, with
    ``with_hidden``), each chain forwarded once and its C suffixes in batched forwards of at most ``max_rows`` rows.
    Rows come in each chain's cut order (cuts may be unsorted or repeated)."""
    check_stateful(model)
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    blocks = _blocks(chains, suffix, with_hidden)
    suffix = _as_ids(suffix)
    with torch.no_grad():
        return [_chain_reads(model, p, cuts, suffix, answer, with_hidden, max_rows) for p, cuts, answer in blocks]


def check_stateful(model) -> None:
    """That ``model`` is a hybrid whose layers this module can carry (one error otherwise)."""
    kinds = list(getattr(model.config, "layer_types", None) or [])
    odd = set(kinds) - set(LAYER_TYPES)
    if not kinds or odd:
        raise ValueError(
            f"stateful reads need a model listing layer_types among {', '.join(LAYER_TYPES)} (Nemotron-H); "
            f"{type(model).__name__} has {', '.join(sorted(odd)) if odd else 'no layer_types'}"
        )
    attn = getattr(model.config, "_attn_implementation", None)
    if attn not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"stateful reads need eager or sdpa attention (an additive 4D mask), not {attn!r}")


def _chain_reads(model, prefix, cuts, suffix, answer, with_hidden, max_rows) -> CutReads:
    from transformers import DynamicCache

    device = next(model.parameters()).device
    kinds = list(model.config.layer_types)
    recurrent = [i for i, k in enumerate(kinds) if k == "linear_attention"]
    attention = [i for i, k in enumerate(kinds) if k == "full_attention"]
    cache = DynamicCache(config=model.config)
    states, anchor, done = {}, {}, 0  # states at each forwarded cut; each cut's anchor (the state it starts from)
    for t in sorted(set(cuts)):
        if done and t - done == 1:  # a one-token continuation: read from the state at `done` instead (docstring)
            anchor[t] = done
            continue
        ids = prefix[done:t].to(device)[None]
        model.model(ids, position_ids=torch.arange(done, t, device=device)[None], past_key_values=cache, use_cache=True)
        layers = [cache.layers[i] for i in recurrent]
        states[t] = [(layer.conv_states[0].clone(), layer.recurrent_states[0].clone()) for layer in layers]
        anchor[t], done = t, t
    kv = [(cache.layers[i].keys, cache.layers[i].values) for i in attention]  # (1, heads, done, head_dim)
    seg = _segment(suffix, answer)  # the answer but its last token (bsb.engine.packed)
    n = 0 if answer is None else answer.numel()
    parts, order, forwards = [], [], done
    max_rows = max(1, min(max_rows, KV_ROW_TOKENS // max(1, done)))  # the rows' copies of the keys bounded
    for shift in (0, 1):  # rows of one shift share a width: a detoured row never pads the others
        group = [j for j, t in enumerate(cuts) if t - anchor[t] == shift]
        width = max(2, seg.numel() + shift)
        for i in range(0, len(group), max_rows):
            rows = group[i : i + max_rows]
            ts = [cuts[j] for j in rows]
            parts.append(
                _rows(
                    model,
                    prefix,
                    ts,
                    [anchor[t] for t in ts],
                    seg,
                    suffix.numel(),
                    n,
                    width,
                    kv,
                    attention,
                    states,
                    recurrent,
                    with_hidden,
                )
            )
            order += rows
            forwards += len(rows) * width
    back = torch.empty(len(order), dtype=torch.long)
    back[torch.tensor(order)] = torch.arange(len(order))  # rows back in the chain's cut order

    def cat(k, dim):
        return (
            None
            if parts[0][k] is None
            else torch.cat([p[k] for p in parts], dim).index_select(dim, back.to(parts[0][k].device))
        )

    return CutReads(read_logits=cat(0, 0), answer_hidden=cat(1, 1), answer_logits=cat(2, 0), token_forwards=forwards)


def _rows(model, prefix, cuts, anchors, seg, e, n, width, kv, attention, states, recurrent, with_hidden):
    """One batched forward: row j is ``prefix[anchors[j]:cuts[j]] + seg``, right-padded to ``width``, from the state
    at ``anchors[j]``. Returns (read logits (R, V), answer hidden (layers, R, n, d) or None, answer logits or None)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    r, past = len(cuts), kv[0][0].shape[2] if kv else 0
    ids = seg[:1].repeat(r, width)  # the right padding: any token, after every read position
    for j, (t, a) in enumerate(zip(cuts, anchors)):
        ids[j, : t - a + seg.numel()] = torch.cat([prefix[a:t], seg])
    a = torch.tensor(anchors)
    shift = torch.tensor(cuts) - a
    pos = a[:, None] + torch.arange(width)[None, :]
    sees_past = torch.arange(past)[None, None, :] < a[:, None, None]  # (R, 1, past): keys before the anchor
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    allowed = torch.cat([sees_past.expand(r, width, past), causal.expand(r, width, width)], -1)
    mask = torch.zeros(r, 1, width, past + width, dtype=dtype).masked_fill(~allowed[:, None], torch.finfo(dtype).min)
    cache = DynamicCache(config=model.config)
    for i, (k, v) in zip(attention, kv):
        cache.layers[i].update(k.expand(r, -1, -1, -1), v.expand(r, -1, -1, -1))
    for slot, i in enumerate(recurrent):
        conv = torch.cat([states[t][slot][0] for t in anchors])
        ssm = torch.cat([states[t][slot][1] for t in anchors])
        layer = cache.layers[i]
        layer.lazy_initialization(conv_states=conv, recurrent_states=ssm, conv_kernel_size=conv.shape[-1])
        layer.conv_states[0].copy_(conv)
        layer.update_recurrent_state(ssm)
        layer.has_previous_state[0] = True
    read = (shift + e - 1).to(device)  # (R,) each row's last suffix token
    ans_rows = torch.arange(r, device=device).repeat_interleave(n)
    ans_pos = (read[:, None] + torch.arange(n, device=device)[None, :]).reshape(-1)  # (R·n,)
    kw = dict(
        position_ids=pos.to(device),
        attention_mask={"full_attention": mask.to(device), "linear_attention": None},
        past_key_values=cache,
        use_cache=True,
    )
    capture = None
    if with_hidden:
        with ResidualCapture(list(model.model.layers), ans_pos, ans_rows) as capture:
            hidden = model.model(ids.to(device), **kw).last_hidden_state
    else:
        hidden = model.model(ids.to(device), **kw).last_hidden_state
    rows = torch.cat([torch.arange(r, device=device), ans_rows])
    at = torch.cat([read, ans_pos])
    logits = model.get_output_embeddings()(hidden[rows, at]).float()  # float: as the model's own forward returns
    layer_hidden = capture.stacked().reshape(-1, r, n, hidden.shape[-1]) if capture is not None else None
    return logits[:r], layer_hidden, logits[r:].reshape(r, n, -1) if n else None
