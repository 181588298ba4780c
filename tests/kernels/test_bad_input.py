"""Every input error a user can cause raises one ValueError naming the argument (shared by all implementations)."""

import pytest
import torch

from bsb.kernels import reference as ref

NAN, NINF, INF = float("nan"), float("-inf"), float("inf")


def _row(*vals):
    return torch.tensor(vals).log()


GOOD_LP, GOOD_IX = _row(0.6, 0.3), torch.tensor([0, 1])

CASES = [
    # (callable, match)
    (lambda: ref.topk_logprobs(torch.randn(4, 10), k=0), "k must be >= 1"),
    (lambda: ref.topk_logprobs(torch.randn(4, 10), k=11), "k=11 exceeds the vocabulary size 10"),
    (lambda: ref.topk_logprobs(torch.randn(4, 10), k=2.0), "k must be an int"),
    (lambda: ref.topk_logprobs(torch.tensor([[0.0, NAN]]), k=1), "logits contains NaN"),
    (lambda: ref.topk_logprobs(torch.tensor([[0.0, INF]]), k=1), r"logits contains \+inf"),
    (lambda: ref.topk_logprobs(torch.tensor([[NINF, NINF]]), k=1), "every entry is -inf"),
    (lambda: ref.topk_logprobs(torch.arange(5), k=1), "floating-point"),
    (lambda: ref.topk_logprobs(torch.empty(0, 5), k=1), "empty"),
    (lambda: ref.topk_logprobs([0.0, 1.0], k=1), "must be a torch.Tensor"),
    (lambda: ref.floored_js(GOOD_LP, torch.tensor([3, 3]), GOOD_LP, GOOD_IX), "idx_a repeats a token id"),
    (lambda: ref.floored_js(GOOD_LP, GOOD_IX, GOOD_LP, torch.tensor([1, 1])), "idx_b repeats a token id"),
    (lambda: ref.floored_js(torch.tensor([NAN, -1.0]), GOOD_IX, GOOD_LP, GOOD_IX), "logp_a contains NaN"),
    (lambda: ref.floored_js(GOOD_LP, GOOD_IX, torch.tensor([0.5, -1.0]), GOOD_IX), "logp_b must hold log-probabilities"),
    (lambda: ref.floored_js(GOOD_LP, GOOD_IX, torch.tensor([NINF, NINF]), GOOD_IX), "logp_b has a row whose support is empty"),
    (lambda: ref.floored_js(GOOD_LP, GOOD_IX.float(), GOOD_LP, GOOD_IX), "idx_a must be an integer tensor"),
    (lambda: ref.floored_js(GOOD_LP, torch.tensor([0, 1, 2]), GOOD_LP, GOOD_IX), "idx_a has shape"),
    (lambda: ref.floored_js(GOOD_LP[None], GOOD_IX[None], GOOD_LP, GOOD_IX), "share their leading dimensions"),
    (lambda: ref.probe_js(torch.randn(3, 10), torch.tensor([0, 1, 0]), k=2), "contiguous"),
    (lambda: ref.probe_js(torch.randn(3, 10), torch.tensor([0, 0]), k=2), r"chain_index must have shape \(3,\)"),
    (lambda: ref.probe_js(torch.randn(3, 10), torch.tensor([0.0, 0.0, 0.0]), k=2), "chain_index must be an integer"),
    (lambda: ref.probe_js(torch.randn(10), torch.tensor([0]), k=2), "logits must have 2..3 dimensions"),
    (lambda: ref.probe_js(torch.randn(2, 10), torch.tensor([0, 0]), k=20), "k=20 exceeds the vocabulary size 10"),
    (lambda: ref.lens_logprobs(torch.randn(2, 3, 8), torch.ones(8), torch.randn(20, 8), torch.tensor([0, 1, 20])), r"targets holds ids outside \[0, 20\)"),
    (lambda: ref.lens_logprobs(torch.randn(2, 3, 8), torch.ones(7), torch.randn(20, 8), torch.tensor([0, 1, 2])), r"norm_weight must have shape \(8,\)"),
    (lambda: ref.lens_logprobs(torch.randn(2, 3, 8), torch.ones(8), torch.randn(20, 7), torch.tensor([0, 1, 2])), r"unembed must have shape \(V, 8\)"),
    (lambda: ref.lens_logprobs(torch.randn(3, 8), torch.ones(8), torch.randn(20, 8), torch.tensor([0, 1, 2])), "hidden must have 3 dimensions"),
    (lambda: ref.lens_logprobs(torch.randn(2, 3, 8), torch.ones(8), torch.randn(20, 8), torch.tensor([0, 1])), r"targets must have shape \(3,\)"),
    (lambda: ref.lens_logprobs(torch.randn(2, 3, 8), torch.ones(8), torch.randn(20, 8), torch.tensor([0, 1, 2]), norm="batch"), "norm must be 'rms' or 'layer'"),
    (lambda: ref.lens_logprobs(torch.randn(2, 3, 8), torch.ones(8), torch.randn(20, 8), torch.tensor([0, 1, 2]), norm_bias=torch.zeros(8)), "norm_bias is only used"),
    (lambda: ref.lens_logprobs(torch.full((2, 3, 8), NAN), torch.ones(8), torch.randn(20, 8), torch.tensor([0, 1, 2])), "hidden contains NaN or inf"),
    (lambda: ref.lens_logprobs(torch.randn(2, 3, 8), torch.ones(8), torch.randn(20, 8).index_fill(0, torch.tensor([7]), NAN), torch.tensor([0, 1, 2])), "unembed contains NaN or inf"),
    (lambda: ref.lens_logprobs(torch.randn(2, 3, 8), torch.ones(8).index_fill(0, torch.tensor([2]), INF), torch.randn(20, 8), torch.tensor([0, 1, 2])), "norm_weight contains NaN or inf"),
    (lambda: ref.lens_readouts(torch.tensor([[0.0, NINF]])), "profiles must be finite"),
    (lambda: ref.lens_readouts(torch.randn(4)), "profiles must have 2 dimensions"),
    (lambda: ref.lens_readouts(torch.randn(3, 4), eps=-1.0), "eps must be a non-negative"),
    (lambda: ref.surprisal_entropy(torch.randn(3, 10), torch.tensor([0, 1, 10])), r"tokens holds ids outside \[0, 10\)"),
    (lambda: ref.surprisal_entropy(torch.randn(3, 10), torch.tensor([0, 1])), r"tokens must have shape \(3,\)"),
    (lambda: ref.logit_margin(torch.randn(3, 1)), "at least 2"),
]


@pytest.mark.parametrize("call,match", CASES, ids=[c[1][:40] for c in CASES])
def test_bad_input_raises_value_error_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
