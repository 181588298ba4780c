"""Ship a trained embedded default: copy it into the package and record what the docs and tests check it against.

``python bench/ship_model.py walk|code [DIR]`` (DIR: a trained checkpoint; default: the recipe's cache entry, which
``python -m bsb.embedded.model --rebuild walk`` writes). The checkpoint's files replace ``bsb/embedded/checkpoints/
NAME``; its held-out accuracy is measured with the protocol of the record it replaces (``bsb_heldout.json``: the
task's first held-out problems, one draw each at the recorded temperature, ``tests/support/heldout.py``); for the walk
model, the lag figures of ``bench/walk_lag.py`` (``bsb_lag.json``, 200 chains); then ``SHA256SUMS``. A maintainer's
step: the shipped model is the one every machine runs, since float training differs across CPUs.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from bsb.embedded import model as M  # noqa: E402
from bsb.embedded.cache import cache_dir  # noqa: E402

FILES = (
    "bsb_train.json",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)
LAG = {"chains": 200, "seed": 99}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", choices=["walk", "code"])
    ap.add_argument("source", nargs="?", help="a trained checkpoint (default: the recipe's cache entry)")
    args = ap.parse_args(argv)
    cfg = {"walk": M.EMBEDDED, "code": M.EMBEDDED_CODE}[args.name]
    src = Path(args.source) if args.source else cache_dir() / cfg.key()
    missing = [f for f in FILES if not (src / f).exists()]
    if missing:
        ap.error(f"{src}: not a trained checkpoint (missing {', '.join(missing)})")
    trained = json.loads((src / "bsb_train.json").read_text())["config"]
    want = json.loads(json.dumps(asdict(cfg)))
    if trained != want:
        ap.error(f"{src} was trained with {trained}, not the {args.name} recipe {want} (bsb/embedded/model.py)")
    dest = M.SHIPPED / args.name
    old = json.loads((dest / "bsb_heldout.json").read_text())
    if src.resolve() != dest.resolve():
        shutil.rmtree(dest)
        dest.mkdir()
        for f in FILES:
            shutil.copy2(src / f, dest / f)
    from heldout import sampled_accuracy

    correct, n = sampled_accuracy(dest, args.name, old["problems"], temperature=old["temperature"])
    today = datetime.date.today().isoformat()
    record = {**old, "correct": correct, "accuracy": correct / n, "measured": f"{today}, bench/ship_model.py"}
    (dest / "bsb_heldout.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"held-out {correct} / {n} at T = {old['temperature']}")
    if args.name == "walk":
        spec = importlib.util.spec_from_file_location("walk_lag", ROOT / "bench" / "walk_lag.py")
        lag = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(lag)
        figures = {**lag.measure(dest, LAG["chains"], LAG["seed"]), "seed": LAG["seed"], "measured": today}
        figures["model"] = f"bsb/embedded/checkpoints/{args.name}"
        (dest / "bsb_lag.json").write_text(json.dumps(figures, indent=1) + "\n")
        print("lag figures:", json.dumps(figures))
        print("walk_lag targets:", lag.missed(figures) or "all met")
    sums = M.SHIPPED / "SHA256SUMS"
    keep = [ln for ln in sums.read_text().splitlines() if ln.strip() and not ln.split()[1].startswith(f"{args.name}/")]
    mine = [f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {args.name}/{f.name}" for f in sorted(dest.iterdir())]
    order = {"walk": 0, "code": 1}
    lines = sorted(keep + mine, key=lambda ln: (order.get(ln.split()[1].split("/")[0], 2), ln.split()[1]))
    sums.write_text("\n".join(lines) + "\n")
    print(f"shipped {src} as {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
