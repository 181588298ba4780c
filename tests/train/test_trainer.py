"""The trainer end to end on the HF backend with a test-size synthetic-task model: metrics, dynamic sampling,
homogeneous steps, exact resume, config errors."""

import dataclasses
import json
import logging
import os
import shutil

import pytest
import torch

from bsb.embedded.model import TinyConfig, train_tiny_model
from bsb.train import phases, update
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
                task="arith", task_options=dict(ops=[1], max_operand=3), progress=False, selector="probe_js", lr=1e-3)
    base.update(kw)
    return TrainConfig(**base)


def rollout(tr, step=0, round_=0, seed=0):
    problems = phases.draw(tr.task, tr.cfg, step, round_, tr.held_out)
    gen = phases.generate_trees(problems, [tr._encode(p) for p in problems], tr.cfg.rollout, tr.cfg, tr.plan, tr.ctx, seed)
    return problems, gen


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
    saved = (tmp_path / "config.yaml").read_text()  # the chosen prompt format and the first held-out prompt as rendered
    first = tr.val_problems[0].prompt.strip()
    assert "# prompt_format: plain" in saved and f"#   {first}" in saved
    assert TrainConfig.from_yaml(tmp_path / "config.yaml") == tr.cfg  # the comment does not disturb a reload


def test_tree_rollout_shapes(model_dir, tmp_path):
    tr = Trainer(config(model_dir, tmp_path, chains=3, siblings=2))
    _, gen = rollout(tr)
    trees, times = gen.trees, gen.times
    for tree in trees:
        assert len(tree.leaves) == 3 * (1 + 2)
        for _g, idx in tree.groups().items():
            first = tree.leaves[idx[0]]
            assert len(idx) == 3 and all(tree.leaves[i].prefix_len == first.prefix_len for i in idx)
            assert all(tree.leaves[i].response[: first.prefix_len] == first.response[: first.prefix_len] for i in idx)
    assert times.tokens_generated > 0


def test_reads_of_an_hf_rollout_come_from_its_kept_kv_and_choose_the_packed_reads_forks(model_dir, tmp_path):
    # (this test-size model commits no answers, so Lens-Shift's kept-KV reads are checked in tests/engine/test_packed.py)
    tr = Trainer(config(model_dir, tmp_path, chains=3))
    assert tr.hf.keep_kv and tr.backend is tr.hf
    _, kept = rollout(tr)
    assert tr.hf._kept is not None  # the siblings' generation left its keys (the trainer drops them after the rollout)
    tr.hf.keep_kv_for_reads(False)
    _, packed = rollout(tr)
    assert [t.fork_positions for t in kept.trees] == [t.fork_positions for t in packed.trees]
    assert kept.times.probe_cached > 0 and packed.times.probe_cached == 0
    assert kept.times.probe_floor == packed.times.probe_floor > 0
    read = lambda g: sum(t.probe_tokens for t in g.trees)  # noqa: E731
    assert read(kept) <= kept.times.probe_floor < read(packed)  # only the suffixes: C·E (L = 1)


def test_kept_weights_the_best_and_their_export_load_in_transformers(model_dir, tmp_path, monkeypatch):
    import transformers

    from bsb.commands.export import export
    from bsb.run_storage import best_weights, weight_steps

    accs = iter([0.5, 0.75, 0.5, 0.25])  # held-out accuracy at steps 0-3: the best is step 1
    monkeypatch.setattr(Trainer, "validate", lambda self: {"val_accuracy": next(accs)})
    tr = Trainer(config(model_dir, tmp_path, steps=3, keep_last=2, keep_best=True, save_every=0))
    tr.run()
    assert weight_steps(tmp_path) == [2, 3]  # the newest two validation steps
    assert best_weights(tmp_path) == {"step": 1, "val_accuracy": 0.75}
    best = export(tmp_path, best=True)
    assert best == tmp_path / "export-best" and json.loads((best / "bsb_export.json").read_text())["step"] == 1
    model = transformers.AutoModelForCausalLM.from_pretrained(best)
    assert transformers.AutoTokenizer.from_pretrained(best) is not None and model.config.model_type == "qwen3"
    assert (export(tmp_path, step=3) / "model.safetensors").exists() and export(tmp_path).name == "export-final"
    with pytest.raises(FileNotFoundError, match=r"no weights of step 1 \(kept: 2, 3; keep_last chooses\)"):
        export(tmp_path, step=1)
    with pytest.raises(FileExistsError, match="--force"):
        export(tmp_path, best=True)
    assert not any(p.name.endswith((".tmp", ".old")) for p in tmp_path.rglob("*"))  # every folder renamed into place
    from bsb.run_storage import drop_weights_after

    drop_weights_after(tmp_path, 2)  # a resume from step 2: step 3's weights were the discarded run's
    assert weight_steps(tmp_path) == [2] and best_weights(tmp_path)["step"] == 1
    drop_weights_after(tmp_path, 0)  # the best (step 1) is after a step-0 checkpoint too
    assert weight_steps(tmp_path) == [] and best_weights(tmp_path) is None


