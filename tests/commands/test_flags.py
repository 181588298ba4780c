"""The offline commands' flags are generated from their config dataclasses: every field with help is a flag with the
field's default, typed by its annotation; a value the config rejects is one usage line."""

import argparse
import dataclasses

import pytest

from bsb.commands import COMMANDS, cost, data, demo, evaluate, sweep, validate
from bsb.commands.flags import add_flags, from_args
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


def test_the_cli_has_one_subcommand_per_module():
    from bsb.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert set(COMMANDS) == {"demo", "train", "validate", "evaluate", "sweep", "cost", "data"}


def test_a_positional_without_default_is_required(capsys):
    parser = _parser(data)
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert "file" in capsys.readouterr().err
    add_flags(argparse.ArgumentParser(), data.DataConfig)  # twice on fresh parsers is fine
