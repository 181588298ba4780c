"""The run folder consistent across any crash (bsb.train.run_folder): files swapped in whole, a checkpoint that cannot
be this run's an error naming the file, a full disk one line."""

import errno
import json
import shutil
from pathlib import Path

import pytest

from bsb.embedded.model import TinyConfig, train_tiny_model
from bsb.run_storage import swap_in
from bsb.train.config import TrainConfig
from bsb.train.sharding import Placement
from bsb.train.trainer import Trainer

SMALL = TinyConfig(steps=40, batch=8, hidden=64, layers=1, max_operand=3, ops=(1, 2))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A two-step run's folder (checkpoint at step 2, metrics rows 0-2), copied fresh by :func:`run`."""
    model = str(train_tiny_model(SMALL, tmp_path_factory.mktemp("tiny"), progress=False))
    out = tmp_path_factory.mktemp("run") / "run"
    Trainer(config(model, out)).run()
    return model, out


def config(model, out, **kw):
    base = dict(
        model=model,
        backend="hf",
        steps=2,
        prompts_per_step=2,
        gen_prompts=2,
        chains=2,
        siblings=1,
        max_response_len=48,
        overlong_buffer=8,
        val_problems=4,
        val_every=1,
        save_every=1,
        out_dir=str(out),
        task="arith",
        task_options=dict(ops=[1], max_operand=3),
        progress=False,
        dynamic_sampling=False,
    )
    return TrainConfig(**{**base, **kw})


@pytest.fixture
def run(trained, tmp_path):
    model, source = trained
    out = tmp_path / "run"
    shutil.copytree(source, out)
    return model, out


def test_swap_in_replaces_a_file_or_a_folder_whole(tmp_path):
    dest, tmp = tmp_path / "f", tmp_path / "f.part"
    dest.write_text("old")
    tmp.write_text("new")
    swap_in(tmp, dest)
    assert dest.read_text() == "new" and not tmp.exists()
    folder, new = tmp_path / "d", tmp_path / "d.tmp"
    folder.mkdir()
    (folder / "a").write_text("old")
    new.mkdir()
    (new / "b").write_text("new")
    swap_in(new, folder)
    assert sorted(p.name for p in folder.iterdir()) == ["b"] and not new.exists()
    assert not (tmp_path / "d.old").exists()


def test_a_checkpoint_without_state_json_is_an_error_not_a_silent_restart(run):
    model, out = run
    (out / "checkpoint" / "state.json").unlink()
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match=r"checkpoint: holds no state.json"):
        Trainer(config(model, out, steps=3))
    assert (out / "metrics.jsonl").read_text() == before  # nothing rewritten
    assert Trainer(config(model, out, steps=3), resume=False).step == 0  # --no-resume starts over on purpose


def test_a_checkpoint_step_beyond_its_metrics_is_an_error(run):
    model, out = run
    state_path = out / "checkpoint" / "state.json"
    state = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({**state, "step": 99999, "active_steps": 0}))
    with pytest.raises(ValueError, match=r"state.json: step 99999 is beyond .*metrics.jsonl \(last row: step 2\)"):
        Trainer(config(model, out, steps=100000))
    state_path.write_text(json.dumps(state))
    (out / "metrics.jsonl").unlink()
    with pytest.raises(ValueError, match=r"step 2 is beyond .*metrics.jsonl \(last row: none\)"):
        Trainer(config(model, out, steps=3))


def test_a_state_without_checksums_is_an_error(run):
    model, out = run
    state_path = out / "checkpoint" / "state.json"
    state = json.loads(state_path.read_text())
    del state["checksums"]
    state_path.write_text(json.dumps(state))
    with pytest.raises(ValueError, match="records no checksums"):
        Trainer(config(model, out, steps=3))


def test_a_crash_while_the_resume_rewrites_metrics_loses_no_row(run, monkeypatch):
    """The resume drops rows after the checkpoint; the file is written beside and swapped in, so a crash inside the
    write leaves every row (it used to leave the file cut)."""
    model, out = run
    metrics = out / "metrics.jsonl"
    rows = metrics.read_text()
    metrics.write_text(rows + json.dumps({"step": 3, "loss": 1.0}) + "\n")  # a row after the checkpoint (step 2)
    real = Path.write_text

    def crash(self, text, *a, **kw):
        if self.name.startswith("metrics.jsonl"):
            real(self, text[: len(text) // 2], *a, **kw)
            raise KeyboardInterrupt("killed while writing")
        return real(self, text, *a, **kw)

    monkeypatch.setattr(Path, "write_text", crash)
    with pytest.raises(KeyboardInterrupt):
        Trainer(config(model, out, steps=3))
    monkeypatch.undo()
    assert [json.loads(x)["step"] for x in metrics.read_text().splitlines()] == [0, 1, 2, 3]
    assert Trainer(config(model, out, steps=3)).step == 2
    assert [json.loads(x)["step"] for x in metrics.read_text().splitlines()] == [0, 1, 2]


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("[enforce fail at inline_container.cc:595] . unexpected pos 64"),
        OSError(errno.ENOSPC, "No space left on device"),
    ],
)
def test_a_full_disk_while_saving_is_one_error_naming_the_folder(run, monkeypatch, failure):
    model, out = run
    tr = Trainer(config(model, out, steps=3))
    before = (out / "checkpoint" / "state.json").read_text()

    def save(self, optimizer, folder, tokenizer):
        (folder / "model").mkdir()
        (folder / "model" / "half.safetensors").write_bytes(b"x" * 100)
        raise failure

    monkeypatch.setattr(Placement, "save", save)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 0))
    with pytest.raises(OSError) as err:
        tr.save()
    assert err.value.errno == errno.ENOSPC
    assert (
        str(out) in str(err.value)
        and "0 MiB free" in str(err.value)
        and "MiB (the size of the last one)" in str(err.value)
    )
    assert (out / "checkpoint" / "state.json").read_text() == before and not (out / "checkpoint.tmp").exists()
    tr.close()


