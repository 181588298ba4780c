"""The stateful prefix-reused reads of a hybrid (Mamba-2 + attention + MLP + MoE) Nemotron-H agree with the paper's
per-candidate re-forward, forward each chain once, and leave the model and the caller's inputs as they were."""

import copy
import types

import pytest
import torch

from bsb.engine import packed
from bsb.engine.stateful import check_stateful, stateful_reads

transformers = pytest.importorskip("transformers")

KINDS = ["linear_attention", "full_attention", "mlp", "linear_attention", "moe", "full_attention"]
# initializer_range 0.2: the SSM state matters to the logits (at HF's default 0.02 zeroing it moves them by ~1e-6, so a
# wrong state would pass); time_step_min 0.05: the chunked scan's dt clamp bites on about a third of the tokens, so a
# one-token continuation (the recurrent step, which does not clamp) shows; chunk_size 8: chunk boundaries fall inside
# the segments
CONFIG = dict(vocab_size=97, hidden_size=64, layers_block_type=KINDS, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, intermediate_size=64, mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=8, n_groups=2,
              conv_kernel=4, chunk_size=8, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
              moe_shared_expert_intermediate_size=32, eos_token_id=1, pad_token_id=0, bos_token_id=2,
              initializer_range=0.2, time_step_min=0.05)
TOL = dict(atol=1e-5, rtol=1e-5)
# the residual stream reaches |h| ≈ 30 in this model; forwarding a chain in segments sums its SSM scan in another
# order, which moves a hidden state by up to 3e-5 (1e-6 of its scale): the 1e-4 bound, for hidden states only
HIDDEN_TOL = dict(atol=1e-4, rtol=1e-5)
_models = {}


def tiny(attn: str):
    if attn not in _models:
        cfg = transformers.NemotronHConfig(**CONFIG)
        cfg._attn_implementation = attn
        torch.manual_seed(0)
        _models[attn] = transformers.NemotronHForCausalLM(cfg).eval()
    return _models[attn]


def ids(n: int, seed: int) -> torch.Tensor:
    return torch.randint(3, 97, (n,), generator=torch.Generator().manual_seed(seed))


def assert_reads_equal(got, want):
    torch.testing.assert_close(got.read_logits, want.read_logits, **TOL)
    for field in ("answer_logits", "answer_hidden"):
        a, b = getattr(got, field), getattr(want, field)
        assert (a is None) == (b is None), field
        if a is not None:
            torch.testing.assert_close(a, b, **(HIDDEN_TOL if field == "answer_hidden" else TOL))


SUFFIX, ANSWER = ids(5, 1), ids(3, 2)
CHAINS = [  # (prefix, cuts, answer): a cut at 1 and at len(prefix), unsorted, repeated and consecutive cuts
    (ids(150, 3), [150, 1, 37, 9, 37, 64, 65, 66, 100, 2, 121, 17, 140, 149, 90, 120]),
    (ids(30, 4), [30]),
    (ids(73, 5), [12, 40, 41, 12, 73, 5]),
    (ids(41, 6), [20, 21]),
]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_chain_segments_reproduce_one_whole_forward(attn):
    """Step 1's premise: forwarding a chain in multi-token segments with transformers' cache gives one whole forward's
    outputs; a one-token continuation does not (the recurrent step skips the chunked scan's dt clamp), which is why
    stateful reads never make one."""
    model, prefix = tiny(attn), ids(60, 7)[None]
    with torch.no_grad():
        whole = model(prefix).logits[0]
        cache, parts, prev = transformers.DynamicCache(config=model.config), [], 0
        for t in (1, 5, 17, 19, 40, 60):  # a one-token prefill, segments across chunk boundaries
            parts.append(model(prefix[:, prev:t], past_key_values=cache, use_cache=True).logits[0])
            prev = t
        torch.testing.assert_close(torch.cat(parts), whole, **TOL)
        cache = transformers.DynamicCache(config=model.config)
        model(prefix[:, :40], past_key_values=cache, use_cache=True)
        one = model(prefix[:, 40:41], past_key_values=cache, use_cache=True).logits[0, -1]
    assert (one - whole[40]).abs().max() > 1e-4  # if transformers clamps there one day, the detour can go


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_stateful_reads_equal_naive_reforward(attn):
    model = tiny(attn)
    got = stateful_reads(model, [(p, c, ANSWER) for p, c in CHAINS], SUFFIX, with_hidden=True)
    for (prefix, cuts), reads in zip(CHAINS, got):
        want = packed.naive_reads(model, prefix, cuts, SUFFIX, ANSWER, with_hidden=True)
        assert_reads_equal(reads, want)
        assert reads.answer_hidden.shape == (len(KINDS), len(cuts), 3, 64)
        assert reads.answer_logits.shape == (len(cuts), 3, 97)


def test_probe_reads_without_answer_and_answer_logits_without_hidden():
    model = tiny("eager")
    prefix, cuts = CHAINS[2]
    got = stateful_reads(model, [(prefix, cuts)], SUFFIX)[0]
    assert_reads_equal(got, packed.naive_reads(model, prefix, cuts, SUFFIX))
    assert got.answer_hidden is None and got.answer_logits is None
    got = stateful_reads(model, [(prefix, cuts, ANSWER)], SUFFIX)[0]
    assert_reads_equal(got, packed.naive_reads(model, prefix, cuts, SUFFIX, ANSWER))
    assert got.answer_hidden is None


