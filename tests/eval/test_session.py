"""The offline commands' config inherits ProbeConfig: its probe flags are the session's, checked like train's."""

import argparse

import pytest

from bsb.commands import demo, evaluate, validate
from bsb.commands.flags import from_args
from bsb.engine.probe import ProbeConfig
from bsb.eval.session import OfflineConfig, Session
from bsb.tasks.registry import make_task


class Words:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


def _parse(module, argv):
    sub = argparse.ArgumentParser(prog="bsb").add_subparsers(dest="command")
    parser = module.add_parser(sub)
    return parser, parser.parse_args(argv)


@pytest.mark.parametrize("module,cls", [(demo, demo.DemoConfig), (validate, validate.ValidateConfig),
                                        (evaluate, evaluate.EvaluateConfig)])
def test_the_probe_options_are_flags_of_every_offline_command(module, cls):
    parser, args = _parse(module, ["--top-k", "5", "--lens-layers", "0", "-1", "--margin-window", "2", "30",
                                   "--lens-readout", "depth", "--read-len", "3"])
    cfg = from_args(cls, args, parser)
    assert isinstance(cfg, OfflineConfig) and isinstance(cfg, ProbeConfig)
    assert (cfg.top_k, cfg.lens_layers, cfg.margin_window, cfg.lens_readout, cfg.read_len) == (5, [0, -1], [2, 30], "depth", 3)


@pytest.mark.parametrize("argv,message", [(["--top-k", "0"], "top_k must be >= 1"),
                                          (["--range-cap", "2"], r"range_cap must be in \(0, 1\]"),
                                          (["--margin-window", "9", "3"], r"margin_window must be \[lo, hi\)"),
                                          (["--top-k", "10000000"], "top_k beyond any run")])
def test_a_bad_probe_flag_is_one_usage_line(argv, message, capsys):
    parser, args = _parse(validate, argv)
    with pytest.raises(SystemExit) as stop:
        from_args(validate.ValidateConfig, args, parser)
    assert stop.value.code == 2
    assert __import__("re").search(message, capsys.readouterr().err)


def test_the_session_reads_with_the_commands_own_probe_options():
    task = make_task("walk")
    session = Session(task, None, Words(), None, None, None, None, probe=validate.ValidateConfig(top_k=5, read_len=3))
    scfg = session.selector_config(seed=2)
    assert (scfg.top_k, scfg.read_len, scfg.seed) == (5, 3, 2)
    assert session.selector_config(ProbeConfig(top_k=7)).top_k == 7  # an explicit probe still wins
    assert evaluate.EvaluateConfig(margin_window=[2, 30]).window == (2, 30)


class _Pieces:
    """A tokenizer whose '\\n\\n' is one token (as Gemma's is) and whose 'Q:' is two."""

    eos_token_id = 1

    def encode(self, text, add_special_tokens=False):
        return {"\n\n": [108], "\n": [107], "Q:": [50, 51]}[text]


def test_stop_texts_join_the_eos_and_each_must_be_one_token():
    from bsb.eval.session import stop_tokens

    tok = _Pieces()
    assert stop_tokens(tok, ()) == 1  # no --stop: the EOS alone, as before
    assert stop_tokens(tok, ("\n\n",)) == (1, 108)
    assert stop_tokens(tok, ("\n\n", "\n", "\n\n")) == (1, 108, 107)  # once each
    with pytest.raises(ValueError, match=r"--stop 'Q:' is 2 tokens for this tokenizer \(\[50, 51\]\)"):
        stop_tokens(tok, ("Q:",))
    parser, args = _parse(validate, ["--stop", "\n\n", "\n"])
    assert from_args(validate.ValidateConfig, args, parser).stop == ("\n\n", "\n")
