"""The reference Lens-Shift ops (Eq. 3-4) against real model weights and hand-made profiles."""

import math

import pytest
import torch

from bsb.kernels import reference as ref

transformers = pytest.importorskip("transformers")


def _tiny(family: str):
    common = dict(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=False,
    )
    if family == "qwen3":
        cfg = transformers.Qwen3Config(head_dim=32, **common)
    else:
        cfg = transformers.LlamaConfig(**common)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # random init leaves the final norm at 1: perturb it so the test sees the weight
        model.model.norm.weight.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_lens_at_last_layer_equals_the_models_own_log_softmax(family):
    model = _tiny(family)
    ids = torch.randint(0, 97, (1, 11))
    captured = {}
    last = model.model.layers[-1]
    hook = last.register_forward_hook(lambda m, i, o: captured.setdefault("h", o[0] if isinstance(o, tuple) else o))
    with torch.no_grad():
        logits = model(ids).logits[0]  # (T, V)
    hook.remove()
    h_last = captured["h"][0]  # (T, d) residual stream after the last layer, before the final norm
    targets = torch.randint(0, 97, (11,))
    got = ref.lens_logprobs(
        h_last[None], model.model.norm.weight, model.lm_head.weight, targets, eps=model.config.rms_norm_eps
    )
    want = torch.log_softmax(logits.float(), -1).gather(-1, targets[:, None])[:, 0]
    assert got.shape == (1, 11)
    torch.testing.assert_close(got[0], want, atol=2e-5, rtol=1e-5)


def test_lens_every_layer_shape_and_layer_norm_variant():
    layers, p, d, v = 4, 5, 16, 33
    hidden = torch.randn(layers, p, d)
    w, b = torch.rand(d) + 0.5, torch.randn(d)
    unembed = torch.randn(v, d)
    targets = torch.randint(0, v, (p,))
    got = ref.lens_logprobs(hidden, w, unembed, targets, eps=1e-5, norm="layer", norm_bias=b)
    normed = torch.nn.functional.layer_norm(hidden, (d,), w, b, eps=1e-5)
    want = torch.log_softmax(normed @ unembed.T, -1).gather(-1, targets[None, :, None].expand(layers, p, 1))[..., 0]
    assert got.shape == (layers, p)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 5e-2), (torch.float16, 5e-3)])
def test_lens_low_precision_inputs_accumulate_in_fp32(dtype, tol):
    hidden, w, u = torch.randn(2, 3, 32), torch.rand(32) + 0.5, torch.randn(50, 32)
    t = torch.randint(0, 50, (3,))
    lo = ref.lens_logprobs(hidden.to(dtype), w.to(dtype), u.to(dtype), t)
    assert lo.dtype == torch.float32
    torch.testing.assert_close(lo, ref.lens_logprobs(hidden, w, u, t), atol=tol, rtol=tol)


def test_lens_readouts_by_hand():
    b = torch.tensor(
        [
            [-9.0, -5.0, -1.0, -1.0],  # locks in at layer 2; deep mean -1
            [-9.0, -9.0, -8.0, -2.0],  # locks in at layer 3; deep mean -5
            [-9.0, -9.0, -8.0, -2.0],  # unchanged
        ]
    )
    shape, height, depth = ref.lens_readouts(b, eps=0.1)
    assert shape[0] == pytest.approx(math.sqrt(0 + 16 + 49 + 1))
    assert height[0] == pytest.approx(4.0)
    assert depth[0] == 1.0
    assert shape[1] == height[1] == depth[1] == 0.0
    assert all(torch.isnan(x[-1]) for x in (shape, height, depth))


def test_lens_readouts_depth_uses_the_first_layer_within_eps_of_the_last():
    # Range 10, eps 0.1 → within 1.0 of the last value. Layer 1 is already within; layer 2 leaves again.
    b = torch.tensor([[-10.0, -0.5, -3.0, 0.0], [-10.0, -10.0, -10.0, 0.0]])
    _, _, depth = ref.lens_readouts(b, eps=0.1)
    assert depth[0] == 2.0  # l* = 1 then l* = 3


def test_lens_readouts_odd_layer_count_height_uses_deepest_ceil_half():
    b = torch.tensor([[0.0, 0.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    _, height, _ = ref.lens_readouts(b)
    assert height[0] == pytest.approx(2.0)  # mean of the deepest 3 of 5 layers


def test_lens_readouts_flat_profile_locks_at_layer_zero():
    _, _, depth = ref.lens_readouts(torch.tensor([[-3.0, -3.0, -3.0], [-3.0, -2.0, -1.0]]))
    assert depth[0] == 2.0
