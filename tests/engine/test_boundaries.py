"""Candidate boundaries (§3.1): newline detection on merged tokens, range cap, C cap, midpoint fallback,
unforkable chains reported with a reason."""

import pytest
import torch

from bsb.engine.boundaries import candidate_pool, evenly_spaced, newline_token_mask

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

VOCAB = ["a", "b", ".\n", "\n\n", "x\ny", "c", "\n"]


@pytest.fixture(scope="module")
def tokenizer():
    model = tokenizers.models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="a")
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(model))


def test_newline_mask_sees_newlines_merged_into_tokens(tokenizer):
    assert newline_token_mask(tokenizer).tolist() == [False, False, True, True, True, False, True]


def _mask():
    return torch.tensor([("\n" in t) for t in VOCAB])


def test_positions_are_just_after_newline_tokens():
    chain = [0, 1, 2, 0, 0, 3, 1, 4, 0, 0, 0]  # newline tokens at indices 2, 5, 7
    pool = candidate_pool(chain, _mask())
    assert pool.kind == "newline" and pool.positions == [3, 6, 8]


def test_range_cap_and_min_tail():
    chain = [2] * 10  # a newline token everywhere: t = 1..10
    assert candidate_pool(chain, _mask()).positions == list(range(1, 9))  # t <= T - 2
    assert candidate_pool(chain, _mask(), range_cap=0.5).positions == [1, 2, 3, 4, 5]


def test_at_most_c_evenly_spaced_keeping_both_ends():
    chain = [2] * 100
    pool = candidate_pool(chain, _mask(), max_candidates=16)
    assert len(pool.positions) == 16 and pool.positions[0] == 1 and pool.positions[-1] == 98
    gaps = torch.tensor(pool.positions).diff()
    assert gaps.max() - gaps.min() <= 1
    assert pool.newline_total == 98
    assert evenly_spaced([5, 6, 7], 1) == [6]


def test_no_newline_falls_back_to_the_midpoint():
    pool = candidate_pool([0, 1, 0, 1, 0, 1, 0], _mask())
    assert pool.kind == "midpoint" and pool.positions == [3] and pool.forkable
    capped = candidate_pool([0] * 20, _mask(), range_cap=0.25)
    assert capped.positions == [5]  # the midpoint, pulled back into the scored range


@pytest.mark.parametrize("chain,budget,why", [([0], None, "no cut"), ([0, 2], None, "no cut"), ([], None, "no cut"), ([0, 2, 0, 0], 0, "budget")])
def test_unforkable_chains_are_reported_not_dropped(chain, budget, why):
    pool = candidate_pool(chain, _mask(), budget_left=budget)
    assert pool.kind == "unforkable" and not pool.forkable and pool.positions == [] and why in pool.reason


@pytest.mark.parametrize("kwargs,match", [(dict(max_candidates=0), "max_candidates"), (dict(range_cap=0.0), "range_cap"), (dict(min_tail=0), "min_tail")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        candidate_pool([0, 2, 0, 0], _mask(), **kwargs)


def test_token_ids_outside_the_mask_are_an_error():
    with pytest.raises(ValueError, match="outside"):
        candidate_pool([0, 99], _mask())
