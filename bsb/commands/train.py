"""``bsb train``: tree RLVR training (:class:`bsb.train.trainer.Trainer`) on a :class:`~bsb.train.config.TrainConfig`
from a YAML file and ``--set FIELD=VALUE`` overrides; ``--help`` lists every field with its help."""

from __future__ import annotations

import argparse
import sys

HELP = "tree RLVR training (vLLM rollouts when installed)"


def add_parser(sub) -> argparse.ArgumentParser:
    from bsb.train.config import TrainConfig

    parser = sub.add_parser(
        "train",
        help=HELP,
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="config fields (set in YAML with --config, or with --set FIELD=VALUE; task_options.NAME=VALUE "
        "sets one task option):\n" + TrainConfig.help_text(),
    )
    parser.add_argument("--config", help="YAML file of TrainConfig fields (see bsb/train/config.py)")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="FIELD=VALUE",
        help="override config fields, e.g. --set selector=entropy steps=20",
    )
    parser.add_argument("--no-resume", action="store_true", help="start over even if out_dir holds a checkpoint")
    return parser


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.train.config import TrainConfig, parse_overrides
    from bsb.train.distributed import collective_failure
    from bsb.train.trainer import Trainer

    try:  # a config or a model that cannot run is a usage error, reported in one line
        data = TrainConfig.from_yaml(args.config).to_dict() if args.config else {}
        trainer = Trainer(TrainConfig.from_dict(parse_overrides(args.set, data)), resume=not args.no_resume)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    world = trainer.world
    try:
        rows = trainer.run()
    except RuntimeError as err:  # a rank died or hung: one line naming this rank, not a traceback
        if not (world.launched and collective_failure(err)):
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(
            f"bsb: error: rank {world.rank} of {world.size}: a collective failed ({first[:300]}); another rank "
            f"stopped or exceeded dist_timeout_s. The same command resumes from the last checkpoint.",
            file=sys.stderr,
        )
        return 1
    finally:
        trainer.close()
    if world.main:
        vals = [r for r in rows if "val_accuracy" in r]
        by_step = ", ".join(f"{r['step']}: {r['val_accuracy']:.3f}" for r in vals)
        print(f"held-out accuracy by step: {by_step}")
        if vals:
            print(held_out_line(vals[-1], trainer.cfg.max_response_len))
        final = f"; final model: {trainer.out / 'final'}" if trainer.cfg.steps else ""
        print(f"metrics: {trainer.out / 'metrics.jsonl'}{final}")
    return 0


def held_out_line(row: dict, cap: int) -> str:
    """A validation row in words: accuracy with its 95% bootstrap interval over problems, the no-answer and cut
    shares, the mean response length."""
    import numpy as np

    from bsb.eval.bootstrap import question_clustered

    n, per = len(row["val_correct"]), row["val_samples"]
    acc = np.asarray(row["val_correct"], dtype=float)[None] / per
    ci = question_clustered(acc, np.zeros_like(acc))
    no_answer, cut, tokens = (row.get(k, float("nan")) for k in ("val_no_answer", "val_cut", "val_tokens"))
    return (
        f"held-out accuracy at step {row['step']}: {row['val_accuracy']:.3f} (95% interval {ci.low:.3f}-"
        f"{ci.high:.3f}, {n} problems x {per} draw{'s' * (per > 1)}); no answer {no_answer:.1%}, cut at {cap} tokens "
        f"{cut:.1%}, {tokens:.0f} tokens a response"
    )