def test_steps_0_scores_the_model_once_in_a_fresh_folder_and_never_over_a_run(model_dir, tmp_path, capsys):
    from bsb.cli import main

    tr = Trainer(config(model_dir, tmp_path / "score", steps=0, val_problems=6, keep_best=True, keep_last=-1))
    rows = tr.run()
    tr.close()
    assert [r["step"] for r in rows] == [0] and len(rows[0]["val_correct"]) == 6
    row = rows[0]  # what a score reads: accuracy, and why responses earned nothing
    assert 0 <= row["val_no_answer"] <= 1 and 0 <= row["val_cut"] <= 1 and 0 < row["val_tokens"] <= 48
    assert row["val_accuracy"] == sum(row["val_correct"]) / 6
    assert {p.name for p in (tmp_path / "score").iterdir()} == {".lock", "config.yaml", "metrics.jsonl"}  # no weights
    with pytest.raises(ValueError, match="steps=0 scores a model in a fresh out_dir; .* holds a run"):
        Trainer(config(model_dir, tmp_path / "score", steps=0))
    Trainer(config(model_dir, tmp_path / "run", steps=1, val_problems=2)).run()
    with pytest.raises(ValueError, match="holds a run"):  # a run's folder: its metrics are never written over
        Trainer(config(model_dir, tmp_path / "run", steps=0))
    overrides = [f"model={model_dir}", "backend=hf", "task=arith", "task_options.ops=[1]", "steps=0", "val_problems=5",
                 "max_response_len=48", f"out_dir={tmp_path / 'cli'}", "progress=false"]
    assert main(["train", "--set", *overrides]) == 0
    out = capsys.readouterr().out
    assert "held-out accuracy at step 0: " in out and "95% interval" in out and "5 problems x 1 draw" not in out
    assert "5 problems x 4 draws" in out and "final model" not in out and "no answer" in out


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
                                dict(selector="entropy", homogeneous="skip_step", task_options=dict(ops=[1], max_operand=3, gate_chars=5),
                                     loss_agg="seq-mean-token-mean", clip_high=0.2),
                                dict(device="cpu", dtype="bfloat16", selector="lens_shift"),
                                dict(rollout="two_stage", advantage="prefix_credit", clamped_prefix=True, zero_cont_token_mass=True,
                                     two_stage_t_min=8, two_stage_t_max=16, unit_question_grad=True, grad_accum_questions=2)])
def test_variants_run(model_dir, tmp_path, kw):
    m = Trainer(config(model_dir, tmp_path, steps=1, val_every=0, **kw)).run()[-1]
    assert m["step"] == 1 and m["tokens_generated"] > 0


def test_use_selector_swaps_the_fork_rule_on_the_same_policy_or_changes_nothing(model_dir, tmp_path):
    tr = Trainer(config(model_dir, tmp_path, steps=1, val_every=0, dynamic_sampling=False))
    policy, opt = tr.policy, tr.opt
    tr.use_selector("entropy")
    assert tr.cfg.selector == "entropy" and tr.selector.name == "entropy" and tr.ctx.selector is tr.selector
    m = tr.train_step()
    assert m["step"] == 1 and m["forks"] > 0 and tr.policy is policy and tr.opt is opt
    before = (tr.cfg, tr.selector, tr.ctx)
    with pytest.raises(ValueError, match="unknown selector"):
        tr.use_selector("nope")
    assert (tr.cfg, tr.selector, tr.ctx) == before  # a refused swap leaves the trainer as it was
    tr.backend = object()  # a separate engine, as if started for a probe with no suffix: too short for probe_js's
    tr.selector.config = dataclasses.replace(tr.selector.config, suffix=())
    with pytest.raises(ValueError, match="rollout engine was started with"):
        tr.use_selector("probe_js")
    assert (tr.cfg, tr.selector, tr.ctx) == before


def test_homogeneous_step_takes_the_zero_gradient_step(model_dir, tmp_path):
    tr = Trainer(config(model_dir, tmp_path, dynamic_sampling=False, steps=1))
    rows = [update.Row([3, 4], [5, 6, 7], torch.zeros(3), 0)]
    before = [p.detach().clone() for p in tr.policy.parameters()]
    out = update.update_policy(tr.policy, tr.opt, tr.sched, rows, tr.cfg, tr.plan, tr.pad, 0)
    assert out["optimizer"] == "zero_grad_step"
    assert tr.opt.state  # AdamW state exists: the step ran (and decayed the weights)
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.policy.parameters()))


def test_config_errors(model_dir, tmp_path):
    for bad, match in [(dict(siblings=0), "siblings"), (dict(chains=0), "chains"), (dict(selector="nope"), "unknown selector"),
                       (dict(max_response_len=2), "max_response_len=2: a fork needs a prefix"), (dict(gen_prompts=1, prompts_per_step=2), "gen_prompts")]:
        with pytest.raises(ValueError, match=match):
            config(model_dir, tmp_path, **bad)
    with pytest.raises(ValueError, match="unknown config field"):
        TrainConfig.from_dict({"learning_rate": 1.0})
    with pytest.raises(FileNotFoundError, match="config.json"):
        Trainer(config(str(tmp_path / "missing"), tmp_path))
    over = parse_overrides(["lr=1e-4", "selector=entropy", "task_options.ops=[2, 3]", "task_options.max_operand=4"])
    assert TrainConfig.from_dict(over) == TrainConfig(lr=1e-4, selector="entropy", task_options={"ops": [2, 3], "max_operand": 4})


def test_yaml_round_trip(tmp_path):
    import yaml

    cfg = TrainConfig(steps=5, selector="entropy", task_options={"ops": [2, 4]}, lens_layers=[0, 1])
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    assert TrainConfig.from_yaml(path) == cfg


def test_a_config_file_starts_from_its_base_and_overrides_it(tmp_path):
    (tmp_path / "arms").mkdir()
    (tmp_path / "base.yaml").write_text("steps: 7\nselector: entropy\nlr: 1e-5\ntask_options: {ops: [2], max_operand: 3}\n")
    arm = tmp_path / "arms" / "arm.yaml"
    arm.write_text("base: ../base.yaml\nselector: midpoint\ntask_options: {ops: [4]}\n")
    cfg = TrainConfig.from_yaml(arm)
    assert (cfg.steps, cfg.selector, cfg.lr) == (7, "midpoint", 1e-5)
    assert cfg.task_options == {"ops": [4], "max_operand": 3}  # merged option by option
    (tmp_path / "base.yaml").write_text("base: arms/arm.yaml\n")
    with pytest.raises(ValueError, match="its base chain comes back to it"):
        TrainConfig.from_yaml(arm)
    arm.write_text("base: [1]\n")
    with pytest.raises(ValueError, match="base must name a config file"):
        TrainConfig.from_yaml(arm)
    arm.write_text("base: nowhere.yaml\n")
    with pytest.raises(FileNotFoundError, match="No such file.*nowhere.yaml"):
        TrainConfig.from_yaml(arm)


