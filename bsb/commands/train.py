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
        vals = [(r["step"], r["val_accuracy"]) for r in rows if "val_accuracy" in r]
        print(f"held-out accuracy by step: {', '.join(f'{s}: {a:.3f}' for s, a in vals)}")
        print(f"metrics: {trainer.out / 'metrics.jsonl'}; final model: {trainer.out / 'final'}")
    return 0
