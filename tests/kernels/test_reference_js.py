"""The reference Probe-JS ops against the paper: Eq. 1-2 (floored JS), Eq. 9 (probe-value bound), top-k, probe_js."""

import math

import pytest
import torch
from floor_oracle import belief, floored_pair, js
from hypothesis import given
from hypothesis import strategies as st

from bsb.kernels import reference as ref

LN2 = math.log(2.0)


@st.composite
def beliefs(draw, vocab=16, max_k=8, allow_masked=True):
    """A top-k row: distinct ids from a small vocabulary (so supports overlap), log-probs summing to <= 1."""
    ids = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=max_k, unique=True))
    logits = draw(st.lists(st.floats(-12, 12), min_size=len(ids), max_size=len(ids)))
    tail = draw(st.one_of(st.none(), st.floats(-12, 12)))  # mass outside the top-k
    z = torch.tensor(logits + ([] if tail is None else [tail]), dtype=torch.float64).logsumexp(0)
    logp = torch.tensor(logits, dtype=torch.float64) - z
    if allow_masked and len(ids) > 1:
        masked = draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
        masked[draw(st.integers(0, len(ids) - 1))] = False  # keep the support non-empty
        logp[torch.tensor(masked)] = float("-inf")
    order = torch.argsort(logp, descending=True)
    return logp[order].float(), torch.tensor(ids)[order]


def _js(a, b):
    return float(ref.floored_js(a[0], a[1], b[0], b[1]))


@given(beliefs(), beliefs())
def test_floored_js_matches_independent_transcription_of_eq1_eq2(a, b):
    pa, pb = floored_pair(belief(*a), belief(*b))
    assert _js(a, b) == pytest.approx(js(pa, pb), abs=2e-6)


@given(beliefs(), beliefs())
def test_floored_js_symmetric_and_bounded(a, b):
    s = _js(a, b)
    assert 0.0 <= s <= LN2
    assert s == pytest.approx(_js(b, a), abs=1e-6)


@given(beliefs())
def test_floored_js_zero_for_identical_beliefs(a):
    assert _js(a, a) == 0.0


@given(beliefs(), beliefs(), st.randoms(use_true_random=False))
def test_floored_js_invariant_to_entry_order(a, b, rnd):
    perm_a = torch.tensor(rnd.sample(range(len(a[1])), len(a[1])))
    perm_b = torch.tensor(rnd.sample(range(len(b[1])), len(b[1])))
    shuffled = _js((a[0][perm_a], a[1][perm_a]), (b[0][perm_b], b[1][perm_b]))
    assert shuffled == pytest.approx(_js(a, b), abs=1e-6)


@given(st.lists(st.floats(-8, 8), min_size=1, max_size=8), st.lists(st.floats(-8, 8), min_size=8, max_size=8))
def test_floored_js_is_plain_js_on_a_shared_full_support(la, lb):
    """Same support, both summing to 1: the floor never applies and Eq. 1 is the textbook JS."""
    k = len(la)
    ids = torch.arange(k)
    pa = torch.log_softmax(torch.tensor(la, dtype=torch.float64), 0)
    pb = torch.log_softmax(torch.tensor(lb[:k], dtype=torch.float64), 0)
    m = 0.5 * (pa.exp() + pb.exp())
    plain = 0.5 * (pa.exp() * (pa - m.log())).sum() + 0.5 * (pb.exp() * (pb - m.log())).sum()
    got = ref.floored_js(pa.float(), ids, pb.float(), ids.flip(0).flip(0))
    assert float(got) == pytest.approx(float(plain), abs=2e-6)


@given(beliefs(), beliefs())
def test_probe_value_bound_eq9(a, b):
    """|p̃_b(v) − p̃_a(v)| ≤ sqrt(2·JS) for every token v of the union, on the floored beliefs (App. C)."""
    pa, pb = floored_pair(belief(*a), belief(*b))
    bound = math.sqrt(2 * _js(a, b))
    for v in pa:
        assert abs(pb[v] - pa[v]) <= bound + 1e-5


def test_floor_disjoint_supports_by_hand():
    # a = {0: .5, 1: .5}, b = {2: .5, 3: .5}: floors .25, so p̃_a = (1/3, 1/3, 1/6, 1/6) and p̃_b its mirror.
    h = math.log(0.5)
    got = ref.floored_js(torch.tensor([h, h]), torch.tensor([0, 1]), torch.tensor([h, h]), torch.tensor([2, 3]))
    want = 2 / 3 * math.log(4 / 3) + 1 / 3 * math.log(2 / 3)
    assert float(got) == pytest.approx(want, abs=1e-7)


def test_floor_one_shared_token_by_hand():
    # a = {0: .6, 1: .3} floors token 2 at .15; b = {0: .6, 2: .2} floors token 1 at .1.
    la = torch.tensor([0.6, 0.3]).log()
    lb = torch.tensor([0.6, 0.2]).log()
    got = ref.floored_js(la, torch.tensor([0, 1]), lb, torch.tensor([0, 2]))
    pa = [0.6 / 1.05, 0.3 / 1.05, 0.15 / 1.05]
    pb = [0.6 / 0.9, 0.1 / 0.9, 0.2 / 0.9]
    want = sum(0.5 * p * math.log(2 * p / (p + q)) + 0.5 * q * math.log(2 * q / (p + q)) for p, q in zip(pa, pb))
    assert float(got) == pytest.approx(want, abs=1e-7)


