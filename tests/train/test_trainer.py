"""The trainer end to end on the HF backend with a test-size synthetic-task model: metrics, dynamic sampling,
homogeneous steps, exact resume, config errors."""

import json

import pytest
import torch

from bsb.tasks.tiny_model import TinyConfig, train_tiny_model
from bsb.train.config import TrainConfig, parse_overrides
from bsb.train.trainer import Trainer

transformers = pytest.importorskip("transformers")

SMALL = TinyConfig(steps=40, batch=8, hidden=64, layers=1, max_operand=3, ops=(1, 2))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(train_tiny_model(SMALL, tmp_path_factory.mktemp("tiny"), progress=False))


def config(model_dir, out, **kw):
    base = dict(model=model_dir, backend="hf", steps=2, prompts_per_step=2, gen_prompts=2, chains=2, siblings=1,
                max_response_len=48, overlong_buffer=8, val_problems=4, val_every=1, save_every=1, out_dir=str(out),
                synthetic_ops=(1,), synthetic_max_operand=3, progress=False, selector="probe_js", lr=1e-3)
    base.update(kw)
    return TrainConfig(**base)


def test_a_tree_step_emits_m_times_1_plus_k_leaves_per_prompt_and_logs_metrics(model_dir, tmp_path):
    tr = Trainer(config(model_dir, tmp_path, dynamic_sampling=False))
    rows = tr.run()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1, 2] and all("val_accuracy" in r for r in lines)
    m = rows[-1]
    assert m["groups_generated"] == 2 and m["tokens_trained"] > 0 and m["tokens_generated"] > 0
    assert len(m["fork_positions"]) == 4  # M = 2 chains for each of 2 prompts
    for key in ("reward_mean", "accuracy", "adv_mean", "sibling_disagreement", "probe_frac", "time_generate", "time_update", "grad_norm"):
        assert key in m
    assert (tmp_path / "final" / "config.json").exists() and (tmp_path / "checkpoint" / "state.json").exists()


def test_tree_rollout_shapes(model_dir, tmp_path):
    tr = Trainer(config(model_dir, tmp_path, chains=3, siblings=2))
    trees, times, _ = tr._rollout(tr._draw(0, 0), seed=0)
    for tree in trees:
        assert len(tree.leaves) == 3 * (1 + 2)
        for _g, idx in tree.groups().items():
            first = tree.leaves[idx[0]]
            assert len(idx) == 3 and all(tree.leaves[i].prefix_len == first.prefix_len for i in idx)
            assert all(tree.leaves[i].response[: first.prefix_len] == first.response[: first.prefix_len] for i in idx)
    assert times.tokens_generated > 0


def test_resume_continues_exactly(model_dir, tmp_path):
    straight = Trainer(config(model_dir, tmp_path / "a", steps=3, dynamic_sampling=False))
    straight.run()
    first = Trainer(config(model_dir, tmp_path / "b", steps=2, dynamic_sampling=False))
    first.run()
    resumed = Trainer(config(model_dir, tmp_path / "b", steps=3, dynamic_sampling=False))
    assert resumed.step == 2
    resumed.run()
    for (name, a), (_, b) in zip(straight.policy.state_dict().items(), resumed.policy.state_dict().items()):
        assert torch.equal(a, b), name
    a = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in b] == [0, 1, 2, 3]
    assert [r.get("reward_mean") for r in a] == [r.get("reward_mean") for r in b]


@pytest.mark.parametrize("kw", [dict(rollout="flat", advantage="grpo", loss="flat"),
                                dict(rollout="two_stage", advantage="prefix_credit", prefix_beta=0.25, two_stage_t_min=8,
                                     two_stage_t_max=16, early_eos="root_resample"),
                                dict(selector="lens_shift", subsegments=True, minibatches=2, micro_batch=3),
                                dict(selector="entropy", homogeneous="skip_step", gate_chars=5)])
def test_variants_run(model_dir, tmp_path, kw):
    m = Trainer(config(model_dir, tmp_path, steps=1, val_every=0, **kw)).run()[-1]
    assert m["step"] == 1 and m["tokens_generated"] > 0


