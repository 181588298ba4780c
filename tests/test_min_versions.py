"""bsb's minimum versions: the oldest torch, Triton, transformers and vLLM releases whose APIs it calls. An older release is one
clear error naming the release needed, raised where bsb first loads the package; pyproject.toml states the same
lower bounds."""

import importlib
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from bsb import min_versions

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "text,want",
    [
        ("2.8.0", (2, 8, 0)),
        ("2.13.0+cpu", (2, 13, 0)),
        ("2.8.0a0+git5d2e", (2, 8, 0)),
        ("3.4.0+gitabc", (3, 4, 0)),
        ("v0.16", (0, 16)),
        ("0.32.0", (0, 32, 0)),
        ("dev", None),
    ],
)
def test_release_reads_the_numeric_release(text, want):
    assert min_versions.release(text) == want


@pytest.mark.parametrize(
    "package,old,new",
    [
        ("torch", "2.7.1", "2.8.0"),
        ("transformers", "4.57.6", "5.0.0"),
        ("vllm", "0.19.0", "0.19.1"),
        ("triton", "3.3.1", "3.4.0"),
    ],
)
def test_a_release_below_the_floor_is_one_error_naming_the_release_bsb_needs(monkeypatch, package, old, new):
    if package == "vllm":  # a stand-in module: importing vLLM takes seconds
        monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    module = importlib.import_module(package) if package == "vllm" else pytest.importorskip(package)
    monkeypatch.setattr(module, "__version__", old, raising=False)
    need = min_versions.MIN_VERSIONS[package].release
    with pytest.raises(
        min_versions.TooOldError, match=rf"bsb needs {package} >= {re.escape(need)} .*{re.escape(old)} is installed"
    ):
        min_versions.check(package)
    monkeypatch.setattr(module, "__version__", new)
    min_versions.check(package)
    monkeypatch.setattr(module, "__version__", "dev")  # a source build without a release number
    min_versions.check(package)


def test_the_error_is_an_import_error_and_a_usage_error():
    assert issubclass(min_versions.TooOldError, ImportError) and issubclass(min_versions.TooOldError, ValueError)


def test_the_installed_releases_pass():
    for package in ("torch", "transformers", "triton"):
        pytest.importorskip(package)
        min_versions.check(package)


def test_the_kernels_check_torch_when_bsb_first_loads_them(monkeypatch):
    importlib.import_module("bsb.kernels")
    monkeypatch.setattr(torch, "__version__", "2.6.0")
    monkeypatch.delitem(sys.modules, "bsb.kernels")
    with pytest.raises(min_versions.TooOldError, match=r"torch >= 2\.8"):
        importlib.import_module("bsb.kernels")


def test_an_old_triton_is_one_warning_naming_the_release_and_the_reference_serves(monkeypatch):
    triton = pytest.importorskip("triton")
    from bsb.kernels import dispatch, reference

    monkeypatch.setattr(triton, "__version__", "3.3.1")
    for name in (
        "bsb.kernels.triton_rows",
        "bsb.kernels.triton_topk",
        "bsb.kernels.triton_lens",
        "bsb.kernels.triton_margin",
        "bsb.kernels.triton_surprisal",
    ):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv("BSB_KERNELS", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(dispatch, "_warned", set())
    monkeypatch.setattr(dispatch, "_tables", {})
    with pytest.warns(RuntimeWarning, match=r"triton >= 3\.4 \(tl\.topk"):
        table = dispatch.table("cpu")
    assert table["topk_logprobs"] == ("reference", reference.topk_logprobs)


def test_pyproject_states_the_same_minimum_versions():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]

    def lower(reqs, name):
        found = [re.match(rf"{re.escape(name)}>=([\d.]+)", r) for r in reqs]
        return {m.group(1) for m in found if m}

    assert lower(meta["dependencies"], "torch") == {min_versions.MIN_VERSIONS["torch"].release}
    assert lower(meta["dependencies"], "transformers") == {min_versions.MIN_VERSIONS["transformers"].release}
    assert lower(extras["triton"] + extras["test"], "triton") == {min_versions.MIN_VERSIONS["triton"].release}
    assert lower(extras["gpu"], "vllm") == {min_versions.MIN_VERSIONS["vllm"].release}
