"""The answer-format warning (bsb.train.answer_watch): once, within the first steps, only when nearly every response
of enough responses holds no readable answer; its --set suggestion is one shell word that renders the instruction."""

import math
import shlex

import pytest

from bsb.train.answer_watch import AnswerWatch, suggestion
from bsb.train.config import TrainConfig, parse_overrides

BOXED = "Put the final answer in \\boxed{}."


def row(n, rate):
    return {"verdict_no_answer": round(n * rate), "verdict_wrong": n - round(n * rate), "no_answer_rate": rate}


def test_it_warns_once_when_the_pooled_rate_reaches_near_one():
    watch = AnswerWatch("math", BOXED, "plain")
    assert watch.see(row(4, 1.0)) is None  # 4 responses say nothing yet
    said = watch.see(row(8, 0.875))
    assert said and said.startswith("92% of the 12 responses in the first 2 step(s)") and "math task" in said
    assert watch.see(row(8, 1.0)) is None  # once


@pytest.mark.parametrize("rates", [[0.5, 1.0, 1.0], [0.8, 0.8, 0.8], [math.nan, math.nan, math.nan]])
def test_it_stays_quiet_when_answers_are_read_or_unknown(rates):
    watch = AnswerWatch("math", BOXED, "chat")
    assert [watch.see(row(10, r) if r == r else {"no_answer_rate": r}) for r in rates] == [None] * 3


def test_it_watches_only_the_first_steps():
    watch = AnswerWatch("math", BOXED, "plain")
    for _ in range(3):
        assert watch.see(row(10, 0.0)) is None
    assert watch.see(row(100, 1.0)) is None


@pytest.mark.parametrize("asks", [BOXED, "End with a line 'Answer: ' followed by the final answer.",
                                  "Write the whole program in one ```python code block.", 'Say "done" {x}'])
def test_the_suggested_set_renders_the_instruction_after_the_prompt(asks):
    word = suggestion(asks)
    values = parse_overrides(shlex.split(word)[1:])
    cfg = TrainConfig(**values)  # a valid template: braces escaped
    assert cfg.prompt_template.format(prompt="Q") == f"Q\n{asks}"


def test_a_task_without_a_format_gets_a_plain_hint():
    said = AnswerWatch("mine", "", "plain").see(row(20, 1.0))
    assert "make the prompt ask for what the verifier reads" in said and "--set" not in said


def test_a_prompt_that_asks_already_is_told_the_model_does_not_follow():
    watch = AnswerWatch("math", BOXED, "chat", prompt=f"<user>What is 2 + 3?\n{BOXED}<assistant>")
    said = watch.see({**row(20, 1.0), "truncated_frac": 0.5})
    assert "the prompt asks for it, but the model does not write it (50% of the responses hit max_response_len)" in said
    assert "--set" not in said
