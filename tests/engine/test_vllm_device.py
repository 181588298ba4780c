"""Which GPU a vLLM engine starts on, the vLLM release it needs, and the order it wakes in beside the trainer: the
CUDA-only decisions of :class:`VLLMBackend`, pinned with a stand-in for vLLM's ``LLM`` that records what bsb asks for
(no engine starts). The GPU is computed by vLLM 0.32's own executor code from the keyword arguments and environment
the stand-in saw: its in-process executor takes the index of a device config that says plain "cuda" (GPU 0), its
external launcher takes ``LOCAL_RANK``; the worker then makes that GPU current."""

import os
import types

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")

from strict_vllm import StrictLLM  # noqa: E402

from bsb import min_versions  # noqa: E402
from bsb.engine.vllm_backend import VLLMBackend  # noqa: E402
from bsb.train.config import TrainConfig  # noqa: E402
from bsb.train.distributed import init_world  # noqa: E402

TORCHRUN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def vllm_gpu(kwargs: dict) -> int:
    """The local rank (the GPU, with no CUDA_VISIBLE_DEVICES) vLLM 0.32's in-process executor starts an engine with
    these ``LLM`` keyword arguments on, read now from the environment as its own ``_distributed_args`` reads it."""
    from vllm.config.device import DeviceConfig
    from vllm.v1.executor.uniproc_executor import ExecutorWithExternalLauncher, UniProcExecutor

    launcher = kwargs.get("distributed_executor_backend") == "external_launcher"
    executor = ExecutorWithExternalLauncher if launcher else UniProcExecutor
    # EngineArgs builds the device config from the platform's device type: "cuda", no index
    stub = types.SimpleNamespace(vllm_config=types.SimpleNamespace(device_config=DeviceConfig(device="cuda")))
    return executor._distributed_args(stub)[2]


class RecordingLLM(StrictLLM):
    """vLLM's ``LLM`` as bsb uses it, every call bound against the installed vLLM's signatures (:class:`StrictLLM`):
    records its keyword arguments, the GPU vLLM would take, the environment its start saw, and every call after, in
    one log shared with the stand-in ``torch.cuda.empty_cache``."""

    log: list = []

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.gpu = vllm_gpu(kwargs)
        self.env = {k: os.environ.get(k) for k in TORCHRUN}
        self.loaded: list[str] = []

    def sleep(self, *args, **kwargs):
        self.log.append(("sleep", super().sleep(*args, **kwargs)["level"]))

    def wake_up(self, *args, **kwargs):
        self.log.append(("wake_up", super().wake_up(*args, **kwargs)["tags"]))

    def collective_rpc(self, *args, **kwargs):
        got = super().collective_rpc(*args, **kwargs)
        if "weights_path" in got["kwargs"]:  # an engine in its own process reloads a file
            from safetensors.torch import load_file

            self.loaded += list(load_file(f"{got['kwargs']['weights_path']}/model.safetensors"))
        else:
            self.loaded += [name for name, _ in got["kwargs"]["weights_iterator"]]  # consumed inside, as vLLM does
        self.log.append(("rpc", got["method"]))

    def reset_prefix_cache(self, *args, **kwargs):
        super().reset_prefix_cache(*args, **kwargs)
        self.log.append(("reset_prefix_cache",))

    def generate(self, *args, **kwargs):
        prompts = super().generate(*args, **kwargs)["prompts"]
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=[1])]) for _ in prompts]


@pytest.fixture
def llm(monkeypatch):
    RecordingLLM.log = []
    monkeypatch.setattr(vllm, "LLM", RecordingLLM)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: RecordingLLM.log.append(("empty_cache",)))
    for k in TORCHRUN:
        monkeypatch.delenv(k, raising=False)
    return RecordingLLM


def gpu_engine(device="cuda", **kw):
    return VLLMBackend("m", max_model_len=1024, device=device, gpu_memory_utilization=0.5, **kw)


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_each_torchrun_rank_starts_its_engine_on_its_own_gpu(llm, monkeypatch, rank):
    for k, v in (("RANK", rank), ("LOCAL_RANK", rank), ("WORLD_SIZE", 4)):
        monkeypatch.setenv(k, str(v))
    engine = gpu_engine(f"cuda:{rank}")
    assert engine.llm.kwargs["distributed_executor_backend"] == "external_launcher"  # as TRL's colocated engines
    assert engine.llm.gpu == rank  # the in-process executor would have taken GPU 0 on every rank
    assert gpu_engine("cuda").llm.gpu == rank  # plain "cuda": the rank's own GPU too
    with pytest.raises(ValueError, match=r"each rank's engine runs on the rank's own GPU, cuda:LOCAL_RANK"):
        gpu_engine(f"cuda:{rank + 1}")


def test_a_one_process_engine_on_cuda_n_starts_on_gpu_n_and_leaves_no_torchrun_environment(llm):
    engine = gpu_engine("cuda:3")
    assert engine.llm.kwargs["distributed_executor_backend"] == "external_launcher"
    assert engine.llm.gpu == 3
    # a world of one, for the engine's start only: what follows does not look launched by torchrun
    assert engine.llm.env["RANK"] == "0" and engine.llm.env["WORLD_SIZE"] == "1" and engine.llm.env["MASTER_PORT"]
    assert not any(k in os.environ for k in TORCHRUN)
    assert gpu_engine("cuda").llm.gpu == 0  # CUDA not started yet: torch's current device is GPU 0


