"""Each selector's read of each chain, kept as it is read, so that an interrupted validation's reads resume.

Reading a chain is the slow part of a validation once V* is sampled (Lens-Shift teacher-forces a whole committed
program at every boundary through every layer's lens: minutes a chain for a 0.5B model on two CPU cores), and a run
stopped there lost every read. A :class:`ReadStore` appends one line a (chain, selector) read to ``reads.jsonl``
as soon as it is done, keyed by a hash of everything the read depends on (:func:`read_key`): the prompt, the chain,
its boundaries, the selector, the options that shape reads, and anything the selector carries (a BSV direction). A
read of other inputs has another key and is read again; nothing is matched by name alone.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from bsb.run_storage import appended_lines


def read_key(options: dict, selector, name: str, index: int, prompt, response, cuts) -> str:
    """The hash of one read's inputs: ``options`` (the run's settings that shape reads, JSON-able), the selector's
    ``name`` and what it carries that the options do not name (:func:`carried`), the chain's index (a sampled read's
    seed derives from it), its prompt and response token ids and its boundary positions."""
    parts = [options, name, int(index), list(map(int, prompt)), list(map(int, response)), list(map(int, cuts))]
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode() + b"\0" + carried(selector)).hexdigest()[:32]


def carried(selector) -> bytes:
    """What a selector reads with beyond the run's options, as bytes: a BSV direction's layer and vectors (cross-fitted
    directions differ by fold, and a refit may differ); nothing for the others."""
    d = getattr(selector, "direction", None)
    if d is None:
        return b""
    vectors = (t.detach().cpu().contiguous().numpy().tobytes() for t in (d.u_plus, d.u_minus))
    return str(int(d.layer)).encode() + b"\0" + b"".join(vectors)


class ReadStore:
    """Finished reads by key (:func:`read_key`): the per-boundary scores (NaN where a boundary had none), whether the
    selector fell back to the midpoint ranking, the token-forwards it spent and its floor, and the seconds it took.
    With a path, an append-only JSONL file that a later store on the same path reads back (a torn last line is
    dropped; any other bad line is an error naming it)."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self.reads: dict[str, dict] = {}
        if self.path is None:
            return
        for n, line in enumerate(appended_lines(self.path), 1):
            try:
                r = json.loads(line)
                ok = (
                    isinstance(r, dict)
                    and isinstance(r["key"], str)
                    and isinstance(r["scores"], list)
                    and all(s is None or (isinstance(s, (int, float)) and not isinstance(s, bool)) for s in r["scores"])
                    and type(r["fallback"]) is bool
                    and all(type(r[k]) is int and r[k] >= 0 for k in ("spent", "floor"))
                    and isinstance(r["seconds"], (int, float))
                )
            except (json.JSONDecodeError, KeyError, TypeError):
                ok = False
            if not ok:
                raise ValueError(f"{self.path}:{n}: not a read record (key, scores, fallback, spent, floor, seconds)")
            self.reads[r["key"]] = r

    def __len__(self) -> int:
        return len(self.reads)

    def get(self, key: str) -> tuple[list[float], bool, int, int, float] | None:
        """``(scores, fallback, spent, floor, seconds)`` of the read ``key``, or None if it was never read."""
        r = self.reads.get(key)
        if r is None:
            return None
        scores = [math.nan if s is None else float(s) for s in r["scores"]]
        return scores, r["fallback"], r["spent"], r["floor"], float(r["seconds"])

    def add(self, key: str, scores, fallback: bool, spent: int, floor: int, seconds: float) -> None:
        """Keep one read, flushed to disk before returning."""
        r = {
            "key": key,
            "scores": [None if math.isnan(s) else float(s) for s in scores],
            "fallback": bool(fallback),
            "spent": int(spent),
            "floor": int(floor),
            "seconds": round(float(seconds), 3),
        }
        self.reads[key] = r
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(r) + "\n")
                f.flush()
