"""verl's own rollout worker in Ray local mode, with bsb's override and verl's stock v1 advantage step: each leaf of a
tree reaches the TransferQueue with its own reward and its tree in its uid, and PPOTrainer._compute_advantage (verl's
code, unchanged) with ``bsb_treerl`` writes back exactly bsb's TreeRL advantages of those trees. Slow: Ray and the
TransferQueue start in about 15 s on 2 cores."""

import os
import time

import pytest
import torch
from scripted_server import ROW, FakeServers, ScriptedServer

from bsb.integrations.verl.estimators import decode_uid
from bsb.train.advantages import advantages
from bsb.train.tree import Leaf, PromptTree

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_tq(compose, overrides):
    import ray
    import transfer_queue as tq

    # Workers import the scripted task from tests/support/; the TransferQueue controller and storage each reserve a CPU, so
    # logical CPUs above the 2 cores keep the worker schedulable (a hang otherwise).
    tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    config = compose(*overrides, "algorithm.filter_groups.enable=false", "transfer_queue.backend.SimpleStorage.num_data_storage_units=1")
    config.transfer_queue.enable = True
    tq.init(config.transfer_queue)
    yield config
    tq.close()
    ray.shutdown()


def _wait_finished(tq, uids, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        listing = tq.kv_list("train").get("train", tq.kv_list("train"))
        status = {u: (listing.get(u) or {}).get("status") for u in uids}
        if all(s in ("finished", "failure") for s in status.values()):
            return status
        time.sleep(0.5)
    raise TimeoutError(f"trees not finished in {timeout} s: {status}")


def test_verls_worker_keeps_per_leaf_rewards_and_its_advantage_step_gives_bsbs_tree_credit(ray_tq):
    import numpy as np
    import ray
    import transfer_queue as tq
    from tensordict import NonTensorData, NonTensorStack, TensorDict
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from bsb.integrations.verl.worker import BsbTreeAgentLoopWorker

    config = ray_tq
    server = ScriptedServer()
    try:
        uids = ["u0", "u1"]
        tq.kv_batch_put(keys=uids, partition_id="train", tags=[{"is_prompt": True, "status": "pending", "global_steps": 1}] * 2)
        worker = ray.remote(BsbTreeAgentLoopWorker).remote(config, llm_client=FakeServers(server))
        batch = TensorDict({
            "uid": NonTensorStack(*uids), "index": NonTensorStack(0, 1),
            "raw_prompt": NonTensorStack(ROW["raw_prompt"], [{"role": "user", "content": "t8 t9"}]),
            "reward_model": NonTensorStack({"ground_truth": "even"}, {"ground_truth": "even"}),
            "data_source": NonTensorStack("scripted", "scripted"), "extra_info": NonTensorStack({"index": 0}, {"index": 1}),
        }, batch_size=[2])
        batch["global_steps"] = NonTensorData(1)
        ray.get(worker.generate_sequences.remote(batch))
        assert _wait_finished(tq, uids) == {"u0": "finished", "u1": "finished"}
    finally:
        server.close()

    listing = tq.kv_list("train").get("train", tq.kv_list("train"))
    keys = sorted(k for k in listing if "_" in k)
    assert len(keys) == 2 * 12 and {k.split("_")[0] for k in keys} == set(uids)  # 12 leaves per prompt, one group each
    data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["uid", "rm_scores", "response_mask", "extra_fields"])
    rewards = [float(r.sum()) for r in data["rm_scores"]]
    extras = [getattr(e, "data", e) for e in data["extra_fields"]]
    assert rewards == pytest.approx([e["reward_extra_info"]["score"] for e in extras])  # each leaf kept its own reward
    assert len(set(rewards)) > 1
    trees: dict[str, PromptTree] = {}
    order = []
    for key, uid, n, r in zip(keys, list(data["uid"]), [int(m.sum()) for m in data["response_mask"]], rewards):
        prompt, group, prefix = decode_uid(uid)
        assert prompt == key.split("_")[0]
        tree = trees.setdefault(prompt, PromptTree(prompt, None))
        tree.leaves.append(Leaf([], [0] * n, group, prefix, reward=r))
        order.append((prompt, len(tree.leaves) - 1))
    assert all(sorted(t.groups()) == [0, 1, 2, 3] and any(leaf.prefix_len > 0 for leaf in t.leaves) for t in trees.values())

    class Trainer:  # what PPOTrainer._compute_advantage reads of its trainer
        pass

    trainer = Trainer()
    trainer.config = config
    PPOTrainer._compute_advantage(trainer, KVBatchMeta(keys=keys, tags=[listing[k] for k in keys], partition_id="train"), {})
    got = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages"])["advantages"]
    want = {p: advantages(t, "treerl") for p, t in trees.items()}
    for row, (prompt, i) in enumerate(order):
        torch.testing.assert_close(got[row].float(), want[prompt][i], rtol=0, atol=1e-6)
    assert np.isfinite([float(g.abs().sum()) for g in got]).all()


