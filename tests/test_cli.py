"""`bsb demo --quick` runs end to end (sampled chains, every selector, V*, the figure); `bsb train` rejects
configs that cannot run with one clear line."""

import pytest

from bsb.cli import main
from bsb.engine.selectors import SELECTORS


def test_demo_quick_prints_every_selector_and_writes_the_figure(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BSB_CACHE", str(tmp_path / "cache"))
    png = tmp_path / "demo.png"
    assert main(["demo", "--quick", "--out", str(png)]) == 0
    out = capsys.readouterr().out
    for name in SELECTORS:
        if name != "bsv":
            assert name[:8] in out
    assert "V* of chain" in out and "figure:" in out and "demo wall time" in out
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"


def test_demo_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--chains", "0"])
    with pytest.raises(SystemExit):
        main(["demo", "/some/model"])  # a model without a problem file
    assert "needs a problem file" in capsys.readouterr().err


@pytest.mark.parametrize("override, message", [("siblings=0", "siblings"), ("selector=nope", "unknown selector"),
                                               ("learning_rate=1", "unknown config field"), ("model=/nonexistent", "config.json")])
def test_train_rejects_a_config_that_cannot_run(override, message, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--set", override])
    assert message in capsys.readouterr().err