def test_yaml_numbers_and_type_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-4\nsteps: 3\ntask_options: {gate_chars: 30}\n")
    cfg = TrainConfig.from_yaml(path)
    assert cfg.lr == 1e-4 and cfg.steps == 3 and cfg.task_options == {"gate_chars": 30}
    with pytest.raises(ValueError, match="task_options expects dict"):
        TrainConfig.from_dict({"task_options": [1]})
    with pytest.raises(ValueError, match="steps expects int"):
        TrainConfig.from_dict({"steps": "many"})
    with pytest.raises(ValueError, match="dynamic_sampling expects bool"):
        TrainConfig.from_dict({"dynamic_sampling": "yes please"})


def _fake_generate(calls, rewards_by_call, correct_by_call=None):
    from bsb.train.tree import Leaf, PromptTree

    def fake(problems, prompts, kind, cfg, plan, ctx, seed, first=0):
        calls.append(seed)
        rewards = rewards_by_call[len(calls) - 1]
        trees = [PromptTree(f"p{len(calls)}-{i}", "1", [Leaf([3], [4, 5], 0, 0) for _ in rs]) for i, rs in enumerate(rewards)]
        return phases.Generated(trees, kind=kind)

    def fake_score(trees, problems, task, decode, reward_cfg, eos):
        rewards = rewards_by_call[len(calls) - 1]
        correct = (correct_by_call or rewards_by_call)[len(calls) - 1]
        for tree, rs, cs in zip(trees, rewards, correct):
            for leaf, r, c in zip(tree.leaves, rs, cs):
                leaf.reward, leaf.correct = r, bool(c > 0.5)
        from collections import Counter

        return Counter()

    return fake, fake_score


def test_dynamic_sampling_keeps_groups_whose_accuracy_differs(model_dir, tmp_path, monkeypatch):
    tr = Trainer(config(model_dir, tmp_path, prompts_per_step=2, gen_prompts=2, max_gen_rounds=3, steps=1))
    calls = []
    fake, score = _fake_generate(calls, [[[1.0, 1.0], [0.0, 1.0]], [[0.0, 0.0], [1.0, 0.0]]])
    monkeypatch.setattr(phases, "generate_trees", fake)
    monkeypatch.setattr(phases, "score_trees", score)
    m = tr.train_step()
    assert len(calls) == 2  # the first round had one informative group: a second round filled the step
    assert m["groups_generated"] == 4 and m["groups_kept"] == 2 and m["groups_homogeneous"] == 2
    assert len(set(calls)) == 2  # each round its own seed stream


@pytest.mark.parametrize("fill", [False, True])
def test_fill_batch_trains_exactly_p_train_groups_or_names_the_shortfall(model_dir, tmp_path, monkeypatch, fill):
    """verl's DAPO trainer: rounds until P_train groups are kept, then exactly P_train; an error after the last round."""
    tr = Trainer(config(model_dir, tmp_path, prompts_per_step=2, gen_prompts=2, max_gen_rounds=2, steps=1,
                        fill_batch=fill))
    calls = []  # round 1 keeps one informative group, round 2 two more: three kept, two trained
    fake, score = _fake_generate(calls, [[[1.0, 1.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]])
    monkeypatch.setattr(phases, "generate_trees", fake)
    monkeypatch.setattr(phases, "score_trees", score)
    m = tr.train_step()
    assert len(calls) == 2 and m["groups_kept"] == 2 and m["tokens_trained"] == 2 * 2 * 2  # 2 groups × 2 leaves × 2
    tr2 = Trainer(config(model_dir, tmp_path / "short", prompts_per_step=2, gen_prompts=2, max_gen_rounds=2, steps=1,
                         fill_batch=fill))
    calls.clear()
    fake, score = _fake_generate(calls, [[[1.0, 1.0], [0.0, 1.0]], [[0.0, 0.0], [1.0, 1.0]]])  # one kept in two rounds
    monkeypatch.setattr(phases, "generate_trees", fake)
    monkeypatch.setattr(phases, "score_trees", score)
    if fill:
        with pytest.raises(ValueError, match="fill_batch kept 1 of prompts_per_step=2 informative groups in max_gen_rounds=2"):
            tr2.train_step()
    else:
        assert tr2.train_step()["groups_kept"] == 1  # the default trains on what the rounds kept


@pytest.mark.parametrize("keep_by,kept", [("accuracy", 0), ("reward", 1)])
def test_an_all_wrong_group_that_differs_only_by_the_overlong_penalty(model_dir, tmp_path, monkeypatch, keep_by, kept):
    """[Fork] App. A filters by accuracy: all-wrong leaves with rewards 0 and -0.5 (penalty) carry no signal."""
    tr = Trainer(config(model_dir, tmp_path, prompts_per_step=1, gen_prompts=1, max_gen_rounds=1, steps=1, keep_by=keep_by))
    calls = []
    fake, score = _fake_generate(calls, [[[0.0, -0.5]]], [[[0.0, 0.0]]])
    monkeypatch.setattr(phases, "generate_trees", fake)
    monkeypatch.setattr(phases, "score_trees", score)
    from bsb.train.tree import Leaf, PromptTree

    tree = PromptTree("p", "1", [Leaf([3], [4], 0, 0, reward=0.0, correct=False), Leaf([3], [4], 0, 0, reward=-0.5, correct=False)])
    assert len(phases.keep_groups([tree], tr.cfg)) == kept
    m = tr.train_step()
    assert m["groups_homogeneous"] == 1  # counted by accuracy


def test_training_never_draws_a_held_out_problem(model_dir, tmp_path):
    # 1-op problems with operands 0-3: 48 distinct, 40 of them held out
    tr = Trainer(config(model_dir, tmp_path, val_problems=40, gen_prompts=30))
    held_out = {p.prompt for p in tr.val_problems}
    assert len(held_out) == 40
    for step in range(5):
        assert not held_out & {p.prompt for p in phases.draw(tr.task, tr.cfg, step, 0, tr.held_out)}
    with pytest.raises(ValueError, match="distinct arith problems"):
        Trainer(config(model_dir, tmp_path, val_problems=40, task_options=dict(ops=[1], max_operand=2)))  # only 27 exist


def test_policy_is_in_train_mode_for_updates_and_eval_mode_for_reads(model_dir, tmp_path):
    tr = Trainer(config(model_dir, tmp_path, dynamic_sampling=False, steps=1, val_every=0))
    modes = []
    # the decoder (policy.model) runs in every forward: generation, reads, and the chunked training log-probs
    hook = tr.policy.model.register_forward_pre_hook(lambda mod, args: modes.append(mod.training))
    try:
        before = len(modes)
        rows = [update.Row([3, 4], [5, 6, 7], torch.tensor([1.0, -1.0, 0.5]), 0)]
        update.update_policy(tr.policy, tr.opt, tr.sched, rows, tr.cfg, tr.plan, tr.pad, 0)
        assert modes[before:] and all(modes[before:])  # every update forward in train mode
        after = len(modes)
        tr.train_step()
        assert not tr.policy.training
        reads = modes[after:]
        assert True in reads and False in reads  # the step read and generated in eval mode, updated in train mode
    finally:
        hook.remove()


def test_flat_warmup_until_the_active_steps(model_dir, tmp_path):
    cfg = config(model_dir, tmp_path, rollout="two_stage", two_stage_t_min=8, two_stage_t_max=16, bifurcate_after_active=3)
    assert [phases.rollout_kind(cfg, a) for a in range(5)] == ["flat_warmup"] * 3 + ["two_stage"] * 2
    tr = Trainer(config(model_dir, tmp_path, bifurcate_after_active=1, dynamic_sampling=False, steps=1, val_every=0))
    m = tr.train_step()
    assert m["rollout"] == "flat_warmup" and m["census_flat_warmup_pairs"] == 2 * 2  # M=2 chains for each of 2 prompts
    assert m["fork_positions"] == []


def test_a_task_from_outside_the_package_trains_through_the_cli(model_dir, tmp_path):
    from bsb.cli import main

    out = tmp_path / "own"
    args = ["train", "--set", "task=own_task:EvenOdd", f"model={model_dir}", "backend=hf", "steps=2", "prompts_per_step=2",
            "gen_prompts=2", "chains=2", "siblings=1", "max_response_len=24", "val_problems=2", "val_every=1", f"out_dir={out}",
            "progress=false", "selector=midpoint", "overlong_buffer=0", "dynamic_sampling=false"]
    main(args)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1, 2] and lines[-1]["tokens_generated"] > 0
    assert sum(v for k, v in lines[-1].items() if k.startswith("verdict_")) == 2 * 2 * 2  # every leaf judged by the task


