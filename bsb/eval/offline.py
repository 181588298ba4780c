"""What every offline command (validate, evaluate, demo) is given: the model, the task and its problems, the prompt
format, the device and dtype."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class OfflineConfig:
    model: str = "embedded"  # a local HF checkpoint directory, or "embedded" (the tiny arithmetic model)
    problems: str | None = None  # a problem file (the math task's held-out set); None: the task's own problems
    task: str | None = None  # arith | math | package.module:Class (default: math with a problem file, else arith)
    task_options: dict | None = None  # the task's options
    prompt_format: str = "plain"  # plain | chat (the tokenizer's chat template)
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (bf16 on a GPU, fp32 on the CPU) | bfloat16 | float16 | float32
