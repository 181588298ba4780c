"""The tree-packed update against the per-path update (its specification): the same log-probs, loss, clip fractions
and every parameter's gradient for each estimator x loss_agg x loss, Arm 11, two-stage trees and prefix_len == 0
groups, on tiny random Qwen2, Qwen3, Llama, OLMo-2 and OLMo-3 (sliding layers) models; three update steps end at the
same weights; the token count is the trees' unique tokens, counted by hand.

Its masks and indices, built on the model's device by vectorised ops: equal to the host-built reference; nothing
made on the host (a build for the meta device, every op recorded); a sliding window's mask made once a micro-batch,
kept through FSDP2's input-cast copy; the flex_attention path (CUDA's) equal to the SDPA path in a forward (its
backward runs only on a GPU)."""

import copy
import random

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bsb.train import tree_pack, update
from bsb.train.config import TrainConfig
from bsb.train.logprob_pass import PASSES
from bsb.train.loss import LOSS_AGGS, response_logprobs
from bsb.train.phases import advantage_rows
from bsb.train.run_plan import resolve_plan
from bsb.train.tree import Leaf, PromptTree
from bsb.train.tree_pack import _segments, pack_trees, reference_tree_mask, tree_attention_on, tree_logprobs

transformers = pytest.importorskip("transformers")

VOCAB = 40
FAMILIES = ("qwen2", "qwen3", "llama", "olmo2", "olmo3")


def tiny(family: str):
    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    cfg = {
        "qwen2": lambda: transformers.Qwen2Config(**common),
        "qwen3": lambda: transformers.Qwen3Config(head_dim=8, **common),
        "llama": lambda: transformers.LlamaConfig(**common),
        "olmo2": lambda: transformers.Olmo2Config(**common),
        # a window shorter than the paths: the sliding layer's window is exercised
        "olmo3": lambda: transformers.Olmo3Config(sliding_window=6, layer_types=["sliding_attention", "full_attention"],
                                                  **common),
    }[family]()
    return transformers.AutoModelForCausalLM.from_config(cfg).float()


def _ids(g, n):
    return torch.randint(3, VOCAB, (n,), generator=g).tolist()


def trees():
    """Three trees: [Fork]'s (forks at 5 and 3, one group forked at 0, a sibling whose continuation is empty), a
    two-stage sampler's (a terminal_dup group: identical leaves ending at the prefix; a root_resample group: prefix
    0), and flat GRPO groups (every leaf its own group)."""
    g = torch.Generator().manual_seed(7)
    out = []
    fork = PromptTree("fork", "1")
    p = _ids(g, 6)
    for group, (pre_len, tails) in enumerate([(5, [4, 3, 0]), (0, [6, 2, 5]), (3, [5, 1, 4])]):
        pre = _ids(g, pre_len)
        for j, tail in enumerate(tails):
            fork.leaves.append(Leaf(p, pre + _ids(g, tail), group, pre_len, origin="root" if j == 0 else "sibling"))
    out.append(fork)
    two = PromptTree("two_stage", "1")
    p = _ids(g, 4)
    done = _ids(g, 5)
    two.leaves += [Leaf(p, list(done), 0, 5) for _ in range(2)]  # terminal_dup
    two.leaves += [Leaf(p, _ids(g, 7), 1, 0), Leaf(p, _ids(g, 3), 1, 0, origin="sibling")]  # root_resample
    mid = _ids(g, 4)
    two.leaves += [Leaf(p, mid + _ids(g, 3), 2, 4), Leaf(p, mid + _ids(g, 5), 2, 4, origin="sibling")]
    out.append(two)
    flat = PromptTree("flat", "1")
    p = _ids(g, 3)
    flat.leaves += [Leaf(p, _ids(g, n), j, 0) for j, n in enumerate([4, 6, 2])]
    out.append(flat)
    for t in out:
        for i, leaf in enumerate(t.leaves):
            leaf.reward = float((i * 7 + len(leaf.response)) % 3 == 0)
            leaf.correct = leaf.reward > 0
    return out