@pytest.mark.parametrize("task,match", [("nope", "unknown task 'nope'"), ("no_such_module:Task", "does not import"),
                                        ("own_task:Missing", "has no class 'Missing'"), ("own_task:NotATask", "does not satisfy the Task protocol")])
def test_bad_tasks_fail_before_any_model_loads(tmp_path, task, match):
    with pytest.raises(ValueError, match=match):
        Trainer(TrainConfig(model=str(tmp_path / "no-model"), task=task, out_dir=str(tmp_path / "o")))


def test_bad_task_options_and_files_fail_before_any_model_loads(tmp_path):
    with pytest.raises(ValueError, match="has no option"):
        Trainer(TrainConfig(model=str(tmp_path / "no-model"), task_options={"opz": [1]}, out_dir=str(tmp_path / "o")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1 + 1?"}\n')
    with pytest.raises(ValueError, match="missing field 'answer'"):
        Trainer(TrainConfig(model=str(tmp_path / "no-model"), task="math", task_options={"train_file": str(bad)}, out_dir=str(tmp_path / "o")))
    with pytest.raises(ValueError, match="set task option val_file"):
        Trainer(TrainConfig(model=str(tmp_path / "no-model"), task="math", out_dir=str(tmp_path / "o")))


def test_bf16_on_the_cpu_keeps_fp32_master_weights_and_reads_in_bf16(model_dir, tmp_path):
    tr = Trainer(config(model_dir, tmp_path, device="cpu", dtype="bfloat16", steps=1, val_every=0, dynamic_sampling=False))
    assert tr.dtype == torch.bfloat16 and next(tr.policy.parameters()).dtype == torch.float32
    seen = []
    hook = tr.policy.lm_head.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    try:
        m = tr.train_step()
    finally:
        hook.remove()
    assert torch.bfloat16 in seen  # generation, reads and the update ran under bf16 autocast
    assert m["tokens_trained"] > 0 and all(p.dtype == torch.float32 for p in tr.policy.parameters())
    assert all(s["exp_avg"].dtype == torch.float32 for s in tr.opt.state.values())


@pytest.mark.parametrize("kw,match", [(dict(device="tpu"), "device must be auto, cpu, cuda or cuda:N"),
                                      (dict(dtype="float8"), "dtype must be one of"),
                                      (dict(vllm_gpu_memory_utilization=1.0), "vllm_gpu_memory_utilization must be in")])
def test_bad_device_dtype_and_memory_share(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(out_dir=str(tmp_path), **kw)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_where_there_is_none_fails_before_any_model_loads(tmp_path):
    with pytest.raises(ValueError, match="has no CUDA device"):
        Trainer(TrainConfig(model=str(tmp_path / "no-model"), device="cuda", out_dir=str(tmp_path / "o")))


def test_colocation_check_names_the_missing_room(tmp_path, monkeypatch):
    from bsb.engine import memory as D

    (tmp_path / "config.json").write_text('{"torch_dtype": "bfloat16"}')
    (tmp_path / "model.safetensors").write_bytes(b"0" * (2 * 1000))  # 1,000 bf16 parameters
    assert D.checkpoint_params(tmp_path) == 1000

    class Props:
        total_memory = 100_000

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: Props())
    D.check_colocation(tmp_path, torch.device("cuda"), 0.5)  # 16 kB needed, 50 kB left
    with pytest.raises(ValueError, match="leaves the trainer .* lower vllm_gpu_memory_utilization"):
        D.check_colocation(tmp_path, torch.device("cuda"), 0.9)  # 10 kB left


def test_colocation_check_refuses_an_update_whose_activations_do_not_fit(tmp_path, monkeypatch):
    """A Llama of 4 layers (d 320, f 1,000) beside an engine on a 2 GB GPU: four 8,192-token rows keep ~10 GB of
    activations, one error at start naming gradient_checkpointing and a micro_batch_tokens that fits; checkpointed
    one-row micro-batches pass."""
    from bsb.engine import memory as D
    from bsb.engine.activations import update_activation_bytes

    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=320, intermediate_size=1000, num_attention_heads=5,
                                   num_key_value_heads=5, head_dim=64, num_hidden_layers=4)
    cfg.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"0" * (2 * 1000))  # 1,000 bf16 parameters: state is negligible

    class Props:
        total_memory = 2 * 2**30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: Props())
    assert update_activation_bytes(cfg, 4, 8192, False) > 2**30
    with pytest.raises(ValueError, match=r"micro-batch of 4 x 8,192 tokens keeps about .* GiB of activations .* "
                                         r"set gradient_checkpointing=true and micro_batch_tokens=\d+"):
        D.check_colocation(tmp_path, torch.device("cuda"), 0.5, update=[(4, 8192, False)])
    D.check_colocation(tmp_path, torch.device("cuda"), 0.5, update=[(1, 8192, True)])
    small = config("unused", tmp_path / "r", micro_batch=4, micro_batch_tokens=9000, max_prompt_len=192,
                   max_response_len=8000, gradient_checkpointing=True)
    # a row of the longest length alone, or r rows padded to the widest that fits the budget (priced padded)
    assert small.micro_batch_shapes() == [(1, 8192, True), (2, 4500, True), (3, 3000, True), (4, 2250, True)]
    assert config("unused", tmp_path / "r", micro_batch=3).micro_batch_shapes() == [(3, 48 + 256, False)]