def test_the_cpu_engine_uses_the_external_launcher_only_under_torchrun(llm, monkeypatch):
    one = VLLMBackend("m", dtype="float32", max_model_len=1024, device="cpu")
    assert "distributed_executor_backend" not in one.llm.kwargs and one.llm.env["RANK"] is None
    for k, v in (("RANK", 1), ("LOCAL_RANK", 1), ("WORLD_SIZE", 2)):
        monkeypatch.setenv(k, str(v))
    ranked = VLLMBackend("m", dtype="float32", max_model_len=1024, device="cpu")
    assert ranked.llm.kwargs["distributed_executor_backend"] == "external_launcher"


@pytest.mark.parametrize("rank", [0, 1])
def test_under_torchrun_rank_r_takes_cuda_r_for_nccl_and_its_engine(llm, monkeypatch, rank):
    """bsb train's order on rank r: init_world makes cuda:r current and binds the NCCL group to it, then the engine
    is built on the policy's device (cuda:r) and vLLM's external launcher starts it on GPU r. Triton launches follow
    their inputs' device (tests/kernels/test_launch_device.py), which is cuda:r."""
    calls = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", torch.device(d))))
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(
        torch.distributed, "init_process_group", lambda backend, **kw: calls.append((backend, kw.get("device_id")))
    )
    for k, v in (("RANK", rank), ("LOCAL_RANK", rank), ("WORLD_SIZE", 2), ("LOCAL_WORLD_SIZE", 2)):
        monkeypatch.setenv(k, str(v))
    cfg = TrainConfig(device="cuda", prompts_per_step=2, gen_prompts=2)
    world, device = init_world(cfg, torch.device("cuda"))
    cuda_r = torch.device("cuda", rank)
    assert (world.rank, device) == (rank, cuda_r)
    assert calls == [("set_device", cuda_r), ("nccl", cuda_r)]  # current before the group; the group bound to it
    assert gpu_engine(str(device)).llm.gpu == rank


def test_an_offloaded_policy_joins_a_group_with_gloo_for_its_host_shards(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda backend, **kw: calls.append(backend))
    for k, v in (("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1)):
        monkeypatch.setenv(k, str(v))
    for offload, backend in ((True, "cuda:nccl,cpu:gloo"), (False, "nccl")):
        cfg = TrainConfig(device="cuda", fsdp_cpu_offload=offload, prompts_per_step=2, gen_prompts=2)
        init_world(cfg, torch.device("cuda"))
        assert calls.pop() == backend


def test_a_vllm_older_than_bsbs_floor_is_one_error_at_engine_start(llm, monkeypatch):
    monkeypatch.setattr(vllm, "__version__", "0.12.0")
    need = min_versions.MIN_VERSIONS["vllm"].release
    with pytest.raises(min_versions.TooOldError, match=rf"bsb needs vllm >= {need} .*vllm 0\.12\.0 is installed") as err:
        gpu_engine()
    assert isinstance(err.value, ValueError)  # the CLI prints it as one line and exits 2
    assert llm.log == []  # before any engine starts


def test_the_weight_sync_after_sleep_wakes_the_weights_first_with_the_cache_emptied(llm):
    engine = gpu_engine()
    weights = [("w", torch.zeros(2)), ("b", torch.ones(1))]
    engine.load_weights(iter(weights))  # awake (a shared engine at the trainer's start): load, nothing to wake
    assert llm.log == [("rpc", "reload_weights"), ("reset_prefix_cache",)]
    llm.log.clear()
    engine.sleep()
    engine.sleep()  # asleep already: nothing more to free
    with pytest.raises(RuntimeError, match="engine sleeps"):
        engine.generate([[1, 2]], max_new_tokens=2)
    engine.load_weights(iter(weights))
    assert llm.log == [
        ("sleep", 2),  # the weights dropped, not copied to the host: the sync overwrites them
        ("empty_cache",),  # the update's freed blocks back to the driver before vLLM maps memory again
        ("wake_up", ["weights"]),
        ("rpc", "reload_weights"),
        ("empty_cache",),  # the gathered tensors and vLLM's load buffers freed before the KV cache returns
        ("wake_up", ["kv_cache"]),
        ("reset_prefix_cache",),
    ]
    assert engine.llm.loaded == ["w", "b", "w", "b"]
    engine.generate([[1, 2]], max_new_tokens=2)  # awake again

    llm.log.clear()  # the trainer's older order, wake_up then load_weights: the same sequence
    engine.sleep()
    engine.wake_up()
    engine.load_weights(iter(weights))
    assert [c[0] for c in llm.log] == [
        "sleep",
        "empty_cache",
        "wake_up",
        "rpc",
        "empty_cache",
        "wake_up",
        "reset_prefix_cache",
    ]


def test_a_cpu_engine_never_sleeps(llm):
    engine = VLLMBackend("m", dtype="float32", max_model_len=1024, device="cpu", in_process=True)
    engine.sleep()
    engine.load_weights(iter([("w", torch.zeros(1))]))
    assert llm.log == [("rpc", "reload_weights"), ("reset_prefix_cache",)]


def test_a_cpu_engine_in_its_own_process_reloads_one_file_without_the_tied_copy(llm):
    engine = VLLMBackend("m", dtype="float32", max_model_len=1024, device="cpu", in_process=False)
    embed = torch.ones(4, 2)
    engine.load_weights(iter([("embed", embed), ("w", torch.zeros(3)), ("lm_head", embed)]))  # a tied head
    assert llm.log == [("rpc", "reload_weights"), ("reset_prefix_cache",)] and engine.llm.loaded == ["embed", "w"]
