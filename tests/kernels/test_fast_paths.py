"""Every fast implementation against the reference, on odd shapes, masked vocabularies, ties and every dtype.

Providers: ``cpp`` (the C++ extension and the chunked CPU lens), ``triton`` under ``TRITON_INTERPRET=1`` on CPU
tensors (small shapes: the interpreter runs tiles as numpy arrays), and ``triton`` on a GPU when one is present.
Every comparison is against the exact value, the reference run in float64 (tests/support/exact.py): a float32
reference over V=151,936 is itself 1.7e-5 (log-probs) to 2.5e-4 nats (entropy, V=262,144) off it, by an amount that
depends on the CPU's vector width. The tolerances are the fast paths' own; the C++ top-k is also held at 2e-6.
"""

import functools
import importlib
import os

import pytest
import torch
from exact import exact

from bsb.kernels import reference as ref
from bsb.kernels.checks import raise_status
from bsb.kernels.dispatch import PROVIDERS as PROVIDERS_BY_NAME

HAS_CUDA = torch.cuda.is_available()
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _load(module):
    """A provider module that does not import is a failure, not a skip: `make` builds the C++ extension and the test
    extras install Triton, so a broken module must not pass silently."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        pytest.fail(f"{module} does not import: {err}")


class Provider:
    def __init__(self, name, device, modules, small):
        self.name, self.device, self.modules, self.small = name, device, modules, small

    def op(self, name):
        if name == "probe_js_deferred":  # what bsb.kernels.probe_js_deferred calls: the provider's probe_js, deferred
            return functools.partial(self.op("probe_js"), defer_errors=True)
        if name not in self.modules:
            pytest.skip(f"{self.name} has no {name}")
        return getattr(_load(self.modules[name]), name)


CPP, TRITON = PROVIDERS_BY_NAME["cpp"], PROVIDERS_BY_NAME["triton"]

PROVIDERS = [
    pytest.param(Provider("cpp", "cpu", CPP, small=False), id="cpp"),
    pytest.param(
        Provider("triton-interpreter", "cpu", TRITON, small=True),
        id="triton-interp",
        marks=pytest.mark.skipif(not INTERPRET, reason="TRITON_INTERPRET=1 is not set (a GPU is present)"),
    ),
    pytest.param(
        Provider("triton-gpu", "cuda", TRITON, small=False),
        id="triton-gpu",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA or INTERPRET, reason="needs a CUDA GPU")],
    ),
]

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(params=PROVIDERS)
def prov(request):
    return request.param


def _logits(shape, dtype, device, mask_frac=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    if mask_frac:
        x[torch.rand(shape, generator=g) < mask_frac] = float("-inf")
        x[..., 0] = 1.0  # keep every row unmasked somewhere
    return x.to(dtype).to(device)


def assert_same_topk(got, want_logits, k):
    """Values match the reference; ids match except inside groups of (near-)equal reference values."""
    lp, idx = (t.cpu() for t in got)
    rlp, ridx = exact("topk_logprobs", want_logits.cpu(), k)
    torch.testing.assert_close(lp, rlp, atol=5e-5, rtol=0, equal_nan=True)
    full = torch.log_softmax(want_logits.cpu().double(), -1)
    differ = idx != ridx
    if differ.any():  # only legitimate where the reference cannot tell the two tokens apart
        a, b = full.gather(-1, idx)[differ], full.gather(-1, ridx)[differ]
        finite = torch.isfinite(a) | torch.isfinite(b)
        assert ((a - b).abs()[finite] <= 1e-6).all(), "fast top-k chose different tokens than the reference"
    assert (idx.sort(-1).values.diff(dim=-1) != 0).all(), "duplicate ids in a top-k row"


def _shapes(prov, big, small):
    return small if prov.small else big


# ------------------------------------------------------------------------------------------------- top-k


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", range(4))
def test_topk_logprobs_matches_reference(prov, dtype, case):
    v, n, k, mask = _shapes(
        prov,
        [(20, 7, 20, 0.0), (257, 2, 20, 0.3), (50_257, 7, 20, 0.0), (151_936, 64, 20, 0.01)],
        [(20, 2, 20, 0.0), (257, 2, 20, 0.3), (1_500, 1, 20, 0.0), (64, 3, 64, 0.5)],
    )[case]
    x = _logits((n, v), dtype, prov.device, mask)
    assert_same_topk(prov.op("topk_logprobs")(x, k), x, k)


def test_topk_ties_and_fully_masked_tail(prov):
    x = torch.tensor([[1.0, 3.0, 3.0, float("-inf"), 3.0, 0.0, float("-inf"), 3.0]]).to(prov.device)
    lp, idx = prov.op("topk_logprobs")(x, 8)
    want_lp, want_idx = ref.topk_logprobs(x.cpu(), 8)
    assert idx.cpu().tolist() == want_idx.tolist() == [[1, 2, 4, 7, 0, 5, 3, 6]]
    torch.testing.assert_close(lp.cpu(), want_lp, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "pattern", ["random", "descending", "ascending", "constant", "mostly_masked", "signed_zeros", "quantised"]
)
def test_topk_candidate_and_overflow_paths(prov, pattern):
    """Rows that keep the threshold compaction within its slots (random) and rows that overflow them into the exact
    fallback (a sorted row puts whole tiles above the bound; a constant row ties everywhere), at a vocabulary long
    enough to split across programs."""
    v, n = (4_096, 2) if prov.small else (32_768, 4)
    g = torch.Generator().manual_seed(3)
    x = {"random": lambda: torch.randn(n, v, generator=g) * 3,
         "descending": lambda: torch.linspace(5, -5, v).repeat(n, 1),
         "ascending": lambda: torch.linspace(-5, 5, v).repeat(n, 1),
         "constant": lambda: torch.zeros(n, v),
         "mostly_masked": lambda: torch.where(torch.rand(n, v, generator=g) < 0.999, float("-inf"),
                                              torch.randn(n, v, generator=g)),
         "signed_zeros": lambda: torch.where(torch.rand(n, v, generator=g) < 0.5, 0.0, -0.0) + 0 * torch.zeros(n, v),
         "quantised": lambda: (torch.randn(n, v, generator=g) * 2).round()}[pattern]()
    x[:, 7] = torch.where(torch.isinf(x[:, 7]), torch.tensor(0.0), x[:, 7])  # every row unmasked somewhere
    x = x.to(prov.device)
    assert_same_topk(prov.op("topk_logprobs")(x, 20), x, 20)
    want = exact("probe_js", x.cpu(), torch.zeros(n, dtype=torch.long), 20)
    got = prov.op("probe_js")(x, torch.zeros(n, dtype=torch.long, device=prov.device), 20)
    torch.testing.assert_close(got.cpu(), want, atol=2e-5, rtol=1e-4, equal_nan=True)


def test_topk_leading_dims(prov):
    x = _logits((2, 3, 300), torch.float32, prov.device)
    lp, idx = prov.op("topk_logprobs")(x, 5)
    assert lp.shape == idx.shape == (2, 3, 5) and lp.dtype == torch.float32 and idx.dtype == torch.int64
    assert_same_topk((lp.reshape(6, 5), idx.reshape(6, 5)), x.reshape(6, 300), 5)


def test_cpp_topk_is_within_2e6_of_fp64():
    from bsb.kernels import cpu_probe

    x = _logits((8, 151_936), torch.float32, "cpu")
    truth = torch.log_softmax(x.double(), -1).sort(-1, descending=True).values[:, :20]
    torch.testing.assert_close(cpu_probe.topk_logprobs(x, 20)[0].double(), truth, atol=2e-6, rtol=0)


# ------------------------------------------------------------------------------------------------- probe_js

CHAINS = {
    1: [0], 2: [3, 3], 7: [0, 0, 0, 1, 2, 2, 2], 64: [c for c, n in enumerate([1, 20, 5, 30, 8]) for _ in range(n)]
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", range(4))
def test_probe_js_matches_reference(prov, dtype, case):
    n, n_pos, v, k = _shapes(
        prov,
        [(1, 1, 257, 20), (7, 4, 50_257, 20), (64, 1, 151_936, 20), (2, 4, 20, 20)],
        [(1, 1, 257, 20), (7, 1, 300, 20), (2, 4, 20, 20), (7, 2, 100, 64)],
    )[case]
    shape = (n, v) if n_pos == 1 else (n, n_pos, v)
    # Correlated reads (a slowly drifting belief) make the top-k supports overlap, as real chains do.
    base = _logits(shape, torch.float32, "cpu", 0.05)
    x = (base + 0.7 * _logits(shape, torch.float32, "cpu", seed=1).nan_to_num(0, 0, 0)).to(dtype)
    chains = torch.tensor(CHAINS[n])
    got = prov.op("probe_js")(x.to(prov.device), chains.to(prov.device), k).cpu()
    want = exact("probe_js", x, chains, k)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4, equal_nan=True)
    assert torch.isnan(got).tolist() == torch.isnan(want).tolist()


def test_floored_js_matches_reference_cpp():
    from bsb.kernels import cpu_probe

    la, ia = ref.topk_logprobs(_logits((50, 30), torch.float32, "cpu", 0.3), 12)
    lb, ib = ref.topk_logprobs(_logits((50, 30), torch.float32, "cpu", 0.3, seed=5), 9)
    torch.testing.assert_close(cpu_probe.floored_js(la, ia, lb, ib), ref.floored_js(la, ia, lb, ib),
                               atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------------------------------------------- probe_js_deferred


def _checked(result, device):
    """The scores of a ``probe_js_deferred`` result once its status is checked, as ``ProbeJS.score_many`` does
    (``scores, status = ...``; ``raise_status`` on the copied word). Every provider, for every k, returns the pair."""
    assert isinstance(result, tuple) and len(result) == 2, f"got {type(result).__name__}, not (scores, status)"
    scores, status = result
    assert isinstance(scores, torch.Tensor) and scores.dtype == torch.float32 and scores.device.type == device
    if status is not None:  # left on the device: a 0-d integer word beside the scores
        assert isinstance(status, torch.Tensor) and status.ndim == 0 and status.device.type == device
        assert not status.is_floating_point() and status.dtype != torch.bool
        raise_status(int(status))
    return scores


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", range(3))
def test_probe_js_deferred_matches_reference(prov, dtype, case):
    """Below, at and above the kernels' k limit (64; above it the reference serves the op)."""
    n, n_pos, v, k = _shapes(
        prov,
        [(7, 4, 50_257, 20), (64, 1, 151_936, 64), (7, 2, 300, 100)],
        [(7, 1, 300, 20), (7, 2, 100, 64), (2, 2, 120, 100)],
    )[case]
    shape = (n, v) if n_pos == 1 else (n, n_pos, v)
    base = _logits(shape, torch.float32, "cpu", 0.05)
    x = (base + 0.7 * _logits(shape, torch.float32, "cpu", seed=1).nan_to_num(0, 0, 0)).to(dtype)
    chains = torch.tensor(CHAINS[n])
    got = _checked(prov.op("probe_js_deferred")(x.to(prov.device), chains.to(prov.device), k), prov.device).cpu()
    want = exact("probe_js", x, chains, k)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4, equal_nan=True)
    assert torch.isnan(got).tolist() == torch.isnan(want).tolist()
    eager = prov.op("probe_js")(x.to(prov.device), chains.to(prov.device), k).cpu()
    torch.testing.assert_close(got, eager, atol=0, rtol=0, equal_nan=True)


