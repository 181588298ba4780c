"""Every branch of [TwoStage] §5.5's k=3 voting rules on hand-made triples."""

import pytest

from bsb.eval.voting import RULES, Candidate, majority, vote

CAP = 100


def C(correct, length, answer):
    return Candidate(bool(correct), length, answer)


def test_majority_branches():
    assert majority([C(1, 20, "4"), C(0, 30, "5"), C(1, 25, "4")]) == 0  # e0 = e2
    assert majority([C(1, 20, "4"), C(1, 30, "4"), C(0, 25, "5")]) == 0  # e0 = e1
    assert majority([C(0, 20, "4"), C(1, 30, "5"), C(1, 25, "5")]) == 1  # e1 = e2
    assert majority([C(0, 20, ""), C(0, 30, ""), C(1, 25, "5")]) is None  # empty answers never form a majority
    assert majority([C(0, 20, "1"), C(0, 30, "2"), C(1, 25, "3")]) is None


@pytest.mark.parametrize("rule", RULES)
def test_a_majority_decides_every_rule(rule):
    v = vote([C(0, 20, "4"), C(1, 30, "5"), C(1, 25, "5")], rule, CAP)
    assert v.score == 1.0 and v.pick == 1 and v.majority


def test_rand_maj_is_the_exact_expectation():
    assert vote([C(1, 20, "1"), C(0, 30, "2"), C(0, 25, "3")], "rand_maj", CAP).score == pytest.approx(1 / 3)
    assert vote([C(1, 20, ""), C(1, 30, ""), C(0, 25, "")], "rand_maj", CAP).score == pytest.approx(2 / 3)


def test_maxlen_prefers_non_empty_then_longest_then_lowest_index():
    assert vote([C(0, 20, "1"), C(1, 40, "2"), C(0, 90, "")], "maxlen_maj", CAP).pick == 1  # the longest is empty
    assert vote([C(1, 40, "1"), C(0, 40, "2"), C(0, 10, "3")], "maxlen_maj", CAP).pick == 0  # equal length: lowest index
    assert vote([C(0, 20, ""), C(1, 50, ""), C(0, 50, "")], "maxlen_maj", CAP).pick == 1  # all empty: longest overall


def test_mdl_eligibility_window_fallback_and_ties():
    # eligible: non-empty and 15 <= L < cap; the shortest eligible wins
    v = vote([C(0, 10, "1"), C(1, 30, "2"), C(0, 50, "3")], "mdl_maj", CAP)
    assert v.pick == 1 and not v.fallback  # 10 is below the window
    assert vote([C(0, 40, "1"), C(1, 40, "2"), C(0, CAP, "3")], "mdl_maj", CAP).pick == 0  # L = cap is not eligible; tie → lowest
    assert vote([C(0, 20, ""), C(1, 16, "2"), C(0, 18, "3")], "mdl_maj", CAP).pick == 1  # empty answers are not eligible
    v = vote([C(0, 12, "1"), C(1, 5, ""), C(0, CAP, "3")], "mdl_maj", CAP)
    assert v.fallback and v.pick == 1  # nothing eligible: the shortest overall
    assert vote([C(0, 5, "1"), C(1, 5, ""), C(0, CAP, "")], "mdl_maj", CAP).pick == 0  # fallback tie → lowest index


def test_completed_root_keeps_a_completed_root_else_mdl():
    assert vote([C(1, 60, "1"), C(0, 20, "2"), C(0, 30, "3")], "completed_root_maj", CAP).pick == 0
    assert vote([C(1, CAP, "1"), C(0, 20, "2"), C(0, 30, "3")], "completed_root_maj", CAP).pick == 1  # root hit the cap
    assert vote([C(1, 60, ""), C(0, 40, "2"), C(1, 30, "3")], "completed_root_maj", CAP).pick == 2  # no answer: MDL


def test_errors():
    with pytest.raises(ValueError, match="unknown voting rule"):
        vote([C(1, 1, "1")], "best", CAP)
    with pytest.raises(ValueError, match="at least one"):
        vote([], "mdl_maj", CAP)