def test_masked_entries_are_not_in_the_support():
    """-inf entries are probability 0: they neither join the union nor set the floor."""
    lp = torch.tensor([0.7, 0.3, 0.0]).log()  # last entry is -inf
    same = ref.floored_js(lp, torch.tensor([0, 1, 2]), lp, torch.tensor([0, 1, 5]))
    assert float(same) == 0.0
    # A masked token that the other side does have counts as the other side's extra token.
    a = ref.floored_js(lp, torch.tensor([0, 1, 2]), torch.tensor([0.7, 0.2, 0.1]).log(), torch.tensor([0, 1, 2]))
    pa, pb = floored_pair({0: 0.7, 1: 0.3}, {0: 0.7, 1: 0.2, 2: 0.1})
    assert float(a) == pytest.approx(js(pa, pb), abs=1e-7)


def test_floored_js_batched_leading_dims_and_unequal_k():
    la, ia = ref.topk_logprobs(torch.randn(2, 3, 50), 5)
    lb, ib = ref.topk_logprobs(torch.randn(2, 3, 50), 7)
    out = ref.floored_js(la, ia, lb, ib)
    assert out.shape == (2, 3) and out.dtype == torch.float32
    for i in range(2):
        for j in range(3):
            pa, pb = floored_pair(belief(la[i, j], ia[i, j]), belief(lb[i, j], ib[i, j]))
            assert float(out[i, j]) == pytest.approx(js(pa, pb), abs=2e-6)


def test_floored_js_underflow_safe():
    """Tiny but non-zero support probabilities must not underflow the floor to 0 (logp ~ -150)."""
    la = torch.tensor([-150.0, -151.0])
    lb = torch.tensor([-150.0, -153.0])
    got = ref.floored_js(la, torch.tensor([0, 1]), lb, torch.tensor([0, 2]))
    pa, pb = floored_pair({0: 1.0, 1: math.exp(-1)}, {0: 1.0, 2: math.exp(-3)})  # only ratios matter
    assert float(got) == pytest.approx(js(pa, pb), abs=1e-6)
    assert float(got) > 0


# ---------------------------------------------------------------------------------------------------- top-k


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 1e-6), (torch.bfloat16, 1e-6)])
@pytest.mark.parametrize("shape,k", [((7,), 1), ((3, 257), 20), ((2, 2, 64), 64)])
def test_topk_logprobs_agrees_with_log_softmax_and_sort(shape, k, dtype, tol):
    x = (torch.randn(shape) * 3).to(dtype)
    logp, idx = ref.topk_logprobs(x, k)
    full = torch.log_softmax(x.float(), -1)
    want = full.sort(-1, descending=True).values[..., :k]
    assert logp.dtype == torch.float32 and idx.dtype == torch.int64
    assert logp.shape == idx.shape == (*shape[:-1], k)
    torch.testing.assert_close(logp, want, atol=tol, rtol=0)
    torch.testing.assert_close(full.gather(-1, idx), logp, atol=0, rtol=0)


def test_topk_ties_go_to_the_lower_token_id_and_masked_tokens_last():
    x = torch.tensor([[1.0, 3.0, 3.0, float("-inf"), 3.0, 0.0]])
    logp, idx = ref.topk_logprobs(x, 6)
    assert idx.tolist() == [[1, 2, 4, 0, 5, 3]]
    assert logp[0, -1] == float("-inf")
    assert logp[0, 0] == pytest.approx(3.0 - math.log(3 * math.e**3 + math.e + 1), abs=1e-6)


# ---------------------------------------------------------------------------------------------------- probe_js


def test_probe_js_fork_before_and_chain_ends():
    logits = torch.randn(7, 40) * 2
    chains = torch.tensor([4, 4, 4, 9, 9, 2, 2])
    scores = ref.probe_js(logits, chains, k=5)
    lp, ix = ref.topk_logprobs(logits, 5)
    for i in range(6):
        if chains[i] == chains[i + 1]:
            assert scores[i] == ref.floored_js(lp[i], ix[i], lp[i + 1], ix[i + 1])
        else:
            assert torch.isnan(scores[i])
    assert torch.isnan(scores[-1])


def test_probe_js_averages_over_read_positions():
    logits = torch.randn(3, 4, 30)
    scores = ref.probe_js(logits, torch.zeros(3, dtype=torch.long), k=6)
    per_pos = [ref.probe_js(logits[:, pos], torch.zeros(3, dtype=torch.long), k=6) for pos in range(4)]
    torch.testing.assert_close(scores[:2], torch.stack(per_pos).mean(0)[:2])
    assert torch.isnan(scores[2])


def test_probe_js_single_row_and_one_row_chains():
    assert torch.isnan(ref.probe_js(torch.randn(1, 10), torch.tensor([0]), k=3)).all()
    assert torch.isnan(ref.probe_js(torch.randn(3, 10), torch.tensor([0, 1, 2]), k=3)).all()


def test_probe_js_detects_a_belief_shift():
    """A chain whose answer belief flips between boundaries 2 and 3 scores highest at boundary 2 (fork-before)."""
    logits = torch.full((5, 12), -4.0)
    logits[:3, 7] = 6.0  # believes token 7
    logits[3:, 2] = 6.0  # then token 2
    logits += 0.1 * torch.randn_like(logits)
    scores = ref.probe_js(logits, torch.zeros(5, dtype=torch.long), k=4)
    assert int(torch.nan_to_num(scores, nan=-1).argmax()) == 2
