"""Every Triton kernel compiles for sm_90a (H100/H200) with no register spills, within an SM's shared memory, and
the lens's dots become wgmma. Triton's compiler and bundled ptxas need no GPU; the report runs in its own process
(the kernels must be decorated for compilation, not for the interpreter the other tests use)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_every_kernel_compiles_for_sm90a_without_spills_and_the_lens_uses_wgmma(tmp_path):
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "sm90.py"), "--out", str(tmp_path)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=900)
    rows = json.loads((tmp_path / "sm90.json").read_text())["rows"]
    assert len(rows) >= 11, proc.stderr[-2000:]
    for r in rows:
        assert "error" not in r and r["spill_bytes"] == 0, r
        assert r["shared_bytes"] <= 228 * 1024, r  # an H100/H200 SM's shared memory
    assert all(r["mma"] == "wgmma" for r in rows if r["kernel"] == "_lens_lse_kernel")
    assert proc.returncode == 0
