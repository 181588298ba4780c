"""The answer-format diagnostic: one warning within a run's first steps when nearly every response holds no answer
the task can read (``no_answer_rate`` near 1). Such a run looks as if it trains (accuracy 0, fork yield 0, no error),
but its prompt most likely does not ask for the task's answer format; the warning names the format and the ``--set``
that asks for it."""

from __future__ import annotations

WATCHED_STEPS = 3  # the warning comes within a run's first steps, or never
NEAR_ONE = 0.9  # a no-answer rate at or above this, pooled over the watched steps, is "nearly every response"
MIN_RESPONSES = 8  # fewer graded responses say nothing yet


class AnswerWatch:
    """Fed every training step's metrics row (:meth:`see`); returns the warning once, at the first of the first
    :data:`WATCHED_STEPS` steps where the pooled no-answer rate reaches :data:`NEAR_ONE` over at least
    :data:`MIN_RESPONSES` responses."""

    def __init__(self, task_name: str, answer_format: str, prompt_format: str, prompt: str = ""):
        """``prompt``: a rendered prompt of the run; when it already carries ``answer_format`` the warning says that
        the model does not follow it (too small a model, too short a budget), not that the prompt lacks it."""
        self.task_name, self.answer_format, self.prompt_format = task_name, answer_format, prompt_format
        self.asked = bool(answer_format) and answer_format in prompt
        self.steps = self.responses = self.unread = self.truncated = 0
        self.done = False

    def see(self, row: dict) -> str | None:
        if self.done or self.steps >= WATCHED_STEPS:
            return None
        self.steps += 1
        n = sum(v for k, v in row.items() if k.startswith("verdict_") and isinstance(v, int))
        rate = row.get("no_answer_rate")
        if not n or not isinstance(rate, float) or rate != rate:
            return None
        self.responses += n
        self.unread += round(rate * n)
        truncated = row.get("truncated_frac")
        self.truncated += round(truncated * n) if isinstance(truncated, float) and truncated == truncated else 0
        if self.responses < MIN_RESPONSES or self.unread < NEAR_ONE * self.responses:
            return None
        self.done = True
        return self.message()

    def message(self) -> str:
        share = self.unread / self.responses
        asks = self.answer_format
        what = f'it reads what this asks for: "{asks}"' if asks else "see the task's verifier"
        head = (
            f"{share:.0%} of the {self.responses} responses in the first {self.steps} step(s) hold no answer the "
            f"{self.task_name} task can read ({what})"
        )
        tail = ". no_answer_rate is in metrics.jsonl and bsb report."
        if self.asked:  # the prompt asks for it already: the model does not follow
            cut = self.truncated / self.responses
            return (
                f"{head}; the prompt asks for it, but the model does not write it ({cut:.0%} of the responses hit "
                "max_response_len): a larger or instruction-tuned model, a longer max_response_len, or an example "
                f"answer in the prompt may{tail}"
            )
        fix = f"ask for it, e.g. {suggestion(asks)}" if asks else "make the prompt ask for what the verifier reads"
        chat = " (or say it in system_prompt)" if asks and self.prompt_format == "chat" else ""
        return f"{head}; the prompt probably does not ask for that format: {fix}{chat}{tail}"


def suggestion(asks: str) -> str:
    """The ``--set`` (one shell word, its value a YAML string) whose template puts the instruction ``asks`` after
    the task's prompt, its braces doubled as literal template text."""
    import json
    import shlex

    template = "{prompt}\n" + asks.replace("{", "{{").replace("}", "}}")
    return "--set " + shlex.quote("prompt_template=" + json.dumps(template))
