"""The lag diagnostic on synthetic curves whose lag is known: a score that leads by one, coincides, or lags by one."""

import math

import numpy as np
import pytest

from bsb.eval.lag import jumps, lag_profile


def _chains(shift: int, n=40, m=17, seed=0):
    """V* random walks with pivots; each score is the jump that ``shift`` boundaries away (plus a little noise):
    shift 0 coincides, +1 reacts one boundary late (score j + 1 marks jump j), −1 anticipates."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        v = np.clip(np.cumsum(rng.choice([0.0, 0.0, 0.0, 0.5, -0.5], m)) * 0.5 + 0.5, 0, 1)
        d = jumps(v) + [0.0]
        scores = [d[j - shift] + 0.01 * rng.random() if 0 <= j - shift < len(d) else 0.0 for j in range(m)]
        out.append((scores, v.tolist()))
    return out


@pytest.mark.parametrize("shift", [-1, 0, 1])
def test_the_peak_is_at_the_known_lag(shift):
    prof = lag_profile(_chains(shift), resamples=200)
    assert prof["peak"] == shift
    top = prof["lags"][shift]
    assert top["r"] > 0.9 and top["lo"] <= top["r"] <= top["hi"] and top["pairs"] > 100
    assert all(prof["lags"][lag]["r"] < 0.5 for lag in prof["lags"] if lag != shift)


def test_missing_scores_and_flat_curves():
    chains = [([None, 0.5, math.nan, 0.1], [1.0, 1.0, 0.0, 0.0]), ([0.2, 0.3], [1.0, 1.0])]
    prof = lag_profile(chains, resamples=20)
    assert prof["lags"][0]["pairs"] == 2  # boundary 1 (0.5 against the drop) and the second chain's boundary 0
    assert math.isnan(prof["lags"][0]["r"]) and prof["peak"] is None  # too few pairs for a correlation
    assert jumps([0.9, 0.6, 0.6], score=True) == pytest.approx([0.3, 0.0, math.nan], nan_ok=True)