def test_the_start_check_prices_the_worst_micro_batch_a_paper_budget_admits(tmp_path, monkeypatch):
    """Qwen3-8B's recipe (micro_batch_tokens 26,048 = one row of 2,048 + 24,000): the update prices micro-batches
    padded, so no micro-batch holds more than 26,048 positions; the start check prices the worst shape of them, a
    padded pair whose masks one row does not keep, never a 20,000-token row with three others (80,000 positions)."""
    from pathlib import Path

    from bsb.engine import memory as D
    from bsb.engine.activations import update_activation_bytes, worst_micro_batch

    recipe = TrainConfig.from_yaml(Path(__file__).parents[2] / "configs" / "paper" / "qwen3-8b" / "math" / "probe_js.yaml")
    shapes = recipe.micro_batch_shapes()
    assert shapes[0] == (1, 26_048, True) and all(r * w <= 26_048 for r, w, _ in shapes)
    arch = transformers.Qwen3Config(vocab_size=151_936, hidden_size=4096, intermediate_size=12_288, num_hidden_layers=36,
                                    num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    worst = worst_micro_batch(arch, shapes)
    assert worst[0] > 1 and update_activation_bytes(arch, *worst) > update_activation_bytes(arch, 1, 26_048, True)
    assert update_activation_bytes(arch, *worst) < update_activation_bytes(arch, 4, 20_000, True) / 2
    arch.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"0" * 2000)  # 1,000 bf16 parameters: only the activations count

    class Props:
        total_memory = 85 * 10**9

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: Props())
    need = update_activation_bytes(arch, *worst)
    with pytest.raises(ValueError, match=rf"micro-batch of {worst[0]} x {worst[1]:,} tokens keeps about "
                                         rf"{need / 2**30:.1f} GiB"):
        D.check_colocation(tmp_path, torch.device("cuda"), 1 - (need - 2**30) / 85e9, update=shapes)


def test_offloaded_shards_leave_the_gpu_the_root_and_two_layers(tmp_path, monkeypatch):
    """fsdp_cpu_offload: a Qwen3-8B-shaped trainer needs 131 GB of fp32 state on one GPU, but with its shards in host
    memory only the root (untied embeddings and head) and two gathered layers (bf16 + fp32 gradient): about 9.8 GB.
    The start check refuses the one layout on an 85 GB H100 and accepts the other; bsb cost's default GPU is this
    machine's (an H200's 150e9 bytes without one)."""
    from bsb.commands.cost import H200_BYTES, gpu_bytes
    from bsb.engine import memory as D

    arch = transformers.Qwen3Config(vocab_size=151_936, hidden_size=4096, intermediate_size=12_288, num_hidden_layers=36,
                                    num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False)
    params = 8.19e9
    root = 151_936 * 4096 * 2
    assert D.offload_gpu_bytes(arch, params) == pytest.approx(6 * (root + 2 * (params - root) / 36))
    assert 9e9 < D.offload_gpu_bytes(arch, params) < 11e9
    plan = D.memory_plan(params, 1, 85e9, 0.5, D.offload_gpu_bytes(arch, params))
    assert plan["fits"] and plan["host_bytes"] == 16 * params and not D.memory_plan(params, 1, 85e9, 0.5)["fits"]
    arch.save_pretrained(tmp_path)
    monkeypatch.setattr(D, "checkpoint_params", lambda path: params)

    class Props:
        total_memory = 85 * 10**9

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: Props())
    with pytest.raises(ValueError, match=r"need about 122.0 GiB a GPU; .* \(fsdp_cpu_offload=true under torchrun"):
        D.check_colocation(tmp_path, torch.device("cuda"), 0.5)
    D.check_colocation(tmp_path, torch.device("cuda"), 0.5, offload=True)
    with pytest.raises(ValueError, match="even with fsdp_cpu_offload its root module and two gathered layers need"):
        D.check_colocation(tmp_path, torch.device("cuda"), 0.95, offload=True)
    assert gpu_bytes(80) == 80e9
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_bytes(None) == H200_BYTES == 150e9
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gpu_bytes(None) == 85e9  # the GPU at hand, as torch reports it


