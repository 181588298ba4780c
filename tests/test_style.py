"""The package is formatted and no line of bsb/ exceeds the configured 120 characters (pyproject.toml [tool.ruff])."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args):
    exe = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(exe).exists():
        pytest.fail("ruff is not installed: `pip install -e .[dev]` (make install does)")
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True)


def test_no_line_of_the_package_exceeds_the_limit():
    proc = _ruff("check", "--select", "E501", "--output-format", "concise", "bsb")
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_the_package_is_formatted():
    proc = _ruff("format", "--check", "bsb")
    assert proc.returncode == 0, proc.stdout[-3000:]
