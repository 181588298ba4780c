"""The code domain end to end on the CPU: `bsb train --set task=code` trains the embedded code default for two steps
with real sandboxed hidden-test rewards, and `bsb validate` runs on it (slow: the first run trains the embedded code
model, about 2 minutes on 2 cores, then it is cached)."""

import json

import pytest
from scripted_server import JudgeScript, judge_server, n_steps

from bsb.commands.validate import ValidateConfig, run_validate
from bsb.train import phases
from bsb.train.config import TrainConfig
from bsb.train.trainer import Trainer

pytestmark = pytest.mark.slow


def test_two_steps_of_code_training_with_sandboxed_rewards(tmp_path):
    cfg = TrainConfig(task="code", steps=2, prompts_per_step=2, gen_prompts=3, chains=2, siblings=1, max_response_len=120,
                      val_problems=6, backend="hf", dynamic_sampling=False, out_dir=str(tmp_path / "run"), progress=False, val_every=2)
    trainer = Trainer(cfg)
    rows = trainer.run()
    assert [r["step"] for r in rows] == [0, 1, 2]
    reasons = {"correct", "wrong", "no_code", "syntax_error", "timeout", "memory", "error", "output_limit", "killed"}
    for r in rows[1:]:  # every leaf of the step's 3 trees of M(1+k) = 4 leaves got a sandboxed verdict
        verdicts = {k[len("verdict_"):]: v for k, v in r.items() if k.startswith("verdict_")}
        assert set(verdicts) <= reasons and sum(verdicts.values()) == 3 * 4
        assert r["accuracy"] == pytest.approx(verdicts.get("correct", 0) / 12)
        assert r["probe_tokens"] > 0  # Probe-JS read the fenced-code suffix with L = 16
    assert all(0.0 <= r["val_accuracy"] <= 1.0 for r in rows if "val_accuracy" in r)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == len(rows)


def test_validate_runs_on_the_embedded_code_default_with_an_llm_judge(tmp_path):
    """The judge (a scripted OpenAI-compatible endpoint that rates the last step highest) joins the selectors."""
    script = JudgeScript()
    script.reply = lambda p: (200, json.dumps({"scores": [1] * (n_steps(p) - 1) + [9]}))
    srv = judge_server(script)
    try:
        cfg = ValidateConfig(task="code", n_problems=4, m=8, n_mc=2, b=3, max_response=120, backend="hf", out_dir=str(tmp_path / "val"),
                             progress=False, case_plots=1, selectors=("probe_js", "lens_shift", "midpoint", "random"),
                             judge_url=f"http://127.0.0.1:{srv.server_address[1]}", judge_model="judge")
        result = run_validate(cfg)
    finally:
        srv.shutdown()
    assert result["chains"] == 4 and (tmp_path / "val" / "table.md").exists()
    assert "llm_judge" in result["mean_error"] and "| llm_judge |" in (tmp_path / "val" / "table.md").read_text()
    assert len(script.requests) >= 1
    rows = [json.loads(line) for line in (tmp_path / "val" / "curves.jsonl").read_text().splitlines()]
    assert all(r["gold"]["style"] in ("stdin", "function") for r in rows)  # the hidden tests, as data
    for r in rows:  # the judge rated the last step 9, every other 1: its scores, and the last boundary is kept
        n = len(r["cuts"])
        assert r["scores"]["llm_judge"] == [1.0] * (n - 1) + [9.0] and n - 1 in r["top_b"]["llm_judge"]


def test_a_step_fed_responses_beyond_the_read_budget_finishes_with_their_zeros_counted(tmp_path, monkeypatch):
    """The third hostile round: a response of 100,000 nested operators made ast.parse raise MemoryError (90,000 chained
    additions a RecursionError) inside the code task's verify, and the exception stopped the training step."""
    hostile = ["```python\nx = " + "-" * 100_000 + "1\n```", "```python\nx = 1" + "+1" * 90_000 + "\n```"]
    real, fed = phases.score_trees, []

    def score(trees, problems, task, decode, reward_cfg, eos):  # every leaf's response is a hostile one
        return real(trees, problems, task, lambda ids: fed.append(1) or hostile[len(fed) % 2], reward_cfg, eos)

    monkeypatch.setattr(phases, "score_trees", score)
    cfg = TrainConfig(task="code", steps=1, prompts_per_step=2, gen_prompts=2, chains=2, siblings=1, max_response_len=32,
                      overlong_buffer=0, val_problems=2, val_every=0, save_every=0, backend="hf", dynamic_sampling=False,
                      out_dir=str(tmp_path / "run"), progress=False)
    rows = Trainer(cfg).run()
    step = rows[-1]
    assert step["step"] == 1 and len(fed) == 2 * 4  # the step finished: 2 trees of M(1+k) = 4 leaves, all graded
    assert step["verdict_unreadable"] == 8 and step["reward_mean"] == 0.0 and step["accuracy"] == 0.0
    assert step["no_answer_rate"] == 0.0  # a response beyond the budget holds code: it is not a missing answer
