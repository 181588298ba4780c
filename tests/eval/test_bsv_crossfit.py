"""BSV cross-fitted on V* curves: segment regimes from V*, folds by problem, each fold's direction fitted on the
other fold's chains only."""

import pytest
import torch

from bsb.engine.bsv import fit_bsv_chains
from bsb.eval.bsv_crossfit import CurveChain, cross_fit, folds, regimes

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model():
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()


def test_a_segments_regime_is_how_far_v_star_moves_across_it():
    # +0.25 surge, -0.5 drop, 0 and +0.0625 steady, -0.125 between (left out), +0.375 surge
    v = [0.0, 0.25, -0.25, -0.25, -0.1875, -0.3125, 0.0625]
    assert regimes(v) == ["surge", "drop", "steady", "steady", None, "surge"]
    assert regimes([0.5]) == [] and regimes([0.0, 1.0], delta=1.5) == [None]


def test_a_chain_becomes_one_sequence_cut_at_its_regime_segments():
    c = CurveChain("p", [9, 9], [1, 2, 3, 4, 5, 6, 7], cuts=[1, 3, 6], v_star=[0.0, 0.5, 0.4375])
    chain = c.bsv_chain()
    assert chain.ids == [9, 9, 1, 2, 3, 4, 5, 6, 7]
    assert list(chain.cuts) == [(3, 2, "surge"), (5, 3, "steady")]  # prompt-offset cut, tokens to the next cut


def test_a_problems_chains_share_a_fold_and_problems_alternate():
    chains = [CurveChain(p, [1], [2], [0], [0.0]) for p in ("a", "a", "b", "c", "b", "d")]
    assert folds(chains) == [0, 0, 1, 0, 1, 1]


def _chains():
    g = torch.Generator().manual_seed(3)
    out = []
    for k, problem in enumerate(["a", "b", "c", "d"]):
        response = torch.randint(0, 50, (40,), generator=g).tolist()
        v = [[0.0, 0.5, 0.5, 0.0, 0.0], [1.0, 0.5, 0.5, 1.0, 1.0]][k % 2]  # surge, steady, drop, steady (or mirrored)
        out.append(CurveChain(problem, [k + 1, 7], response, [3, 10, 18, 25, 33], v))
    return out


def test_each_folds_direction_is_fitted_on_the_other_folds_chains_alone(model):
    chains = _chains()
    fit = cross_fit(model, chains, window=4)
    assert fit.fold_of == [0, 1, 0, 1]
    for k in (0, 1):
        other = [c.bsv_chain() for c, f in zip(chains, fit.fold_of) if f != k]
        want = fit_bsv_chains(model, other, window_after=4, window_before=4)
        torch.testing.assert_close(fit.directions[k].u_minus, want.u_minus)
        assert fit.directions[k].layer == want.layer
        assert fit.counts[k] == {"surge": 2, "steady": 4, "drop": 2}  # two chains of the other fold
    assert not torch.allclose(fit.directions[0].u_minus, fit.directions[1].u_minus)  # two different fits


def test_too_few_moving_chains_or_problems_is_a_clear_error(model):
    flat = [CurveChain(p, [1], list(range(20)), [2, 8, 14], [0.5, 0.5, 0.5]) for p in ("a", "b")]
    with pytest.raises(ValueError, match=r"fold 0's direction cannot be fitted.*no examples of regime\(s\) \['surge', 'drop'\]"):
        cross_fit(model, flat)
    with pytest.raises(ValueError, match="at least two problems"):
        cross_fit(model, _chains()[:1])
