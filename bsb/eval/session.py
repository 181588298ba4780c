"""What every offline command (validate, evaluate, demo) is given: the model, the task and its problems, the prompt
format, the device and dtype, and (validate, demo) an optional LLM judge for the ``llm_judge`` baseline."""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import dataclass
from pathlib import Path


@dataclass
class OfflineConfig:
    model: str = "embedded"  # a local HF checkpoint directory, or "embedded" (the tiny arithmetic model)
    problems: str | None = None  # a problem file (the math task's held-out set); None: the task's own problems
    task: str | None = None  # arith | math | package.module:Class (default: math with a problem file, else arith)
    task_options: dict | None = None  # the task's options
    prompt_format: str = "plain"  # plain | chat (the tokenizer's chat template)
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (bf16 on a GPU, fp32 on the CPU) | bfloat16 | float16 | float32
    judge_url: str | None = None  # an OpenAI-compatible base URL, or "local" (judge_model is then a local checkpoint)
    judge_model: str | None = None  # the judge's model name at that endpoint (or its local path)
    judge_endpoint: str = "chat"  # chat | completions
    judge_key_env: str = "BSB_JUDGE_API_KEY"  # the environment variable holding the API key (optional)
    judge_template: str | None = None  # a prompt template file (default: bsb/engine/judge_prompt.txt)
    judge_timeout_s: float = 60.0

    def __post_init__(self):
        if self.judge_url is not None and not self.judge_model:
            raise ValueError("--judge-url needs --judge-model (the model name at that endpoint, or a local checkpoint with --judge-url local)")
        if self.judge_endpoint not in ("chat", "completions"):
            raise ValueError(f"judge endpoint must be chat or completions, got {self.judge_endpoint!r}")


def jsonable(value):
    """``json.dumps`` default for what a task keeps as a gold answer (the code task's CodeTests: its fields)."""
    import dataclasses

    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else str(value)


def gold_label(answer) -> str:
    """A short label of a gold answer for titles: the answer, or the number of hidden tests (the code task)."""
    if isinstance(answer, (str, int, float)):
        return str(answer)[:40]
    return f"{len(answer)} hidden tests" if isinstance(answer, Sized) else str(answer)[:40]


def judge_client(cfg: OfflineConfig):
    """The judge of ``llm_judge`` the config names (None when it names none)."""
    if cfg.judge_url is None:
        return None
    if not cfg.judge_model:
        raise ValueError("--judge-url needs --judge-model (the model name at that endpoint, or a local checkpoint with --judge-url local)")
    if cfg.judge_template is not None and not Path(cfg.judge_template).is_file():
        raise FileNotFoundError(f"judge template {cfg.judge_template!r} is not a file")
    from bsb.engine.judge import LocalJudge, OpenAIJudge

    if cfg.judge_url == "local":
        import transformers

        from bsb.embedded.model import resolve_model
        from bsb.engine.hf_backend import HFBackend
        from bsb.engine.hf_model import load_for_inference

        path = resolve_model(cfg.judge_model)
        tok = transformers.AutoTokenizer.from_pretrained(path)
        return LocalJudge(HFBackend(load_for_inference(path, cfg.device, cfg.dtype), tok), tok)
    return OpenAIJudge(cfg.judge_url, cfg.judge_model, cfg.judge_endpoint, cfg.judge_key_env, cfg.judge_timeout_s)