def test_sharded_ranks_carry_fsdp2s_root_and_checkpoint_bf16_inputs(tmp_path, monkeypatch):
    """Over several ranks FSDP2's root stays gathered (bsb.train.sharding): Qwen3-8B's untied embeddings and head in
    bf16 (2.5 GB) and the head's whole gradient in bf16 and fp32 (1.2 + 2.5 GB) come beside the 16P/N shards, and a
    checkpointed layer keeps its input in bf16 (2 bytes a value) where one process keeps fp32 (4). The start check at
    world size 2 charges both; one process charges neither."""
    from bsb.engine import memory as D
    from bsb.engine.activations import input_bytes, update_activation_bytes

    arch = transformers.Qwen3Config(vocab_size=151_936, hidden_size=4096, intermediate_size=12_288, num_hidden_layers=36,
                                    num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False)
    head = 151_936 * 4096
    assert D.fsdp_root_bytes(arch) == 2 * (2 * head) + (2 + 4) * head and 6.2e9 < D.fsdp_root_bytes(arch) < 6.3e9
    tied = transformers.Qwen3Config(**{**arch.to_dict(), "tie_word_embeddings": True})
    assert D.fsdp_root_bytes(tied) == 2 * head + 6 * head  # one matrix gathered, its gradient as the head's
    params = 8.19e9
    plan = D.memory_plan(params, 2, 85e9, 0.5, root=D.fsdp_root_bytes(arch))
    assert plan["trainer_bytes"] == pytest.approx(16 * params / 2 + D.fsdp_root_bytes(arch))
    assert plan["root_bytes"] == D.fsdp_root_bytes(arch) and D.memory_plan(params, 2, 85e9, 0.5)["root_bytes"] == 0
    assert input_bytes(True) == 2 and input_bytes(True, 4) == 4 and input_bytes(False) == 4
    one, fsdp = (update_activation_bytes(arch, 1, 26_048, True, input_bytes=b) for b in (4, 2))
    assert one - fsdp == 26_048 * 36 * 2 * 4096  # the layer inputs alone differ
    assert update_activation_bytes(arch, 1, 26_048, False, input_bytes=2) == update_activation_bytes(arch, 1, 26_048, False)
    arch.save_pretrained(tmp_path)
    monkeypatch.setattr(D, "checkpoint_params", lambda path: params)

    class Props:
        total_memory = 85 * 10**9

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: Props())
    need = 16 * params / 8 + D.fsdp_root_bytes(arch) + fsdp  # 8 ranks: 16.4 + 6.2 + 15.4 GB in a 42.5 GB room
    assert need < 85e9 * 0.5 < 16 * params / 8 + D.fsdp_root_bytes(arch) + one + 2**30
    D.check_colocation(tmp_path, torch.device("cuda"), 0.5, world_size=8, update=[(1, 26_048, True)])
    with pytest.raises(ValueError, match=rf"keeps about {fsdp / 2**30:.1f} GiB of activations \(checkpointed\) beside "
                                         rf"{(16 * params / 8 + D.fsdp_root_bytes(arch)) / 2**30:.1f} GiB of trainer"):
        D.check_colocation(tmp_path, torch.device("cuda"), 1 - (need - 2**30) / 85e9, world_size=8,
                           update=[(1, 26_048, True)])  # 1 GiB short: the root counted, the bf16 inputs priced


@pytest.mark.parametrize("left", ["tmp_and_old", "old_only"])
def test_a_crash_inside_save_resumes_from_the_newest_complete_checkpoint(model_dir, tmp_path, left):
    """save() renames checkpoint -> checkpoint.old, then checkpoint.tmp -> checkpoint: a crash between the two
    left no checkpoint/ and the rerun started over at step 0. Now the newest complete one is put back."""
    out = tmp_path / "run"
    Trainer(config(model_dir, out, steps=2, dynamic_sampling=False)).run()
    ckpt = out / "checkpoint"
    if left == "tmp_and_old":  # the crash after the first rename: .tmp holds step 2, .old an older copy
        shutil.copytree(ckpt, out / "checkpoint.old")
        state = json.loads((out / "checkpoint.old" / "state.json").read_text())
        (out / "checkpoint.old" / "state.json").write_text(json.dumps({**state, "step": 1}))
        os.replace(ckpt, out / "checkpoint.tmp")
    else:  # checkpoint.tmp not yet complete (no state.json): the old one is the newest complete
        os.replace(ckpt, out / "checkpoint.old")
        (out / "checkpoint.tmp").mkdir()
    resumed = Trainer(config(model_dir, out, steps=2, dynamic_sampling=False))
    assert resumed.step == 2 and ckpt.exists()
    assert not (out / ("checkpoint.tmp" if left == "tmp_and_old" else "checkpoint.old")).exists()


def test_a_damaged_checkpoint_state_or_metrics_row_is_a_clear_error(model_dir, tmp_path):
    out = tmp_path / "run"
    Trainer(config(model_dir, out, steps=1, dynamic_sampling=False)).run()
    state_path = out / "checkpoint" / "state.json"
    good = state_path.read_text()
    no_step = {k: v for k, v in json.loads(good).items() if k != "step"}
    for bad in ({**json.loads(good), "step": -5}, {**json.loads(good), "step": True}, no_step, [1, 2]):
        state_path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match="state.json"):
            Trainer(config(model_dir, out, steps=2, dynamic_sampling=False))
    state_path.write_text(good)
    metrics = out / "metrics.jsonl"
    rows = metrics.read_text()
    metrics.write_text(rows + '{"step": 2, "loss": 0.')  # torn last row: dropped, the resume goes on
    assert Trainer(config(model_dir, out, steps=2, dynamic_sampling=False)).step == 1
    assert metrics.read_text() == rows
    metrics.write_text("not json\n" + rows)  # a damaged row inside the file: the file and line are named
    with pytest.raises(ValueError, match="metrics.jsonl, line 1"):
        Trainer(config(model_dir, out, steps=2, dynamic_sampling=False))


@pytest.mark.parametrize("damaged", ["model/model.safetensors", "trainer.pt"])
def test_a_flipped_byte_in_a_checkpoint_file_is_an_error_naming_it(model_dir, tmp_path, damaged):
    out = tmp_path / "run"
    Trainer(config(model_dir, out, steps=1, dynamic_sampling=False)).run()
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert damaged in state["checksums"] and "model/config.json" in state["checksums"]
    path = out / "checkpoint" / damaged
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{damaged}: does not match its checksum"):
        Trainer(config(model_dir, out, steps=2, dynamic_sampling=False))
    path.unlink()
    with pytest.raises(ValueError, match=f"{damaged}: missing from the checkpoint"):
        Trainer(config(model_dir, out, steps=2, dynamic_sampling=False))