DEFERRED_BAD = {
    "nan": lambda x, c: (x.index_put_((torch.tensor([1]), torch.tensor([17])), torch.tensor(float("nan"))), c),
    "posinf": lambda x, c: (x.index_put_((torch.tensor([2]), torch.tensor([5])), torch.tensor(float("inf"))), c),
    "masked_row": lambda x, c: (x.index_fill_(0, torch.tensor([0]), float("-inf")), c),
    "chain_order": lambda x, c: (x, torch.tensor([0, 1, 0])),
    "nan_and_chain_order": lambda x, c: (x.index_fill_(0, torch.tensor([2]), float("nan")), torch.tensor([0, 1, 0])),
    "posinf_and_masked_row": lambda x, c: (x.index_fill_(0, torch.tensor([0]), float("-inf")).index_put_(
        (torch.tensor([2]), torch.tensor([5])), torch.tensor(float("inf"))), c),
    "chain_shape": lambda x, c: (x, c[:2]),
    "k_too_large": lambda x, c: (x[:, :3].contiguous(), c),
}


@pytest.mark.parametrize("k", [4, 100])
@pytest.mark.parametrize("bad", list(DEFERRED_BAD))
def test_probe_js_deferred_errors_are_the_probe_js_errors(prov, bad, k):
    """Every input error of probe_js, whether the deferred op raises it at once or returns it in the status word,
    surfaces once the status is checked as the same ValueError, word for word (the reference's order first)."""
    x, chains = DEFERRED_BAD[bad](_logits((3, 120), torch.float32, "cpu"), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError) as want:
        ref.probe_js(x, chains, k)
    with pytest.raises(ValueError) as eager:
        prov.op("probe_js")(x.to(prov.device), chains.to(prov.device), k)
    with pytest.raises(ValueError) as deferred:
        _checked(prov.op("probe_js_deferred")(x.to(prov.device), chains.to(prov.device), k), prov.device)
    assert str(deferred.value) == str(eager.value) == str(want.value)


