"""The C++ row kernels on every instruction set this CPU has (scalar, AVX2, AVX-512) and on their edge paths:
block boundaries, a max that jumps by more than the fused pass's slack, rows that start fully masked, sorted
(adversarial) rows for the top-k buffer, and bf16 / fp16 widening. Every long-row sum (log-sum-exp, entropy, JS) is
held to the float64 value (tests/support/exact.py), not to one CPU's float32 rounding of it."""

import pytest
import torch
from exact import exact

from bsb.kernels import reference as ref

cpu_probe = pytest.importorskip("bsb.kernels.cpu_probe", reason="bsb._C is not built")
_C = cpu_probe._C
BLOCK = 2048  # kBlock in csrc/probe.cpp


@pytest.fixture(params=["scalar", "avx2", "avx512"])
def isa(request):
    before = _C.isa()
    if not _C.set_isa(request.param):
        pytest.skip(f"this CPU has no {request.param}")
    yield request.param
    _C.set_isa(before)


def _rows():
    g = torch.Generator().manual_seed(3)
    rows = {}
    for v in (1, 15, 16, 17, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 7, 262_144):
        rows[f"V={v}"] = torch.randn(3, v, generator=g) * 4
    jump = torch.randn(2, 3 * BLOCK, generator=g)
    jump[:, 2 * BLOCK + 5] = 200.0  # > 60 above the running max: the block is redone at the new max
    rows["max jump"] = jump
    late = torch.full((2, 3 * BLOCK), float("-inf"))
    late[:, BLOCK + 3 :] = torch.randn(2, 2 * BLOCK - 3, generator=g)  # fully masked first block
    rows["masked first block"] = late
    rows["ascending"] = torch.randn(2, 5000, generator=g).sort(-1).values
    rows["descending"] = torch.randn(2, 5000, generator=g).sort(-1, descending=True).values
    ties = torch.randint(0, 3, (2, 4000), generator=g).float()
    rows["many ties"] = ties
    return rows


ROWS = _rows()


@pytest.mark.parametrize("name", list(ROWS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_topk_surprisal_margin_on_every_isa(isa, name, dtype):
    x = ROWS[name].to(dtype)
    v = x.shape[-1]
    k = min(20, v)
    lp, idx = cpu_probe.topk_logprobs(x, k)
    rlp, ridx = exact("topk_logprobs", x, k)
    assert idx.tolist() == ridx.tolist() == ref.topk_logprobs(x, k)[1].tolist()  # the ranking is the logits' own
    torch.testing.assert_close(lp, rlp, atol=5e-5, rtol=0)
    tokens = torch.randint(0, v, x.shape[:-1])
    tokens[0] = int(x[0].float().argmax())
    sur, ent = cpu_probe.surprisal_entropy(x, tokens)
    rsur, rent = exact("surprisal_entropy", x, tokens)
    torch.testing.assert_close(sur, rsur, atol=5e-5, rtol=1e-5)
    torch.testing.assert_close(ent, rent, atol=1e-4, rtol=1e-5)
    if v >= 2:
        torch.testing.assert_close(cpu_probe.logit_margin(x), ref.logit_margin(x), atol=0, rtol=0)


def test_probe_js_on_every_isa(isa):
    x = torch.randn(9, 2, 3 * BLOCK + 5) * 3
    chains = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2])
    want = exact("probe_js", x, chains, 20)
    torch.testing.assert_close(cpu_probe.probe_js(x, chains, 20), want, atol=2e-5, rtol=1e-4, equal_nan=True)


def test_nan_wins_over_inf_like_the_reference(isa):
    x = torch.randn(2, 3000)
    x[0, 2500] = float("inf")
    x[1, 10] = float("nan")
    for fn in (lambda t: cpu_probe.topk_logprobs(t, 3), ref.logit_margin, cpu_probe.logit_margin):
        with pytest.raises(ValueError, match="contains NaN"):
            fn(x)


def test_non_contiguous_chains_rejected_by_the_kernel():
    with pytest.raises(ValueError, match="contiguous"):
        cpu_probe.probe_js(torch.randn(4, 50), torch.tensor([0, 1, 1, 0]), 5)


def test_bsb_cpu_isa_caps_the_choice_at_load(tmp_path):
    import subprocess
    import sys

    code = "import bsb._C as c; print(c.isa())"
    out = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, "BSB_CPU_ISA": "scalar"}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "scalar"
