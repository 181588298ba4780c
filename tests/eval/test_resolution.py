"""V*'s resolution: the mean squared step between boundaries against the sampling noise of two n-draw estimates."""

import math

import numpy as np
import pytest

from bsb.eval.resolution import resolution_line, resolution_warning, step_resolution


def test_hand_computed_pairs():
    # [0, .5, 1] at n = 2: each step .25 squared; each pair's noise (0·1 + .5·.5)/1 = .25: the steps are noise
    r = step_resolution([[0.0, 0.5, 1.0]], n_mc=2)
    assert (r.pairs, r.step_sq, r.noise, r.ratio, r.n_mc_for_2, r.signal_share) == (2, 0.25, 0.25, 1.0, None, 0.0)
    # [.25, .75] at n = 4: step .25; noise (.1875 + .1875)/3 = .125: ratio 2 already at n = 4
    r = step_resolution([[0.25, 0.75]], n_mc=4)
    assert r.step_sq == pytest.approx(0.25) and r.noise == pytest.approx(0.125)
    assert r.ratio == pytest.approx(2.0) and r.n_mc_for_2 == 4 and r.signal_share == pytest.approx(0.5)
    # lag 2 pairs boundaries two apart only
    r = step_resolution([[0.25, 0.5, 0.75], [0.5, 0.5]], n_mc=4, lag=2)
    assert r.pairs == 1 and r.step_sq == pytest.approx(0.25)


def test_symmetries_reversal_and_complement():
    rng = np.random.default_rng(0)
    curves = [list(rng.integers(0, 9, size=int(rng.integers(2, 12))) / 8) for _ in range(20)]
    base = step_resolution(curves, 8)
    for other in ([c[::-1] for c in curves], [[1 - x for x in c] for c in curves]):
        r = step_resolution(other, 8)
        assert (r.pairs, r.n_mc_for_2) == (base.pairs, base.n_mc_for_2)
        assert (r.step_sq, r.noise, r.ratio) == pytest.approx((base.step_sq, base.noise, base.ratio))


def _sampled(true_curves, n, rng):
    return [list(rng.binomial(n, np.asarray(c)) / n) for c in true_curves]


def test_flat_curves_give_ratio_one_and_steps_the_expected_ratio():
    """Binomial estimates of curves that do not move: ratio 1 (the noise estimate is unbiased); of curves with known
    steps: the ratio the step's expectation gives, (signal + noise) / noise."""
    rng = np.random.default_rng(1)
    n = 8
    flat = [[p] * 20 for p in rng.uniform(0.1, 0.9, size=2000)]
    r = step_resolution(_sampled(flat, n, rng), n)
    assert r.pairs == 2000 * 19 and abs(r.ratio - 1) < 0.03  # s.e. of the ratio here about 0.01
    # each curve: 10 boundaries at .3 then 10 at .7; one step of .4 in 19 pairs
    stepped = [[0.3] * 10 + [0.7] * 10 for _ in range(4000)]
    noise = 2 * (0.3 * 0.7) / n  # both sides' variances, equal here
    signal = 0.4**2 / 19
    r = step_resolution(_sampled(stepped, n, rng), n)
    assert r.ratio == pytest.approx((signal + noise) / noise, rel=0.03)
    # the draws that bring the ratio to 2: noise · n / signal, and at that n it is 2
    needed = math.ceil(n * noise / signal)
    assert r.n_mc_for_2 == pytest.approx(needed, rel=0.05)
    at_needed = step_resolution(_sampled(stepped, needed, rng), needed)
    assert at_needed.ratio == pytest.approx(2.0, rel=0.04) and resolution_warning(at_needed, threshold=1.9) == ""


def test_lines_and_warnings():
    r1 = step_resolution([[0.0, 0.5, 1.0]], n_mc=2)
    r2 = step_resolution([[0.0, 0.5, 1.0]], n_mc=2, lag=2)
    line = resolution_line([r1, r2, None])
    assert line.startswith("V* resolution:") and "2-draw estimates" in line
    assert "1 apart: 0.2500 against 0.2500 (ratio 1.00, 2 pairs)" in line and "2 apart:" in line
    assert resolution_line([None]) == "" and resolution_line([]) == ""
    warn = resolution_warning(r1)
    assert "mostly sampling noise (ratio 1.00: 0% of their mean square is signal at N_MC=2)" in warn
    assert "no number of draws separates steps that are not there" in warn
    noisy = step_resolution([[0.25, 0.75, 0.5]], n_mc=4)  # mean square .15625 against .13542: ratio 1.15
    assert 1 < noisy.ratio < 2 and noisy.n_mc_for_2 in (26, 27)  # 4 · .13542 / .02083 = 26.0 (rounding)
    assert f"--n-mc {noisy.n_mc_for_2} would make half of it signal" in resolution_warning(noisy)
    assert resolution_warning(step_resolution([[0.0, 1.0]], n_mc=8)) == ""  # all 0/1: no noise estimated, no warning
    certain = step_resolution([[0.0, 1.0, 1.0]], n_mc=8)
    assert certain.ratio is None and certain.n_mc_for_2 is None and certain.signal_share is None
    assert "ratio n/a: every estimate 0 or 1" in resolution_line([certain])
    assert resolution_warning(None) == ""


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_mc": 1}, "n_mc must be an integer >= 2"),
        ({"n_mc": True}, "n_mc must be an integer >= 2"),
        ({"n_mc": 2.0}, "n_mc must be an integer >= 2"),
        ({"n_mc": 4, "lag": 0}, "lag must be an integer >= 1"),
        ({"n_mc": 4, "lag": True}, "lag must be an integer >= 1"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        step_resolution([[0.5, 0.5]], **kwargs)


@pytest.mark.parametrize("curve", [[0.5, 1.5], [-0.1, 0.5], [0.5, float("nan")], [0.5, float("inf")]])
def test_values_outside_unit_interval(curve):
    with pytest.raises(ValueError, match=r"curve 1: V\* values must lie in \[0, 1\]"):
        step_resolution([[0.5, 0.5], curve], n_mc=4)


def test_nothing_to_pair():
    assert step_resolution([], 4) is None and step_resolution([[0.5], []], 4) is None
    assert step_resolution([[0.5, 0.5]], 4, lag=2) is None
