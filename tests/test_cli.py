"""`bsb demo` runs end to end on the embedded default and prints every selector's forks."""

import pytest

from bsb.cli import main
from bsb.engine.selectors import SELECTORS


def test_demo_prints_every_selector(capsys):
    assert main(["demo", "--chains", "2", "--chain-len", "40"]) == 0
    out = capsys.readouterr().out
    for name in SELECTORS:
        if name != "bsv":
            assert name[:8] in out
    assert "Rollout:" in out


def test_demo_rejects_bad_arguments():
    with pytest.raises(SystemExit):
        main(["demo", "--chains", "0"])
