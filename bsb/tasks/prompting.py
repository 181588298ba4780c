"""How a problem becomes the model's input text: the plain format (base models) or the tokenizer's chat template.

``plain``: ``template.format(prompt=task.format_prompt(problem))``. ``chat``: the tokenizer's chat template over the
problem's own chat messages (verl rows keep theirs) or a single user turn holding the plain text, with the
generation prompt appended. The tokenizer is any object with ``apply_chat_template`` and ``chat_template``.
"""

from __future__ import annotations

from bsb.tasks.base import Problem

PROMPT_FORMATS = ("plain", "chat")


def render_prompt(
    task, problem: Problem, tokenizer=None, prompt_format: str = "plain", template: str = "{prompt}"
) -> str:
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    text = template.format(prompt=task.format_prompt(problem))
    if prompt_format == "plain":
        return text
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "this tokenizer")
        raise ValueError(
            f"prompt_format=chat needs a tokenizer with a chat template; {name} has none (use prompt_format=plain)"
        )
    messages = problem.meta.get("messages") if template == "{prompt}" else None
    messages = list(messages) if messages else [{"role": "user", "content": text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
