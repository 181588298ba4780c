"""`bsb train`, `bsb validate` and `bsb demo` on the real pretrained checkpoints (slow; ``make models``): every selector
family of the paper trains a step on both models with the HF backend, through each model's own prompting (SmolLM2's
chat template; Gemma 3 base as plain text), on a small math problem file. A missing checkpoint fails, never skips."""

import json
from pathlib import Path

import pytest
import transformers
from real_models import PROMPTING, REAL, problem_file, real_model

from bsb.commands.demo import DemoConfig, run_demo
from bsb.commands.validate import ValidateConfig, run_validate
from bsb.tasks.registry import make_task
from bsb.train.config import TrainConfig
from bsb.train.trainer import Trainer

pytestmark = pytest.mark.slow


SELECTORS = ("probe_js", "lens_shift", "entropy", "midpoint")


def _check_step(name: str, selector: str, step: dict) -> None:
    assert step["forks"] == 4 and step["tokens_generated"] > 0, selector
    assert step["update_tokens"] <= step["update_tokens_paths"], selector
    leaves = sum(v for k, v in step.items() if k.startswith("verdict_"))
    assert leaves == 2 * 2 * (1 + 1), selector  # every leaf of the step's trees got a verdict
    print(f"{name} {selector}: " + json.dumps({k: step.get(k) for k in (
        "time_step", "time_generate", "time_select", "time_update", "probe_frac", "probe_tokens", "probe_tokens_floor",
        "fallbacks", "accuracy", "verdict_no_answer")}))


# The selector matrix on the two small checkpoints; Qwen2.5-Coder-0.5B (4.7x SmolLM2's parameters) trains its step
# with vLLM rollouts in test_real_vllm.py, and its update against the per-path one in test_real_checkpoints.py: the
# matrix on it would add minutes to the tier's time budget (docs/DEVELOPMENT.md) and no check the others lack.
# SmolLM2's run (135M parameters) runs beside a second xdist worker (64 s there, make test 2026-12-07); Gemma's
# update (10-15 GB) does not fit beside one.
MATRIX = [pytest.param(n, marks=pytest.mark.beside_a_worker) if n == "smollm2-135m" else n
          for n in REAL if n != "qwen2.5-coder-0.5b"]
# Gemma-3-270M runs the selectors whose reads depend on its family (Probe-JS's packed reads under its sliding-window
# masks, Entropy's token statistics over its 262k vocabulary). At 64 tokens its chains hold no committed answer, so
# its Lens-Shift step is Midpoint's fallback (measured: fallbacks 4 of 4), and a Midpoint step reads nothing: those two
# steps would re-run what SmolLM2's run (its lens is checked in test_real_checkpoints.py). Each HF step here is ~22 s
# of generation that reads a 671 MB head every token (memory-bound): the two cost 50 s of the serial tier's budget.
SELECTORS_OF = {"gemma3-270m": ("probe_js", "entropy")}


@pytest.mark.parametrize("name", MATRIX)
def test_every_selector_trains_a_step_on_the_real_checkpoint(name, tmp_path, run_dir):
    """One trainer a model: the first selector's run goes through validation, the checkpoint and the final export; each
    other selector then forks a step of its own on the same policy and optimizer (``Trainer.use_selector``)."""
    problems = problem_file(tmp_path)
    selectors = SELECTORS_OF.get(name, SELECTORS)
    cfg = TrainConfig(model=real_model(name), backend="hf", steps=1, prompts_per_step=2, gen_prompts=2, chains=2,
                      siblings=1, max_response_len=64, overlong_buffer=8, val_problems=1, val_samples=1, val_every=0,
                      save_every=0, out_dir=str(run_dir), task="math", selector=selectors[0], lr=1e-6,
                      dynamic_sampling=False,
                      task_options=dict(train_file=problems, val_file=problems), progress=False, **PROMPTING[name])
    trainer = Trainer(cfg)
    rows = trainer.run()
    assert trainer.cfg.update_packing == "tree"  # both families take the tree-packed update
    assert rows[-1]["step"] == 1
    _check_step(name, selectors[0], rows[-1])
    metrics = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == len(rows)
    assert (run_dir / "final" / "config.json").exists()
    for step, selector in enumerate(selectors[1:], start=2):
        trainer.use_selector(selector)
        m = trainer.train_step()
        assert m["step"] == step and trainer.cfg.selector == selector
        _check_step(name, selector, m)
    trainer.close()