def test_other_failures_while_saving_are_not_taken_for_a_full_disk(run, monkeypatch):
    model, out = run
    tr = Trainer(config(model, out, steps=3))
    monkeypatch.setattr(Placement, "save", lambda *a: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        tr.save()
    tr.close()


def test_a_failed_export_leaves_nothing_behind_and_keeps_the_old_one(run):
    from bsb.commands.export import export

    _, out = run
    first = export(out)
    (out / "final" / "config.json").write_text("{not json")
    with pytest.raises(Exception, match="config.json|JSON|Expecting"):
        export(out, force=True)
    assert not (out / "export-final.tmp").exists() and (first / "bsb_export.json").exists()


def test_a_figure_path_without_a_suffix_gets_png_and_a_folder_is_an_error(tmp_path):
    from bsb.eval.figures import bar_chart

    written = bar_chart(tmp_path / "bars", {"a": 1.0, "b": 2.0}, ylabel="E")
    assert written == tmp_path / "bars.png" and written.exists()
    with pytest.raises(IsADirectoryError, match="is a folder"):
        bar_chart(tmp_path, {"a": 1.0}, ylabel="E")


def _kill_points():
    """The folder a kill leaves at each point of a save (checkpoint) or an export (best/, weights/step-S, final/)."""

    def copy(src, dst):
        return lambda out: shutil.copytree(out / src, out / dst)

    def both(*steps):
        return lambda out: [step(out) for step in steps]

    def move(src, dst):
        return lambda out: (out / src).rename(out / dst)

    def empty(name):
        return lambda out: (out / name).mkdir(parents=True)

    best = both(copy("final", "best.tmp"), lambda out: (out / "best.tmp" / "bsb_best.json").write_text(
        json.dumps({"step": 2, "val_accuracy": 0.5})))
    return {
        "writing checkpoint.tmp": empty("checkpoint.tmp"),
        "checkpoint.tmp complete, not yet swapped": copy("checkpoint", "checkpoint.tmp"),
        "between the checkpoint's two renames": both(copy("checkpoint", "checkpoint.old"),
                                                     move("checkpoint", "checkpoint.tmp")),
        "swapped, checkpoint.old not yet removed": copy("checkpoint", "checkpoint.old"),
        "writing best.tmp": empty("best.tmp"),
        "between best's two renames": both(best, move("best.tmp", "best.old")),
        "best swapped, best.old not yet removed": both(best, move("best.tmp", "best"), copy("best", "best.old")),
        "weights/step-2 swapped, its .old not yet removed": both(copy("final", "weights/step-2"),
                                                                 copy("final", "weights/step-2.old")),
        "writing weights/step-2.tmp": empty("weights/step-2.tmp"),
        "writing final.tmp": empty("final.tmp"),
        "writing metrics.jsonl.part": lambda out: (out / "metrics.jsonl.part").write_text('{"step": 3'),
        "a link named like a leftover": lambda out: (out / "final.tmp").symlink_to(out.parent),
    }


@pytest.mark.parametrize("point", list(_kill_points()))
def test_a_kill_at_any_point_of_a_save_leaves_nothing_once_the_next_run_starts(run, point):
    """Found: a kill between the two renames of a checkpoint save left checkpoint.old behind after the rerun (and a
    kill inside an export its .tmp or .old). The next run puts back what is missing and removes the rest."""
    model, out = run
    _kill_points()[point](out)
    resumed = Trainer(config(model, out, steps=3))
    left = [str(p.relative_to(out)) for p in out.rglob("*") if p.name.endswith((".old", ".tmp", ".part"))]
    assert left == [] and resumed.step == 2 and (out / "checkpoint" / "state.json").exists()
    if point in ("between best's two renames", "best swapped, best.old not yet removed"):  # the complete one stays
        assert json.loads((out / "best" / "bsb_best.json").read_text())["step"] == 2
    if point == "a link named like a leftover":
        assert out.parent.is_dir() and any(out.parent.iterdir())  # the link went, not what it points to
