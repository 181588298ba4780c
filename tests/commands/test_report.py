"""bsb report: a run's and a sweep's figure and table from metrics.jsonl alone (a run still writing its last row
included); the PNG opens and the table's numbers are the file's; bad input is one error line."""

import json
import math

import numpy as np
import pytest
from scipy.stats import t

from bsb.cli import main


def _rows(seed, steps=4, yields=(0.5, 0.25, 0.75, 0.5)):
    """A run's rows as the trainer writes them: validation at 0 and every other step, a flat step without forks (NaN)."""
    rng = np.random.default_rng(seed)
    rows = [{"step": 0, "val_accuracy": 0.25, "val_correct": [1, 0, 0, 0], "val_samples": 1}]
    for s in range(1, steps + 1):
        flat = s == 2 and seed == 0
        rows.append({
            "step": s, "rollout": "flat_warmup" if flat else "tree", "reward_mean": float(rng.uniform(-1, 1)),
            "accuracy": float(rng.uniform()), "forks": 0 if flat else 6,
            "fork_yield": math.nan if flat else yields[s - 1] + 0.1 * seed,
            "fork_yield_reward": math.nan if flat else 0.8, "fork_yield_low": math.nan if flat else 0.1 * s,
            "fork_yield_mid": math.nan if flat else 0.5, "fork_yield_high": math.nan if flat else 0.9,
            "fork_rel": [] if flat else [float(x) for x in rng.uniform(0, 1, 6)],
            "fork_rel_mean": math.nan, "adv_abs_prefix": 0.2, "adv_abs_leaf": 0.4, "refill_rate": 0.1, "fallback_rate": 0.0,
            "fork_positions": [3] * 6, "probe_frac": float(rng.uniform(0, 0.2)), "time_generate": 1.0 + s,
            "time_select": 0.2, "time_update": 0.5, "time_sync": 0.1, "time_rollout": 1.5 + s, "time_step": 2.2 + s,
        })
        fracs = rows[-1]["fork_rel"]
        rows[-1]["fork_rel_mean"] = sum(fracs) / len(fracs) if fracs else math.nan
        if s % 2 == 0:
            rows[-1].update(val_accuracy=0.25 + 0.25 * s / steps + 0.125 * seed, val_correct=[1, 1, 0, 0], val_samples=1)
    return rows


