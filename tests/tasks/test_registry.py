"""Tasks by name, user tasks by module:Class, and the protocol check."""

import random

import pytest

from bsb.tasks.base import Problem, Task
from bsb.tasks.math.task import MathTask
from bsb.tasks.registry import TASKS, make_task, offline_task
from bsb.tasks.synthetic.arith import ArithTask
from bsb.tasks.synthetic.walk import WalkTask


def test_named_tasks_and_options():
    t = make_task("arith", {"ops": [1], "max_operand": 3})
    assert isinstance(t, ArithTask) and t.ops == (1,) and t.read_len == 1 and t.probe_suffix.endswith("\\boxed{")
    held = t.held_out(5)
    assert held == t.held_out(5) and len({p.prompt for p in held}) == 5  # fixed, distinct
    drawn = t.draw(random.Random(0), 10, {p.prompt for p in held})
    assert len(drawn) == 10 and not {p.prompt for p in drawn} & {p.prompt for p in held}
    v = t.verify("1 + 2 = 3\n= 3\nSo the final answer is \\boxed{3}.", Problem("x", "Compute 1 + 2.\n", "3"))
    assert v.correct and v.reward == 1.0 and v.answer == "3"
    assert t.answer_span("... \\boxed{-4}.") == "-4" and t.gold_continuation(Problem("x", "", "7")) == "7}"


def test_user_task_by_module_and_class():
    t = make_task("own_task:EvenOdd", {"top": 9})
    assert isinstance(t, Task) and t.top == 9 and t.held_out(2)[1].answer == "0"


@pytest.mark.parametrize("name,options,match", [
    ("nope", {}, "unknown task 'nope'; choose one of walk, arith, math"),
    ("no_such_module:T", {}, "module 'no_such_module' does not import"),
    ("own_task:Missing", {}, "has no class 'Missing'"),
    ("own_task:NotATask", {}, "does not satisfy the Task protocol: missing held_out"),
    ("arith", {"opps": [2]}, "has no option\\(s\\) opps; its options are: ops, max_operand"),
    ("arith", {"ops": []}, "task option ops"),
    ("math", {"gate_chars": -1}, "gate_chars"),
    # one knob for the probe: the run's probe_suffix / read_len, not a task option as well
    ("math", {"suffix": "x"}, "has no option\\(s\\) suffix.*the run's own probe_suffix / read_len"),
    ("code", {"read_len": 4}, "has no option\\(s\\) read_len.*the run's own probe_suffix / read_len"),
])
def test_bad_tasks_are_clear_errors(name, options, match):
    with pytest.raises(ValueError, match=match):
        make_task(name, options)


def test_math_task_needs_its_files_when_used(tmp_path):
    t = MathTask()
    with pytest.raises(ValueError, match="set task option train_file"):
        t.draw(random.Random(0), 1, set())
    with pytest.raises(ValueError, match="set task option val_file"):
        t.held_out(1)
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "prompt": "1+1?", "answer": "2"}\n')
    t = offline_task(None, None, str(f))
    assert isinstance(t, MathTask) and [p.id for p in t.sample(5)] == ["a"]
    assert isinstance(offline_task(), WalkTask)  # the embedded default's task


def test_help_texts_name_every_registered_implementation():
    """The help of task, advantage and loss is built from their registries: a registered one is never left out (the
    hand-written task help once omitted reasoning_gym)."""
    from bsb.registry import Registry
    from bsb.train.advantages import ADVANTAGES
    from bsb.train.config import TrainConfig
    from bsb.train.loss import LOSSES

    text = TrainConfig.help_text()
    for registry in (TASKS, ADVANTAGES, LOSSES):
        assert registry.help() in text and all(name in registry.help() for name in registry.names())
    mine = Registry("thing", noun="function")
    mine.register("a", "the first")(len)
    mine.register("b")(max)
    assert mine.help() == "a (the first) | b, or package.module:function"
