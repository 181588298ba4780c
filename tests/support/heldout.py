"""Sampled held-out accuracy of a checkpoint on its task (what the shipped embedded checkpoints record)."""

import torch
import transformers

from bsb.engine.hf_backend import HFBackend
from bsb.tasks.registry import make_task


def sampled_accuracy(
    path, task_name: str, n: int, temperature: float = 1.0, max_new_tokens: int = 256
) -> tuple[int, int]:
    """(correct, n) on the first ``n`` held-out problems, plain prompts, one draw each at ``temperature`` (top-p 1),
    request i seeded i (the HF backend's per-request streams: the same draws in any batch), in batches of 16."""
    task = make_task(task_name)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    hf = HFBackend(transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), tok)
    problems = task.held_out(n)
    correct = 0
    for i in range(0, n, 16):
        batch = problems[i : i + 16]
        prompts = [tok.encode(task.format_prompt(p), add_special_tokens=False) for p in batch]
        outs = hf.generate(prompts, max_new_tokens, temperature=temperature, seed=i, eos_token_id=tok.eos_token_id)
        for p, out in zip(batch, outs):
            correct += task.verify(tok.decode(out, skip_special_tokens=True), p).correct
    return correct, n