def test_a_second_trainer_process_on_the_folder_is_an_error_naming_the_holder(model_dir, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from bsb.train.run_folder import RunLock; RunLock(sys.argv[1]); "
         "print('held', flush=True); time.sleep(60)", str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match=f"is in use by another bsb train \\(pid {holder.pid}\\)"):
            Trainer(config(model_dir, out, steps=1))
        assert not (out / "metrics.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    Trainer(config(model_dir, out, steps=1, dynamic_sampling=False)).run()  # the kernel dropped the dead holder's lock


def test_the_default_out_dir_names_the_run():
    from bsb.train.config import TrainConfig

    a, b = TrainConfig(), TrainConfig(selector="entropy")
    assert a.out_dir.startswith("runs/walk-probe_js-seed0-") and b.out_dir.startswith("runs/walk-entropy-seed0-")
    assert TrainConfig(lr=1e-5).out_dir != a.out_dir  # same name parts, another run: another folder
    assert TrainConfig(steps=99, progress=False).out_dir == a.out_dir  # the same run, longer: resumed there
    assert TrainConfig(out_dir="x").out_dir == "x"


def test_a_resume_with_another_config_is_refused_unless_named(model_dir, tmp_path):
    out = tmp_path / "run"
    Trainer(config(model_dir, out, steps=1, dynamic_sampling=False)).run()
    for kw, listed in ((dict(lr=5e-4), "lr: 0.001 -> 0.0005"), (dict(selector="entropy"), "selector: 'probe_js' -> 'entropy'"),
                       (dict(seed=3, chains=3), "chains: 2 -> 3; seed: 0 -> 3"),
                       (dict(task_options=dict(ops=[1, 2], max_operand=3)), "task_options")):
        with pytest.raises(ValueError, match="holds a different run") as err:
            Trainer(config(model_dir, out, steps=2, dynamic_sampling=False, **kw))
        assert listed in str(err.value) and "resume_changes=[" in str(err.value)
    # named on purpose: accepted, applied to the resumed optimizer, recorded in the next metrics row
    tr = Trainer(config(model_dir, out, steps=2, dynamic_sampling=False, lr=5e-4, resume_changes=["lr"]))
    assert tr.step == 1 and tr.sched.base_lrs == [5e-4] * len(tr.opt.param_groups)
    assert all(g["lr"] == pytest.approx(5e-4 * tr.sched.lr_lambdas[0](tr.sched.last_epoch)) for g in tr.opt.param_groups)
    tr.run()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 2 and rows[-1]["resume_changed"] == {"lr": [1e-3, 5e-4]}
    assert "resume_changed" not in rows[-2]
    Trainer(config(model_dir, out, steps=4, dynamic_sampling=False, lr=5e-4, progress=True, val_every=3))  # safe fields


def test_a_run_whose_responses_hold_no_readable_answer_says_so_once_in_its_first_steps(model_dir, tmp_path, caplog):
    """The embedded arithmetic model writes \\boxed{} answers; graded on Answer: lines, no response holds one: the
    rate is in every row, and one warning within the first steps names the format and a --set that asks for it."""
    import logging
    import shlex

    from bsb.train.answer_watch import suggestion

    cfg = config(model_dir, tmp_path / "run", steps=4, val_every=0, save_every=0, task="line_tasks:AnswerLineArith")
    with caplog.at_level(logging.WARNING, logger="bsb.train.trainer"):
        rows = Trainer(cfg).run()
    steps = [r for r in rows if r["step"] > 0]
    assert all(r["no_answer_rate"] == 1.0 and r["accuracy"] == 0.0 for r in steps)
    said = [r.getMessage() for r in caplog.records if "no answer the" in r.getMessage()]
    assert len(said) == 1, said
    first = sum(v for k, v in steps[0].items() if k.startswith("verdict_"))
    assert f"100% of the {first} responses in the first 1 step(s)" in said[0] and "'Answer: '" in said[0]
    word = suggestion("End with a line 'Answer: ' followed by the final answer.")
    assert word in said[0]
    template = parse_overrides(shlex.split(word)[1:])["prompt_template"]
    assert template.format(prompt="Q") == "Q\nEnd with a line 'Answer: ' followed by the final answer."
    recorded = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["no_answer_rate"] for r in recorded if r["step"] > 0] == [1.0] * 4


def test_the_no_answer_rate_counts_only_unreadable_responses(tmp_path, caplog):
    """On the embedded default (the walk model answers its task) the rate is the no_answer verdicts' share, and no
    warning is said."""
    import logging

    cfg = config("embedded", tmp_path / "run", steps=1, val_every=0, save_every=0, task="walk", task_options={},
                 max_response_len=160)
    with caplog.at_level(logging.WARNING, logger="bsb.train.trainer"):
        row = Trainer(cfg).run()[-1]
    verdicts = {k: v for k, v in row.items() if k.startswith("verdict_")}
    assert row["no_answer_rate"] == verdicts.get("verdict_no_answer", 0) / sum(verdicts.values())
    assert row["no_answer_rate"] < 0.9 and not [r for r in caplog.records if "no answer the" in r.getMessage()]


class CopyEngine:
    """A separate rollout engine (weight_sync): HF generation on its own copy of the weights, which load_weights fills
    from the trainer's sync, with one tensor garbled when ``corrupt`` names it (a reload that went wrong)."""

    def __init__(self, model_dir, corrupt=None):
        from dataclasses import replace

        from bsb.engine.hf_backend import HFBackend

        self.hf = HFBackend(transformers.AutoModelForCausalLM.from_pretrained(model_dir))
        self.capabilities = replace(HFBackend.capabilities, weight_sync=True, white_box=False, belief_logits=False,
                                    reuses_kv=False)
        self.corrupt, self.loads = corrupt, 0

    def load_weights(self, weights):
        state = dict(weights)
        if self.corrupt:
            state[self.corrupt] = torch.randn_like(state[self.corrupt])
        self.hf.model.load_state_dict(state)
        self.loads += 1

    def generate(self, *args, **kwargs):
        return self.hf.generate(*args, **kwargs)

    def token_stats(self, prompt, response):
        return self.hf.token_stats(prompt, response)

    def token_stats_many(self, pairs):
        return self.hf.token_stats_many(pairs)

    def sleep(self):
        pass

    def close(self):
        pass


