"""Every command, every bad input: one usage line (``bsb <command>: error: ...``) and exit 2, within seconds; never a
traceback, a hang, or a bad value accepted (issue 24 item 3's cases, each failing before)."""

import time

import pytest

from bsb.cli import main

CASES = [
    (["train", "--config", "{tmp}"], "Is a directory"),
    (["train", "--config", "{tmp}/missing.yaml"], "No such file"),
    (["train", "--config", "{tmp}/bad.yaml"], "mapping values are not allowed|could not find|expected"),
    (["train", "--set", "steps="], "steps needs a value"),
    (["train", "--set", "steps=true"], "steps expects int, got True"),
    (["train", "--set", "temperature=.inf"], "temperature must be a finite number"),
    (["train", "--set", "overlong_factor=.nan"], "overlong_factor must be a finite number"),
    (["train", "--set", "clip_high=.inf"], "clip_high must be a finite number"),
    (["train", "--set", "chains=100000000"], "chains = 100000000 \\(at most 4096\\)"),
    (["train", "--set", "val_problems=1000000000000"], "val_problems = 1000000000000"),
    (["train", "--set", "top_k=1000000000"], "top_k = 1000000000"),
    (["train", "--set", "lens_eps=-1"], "lens_eps must be in \\(0, 1\\)"),
    (["train", "--set", "gap_threshold=.nan"], "gap_threshold must be a finite number"),
    (["train", "--set", "lens_layers=[]"], "lens_layers must be a non-empty list"),
    (["train", "--set", "task_options.ops="], "cannot take the options ops=None"),
    (["train", "--set", "task=subprocess:Popen", "task_options={args: [touch, {tmp}/ran]}"], "does not satisfy the Task protocol"),
    # against the model (the session's tiny checkpoint, so no embedded model is trained for these)
    (["train", "--set", "model={ckpt}", "lens_layers=[99]", "out_dir={tmp}/a"], "lens_layers \\[99\\] are not layers"),
    (["train", "--set", "model={ckpt}", "top_k=100000", "out_dir={tmp}/b"], "top_k = 100000 exceeds the model's vocabulary"),
    (["validate", "--temperature", "nan"], "temperature"),
    (["evaluate", "--temperature", "inf"], "temperature must be a finite number"),
    (["evaluate", "--n-problems", "1000000000000"], "n_problems beyond any run"),
    (["demo", "--temperature", "nan"], "temperature"),
    (["data", "{tmp}"], "Is a directory|unknown problem file type"),
    (["data", "{tmp}/missing.jsonl"], "missing.jsonl"),
    (["cost", "--memory", "{tmp}/missing.yaml"], "no config file or folder"),
    (["cost", "--gpu-gb", "nan", "--memory", "configs/paper"], "gpu_gb must be a finite number"),
    (["validate", "--b-ratio", "1.5"], r"b_ratio must be in \(0, 1\]"),
    (["export"], "name the run folder to export from"),
    (["export", "{tmp}/no-run"], "no run folder at"),
    (["export", "{tmp}", "--best"], r"kept no best weights \(train with keep_best: true\)"),
    (["export", "{tmp}", "--best", "--step", "3"], "--best and --step choose different weights"),
    # the second hostile round (issue 37): each accepted, hung or raised a traceback before
    (["validate", "--bsv", "{tmp}/random.bsv"], "random.bsv: not a BSV direction file"),
    (["validate", "--bsv", "{tmp}/bad.yaml"], "bad.yaml: not a BSV direction file"),
    (["cost", "--metrics", "{tmp}/string_values.jsonl"], r"step 1: probe_frac must be a number >= 0, got 'x'"),
    (["cost", "--metrics", "{tmp}/missing_values.jsonl"], r"step 1: tokens_generated must be a number >= 0, got None"),
    (["cost", "--metrics", "{tmp}/random.bsv"], "random.bsv|codec|not a metrics row"),
    (["cost", "--mean-chain-len", "1e308"], r"mean_chain_len must be in \(0, 10000000\], got 1e\+308"),
    (["validate", "--read-len", "0"], "read_len must be >= 1"),
    (["validate", "--judge-timeout-s", "-1"], r"judge_timeout_s must be in \(0, 3600\], got -1.0"),
    (["demo", "--out", "{tmp}"], "is a folder: name a file"),
    (["train", "--set", "resume_changes=[bogus_field]"], "resume_changes names no field: 'bogus_field'"),
    (["train", "--set", "task=code", "task_options={timeout_s: -1}"], r"task option timeout_s must be a number in"),
]


@pytest.mark.parametrize("argv,message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_bad_input_is_one_usage_line_and_exit_2(argv, message, tmp_path, capsys, monkeypatch, checkpoint):
    import re

    monkeypatch.chdir(pytest.importorskip("pathlib").Path(__file__).resolve().parents[2])
    (tmp_path / "bad.yaml").write_text("steps: 3\n  chains: [1,\n")
    (tmp_path / "random.bsv").write_bytes(bytes(range(256)) * 2)
    (tmp_path / "string_values.jsonl").write_text(
        '{"step": 1, "probe_tokens": 5, "tokens_generated": 9, "tokens_trained": 9, "probe_frac": "x"}\n'
    )
    (tmp_path / "missing_values.jsonl").write_text('{"step": 1, "probe_tokens": 0, "time_step": 0}\n')
    start = time.monotonic()
    with pytest.raises(SystemExit) as done:
        main([a.replace("{tmp}", str(tmp_path)).replace("{ckpt}", checkpoint) for a in argv])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert time.monotonic() - start < 15
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"bsb {argv[0]}: error: ") and re.search(message, last), last
    assert not (tmp_path / "ran").exists()  # a module:Class that is not a Task is never constructed


