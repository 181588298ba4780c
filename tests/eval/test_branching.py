"""Native test-time fork positions ([TwoStage] §5.6): MinMargin and FirstGap05 with its fallback."""

import pytest

from bsb.eval.branching import fork_positions


def test_min_margin_takes_the_smallest_then_the_smallest_two_away():
    m = [9.0] * 70
    m[10], m[11], m[30] = 0.1, 0.2, 0.3
    assert fork_positions(m, "min_margin") == ([10, 30], 0)  # 11 is too close to 10
    m[2] = 0.0  # outside the window [4, 64)
    assert fork_positions(m, "min_margin")[0][0] == 10


def test_first_gap_is_chronological_with_min_margin_fallback():
    m = [9.0] * 70
    m[20], m[21], m[40], m[50] = 0.4, 0.5, 0.45, 0.01
    assert fork_positions(m, "first_gap") == ([20, 40], 0)  # 21 is within 2 of 20
    m = [9.0] * 70
    m[20], m[50] = 0.4, 1.0  # one gap: the second slot falls back to the minimum margin
    assert fork_positions(m, "first_gap") == ([20, 50], 1)
    m = [9.0] * 70
    m[33], m[44] = 2.0, 1.0
    assert fork_positions(m, "first_gap") == ([44, 33], 2)


def test_short_roots_and_bad_rules():
    assert fork_positions([1.0] * 3, "min_margin") == ([], 0)
    with pytest.raises(ValueError, match="unknown branching rule"):
        fork_positions([1.0] * 10, "max_entropy")