def rows_for(cfg: TrainConfig):
    newline = torch.zeros(VOCAB, dtype=torch.bool)
    newline[[5, 9, 17]] = True
    return advantage_rows(trees(), cfg, newline)


def _path_logprobs(model, rows):
    return response_logprobs(model, [r.prompt for r in rows], [r.response for r in rows], 0)


def _backward(model, rows, cfg, old):
    """One mini-batch's loss backward (every active row) as the update runs it; the loss, clip fractions, gradients
    and token tally."""
    model.zero_grad(set_to_none=True)
    tally = update._Tally()
    todo = [i for i, r in enumerate(rows) if r.active]
    n_tokens = sum(len(r.response) for r in rows)
    with tree_attention_on(model) if cfg.update_packing == "tree" else _nothing():
        plan = resolve_plan(cfg, model)[0]
        loss, (clips, tokens) = update._backward(model, rows, todo, cfg, plan, 0, n_tokens, len(rows), old, tally)
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    return loss, {k: v / tokens for k, v in clips.items()}, grads, tally


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def assert_same_grads(got, want, rel=1e-5):
    for name, g in want.items():
        if g is None:
            assert got[name] is None or not got[name].any(), name
            continue
        err = (got[name] - g).norm().item()
        assert err <= rel * g.norm().item() + 1e-12, (name, err, g.norm().item())


CASES = [(adv, loss, agg, c) for adv in ("treerl", "treerl_released", "grpo", "prefix_credit")
         for loss, agg, c in [("composite", a, c) for a in LOSS_AGGS for c in (3.0, None)] + [("flat", "token-mean", 3.0)]]


@pytest.mark.parametrize("family", FAMILIES)
def test_loss_and_every_gradient_equal_the_per_path_update(family):
    """Each estimator x loss_agg x loss (composite with and without the dual clip, flat), with old log-probs moved
    off the current ones so the clip and the dual clip bind, micro-batches of 4 rows (fork groups packed whole)."""
    model = tiny(family).train()
    g = torch.Generator().manual_seed(3)
    for adv, loss_name, agg, c in CASES:
        two_stage = dict(clamped_prefix=True, zero_cont_token_mass=True) if adv == "prefix_credit" else {}
        base = dict(advantage=adv, loss=loss_name, loss_agg=agg, clip_ratio_c=c, micro_batch=4, **two_stage)
        rows = rows_for(TrainConfig(**base))
        with torch.no_grad():
            lp, _ = _path_logprobs(model, rows)
        old = {i: lp[i, : len(r.response)] + (torch.rand(len(r.response), generator=g) * 3 - 1.5)
               for i, r in enumerate(rows)}
        path = _backward(model, rows, TrainConfig(update_packing="path", **base), old)
        tree = _backward(model, rows, TrainConfig(update_packing="tree", **base), old)
        case = (adv, loss_name, agg, c)
        assert tree[0] == pytest.approx(path[0], rel=1e-5, abs=1e-7), case
        assert tree[1] == pytest.approx(path[1], abs=1e-6), case
        if loss_name == "composite" and c is not None:
            assert path[1]["clip_frac_lower"] > 0, case  # the dual clip binds on some token
        assert_same_grads(tree[2], path[2])
        assert tree[3].paths == path[3].paths == path[3].tokens and tree[3].tokens < tree[3].paths


@pytest.mark.parametrize("family", FAMILIES)
def test_log_probs_equal_in_fp32_and_under_bf16_autocast(family):
    model = tiny(family)
    rows = rows_for(TrainConfig())
    args = ([r.prompt for r in rows], [r.response for r in rows])
    with torch.no_grad():
        want, mask = _path_logprobs(model, rows)
        with tree_attention_on(model):
            got, got_mask, _ = tree_logprobs(model, *args, [r.prefix_len for r in rows])
        assert torch.equal(got_mask, mask)
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want16, _ = _path_logprobs(model, rows)
            with tree_attention_on(model):
                got16, _, _ = tree_logprobs(model, *args, [r.prefix_len for r in rows])
    # bf16 rounds each path's own way: the two agree as closely as either agrees with fp32
    assert (got16 - want16).abs().max() <= 2 * (want16 - want).abs().max() + 1e-3


