"""Experiment trackers: where a run's step rows go beside ``metrics.jsonl`` (always written, the run's record).

``report_to`` names them: ``jsonl`` (only the file), ``tensorboard`` (``out_dir/tensorboard``, through
``torch.utils.tensorboard``) and ``wandb`` (``wandb.init`` in ``out_dir``; ``WANDB_MODE=offline`` works without an
account). Each is imported only when named. Every numeric field of a row is logged as a scalar named ``bsb/<field>``
(as verl namespaces its own), at the row's step; ``fork_positions`` becomes ``bsb/fork_position_mean``, and the
lists in :data:`HISTOGRAMS` (the forks' positions as fractions of their chains, ``fork_rel``) become histograms
``bsb/<field>`` (TensorBoard's histograms, W&B's ``wandb.Histogram``). The run's config is logged once (W&B's run
config, a TensorBoard text). A resumed run continues its own record: TensorBoard purges the events after the
checkpoint's step, W&B resumes the run by the id kept in ``out_dir/wandb_run_id``.
"""

from __future__ import annotations

import math
import secrets
from pathlib import Path

TRACKERS = ("jsonl", "tensorboard", "wandb")
HISTOGRAMS = ("fork_rel",)  # list fields of a row drawn as a histogram at its step


def tracker_names(value):
    """``report_to`` as a list: ``"tensorboard,wandb"`` (``--set report_to=...``) split at commas; anything else as is
    (:func:`tracker_problems` judges it)."""
    return [n.strip() for n in value.split(",") if n.strip()] if isinstance(value, str) else value


def tracker_problems(names) -> list[str]:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return [f"report_to must be a list of tracker names ({', '.join(TRACKERS)}), got {names!r}"]
    unknown = [n for n in names if n not in TRACKERS]
    return [f"report_to: unknown tracker(s) {', '.join(unknown)}; choose from {', '.join(TRACKERS)}"] if unknown else []


def scalars(row: dict) -> dict[str, float]:
    """The row's numeric fields as ``bsb/<field>`` scalars (booleans as 0/1; NaN and strings, lists and mappings
    left out), and the mean fork position."""
    out = {}
    for key, value in row.items():
        if key == "step" or isinstance(value, (str, list, dict, tuple)) or value is None:
            continue
        if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
            out[f"bsb/{key}"] = float(value)
    forks = [f for f in row.get("fork_positions", []) or [] if f is not None]
    if forks:
        out["bsb/fork_position_mean"] = sum(forks) / len(forks)
    return out


def histograms(row: dict) -> dict[str, list[float]]:
    """The row's :data:`HISTOGRAMS` lists that hold values, as ``bsb/<field>``."""
    return {f"bsb/{key}": [float(v) for v in row[key]] for key in HISTOGRAMS if row.get(key)}


class Trackers:
    """The trackers of ``report_to`` for one run (rank 0 only)."""

    def __init__(
        self,
        names: list[str],
        out_dir: Path,
        config: dict,
        run_name: str,
        resume_step: int | None,
        redone: bool = False,
    ):
        """``resume_step``: the checkpoint's step a resumed run continues from (None: a fresh run); ``redone``: the
        run had logged steps after it (a crash between checkpoints), which the resumed run logs again."""
        self.out = Path(out_dir)
        self.tb = self.wandb = None
        if "tensorboard" in names:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                raise ImportError(
                    "report_to tensorboard needs tensorboard (pip install 'belief-shift-branching[track]')"
                ) from err
            purge = resume_step + 1 if resume_step is not None else None  # events after the checkpoint go
            self.tb = SummaryWriter(log_dir=str(self.out / "tensorboard"), purge_step=purge)
            if resume_step is None:
                self.tb.add_text("config", "\n".join(f"    {k}: {v!r}" for k, v in sorted(config.items())), 0)
        if "wandb" in names:
            try:
                import wandb
            except ImportError as err:
                raise ImportError("report_to wandb needs wandb (pip install 'belief-shift-branching[track]')") from err
            id_file = self.out / "wandb_run_id"
            run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
            if redone and id_file.exists():
                # W&B drops a step logged again (steps only grow) and rewinding a run is a server preview: the
                # redone steps go to a new run that names the one it continues, so no chart mixes the two
                config = {**config, "bsb_resumed_from": {"wandb_run_id": run_id, "step": resume_step}}
                run_name, run_id = f"{run_name}@{resume_step}", secrets.token_hex(4)
            id_file.write_text(run_id)
            self.wandb = wandb.init(
                project=config.get("wandb_project") or "bsb",
                name=run_name,
                id=run_id,
                resume="allow",
                dir=str(self.out),
                config=config,
            )

    def log(self, row: dict) -> None:
        values, hists, step = scalars(row), histograms(row), int(row["step"])
        if self.tb is not None:
            import numpy as np

            for key, value in values.items():
                self.tb.add_scalar(key, value, step)
            for key, xs in hists.items():
                self.tb.add_histogram(key, np.asarray(xs), step, bins=np.linspace(0.0, 1.0, 21))
            self.tb.flush()
        if self.wandb is not None:
            import wandb

            self.wandb.log({**values, **{key: wandb.Histogram(xs) for key, xs in hists.items()}}, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None
