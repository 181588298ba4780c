"""`bsb train`, `bsb validate` and `bsb demo` on the real pretrained checkpoints (slow; ``make models``): every selector
family of the paper trains a step on both models with the HF backend, through each model's own prompting (SmolLM2's
chat template; Gemma 3 base as plain text), on a small math problem file. A missing checkpoint fails, never skips."""

import json

import pytest
from real_models import PROMPTING, REAL, problem_file, real_model

from bsb.commands.demo import DemoConfig, run_demo
from bsb.commands.validate import ValidateConfig, run_validate
from bsb.train.config import TrainConfig
from bsb.train.trainer import Trainer

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("selector", ["probe_js", "lens_shift", "entropy", "midpoint"])
@pytest.mark.parametrize("name", REAL)
def test_a_step_of_training_on_the_real_checkpoint(name, selector, tmp_path, run_dir):
    problems = problem_file(tmp_path)
    cfg = TrainConfig(model=real_model(name), backend="hf", steps=1, prompts_per_step=2, gen_prompts=2, chains=2,
                      siblings=1, max_response_len=64, overlong_buffer=8, val_problems=1, val_samples=1, val_every=0,
                      save_every=0, out_dir=str(run_dir), task="math", selector=selector, lr=1e-6,
                      dynamic_sampling=False,
                      task_options=dict(train_file=problems, val_file=problems), progress=False, **PROMPTING[name])
    trainer = Trainer(cfg)
    rows = trainer.run()
    assert trainer.cfg.update_packing == "tree"  # both families take the tree-packed update
    step = rows[-1]
    assert step["step"] == 1 and step["forks"] == 4 and step["tokens_generated"] > 0
    assert step["update_tokens"] <= step["update_tokens_paths"]
    leaves = sum(v for k, v in step.items() if k.startswith("verdict_"))
    assert leaves == 2 * 2 * (1 + 1)  # every leaf of the step's trees got a verdict
    print(f"{name} {selector}: " + json.dumps({k: step.get(k) for k in (
        "time_step", "time_generate", "time_select", "time_update", "probe_frac", "probe_tokens", "probe_tokens_floor",
        "fallbacks", "accuracy", "verdict_no_answer")}))
    metrics = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == len(rows)


def test_validate_and_demo_on_a_real_checkpoint_and_a_problem_file(tmp_path):
    name = "smollm2-135m"
    problems = problem_file(tmp_path)
    common = dict(model=real_model(name), problems=problems, task="math", progress=False, **PROMPTING[name])
    result = run_validate(ValidateConfig(backend="hf", n_problems=3, m=4, n_mc=2, b=2, max_response=96, out_dir=str(tmp_path / "val"),
                                         case_plots=1, selectors=("probe_js", "entropy", "midpoint"), **common))
    table = (tmp_path / "val" / "table.md").read_text()
    assert result["chains"] >= 1, table  # sampled, and read where a chain has a newline boundary
    print(f"{name} validate: {table.splitlines()[0]}")
    demo = run_demo(DemoConfig(n_problems=2, n_mc=2, max_response=96, out=str(tmp_path / "demo.png"), **common))
    assert (tmp_path / "demo.png").exists() and demo


def test_a_base_models_plain_prompt_starts_with_one_bos_in_train_and_the_offline_commands(tmp_path, run_dir):
    """Gemma 3 base puts <bos> before every input: bsb train's prompts and those of validate, evaluate and demo (all
    three encode through open_session) start with exactly one."""
    from bsb.eval.session import open_session

    name, problems = "gemma3-270m", problem_file(tmp_path)
    cfg = TrainConfig(model=real_model(name), backend="hf", steps=1, task="math", out_dir=str(run_dir),
                      task_options=dict(train_file=problems, val_file=problems), progress=False, **PROMPTING[name])
    trainer = Trainer(cfg)
    bos = trainer.tok.bos_token_id
    train_ids = [trainer._encode(p) for p in trainer.val_problems]
    session = open_session(ValidateConfig(model=real_model(name), problems=problems, task="math"), 3, 0)
    for ids in train_ids + session.prompts:
        assert ids[0] == bos and ids.count(bos) == 1
