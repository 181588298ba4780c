"""The embedded defaults ship with the package: checked by sha256, installed into the cache without training, and
reproducing the held-out accuracy they were recorded with."""

import hashlib
import json
import math
import shutil

import pytest

from bsb.embedded import model as M


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_shipped_defaults_are_the_embedded_configs_and_match_their_sums():
    assert set(M.SHIPPED_NAMES.values()) == {"walk", "code"} and M.SHIPPED_NAMES[M.EMBEDDED.key()] == "walk"
    for name, cfg in (("walk", M.EMBEDDED), ("code", M.EMBEDDED_CODE)):
        folder = M.shipped_checkpoint(name)
        record = json.loads((folder / "bsb_train.json").read_text())
        assert record["config"]["steps"] == cfg.steps and record["config"]["task"] == cfg.task  # the recipe it came from


def test_a_damaged_shipped_file_is_an_error_naming_it(tmp_path, monkeypatch):
    copy = tmp_path / "checkpoints"
    shutil.copytree(M.SHIPPED, copy)
    weights = copy / "walk" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(M, "SHIPPED", copy)
    with pytest.raises(ValueError, match="walk/model.safetensors: missing or not the shipped file"):
        M.shipped_checkpoint("walk")


def test_the_embedded_default_installs_the_shipped_copy_without_training(tmp_path, monkeypatch):
    monkeypatch.setenv("BSB_CACHE", str(tmp_path))
    monkeypatch.setattr(M, "_model", lambda *a, **k: pytest.fail("the shipped default must not be trained"))
    path = M.resolve_model("embedded")
    assert path == tmp_path / M.EMBEDDED.key()
    assert _sha(path / "model.safetensors") == _sha(M.SHIPPED / "walk" / "model.safetensors")
    assert M.resolve_model("embedded") == path  # the cache entry is reused


@pytest.mark.slow
@pytest.mark.parametrize("name", ["walk", "code"])
def test_the_shipped_checkpoint_reproduces_its_recorded_held_out_accuracy(name):
    from heldout import sampled_accuracy

    folder = M.shipped_checkpoint(name)
    rec = json.loads((folder / "bsb_heldout.json").read_text())
    correct, n = sampled_accuracy(folder, name, rec["problems"], temperature=rec["temperature"])
    p = rec["accuracy"]
    assert abs(correct / n - p) <= 3 * math.sqrt(p * (1 - p) / n) + 1e-9, (correct, n, rec)  # within sampling error


def _walk_lag():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("walk_lag", Path(__file__).parents[2] / "bench" / "walk_lag.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_walk_lags_reads_reuse_the_chain_and_equal_one_forward_a_text():
    """bench/walk_lag.py forwards a chain once and reads ``=>`` at every boundary on its keys and values: the logits
    of one forward a text (the reference), within float error, on chains of three operations."""
    import random

    import torch
    import transformers

    from bsb.tasks.synthetic import walk as W

    bench, folder = _walk_lag(), M.shipped_checkpoint("walk")
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    rng = random.Random(5)
    with torch.no_grad():
        for op in W.WalkTask().ops[:3]:
            p = W.make_problem(rng, op)
            c = W.make_chain(p, rng, "wrong")
            fast = bench.beliefs(model, tok, p.prompt, c.lines)
            assert fast.shape[0] == len(c.lines) + 1
            for j in range(len(c.lines) + 1):
                text = p.prompt + "".join(line + "\n" for line in c.lines[:j]) + W.SUFFIX
                ref = model(input_ids=torch.tensor([tok.encode(text, add_special_tokens=False)])).logits[0, -1]
                assert torch.allclose(fast[j], ref, atol=1e-4), (op, j)


@pytest.fixture(scope="module")
def shipped_lag():
    """bench/walk_lag.py's figures on the shipped walk model (the recorded chains) and the recorded ones."""
    bench = _walk_lag()
    folder = M.shipped_checkpoint("walk")
    rec = json.loads((folder / "bsb_lag.json").read_text())
    return bench, bench.measure(folder, rec["chains"], rec["seed"]), rec


@pytest.mark.slow
def test_the_shipped_walk_models_lag_figures_are_the_recorded_ones(shipped_lag):
    """The same constructed chains, so only float differences between CPUs: the figures bsb_lag.json (and the docs)
    hold."""
    _, got, rec = shipped_lag
    for key in ("js_elsewhere", "js_at_over_next", "js_at_over_elsewhere", "gold_before", "top_is_end"):
        assert got[key] == pytest.approx(rec[key], rel=0.05, abs=1e-3), (key, got[key], rec[key])
    assert [got["js"][k] for k in range(-3, 4)] == pytest.approx([rec["js"][str(k)] for k in range(-3, 4)], abs=2e-3)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="the shipped walk model misses walk_lag's targets (JS at the wrong line 1.0x one line later, 2.3x "
    "elsewhere, gold before 0.70; docs/embedded.md, 'The belief after a slip'): strict, so a model that meets them "
    "turns this into a failure to remove the mark",
)
def test_the_shipped_walk_models_belief_moves_at_the_wrong_line(shipped_lag):
    """Issue 39's targets: JS across the wrong line at least 3x its JS one line later and 5x elsewhere, the belief in
    the gold answer at least 0.8 before it."""
    bench, got, _ = shipped_lag
    assert bench.missed(got) == [], got


def test_walk_lag_targets_are_the_issues_and_a_missed_one_is_named():
    bench = _walk_lag()
    assert bench.TARGETS == {"js_at_over_next": 3.0, "js_at_over_elsewhere": 5.0, "gold_before": 0.8}
    ok = {"js_at_over_next": 3.0, "js_at_over_elsewhere": 5.0, "gold_before": 0.8}
    assert bench.missed(ok) == []
    assert bench.missed({**ok, "js_at_over_next": 2.9}) == ["js_at_over_next 2.90 < 3.0"]
    assert bench.missed({**ok, "gold_before": float("nan")}) == ["gold_before nan < 0.8"]


def test_ship_model_refuses_a_folder_that_is_not_the_recipes_checkpoint(tmp_path, capsys):
    """bench/ship_model.py replaces a shipped default only with a checkpoint trained from its recipe."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("ship", Path(__file__).parents[2] / "bench" / "ship_model.py")
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    before = (M.SHIPPED / "SHA256SUMS").read_text()
    with pytest.raises(SystemExit):
        ship.main(["walk", str(tmp_path)])
    assert "not a trained checkpoint (missing bsb_train.json" in capsys.readouterr().err
    code = tmp_path / "code"
    shutil.copytree(M.shipped_checkpoint("code"), code)
    with pytest.raises(SystemExit):
        ship.main(["walk", str(code)])
    assert "not the walk recipe" in capsys.readouterr().err
    assert (M.SHIPPED / "SHA256SUMS").read_text() == before  # nothing shipped
