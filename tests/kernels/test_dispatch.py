"""Implementation choice: once per device type, forced by BSB_KERNELS, reference fallback with one warning."""

import sys
import warnings

import pytest
import torch

import bsb
import bsb.kernels as K
from bsb.kernels import dispatch


@pytest.fixture
def fresh_dispatch(monkeypatch):
    dispatch.reset()
    dispatch._warned.clear()
    yield monkeypatch
    dispatch.reset()
    dispatch._warned.clear()


def test_reference_forced(fresh_dispatch):
    fresh_dispatch.setenv("BSB_KERNELS", "reference")
    assert all(dispatch.implementation(op) == "reference" for op in dispatch.OPS)


def test_unknown_choice_is_a_clear_error(fresh_dispatch):
    fresh_dispatch.setenv("BSB_KERNELS", "fastest")
    with pytest.raises(ValueError, match="BSB_KERNELS='fastest' is not one of"):
        dispatch.implementation("probe_js")


def test_unknown_op_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown op 'softmax'"):
        dispatch.implementation("softmax")


def test_missing_extension_falls_back_to_reference_with_one_warning(fresh_dispatch):
    fresh_dispatch.setenv("BSB_KERNELS", "cpp")
    fresh_dispatch.setitem(sys.modules, "bsb._C", None)  # import bsb._C now raises ImportError
    fresh_dispatch.delattr(bsb, "_C", raising=False)  # ... and `from bsb import _C` finds no attribute either
    fresh_dispatch.delitem(sys.modules, "bsb.kernels.cpu_probe", raising=False)
    x = torch.randn(3, 50)
    with pytest.warns(RuntimeWarning, match="falling back to the reference"):
        got = K.topk_logprobs(x, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second call must not warn again
        K.probe_js(x, torch.zeros(3, dtype=torch.long), 4)
    assert dispatch.implementation("topk_logprobs") == "reference"
    assert dispatch.implementation("lens_logprobs") == "cpp"  # the chunked torch lens needs no extension
    torch.testing.assert_close(got, K.reference.topk_logprobs(x, 4))


def test_public_functions_carry_the_reference_docstrings():
    assert K.floored_js.__doc__ == K.reference.floored_js.__doc__
