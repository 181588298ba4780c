"""The chunked linear + logsumexp training log-probs against the full-logits reference: values and gradients, odd
chunk sizes, bf16 autocast, bad input."""

import pytest
import torch

from bsb.kernels import reference as ref
from bsb.kernels.linear_logprob import linear_token_logprobs


def _inputs(n=37, d=16, v=101, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, requires_grad=True)
    w = (torch.randn(v, d, generator=g) * 0.5).requires_grad_()
    t = torch.randint(0, v, (n,), generator=g)
    return h, w, t


@pytest.mark.parametrize("row_chunk,vocab_chunk", [(4096, 4096), (5, 7), (1, 101), (37, 1), (8, 50)])
def test_values_and_gradients_match_the_full_logits(row_chunk, vocab_chunk):
    h, w, t = _inputs()
    upstream = torch.randn(h.shape[0])
    want = ref.linear_token_logprobs(h, w, t)
    gh, gw = torch.autograd.grad((want * upstream).sum(), (h, w))
    got = linear_token_logprobs(h, w, t, row_chunk, vocab_chunk)
    ch, cw = torch.autograd.grad((got * upstream).sum(), (h, w))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ch, gh, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(cw, gw, atol=1e-5, rtol=1e-4)


def test_bf16_autocast_stays_within_bf16_rounding():
    h, w, t = _inputs(n=64, d=64, v=257, seed=1)
    want = ref.linear_token_logprobs(h, w, t)
    gh, gw = torch.autograd.grad(want.sum(), (h, w))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = linear_token_logprobs(h, w, t, 16, 64)
        ch, cw = torch.autograd.grad(got.sum(), (h, w))
    assert got.dtype == torch.float32 and ch.dtype == h.dtype and cw.dtype == w.dtype  # fp32 master gradients
    torch.testing.assert_close(got, want, atol=0.15, rtol=0.02)  # bf16 logits: ~3 significant digits of |z| up to ~20
    assert torch.nn.functional.cosine_similarity(ch.flatten(), gh.flatten(), dim=0) > 0.99
    assert torch.nn.functional.cosine_similarity(cw.flatten(), gw.flatten(), dim=0) > 0.99


def test_masked_vocabulary_and_a_single_token():
    h, w, t = _inputs(n=1, v=3)
    got = linear_token_logprobs(h, w, t, 1, 1)
    torch.testing.assert_close(got, ref.linear_token_logprobs(h, w, t))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda h, w, t: linear_token_logprobs(h, w[:, :5], t), "disagree on d"),
        (lambda h, w, t: linear_token_logprobs(h, w, t + 1000), r"targets must lie in \[0, V=101\)"),
        (lambda h, w, t: linear_token_logprobs(h, w, t[:3]), "targets must be"),
        (lambda h, w, t: linear_token_logprobs(h, w, t, 0, 4), "row_chunk and vocab_chunk"),
    ],
)
def test_bad_input(call, match):
    h, w, t = _inputs()
    with pytest.raises(ValueError, match=match):
        call(h, w, t)


def test_the_chunk_loops_make_no_host_sync(monkeypatch):
    """Each nonzero / item / tolist / bool / int of a device tensor waits for the device: none inside the forward and
    backward chunk loops, however many chunks (the call's input check makes its one sync before them)."""
    from bsb.kernels.linear_logprob import _LinearTokenLogprob

    h, w, t = _inputs(n=37, v=101)
    calls = []
    for name in ("nonzero", "item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor,
            name,
            lambda self, *a, _real=real, _name=name, **k: calls.append(_name) or _real(self, *a, **k),
        )
    monkeypatch.setattr(
        torch, "nonzero", lambda *a, **k: calls.append("torch.nonzero") or torch.Tensor.nonzero(*a, **k)
    )
    got = _LinearTokenLogprob.apply(h, w, t, 5, 7)  # 8 row chunks x 15 vocabulary chunks
    got.sum().backward()
    assert calls == []
    monkeypatch.undo()
    torch.testing.assert_close(got, ref.linear_token_logprobs(h, w, t), atol=1e-5, rtol=1e-5)


def test_the_call_checks_its_targets_with_one_host_sync(monkeypatch):
    h, w, t = _inputs()
    calls = []
    real = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: calls.append(1) or real(self))
    monkeypatch.setattr(torch.Tensor, "nonzero", lambda *a, **k: pytest.fail("nonzero in the chunk loop"))
    linear_token_logprobs(h, w, t, 5, 7)
    assert calls == [1]
