"""A user's own selector and advantage estimator, from a module outside bsb (tests/support/user_plugin.py), reach
training through the registries: by ``plugins`` and their registered names, or as ``module:Name``; and every bad
name is one clear ValueError before anything is built or called."""

import contextlib
import importlib
import json
import sys

import pytest
import torch

from bsb.embedded.model import TinyConfig, train_tiny_model
from bsb.engine.boundaries import candidate_pool
from bsb.engine.selectors import SELECTORS, ChainInput, Newline, ProbeJS, Selector, make_selector
from bsb.train import phases
from bsb.train.advantages import ADVANTAGES, advantages
from bsb.train.config import TrainConfig
from bsb.train.trainer import Trainer
from bsb.train.tree import Leaf, PromptTree

transformers = pytest.importorskip("transformers")

PLUGIN = "user_plugin"
SMALL = TinyConfig(steps=40, batch=8, hidden=64, layers=1, max_operand=3, ops=(1, 2))  # as tests/train/test_trainer.py


@contextlib.contextmanager
def _one_thread():
    """A model this small runs fastest on one thread; two threads on a busy 2-core machine are many times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    with _one_thread():
        return str(train_tiny_model(SMALL, tmp_path_factory.mktemp("tiny"), progress=False))


@pytest.fixture
def fresh_plugin(monkeypatch):
    """The plugin is imported afresh by the test (not already registered) and leaves no trace: the registries get
    back their own dicts (what the test registered goes with the copies) and ``sys.modules`` its old entry."""
    for registry in (SELECTORS, ADVANTAGES):
        monkeypatch.setattr(registry, "_items", dict(registry._items))
    saved = sys.modules.pop(PLUGIN, None)
    yield
    sys.modules.pop(PLUGIN, None)
    if saved is not None:
        sys.modules[PLUGIN] = saved


def _config(model_dir, out, **kw):
    base = dict(model=model_dir, backend="hf", steps=2, prompts_per_step=2, gen_prompts=2, chains=2, siblings=1,
                max_response_len=48, overlong_buffer=8, val_problems=4, val_every=0, save_every=0, out_dir=str(out),
                task="arith", task_options=dict(ops=[1], max_operand=3), progress=False, lr=1e-3, dynamic_sampling=False)
    base.update(kw)
    return TrainConfig(**base)


def _signed(tree: PromptTree) -> list[torch.Tensor]:
    mean = sum(tree.rewards) / len(tree.leaves)
    return [torch.full((len(leaf.response),), leaf.reward - mean, dtype=torch.float32) for leaf in tree.leaves]


def test_training_forks_with_the_plugins_selector_and_trains_on_its_advantages(fresh_plugin, model_dir, tmp_path, monkeypatch):
    assert "user_last" not in SELECTORS and "user_signed" not in ADVANTAGES  # only `plugins` registers them here
    cfg = _config(model_dir, tmp_path, plugins=[PLUGIN], selector="user_last", advantage="user_signed")
    plugin = sys.modules[PLUGIN]
    assert SELECTORS.get("user_last") is plugin.UserLast and ADVANTAGES.get("user_signed") is plugin.user_signed
    plugin.reset()

    generated, trained = [], []  # what the trainer generated and trained on, observed (the real phases run)
    real_generate, real_rows = phases.generate_trees, phases.advantage_rows

    def generate(*args, **kwargs):
        gen = real_generate(*args, **kwargs)
        generated.append(gen.trees)
        return gen

    def rows(kept, *args, **kwargs):
        out = real_rows(kept, *args, **kwargs)
        trained.append((kept, out))
        return out

    monkeypatch.setattr(phases, "generate_trees", generate)
    monkeypatch.setattr(phases, "advantage_rows", rows)
    with _one_thread():
        tr = Trainer(cfg)
        assert isinstance(tr.selector, plugin.UserLast)
        tr.run()

    # 2 steps trained, each with one generation round (no dynamic sampling) and its metrics row
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1, 2]
    steps = [r for r in lines if "fork_positions" in r]
    assert [r["step"] for r in steps] == [1, 2] and len(generated) == len(trained) == 2
    # the plugin ran: the selector once per step at least (refill rounds call it again), the estimator once per kept tree
    assert plugin.CALLS["select"] >= 2 and plugin.CALLS["score"] > 0
    assert plugin.CALLS["advantage"] == sum(len(kept) for kept, _ in trained) == 4
    assert plugin.CALLS["not_a_selector"] == 0

    # every fork is the last candidate of its chain's pool (user_last), recomputed here from the chain itself
    c = tr.selector.config
    picks = {response: fork for response, _, fork in plugin.PICKS}  # the selector's last word on each chain
    differs_from_newline = 0
    for row, trees in zip(steps, generated):
        assert row["fork_positions"] == [f for tree in trees for f in tree.fork_positions]  # the metrics log these forks
        for tree in trees:
            for fork, idx in zip(tree.fork_positions, tree.groups().values()):
                root = tree.leaves[idx[0]]
                assert root.origin == "root" and picks[tuple(root.response)] == fork
                pool = candidate_pool(root.response, tr.newline, c.max_candidates, c.range_cap, c.min_tail)
                assert fork == (pool.positions[-1] if pool.forkable else None)
                assert all(tree.leaves[i].prefix_len == (fork or 0) for i in idx)
                newline = Newline(c).select([ChainInput(root.prompt, root.response)], tr.newline).forks[0]
                differs_from_newline += fork != newline
    assert differs_from_newline > 0  # some chain had several candidates: these forks are not what `newline` picks

    # the update trained on the plugin's advantages: reward minus the tree's mean, on every token of each leaf
    for (kept, out), row in zip(trained, steps):
        expected = [a for tree in kept for a in _signed(tree)]
        assert len(out) == len(expected) and all(torch.equal(r.advantage, a) for r, a in zip(out, expected))
        assert row["adv_mean"] == pytest.approx(torch.cat(expected).mean().item(), abs=1e-6)


def test_module_colon_name_needs_no_plugins(fresh_plugin):
    cfg = TrainConfig(selector=f"{PLUGIN}:UserLast", advantage=f"{PLUGIN}:user_signed")
    assert cfg.plugins == [] and PLUGIN in sys.modules  # the lookup imported the module
    plugin = sys.modules[PLUGIN]
    selector = make_selector(f"{PLUGIN}:UserLast")
    assert type(selector) is plugin.UserLast

    # newline tokens (id 1) after positions 1, 3, 5: candidates 2, 4, 6; user_last forks at the last, newline at the first
    mask = torch.zeros(8, dtype=torch.bool)
    mask[1] = True
    chain = ChainInput([3], [5, 1, 5, 1, 5, 1, 5, 5, 5])
    assert selector.select([chain], mask).forks == [6] and Newline().select([chain], mask).forks == [2]
    assert plugin.CALLS["score"] == 1

    tree = PromptTree("p", "1", [Leaf([3], [4, 5, 6], 0, 0, reward=1.0), Leaf([3], [4, 7], 0, 0, reward=0.0)])
    out = advantages(tree, f"{PLUGIN}:user_signed")
    assert [a.tolist() for a in out] == [[0.5] * 3, [-0.5] * 2] and all(a.dtype == torch.float32 for a in out)


def _one_clear_error(excinfo, *parts):
    err = excinfo.value
    message = str(err)
    assert type(err) is ValueError and message.startswith("invalid config: ") and "\n" not in message
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)  # alone, not chained to the lookup's
    for part in parts:
        assert part in message, message


@pytest.mark.parametrize("kw, parts", [
    (dict(selector="user_lastt"), ["unknown selector 'user_lastt'", "probe_js", "package.module:Name"]),
    (dict(advantage="no_such_estimator"), ["unknown advantage 'no_such_estimator'", "treerl"]),
    (dict(loss="no_such_loss"), ["unknown loss 'no_such_loss'", "composite"]),
    (dict(plugins=["no_such_module_xyz"]), ["plugin module 'no_such_module_xyz' does not import"]),
    (dict(plugins=["no_such_module_xyz"], selector="user_last"), ["plugin module 'no_such_module_xyz'"]),  # plugins first
    (dict(selector="no_such_module_xyz:Thing"), ["module 'no_such_module_xyz' does not import"]),
    (dict(selector=f"{PLUGIN}:NoSuchClass"), [f"{PLUGIN} has no class 'NoSuchClass'"]),
    (dict(advantage=f"{PLUGIN}:no_such_function"), [f"{PLUGIN} has no function 'no_such_function'"]),
    (dict(selector=f"{PLUGIN}:not_a_selector"), [f"selector '{PLUGIN}:not_a_selector'", "not a subclass of bsb.engine.selectors.Selector"]),
    (dict(advantage=f"{PLUGIN}:UserLast"), [f"advantage '{PLUGIN}:UserLast'", "not a function"]),
    (dict(selector="bsv"), ["the bsv selector cannot choose RL forks", "pre-RL"]),
    (dict(selector="llm_judge"), ["the llm_judge selector cannot choose RL forks"]),
    (dict(selector=".user_plugin:UserLast"), ["name an absolute module"]),
    (dict(selector=":UserLast"), ["selector ':UserLast'", "name an absolute module"]),
    (dict(plugins=[".x"]), ["plugin module '.x'", "name an absolute module"]),
    (dict(plugins="user_plugin"), ["plugins must be a list of module names"]),
    (dict(plugins=["broken_plugin"]), ["plugin module 'broken_plugin' failed to import (ZeroDivisionError"]),
])
def test_a_bad_name_is_one_clear_value_error(fresh_plugin, kw, parts):
    with pytest.raises(ValueError) as excinfo:
        TrainConfig(**kw)
    _one_clear_error(excinfo, *parts)
    plugin = sys.modules.get(PLUGIN)
    assert plugin is None or plugin.CALLS["not_a_selector"] == 0  # checked, never called


def test_a_plain_function_named_as_a_selector_is_never_called(fresh_plugin):
    with pytest.raises(ValueError, match="not a subclass"):
        make_selector(f"{PLUGIN}:not_a_selector")
    plugin = sys.modules[PLUGIN]
    with pytest.raises(ValueError, match="not a subclass"):
        SELECTORS.register("user_fn")(plugin.not_a_selector)
    assert "user_fn" not in SELECTORS and plugin.CALLS["not_a_selector"] == 0


def test_a_name_taken_by_another_object_cannot_be_registered_again(fresh_plugin):
    class OtherClass(Selector):
        name = "probe_js"

    with pytest.raises(ValueError, match="selector 'probe_js' is already registered"):
        SELECTORS.register("probe_js")(OtherClass)
    assert SELECTORS.get("probe_js") is ProbeJS  # the built-in keeps its name
    with pytest.raises(ValueError, match="advantage 'grpo' is already registered"):
        ADVANTAGES.register("grpo")(lambda tree, **_: [])
    plugin = importlib.import_module(PLUGIN)
    with pytest.raises(ValueError, match="selector 'user_last' is already registered"):
        SELECTORS.register("user_last")(OtherClass)
    assert SELECTORS.register("user_last")(plugin.UserLast) is plugin.UserLast  # the same object again: a no-op
    assert SELECTORS.get("user_last") is plugin.UserLast


def test_the_plugin_leaves_no_registration_behind():
    """Runs after this module's other tests (no ``fresh_plugin``): what they registered is gone, so other modules'
    tests that walk the registries (bsb demo's every selector, verl's server selectors) see bsb's own only."""
    assert "user_last" not in SELECTORS and "user_signed" not in ADVANTAGES and PLUGIN not in sys.modules
