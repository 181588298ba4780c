"""Where vLLM's own log lines go while bsb trains: a file in the run folder, not the console under the progress bar.

vLLM logs its start-up, every scheduler decision it finds worth an INFO line, and, at every weight sync, one WARNING per
layer without weights in the checkpoint ("RotaryEmbedding: Failed to load weights": the rotary embedding's cos / sin
cache is computed, not loaded, so there is nothing to load and nothing failed). In a terminal they break the progress
bar into pages of lines a user reads as trouble.

* :func:`route_vllm_logs`: vLLM's records go to ``log_file`` (``out_dir/vllm.log`` for ``bsb train``), in this process
  and in the engine processes it starts, unless ``VLLM_LOGGING_LEVEL`` is set: a user who sets it wants to see them.
* :func:`engine_output`: while vLLM is imported and its engine starts, what it writes to the process's stdout and
  stderr outside its logger (the CPU build's Triton notice, deprecation warnings, the C++ NUMA-binding warning, the
  checkpoint-loading bar) goes to the same file, unless ``VLLM_LOGGING_LEVEL`` is set.
* :class:`WeightlessLayerFilter`: the rotary warning dropped where it is emitted, whatever the destination.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path

RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"  # emits "<layer>: Failed to load weights"


class WeightlessLayerFilter(logging.Filter):
    """Drops vLLM's "<layer>: Failed to load weights" for rotary embeddings (no weights to load: their tables are
    computed); the same warning for any other layer still passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).endswith("Failed to load weights") or not record.args:
            return True
        return not str(record.args[0]).endswith("RotaryEmbedding")


class RunLogHandler(logging.FileHandler):
    """The run folder's ``vllm.log`` (one at a time: routing to another run closes the previous one)."""


def quiet_reload_warnings() -> None:
    """Install :class:`WeightlessLayerFilter` on vLLM's reload logger (once)."""
    logger = logging.getLogger(RELOAD_LOGGER)
    if not any(isinstance(f, WeightlessLayerFilter) for f in logger.filters):
        logger.addFilter(WeightlessLayerFilter())


def route_vllm_logs(log_file: str | Path | None) -> dict[str, str]:
    """Send the ``vllm`` logger's records to ``log_file`` (appended) instead of the console; call after ``import vllm``
    (which configures that logger). Returns the environment to start the engine in: it points the engine processes
    vLLM spawns at the same file (``VLLM_LOGGING_CONFIG_PATH``, read when a process imports vLLM). Nothing changes
    (and ``{}`` is returned) when ``log_file`` is None or ``VLLM_LOGGING_LEVEL`` is set."""
    quiet_reload_warnings()
    if log_file is None or "VLLM_LOGGING_LEVEL" in os.environ:
        return {}
    path = Path(log_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("vllm")
    for handler in list(logger.handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            logger.removeHandler(handler)
    for handler in [h for h in logger.handlers if isinstance(h, RunLogHandler)]:
        if Path(handler.baseFilename) == path.resolve():
            break
        logger.removeHandler(handler)  # an earlier run's file in this process (one open file at a time)
        handler.close()
    else:
        file = RunLogHandler(path)
        file.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [%(name)s] %(message)s"))
        logger.addHandler(file)
    logger.propagate = False  # not to the root logger's console either
    if logger.level == logging.NOTSET:  # vLLM configures its logger lazily; INFO is its default level
        logger.setLevel(logging.INFO)
    config = path.with_name(path.name + ".json")
    config.write_text(json.dumps(_file_config(path)))
    return {"VLLM_LOGGING_CONFIG_PATH": str(config)}


def _file_config(path: Path) -> dict:
    """A ``logging.config.dictConfig`` for an engine process: the ``vllm`` logger to ``path`` only."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"bsb": {"format": "%(levelname)s %(asctime)s [%(name)s] %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(path), "formatter": "bsb"}},
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }


@contextlib.contextmanager
def engine_output(log_file: str | Path | None):
    """File descriptors 1 and 2 and ``sys.stdout`` / ``sys.stderr`` appended to ``log_file`` inside the block (C++ and
    library prints included), restored after it, on an error too; nothing changes when ``log_file`` is None or
    ``VLLM_LOGGING_LEVEL`` is set."""
    if log_file is None or "VLLM_LOGGING_LEVEL" in os.environ:
        yield
        return
    path = Path(log_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved, streams = [os.dup(fd) for fd in (1, 2)], (sys.stdout, sys.stderr)
    try:
        with open(path, "a", buffering=1) as out:
            for fd in (1, 2):
                os.dup2(out.fileno(), fd)
            sys.stdout = sys.stderr = out  # Python-level writers too (a replaced sys.stdout writes no descriptor)
            try:
                yield
            finally:
                out.flush()
    finally:
        sys.stdout, sys.stderr = streams
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
