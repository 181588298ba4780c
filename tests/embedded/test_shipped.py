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
