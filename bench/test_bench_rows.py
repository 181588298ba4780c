"""Row ops over full-vocabulary logits: Probe-JS, top-k, surprisal/entropy, margin.

Each shape runs the reference and this device's fast path side by side (C++ on the CPU, Triton on a GPU),
next to the machine's own ceilings measured in the same run: the copy bandwidth and one read pass (row max)
over the same logits. Effective GB/s counts the logit bytes read once.
"""

import harness
import inputs
import pytest

QWEN_V, OLMO_V = 151_936, 100_278

if harness.HAS_CUDA:
    PROBE_SHAPES = [dict(V=v, N=n, L=L, dtype=dt) for v in (QWEN_V, OLMO_V) for n in (16, 64, 512) for L in (1, 16) for dt in ("bf16",)]
    PROBE_SHAPES += [dict(V=QWEN_V, N=64, L=1, dtype="fp32")]
else:  # the reference's full sort of (N·L, V) logits bounds what fits in a CPU run
    PROBE_SHAPES = [
        dict(V=QWEN_V, N=16, L=1, dtype="fp32"),
        dict(V=QWEN_V, N=64, L=1, dtype="fp32"),
        dict(V=QWEN_V, N=512, L=1, dtype="fp32"),
        dict(V=QWEN_V, N=16, L=16, dtype="fp32"),
        dict(V=OLMO_V, N=64, L=1, dtype="fp32"),
        dict(V=QWEN_V, N=64, L=1, dtype="bf16"),
    ]
ROW_SHAPES = [dict(V=QWEN_V, N=64, dtype="fp32")] + ([dict(V=QWEN_V, N=512, dtype="bf16")] if harness.HAS_CUDA else [])


def _run(benchmark, op, shape, provider, memory=False):
    args = inputs.make(op, shape, harness.device())
    fn = harness.op_fn(provider, op)
    logits = args[0]
    if harness.HAS_CUDA:  # CUDA events over inputs rotated through 4x the L2 size: HBM, not L2, bandwidth
        sets = harness.rotation(lambda i: inputs.make(op, shape, "cuda", seed=i), logits.numel() * logits.element_size())
        ms = harness.cuda_ms(fn, sets)
    else:
        rounds = 3 if provider == "reference" else 10

        def call():
            fn(*args)
            harness.sync()

        benchmark.pedantic(call, rounds=rounds, warmup_rounds=1)
        ms = benchmark.stats.stats.median * 1e3
    nbytes = logits.numel() * logits.element_size()
    gbps = nbytes / ms / 1e6  # the logits read once
    if harness.HAS_CUDA:  # the target: >= 70% of the measured copy bandwidth
        row = dict(op=op, shape=inputs.label(shape), provider=provider, ms=round(ms, 4), gbps=round(gbps, 1),
                   ceiling=f"copy {harness.copy_gbps():.0f} GB/s", vs_ceiling=round(gbps / harness.copy_gbps(), 3))
    else:
        read_ms = harness.rowmax_ms(logits)
        row = dict(op=op, shape=inputs.label(shape), provider=provider, ms=round(ms, 3), gbps=round(gbps, 1),
                   ceiling=f"read pass {read_ms:.3f} ms, copy {harness.copy_gbps():.0f} GB/s", vs_ceiling=round(read_ms / ms, 3))
    if memory:
        row["peak_extra_mb"] = round(harness.peak_extra_bytes(op, provider, shape) / 2**20, 1)
    harness.record(**row)


@pytest.mark.parametrize("provider", harness.providers())
@pytest.mark.parametrize("shape", PROBE_SHAPES, ids=inputs.test_id)
def test_probe_js(benchmark, shape, provider):
    _run(benchmark, "probe_js", shape, provider, memory=shape["N"] == 64 and shape.get("L", 1) == 1)


@pytest.mark.parametrize("provider", harness.providers())
@pytest.mark.parametrize("op", ["topk_logprobs", "surprisal_entropy", "logit_margin"])
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=inputs.test_id)
def test_row_ops(benchmark, op, shape, provider):
    _run(benchmark, op, shape, provider)
