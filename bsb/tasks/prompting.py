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

from dataclasses import dataclass

from bsb.fields import help_field
from bsb.tasks.base import Problem

PROMPT_FORMATS = ("plain", "chat")


@dataclass
class PromptConfig:
    """How a problem becomes the model's input, declared once for every command that encodes a prompt (``bsb train``,
    ``validate``, ``evaluate``, ``demo``, ``data``): the same fields, defaults and errors everywhere. Inherited flat,
    as :class:`~bsb.engine.probe.ProbeConfig` is (``--prompt-template`` on the offline commands, ``--set
    prompt_template=...`` on ``bsb train``)."""

    prompt_format: str = help_field(
        "plain",
        "plain (base models: the prompt text, with the tokenizer's BOS where it adds one) | chat (the tokenizer's "
        "chat template; verl rows keep their messages)",
        choices=PROMPT_FORMATS,
        evaluation=True,
    )
    prompt_template: str = help_field(
        "{prompt}",
        "how the task's prompt text becomes the model's input ({prompt} is replaced; {{ and }} are literal braces), "
        "e.g. 'Question: {prompt}\\nPut the final answer in \\boxed{{}}.'",
        evaluation=True,
    )
    system_prompt: str | None = help_field(
        None, "a system turn before each prompt (prompt_format chat)", evaluation=True
    )
    chat_template_kwargs: dict = help_field(
        {},
        "variables the chat template reads, e.g. enable_thinking=false for Qwen3 (prompt_format chat)",
        flag="--chat-template-kwarg",
        evaluation=True,
    )

    def prompt_problems(self) -> list[str]:
        """Every invalid prompt option, one message each (empty: valid); checked before any model loads."""
        out = []
        try:
            check_prompt_options(self.prompt_format, self.system_prompt, self.chat_template_kwargs)
        except ValueError as err:
            out.append(str(err))
        out.extend(template_problems(self.prompt_template))
        return out

    def render(self, task, problem: Problem, tokenizer=None) -> str:
        """The model's input text for ``problem`` (:func:`render_prompt` with these options)."""
        return render_prompt(
            task,
            problem,
            tokenizer,
            self.prompt_format,
            self.prompt_template,
            self.system_prompt,
            self.chat_template_kwargs,
        )

    def encode(self, task, problem: Problem, tokenizer) -> list[int]:
        """The ids the model sees for ``problem`` (:func:`encode_prompt` of :meth:`render`)."""
        return encode_prompt(tokenizer, self.render(task, problem, tokenizer), self.prompt_format)


def template_problems(template) -> list[str]:
    """What is wrong with a prompt template (empty: nothing): it must be text holding ``{prompt}``, and every other
    brace must be doubled (``str.format`` would otherwise fail on the first problem, after the model loaded)."""
    if not isinstance(template, str):
        return [f"prompt_template must be text, got {type(template).__name__}"]
    if "{prompt}" not in template:
        return ["prompt_template must contain {prompt}"]
    try:
        template.format(prompt="")
    except (KeyError, IndexError, ValueError, AttributeError) as err:
        why = f"it names {{{err.args[0]}}}" if isinstance(err, KeyError) else str(err)
        return [
            f"prompt_template {template[:80]!r} does not format ({why}): only {{prompt}} is replaced; "
            "write {{ and }} for a literal brace"
        ]
    return []


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
