"""The backend protocols: bsb's backends conform to what they declare, a plug-in backend can check itself, a declared
capability without its methods is refused at bind, and each instance records its own facts (on_cpu)."""

import asyncio

import pytest
import torch
from tiny_models import tiny_config

from bsb.engine import backend as B
from bsb.engine.hf_backend import HFBackend
from bsb.engine.selectors import SelectorConfig, make_selector
from bsb.integrations.verl.server_backend import ServerBackend

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf():
    torch.manual_seed(0)
    return HFBackend(transformers.AutoModelForCausalLM.from_config(tiny_config("s", eos_token_id=1, pad_token_id=0)))


def test_the_hf_backend_conforms_to_every_protocol_it_declares(hf):
    assert B.check_backend(hf) == []
    caps = B.capabilities(hf)
    assert caps.reuses_kv and caps.white_box and caps.on_cpu  # built on a CPU model: its own record says so
    assert not B.capabilities(HFBackend).on_cpu  # the class declares what any instance can serve, not where it runs
    for protocol in (B.Backend, B.Generates, B.ProbeLogits, B.TokenStatsReader, B.WhiteBox, B.KVReuse):
        assert isinstance(hf, protocol), protocol.__name__
    assert not isinstance(hf, B.WeightSync) and not isinstance(hf, B.ProbeTopK)


def test_the_verl_server_backend_conforms():
    loop = asyncio.new_event_loop()
    try:
        server = ServerBackend(loop, generate=None)
        assert B.check_backend(server) == []
        assert isinstance(server, B.ProbeTopK) and isinstance(server, B.Generates) and not isinstance(server, B.WhiteBox)
        assert server.close() is None  # nothing to release: a no-op
    finally:
        loop.close()


class Declares:
    """A plug-in backend that declares top-k beliefs but has no probe_topk, and no close()."""

    capabilities = B.Capabilities(generate=False, belief_topk=True)


def test_a_plugin_backend_learns_what_it_lacks():
    problems = B.check_backend(Declares())
    assert any("no close()" in p for p in problems) and any("lacks the methods of ProbeTopK" in p for p in problems)
    assert B.check_backend(object()) == ["object is not a bsb backend: it declares no `capabilities: Capabilities` "
                                         "(see bsb.engine.backend)"]
    with pytest.raises(B.BackendError, match="declares belief_topk but lacks the methods of ProbeTopK"):
        make_selector("probe_js", SelectorConfig(suffix=[3]), Declares())  # refused at bind, not mid-rollout


def test_capabilities_name_every_field_and_refuse_unknown_ones():
    caps = B.Capabilities(belief_topk=True, on_cpu=True)
    assert caps.has("on_cpu") and not caps.has("reuses_kv") and caps.names() == ["generate", "belief_topk", "on_cpu"]
    assert set(B.CAPABILITY_HELP) == {f for f in B.Capabilities.__dataclass_fields__}
    assert set(B.PROTOCOLS) == set(B.CAPABILITY_HELP) - {"on_cpu"}
    with pytest.raises(ValueError, match="unknown capability 'beliefs'"):
        caps.has("beliefs")


def test_chain_results_carry_what_each_chain_took_from_a_cache():
    got = B.ChainResults([("a", 1), ("b", 2)], cached=[5, 0])
    assert got == [("a", 1), ("b", 2)] and got.cached == [5, 0] and B.cached_tokens(got) == [5, 0]
    assert B.ChainResults([1, 2]).cached == [0, 0] and B.cached_tokens([("a", 1)]) == [0]  # a plain list: none
    with pytest.raises(ValueError, match="1 cached-token counts for 2 chains"):
        B.ChainResults([1, 2], cached=[3])


def test_the_backend_names_are_the_rollout_backends():
    from bsb.engine.rollout_engine import make_rollout_backend

    assert B.BACKEND_NAMES == ("auto", "vllm", "hf")
    with pytest.raises(ValueError, match="backend must be one of auto, vllm, hf, got 'tgi'"):
        make_rollout_backend("tgi", "path", None, 64)


