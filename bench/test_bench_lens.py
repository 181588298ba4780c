"""Logit lens: per-layer log-probs of the answer tokens, streamed versus materialised logits.

Reports time, achieved TFLOP/s against the matmul rate measured in the same run, peak extra memory, and the
ratio to the reference (which writes the (layers·P, V) logits and their log-softmax).
"""

import harness
import inputs
import pytest

if harness.HAS_CUDA:
    # the targets: 36 layers x 4 positions at d=4,096, and the reads of 16 chains at once (16 x C=16 x 3 answer
    # tokens = 768 positions); plus a fp32 unembedding (3xTF32)
    LENS_SHAPES = [dict(layers=36, P=4, d=4096, V=151_936, dtype="bf16"), dict(layers=36, P=768, d=4096, V=151_936, dtype="bf16"),
                   dict(layers=36, P=4, d=4096, V=151_936, dtype="fp32")]
else:
    LENS_SHAPES = [
        dict(layers=36, P=4, d=4096, V=151_936, dtype="fp32"),
        dict(layers=36, P=4, d=2560, V=151_936, dtype="fp32"),
        dict(layers=28, P=4, d=1024, V=151_936, dtype="fp32"),
        dict(layers=32, P=4, d=4096, V=100_278, dtype="fp32"),
    ]


@pytest.mark.parametrize("provider", harness.providers())
@pytest.mark.parametrize("shape", LENS_SHAPES, ids=inputs.test_id)
def test_lens_logprobs(benchmark, shape, provider):
    args = inputs.make("lens_logprobs", shape, harness.device())
    fn = harness.op_fn(provider, "lens_logprobs")

    if harness.HAS_CUDA:
        ms = harness.cuda_ms(fn, [args])  # the unembedding (V x d) is several L2 sizes already
    else:
        def call():
            fn(*args)
            harness.sync()

        benchmark.pedantic(call, rounds=3, warmup_rounds=1)
        ms = benchmark.stats.stats.median * 1e3
    flops = 2 * shape["layers"] * shape["P"] * shape["d"] * shape["V"]
    peak = harness.matmul_tflops(args[2].dtype)
    tflops = flops / ms / 1e9
    harness.record(
        op="lens_logprobs", shape=inputs.label(shape), provider=provider, ms=round(ms, 2), tflops=round(tflops, 3),
        ceiling=f"matmul {peak:.2f} TFLOP/s", vs_ceiling=round(tflops / peak, 3),
        peak_extra_mb=round(harness.peak_extra_bytes("lens_logprobs", provider, shape) / 2**20, 1),
    )
