"""vLLM's own log lines go to the run folder, not under the progress bar; the rotary embedding's harmless "Failed to
load weights" warning is dropped where vLLM emits it (issue 38, item 5)."""

import json
import logging
import logging.config

import pytest

from bsb.engine.vllm_logging import RELOAD_LOGGER, WeightlessLayerFilter, route_vllm_logs


def _record(msg, *args, level=logging.WARNING):
    return logging.LogRecord(RELOAD_LOGGER, level, __file__, 1, msg, args, None)


def test_the_rotary_warning_is_dropped_and_other_layers_pass():
    f = WeightlessLayerFilter()
    assert not f.filter(_record("%s: Failed to load weights", "RotaryEmbedding"))
    assert not f.filter(_record("%s: Failed to load weights", "Llama3RotaryEmbedding"))
    assert f.filter(_record("%s: Failed to load weights", "QKVParallelLinear"))  # a real failure still shows
    assert f.filter(_record("%s: Delayed processing", "RotaryEmbedding"))


@pytest.fixture
def vllm_logger():
    pytest.importorskip("vllm", reason="vLLM is not installed")
    import vllm  # noqa: F401  (configures the 'vllm' logger with its console handler)

    logger = logging.getLogger("vllm")
    saved = (list(logger.handlers), logger.propagate)
    yield logger
    for h in list(logger.handlers):
        logger.removeHandler(h)
        if h not in saved[0]:
            h.close()
    for h in saved[0]:
        logger.addHandler(h)
    logger.propagate = saved[1]


def test_vllm_records_go_to_the_run_folder_not_the_console(vllm_logger, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    env = route_vllm_logs(tmp_path / "run" / "vllm.log")
    logging.getLogger("vllm.engine").info("engine started")
    logging.getLogger(RELOAD_LOGGER).warning("%s: Failed to load weights", "RotaryEmbedding")
    logging.getLogger(RELOAD_LOGGER).warning("%s: Failed to load weights", "QKVParallelLinear")
    out = capsys.readouterr()
    assert "engine started" not in out.out + out.err and "Failed" not in out.out + out.err
    # vLLM's console handler held the real stdout from import time (capsys cannot see it): no console handler is left
    consoles = [h for h in vllm_logger.handlers if type(h) is logging.StreamHandler]
    assert consoles == [] and vllm_logger.propagate is False
    text = (tmp_path / "run" / "vllm.log").read_text()
    assert "engine started" in text and "QKVParallelLinear: Failed" in text and "RotaryEmbedding" not in text
    config = json.loads((tmp_path / "run" / "vllm.log.json").read_text())  # what engine processes read at import
    assert env == {"VLLM_LOGGING_CONFIG_PATH": str(tmp_path / "run" / "vllm.log.json")}
    assert config["handlers"]["file"]["filename"] == str(tmp_path / "run" / "vllm.log")
    logging.config.dictConfig(config)  # a valid dictConfig (as vLLM applies it)


def test_a_second_run_gets_its_own_file_and_the_first_is_closed(vllm_logger, tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    route_vllm_logs(tmp_path / "a" / "vllm.log")
    route_vllm_logs(tmp_path / "b" / "vllm.log")
    files = [h for h in vllm_logger.handlers if isinstance(h, logging.FileHandler)]
    assert [h.baseFilename for h in files] == [str((tmp_path / "b" / "vllm.log").resolve())]
    logging.getLogger("vllm.x").warning("second run")
    assert "second run" in (tmp_path / "b" / "vllm.log").read_text()
    assert "second run" not in (tmp_path / "a" / "vllm.log").read_text()


def test_vllm_logging_level_keeps_them_on_the_console(vllm_logger, tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
    before = list(vllm_logger.handlers)
    assert route_vllm_logs(tmp_path / "vllm.log") == {}
    assert vllm_logger.handlers == before and not (tmp_path / "vllm.log").exists()


def test_what_the_engine_prints_outside_its_logger_goes_to_the_run_log(tmp_path, capfd, monkeypatch):
    """C++ warnings, library prints and progress bars write to the file descriptors, not a logger: inside
    engine_output they reach the run's log, and the console gets them back after it (an error included)."""
    import os
    import sys

    from bsb.engine.vllm_logging import engine_output

    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    log = tmp_path / "run" / "vllm.log"
    with engine_output(log):
        os.write(2, b"[W] Warning: NUMA binding\n")
        print("Triton is installed, but doesn't include CPU backend.")
        sys.stderr.write("Loading safetensors checkpoint shards: 100%\n")
    try:
        with engine_output(log):
            os.write(1, b"before the error\n")
            raise RuntimeError("engine failed")
    except RuntimeError:
        pass
    print("after")
    out, err = capfd.readouterr()
    assert out == "after\n" and err == ""
    text = log.read_text()
    for line in ("NUMA binding", "Triton is installed", "checkpoint shards", "before the error"):
        assert line in text
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")  # a user who asks for vLLM's lines sees them
    with engine_output(log):
        os.write(2, b"shown\n")
    assert capfd.readouterr().err == "shown\n"