def _three_steps(model, rows, cfg):
    # lr 1e-3: AdamW divides each entry by its own gradient's scale, so rounding in a near-zero entry becomes a step of
    # up to lr (at 1e-2 the per-path update differs from itself with other micro-batches by 5e-6)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    infos = [update.update_policy(model, opt, sched, rows, cfg, resolve_plan(cfg, model)[0], 0, seed=s) for s in range(3)]
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, infos


@pytest.mark.parametrize("extra", [dict(), dict(minibatches=2, micro_batch=3),
                                   dict(unit_question_grad=True, grad_accum_questions=2, micro_batch=5),
                                   dict(homogeneous="backward", loss="flat", gradient_checkpointing=True),
                                   dict(micro_batch_tokens=16)],
                         ids=["default", "two_minibatches", "arm11", "checkpointing_flat", "token_budget"])
def test_three_update_steps_end_at_the_path_runs_weights(extra):
    """update_policy three times (AdamW): the tree-packed weights within 1e-5 of the per-path ones, with the
    old-log-prob pass (two mini-batches), [TwoStage] Arm 11's unit-norm accumulation, and gradient checkpointing
    (its recomputation in the backward runs the tree attention too)."""
    checkpointing = extra.pop("gradient_checkpointing", False)
    base = tiny("qwen3")
    if checkpointing:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    rows = rows_for(TrainConfig(**extra))
    out = {}
    for packing in ("path", "tree"):
        out[packing] = _three_steps(copy.deepcopy(base), rows, TrainConfig(update_packing=packing, **extra))
    (w_path, i_path), (w_tree, i_tree) = out["path"], out["tree"]
    assert max((w_tree[k] - w_path[k]).abs().max().item() for k in w_path) <= 1e-5
    for a, b in zip(i_tree, i_path):
        # abs: the flat loss sums terms of either sign to ~1e-4 here, rounding is relative to the terms
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6)
        assert a["optimizer"] == b["optimizer"]
        assert a["update_tokens_paths"] == b["update_tokens_paths"] == b["update_tokens"]
        assert a["update_tokens"] < a["update_tokens_paths"]
    assert base.config._attn_implementation == "sdpa"  # the tree attention is the update's only


def test_update_tokens_are_the_trees_unique_tokens_counted_by_hand():
    """One tree: prompt 4 tokens; group 0 forks after 3 tokens into continuations of 2, 5 and 0 tokens; group 1 forks
    at 0 into 4 and 6 tokens. Per path: 3 x 4 + (5 + 8 + 3) + 2 x 4 + (4 + 6) = 46 token positions; tree-packed:
    the prompt once (4), the prefix once (3), the continuations (2 + 5 + 4 + 6) = 24."""
    p, pre = [3, 4, 5, 6], [7, 8, 9]
    leaves = [Leaf(p, pre + [10, 11], 0, 3), Leaf(p, pre + [12, 13, 14, 15, 16], 0, 3), Leaf(p, list(pre), 0, 3),
              Leaf(p, [17, 18, 19, 20], 1, 0), Leaf(p, [21, 22, 23, 24, 25, 26], 1, 0)]
    pack = pack_trees([x.prompt for x in leaves], [x.response for x in leaves], [x.prefix_len for x in leaves])
    assert (pack.tokens, pack.path_tokens) == (24, 46)
    tree = PromptTree("t", "1", leaves)
    for i, leaf in enumerate(leaves):
        leaf.reward = float(i % 2)
        leaf.correct = bool(i % 2)
    rows = advantage_rows([tree], TrainConfig(), torch.zeros(VOCAB, dtype=torch.bool))
    assert all(r.active for r in rows)
    model = tiny("qwen3")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    cfg = TrainConfig(update_packing="tree")
    info = update.update_policy(model, opt, sched, rows, cfg, resolve_plan(cfg, model)[0], 0, seed=0)
    assert (info["update_tokens"], info["update_tokens_paths"]) == (24, 46)
    cfg = TrainConfig(update_packing="path")
    info = update.update_policy(model, opt, sched, rows, cfg, resolve_plan(cfg, model)[0], 0, seed=0)
    assert (info["update_tokens"], info["update_tokens_paths"]) == (46, 46)


