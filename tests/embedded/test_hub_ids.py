"""Hub ids for models and data sets, offline: a hub cache laid out on disk as huggingface_hub writes it, and a data set
saved with ``save_to_disk``."""

import pytest

from bsb.embedded.model import resolve_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """HF_HOME with ``acme/tiny`` in its hub cache (refs/main -> a snapshot holding a tiny checkpoint), offline."""
    from tiny_checkpoint import build

    repo = tmp_path / "hf" / "hub" / "models--acme--tiny"
    build(repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return repo


def test_a_hub_id_resolves_to_its_cached_snapshot_offline(hub_cache):
    import transformers

    path = resolve_model("acme/tiny")
    assert path == hub_cache / "snapshots" / COMMIT
    assert transformers.AutoModelForCausalLM.from_pretrained(path).config.model_type == "qwen3"
    assert resolve_model(f"acme/tiny@{COMMIT}") == path


def test_a_hub_id_missing_offline_is_a_clear_error(hub_cache):
    with pytest.raises(FileNotFoundError, match=r"'acme/other': not found on the hub or in the hub cache .*HF_HUB_OFFLINE"):
        resolve_model("acme/other")
    with pytest.raises(FileNotFoundError, match="pass a local directory, a hub id"):
        resolve_model("./not/a/checkpoint")


def test_hf_data_sets_are_read_with_the_file_schemas(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    from bsb.tasks.data.files import load_problem_set
    from bsb.tasks.math.task import MathTask

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rows = {"train": [{"prompt": "1 + 1?", "answer": "2"}, {"prompt": "2 + 2?", "answer": "4"}],
            "test": [{"prompt": "3 + 3?", "answer": r"The sum is \boxed{6}."}]}
    datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in rows.items()}).save_to_disk(str(tmp_path / "ds"))
    task = MathTask(train_file=f"hf://{tmp_path}/ds", val_file=f"hf://{tmp_path}/ds:test")
    assert [p.answer for p in task.train] == ["2", "4"] and task.val[0].answer == "6" and task.val[0].id == "ds-test-0"
    with pytest.raises(ValueError, match="no split 'validation'; the data set has train, test"):
        load_problem_set(f"hf://{tmp_path}/ds:validation")
    datasets.Dataset.from_list([{"question": "q"}]).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(ValueError, match="bad, row 0: missing field 'answer'"):  # the file schemas' row checks
        load_problem_set(f"hf://{tmp_path}/bad")


def test_hub_data_set_names_and_splits_parse():
    from bsb.tasks.data.files import HubDataset

    for spec, name, split in [("hf://owner/name", "owner/name", "train"), ("hf://owner/name:train[:100]", "owner/name", "train[:100]"),
                              ("hf://o/n:train[10%:20%]", "o/n", "train[10%:20%]"), ("hf:///tmp/ds:test", "/tmp/ds", "test")]:
        assert (HubDataset(spec).name, HubDataset(spec).split) == (name, split)
    with pytest.raises(ValueError, match="name a data set"):
        HubDataset("hf://").name  # noqa: B018


def test_a_hub_data_set_missing_offline_is_a_clear_error():
    import subprocess
    import sys

    pytest.importorskip("datasets")
    code = ("from bsb.tasks.data.files import load_problem_set\ntry:\n    load_problem_set('hf://nobody/nothing')\n"
            "except FileNotFoundError as err:\n    print(err)")
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}  # read when datasets loads
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert out.startswith("hf://nobody/nothing: ") and "Hub" in out
