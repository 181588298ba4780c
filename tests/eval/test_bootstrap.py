"""Paired bootstrap intervals against closed forms."""

import numpy as np
import pytest

from bsb.eval.bootstrap import cluster_mean, question_clustered, two_level


def test_constant_difference_has_a_point_interval():
    a, b = np.ones((3, 40)), np.zeros((3, 40))
    for f in (question_clustered, two_level):
        iv = f(a, b, resamples=500)
        assert iv.diff == iv.low == iv.high == 1.0


def test_question_clustered_matches_the_normal_closed_form():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2, size=400).astype(float)
    b = rng.integers(0, 2, size=400).astype(float)
    d = a - b
    iv = question_clustered(a, b, resamples=4000, seed=3)
    se = d.std() / np.sqrt(d.size)  # the bootstrap distribution of the mean has this spread
    assert iv.diff == pytest.approx(d.mean())
    assert iv.low == pytest.approx(d.mean() - 1.96 * se, abs=0.25 * se)
    assert iv.high == pytest.approx(d.mean() + 1.96 * se, abs=0.25 * se)


def test_two_level_adds_seed_variation_and_is_seeded():
    rng = np.random.default_rng(2)
    q = rng.normal(size=200)
    a = np.stack([q + s for s in (-0.5, 0.0, 0.5)])  # arms differ by a seed-dependent shift
    b = np.stack([q] * 3)
    one = question_clustered(a, b, resamples=2000, seed=0)
    two = two_level(a, b, resamples=2000, seed=0)
    assert one.high - one.low < 1e-9  # the seed shift averages out within each question
    assert two.high - two.low > 0.3  # but not across resampled seeds
    # the seed picks the resamples (a rerun repeats them, another seed moves the interval), never the point estimate
    five, six = two_level(a, b, resamples=200, seed=5), two_level(a, b, resamples=200, seed=6)
    assert two_level(a, b, resamples=200, seed=5) == five
    assert (five.low, five.high) != (six.low, six.high)
    assert five.diff == six.diff == pytest.approx(float((a - b).mean()))


def test_two_level_resamples_seeds_and_questions_independently():
    """Seed 0 differs by 0, seed 1 by 1, on every question: a resample of the two seeds has mean 0, ½ or 1 with
    probability ¼, ½, ¼, so the 95% percentile interval is exactly [0, 1] (2.5% < ¼ at either end); the questions,
    all alike, add nothing. Clustering by question alone averages the seeds away: the point ½."""
    a = np.stack([np.zeros(30), np.ones(30)])
    b = np.zeros((2, 30))
    two = two_level(a, b, resamples=2000, seed=1)
    assert (two.diff, two.low, two.high) == (0.5, 0.0, 1.0)
    one = question_clustered(a, b, resamples=2000, seed=1)
    assert one.diff == one.low == one.high == 0.5


def test_shape_errors():
    with pytest.raises(ValueError, match="same"):
        question_clustered(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="finite"):
        two_level(np.array([1.0, np.nan]), np.ones(2))


def test_cluster_mean_of_single_items_matches_the_normal_closed_form():
    d = np.random.default_rng(3).normal(0.2, 1.0, size=400)
    iv = cluster_mean(d, list(range(400)), resamples=4000)
    half = 1.96 * d.std() / np.sqrt(d.size)
    assert iv.diff == pytest.approx(d.mean())
    assert iv.low == pytest.approx(d.mean() - half, abs=0.02) and iv.high == pytest.approx(d.mean() + half, abs=0.02)


def test_cluster_mean_resamples_a_clusters_items_together():
    d = np.random.default_rng(4).normal(0.0, 1.0, size=50)
    alone = cluster_mean(d, list(range(50)))
    repeated = np.repeat(d, 9)  # each problem's value nine times: nine chains that say the same thing
    together = cluster_mean(repeated, np.repeat(np.arange(50), 9))
    apart = cluster_mean(repeated, list(range(repeated.size)))
    width = lambda iv: iv.high - iv.low  # noqa: E731
    assert together.diff == pytest.approx(alone.diff)
    assert width(together) == pytest.approx(width(alone), rel=0.1)  # no new information in the copies
    assert width(apart) < width(alone) / 2.5  # treated as independent they would claim ~3x the precision


def test_cluster_mean_errors():
    with pytest.raises(ValueError, match="one cluster label per difference"):
        cluster_mean([1.0, 2.0], ["a"])
    with pytest.raises(ValueError, match="finite"):
        cluster_mean([1.0, float("nan")], ["a", "b"])