# ------------------------------------------------------------------------------------------------- lens

LENS_TOL = {torch.float32: 2e-4, torch.bfloat16: 0.15, torch.float16: 2e-2}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("norm", ["rms", "layer"])
@pytest.mark.parametrize("case", range(2))
def test_lens_logprobs_matches_reference(prov, dtype, norm, case):
    layers, p, d, v = _shapes(prov, [(5, 3, 64, 50_257), (2, 1, 96, 151_936)],
                              [(3, 5, 48, 257), (2, 3, 40, 1_000)])[case]
    g = torch.Generator().manual_seed(case)
    hidden = torch.randn(layers, p, d, generator=g) * 4
    w = torch.rand(d, generator=g) + 0.5
    bias = torch.randn(d, generator=g) if norm == "layer" else None
    unembed = torch.randn(v, d, generator=g) / d**0.5
    targets = torch.randint(0, v, (p,), generator=g)
    args = [t.to(dtype) for t in (hidden, w, unembed)]
    want = exact("lens_logprobs", *args, targets, 1e-5, norm, None if bias is None else bias.to(dtype))
    dev = [t.to(prov.device) for t in args]
    dev_bias = None if bias is None else bias.to(dtype).to(prov.device)
    got = prov.op("lens_logprobs")(*dev, targets.to(prov.device), 1e-5, norm, dev_bias)
    torch.testing.assert_close(got.cpu(), want, atol=LENS_TOL[dtype], rtol=1e-4)


