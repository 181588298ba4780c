"""Triton launches on the current CUDA device, not on its tensors' device, and a one-process ``cuda:N`` run sets none:
every Triton launcher makes its input's device current for the launch (``torch.cuda.device_of``). Pinned with a
stand-in ``device_of`` that records the device it makes current and stand-in kernels that record it at each launch
(the real kernels then run, under the interpreter on the CPU). The lens's autotuning keys on R's power-of-two bucket.
"""

import contextlib
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
    reason="needs Triton's interpreter or a GPU",
)
DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


@pytest.fixture
def launches(monkeypatch):
    """(kernel, current device at its launch) of every launch; the current device is whatever the stand-in
    ``torch.cuda.device_of`` made current (None outside one)."""
    pytest.importorskip("triton")
    from bsb.kernels import triton_lens, triton_margin, triton_surprisal, triton_topk

    current, log = [], []

    @contextlib.contextmanager
    def device_of(obj):
        current.append(obj.device)
        try:
            yield
        finally:
            current.pop()

    class Recording:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                log.append((self.name, current[-1] if current else None))
                return self.kernel[grid](*args, **kwargs)

            return launch

    monkeypatch.setattr(torch.cuda, "device_of", device_of)
    for module, name in (
        (triton_topk, "_split_kernel"),
        (triton_topk, "_merge_kernel"),
        (triton_topk, "_floored_js_kernel"),
        (triton_margin, "_margin_kernel"),
        (triton_surprisal, "_surprisal_entropy_kernel"),
    ):
        monkeypatch.setattr(module, name, Recording(name, getattr(module, name)))
    real = triton_lens._launcher
    monkeypatch.setattr(triton_lens, "_launcher", lambda width, rows: Recording("_lens_lse_kernel", real(width, rows)))
    return log


def test_every_triton_launch_runs_on_its_inputs_device(launches):
    from bsb.kernels import triton_lens, triton_margin, triton_surprisal, triton_topk

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(4, 300, generator=g) * 3).to(DEVICE)
    triton_topk.topk_logprobs(logits, 5)
    triton_topk.probe_js(logits, torch.tensor([0, 0, 1, 1]), 5)
    triton_margin.logit_margin(logits)
    triton_surprisal.surprisal_entropy(logits, torch.tensor([1, 2, 3, 4]))
    hidden = torch.randn(2, 3, 32, generator=g).to(DEVICE)
    triton_lens.lens_logprobs(
        hidden, torch.ones(32, device=DEVICE), torch.randn(300, 32, generator=g).to(DEVICE), torch.tensor([1, 2, 3])
    )
    launched = {name for name, _ in launches}
    assert launched == {
        "_split_kernel",
        "_merge_kernel",
        "_floored_js_kernel",
        "_margin_kernel",
        "_surprisal_entropy_kernel",
        "_lens_lse_kernel",
    }
    assert all(dev == logits.device for _, dev in launches), launches


def test_the_lens_autotuning_keys_on_a_power_of_two_bucket_of_r_not_on_r():
    pytest.importorskip("triton")
    from bsb.kernels import triton_lens

    assert [triton_lens.rows_bucket(r) for r in (1, 2, 3, 448, 500, 512, 513, 3584)] == [
        1,
        2,
        4,
        512,
        512,
        512,
        1024,
        4096,
    ]
    # 28 layers x 16 cuts x 1 or 2 answer tokens, then 3 tokens: two buckets, so two autotunings, not three
    tuners = {id(triton_lens._launcher("bf16", 28 * 16 * n)) for n in (1, 1, 2)}
    assert len(tuners) == 2
    assert triton_lens._launcher("bf16", 448) is triton_lens._launcher("bf16", 500)
    assert triton_lens._launcher("bf16", 448) is not triton_lens._launcher("fp32", 448)
    assert triton_lens._launcher("bf16", 448).keys == ["D", "V", "PRECISION"]  # R is not part of the key


def test_the_lens_serves_calls_of_one_bucket_from_one_autotuner(monkeypatch):
    pytest.importorskip("triton")
    from bsb.kernels import reference, triton_lens

    used = []
    real = triton_lens._launcher
    monkeypatch.setattr(
        triton_lens, "_launcher", lambda width, rows: used.append(id(real(width, rows))) or real(width, rows)
    )
    g = torch.Generator().manual_seed(1)
    u, w = torch.randn(300, 32, generator=g).to(DEVICE), torch.ones(32, device=DEVICE)
    for positions in (5, 6, 7):  # R = 2 layers x 5, 6, 7 positions: 10, 12, 14 rows, all in the bucket of 16
        hidden = torch.randn(2, positions, 32, generator=g).to(DEVICE)
        tgt = torch.randint(0, 300, (positions,), generator=g)
        got = triton_lens.lens_logprobs(hidden, w, u, tgt)
        torch.testing.assert_close(
            got.cpu(), reference.lens_logprobs(hidden.cpu(), w.cpu(), u.cpu(), tgt), atol=1e-4, rtol=1e-4
        )
    assert len(used) == 3 and len(set(used)) == 1
