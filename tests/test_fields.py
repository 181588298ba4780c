"""A config field carries the facts about its values (choices, bounds, size limit, resume_safe, a module's own facts):
``check_values`` checks them for every config, and the names that share a fact are read back from the fields."""

import math
from dataclasses import dataclass

import pytest

from bsb.fields import check_values, help_field, named, value_problems


@dataclass
class Example:
    mode: str = help_field("a", "a mode", choices=("a", "b"))
    share: float = help_field(0.5, "a share", gt=0, le=1)
    count: int = help_field(4, "a count", ge=1, size_limit=100)
    width: int | None = help_field(None, "a width", ge=0, lt=10, size_limit=5, flag="--wide")
    steps: int = help_field(2, "steps", resume_safe=True, evaluation=True)
    seed: int = help_field(0, "any integer")


def test_valid_values_pass_and_unset_optionals_are_not_checked():
    check_values(Example())
    assert value_problems(Example(width=None, seed=10**18)) == []


@pytest.mark.parametrize("kw,message", [
    (dict(mode="c"), "mode must be one of a, b, got 'c'"),
    (dict(share=0.0), r"share must be in \(0, 1\], got 0.0"),
    (dict(share=math.nan), "share must be a finite number, got nan"),
    (dict(share=True), "share must be a finite number, got True"),
    (dict(count=0), "count must be >= 1, got 0"),
    (dict(count=1.0), "count must be an integer, got 1.0"),
    (dict(width=10), r"width \(--wide\) must be in \[0, 10\), got 10"),
    (dict(count=101, width=6), r"count, width \(--wide\) beyond any run \(a typo\?\): count = 101 \(at most 100\); "
                               r"width \(--wide\) = 6 \(at most 5\)"),
])
def test_each_fact_is_one_message_naming_the_field(kw, message):
    problems = value_problems(Example(**kw))
    assert len(problems) == 1 and __import__("re").fullmatch(message, problems[0]), problems
    with pytest.raises(ValueError, match="^invalid config: " + message + "$"):
        check_values(Example(**kw))


def test_every_broken_fact_is_named_at_once():
    problems = value_problems(Example(mode="z", share=2.0, count=-1))
    assert [p.split()[0] for p in problems] == ["mode", "share", "count"]


def test_facts_are_read_back_from_the_fields():
    assert named(Example, "resume_safe") == ("steps",) and named(Example, "evaluation") == ("steps",)
    assert named(Example, "size_limit") == ("count", "width") and named(Example, "nothing") == ()