def test_rows_carry_the_tree_structure_and_sharing_is_by_token_ids():
    rows = rows_for(TrainConfig())
    leaves = [leaf for t in trees() for leaf in t.leaves]
    assert [(r.group, r.prefix_len) for r in rows] == [(x.group, x.prefix_len) for x in leaves]
    # a prefix_len that does not match the tokens only costs sharing: two rows that differ at token 0 share nothing
    a = pack_trees([[3, 4], [3, 4]], [[5, 6, 7], [8, 6, 7]], [2, 2])
    assert a.tokens == 2 + 3 + 3
    with pytest.raises(ValueError, match="prefix_len"):
        update.Row([3], [4, 5], torch.zeros(2), 0, 0, 3)
    with pytest.raises(ValueError, match="at least one token"):
        pack_trees([[]], [[4]], [0])


def test_a_family_without_the_chunked_head_is_one_clear_error():
    model = tiny("qwen3")
    model.config.model_type = "gpt2"  # what the check reads
    with tree_attention_on(model), pytest.raises(ValueError, match="update_packing=path"):
        tree_logprobs(model, [[3]], [[4]], [0])


def test_the_tree_attention_outside_the_tree_pass_is_an_error():
    model = tiny("qwen3")
    with tree_attention_on(model), pytest.raises(ValueError, match="update_packing=tree"):
        model(torch.tensor([[3, 4, 5]]))


