"""The validation summary and its report on hand-made curves rows: the pooled numbers, one row builder behind the
console table and table.md, the midpoint fallback, and the flip mass of a fork."""

import math

import pytest

from bsb.engine.boundaries import CandidatePool
from bsb.engine.selectors import CannotScore, ChainInput
from bsb.eval import validation_report as report
from bsb.eval.flip_mass import at_fork, flip_mass
from bsb.eval.validation import boundary_scores, moving_most, summarize


def _row(rid, v, picks, flat=False, fallback=()):
    """A curves row of ``v`` at cuts 0..n-1 with B = 1; ``picks``: by selector, its error and kept boundaries."""
    n = len(v)
    return {"id": rid, "cuts": list(range(n)), "v_star": v, "flat": flat, "b": 1, "floor": 0.0,
            "error": {k: float(e) for k, (e, _) in picks.items()}, "top_b": {k: kept for k, (_, kept) in picks.items()},
            "fallback": {k: k in fallback for k in picks}, "scores": {k: [0.0] * n for k in picks}}


def _rows():
    return [_row("a", [0.0, 1.0, 1.0, 0.0], {"x": (0, [0]), "y": (2, [2])}),
            _row("b", [0.0, 0.0, 0.5, 0.5], {"x": (0, [1]), "y": (1, [0])}, fallback=("x",)),
            _row("f", [1.0, 1.0], {"x": (5, [0]), "y": (5, [0])}, flat=True)]


def test_the_summary_pools_the_non_flat_rows():
    s = summarize(_rows(), ["x", "y"])
    assert s.chains == 3 and [r["id"] for r in s.live] == ["a", "b"]
    assert s.mean_error == {"x": 0.0, "y": 1.5} and s.ranking == ["x", "y"] and s.floor == 0.0
    assert s.fallbacks == {"x": 1, "y": 0} and s.b_over_m == pytest.approx(0.25) and s.whole == 0
    # the total flip mass is 1 + 1 (a) + 0.5 (b); x re-rolls a's first jump and b's, y a's last
    assert s.captured["x"] == pytest.approx(1.5 / 2.5) and s.captured["y"] == pytest.approx(1.0 / 2.5)
    assert [r["id"] for r in moving_most(s.live, 1)] == ["a"]


def test_the_console_table_and_the_markdown_share_their_rows():
    s = summarize(_rows(), ["x", "y"])
    md = report.markdown(s, "t", {"sibling_agreement": 0.5, "pairs": 2}, {})
    assert "| x | **0.000** | 0.000 | 0.000 | 1 | 0.60 |" in md and "| y | _1.500_ | 0.354 | 1.500 | 0 | 0.40 |" in md
    assert "| oracle floor (DP) | 0.000 | | 0 | | |" in md and "disagreement by Probe-JS tercile: none" in md
    table = report.rich_table(s, "t")
    assert list(table.columns[0].cells) == ["★ x", "y"] and list(table.columns[5].cells) == ["0.60", "0.40"]


class _Cannot:
    def score(self, chain, pool, backend, index, seed):
        raise CannotScore("no answer")


class _Nan:
    def score(self, chain, pool, backend, index, seed):
        return [math.nan] * len(pool.positions), 0


@pytest.mark.parametrize("sel", [_Cannot(), _Nan()])
def test_a_selector_that_cannot_score_ranks_by_the_engines_midpoint(sel):
    pool = CandidatePool([2, 5, 9], "newline", 10)
    scores, fell_back = boundary_scores(sel, ChainInput([1], list(range(10))), pool, None, 0, 0)
    assert fell_back and scores == [-3.0, 0.0, -4.0]  # closeness to the chain's midpoint, 5


def test_the_flip_mass_of_a_fork_is_the_jump_its_boundary_re_rolls():
    cuts, v = [0, 4, 8], [0.0, 1.0, 0.25]
    assert flip_mass(v, [0, 1, 2]) == 1.75 and flip_mass(v, [2]) == 0.0
    assert at_fork(cuts, v, 5) == 0.75 and at_fork(cuts, v, 0) == 1.0 and at_fork(cuts, v, None) == 0.0
