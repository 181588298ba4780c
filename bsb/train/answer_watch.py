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

    def __init__(self, task_name: str, answer_format: str, prompt_format: str):
        self.task_name, self.answer_format, self.prompt_format = task_name, answer_format, prompt_format
        self.steps = self.responses = self.unread = 0
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
        if self.responses < MIN_RESPONSES or self.unread < NEAR_ONE * self.responses:
            return None
        self.done = True
        return self.message()

    def message(self) -> str:
        share = self.unread / self.responses
        asks = self.answer_format
        fix = f"ask for it, e.g. {suggestion(asks)}" if asks else "make the prompt ask for what the verifier reads"
        what = f'it reads what this asks for: "{asks}"' if asks else "see the task's verifier"
        return (
            f"{share:.0%} of the {self.responses} responses in the first {self.steps} step(s) hold no answer the "
            f"{self.task_name} task can read ({what}); the prompt probably does not ask for that format: {fix}"
            + (" (or say it in system_prompt)" if asks and self.prompt_format == "chat" else "")
            + ". no_answer_rate is in metrics.jsonl and bsb report."
        )


def suggestion(asks: str) -> str:
    """The ``--set`` (one shell word, its value a YAML string) whose template puts the instruction ``asks`` after
    the task's prompt, its braces doubled as literal template text."""
    import json
    import shlex

    template = "{prompt}\n" + asks.replace("{", "{{").replace("}", "}}")
    return "--set " + shlex.quote("prompt_template=" + json.dumps(template))
