"""The ``bsb_tree`` agent loop on verl 0.9.1 with a scripted server: one call, one tree of M(1+k) leaves, shared
prefixes, per-leaf rewards from the bsb task, refills, one sticky request id; and bsb's estimators through verl's
own advantage step, equal to bsb's advantages of the same trees."""

import asyncio

import numpy as np
import pytest
import torch
import transformers
from omegaconf import OmegaConf
from scripted_server import ROW, FakeServers, ScriptedServer, ScriptedTask

from bsb.integrations.verl import plugin
from bsb.integrations.verl.estimators import encode_uid
from bsb.tasks.base import Problem
from bsb.train.advantages import advantages
from bsb.train.rewards import RewardConfig, leaf_reward
from bsb.train.tree import Leaf, PromptTree
from bsb.train.tree_options import CreditOptions


@pytest.fixture(scope="module")
def server():
    s = ScriptedServer()
    yield s
    s.close()


def _run(cls, config, tiny, servers, params, row):
    """One agent-loop call as verl's worker makes it (the loop object is built inside the running event loop)."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    tok = transformers.AutoTokenizer.from_pretrained(tiny)

    async def call():
        from bsb.integrations.verl import tree_loop

        loop = cls(trainer_config=DictConfigWrap(config), server_manager=servers, tokenizer=tok, processor=None, dataset_cls=None,
                   data_config=DictConfigWrap(config.data), hf_model_type="qwen3")
        try:
            return await loop.run(dict(params), **row)
        finally:  # the probe's HTTP session belongs to this event loop, which asyncio.run closes
            for kit in tree_loop._KITS.values():
                if hasattr(kit.probe, "close"):
                    await kit.probe.close()

    return asyncio.run(call()), tok


PARAMS = dict(temperature=1.0, top_p=1.0, top_k=-1, repetition_penalty=1.0, logprobs=False)


def test_the_plugin_registers_through_import_verl():
    assert all(plugin.registered().values())


@pytest.mark.parametrize("short", [0, 2])
def test_one_call_builds_one_trees_m_times_1_plus_k_leaves_with_their_own_rewards(compose, overrides, tiny, server, short):
    from bsb.integrations.verl.tree_loop import BsbTreeAgentLoop

    config = compose(*overrides)
    servers = FakeServers(server, short=short)
    outputs, tok = _run(BsbTreeAgentLoop, config, tiny, servers, PARAMS, ROW)
    assert len(outputs) == 4 * (1 + 2)
    prompt = outputs[0].prompt_ids
    assert prompt == tok.apply_chat_template(ROW["raw_prompt"], add_generation_prompt=True, return_dict=False)  # verl's tokenisation
    task, cfg = ScriptedTask(), RewardConfig(64, 16, 1.0)
    groups = {}
    for out in outputs:
        x = out.extra_fields
        groups.setdefault(x["bsb_group"], []).append(out)
        verdict = task.verify(tok.decode(out.response_ids, skip_special_tokens=True), Problem("abc123", "", "even"))
        assert out.reward_score == pytest.approx(leaf_reward(verdict, len(out.response_ids), cfg))  # each leaf its own
        assert x["reward_extra_info"]["acc"] == float(verdict.correct)
        assert out.prompt_ids == prompt and len(out.response_mask) == len(out.response_ids) <= 64
        assert x["min_global_steps"] == x["max_global_steps"] == 3
    assert len({o.reward_score for o in outputs}) > 1  # the scripted leaves differ, and nothing copied one onto all
    for outs in groups.values():
        root = [o for o in outs if o.extra_fields["bsb_origin"] == "root"]
        assert len(root) == 1 and len(outs) == 3
        t = root[0].extra_fields["bsb_prefix_len"]
        assert t == root[0].extra_fields["bsb_fork"] > 0
        assert all(o.extra_fields["bsb_prefix_len"] == t and o.response_ids[:t] == root[0].response_ids[:t] for o in outs)
    assert outputs[0].extra_fields["bsb_refills"] == short
    assert len(set(servers.request_ids)) == 1 and servers.acquired == 0  # one sticky id; every replica lease returned
    assert server.requests and all(r["logprobs"] == 5 for r in server.requests)


def test_rollout_logprobs_of_siblings_join_the_roots_prefix(compose, overrides, tiny, server):
    from bsb.integrations.verl.tree_loop import BsbTreeAgentLoop

    outputs, _ = _run(BsbTreeAgentLoop, compose(*overrides), tiny, FakeServers(server), dict(PARAMS, logprobs=True), ROW)
    by_group = {}
    for o in outputs:
        by_group.setdefault(o.extra_fields["bsb_group"], []).append(o)
    for outs in by_group.values():
        root = next(o for o in outs if o.extra_fields["bsb_origin"] == "root")
        for o in outs:
            t = o.extra_fields["bsb_prefix_len"]
            assert len(o.response_logprobs) == len(o.response_ids)
            assert o.response_logprobs[:t] == root.response_logprobs[:t]


def test_validation_rows_get_one_chain(compose, overrides, tiny, server):
    from bsb.integrations.verl.tree_loop import BsbSingleAgentLoop

    outputs, _ = _run(BsbSingleAgentLoop, compose(*overrides), tiny, FakeServers(server), PARAMS, ROW)
    assert len(outputs) == 1 and outputs[0].extra_fields["bsb_prefix_len"] == 0


def test_a_row_without_a_gold_answer_is_a_clear_error(compose, overrides, tiny, server):
    from bsb.integrations.verl.tree_loop import BsbTreeAgentLoop

    with pytest.raises(ValueError, match="reward_model.ground_truth"):
        _run(BsbTreeAgentLoop, compose(*overrides), tiny, FakeServers(server), PARAMS, dict(ROW, reward_model={}))


# ---------------------------------------------------------------------------------------------- estimators in verl


def _batch(trees):
    from verl.protocol import DataProto

    rows = [(tree, i) for tree in trees for i in range(len(tree.leaves))]
    T = max(len(leaf.response) for tree in trees for leaf in tree.leaves) + 2
    rewards, mask = torch.zeros(len(rows), T), torch.zeros(len(rows), T, dtype=torch.long)
    for r, (tree, i) in enumerate(rows):
        n = len(tree.leaves[i].response)
        mask[r, :n] = 1
        rewards[r, n - 1] = tree.leaves[i].reward
    uids = np.array([encode_uid(t.prompt_id, t.leaves[i].group, t.leaves[i].prefix_len) for t, i in rows], dtype=object)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uids})
    return data, rows


def _trees():
    out = []
    for p, rewards in enumerate([[1, 0, 0, 1, 1, 0], [0, 0, 1, 0.5, -0.5, 1]]):
        tree = PromptTree(f"p{p}", None)
        for g in range(2):
            t = 3 + g
            tree.leaves += [Leaf([], [0] * (t + 4 + j), g, t, reward=float(rewards[3 * g + j])) for j in range(3)]
        out.append(tree)
    return out


@pytest.mark.parametrize("name, kind, bsb", [
    ("bsb_treerl", "treerl", {}),
    ("bsb_prefix_credit", "prefix_credit", {"prefix_beta": 0.25, "prefix_alpha": 0.3}),
    ("bsb_prefix_credit", "prefix_credit", {"prefix_beta": 0.25, "clamped_prefix": True}),
    ("bsb_prefix_credit", "prefix_credit", {"grpo_std": "sample"}),
    ("bsb_treerl_released", "treerl_released", {}),
])
def test_verls_advantage_step_with_bsbs_estimators_equals_bsbs_advantages(compose, overrides, name, kind, bsb):
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    config = compose(*overrides, f"algorithm.adv_estimator={name}", *[f"bsb.{k}={v}" for k, v in bsb.items()])
    trees = _trees()
    data, rows = _batch(trees)
    keys = [f"{t.prompt_id}_0_{i}" for t, i in rows]
    for out in (compute_advantage(data, adv_estimator=name, config=config.algorithm),
                compute_advantage_for_multi_trajectories(_batch(trees)[0], keys, name, config=config.algorithm)):
        want = {t.prompt_id: advantages(t, kind, options=CreditOptions(**bsb)) for t in trees}  # one name, end to end
        for r, (t, i) in enumerate(rows):
            n = len(t.leaves[i].response)
            torch.testing.assert_close(out.batch["advantages"][r, :n], want[t.prompt_id][i], rtol=0, atol=1e-6)
            assert (out.batch["advantages"][r, n:] == 0).all()


def test_the_estimator_reads_its_options_from_the_bsb_section_of_the_root_config(compose, overrides):
    from bsb.integrations.verl.estimators import estimator_options

    config = compose(*overrides, "bsb.prefix_beta=0.25", "bsb.zero_cont_token_mass=true")
    got, default = estimator_options(config.algorithm), estimator_options(OmegaConf.create({"gamma": 1.0}))
    names = ("prefix_beta", "prefix_alpha", "clamped_prefix", "zero_cont_token_mass", "grpo_std")  # the config's own
    assert [getattr(got, n) for n in names] == [0.25, 0.5, False, True, "population"]
    assert [getattr(default, n) for n in names] == [0.0, 0.5, False, False, "population"]


def test_a_code_rows_ground_truth_becomes_the_code_tasks_hidden_tests():
    from bsb.integrations.verl.tree_loop import problem_from_row
    from bsb.tasks.code.problems import CodeTests
    from bsb.tasks.code.task import CodeTask

    tests = '[{"input": "2\\n", "output": "4\\n", "testtype": "stdin"}]'
    problem = problem_from_row(dict(ROW, reward_model={"ground_truth": tests}), CodeTask(workers=1))
    assert problem.answer == CodeTests("stdin", ("2\n",), ("4\n",))
    assert problem_from_row(ROW).answer == "even"  # a task without parse_answer keeps the ground truth as it is
