"""Every seed of a training run, from one place: named streams derived from ``(seed, step, round, phase)``.

A stream is a 47-bit integer hashed from its parts, so streams of different steps, rounds or phases never
collide by arithmetic (``seed + i`` schemes do), per-request offsets (``stream + i``) stay far below 2**63, and
a resumed run draws exactly what an uninterrupted one would. Phases used by the trainer:

========== ===========================================================================
draw       which training problems a generation round gets
rollout    the round's sampling: roots, refills, siblings (derived below it), two-stage, flat
probe      sampled probe reads (L > 1) and the Random selector
shuffle    the order of rows across mini-batches
========== ===========================================================================

Validation uses the fixed :data:`VAL_SEED` so every step and run decodes the held-out set with the same draws.
"""

from __future__ import annotations

from bsb.seeds import derive

__all__ = ["VAL_SEED", "derive", "stream"]

VAL_SEED = 10**6


def stream(seed: int, step: int, round_: int, phase: str) -> int:
    """The seed of ``phase`` in generation round ``round_`` of training step ``step`` of the run seeded ``seed``."""
    return derive(seed, step, round_, phase)