def test_the_update_benchmark_smoke_runs_side_by_side():
    """bench/update.py --smoke: per path and tree-packed in one run, the tree computing fewer token positions."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_update", Path(__file__).parents[2] / "bench" / "update.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.main(["--smoke", "--steps", "0", "--olmo-window", "32", "--mem-tokens", "256"])
    cases, (memory, olmo) = rows[:4], rows[4:]
    assert all(r["tokens_tree"] < r["tokens_path"] for r in cases + [olmo])
    mid, early = cases[0], cases[1]
    assert mid["token_ratio"] > early["token_ratio"] > 1  # the saving follows where forks land
    # the two packings' gradients agree (fp32 here: 3e-7 to 6e-7 of the largest entry measured), a sliding window too
    assert all(r["grad_rel_diff"] < 1e-5 for r in cases + [olmo]) and olmo["case"].startswith("OLMo-3 window 32")
    assert memory["predicted_gb"] > 0 and memory["measured_gb"] is None  # measured on CUDA only


def test_three_training_steps_with_tree_packing_end_at_the_path_runs_weights(tmp_path):
    """Whole trainer steps (rollouts, keeping, advantages, the update, twice the same seeds): update_packing=tree ends
    where update_packing=path does (issue 36)."""
    from test_trainer import SMALL, config

    from bsb.embedded.model import train_tiny_model
    from bsb.train.trainer import Trainer

    model = str(train_tiny_model(SMALL, tmp_path / "tiny", progress=False))
    weights, tokens = {}, {}
    for packing in ("path", "tree"):
        tr = Trainer(config(model, tmp_path / packing, steps=3, dynamic_sampling=False, update_packing=packing,
                            val_every=0, save_every=0, selector="midpoint"))
        rows = [tr.train_step() for _ in range(3)]
        weights[packing] = {k: v.detach().clone() for k, v in tr.policy.state_dict().items()}
        tokens[packing] = [(r["update_tokens"], r["update_tokens_paths"]) for r in rows]
        tr.close()
    for k, want in weights["path"].items():
        torch.testing.assert_close(weights["tree"][k], want, atol=1e-5, rtol=1e-5, msg=k)
    assert [p for _, p in tokens["tree"]] == [p for p, _ in tokens["path"]]  # the same rows were trained
    assert all(t < p for t, p in tokens["tree"])  # and the tree pass computed fewer positions


def test_a_token_budget_packs_whole_fork_groups_and_splits_only_what_does_not_fit():
    """micro_batch_tokens: every micro-batch within the budget (a row over it alone), fork groups kept whole where they
    fit, every row once and in order; 0 leaves the row-count chunks as they were."""
    rows = rows_for(TrainConfig())
    units = update._units(rows, list(range(len(rows))), groups=True)
    cost = lambda unit: update._unit_tokens(rows, unit)  # noqa: E731
    assert [cost(u) for u in units] == [18, 19, 19, 9, 14, 16, 7, 9, 5]  # prompt + shared prefix once, then tails
    packed = lambda pieces: update._positions(rows, pieces, pads=False)  # noqa: E731  (what the tree pass computes)

    def chunk_cost(chunk, budget):  # each whole group at its cost, the rows of a split one at their own
        return sum(cost(u) if cost(u) <= budget else sum(cost([i]) for i in u if i in chunk)
                   for u in units if set(u) & set(chunk))

    for budget in (16, 20, 40, 400):
        chunks = update._chunks(units, 8, packed, budget)
        assert [i for c in chunks for i in c] == list(range(len(rows)))
        assert all(len(c) <= 8 and (chunk_cost(c, budget) <= budget or len(c) == 1) for c in chunks)
        whole = [u for u in units if cost(u) <= budget and len(u) <= 8]
        assert all(any(set(u) <= set(c) for c in chunks) for u in whole)  # a group that fits is never split
    # groups of 18 + 19 tokens fit 40 together; 19 + 9 + 14 would not: a new micro-batch, and so on in order
    assert update._chunks(units, 8, packed, 40) == [units[0] + units[1], units[2] + units[3],
                                                  units[4] + units[5] + units[6], units[7] + units[8]]
    # a budget below a group's 18 tokens: its rows go one by one (each a row's own prompt + response)
    assert update._chunks(units[:1], 8, packed, 16) == [[0], [1], [2]]
    assert update._chunks(units, 4) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17]]


def test_a_padding_pass_prices_its_micro_batches_padded():
    """One 20,000-token row with three 2,016-token rows: 8,064 unpadded positions beyond the long row fit a budget of
    26,048, but the per-path pass pads all four to 20,000 (80,000 positions): it splits them, the long row alone; the
    tree-packed pass, which pads nothing, keeps them together."""
    rows = [update.Row([1] * 16, [2] * 19_984, torch.zeros(19_984), 0)]
    rows += [update.Row([1] * 16, [2] * 2_000, torch.zeros(2_000), q) for q in (1, 2, 3)]
    units = [[i] for i in range(4)]
    padded = lambda pieces: update._positions(rows, pieces, pads=True)  # noqa: E731
    packed = lambda pieces: update._positions(rows, pieces, pads=False)  # noqa: E731
    assert padded(units) == 80_000 and packed(units) == 20_000 + 3 * 2_016
    assert update._chunks(units, 16, padded, 26_048) == [[0], [1, 2, 3]]
    assert update._chunks(units, 16, packed, 26_048) == [[0, 1, 2, 3]]
    from bsb.train.distributed import World

    for packing, want in (("path", [[0], [1, 2, 3]]), ("tree", [[0, 1, 2, 3]])):  # the update plans as it passes
        cfg = TrainConfig(update_packing=packing, micro_batch=16, micro_batch_tokens=26_048)
        assert update._plan(rows, [list(range(4))], cfg, PASSES[packing], World()) == (want, len(want))


def _rows(seed: int, n_prompts: int = 3):
    """Random trees: shared prompts, forks at 0, at the response's end and in between, a leaf with no response."""
    rng = random.Random(seed)
    ids = lambda n: [rng.randrange(3, VOCAB) for _ in range(n)]  # noqa: E731
    prompts, responses, cuts = [], [], []
    for _ in range(n_prompts):
        p = ids(rng.randint(1, 7))
        for _group in range(rng.randint(1, 3)):
            cut = rng.choice([0, rng.randint(0, 6), 6])
            pre = ids(cut)
            for _ in range(rng.randint(1, 3)):
                prompts.append(p)
                responses.append(pre + ids(rng.choice([0, rng.randint(1, 9)])))
                cuts.append(cut)
    return prompts, responses, cuts


