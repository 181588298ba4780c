"""Training log-probs of the sampled tokens, forward + backward: the full (N, V) logits (reference) against the
chunked linear + logsumexp (bsb.kernels.linear_logprob). Time, achieved TFLOP/s against the measured matmul rate, and
peak extra memory; the chunked path's memory does not grow with V."""

import harness
import inputs
import pytest

if harness.HAS_CUDA:  # micro-batch 16 x 1,024 tokens of a Qwen3-0.6B-shaped head (the reference fits; the e2e stage runs 16 x 4,096)
    SHAPES = [dict(N=16 * 1024, d=1024, V=151_936, dtype="bf16")]
else:
    SHAPES = [dict(N=1024, d=512, V=151_936, dtype="fp32")]  # logits 0.6 GB, the weight gradient 0.3 GB


@pytest.mark.parametrize("provider", ["reference", "chunked"])
@pytest.mark.parametrize("shape", SHAPES, ids=inputs.test_id)
def test_train_logprobs(benchmark, shape, provider):
    args = inputs.make("train_logprobs", shape, harness.device())
    fn = harness.op_fn(provider, "train_logprobs")

    def call():
        fn(*args)
        harness.sync()

    benchmark.pedantic(call, rounds=2, warmup_rounds=1)
    ms = benchmark.stats.stats.median * 1e3
    flops = 3 * 2 * shape["N"] * shape["d"] * shape["V"]  # forward, plus the two backward matmuls
    extra = 2 * 2 * shape["N"] * shape["d"] * shape["V"] if provider == "chunked" else 0  # the backward recomputes the logits
    peak = harness.matmul_tflops(args[0].dtype)
    tflops = (flops + extra) / ms / 1e9
    harness.record(
        op="train_logprobs", shape=inputs.label(shape), provider=provider, ms=round(ms, 1), tflops=round(tflops, 3),
        ceiling=f"matmul {peak:.2f} TFLOP/s", vs_ceiling=round(tflops / peak, 3),
        peak_extra_mb=round(harness.peak_extra_bytes("train_logprobs", provider, shape) / 2**20, 1),
    )