def _write(folder, rows, torn=False):
    folder.mkdir(parents=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (folder / "metrics.jsonl").write_text(text + ('{"step": 9, "rollout": "tr' if torn else ""))
    return folder


def _table(md):
    """The Markdown table's rows as {first cell: the other cells}."""
    lines = [x for x in md.splitlines() if x.startswith("| ") and not x.startswith("|---")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return header, {cells[0]: cells[1:] for cells in ([c.strip() for c in x.strip("|").split("|")] for x in lines[1:])}


def _png(path):
    from PIL import Image

    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        return im.format, im.size


def _mean_over_steps(rows, field):
    xs = [r[field] for r in rows if "rollout" in r and not math.isnan(r[field])]
    return sum(xs) / len(xs)


def test_a_run_still_writing_gets_a_figure_and_the_files_numbers(tmp_path, capsys, caplog):
    rows = _rows(0)
    run = _write(tmp_path / "probe_js-s0", rows, torn=True)
    assert main(["report", str(run)]) == 0
    assert "torn last row" in caplog.text
    fmt, (w, h) = _png(run / "report.png")
    assert fmt == "PNG" and w > 1000 and h > 600
    md = (run / "report.md").read_text()
    assert md in capsys.readouterr().out + "\n"  # the table is printed, too
    _, table = _table(md)
    steps = [r for r in rows if "rollout" in r]
    yields = [r["fork_yield"] for r in steps if not math.isnan(r["fork_yield"])]
    assert table["fork yield"] == ["3", f"{yields[0]:.3f}", f"{yields[-1]:.3f}", f"{_mean_over_steps(rows, 'fork_yield'):.3f}"]
    for field, label in [("fork_yield_low", "fork yield, low score tercile"), ("probe_frac", "probe share of the step"),
                         ("fork_rel_mean", "fork position / chain length"), ("time_step", "step, s"),
                         ("reward_mean", "reward (training leaves)")]:
        assert table[label][-1] == f"{_mean_over_steps(rows, field):.3f}", label
    vals = [r["val_accuracy"] for r in rows if "val_accuracy" in r]
    assert table["held-out accuracy"] == [str(len(vals)), f"{vals[0]:.3f}", f"{vals[-1]:.3f}", f"{vals[-1]:.3f}"]


def test_a_sweep_puts_its_arms_side_by_side_with_intervals(tmp_path):
    runs = {f"{arm}-s{seed}": _rows(seed, yields=(y, y, y, y)) for arm, y in (("probe_js", 0.6), ("midpoint", 0.3))
            for seed in (0, 1, 2)}
    for name, rows in runs.items():
        _write(tmp_path / "sweep" / name, rows)
    (tmp_path / "sweep" / "table.md").write_text("bsb sweep's own table")  # what else a sweep folder holds
    assert main(["report", str(tmp_path / "sweep"), "--out", str(tmp_path / "rep")]) == 0
    assert _png(tmp_path / "rep" / "report.png")[0] == "PNG"
    header, table = _table((tmp_path / "rep" / "report.md").read_text())
    assert set(table) == {"probe_js", "midpoint"} and header[:3] == ["arm", "runs", "held-out accuracy"]
    for arm in table:
        mine = [rows for name, rows in runs.items() if name.startswith(arm)]
        assert table[arm][0] == "3"
        for field, label in [("fork_yield", "fork yield"), ("fork_yield_high", "fork yield, high tercile"),
                             ("probe_frac", "probe share of the step")]:
            per_run = [_mean_over_steps(rows, field) for rows in mine]
            hw = t.ppf(0.975, 2) * np.std(per_run, ddof=1) / math.sqrt(3)
            assert table[arm][header.index(label) - 1] == f"{np.mean(per_run):.3f} ± {hw:.3f}", (arm, label)
        last = [[r["val_accuracy"] for r in rows if "val_accuracy" in r][-1] for rows in mine]
        assert table[arm][1].startswith(f"{np.mean(last):.3f} ± ")


@pytest.mark.parametrize("case", ["missing", "file", "empty folder", "damaged row", "no rows"])
def test_bad_input_is_one_error_line(tmp_path, capsys, case):
    path = tmp_path / "x"
    if case == "file":
        path.write_text("{}")
    elif case == "empty folder":
        path.mkdir()
    elif case == "damaged row":
        _write(path, _rows(0))
        lines = (path / "metrics.jsonl").read_text().splitlines()
        (path / "metrics.jsonl").write_text("\n".join(lines[:2] + ["{not json"] + lines[2:]) + "\n")
    elif case == "no rows":
        _write(path, [])
    with pytest.raises(SystemExit) as err:
        main(["report", str(path)])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("bsb report: error: ") and str(path) in lines[-1]
    assert not (path / "report.png").exists() if path.is_dir() else True


# Hostile round 3 (issue 47): a run folder is not trusted. Each case below wrote through a link, raised a traceback
# or accepted a bad value before.
@pytest.mark.parametrize("name", ["report.md", "report.png"])
@pytest.mark.parametrize("target", ["a file", "a missing file"])
def test_a_link_in_the_run_folder_is_replaced_never_written_through(tmp_path, name, target):
    run = _write(tmp_path / "run", _rows(0))
    outside = tmp_path / "outside" / "victim"
    outside.parent.mkdir()
    if target == "a file":
        outside.write_text("keep me")
    (run / name).symlink_to(outside)
    assert main(["report", str(run)]) == 0
    assert not (run / name).is_symlink() and (run / name).is_file()
    assert outside.read_text() == "keep me" if target == "a file" else not outside.exists()
    assert [p.name for p in run.iterdir() if p.name.endswith(".part")] == []  # no temp file left beside it


BIG = "1" + "0" * 400  # json.loads: a Python int too big for a float
HOSTILE_ROWS = [
    ("reward_mean", BIG, r"reward_mean must be a number in \[.*\], got an integer of about 401 digits"),
    ("step", BIG, r"step must be an integer in \[0, 1000000000\], got an integer of about 401 digits"),
    ("step", "true", r"not a metrics row \(a JSON object with an integer step\)"),  # refused as the rows are read
    ("step", "-1", r"step must be an integer in \[0, 1000000000\], got -1"),
    ("time_step", "null", r"time_step must be a number in \[0, .*\], got None"),
    ("time_step", "[1]", r"time_step must be a number in \[0, .*\], got \[1\]"),
    ("time_step", '{"a": 1}', r"time_step must be a number in \[0, .*\], got \{'a': 1\}"),
    ("time_step", "-1.0", r"time_step must be a number in \[0, .*\], got -1.0"),
    ("fork_yield", "1e400", r"fork_yield must be a number in \[0, 1\], got inf"),
    ("fork_yield", "1.5", r"fork_yield must be a number in \[0, 1\], got 1.5"),
    ("probe_frac", '"0.1"', r"probe_frac must be a number in \[0, 1\], got '0.1'"),
    ("fork_rel", "5", r"fork_rel must be a list of fractions in \[0, 1\], got 5"),
    ("fork_rel", '"123"', r"fork_rel must be a list of fractions in \[0, 1\], got '123'"),
    ("fork_rel", "[null]", r"fork_rel\[0\] must be a number in \[0, 1\], got None"),
    ("fork_rel", "[0.5, 2.0]", r"fork_rel\[1\] must be a number in \[0, 1\], got 2.0"),
    ("fork_rel", "[NaN]", r"fork_rel\[0\] must be a number in \[0, 1\], got nan"),
]


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
@pytest.mark.parametrize("field,value,message", HOSTILE_ROWS, ids=[f"{f}={v[:12]}" for f, v, _ in HOSTILE_ROWS])
def test_a_bad_number_in_metrics_is_one_line_naming_file_line_and_field(tmp_path, capsys, field, value, message, sweep):
    import re

    run = _write(tmp_path / "sweep" / "a-s0" if sweep else tmp_path / "run", _rows(0))
    lines = (run / "metrics.jsonl").read_text().splitlines()
    row = json.loads(lines[2])  # line 3: a training step
    lines[2] = json.dumps({k: v for k, v in row.items() if k != field})[:-1] + f', "{field}": {value}}}'
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if sweep:
        _write(tmp_path / "sweep" / "a-s1", _rows(1))
    with pytest.raises(SystemExit) as err:
        main(["report", str(run.parent if sweep else run)])
    out = capsys.readouterr().err
    assert err.value.code == 2 and "Traceback" not in out
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"bsb report: error: {run / 'metrics.jsonl'}, line 3: "), last
    assert re.search(message, last), last
    assert not (run / "report.png").exists() and not (run / "report.md").exists()


def test_an_integer_past_pythons_digit_limit_names_the_file(tmp_path, capsys):
    run = _write(tmp_path / "run", _rows(0))
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 9, "rollout": "tree", "reward_mean": ' + "9" * 5000 + "}\n")
    with pytest.raises(SystemExit) as err:
        main(["report", str(run)])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.value.code == 2 and last.startswith(f"bsb report: error: {run / 'metrics.jsonl'}"), last
    assert "digits" in last
