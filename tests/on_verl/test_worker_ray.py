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