# ------------------------------------------------------------------------------------------------- token ops


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_surprisal_entropy_and_margin_match_reference(prov, dtype):
    n, v = (5, 1_500) if prov.small else (64, 151_936)
    x = _logits((n, v), dtype, "cpu", 0.2)
    x[1, 7] = x[1, 9] = x[1].max()  # a tie for first place: margin 0
    tokens = torch.randint(0, v, (n,))
    tokens[0] = 0
    sur, ent = prov.op("surprisal_entropy")(x.to(prov.device), tokens.to(prov.device))
    rs, re_ = exact("surprisal_entropy", x, tokens)
    finite = torch.isfinite(rs)
    torch.testing.assert_close(sur.cpu()[finite], rs[finite], atol=5e-5, rtol=1e-5)
    assert torch.isinf(sur.cpu()[~finite]).all()
    torch.testing.assert_close(ent.cpu(), re_, atol=1e-4, rtol=1e-5)
    margin = prov.op("logit_margin")(x.to(prov.device)).cpu()
    torch.testing.assert_close(margin, ref.logit_margin(x), atol=0, rtol=0)
    assert margin[1] == 0


# ------------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("op", ["topk_logprobs", "probe_js", "surprisal_entropy", "logit_margin"])
@pytest.mark.parametrize(
    "bad,match", [(float("nan"), "contains NaN"), (float("inf"), r"contains \+inf"), ("row", "every entry is -inf")]
)
def test_fast_paths_raise_the_reference_errors(prov, op, bad, match):
    x = _logits((3, 40), torch.float32, "cpu")
    if bad == "row":
        x[2] = float("-inf")
    else:
        x[1, 17] = bad
    args = {
        "topk_logprobs": lambda t: (t, 4),
        "probe_js": lambda t: (t, torch.zeros(3, dtype=torch.long, device=t.device), 4),
        "surprisal_entropy": lambda t: (t, torch.zeros(3, dtype=torch.long, device=t.device)),
        "logit_margin": lambda t: (t,),
    }[op]
    fn = prov.op(op)
    with pytest.raises(ValueError, match=match):
        ref_fn = getattr(ref, op)
        ref_fn(*args(x))
    with pytest.raises(ValueError, match=match):
        fn(*args(x.to(prov.device)))


@pytest.mark.parametrize("provider", ["cpp", "triton"])
def test_every_dispatch_entry_resolves_to_its_op(provider):
    for op in PROVIDERS_BY_NAME[provider]:
        assert callable(Provider(provider, "cpu", PROVIDERS_BY_NAME[provider], small=True).op(op))
