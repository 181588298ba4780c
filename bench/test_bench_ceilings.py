"""The machine's ceilings, measured first: copy bandwidth (the row ops' floor) and the dense matmul rate in bf16 and
fp32 (the lens's), each recorded as a row at once, so a kernels stage cut off by its limit still has them."""

import harness
import pytest
import torch


def test_copy_bandwidth():
    gbps = harness.copy_gbps()
    harness.record(op="ceiling", shape="copy 256 MiB", provider="measured", ms=None, gbps=round(gbps, 1))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_matmul_rate(dtype):
    tflops = harness.matmul_tflops(dtype)
    harness.record(op="ceiling", shape=f"matmul {str(dtype).split('.')[1]}", provider="measured", ms=None,
                   tflops=round(tflops, 3))  # fmt: skip
