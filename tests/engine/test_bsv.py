"""BSV (Eq. 5-6) against a hand computation from captured residual streams; save / load; errors."""

import pytest
import torch

from bsb.engine import selectors as S
from bsb.engine.bsv import BSVChain, BSVDirection, BSVExample, bsv_scores, fit_bsv, fit_bsv_chains
from bsb.engine.hf_backend import HFBackend

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model():
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
                                   num_key_value_heads=1, max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()


def _examples():
    g = torch.Generator().manual_seed(0)
    out = []
    for regime in ("surge", "steady", "drop"):
        for _ in range(2):
            out.append(BSVExample(torch.randint(0, 50, (20,), generator=g).tolist(), torch.randint(0, 50, (5,), generator=g).tolist(), regime))
    return out


def _residuals(model, ids):
    with torch.no_grad():
        hs = model(torch.tensor(ids)[None], output_hidden_states=True).hidden_states
    captured = {}
    hook = model.model.layers[-1].register_forward_hook(lambda m, i, o: captured.setdefault("h", o[0] if isinstance(o, tuple) else o))
    with torch.no_grad():
        model(torch.tensor(ids)[None])
    hook.remove()
    return torch.stack(list(hs[1:-1]) + [captured["h"]])[:, 0]  # (layers, S, d): pre-norm residual after each layer


def test_fit_matches_eq5_by_hand(model):
    ex = _examples()
    got = fit_bsv(model, ex, window_after=3, window_before=4)
    deltas = {}
    for e in ex:
        h = _residuals(model, e.prefix + e.continuation)
        t = len(e.prefix)
        deltas.setdefault(e.regime, []).append(h[:, t : t + 3].mean(1) - h[:, t - 4 : t].mean(1))
    mean = {g: torch.stack(v).mean(0) for g, v in deltas.items()}
    torch.testing.assert_close(got.u_plus, mean["surge"] - mean["steady"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.u_minus, mean["drop"] - mean["steady"], atol=1e-5, rtol=1e-5)
    assert got.layer == int(got.cos.argmin())


def test_one_forward_a_chain_fits_what_each_cut_as_its_own_example_fits(model):
    ids = torch.randint(0, 50, (60,), generator=torch.Generator().manual_seed(1)).tolist()
    cuts = [(3, 9, "steady"), (12, 4, "surge"), (16, 10, "drop"), (26, 2, "steady"), (40, 20, "surge"), (50, 6, "drop")]
    chains = [BSVChain(ids, cuts[:4]), BSVChain(ids[:58], []), BSVChain(ids, cuts[4:])]  # a chain with no cut: no example
    got = fit_bsv_chains(model, chains, window_after=5, window_before=7)
    want = fit_bsv(model, [BSVExample(ids[:t], ids[t : t + n], g) for t, n, g in cuts], window_after=5, window_before=7)
    torch.testing.assert_close(got.u_plus, want.u_plus, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.u_minus, want.u_minus, atol=1e-5, rtol=1e-5)
    assert got.layer == want.layer
    with pytest.raises(ValueError, match="does not fit 60 tokens"):
        fit_bsv_chains(model, [BSVChain(ids, [(55, 6, "drop")])])
    with pytest.raises(ValueError, match="does not fit"):
        fit_bsv_chains(model, [BSVChain(ids, [(0, 6, "drop")])])  # a cut needs a prefix


def test_scores_are_projections_and_the_direction_round_trips(model, tmp_path):
    d = fit_bsv(model, _examples())
    prefix = list(range(40))
    cuts = [5, 17, 30]
    h = _residuals(model, prefix)[d.layer]
    torch.testing.assert_close(bsv_scores(model, prefix, cuts, d), h[[4, 16, 29]] @ d.u_minus[d.layer], atol=1e-5, rtol=1e-5)
    d.save(tmp_path / "bsv.pt")
    again = BSVDirection.load(tmp_path / "bsv.pt")
    assert again.layer == d.layer and torch.equal(again.u_minus, d.u_minus)
    mask = torch.zeros(50, dtype=torch.bool)
    mask[7] = True
    chain = S.ChainInput(prompt=[1, 2], response=[3, 7, 4, 7, 5, 7, 6, 8, 9, 10])
    sel = S.make_selector("bsv", S.SelectorConfig(bsv_path=str(tmp_path / "bsv.pt")), HFBackend(model)).select([chain], mask)
    assert sel.choices[0].fork in (2, 4, 6) and sel.fallbacks == 0


def test_errors(model):
    with pytest.raises(ValueError, match="regime"):
        fit_bsv(model, [BSVExample([1, 2], [3], "sideways")])
    with pytest.raises(ValueError, match=r"no examples of regime\(s\) \['drop'\]"):
        fit_bsv(model, [e for e in _examples() if e.regime != "drop"])
    with pytest.raises(ValueError, match="fitted direction"):
        S.make_selector("bsv")


def test_a_tasks_direction_is_fitted_on_its_drafted_regimes_once_and_cached_with_the_model(tmp_path, monkeypatch):
    from bsb.embedded.tokenizer import walk_tokenizer
    from bsb.engine import bsv
    from bsb.tasks.registry import make_task

    tok, task = walk_tokenizer(), make_task("walk")
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
                                   num_key_value_heads=1, max_position_embeddings=256)
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    path = bsv.task_direction(tmp_path, task, m, tok, n_problems=8, window=4)
    assert path.parent == tmp_path and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left
    ids = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    want = fit_bsv(m, [BSVExample(ids(p + pre), ids(c), g) for p, pre, c, g in task.bsv_examples(8)], 4, 4)
    got = BSVDirection.load(path)
    assert got.layer == want.layer and torch.equal(got.u_minus, want.u_minus)
    monkeypatch.setattr(bsv, "fit_bsv", lambda *a, **k: pytest.fail("refitted a cached direction"))
    assert bsv.task_direction(tmp_path, task, m, tok, n_problems=8, window=4) == path
    assert bsv.task_direction(tmp_path, make_task("arith"), m, tok) is None  # a task that drafts no regimes: no BSV