def test_homogeneous_step_takes_the_zero_gradient_step(model_dir, tmp_path):
    tr = Trainer(config(model_dir, tmp_path, dynamic_sampling=False, steps=1))
    rows = [([3, 4], [5, 6, 7], torch.zeros(3))]
    before = [p.detach().clone() for p in tr.policy.parameters()]
    out = tr._update(rows, 0)
    assert out["optimizer"] == "zero_grad_step"
    assert tr.opt.state  # AdamW state exists: the step ran (and decayed the weights)
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.policy.parameters()))


def test_config_errors(model_dir, tmp_path):
    for bad, match in [(dict(siblings=0), "siblings"), (dict(chains=0), "chains"), (dict(selector="nope"), "unknown selector"),
                       (dict(max_response_len=2), "smaller than a probe"), (dict(gen_prompts=1, prompts_per_step=2), "gen_prompts")]:
        with pytest.raises(ValueError, match=match):
            config(model_dir, tmp_path, **bad)
    with pytest.raises(ValueError, match="unknown config field"):
        TrainConfig.from_dict({"learning_rate": 1.0})
    with pytest.raises(FileNotFoundError, match="config.json"):
        Trainer(config(str(tmp_path / "missing"), tmp_path))
    over = parse_overrides(["lr=1e-4", "selector=entropy", "synthetic_ops=[2, 3]"])
    assert TrainConfig.from_dict(over) == TrainConfig(lr=1e-4, selector="entropy", synthetic_ops=(2, 3))


def test_yaml_round_trip(tmp_path):
    import yaml

    cfg = TrainConfig(steps=5, selector="entropy", synthetic_ops=(2, 4))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    assert TrainConfig.from_yaml(path) == cfg


def test_yaml_numbers_and_type_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-4\nsteps: 3\ngate_chars: 30\n")
    cfg = TrainConfig.from_yaml(path)
    assert cfg.lr == 1e-4 and cfg.steps == 3 and cfg.gate_chars == 30
    with pytest.raises(ValueError, match="steps expects int"):
        TrainConfig.from_dict({"steps": "many"})
    with pytest.raises(ValueError, match="dynamic_sampling expects bool"):
        TrainConfig.from_dict({"dynamic_sampling": "yes please"})


def test_dynamic_sampling_keeps_groups_with_reward_variance(model_dir, tmp_path, monkeypatch):
    from bsb.train.rollout import RolloutTimes
    from bsb.train.tree import Leaf, PromptTree

    tr = Trainer(config(model_dir, tmp_path, prompts_per_step=2, gen_prompts=2, max_gen_rounds=3, steps=1))
    calls = []

    def fake_rollout(batch, seed):
        calls.append(seed)
        rewards = [[1.0, 1.0], [0.0, 1.0]] if len(calls) == 1 else [[0.0, 0.0], [1.0, 0.0]]
        trees = [PromptTree(f"p{len(calls)}-{i}", "1", [Leaf([3], [4, 5], 0, 0, reward=r) for r in rs]) for i, rs in enumerate(rewards)]
        return trees, RolloutTimes(), {}

    monkeypatch.setattr(tr, "_rollout", fake_rollout)
    m = tr.train_step()
    assert len(calls) == 2  # the first round had one group with variance: a second round filled the step
    assert m["groups_generated"] == 4 and m["groups_kept"] == 2 and m["groups_homogeneous"] == 2


def test_synthetic_training_never_draws_a_held_out_problem(model_dir, tmp_path):
    # 1-op problems with operands 0-3: 48 distinct, 40 of them held out
    tr = Trainer(config(model_dir, tmp_path, val_problems=40, gen_prompts=30, synthetic_max_operand=3))
    held_out = {p for _, p, _ in tr.val_problems}
    assert len(held_out) == 40
    for step in range(5):
        assert not held_out & {p for _, p, _ in tr._draw(step, 0)}
    with pytest.raises(ValueError, match="distinct synthetic problems"):
        Trainer(config(model_dir, tmp_path, val_problems=40, synthetic_max_operand=2))  # only 27 exist