def test_token_forwards_are_the_chain_once_plus_every_suffix():
    model = tiny("eager")
    prefix = ids(120, 8)
    cuts = [110, 7, 30, 55, 80, 96, 3, 64, 14, 41, 73, 88, 101, 20, 47, 117]  # no two consecutive
    got = stateful_reads(model, [(prefix, cuts, ANSWER)], SUFFIX, with_hidden=True)[0]
    want = packed.naive_reads(model, prefix, cuts, SUFFIX, ANSWER, with_hidden=True)
    assert got.token_forwards == max(cuts) + len(cuts) * (5 + 3 - 1)  # E + n − 1: not the last answer token
    assert want.token_forwards == sum(cuts) + len(cuts) * (5 + 3)
    assert got.token_forwards < want.token_forwards / 4
    # a cut one past the previous one is read from the previous cut's state through one more token (only that row
    # one wider); a one-token suffix is padded to two
    consecutive = stateful_reads(model, [(prefix, [20, 21], ANSWER)], SUFFIX)[0]
    assert consecutive.token_forwards == 20 + (5 + 2) + (5 + 2 + 1)
    mixed = stateful_reads(model, [(prefix, [60, 20, 21, 90, 61], ANSWER)], SUFFIX, max_rows=2)[0]
    assert mixed.token_forwards == 90 + 3 * (5 + 2) + 2 * (5 + 2 + 1)
    assert_reads_equal(mixed, packed.naive_reads(model, prefix, [60, 20, 21, 90, 61], SUFFIX, ANSWER))
    short = stateful_reads(model, [(prefix, [9, 50])], SUFFIX[:1])[0]
    assert short.token_forwards == 50 + 2 * 2
    assert_reads_equal(short, packed.naive_reads(model, prefix, [9, 50], SUFFIX[:1]))


def test_one_cut_chain_leaves_model_and_inputs_unchanged():
    model = tiny("sdpa")
    weights = copy.deepcopy(model.state_dict())
    prefix, cuts, suffix, answer = ids(30, 9), [30], SUFFIX.clone(), ANSWER.clone()
    chains = [(prefix, cuts, answer)]
    got = stateful_reads(model, chains, suffix, with_hidden=True)[0]
    assert_reads_equal(got, packed.naive_reads(model, ids(30, 9), [30], SUFFIX, ANSWER, with_hidden=True))
    assert got.token_forwards == 30 + 7
    assert torch.equal(prefix, ids(30, 9)) and cuts == [30] and chains == [(prefix, [30], answer)]
    assert torch.equal(suffix, SUFFIX) and torch.equal(answer, ANSWER)
    for name, value in model.state_dict().items():
        assert torch.equal(value, weights[name]), name
    assert not model.training


def test_max_rows_chunks_give_the_same_reads():
    model = tiny("eager")
    prefix, cuts = CHAINS[0]
    whole = stateful_reads(model, [(prefix, cuts, ANSWER)], SUFFIX, with_hidden=True)[0]
    for max_rows in (1, 5):
        chunked = stateful_reads(model, [(prefix, cuts, ANSWER)], SUFFIX, with_hidden=True, max_rows=max_rows)[0]
        assert_reads_equal(chunked, whole)
        assert chunked.token_forwards == whole.token_forwards


def test_refuses_what_it_cannot_carry():
    model = tiny("eager")
    with pytest.raises(ValueError, match="with_hidden needs the committed answer"):
        stateful_reads(model, [(ids(20, 1), [5])], SUFFIX, with_hidden=True)
    with pytest.raises(ValueError, match="every cut must be in"):
        stateful_reads(model, [(ids(20, 1), [21])], SUFFIX)
    with pytest.raises(ValueError, match="max_rows"):
        stateful_reads(model, [(ids(20, 1), [5])], SUFFIX, max_rows=0)
    sliding = types.SimpleNamespace(config=types.SimpleNamespace(layer_types=["sliding_attention"]))
    with pytest.raises(ValueError, match="sliding_attention"):
        check_stateful(sliding)
    flash = types.SimpleNamespace(config=types.SimpleNamespace(layer_types=KINDS, _attn_implementation="flash"))
    with pytest.raises(ValueError, match="eager or sdpa"):
        check_stateful(flash)


def test_a_long_chain_is_read_a_few_rows_at_a_time(monkeypatch):
    """Every row of a batched read holds its own copy of the chain's keys and values: the rows of one forward hold at
    most KV_ROW_TOKENS cached positions (a 26k-token chain is read 2 rows at a time), and the reads do not change."""
    import bsb.engine.stateful as S

    model = tiny("eager")
    prefix, cuts = ids(120, 8), [110, 7, 30, 55, 80, 96]
    want = stateful_reads(model, [(prefix, cuts, ANSWER)], SUFFIX)[0]
    batches = []
    real = S._rows
    monkeypatch.setattr(S, "_rows", lambda m, p, ts, *a: batches.append(len(ts)) or real(m, p, ts, *a))
    monkeypatch.setattr(S, "KV_ROW_TOKENS", 2 * 110)
    got = stateful_reads(model, [(prefix, cuts, ANSWER)], SUFFIX)[0]
    assert batches == [2, 2, 2] and got.token_forwards == want.token_forwards
    assert_reads_equal(got, want)
