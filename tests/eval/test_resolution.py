"""V*'s resolution: the mean squared step between boundaries against the sampling noise of two n-draw estimates."""

import math

import numpy as np
import pytest

from bsb.eval.resolution import (
    resolution_line,
    resolution_warning,
    split_half_line,
    split_half_oracle,
    split_half_warning,
    step_resolution,
)


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
    assert line.startswith("V* resolution (over the non-flat chains):") and "2-draw estimates" in line
    assert "1 apart: 0.2500 against 0.2500 (ratio 1.00, 2 pairs)" in line and "2 apart:" in line
    assert resolution_line([None]) == "" and resolution_line([]) == ""
    warn = resolution_warning(r1)
    assert "mostly sampling noise (ratio 1.00: 0% of their mean square is signal at N_MC=2)" in warn
    assert "the measured steps show no signal beyond the noise" in warn
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


def _row(chain, prompt, cuts, b, midpoint):
    return {"id": chain, "prompt": prompt, "cuts": cuts, "b": b, "top_b": {"midpoint": midpoint, "other": [0]}}


def _draws(chain, cuts, per_cut):
    """``per_cut[k]``: the draws' verdicts at ``cuts[k]``, in draw order."""
    return {(chain, c, j): bool(x) for c, row in zip(cuts, per_cut) for j, x in enumerate(row)}


def test_split_half_oracle_by_hand():
    # both halves see V* 0 at boundaries 0-6 and 1 at 7-9: the oracle's two points (6, 7) reconstruct either half
    # exactly; Midpoint's (4, 5) interpolate nothing of the step: E = |0-1|·3 = 3 on each half
    cuts = list(range(10, 20))
    draws = _draws("p#c0", cuts, [[0] * 4] * 7 + [[1] * 4] * 3)
    s = split_half_oracle([_row("p#c0", "p", cuts, 2, [4, 5])], draws, 4)
    assert (s.half, s.chains, s.oracle, s.midpoint) == (2, 1, 0.0, 3.0)
    assert (s.vs_midpoint.diff, s.vs_midpoint.low, s.vs_midpoint.high) == (-3.0, -3.0, -3.0)
    assert "best B points for V* of draws 0-1, scored on V* of draws 2-3 and back, over 1 chain" in split_half_line(s)
    assert "E 0.000 against Midpoint's 3.000" in split_half_line(s) and split_half_warning(s) == ""
    # the halves disagree: draws 0-1 step at boundary 2, draws 2-3 at boundary 8 (an odd N_MC leaves the last draw out)
    per_cut = [[0, 0, 0, 0, 1]] * 2 + [[1, 1, 0, 0, 1]] * 6 + [[1, 1, 1, 1, 0]] * 2
    s = split_half_oracle([_row("q", "q", cuts, 2, [4, 5])], _draws("q", cuts, per_cut), 5)
    # E reconstructs the scored half from its own values at the kept points: half A's oracle (1, 2) reads half B as 0
    # throughout (wrong at 8, 9), half B's (7, 8) reads A as 1 throughout (wrong at 0, 1); Midpoint's (4, 5) is wrong
    # at the same two boundaries of each half: the oracle of half the draws does no better than Midpoint
    assert (s.half, s.oracle, s.midpoint, s.vs_midpoint.diff) == (2, 2.0, 2.0, 0.0)
    assert "do not beat Midpoint on the other half (+0.000 [+0.000, +0.000])" in split_half_warning(s)


def test_split_half_swapping_halves_and_clusters():
    rng = np.random.default_rng(3)
    rows, draws, swapped = [], {}, {}
    for k in range(12):
        cuts = list(range(int(rng.integers(3, 15))))
        chain = f"p{k // 3}#c{k % 3}"  # three chains a problem
        true = np.clip(np.linspace(rng.uniform(), rng.uniform(), len(cuts)), 0, 1)
        for c, p in zip(cuts, true):
            v = rng.uniform(size=6) < p
            for j in range(6):
                draws[(chain, c, j)] = bool(v[j])
                swapped[(chain, c, (j + 3) % 6)] = bool(v[j])
        rows.append(_row(chain, f"p{k // 3}", cuts, 2, [len(cuts) // 2]))
    a, b = split_half_oracle(rows, draws, 6), split_half_oracle(rows, swapped, 6)
    assert (a.oracle, a.midpoint) == pytest.approx((b.oracle, b.midpoint)) and a.chains == 12
    assert a.vs_midpoint.diff == pytest.approx(b.vs_midpoint.diff)


def test_split_half_sees_real_steps_and_not_noise():
    """Binomial draws: curves with one large step at a random boundary give an oracle of half the draws that beats
    Midpoint beyond its interval; curves that do not move give one that does not (it can only fit the noise)."""
    rng = np.random.default_rng(4)

    def run(base, step):
        rows, draws = [], {}
        for k in range(60):
            cuts = list(range(20))
            at = int(rng.integers(2, 18))
            p = [base if j < at else base + step for j in cuts]
            chain = f"p{k // 2}#c{k % 2}"
            for c in cuts:
                for j in range(8):
                    draws[(chain, c, j)] = bool(rng.uniform() < p[c])
            rows.append(_row(chain, f"p{k // 2}", cuts, 2, [9, 10]))
        return split_half_oracle(rows, draws, 8)

    moving, still = run(0.15, 0.7), run(0.5, 0.0)
    assert moving.vs_midpoint.high < 0 and split_half_warning(moving) == ""
    assert (
        still.vs_midpoint.high >= 0
        and "give no evidence that any placement, known or read, beats Midpoint" in split_half_warning(still)
    )


def test_split_half_bad_input():
    cuts = [1, 2]
    draws = _draws("c", cuts, [[1, 0], [1, 1]])
    with pytest.raises(ValueError, match="n_mc must be an integer >= 2"):
        split_half_oracle([_row("c", "c", cuts, 1, [0])], draws, 1)
    # a chain lacking a draw is left out and counted; none left: not measured, said
    gone = split_half_oracle([_row("c", "c", cuts, 1, [0])], draws, 4)
    assert (gone.chains, gone.missing, gone.vs_midpoint) == (0, 1, None) and split_half_warning(gone) == ""
    assert (
        split_half_line(gone)
        == "Split-half oracle: not measured (1 chain, each with a draw missing from the completions)."
    )
    rows = [_row("c", "c", cuts, 1, [0]), _row("d", "d", cuts, 1, [0])]
    part = split_half_oracle(rows, {**draws, **_draws("d", cuts, [[1, 0, 1, 1], [0, 1, 1, 1]])}, 4)
    assert (part.chains, part.missing) == (1, 1) and "; 1 chain left out, a draw missing" in split_half_line(part)
    assert split_half_oracle([], draws, 2) is None and split_half_line(None) == "" and split_half_warning(None) == ""
    no_mid = {"id": "c", "prompt": "c", "cuts": cuts, "b": 1, "top_b": {"entropy": [0]}}
    assert split_half_oracle([no_mid], draws, 2) is None
