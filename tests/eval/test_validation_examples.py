"""The example scripts that hold the real-model validations' commands (``examples/qwen_validation.py``,
``examples/real_model.py``): a remedy reruns the recorded run's chains and completions in its own folder, seeded with
what the recorded run sampled and the settings it sampled them with, and refuses without a recorded run."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bsb_example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_qwen_remedy_copies_the_recorded_samples_and_their_settings(tmp_path, monkeypatch):
    qwen = _load("qwen_validation")
    monkeypatch.setattr(qwen, "ROOT", tmp_path)
    with pytest.raises(SystemExit, match="no finished math run"):
        qwen.remedy("math", "L4")
    src = tmp_path / "runs" / "qwen" / "math"
    src.mkdir(parents=True)
    files = ("screen.jsonl", "chains.jsonl", "completions.jsonl", "curves.jsonl", "sampling.json")
    for f in files:
        (src / f).write_text(json.dumps({"file": f}) + "\n")
    command = qwen.remedy("math", "L4")
    out = tmp_path / command[command.index("--out") + 1]
    assert out.name == "math_L4" and command[-6:-4] == ["--read-len", "4"] and "--bsv-cross-fit" not in command
    # a longer read changes Probe-JS's read alone: Lens-Shift (a whole program through every layer) is not read again
    assert command[-4:] == ["--selectors", "probe_js", "entropy", "midpoint"]
    assert qwen.CHANGES.keys() == qwen.REMEDIES.keys()  # every remedy says which belief read it changes
    read = {n: qwen.remedy("math", n) for n in ("upper", "suffix")}
    assert read["upper"][-3:] == ["lens_shift", "entropy", "midpoint"] and "probe_js" not in read["upper"]
    assert read["suffix"][-4:] == ["probe_js", "lens_shift", "entropy", "midpoint"]  # a suffix shapes both reads
    assert "--engine-dtype" in command and command[command.index("--engine-dtype") + 1] == "bfloat16"
    for f in ("screen.jsonl", "chains.jsonl", "completions.jsonl", "sampling.json"):
        assert (out / f).read_text() == (src / f).read_text(), f
    assert not (out / "curves.jsonl").exists()  # the remedy's own reads write it
    # B = 2 is the metric's setting: every selector (BSV cross-fitted as in the run), every read kept, no B/m
    (src / "reads.jsonl").write_text('{"key": "k"}\n')
    b2 = qwen.remedy("math", "B2")
    assert b2[-2:] == ["--b", "2"] and "--b-ratio" not in b2 and "--selectors" not in b2 and "--bsv-cross-fit" in b2
    assert (tmp_path / b2[b2.index("--out") + 1] / "reads.jsonl").read_text() == '{"key": "k"}\n'
    assert not (out / "reads.jsonl").exists()  # a read remedy reads its own
    with pytest.raises(SystemExit, match="no remedy"):
        qwen.remedy("math", "L7")
    with pytest.raises(SystemExit, match="'L64' is for code only, not math"):
        qwen.remedy("math", "L64")  # a domain's own remedy


def test_a_qwen_record_keeps_whole_lines_and_seeds_a_missing_run(tmp_path, monkeypatch, capsys):
    """A run spans machines through its committed record: ``record`` copies what was sampled so far (a line being
    appended is left out), ``command`` seeds a missing run folder from it and leaves an existing one alone, and the
    results join the record once the run has finished."""
    qwen = _load("qwen_validation")
    monkeypatch.setattr(qwen, "ROOT", tmp_path)
    with pytest.raises(SystemExit, match="no code run"):
        qwen.record("code")
    run = tmp_path / "runs" / "qwen" / "code"
    run.mkdir(parents=True)
    (run / "sampling.json").write_text('{"seed": 0}')
    (run / "screen.jsonl").write_text('{"id": "HumanEval/0"}\n')
    (run / "chains.jsonl").write_text('{"id": "a"}\n')
    one, two = (json.dumps({"chain": "a", "cut": 3, "draw": j}) + "\n" for j in (0, 1))
    (run / "completions.jsonl").write_text(one + two + '{"chain": "a", "cu')  # the run is writing its third
    (run / "reads.jsonl").write_text('{"key": "k1"}\n{"key": "k')  # and its reads, kept for a resume as well
    (run / "bars.png").write_bytes(b"an earlier figure")
    assert "completions.jsonl 2, reads.jsonl 1; in progress" in qwen.record("code")
    kept = tmp_path / "examples" / "results" / "qwen" / "code"
    assert (kept / "completions.jsonl").read_text() == one + two
    assert (kept / "sampling.json").read_text() == '{"seed": 0}' and not (kept / "bars.png").exists()
    qwen.main(["command", "code"])  # the run folder exists: nothing seeded
    assert "seeded" not in capsys.readouterr().err
    for f in run.iterdir():
        f.unlink()
    run.rmdir()
    qwen.main(["command", "code"])  # a fresh machine: the command goes on from the record
    out = capsys.readouterr()
    assert "seeded runs/qwen/code" in out.err and "(2 completions)" in out.err
    assert out.out.startswith("bsb validate ") and out.out.rstrip().endswith("--out runs/qwen/code")
    assert (run / "completions.jsonl").read_text() == (kept / "completions.jsonl").read_text()
    assert (run / "reads.jsonl").read_text() == '{"key": "k1"}\n'
    assert (run / "chains.jsonl").exists() and not (run / "bars.png").exists()
    (run / "curves.jsonl").write_text('{"id": "a"}\n')
    (run / "table.md").write_text("| selector |")
    (run / "bars.png").write_bytes(b"png")
    (tmp_path / "runs" / "qwen" / "code_L4").mkdir()
    (tmp_path / "runs" / "qwen" / "code_L4" / "table.md").write_text("| L4 |")  # a finished remedy
    (tmp_path / "runs" / "qwen" / "code_K5").mkdir()  # and one still reading
    assert "; finished; remedies L4)" in qwen.record("code")
    assert (kept / "curves.jsonl").exists() and (kept / "table.md").exists() and (kept / "bars.png").exists()
    assert (kept / "remedy_L4_table.md").read_text() == "| L4 |" and not (kept / "remedy_K5_table.md").exists()
    for f in run.iterdir():  # a remedy reruns from the finished record when the run folder is gone
        f.unlink()
    command = qwen.remedy("code", "K5")
    out_dir = tmp_path / command[command.index("--out") + 1]
    assert (out_dir / "completions.jsonl").read_text() == (kept / "completions.jsonl").read_text()


def test_a_qwen_record_is_never_overwritten_by_a_run_that_does_not_extend_it(tmp_path, monkeypatch, capsys):
    """A record holds what a run sampled: another run (other settings, or fewer completions: a stale folder that
    resumed beside the record) is refused and the record is left as it was; an unfinished run's record sheds an
    earlier finished run's results; a folder that holds anything sampled is never seeded over."""
    qwen = _load("qwen_validation")
    monkeypatch.setattr(qwen, "ROOT", tmp_path)
    run, kept = tmp_path / "runs" / "qwen" / "code", tmp_path / "examples" / "results" / "qwen" / "code"
    run.mkdir(parents=True)
    rows = [json.dumps({"chain": "a", "cut": 3, "draw": j}) + "\n" for j in range(3)]
    (run / "sampling.json").write_text('{"seed": 0}')
    (run / "completions.jsonl").write_text("".join(rows))
    (run / "curves.jsonl").write_text("{}\n")
    (run / "bars.png").write_bytes(b"png")
    assert "finished" in qwen.record("code")
    before = {f.name: f.read_bytes() for f in kept.iterdir()}
    (run / "completions.jsonl").write_text("".join(rows[:2]))  # a run that lacks a recorded completion
    with pytest.raises(SystemExit, match="holds 1 completions that .* lacks"):
        qwen.record("code")
    (run / "completions.jsonl").write_text("".join(rows))
    (run / "sampling.json").write_text('{"seed": 1}')
    with pytest.raises(SystemExit, match="sampled with other settings"):
        qwen.record("code")
    assert {f.name: f.read_bytes() for f in kept.iterdir()} == before  # refused: the record as it was
    (run / "sampling.json").write_text('{"seed": 0, "offset_draws": 3}')  # the record's settings and a key bsb adds
    (run / "curves.jsonl").unlink()  # the same run, its results not written yet (a rerun of its end)
    assert "in progress" in qwen.record("code")
    assert json.loads((kept / "sampling.json").read_text()) == {"seed": 0, "offset_draws": 3}
    assert not (kept / "curves.jsonl").exists() and not (kept / "bars.png").exists()
    assert not list(kept.glob("*.part"))
    for f in run.iterdir():
        f.unlink()
    (run / "chains.jsonl").write_text('{"id": "a"}\n')  # sampled before sampling.json existed: not seeded over
    qwen.main(["command", "code"])
    assert "seeded" not in capsys.readouterr().err and (run / "chains.jsonl").read_text() == '{"id": "a"}\n'


def test_a_small_model_remedy_copies_sampling_json_only_where_the_run_kept_one(tmp_path, monkeypatch):
    real = _load("real_model")
    monkeypatch.setattr(real, "ROOT", tmp_path)
    spec = real.SPECS["smollm2"]
    src = tmp_path / spec.validate()[-1]
    src.mkdir(parents=True)
    for f in ("chains.jsonl", "completions.jsonl"):  # a run recorded before sampling.json existed
        (src / f).write_text("{}\n")
    command = real.remedy(spec, "L4")
    out = tmp_path / command[command.index("--out") + 1]
    assert (out / "chains.jsonl").exists() and not (out / "sampling.json").exists()