def test_the_trainers_logged_metrics_hold_the_fork_statistics_of_the_workers_trees(ray_tq, tmp_path, monkeypatch):
    """verl's worker builds trees (recording their forks), verl's advantage step credits them, verl's own step metrics run
    with bsb's subclass on top, and verl's file logger writes the fork statistics that bsb computes on the same trees."""
    import json
    import math
    from types import SimpleNamespace

    import ray
    import transfer_queue as tq
    from tensordict import NonTensorData, NonTensorStack, TensorDict
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import PPOTrainerSync
    from verl.utils.tracking import Tracking

    from bsb.integrations.verl.metrics import with_fork_metrics
    from bsb.integrations.verl.worker import BsbTreeAgentLoopWorker
    from bsb.train.fork_stats import fork_metrics, node_advantages, tree_forks

    config = ray_tq
    server = ScriptedServer()
    uids = ["f0", "f1", "f2"]
    try:
        tq.kv_batch_put(keys=uids, partition_id="train", tags=[{"is_prompt": True, "status": "pending", "global_steps": 1}] * 3)
        worker = ray.remote(BsbTreeAgentLoopWorker).remote(config, llm_client=FakeServers(server))
        prompts = [ROW["raw_prompt"], [{"role": "user", "content": "t8 t9"}], [{"role": "user", "content": "t10 t11 t12"}]]
        batch = TensorDict({
            "uid": NonTensorStack(*uids), "index": NonTensorStack(0, 1, 2), "raw_prompt": NonTensorStack(*prompts),
            "reward_model": NonTensorStack(*[{"ground_truth": "even"}] * 3),
            "data_source": NonTensorStack(*["scripted"] * 3), "extra_info": NonTensorStack(*[{"index": i} for i in range(3)]),
        }, batch_size=[3])
        batch["global_steps"] = NonTensorData(1)
        ray.get(worker.generate_sequences.remote(batch))
        _wait_finished(tq, uids)
    finally:
        server.close()

    listing = tq.kv_list("train").get("train", tq.kv_list("train"))
    # in each tree's leaf order ({uid}_{session}_{i}): a group's first leaf is its root chain
    keys = sorted((k for k in listing if k.split("_")[0] in uids and "_" in k), key=lambda k: (k.split("_")[0], int(k.split("_")[-1])))
    meta = KVBatchMeta(keys=keys, tags=[listing[k] for k in keys], partition_id="train")
    trainer = with_fork_metrics(PPOTrainerSync)(config)
    trainer.agent_loop_manager = SimpleNamespace(agent_loop_workers=[worker])
    trainer.resource_pool_manager = SimpleNamespace(get_n_gpus=lambda: 1)
    metrics = {}
    trainer._compute_advantage(meta, metrics)
    trainer._compute_metrics(meta, metrics, {"step": 1.0, "gen": 0.5, "adv": 0.1}, global_steps=1, epoch=0)

    # bsb's statistics of the same trees, rebuilt from the rows: leaves' outcomes, forks and advantages
    data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["uid", "extra_fields", "advantages", "response_mask"])
    trees: dict[str, PromptTree] = {}
    advs: dict[str, list] = {}
    for uid, extra, adv, mask in zip(list(data["uid"]), data["extra_fields"], data["advantages"], data["response_mask"]):
        extra = getattr(extra, "data", extra)
        prompt, group, prefix = decode_uid(uid)
        tree = trees.setdefault(prompt, PromptTree(prompt, None, refills=extra["bsb_refills"], fallbacks=extra["bsb_fallbacks"]))
        info = extra["reward_extra_info"]
        tree.leaves.append(Leaf([], [0] * int(mask.sum()), group, prefix, info["score"], bool(info["acc"])))
        if len(tree.fork_positions) <= group:
            tree.fork_positions.append(None if extra["bsb_fork"] < 0 else extra["bsb_fork"])
            tree.fork_scores.append(extra["bsb_fork_score"])
        advs.setdefault(prompt, []).append(adv.float())
    want = fork_metrics([tree_forks(t) for t in trees.values()], *node_advantages(list(trees.values()), list(advs.values())))
    assert want["forks"] > 0 and not math.isnan(want["adv_abs_prefix"])

    path = tmp_path / "verl.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = Tracking(project_name="bsb", experiment_name="t", default_backend=["file"], config={})
    logger.log(data=metrics, step=1)
    logger.finish()
    logged = json.loads(path.read_text().splitlines()[0])["data"]
    assert "training/global_step" in logged and "critic/advantages/mean" in logged  # verl's own step metrics ran
    for key, value in want.items():
        if key != "fork_rel" and not math.isnan(value):
            assert logged[f"bsb/{key}"] == pytest.approx(value), key
    assert logged["bsb/forks"] == 3 * 4  # every tree's M = 4 roots forked
    assert ray.get(worker.bsb_fork_trees.remote()) == []  # collected once: the next step counts the next trees
