"""Each selector's read of each chain, kept as it is read, so that an interrupted validation's reads resume.

Reading a chain is the slow part of a validation once V* is sampled (Lens-Shift teacher-forces a whole committed
program at every boundary through every layer's lens: minutes a chain for a 0.5B model on two CPU cores), and a run
stopped there lost every read. A :class:`ReadStore` appends one line a (chain, selector) read to ``reads.jsonl``
as soon as it is done, keyed by a hash of what the read depends on (:func:`read_key`): the run's options that shape
reads (with the model's dtype, its device and the elicitation suffix as resolved), the selector and what it carries
(a BSV direction), the chain's index, prompt, response and boundaries, its committed answer where the selector reads
it (Lens-Shift), and :data:`READS_VERSION`.
A read of other inputs has another key and is read again; nothing is matched by name alone. Not in the key: the
weights behind a model path (a checkpoint changed in place needs a new ``--out``) and the code of bsb's selectors
(a change to what a read computes bumps :data:`READS_VERSION`).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from bsb.run_storage import appended_lines

READS_VERSION = 1  # bumped whenever a selector's read computes something else for the same inputs


def read_key(options: dict, selector, name: str, index: int, chain) -> str:
    """The hash of one read's inputs: ``options`` (JSON-able: the run's settings that shape reads, resolved), the
    selector's ``name`` and what it carries beyond them (:func:`carried`), the chain's ``index`` (a sampled read's
    seed derives from it) and ``chain``: (prompt ids, response ids, committed answer ids or None, boundaries)."""
    prompt, response, answer, cuts = chain
    ids = [list(map(int, x)) if x is not None else None for x in (prompt, response, answer, cuts)]
    text = json.dumps([READS_VERSION, options, name, int(index), ids], sort_keys=True, default=str)
    return hashlib.sha256(text.encode() + b"\0" + carried(selector)).hexdigest()[:32]


def carried(selector) -> bytes:
    """What a selector reads with beyond the run's options, as bytes: a BSV direction's layer and vectors (cross-fitted
    directions differ by fold, and a refit may differ), in float32 whatever dtype they were saved in; nothing for
    the others."""
    d = getattr(selector, "direction", None)
    if d is None:
        return b""
    parts = [str(int(d.layer)).encode()]
    for t in (d.u_plus, d.u_minus):
        parts += [str(tuple(t.shape)).encode(), t.detach().float().cpu().contiguous().numpy().tobytes()]
    return b"\0".join(parts)


def _record(r) -> dict | None:
    """A read record with its numbers checked and converted, or None if it is not one."""
    if not (isinstance(r, dict) and isinstance(r.get("key"), str) and isinstance(r.get("scores"), list)):
        return None
    scores = []
    for s in r["scores"]:
        if s is None:
            scores.append(math.nan)  # a boundary without a score
        elif isinstance(s, (int, float)) and not isinstance(s, bool):
            try:
                s = float(s)
            except OverflowError:
                return None
            if not math.isfinite(s):
                return None
            scores.append(s)
        else:
            return None
    counts = [r.get(k) for k in ("spent", "floor")]
    seconds = r.get("seconds")
    if not (
        type(r.get("fallback")) is bool
        and all(type(c) is int and 0 <= c < 2**63 for c in counts)
        and isinstance(seconds, (int, float))
        and not isinstance(seconds, bool)
        and math.isfinite(seconds)
        and seconds >= 0
    ):
        return None
    return {"scores": scores, "fallback": r["fallback"], "spent": counts[0], "floor": counts[1], "seconds": seconds}


class ReadStore:
    """Finished reads by key (:func:`read_key`): the per-boundary scores (NaN where a boundary had none), whether the
    selector fell back to the midpoint ranking, the token-forwards it spent and its floor, and the seconds it took.
    With a path, an append-only JSONL file that a later store on the same path reads back (a torn last line is
    dropped; any other bad line, or a number that is not finite, is an error naming it)."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self.reads: dict[str, dict] = {}
        if self.path is None:
            return
        for n, line in enumerate(appended_lines(self.path), 1):
            try:
                raw = json.loads(line)
            except ValueError:  # not JSON, or an integer past Python's 4,300 digits
                raw = None
            r = _record(raw)
            if r is None:
                why = "key, scores (finite or null), fallback, spent, floor, seconds (finite, >= 0)"
                raise ValueError(f"{self.path}:{n}: not a read record ({why})")
            self.reads[raw["key"]] = r

    def __len__(self) -> int:
        return len(self.reads)

    def get(self, key: str, boundaries: int) -> tuple[list[float], bool, int, int, float] | None:
        """``(scores, fallback, spent, floor, seconds)`` of the read ``key`` of a chain of ``boundaries`` boundaries, or
        None if it was never read; a kept read of another length is an error (its key names these boundaries)."""
        r = self.reads.get(key)
        if r is None:
            return None
        if len(r["scores"]) != boundaries:
            where = self.path or "the read store"
            raise ValueError(f"{where}: read {key} holds {len(r['scores'])} scores for {boundaries} boundaries")
        return list(r["scores"]), r["fallback"], r["spent"], r["floor"], r["seconds"]

    def add(self, key: str, scores, fallback: bool, spent: int, floor: int, seconds: float) -> None:
        """Keep one read, flushed to disk before returning (a read with an infinite score is not kept: read again)."""
        line = {
            "key": key,
            "scores": [None if math.isnan(s) else float(s) for s in scores],
            "fallback": bool(fallback),
            "spent": int(spent),
            "floor": int(floor),
            "seconds": round(float(seconds), 3),
        }
        record = _record(line)
        if record is None:
            return
        self.reads[key] = record
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(line) + "\n")
                f.flush()
