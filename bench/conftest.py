import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))  # harness.py, inputs.py

import harness  # noqa: E402

torch.set_num_threads(max(1, torch.get_num_threads()))


def pytest_sessionfinish(session, exitstatus):
    path = harness.write_report()
    if path is not None:
        print(f"\nbsb bench: results written to {path} (and .json/.csv beside it)")
