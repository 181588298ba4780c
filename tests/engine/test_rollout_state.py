"""The rollout state `bsb cost --memory` counts a chain equals what transformers' own cache holds after a forward of
that chain (keys and values of attention layers, a sliding layer's window, a Mamba-2 layer's SSM and conv state),
and the paper's Nemotron keeps a fraction of a dense model's state at 24k tokens."""

import pytest
import torch
from families import tiny_model

from bsb.engine.known_models import COUNTED
from bsb.engine.memory import rollout_architecture, rollout_state_bytes

transformers = pytest.importorskip("transformers")


def _cache_bytes(model, tokens):
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.randint(3, 90, (1, tokens)), past_key_values=cache, use_cache=True)
    kv = recurrent = 0
    for layer in cache.layers:
        if hasattr(layer, "recurrent_states"):  # a Mamba-2 layer (a hybrid's MLP and MoE layers hold none)
            conv, ssm = layer.conv_states.get(0), layer.recurrent_states.get(0)
            if ssm is not None:  # conv (1, conv_dim, kernel): transformers keeps the kernel's width, vLLM kernel - 1
                recurrent += ssm.numel() + conv.numel() // conv.shape[-1] * (conv.shape[-1] - 1)
        elif getattr(layer, "keys", None) is not None and layer.keys.numel():
            kv += layer.keys.numel() + layer.values.numel()
    return {"kv": 2 * kv, "recurrent": 2 * recurrent}  # as bf16


@pytest.mark.parametrize("family", ["nemotron_h", "olmo3", "qwen3"])
def test_the_counted_state_is_what_transformers_cache_holds(family):
    model, tokens = tiny_model(family), 40  # longer than the tiny models' 24-token window
    got = rollout_state_bytes(model.config, tokens)
    held = _cache_bytes(model, tokens)
    if family == "olmo3":  # transformers' sliding layers keep window - 1 keys (the next query brings the last one)
        sliding = model.config.layer_types.count("sliding_attention")
        head_dim = model.config.hidden_size // model.config.num_attention_heads
        held["kv"] += sliding * 2 * 2 * model.config.num_key_value_heads * head_dim
    assert got["kv"] == held["kv"] and got["recurrent"] == held["recurrent"]
    assert (got["recurrent"] > 0) == (family == "nemotron_h")


def test_the_papers_models_state_at_their_configs_length():
    state = {n: rollout_state_bytes(rollout_architecture(n), 26_048) for n in COUNTED}
    nemotron = state["NVIDIA-Nemotron-Nano-9B-v2-Base"]
    # 4 attention layers of 8 KV heads x 128, 27 Mamba-2 layers of 128 heads x 80 x 128 states
    assert nemotron["kv"] == 4 * 2 * 8 * 128 * 26_048 * 2
    assert nemotron["recurrent"] == 27 * (128 * 80 * 128 + (128 * 80 + 2 * 8 * 128) * 3) * 2
    assert state["Qwen3-8B-Base"]["total"] == 36 * 2 * 8 * 128 * 26_048 * 2
    assert nemotron["total"] < state["Qwen3-8B-Base"]["total"] / 7
    assert rollout_architecture("no-such-model") is None