def _tree_rows():
    leaves = [leaf for t in trees() for leaf in t.leaves]
    return [x.prompt for x in leaves], [x.response for x in leaves], [x.prefix_len for x in leaves]


@pytest.mark.parametrize("seed", range(6))
def test_the_device_built_mask_equals_the_host_reference(seed):
    rows = _rows(seed) if seed else _tree_rows()
    pack = pack_trees(*rows, windows=(3,))
    segs, _ = _segments(*rows)
    want = reference_tree_mask(segs, pack.positions)
    assert len(pack.mask.levels) == len(want.levels)
    for got, ref in zip(pack.mask.levels, want.levels):
        for name in ("q_idx", "kv_idx", "allowed", "keep"):
            assert torch.equal(getattr(got, name), getattr(ref, name)), name
        assert torch.equal(got.windowed[3], tree_pack._window(ref, pack.positions, 3))
    assert torch.equal(pack.mask.inverse, want.inverse)
    # the flat sequence, positions and log-prob entries against the rows themselves
    for b, (p, r, _) in enumerate(zip(*rows)):
        entries = pack.entry[pack.rows == b]
        assert pack.targets[entries].tolist() == list(r)
        assert (pack.within[pack.rows == b] == torch.arange(len(r))).all()
        for j, e in enumerate(entries.tolist()):  # a token's read position holds the token before it in its path
            at = int(pack.read_at[e])
            assert int(pack.positions[at]) == len(p) + j - 1
            assert int(pack.ids[at]) == (list(p) + list(r))[len(p) + j - 1]


class _HostOps(TorchDispatchMode):
    """Records every op whose output lies on the CPU."""

    def __init__(self):
        super().__init__()
        self.host = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else [out]
        for t in outs:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self.host.append((str(func), tuple(t.shape)))
        return out


@pytest.mark.parametrize("attention", ["sdpa", "flex"])
def test_no_mask_or_index_is_made_on_the_host(attention):
    """A build for another device (meta: shapes without values) runs no op on the host: the host only reads the
    rows' token lists; every index and mask is made where the model runs."""
    rows = _rows(1)
    with _HostOps() as mode:
        pack = pack_trees(*rows, device="meta", windows=(4,), attention=attention)
    assert mode.host == []
    tensors = [pack.ids, pack.positions, pack.read_at, pack.targets, pack.rows, pack.within, pack.entry]
    if attention == "sdpa":
        tensors += [t for lv in pack.mask.levels for t in (lv.q_idx, lv.kv_idx, lv.allowed, lv.keep, *lv.windowed.values())]
    else:
        tensors += [pack.mask.flex.seg, pack.mask.flex.up]
    assert {t.device.type for t in tensors} == {"meta"}
    # the same build on the CPU holds the reference's numbers (above); its sizes match the meta build's
    cpu = pack_trees(*rows, windows=(4,), attention=attention)
    assert [tuple(t.shape) for t in tensors[:7]] == [tuple(t.shape) for t in
            (cpu.ids, cpu.positions, cpu.read_at, cpu.targets, cpu.rows, cpu.within, cpu.entry)]  # fmt: skip


def test_tree_logprobs_packs_on_the_models_device_with_its_windows(monkeypatch):
    """A CUDA run (the device a stand-in): the pack is made on the model's compute device, with the model's sliding
    windows, for flex_attention."""
    seen = {}

    def record(*args, **kw):
        seen.update(device=args[3], **kw)
        raise RuntimeError("recorded")

    monkeypatch.setattr(tree_pack, "pack_trees", record)
    monkeypatch.setattr("bsb.engine.device.compute_device", lambda model: torch.device("cuda", 1))
    with pytest.raises(RuntimeError, match="recorded"):
        tree_logprobs(tiny("olmo3"), [[3, 4]], [[5, 6]], [0])
    assert seen == {"device": torch.device("cuda", 1), "windows": (6,), "attention": "flex"}
    assert tree_pack.tree_attention_kind("cpu") == "sdpa" and tree_pack.model_windows(tiny("qwen3")) == ()


