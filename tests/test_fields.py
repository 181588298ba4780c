"""A config field carries the facts about its values (choices, bounds, size limit, resume_safe, a module's own facts):
``check_values`` checks them for every config, and the names that share a fact are read back from the fields."""

import dataclasses
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


def test_a_path_of_the_wrong_kind_is_one_clear_error_on_every_command(tmp_path):
    """--out is a folder for validate, evaluate, report, export, sweep and bsb train's out_dir, a file for demo: the
    help says which, and the other kind (an existing path of it, or a name that says it) is refused before any work."""
    from bsb.commands.demo import DemoConfig
    from bsb.commands.evaluate import EvaluateConfig
    from bsb.commands.export import ExportConfig
    from bsb.commands.report import ReportConfig
    from bsb.commands.sweep import SweepConfig
    from bsb.commands.validate import ValidateConfig
    from bsb.train.config import TrainConfig

    existing = tmp_path / "afile"
    existing.write_text("")
    folders = [(ValidateConfig, "out_dir", {}), (EvaluateConfig, "out_dir", {}), (TrainConfig, "out_dir", {}),
               (ReportConfig, "out", dict(path="run")), (ExportConfig, "out", dict(run="run")),
               (SweepConfig, "out", dict(configs=("a.yaml",)))]
    for cls, name, extra in folders:
        field = next(f for f in dataclasses.fields(cls) if f.name == name)
        assert field.metadata["help"].endswith("(a folder)"), cls.__name__
        for bad, why in ((str(existing), "is an existing file"), (str(tmp_path / "table.md"), "not a file")):
            with pytest.raises(ValueError, match=why):
                cls(**{name: bad}, **extra)
        cls(**{name: str(tmp_path / "out")}, **extra)  # a folder name passes
    assert next(f for f in dataclasses.fields(DemoConfig) if f.name == "out").metadata["help"].endswith("(a file)")
    for bad in (str(tmp_path), str(tmp_path / "new") + "/"):
        with pytest.raises(ValueError, match="names a file, but .* is a folder"):
            DemoConfig(out=bad)
    DemoConfig(out=str(tmp_path / "demo.png"))
