"""The offline commands' flags are generated from their config dataclasses: every field with help is a flag with the
field's default, typed by its annotation; a value the config rejects is one usage line."""

import argparse
import dataclasses

import pytest

from bsb.commands import COMMANDS, cost, data, demo, evaluate, sweep, validate
from bsb.commands.flags import from_args
from bsb.eval.session import JUDGE

CONFIGS = [(demo, demo.DemoConfig, ()), (validate, validate.ValidateConfig, ()), (evaluate, evaluate.EvaluateConfig, JUDGE),
           (cost, cost.CostConfig, ()), (data, data.DataConfig, ()), (sweep, sweep.SweepConfig, ())]


def _parser(module):
    sub = argparse.ArgumentParser(prog="bsb").add_subparsers(dest="command")
    return module.add_parser(sub)


@pytest.mark.parametrize("module,cls,skipped", CONFIGS, ids=lambda x: getattr(x, "__name__", ""))
def test_every_config_field_is_a_flag_with_its_default_and_help(module, cls, skipped, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    parser = _parser(module)
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    text = capsys.readouterr().out
    dests = {a.dest: a for a in parser._actions}
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata or not f.metadata.get("cli", True):
            continue
        if f.name in skipped:
            assert f.name not in dests
            continue
        assert f.name in dests, f.name
        assert f.metadata["help"][:30] in " ".join(text.split()), f.name
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if dests[f.name].metavar == "NAME=VALUE":  # a mapping: pairs on the command line, None when none is given
            assert dests[f.name].default == [] and default in (None, {}), f.name
        else:
            assert dests[f.name].default == default, f.name


def test_parsed_flags_build_the_config_with_typed_values():
    parser = _parser(validate)
    args = parser.parse_args(["some/model", "--n-mc", "3", "--temperature", "0.5", "--selectors", "probe_js", "midpoint",
                              "--task-option", "ops=[2, 3]", "--no-task-bsv", "--out", "o"])
    cfg = from_args(validate.ValidateConfig, args, parser)
    assert (cfg.model, cfg.n_mc, cfg.temperature, cfg.selectors) == ("some/model", 3, 0.5, ("probe_js", "midpoint"))
    assert cfg.task_options == {"ops": [2, 3]} and cfg.task_bsv is False and cfg.out_dir == "o" and cfg.b == 10


@pytest.mark.parametrize("argv,message", [(["--n-mc", "0"], "must be >= 1"), (["--n-mc", "x"], "invalid int value"),
                                          (["--task-option", "ops"], "is not field=value"),
                                          (["--selectors", "first_gap"], "token positions")])
def test_bad_values_are_one_usage_line(argv, message, capsys):
    parser = _parser(validate)
    with pytest.raises(SystemExit) as stop:
        from_args(validate.ValidateConfig, parser.parse_args(argv), parser)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_the_cli_has_one_subcommand_per_module(capsys):
    import importlib

    from bsb.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert set(COMMANDS) == {"demo", "train", "validate", "evaluate", "sweep", "report", "cost", "data", "export"}
    for name in COMMANDS:  # listed with the help line of its own module
        assert name in text and importlib.import_module(f"bsb.commands.{name}").HELP[:30] in " ".join(text.split())


def test_a_positional_without_default_is_required(capsys):
    parser = _parser(sweep)  # nargs="+": one config at least
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert "configs" in capsys.readouterr().err


def test_bsb_data_takes_a_file_or_a_dataset_not_both_or_neither(capsys):
    parser = _parser(data)
    for argv in ([], ["f.jsonl", "--dataset", "gsm_symbolic"]):
        with pytest.raises(SystemExit):
            from_args(data.DataConfig, parser.parse_args(argv), parser)
        assert "give a problem file or --dataset NAME" in capsys.readouterr().err


def test_bsb_data_writes_a_held_out_file_only_from_a_dataset(capsys, tmp_path):
    from bsb.cli import main

    parser = _parser(data)
    with pytest.raises(SystemExit):
        from_args(data.DataConfig, parser.parse_args(["f.jsonl", "--write", str(tmp_path / "h.jsonl")]), parser)
    assert "--write writes a reasoning-gym dataset's held-out problems: give --dataset NAME" in capsys.readouterr().err
    pytest.importorskip("reasoning_gym", reason="reasoning-gym is not installed")
    out = tmp_path / "h.jsonl"
    assert main(["data", "--dataset", "gsm_symbolic", "--rows", "0", "--write", str(out), "--count", "3"]) == 0
    assert len(out.read_text().splitlines()) == 3 and f"task_options.val_file={out}" in capsys.readouterr().out


# The flags the hand-written command line had before they were generated (name: default), kept as they were.
GOLDEN = {
    demo: {"--chains": 4, "--max-response": 256, "--n-mc": 8, "--temperature": 1.0, "--seed": 0, "--out": "bsb_demo.png",
           "--quick": False, "--judge-url": None, "--judge-model": None, "--judge-endpoint": "chat",
           "--judge-key-env": "BSB_JUDGE_API_KEY", "--judge-template": None, "--device": "auto", "--dtype": "auto",
           "--prompt-format": "plain", "--task": None, "--task-option": []},
    validate: {"--n-problems": 24, "--m": 128, "--n-mc": 16, "--b": None, "--temperature": 0.7, "--max-response": 256,
               "--selectors": validate.DEFAULT_SELECTORS, "--bsv": None, "--read-len": None, "--backend": "auto", "--seed": 0,
               "--out": "runs/validate", "--judge-url": None, "--device": "auto", "--task": None, "--task-option": []},
    evaluate: {"--n-problems": 64, "--k": 3, "--temperature": 0.6, "--max-response": 256, "--seed": 0, "--out": "runs/evaluate",
               "--budget": "exact", "--device": "auto", "--dtype": "auto", "--prompt-format": "plain", "--task": None},
    cost: {"--metrics": None, "--mean-chain-len": None, "--train-tokens": 0.0, "--prompts": 32, "--chains": 4, "--siblings": 2,
           "--candidates": 16, "--suffix-len": 9, "--read-len": 1},
    data: {"--format": None, "--rows": 3, "--model": None, "--prompt-format": "plain", "--choice-seed": 0},
    sweep: {"--seeds": (0, 1, 2), "--out": "runs/sweep", "--reference": None, "--set": (), "--summarize-only": False},
}


@pytest.mark.parametrize("module", list(GOLDEN), ids=lambda m: m.__name__)
def test_the_flags_keep_their_names_and_defaults(module):
    flags = {o: a for a in _parser(module)._actions for o in a.option_strings}
    for flag, default in GOLDEN[module].items():
        assert flag in flags, flag
        got = flags[flag].default
        assert (tuple(got) if isinstance(got, list) and isinstance(default, tuple) else got) == default, flag