# The offline commands inherit ProbeConfig and check top_k and lens_layers against their model as train does (the
# session's tiny checkpoint: vocabulary 256, 2 layers), once it is loaded and before anything is sampled or written.
AGAINST_MODEL = [(["--top-k", "100000"], "top_k = 100000 exceeds the model's vocabulary of 256"),
                 (["--lens-layers", "0", "99"], "lens_layers \\[99\\] are not layers of this 2-layer model")]


@pytest.mark.parametrize("command", ["validate", "evaluate", "demo"])
@pytest.mark.parametrize("flags,message", AGAINST_MODEL, ids=["top_k", "lens_layers"])
def test_offline_probe_options_are_checked_against_the_model(command, flags, message, tmp_path, capsys, checkpoint):
    import re

    problems = tmp_path / "problems.jsonl"
    problems.write_text('{"prompt": "t5 t6", "answer": "t7"}\n')
    with pytest.raises(SystemExit) as done:
        main([command, checkpoint, str(problems), *flags, "--out", str(tmp_path / "out"), "--device", "cpu"])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert done.value.code == 2 and "Traceback" not in err
    assert last.startswith(f"bsb {command}: error: ") and re.search(message, last), last
    assert not (tmp_path / "out").exists()  # nothing written


# Hostile round 3 (issue 47): bsb export and a run folder it does not trust. Before, a link in final/ copied what it
# points to (outside the run) into the export, two link loops filled the disk, a FIFO hung the copy, and
# bsb_best.json's step 1e400 was a traceback while its NaN accuracy was accepted.
def _link_out(run, outside, name):
    (run / "final" / name).symlink_to(outside / "secret.txt")


def _loops(run, outside):
    (run / "final" / "a").symlink_to(run / "final")
    (run / "final" / "b").symlink_to(".")


def _final_is_a_link(run, outside):
    import shutil

    shutil.move(run / "final", outside / "model")
    (run / "final").symlink_to(outside / "model")


def _best_note(text):
    def make(run, outside):
        import shutil

        shutil.copytree(run / "final", run / "best")
        (run / "best" / "bsb_best.json").write_text(text)

    return make


EXPORT_CASES = [
    (
        "link to a file",
        [],
        lambda run, out: _link_out(run, out, "extra.txt"),
        r"final: holds links or special "
        r"files, not copied: extra.txt",
    ),
    ("link to a folder", [], lambda run, out: (run / "final" / "more").symlink_to(out), r"holds links .*: more"),
    (
        "link in a subfolder",
        [],
        lambda run, out: (run / "final" / "sub").mkdir() or _link_out(run, out, "sub/x"),
        r"holds links .*: sub/x",
    ),
    ("two link loops", [], _loops, r"final: holds links or special files, not copied: a, b"),
    ("a fifo", [], lambda run, out: __import__("os").mkfifo(run / "final" / "pipe"), r"not copied: pipe"),
    ("final is a link", [], _final_is_a_link, r"final: a link, not copied \(only what is inside .*run is\)"),
    (
        "best step 1e400",
        ["--best"],
        _best_note('{"step": 1e400, "val_accuracy": 0.5}'),
        r"bsb_best.json: step must be an integer in \[0, 1000000000\], got inf",
    ),
    (
        "best step 400 digits",
        ["--best"],
        _best_note('{"step": 1' + "0" * 400 + ', "val_accuracy": 0.5}'),
        r"bsb_best.json: step must be an integer in .*, got an integer of about 401 digits",
    ),
    ("best step true", ["--best"], _best_note('{"step": true, "val_accuracy": 0.5}'), r"step must be .*, got True"),
    ("best step string", ["--best"], _best_note('{"step": "3", "val_accuracy": 0.5}'), r"step must be .*, got '3'"),
    (
        "best accuracy NaN",
        ["--best"],
        _best_note('{"step": 3, "val_accuracy": NaN}'),
        r"bsb_best.json: val_accuracy must be a number in \[0, 1\], got nan",
    ),
    ("best accuracy 1.5", ["--best"], _best_note('{"step": 3, "val_accuracy": 1.5}'), r"val_accuracy .*got 1.5"),
]


@pytest.mark.parametrize("flags,make,message", [c[1:] for c in EXPORT_CASES], ids=[c[0] for c in EXPORT_CASES])
def test_export_copies_only_the_runs_own_regular_files(flags, make, message, tmp_path, capsys, checkpoint):
    import re
    import shutil

    run, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("root:secret")
    shutil.copytree(checkpoint, run / "final")
    make(run, outside)
    start = time.monotonic()
    with pytest.raises(SystemExit) as done:
        main(["export", str(run), *flags])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "Traceback" not in err and time.monotonic() - start < 15
    last = err.strip().splitlines()[-1]
    assert last.startswith("bsb export: error: ") and re.search(message, last), last
    assert not [p.name for p in run.iterdir() if p.name.startswith("export-")]  # nothing exported, nothing left
    assert sorted(p.name for p in outside.iterdir()) in (["secret.txt"], ["model", "secret.txt"])


def test_export_of_a_clean_run_still_copies_every_regular_file(tmp_path, checkpoint, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(checkpoint, run / "final")
    (run / "final" / "sub").mkdir()
    (run / "final" / "sub" / "notes.txt").write_text("a regular file in a subfolder is copied")
    assert main(["export", str(run)]) == 0
    out = run / "export-final"
    assert (out / "sub" / "notes.txt").read_text().startswith("a regular file")
    assert (out / "model.safetensors").read_bytes() == (run / "final" / "model.safetensors").read_bytes()
    assert "exported final to" in capsys.readouterr().out
