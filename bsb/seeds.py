"""Seeds hashed from their parts (bsb.train's named streams, bsb.eval's V* completions): the top ``bits`` of an
8-byte blake2b of the parts' text, so that two seeds meet only by a hash collision (``seed + i`` schemes meet by
arithmetic) and a seed depends on nothing but its parts (not the batch, not a resume)."""

from __future__ import annotations

import hashlib


def hashed(text: str, bits: int) -> int:
    """The top ``bits`` (1..64) of the 8-byte blake2b of ``text``, read little-endian."""
    if not 1 <= bits <= 64:
        raise ValueError(f"bits must be in 1..64, got {bits}")
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> (64 - bits)


def derive(*parts) -> int:
    """A 47-bit seed from any parts (ints, strings): per-request offsets (``seed + i``) stay far below 2**63."""
    return hashed("/".join(map(str, parts)), 47)