def test_the_weight_sync_is_checked_after_the_first_sync_and_every_n(model_dir, tmp_path):
    engine = CopyEngine(model_dir)
    cfg = config(model_dir, tmp_path / "run", steps=3, val_every=0, save_every=0, selector="midpoint",
                 sync_check_every=2)
    rows = Trainer(cfg, rollout_backend=engine).run()
    # a shared engine is synced at start (sync 1, checked), then after steps 1, 2, 3 (syncs 2-4: the third checked)
    assert engine.loads == 4
    assert [("sync_gap" in r) for r in rows if r["step"] > 0] == [False, True, False]
    assert [r["sync_gap"] for r in rows if "sync_gap" in r] == [0.0]


def test_a_garbled_weight_sync_stops_training_with_one_error(model_dir, tmp_path):
    from bsb.engine.weight_sync import WeightSyncError

    engine = CopyEngine(model_dir, corrupt="model.layers.0.mlp.down_proj.weight")
    cfg = config(model_dir, tmp_path / "run", steps=2, val_every=0, save_every=0, selector="midpoint")
    with pytest.raises(WeightSyncError, match=r"rollout engine \(CopyEngine\) does not serve the policy's weights"):
        Trainer(cfg, rollout_backend=engine).run()
    off = CopyEngine(model_dir, corrupt="model.layers.0.mlp.down_proj.weight")
    cfg = config(model_dir, tmp_path / "run2", steps=1, val_every=0, save_every=0, selector="midpoint",
                 sync_check_every=0)
    assert Trainer(cfg, rollout_backend=off).run()[-1]["step"] == 1  # sync_check_every=0: never checked


def test_a_nemotron_budget_its_mamba_fallback_cannot_hold_is_refused_at_start(tmp_path, monkeypatch):
    """Nemotron-Nano-9B-v2's shape with the paper's one 26,048-token checkpointed row: on the PyTorch path for its
    Mamba-2 mixers (no mamba-ssm / causal-conv1d, as on the GPU image) the update keeps about 45 GiB, which an 85 GB
    H100 beside its engine cannot hold: one error at start naming the missing kernels; a shorter row fits."""
    from bsb.engine import memory as D
    from bsb.engine.known_models import known_config

    arch = known_config("NVIDIA-Nemotron-Nano-9B-v2-Base")
    arch.save_pretrained(tmp_path)
    monkeypatch.setattr(D, "checkpoint_params", lambda path: 1000)  # the weights' share aside: the activations

    class Props:
        total_memory = 85 * 10**9

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: Props())
    with pytest.raises(ValueError, match=r"micro-batch of 1 x 26,048 tokens keeps about 4\d\.\d GiB of activations "
                                         r"\(checkpointed\) on transformers' PyTorch path for its Mamba-2 mixers "
                                         r"\(mamba-ssm and causal-conv1d not installed.*; or install mamba-ssm and "
                                         r"causal-conv1d"):
        D.check_colocation(tmp_path, torch.device("cuda"), 0.5, update=[(1, 26_048, True)])
    D.check_colocation(tmp_path, torch.device("cuda"), 0.5, update=[(1, 8_192, True)])  # a budget that fits


def test_vllm_batch_tokens_reach_the_engine_with_a_kv_cache_that_holds_a_wave(model_dir, tmp_path, monkeypatch,
                                                                               caplog):
    """vllm_batch_tokens is the engine's step; its KV cache is the larger of vllm_kv_cache_gib and what a full wave
    needs (bsb.engine.rollout_engine.wave_kv_cache_gib); a step shorter than the engine's length, or backend=hf, is an
    error; backend=auto falling back to the HF model says it is unused."""
    from bsb.engine import rollout_engine

    asked = []

    class Stop(Exception):
        pass

    def engine(kind, path, hf, max_len, seed, kv, *args, max_num_batched_tokens=None, **kw):
        asked.append((max_len, kv, max_num_batched_tokens))
        raise Stop

    monkeypatch.setattr(rollout_engine, "make_rollout_backend", engine)
    monkeypatch.setattr(rollout_engine, "wave_kv_cache_gib", lambda config, step, max_len, response, dtype: step // 1000)
    for batch_tokens, kv_gib, want in ((None, 1, 1), (4096, 1, 4), (4096, 9, 9)):
        with pytest.raises(Stop):
            Trainer(config(model_dir, tmp_path / f"{batch_tokens}-{kv_gib}", backend="vllm",
                           vllm_batch_tokens=batch_tokens, vllm_kv_cache_gib=kv_gib))
        assert asked[-1][1:] == (want, batch_tokens)
    monkeypatch.setattr(rollout_engine, "wave_kv_cache_gib", lambda *a: (_ for _ in ()).throw(ValueError("too short")))
    with pytest.raises(ValueError, match="vllm_batch_tokens: too short"):
        Trainer(config(model_dir, tmp_path / "short", backend="vllm", vllm_batch_tokens=100))
    with pytest.raises(ValueError, match="vllm_batch_tokens sets the vLLM engine's step; backend=hf has none"):
        config(model_dir, tmp_path / "hf", vllm_batch_tokens=65536)
    monkeypatch.setattr(rollout_engine, "wave_kv_cache_gib", lambda *a: 1)
    monkeypatch.setattr(rollout_engine, "make_rollout_backend", lambda kind, path, hf, *a, **kw: hf)  # auto: no vLLM
    with caplog.at_level(logging.WARNING, logger="bsb.train.trainer"):
        Trainer(config(model_dir, tmp_path / "auto", backend="auto", vllm_batch_tokens=65536))
    assert "vllm_batch_tokens=65536 unused: backend=auto rolls out with the HF model" in caplog.text
