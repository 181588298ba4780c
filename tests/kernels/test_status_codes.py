"""The status codes the fused kernels return, named alike on both sides of the C++ / Python boundary."""

import re
from pathlib import Path

from bsb.kernels import checks


def test_status_codes_mirror_the_cpp_enum():
    """csrc/probe.cpp returns its ``Status`` codes to :mod:`bsb.kernels.cpu_probe`, which reads them with the names
    of :mod:`bsb.kernels.checks` (``ROW_OK`` for none): both sides must give each code the same number."""
    source = (Path(__file__).parents[2] / "csrc" / "probe.cpp").read_text()
    enum = re.search(r"enum Status : int \{([^}]*)\}", source)
    assert enum, "csrc/probe.cpp no longer declares `enum Status : int {...}`"
    cpp = {name: int(value) for name, value in re.findall(r"(\w+)\s*=\s*(\d+)", enum.group(1))}
    python = {"OK": checks.ROW_OK, "HAS_NAN": checks.ROW_NAN, "HAS_POSINF": checks.ROW_POSINF,
              "ALL_MASKED": checks.ROW_ALL_MASKED, "CHAINS_NOT_CONTIGUOUS": checks.CHAINS_NOT_CONTIGUOUS}
    assert cpp == python