def test_a_sliding_windows_mask_is_made_once_a_micro_batch(monkeypatch):
    """OLMo-3 with three sliding layers: the window's mask is made once per level with the pack, not per layer; the
    copy FSDP2's input cast makes of the mask at every layer keeps it."""
    from torch.distributed.utils import _apply_to_tensors

    calls = []
    made = tree_pack._window
    monkeypatch.setattr(tree_pack, "_window", lambda *a: calls.append(a[2]) or made(*a))
    model = tiny("olmo3")
    model.config.layer_types = ["sliding_attention"] * 3 + ["full_attention"]
    model.config.num_hidden_layers = 4
    model = type(model)(model.config).float()
    rows = _tree_rows()
    with tree_attention_on(model):
        tree_logprobs(model, *rows)
    pack = pack_trees(*rows)
    assert calls == [6] * len(pack.mask.levels)  # one per level, not one per level and sliding layer
    cast = lambda t: t.to(torch.bfloat16) if t.is_floating_point() else t  # noqa: E731  (FSDP2's input cast)
    casted = _apply_to_tensors(cast, pack_trees(*rows, windows=(6,)).mask)
    assert all(6 in lv.windowed and lv.windowed[6].dtype == torch.bool for lv in casted.levels)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # its unfused CPU path: the point
@pytest.mark.parametrize("family", ["qwen3", "olmo3"])
def test_the_flex_path_equals_the_sdpa_path(family, monkeypatch):
    """flex_attention's block masks (one flat sequence, GQA heads in place, OLMo-3's window as its own block mask)
    give the log-probs of the SDPA levels: a forward on the CPU (flex_attention's backward needs a GPU)."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    model = tiny(family).eval()
    rows = _tree_rows()
    with torch.no_grad(), tree_attention_on(model):
        want, want_mask, _ = tree_logprobs(model, *rows)
        monkeypatch.setattr(tree_pack, "tree_attention_kind", lambda device: "flex")
        got, got_mask, pack = tree_logprobs(model, *rows)
    assert pack.mask.flex is not None and pack.mask.levels == []
    assert torch.equal(got_mask, want_mask)
    assert (got - want).abs().max().item() < 1e-5


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_the_flex_path_hands_flex_one_dtype_and_compiles_each_function_once(monkeypatch):
    """Under autocast with fp32 weights Qwen3 gives fp32 q / k (norms, rotary) and a bf16 v: flex_attention gets all
    three in the autocast dtype (torch 2.8 refuses mixed ones). On CUDA (a stand-in that records torch.compile) the
    block-mask builder and flex_attention are each compiled once a process, dynamic, with dynamo's recompile limit
    raised to cover a run's masks and grad modes."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    import torch._dynamo
    import torch.nn.attention.flex_attention as fa

    model = tiny("qwen3")
    rows = _tree_rows()
    seen = []
    real = fa.flex_attention
    monkeypatch.setattr(fa, "flex_attention", lambda q, k, v, **kw: seen.append((q.dtype, k.dtype, v.dtype)) or real(q, k, v, **kw))
    monkeypatch.setattr(tree_pack, "tree_attention_kind", lambda device: "flex")
    with torch.no_grad(), tree_attention_on(model), torch.autocast("cpu", dtype=torch.bfloat16):
        tree_logprobs(model, *rows)
    assert seen and set(seen) == {(torch.bfloat16,) * 3}
    compiles = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compiles.append((fn, kw)) or fn)
    monkeypatch.setattr(tree_pack, "_COMPILED", {})
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 8)
    for _ in range(3):
        assert tree_pack.compiled(fa.create_block_mask) is fa.create_block_mask
        tree_pack.compiled(real)
    assert compiles == [(fa.create_block_mask, {"dynamic": True}), (real, {"dynamic": True})]
    assert torch._dynamo.config.recompile_limit == tree_pack.FLEX_RECOMPILES >= 2 * 2 * 2 + 1  # masks x grad x warm
