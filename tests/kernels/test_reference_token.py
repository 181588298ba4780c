"""The reference per-token baseline reads: surprisal / entropy and the top-1 − top-2 logit margin."""

import math

import pytest
import torch

from bsb.kernels import reference as ref


@pytest.mark.parametrize("shape", [(5,), (3, 257), (2, 4, 31)])
def test_surprisal_entropy_agree_with_categorical(shape):
    logits = torch.randn(shape) * 2
    tokens = torch.randint(0, shape[-1], shape[:-1])
    s, h = ref.surprisal_entropy(logits, tokens)
    dist = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(s, -dist.log_prob(tokens))
    torch.testing.assert_close(h, dist.entropy())


def test_surprisal_entropy_masked_tokens():
    logits = torch.tensor([[0.0, 0.0, float("-inf"), 0.0]])
    s, h = ref.surprisal_entropy(logits, torch.tensor([0]))
    assert s[0] == pytest.approx(math.log(3)) and h[0] == pytest.approx(math.log(3))
    s_masked, _ = ref.surprisal_entropy(logits, torch.tensor([2]))
    assert s_masked[0] == float("inf")


def test_logit_margin_by_hand():
    logits = torch.tensor([[1.0, 4.0, 2.5, 4.0], [0.0, 3.0, 1.0, -2.0], [float("-inf"), 1.0, float("-inf"), float("-inf")]])
    assert ref.logit_margin(logits).tolist() == [0.0, 2.0, float("inf")]
    assert ref.logit_margin(logits.to(torch.bfloat16)).dtype == torch.float32
