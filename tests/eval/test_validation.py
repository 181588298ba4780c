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
    return {"id": rid, "prompt": rid.split("/")[0], "cuts": list(range(n)), "v_star": v, "flat": flat, "b": 1, "floor": 0.0,
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
    assert "| x | **0.000** | 0.000 | n/a | 0.000 | 1 | 0.60 |" in md and "| y | _1.500_ | 0.354 | n/a | 1.500 | 0 | 0.40 |" in md
    assert "| oracle floor (DP) | 0.000 | | | 0 | | |" in md and "disagreement by Probe-JS tercile: none" in md
    assert "vs Midpoint:" not in md  # no Midpoint, no paired column
    table = report.rich_table(s, "t")
    assert list(table.columns[0].cells) == ["★ x", "y"] and list(table.columns[6].cells) == ["0.60", "0.40"]


def test_each_selector_is_paired_with_midpoint_by_chain_and_bootstrapped_over_problems():
    # problem p: three chains where x beats midpoint by 1; problem q: one chain where x loses by 1
    rows = [_row(f"p/{k}", [0.0, 1.0], {"x": (0, [0]), "midpoint": (1, [1])}) for k in range(3)]
    rows.append(_row("q/0", [0.0, 1.0], {"x": (2, [0]), "midpoint": (1, [1])}))
    s = summarize(rows, ["x", "midpoint"])
    x = s.vs_midpoint["x"]
    assert x.diff == pytest.approx(-0.5) and s.problems == 2
    # two clusters: a resample holds p twice (-1), q twice (+1) or one of each (-0.5): never below -1, never above +1
    assert x.low == pytest.approx(-1.0) and x.high == pytest.approx(1.0)
    assert s.vs_midpoint["midpoint"].diff == 0.0
    md = report.markdown(s, "t", {"sibling_agreement": 0.5, "pairs": 2}, {})
    assert "| x | **0.500** | 0.433 | -0.500 [-1.000, +1.000] |" in md and "| midpoint | _1.000_ | 0.000 | (reference) |" in md
    assert "95% bootstrap over the 2 problems" in md


class _Cannot:
    def score(self, chain, pool, backend, index, seed):
        raise CannotScore("no answer")


class _Nan:
    def score(self, chain, pool, backend, index, seed):
        return [math.nan] * len(pool.positions), 7


@pytest.mark.parametrize(("sel", "paid"), [(_Cannot(), 0), (_Nan(), 7)])
def test_a_selector_that_cannot_score_ranks_by_the_engines_midpoint(sel, paid):
    pool = CandidatePool([2, 5, 9], "newline", 10)
    scores, fell_back, spent = boundary_scores(sel, ChainInput([1], list(range(10))), pool, None, 0, 0)
    assert fell_back and scores == [-3.0, 0.0, -4.0]  # closeness to the chain's midpoint, 5
    assert spent == paid  # reads that ran and found nothing were still paid for


def test_the_read_cost_is_each_selectors_reads_over_the_tokens_its_chains_sampled():
    rows = _rows()
    for r, (spent, floor) in zip(rows, [(30, 6), (50, 10), (0, 0)]):
        r["response"] = [0] * 10  # ten sampled tokens a chain
        r["read_tokens"], r["read_floor"] = {"x": spent, "y": 0}, {"x": floor, "y": 0}
    del rows[2]["read_tokens"]["x"], rows[2]["read_floor"]["x"]  # a chain x never read: not in its denominator
    s = summarize(rows, ["x", "y"])
    assert s.read_cost == {"x": (4.0, 0.8), "y": (0.0, 0.0)}  # 80 / 20 and 16 / 20; y's 0 over all 30 tokens
    line = report.read_cost_line(s)
    assert "x 4.00 (0.80)." in line and " y " not in line  # a selector that reads nothing is not listed
    assert line in report.markdown(s, "t", {"sibling_agreement": 0.5, "pairs": 2}, {})
    assert summarize(_rows(), ["x"]).read_cost == {} and report.read_cost_line(summarize(_rows(), ["x"])) == ""


def test_the_flip_mass_of_a_fork_is_the_jump_its_boundary_re_rolls():
    cuts, v = [0, 4, 8], [0.0, 1.0, 0.25]
    assert flip_mass(v, [0, 1, 2]) == 1.75 and flip_mass(v, [2]) == 0.0
    assert at_fork(cuts, v, 5) == 0.75 and at_fork(cuts, v, 0) == 1.0 and at_fork(cuts, v, None) == 0.0


def test_b_one_on_most_chains_is_warned_a_constant_rewards_the_median_not_the_pivot():
    """With one kept point V-hat is a constant: on a 0 -> 1 step the point just before the jump (value 0) costs every
    boundary after it, the same as any other point on its side; E is least at the curve's median value."""
    step = [0.0] * 6 + [1.0] * 3
    from bsb.eval.reconstruction import oracle_floor, reconstruction_error

    before_jump, middle = reconstruction_error(step, [5]), reconstruction_error(step, [4])
    assert before_jump == middle == 3.0 and oracle_floor(step, 1)[0] == 3.0  # the pivot earns nothing at B = 1
    assert reconstruction_error(step, [5, 6]) == 0.0  # at B = 2 it is all that counts
    rows = [_row("a", step, {"x": (3, [5])}), _row("b", [0.0, 1.0, 1.0], {"x": (0, [1])})]
    text = " ".join(report.warnings(summarize(rows, ["x"])))
    assert "B = 1 on 2 of 2 non-flat chains: one kept point reconstructs a constant" in text
    rows[0]["b"] = rows[1]["b"] = 2
    assert "B = 1 on" not in " ".join(report.warnings(summarize(rows, ["x"])))
