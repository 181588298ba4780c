"""Tasks by name: ``walk`` (the embedded default), ``math``, ``arith``, ``code``, ``reasoning_gym``, or
``package.module:ClassName`` for a task of your own.

:func:`make_task` builds and checks a task before any model is loaded: an unknown name, a module that does not
import, a class that does not satisfy the :class:`~bsb.tasks.base.Task` protocol, or an option the task does not
take is one clear error naming the accepted values.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from bsb.registry import Registry
from bsb.tasks.base import ATTRIBUTES, METHODS, Task
from bsb.tasks.code.task import CodeTask
from bsb.tasks.math.task import MathTask
from bsb.tasks.reasoning_gym import ReasoningGymTask
from bsb.tasks.synthetic.arith import ArithTask
from bsb.tasks.synthetic.walk import WalkTask


def _not_a_task_class(obj) -> str:
    """Why ``obj`` is not a task class: checked on the class, before it is constructed (a ``module:Class`` that is not a
    task is never called)."""
    if not isinstance(obj, type):
        return "not a class (subclass bsb.tasks.base.Task)"
    missing = [m for m in METHODS if not callable(getattr(obj, m, None))]
    return (
        f"does not satisfy the Task protocol: missing {', '.join(missing)} (subclass bsb.tasks.base.Task)"
        if missing
        else ""
    )


TASKS: Registry[type] = Registry("task", _not_a_task_class)
for _cls, _about in (
    (WalkTask, "synthetic map walks, the embedded default"),
    (ArithTask, "the earlier synthetic arithmetic"),
    (MathTask, "problem files"),
    (CodeTask, "programs with hidden tests, in a sandbox"),
    (ReasoningGymTask, "reasoning-gym's procedural problems"),
):
    TASKS.register(_cls.name, _about)(_cls)


def task_class(name: str) -> type:
    """The class behind a task name (registered in :data:`TASKS`, or ``package.module:ClassName``)."""
    return TASKS.get(name)


def make_task(name: str, options: Mapping | None = None) -> Task:
    cls = task_class(name)
    options = dict(options or {})
    params = inspect.signature(cls).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = sorted(set(options) - set(params)) if not takes_any else []
    if unknown:
        probe = [k for k in unknown if k in ("suffix", "probe_suffix", "read_len")]
        hint = " (the probe's suffix and L are the run's own probe_suffix / read_len options)" if probe else ""
        raise ValueError(
            f"task {name!r} has no option(s) {', '.join(unknown)}; its options are: {', '.join(params) or 'none'}"
            + hint
        )
    try:
        task = cls(**options)
    except (TypeError, KeyError, AttributeError) as err:  # an option of the wrong kind (a list where a number goes...)
        shown = ", ".join(f"{k}={v!r}" for k, v in options.items()) or "none"
        raise ValueError(f"task {name!r} cannot take the options {shown}: {type(err).__name__}: {err}") from None
    check_task(task, name)
    return task


def check_task(task, name: str = "task") -> None:
    """The protocol: every method of :data:`bsb.tasks.base.METHODS` callable, a non-empty ``probe_suffix`` string and
    a ``read_len`` >= 1."""
    missing = [m for m in METHODS if not callable(getattr(task, m, None))]
    missing += [a for a in ATTRIBUTES if getattr(task, a, None) is None]
    if missing:
        raise ValueError(
            f"task {name!r} ({type(task).__name__}) does not satisfy the Task protocol: missing {', '.join(missing)} "
            "(subclass bsb.tasks.base.Task)"
        )
    if not isinstance(task.probe_suffix, str) or not task.probe_suffix:
        raise ValueError(f"task {name!r}: probe_suffix must be a non-empty string (the elicitation suffix)")
    if not isinstance(task.read_len, int) or task.read_len < 1:
        raise ValueError(f"task {name!r}: read_len must be an int >= 1, got {task.read_len!r}")


def offline_task(task: str | None = None, options: Mapping | None = None, problems: str | None = None) -> Task:
    """The task of an offline command (validate, evaluate, demo): ``task`` with ``options``; a problem file given
    as ``problems`` becomes the held-out set of that task (``math`` when no task is named); else ``walk``."""
    options = dict(options or {})
    if problems is not None:
        options["val_file"] = str(problems)
    return make_task(task or ("math" if problems is not None else "walk"), options)
