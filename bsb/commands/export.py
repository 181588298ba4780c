"""``bsb export RUN``: a run's weights as a Hugging Face folder that transformers and vLLM load.

The weights are the run's best held-out checkpoint (``--best``, kept with ``keep_best``), a validation step's
(``--step S``, kept with ``keep_last``), or by default its final model (else its latest non-sharded checkpoint).
The folder is copied whole (weights, config, tokenizer), checked to load its config and tokenizer, and described in
``bsb_export.json`` (run, source, step). Only the run's own regular files are copied: a link or special file in the
folder, or a link on the way to it, is one error naming them; ``bsb_best.json``'s numbers are checked.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from bsb.commands.flags import command_parser, from_args
from bsb.fields import MAX_COUNT, check_values
from bsb.fields import help_field as _f

HELP = "a run's best, step or final weights as a Hugging Face folder (transformers, vLLM)"


@dataclass
class ExportConfig:
    run: str = _f("", "the run's out_dir", positional=True)
    out: str | None = _f(
        None, "where the model goes (default: RUN/export-best, RUN/export-step-S or RUN/export-final)", path="folder"
    )
    best: bool = _f(False, "the weights of the run's best held-out accuracy (keep_best)")
    step: int | None = _f(None, "the weights of validation step S (keep_last)", size_limit=MAX_COUNT)
    force: bool = _f(False, "replace --out when it exists")

    def __post_init__(self):
        check_values(self)
        if not self.run:
            raise ValueError("name the run folder to export from (bsb train's out_dir)")
        if self.best and self.step is not None:
            raise ValueError("--best and --step choose different weights: give one")


def add_parser(sub) -> argparse.ArgumentParser:
    return command_parser(sub, "export", HELP, ExportConfig)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    cfg = from_args(ExportConfig, args, parser)
    out = export(cfg.run, cfg.out, cfg.best, cfg.step, cfg.force)
    print(f"exported {json.loads((out / NOTE).read_text())['source']} to {out}")
    return 0


NOTE = "bsb_export.json"


def export(
    run: str | Path, out: str | Path | None = None, best: bool = False, step: int | None = None, force: bool = False
) -> Path:
    import transformers

    from bsb.run_storage import best_weights, swap_in, weights_folder
    from bsb.safe_io import copy_tree, write_text

    run = Path(run)
    if not run.is_dir():
        raise FileNotFoundError(f"no run folder at {run}")
    source = weights_folder(run, step, best)
    name = "best" if best else f"step-{step}" if step is not None else "final"
    out = Path(out) if out is not None else run / f"export-{name}"
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists: pass --force to replace it, or --out elsewhere")
    tmp = out.with_name(out.name + ".tmp")
    _remove(tmp)
    try:
        copy_tree(source, tmp, run)  # the run's regular files only: a link or special file in it is an error
        transformers.AutoConfig.from_pretrained(tmp)  # what a loader reads first: a broken folder is an error here
        transformers.AutoTokenizer.from_pretrained(tmp)
        note = {"run": str(run.resolve()), "source": str(source.relative_to(run)), "step": step}
        if best:
            note.update(best_weights(run) or {})
        write_text(tmp / NOTE, json.dumps(note, indent=1))
    except BaseException:
        _remove(tmp)  # a failed export leaves nothing behind
        raise
    swap_in(tmp, out)  # an existing export (--force) is replaced only by a complete one
    return out


def _remove(path: Path) -> None:
    """A leftover at ``path`` gone: a link or file unlinked (never followed), a folder removed."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)