@pytest.mark.beside_a_worker  # SmolLM2 with the HF backend, no update
def test_validate_and_demo_on_a_real_checkpoint_and_a_problem_file(tmp_path):
    name = "smollm2-135m"
    problems = problem_file(tmp_path)
    common = dict(model=real_model(name), problems=problems, task="math", progress=False, **PROMPTING[name])
    result = run_validate(ValidateConfig(backend="hf", n_problems=3, m=4, n_mc=2, b=2, max_response=96, out_dir=str(tmp_path / "val"),
                                         case_plots=1, selectors=("probe_js", "entropy", "midpoint"), **common))
    table = (tmp_path / "val" / "table.md").read_text()
    assert result["chains"] >= 1, table  # sampled, and read where a chain has a newline boundary
    print(f"{name} validate: {table.splitlines()[0]}")
    demo = run_demo(DemoConfig(n_problems=1, n_mc=2, max_response=96, out=str(tmp_path / "demo.png"), **common))
    assert (tmp_path / "demo.png").exists() and demo


# Gemma 3's own chat template (the instruct model's, simplified): it writes <bos> itself
GEMMA_CHAT = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else "
              "m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
              "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def _with_chat_template(model: str, folder) -> str:
    """The checkpoint at ``model`` with Gemma's chat template on its tokenizer (the base model ships none)."""
    out = folder / "gemma-chat"
    out.mkdir()
    for f in Path(model).iterdir():
        if not f.name.startswith("tokenizer"):
            (out / f.name).symlink_to(f)
    tok = transformers.AutoTokenizer.from_pretrained(model)
    tok.chat_template = GEMMA_CHAT
    tok.save_pretrained(out)
    return str(out)


@pytest.mark.beside_a_worker  # Gemma-3-270M's tokenizer and one inference load (about 1 GB)
@pytest.mark.parametrize("fmt", ["plain", "chat"])
def test_a_base_models_prompt_has_one_bos_and_the_ids_of_train_in_every_offline_command(fmt, tmp_path, run_dir,
                                                                                      monkeypatch):
    """Gemma 3 base puts <bos> before every input: a plain prompt gets exactly one, a chat prompt whose template writes
    it gets no second; and validate, evaluate and demo (each through open_session) encode every problem to the ids
    bsb train gives it under the same prompt options, the template included."""
    from bsb.commands.evaluate import EvaluateConfig
    from bsb.eval.session import open_session

    name, problems = "gemma3-270m", problem_file(tmp_path)
    model = real_model(name)
    prompting = PROMPTING[name] if fmt == "plain" else dict(prompt_format="chat", prompt_template="{prompt}\nAnswer "
                                                            "step by step.", system_prompt="Be brief.")
    if fmt == "chat":
        model = _with_chat_template(model, tmp_path)
    options = dict(train_file=problems, val_file=problems)
    cfg = TrainConfig(model=model, backend="hf", steps=1, task="math", out_dir=str(run_dir), task_options=options,
                      progress=False, **prompting)
    tok, task = transformers.AutoTokenizer.from_pretrained(model), make_task("math", options)  # what Trainer builds
    bos = tok.bos_token_id
    from bsb.engine import hf_model

    loads = {}  # the three sessions open one checkpoint: it is loaded once (the test is about their prompts)
    load = hf_model.load_for_inference
    monkeypatch.setattr(hf_model, "load_for_inference", lambda path, *a: loads.get(path) or loads.setdefault(path, load(path, *a)))
    for cls in (ValidateConfig, EvaluateConfig, DemoConfig):
        session = open_session(cls(model=model, problems=problems, task="math", **prompting), 3, 0)
        assert session.prompts == [cfg.encode(task, p, tok) for p in session.problems], cls.__name__
        for ids in session.prompts:
            assert ids[0] == bos and ids.count(bos) == 1
        text = tok.decode(session.prompts[0])
        assert "Answer step by step." in text and (fmt == "plain") == ("<start_of_turn>" not in text)
        assert (fmt == "chat") == ("Be brief." in text)
    assert len(loads) == 1
