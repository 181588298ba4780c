"""Seed streams: one place, named, disjoint across steps, rounds and phases, stable across processes."""

from bsb.train.seeds import derive, stream


def test_streams_are_stable_distinct_and_bounded():
    keys = [(s, step, r, ph) for s in (0, 1) for step in range(20) for r in range(3) for ph in ("draw", "rollout", "probe", "shuffle")]
    seeds = [stream(*k) for k in keys]
    assert len(set(seeds)) == len(seeds)  # no two (seed, step, round, phase) share a stream
    assert all(0 <= s < 2**47 for s in seeds)  # per-request offsets stay far from 2**63
    assert stream(3, 7, 1, "probe") == derive(3, 7, 1, "probe") == 90256644564027  # stable across runs and machines
    assert stream(0, 1, 0, "rollout") != stream(0, 0, 1, "rollout")  # (step, round) is not a sum