def test_a_deferred_engine_starts_on_its_first_generate_and_closes_only_what_started():
    from bsb.engine.rollout_engine import DeferredEngine

    events = []

    class Engine:
        def generate(self, prompts, **kw):
            events.append(("generate", prompts))
            return [[1]] * len(prompts)

        def close(self):
            events.append("close")

    def start():
        events.append("start")
        return Engine()

    idle = DeferredEngine(start)
    idle.close()
    assert events == [] and not idle.started  # nothing sampled: nothing started, nothing to shut down
    engine = DeferredEngine(start)
    assert engine.generate([[5]], seed=1) == [[1]] and engine.generate([[6]]) == [[1]] and engine.started
    engine.close()
    engine.close()
    assert events == ["start", ("generate", [[5]]), ("generate", [[6]]), "close"]  # started once, closed once


def test_engine_max_len_leaves_room_for_a_probe_after_a_whole_response():
    from bsb.engine.rollout_engine import engine_max_len

    assert engine_max_len(512, 256, 9, 1) == 512 + 256 + 9 + 1
    assert engine_max_len(100, 50, 20, 16) == 186  # a code probe: L = 16 read tokens after the suffix
    with pytest.raises(ValueError, match=">= 0"):
        engine_max_len(100, -1, 5, 1)


def test_a_wave_kv_cache_holds_the_steps_prompts_and_256_responses():
    """Qwen2.5-0.5B's shape in bf16: 24 layers x 2 KV heads x 64 x 2 (keys, values) x 2 bytes = 12,288 B a token;
    a 65,536-token step, 256 responses of 512 tokens and a 32-token block a sequence for rounding (and one held back)
    need 204,832 tokens, 2.34 GiB: 3. A sliding layer keeps a window a sequence, not one for the wave (Gemma-3-270M's
    15 of 18 layers at a 512 window: counting one window would give 1 GiB where 255 sequences of 768 tokens need 2.4),
    and a Mamba-2 layer a state a sequence. A step shorter than the engine's length could not take its longest
    prompt."""
    from bsb.engine.memory import rollout_architecture, rollout_state_bytes
    from bsb.engine.rollout_engine import wave_kv_cache_gib

    qwen = transformers.Qwen2Config(num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, hidden_size=896)
    assert wave_kv_cache_gib(qwen, 65536, 1536, 512, torch.bfloat16) == 3
    assert wave_kv_cache_gib(qwen, 65536, 1536, 512, torch.float32) == 5  # 4.69 GiB
    assert wave_kv_cache_gib(qwen, 2048, 1536, 16, torch.bfloat16) == 1  # at least one
    # the rounding: 131,070 prompt tokens in 256 sequences of about 512 (the step allows it) take whole blocks
    assert wave_kv_cache_gib(qwen, 131070, 1536, 512, torch.bfloat16) * 2**30 >= 12288 * (131070 + 256 * (512 + 32))
    gemma = transformers.Gemma3TextConfig(num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1,
                                          head_dim=256, hidden_size=640, sliding_window=512)
    assert gemma.layer_types.count("sliding_attention") == 15
    need = 255 * 768 * 18 * 2 * 1 * 256 * 2  # 255 sequences of 768 tokens, every layer holding each (2.4 GiB)
    assert wave_kv_cache_gib(gemma, 65536, 768, 512, torch.bfloat16) * 2**30 >= need
    # the paper's Nemotron-Nano-9B: 4 attention layers (16,384 B a token) and 27 Mamba-2 layers (72.8 MB a sequence)
    nemotron = rollout_architecture("NVIDIA-Nemotron-Nano-9B-v2-Base")
    assert rollout_state_bytes(nemotron, 1) == {"kv": 16384, "recurrent": 72769536, "total": 16384 + 72769536}
    assert wave_kv_cache_gib(nemotron, 65536, 1536, 512, torch.bfloat16) == 21  # 3.13 GiB of keys + 18.5 of states
    with pytest.raises(ValueError, match="step of 1024 tokens is shorter than its model length 1536"):
        wave_kv_cache_gib(qwen, 1024, 1536, 512, torch.bfloat16)


def test_a_wave_kv_cache_larger_than_the_machine_is_an_error_before_any_engine(monkeypatch):
    from bsb.engine import rollout_engine

    qwen = transformers.Qwen2Config(num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, hidden_size=896)
    monkeypatch.setattr(rollout_engine, "host_memory_bytes", lambda: 24 * 2**30)
    assert rollout_engine.wave_kv_cache_gib(qwen, 65536, 1536, 512, torch.bfloat16) == 3
    with pytest.raises(ValueError, match="a step of 10000000 tokens needs a 117 GiB KV cache .* than this machine's 24"):
        rollout_engine.wave_kv_cache_gib(qwen, 10_000_000, 1536, 512, torch.bfloat16)
