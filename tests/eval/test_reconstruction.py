"""Reconstruction error, interpolation and the DP oracle floor (§4) on hand-made curves and against brute force."""

import itertools
import math

import numpy as np
import pytest

from bsb.eval.reconstruction import is_flat, oracle_floor, reconstruct, reconstruction_error, top_b


def test_interpolation_and_constant_ends_by_hand():
    v = [0.0, 0.5, 1.0, 1.0, 0.0, 0.0]
    np.testing.assert_allclose(reconstruct(v, [1, 4]), [0.5, 0.5, 1 / 3, 1 / 6, 0.0, 0.0])
    assert reconstruction_error(v, [1, 4]) == pytest.approx(0.5 + 2 / 3 + 5 / 6)
    assert reconstruction_error(v, range(6)) == 0.0


def test_floor_is_zero_when_b_points_capture_a_piecewise_linear_curve():
    v = [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 0.5, 0.0]  # kinks at 0, 4, 6, 8
    floor, chosen = oracle_floor(v, 4)
    assert floor == 0.0 and chosen == [0, 4, 6, 8]
    assert oracle_floor(v, 3)[0] > 0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("b", [1, 2, 3])
def test_dp_equals_brute_force(seed, b):
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 17, size=9) / 16  # V* from 16 completions
    floor, chosen = oracle_floor(v, b)
    brute = min(reconstruction_error(v, c) for c in itertools.combinations(range(9), b))
    assert floor == pytest.approx(brute) and reconstruction_error(v, chosen) == pytest.approx(floor)


def test_any_selector_is_at_least_the_floor():
    rng = np.random.default_rng(7)
    v = rng.random(40)
    floor, _ = oracle_floor(v, 10)
    for _ in range(20):
        assert reconstruction_error(v, rng.choice(40, 10, replace=False)) >= floor - 1e-12


def test_top_b_and_flat():
    assert top_b([0.1, math.nan, 0.9, 0.5, 0.9], 2) == [2, 4]
    assert top_b([math.nan, 0.3], 5) == [1]
    assert is_flat([1.0, 1.0, 1.0]) and not is_flat([1.0, 0.9])


@pytest.mark.parametrize(
    "call,match",
    [(lambda: reconstruct([0.1, 0.2], []), "kept is empty"), (lambda: reconstruct([0.1], [3]), "kept indices"),
     (lambda: reconstruction_error([], [0]), "non-empty"), (lambda: oracle_floor([0.1, float("nan")], 1), "finite"),
     (lambda: top_b([1.0], 0), "b must be")],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
