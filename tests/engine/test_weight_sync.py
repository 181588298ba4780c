"""The weight-sync check (bsb.engine.weight_sync): an engine that took every tensor passes; one that took a single
tensor garbled, or none, is one error naming it."""

import copy

import pytest
import torch

from bsb.engine.hf_backend import HFBackend
from bsb.engine.weight_sync import WeightSyncError, check_gap, check_ids, check_sync, sync_gap, sync_tolerance

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def policy():
    cfg = transformers.Qwen3Config(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=32, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # beyond HF's 0.02 init, so that log-probs are far from uniform
        for p in model.parameters():
            p.mul_(8.0)
    return model


IDS = list(range(3, 35))


def engine_with(policy, corrupt=None, stale=False):
    """A second copy of the weights as a sync left them: every tensor, one garbled, or the starting ones (stale)."""
    engine = copy.deepcopy(policy)
    with torch.no_grad():
        if corrupt is not None:
            w = dict(engine.named_parameters())[corrupt]
            w.copy_(torch.randn_like(w) * w.std())
        if stale:
            for p in engine.parameters():
                p.add_(torch.randn_like(p) * p.std())
    return HFBackend(engine)


def test_an_engine_holding_the_policys_weights_passes(policy):
    assert check_sync(engine_with(policy), HFBackend(policy), IDS, torch.float32) == 0.0


@pytest.mark.parametrize("name", ["model.layers.1.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight",
                                  "lm_head.weight", "model.norm.weight"])
def test_one_garbled_tensor_is_one_error_naming_the_engine(policy, name):
    with pytest.raises(WeightSyncError, match=r"rollout engine \(vLLM 9.9.9\) does not serve the policy's weights"):
        check_sync(engine_with(policy, corrupt=name), HFBackend(policy), IDS, torch.float32, "vLLM 9.9.9")


def test_the_tolerance_is_the_engines_precision(policy):
    """fp32 engines agree to 1e-3 nats a token; a 16-bit engine's rounding is allowed 0.1: a bf16 copy of the
    weights passes that bound, and stale weights (every tensor moved) do not."""
    assert sync_tolerance(torch.float32) == 1e-3 and sync_tolerance(torch.bfloat16) == 0.1
    bf16 = HFBackend(copy.deepcopy(policy).to(torch.bfloat16).to(torch.float32))
    assert 0 < sync_gap(bf16, HFBackend(policy), IDS) <= sync_tolerance(torch.bfloat16)
    with pytest.raises(WeightSyncError):
        check_sync(engine_with(policy, stale=True), HFBackend(policy), IDS, torch.bfloat16)


def test_the_check_sequence_is_text_the_tokenizer_makes(policy):
    class Chars:
        def encode(self, text, add_special_tokens=False):
            return [ord(c) % 200 for c in text]

    ids = check_ids(Chars(), 96)
    assert 2 <= len(ids) <= 32 and all(0 <= i < 96 for i in ids)

    class Nothing:
        def encode(self, text, add_special_tokens=False):
            return []

    assert check_ids(Nothing(), 96) == list(range(32))


def test_a_nan_gap_is_a_mismatch_and_a_small_one_passes():
    with pytest.raises(WeightSyncError, match="differ by nan nats"):
        check_gap(float("nan"), 32, torch.float32, "vLLM 9.9.9")
    assert check_gap(5e-4, 32, torch.float32, "vLLM 9.9.9") == 5e-4
    with pytest.raises(WeightSyncError, match="at most 0.001 for float32"):
        check_gap(2e-3, 32, torch.float32, "vLLM 9.9.9")
