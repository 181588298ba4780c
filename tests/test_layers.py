"""The import graph of bsb runs downward only (docs/ARCHITECTURE.md): no module imports a layer above its own, and
inside bsb.tasks the domains sit on the protocol and the data files, never the other way round."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "bsb"
# top-level parts of bsb by layer (a part may import its own layer's other parts only where listed in PEERS)
LAYER = {"registry": 0, "seeds": 0, "fields": 0, "min_versions": 0, "safe_io": 0, "run_storage": 0, "owners": 0, "_C": 0, "kernels": 0, "tasks": 0, "embedded": 1, "engine": 1, "train": 2, "eval": 2,
         "integrations": 3, "commands": 3, "cli": 4}
PEERS = {("tasks", "registry"), ("tasks", "fields"), ("kernels", "_C"), ("kernels", "min_versions"), ("run_storage", "safe_io"), ("tasks", "owners"), ("embedded", "engine")}
# bsb.tasks inside: the protocol and answer text, then prompts and problem files, then the domains (arith is graded
# like math, and so is reasoning_gym; the code task's default problems are the synthetic recipes), then the name registry
TASK_LAYER = {"base": 0, "answers": 0, "prompting": 1, "data": 1, "math": 2, "synthetic": 3, "reasoning_gym": 3, "code": 4,
              "registry": 5}


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)


def _part(module: str, depth: int = 1) -> str | None:
    parts = module.split(".")
    return parts[depth] if parts[0] == "bsb" and len(parts) > depth else None


def edges():
    for path in sorted(ROOT.rglob("*.py")):
        here = path.relative_to(ROOT.parent).with_suffix("").parts
        for module in _imports(path):
            yield here, module


def test_no_import_runs_up_a_layer():
    bad = []
    for here, module in edges():
        src, dst = here[1] if len(here) > 1 else None, _part(module)
        if src in (None, "__init__") or dst is None or dst not in LAYER or src == dst:
            continue
        src = src if src in LAYER else src.split(".")[0]
        if LAYER[dst] > LAYER[src] or (LAYER[dst] == LAYER[src] and (src, dst) not in PEERS):
            bad.append(f"{'/'.join(here)} imports {module}")
    assert not bad, "\n".join(bad)


def test_inside_tasks_the_domains_sit_on_the_protocol():
    bad = []
    for here, module in edges():
        if len(here) < 3 or here[1] != "tasks" or _part(module) != "tasks" or _part(module, 2) is None:
            continue
        src, dst = here[2], _part(module, 2)
        if src == "__init__" or dst not in TASK_LAYER or src == dst:
            continue
        if TASK_LAYER[dst] > TASK_LAYER[src.split(".")[0]]:
            bad.append(f"{'/'.join(here)} imports {module}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    """A module of the lowest layer importing the trainer is reported (the test above can fail)."""
    fake = tmp_path / "bsb" / "tasks"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("from bsb.train.trainer import Trainer\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path / "bsb")
    try:
        test_no_import_runs_up_a_layer()
    except AssertionError as err:
        assert "bsb/tasks/bad imports bsb.train.trainer" in str(err)
    else:
        raise AssertionError("an upward import went unseen")


def test_the_run_folders_readers_import_no_torch():
    """``bsb report``, ``bsb export`` and the sweep's summary read a run folder's files (bsb.run_storage) without torch
    or the training config: the only eval -> train edge is gone."""
    import subprocess
    import sys

    block = ("import sys\nclass Block:\n    def find_spec(self, name, path=None, target=None):\n"
             "        if name.split('.')[0] == 'torch':\n            raise ImportError('torch blocked')\n"
             "sys.meta_path.insert(0, Block())\n"
             "import bsb.run_storage, bsb.safe_io, bsb.eval.report, bsb.commands.report, bsb.commands.export\n"
             "import bsb.eval.sweep_summary\n"
             "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


def _module_graph() -> dict[str, set[str]]:
    """bsb's modules and the bsb modules each imports (at the top or inside a function)."""
    graph: dict[str, set[str]] = {}
    for here, module in edges():
        src, parts = ".".join(here), module.split(".")
        for k in range(len(parts), 1, -1):  # the longest prefix that is a module or a package
            path = ROOT.parent.joinpath(*parts[:k])
            if path.with_suffix(".py").exists() or (path / "__init__.py").exists():
                if ".".join(parts[:k]) != src:
                    graph.setdefault(src, set()).add(".".join(parts[:k]))
                break
    return graph


def test_no_module_imports_itself_through_others():
    graph = _module_graph()
    assert {"bsb.train.update", "bsb.train.run_plan"} <= graph["bsb.train.trainer"]  # lazy imports counted too

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    circles = sorted(m for m in graph if m in reaches(m) and not m.endswith("__init__"))
    assert not circles, f"modules that import themselves through others: {circles}"


def _architecture_tree() -> tuple[dict[str, str], str]:
    """docs/ARCHITECTURE.md's layer tree (entry name -> its text) and its layer picture (the next code block)."""
    import re

    text = (ROOT.parent / "docs" / "ARCHITECTURE.md").read_text().split("## Layers", 1)[1]
    tree, picture = text.split("```")[1], text.split("```")[3]
    entries: dict[str, str] = {}
    for line in tree.splitlines():
        head = re.match(r"^  ([a-z_]+)(?:/|\.py)", line)
        if head:
            entries[head.group(1)] = line
        elif entries and line.startswith("    "):
            entries[next(reversed(entries))] += " " + line
    return entries, picture


def test_the_architecture_pages_tree_names_every_part_and_module_that_exists():
    """The layer tree is checked against the code: every top-level module and package of bsb is an entry, every entry
    exists, each module of the packages a maintainer reads first (engine, train, eval, commands, tasks) is named in its
    package's entry, and the layer picture names every part of LAYER."""
    import re

    entries, picture = _architecture_tree()
    parts = {p.stem for p in ROOT.glob("*.py") if p.name != "__init__.py"}
    parts |= {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert set(entries) == parts
    for package in ("engine", "train", "eval", "commands", "tasks"):
        words = set(re.findall(r"[a-z_]+", entries[package]))
        modules = {p.stem for p in (ROOT / package).glob("*.py") if p.name != "__init__.py"}
        modules |= {p.name for p in (ROOT / package).iterdir() if (p / "__init__.py").exists()}
        assert modules <= words, (package, sorted(modules - words))
    named = set(re.findall(r"[a-z_]+", picture))
    assert set(LAYER) - {"_C"} <= named, sorted(set(LAYER) - {"_C"} - named)
