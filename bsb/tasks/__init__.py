"""bsb.tasks: what is being learned. The Task protocol (:mod:`bsb.tasks.base`), the registry of task names, prompt
rendering and answer-text helpers, and the domains: ``math/`` (task, grader, data report), ``code/`` (task, problem
loaders, the sandbox), ``synthetic/`` (walk, arith and code generators with their tasks) over ``data/`` (problem
files and their schemas). No model code: the embedded models live in :mod:`bsb.embedded` (docs/tasks.md)."""

from bsb.tasks.base import Problem, SyntheticTask, Task, Verdict
from bsb.tasks.registry import make_task

__all__ = ["Problem", "SyntheticTask", "Task", "Verdict", "make_task"]
