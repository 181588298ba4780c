"""How a problem becomes the model's input text: the plain format (base models) or the tokenizer's chat template.

``plain``: ``template.format(prompt=task.format_prompt(problem))``. ``chat``: the tokenizer's chat template over the
problem's own chat messages (verl rows keep theirs) or a single user turn holding the plain text, with the
generation prompt appended. The tokenizer is any object with ``apply_chat_template`` and ``chat_template``.

:func:`encode_prompt` turns that text into the ids the model was trained to see: a plain prompt gets the tokenizer's
BOS once where the tokenizer's own settings put one before every input (Gemma, Llama and Mistral base models,
Nemotron-H), never an EOS; a chat prompt is encoded as rendered, as transformers' ``apply_chat_template`` encodes it
(a template that wants a BOS writes it, so it is never doubled).
"""

from __future__ import annotations

from bsb.tasks.base import Problem

PROMPT_FORMATS = ("plain", "chat")


def render_prompt(
    task,
    problem: Problem,
    tokenizer=None,
    prompt_format: str = "plain",
    template: str = "{prompt}",
    system_prompt: str | None = None,
    chat_template_kwargs: dict | None = None,
) -> str:
    """The model's input text. ``system_prompt``: a system turn before the problem's messages (chat only; a problem
    whose messages open with a system turn keeps its own). ``chat_template_kwargs``: extra variables the chat
    template reads, e.g. ``{"enable_thinking": False}`` for Qwen3 (chat only)."""
    check_prompt_options(prompt_format, system_prompt, chat_template_kwargs)
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
    if system_prompt is not None and messages[0].get("role") != "system":
        messages = [{"role": "system", "content": system_prompt}, *messages]
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )


def check_prompt_options(prompt_format: str, system_prompt: str | None, chat_template_kwargs: dict | None) -> None:
    """A clear error for options the format cannot honour (checked before any model loads)."""
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
        raise ValueError(f"chat_template_kwargs must be a mapping, got {type(chat_template_kwargs).__name__}")
    if prompt_format != "chat" and (system_prompt is not None or chat_template_kwargs):
        raise ValueError("system_prompt and chat_template_kwargs go through the chat template: set prompt_format=chat")


def adds_bos(tokenizer) -> bool:
    """Whether the tokenizer's own settings put its BOS before every input (its post-processor or ``add_bos_token``):
    read from what it does, not from a flag, since a converted tokenizer may carry its template without the flag."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    probe = "a"
    with_specials = tokenizer.encode(probe, add_special_tokens=True)
    return with_specials[:1] == [bos] and tokenizer.encode(probe, add_special_tokens=False)[:1] != [bos]


def encode_prompt(tokenizer, text: str, prompt_format: str = "plain") -> list[int]:
    """The ids of a rendered prompt (:func:`render_prompt`): for ``plain`` text the tokenizer's BOS exactly once where
    :func:`adds_bos` (never an EOS); for ``chat`` text the tokens as the template wrote them."""
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    ids = tokenizer.encode(text, add_special_tokens=False)
    if prompt_format == "plain" and adds_bos(tokenizer) and ids[:1] != [tokenizer.bos_token_id]:
        ids = [tokenizer.bos_token_id, *ids]
    return ids
