"""Implementation choice: once per device type, forced by BSB_KERNELS, reference fallback with one warning."""

import importlib
import inspect
import re
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


PUBLIC_OPS = (*dispatch.OPS, "probe_js_topk")  # every op of the table, and the one composed from floored_js


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def _arg_names(doc: str) -> set[str]:
    """The names an ``Args:`` section documents (``name:`` or ``a, b:`` at the start of an entry)."""
    block = doc.split("Args:", 1)[1].split("Returns:", 1)[0]
    names = set()
    for entry in re.findall(r"^\s+([\w, ]+):", block, flags=re.M):
        names.update(n.strip() for n in entry.split(","))
    return names


@pytest.mark.parametrize("op", PUBLIC_OPS)
def test_public_ops_follow_their_documented_reference(op):
    """The public op has its reference's contract: a docstring with every argument and the float32 result, the same
    parameters (names, order, defaults; the reference may add trailing defaulted ones), the same text."""
    spec = getattr(K.reference, op)
    doc = spec.__doc__ or ""
    assert "Args:" in doc and "Returns:" in doc, f"reference.{op} does not document its arguments and result"
    public = _params(getattr(K, op))
    assert set(_arg_names(doc)) >= {name for name, _, _ in public}, f"reference.{op} leaves arguments undocumented"
    assert "float32" in doc.split("Returns:", 1)[1], f"reference.{op} does not state its result dtype"
    ref_params = _params(spec)
    assert ref_params[: len(public)] == public, f"bsb.kernels.{op} and reference.{op} take different arguments"
    assert all(default is not inspect.Parameter.empty for _, _, default in ref_params[len(public) :])
    assert getattr(K, op).__doc__ == doc


@pytest.mark.parametrize("provider", sorted(dispatch.PROVIDERS))
def test_provider_functions_take_the_reference_arguments(provider):
    """A provider's function accepts the reference's arguments in the same order with the same defaults, so the
    dispatched call means the same thing whoever serves it (extra parameters must have defaults)."""
    for op, module in dispatch.PROVIDERS[provider].items():
        fn = getattr(importlib.import_module(module), op)
        want, got = _params(getattr(K.reference, op)), _params(fn)
        assert got[: len(want)] == want, f"{module}.{op} does not take reference.{op}'s arguments"
        assert all(default is not inspect.Parameter.empty for _, _, default in got[len(want) :]), f"{module}.{op}"


@pytest.mark.parametrize("op", dispatch.OPS)
def test_public_ops_call_their_table_entry_with_every_argument_in_order(fresh_dispatch, op):
    """Each public op hands all its arguments, in the reference's order, to the function the table holds for the
    tensors' device: a wrapper that drops, swaps or defaults an argument, or calls another op's entry, fails."""
    calls = []
    dispatch.table("cpu")
    fresh_dispatch.setitem(dispatch._tables["cpu"], op, ("spy", lambda *args, **kw: calls.append((args, kw)) or "ok"))
    names = [name for name, _, _ in _params(getattr(K, op))]
    args = [torch.zeros(1), *(object() for _ in names[1:])]  # the first argument's device picks the table
    assert getattr(K, op)(*args) == "ok"
    assert len(calls) == 1 and calls[0][1] == {}
    assert len(calls[0][0]) == len(args) and all(a is b for a, b in zip(calls[0][0], args))


def test_probe_js_deferred_is_the_dispatched_probe_js_with_deferred_errors(fresh_dispatch):
    """``probe_js_deferred`` is the table's probe_js (whichever provider serves it) asked for ``(scores, status)``."""
    calls = []
    dispatch.table("cpu")
    fresh_dispatch.setitem(dispatch._tables["cpu"], "probe_js",
                           ("spy", lambda *args, **kw: calls.append((args, kw)) or ("scores", "status")))
    x, chains = torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)
    assert K.probe_js_deferred(x, chains, 3) == ("scores", "status")
    assert len(calls) == 1 and calls[0][1] == {"defer_errors": True}
    assert len(calls[0][0]) == 3 and all(a is b for a, b in zip(calls[0][0], (x, chains, 3)))
