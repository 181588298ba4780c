"""Selectors against hand computations from the naive re-forward / full logits, fallbacks and errors."""

import math

import pytest
import torch
from tiny_models import tiny_config

import bsb.kernels
from bsb.engine import selectors as S
from bsb.engine.backend import Capabilities
from bsb.engine.hf_backend import HFBackend
from bsb.engine.packed import naive_reads
from bsb.kernels import reference as ref

transformers = pytest.importorskip("transformers")

V, NL = 61, 7  # token 7 is a newline token


@pytest.fixture(scope="module")
def backend():
    cfg = tiny_config("s", vocab_size=V, num_hidden_layers=3, max_position_embeddings=512, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    return HFBackend(transformers.AutoModelForCausalLM.from_config(cfg))


MASK = torch.zeros(V, dtype=torch.bool)
MASK[NL] = True
CFG = S.SelectorConfig(suffix=[11, 12, 13], top_k=10, margin_window=(2, 30))


def chain(seed, length=40, every=6, answer=(21, 22)):
    g = torch.Generator().manual_seed(seed)
    resp = torch.randint(8, V, (length,), generator=g)
    resp[every - 1 :: every] = NL
    return S.ChainInput(prompt=torch.randint(8, V, (5,), generator=g).tolist(), response=resp.tolist(), answer=list(answer) if answer else None)


def test_probe_js_matches_naive_reads_and_reference(backend):
    ch = chain(1)
    sel = S.make_selector("probe_js", CFG, backend).select([ch], MASK)
    choice = sel.choices[0]
    cuts = [len(ch.prompt) + t for t in choice.pool.positions]
    reads = naive_reads(backend.model, ch.prompt + ch.response, cuts, CFG.suffix)
    want = ref.probe_js(reads.read_logits, torch.zeros(len(cuts), dtype=torch.long), 10)
    torch.testing.assert_close(torch.tensor(choice.scores), want, atol=2e-5, rtol=1e-4, equal_nan=True)
    assert choice.fork == choice.pool.positions[int(torch.nan_to_num(want, nan=-1).argmax())]
    assert choice.token_forwards == max(cuts) + len(cuts) * 3  # the chain up to its last cut, then every suffix


@pytest.mark.parametrize("readout", ["shape", "height", "depth"])
def test_lens_shift_matches_naive_reads_and_reference(backend, readout):
    ch = chain(2)
    cfg = S.SelectorConfig(suffix=CFG.suffix, lens_readout=readout)
    choice = S.make_selector("lens_shift", cfg, backend).select([ch], MASK).choices[0]
    cuts = [len(ch.prompt) + t for t in choice.pool.positions]
    reads = naive_reads(backend.model, ch.prompt + ch.response, cuts, cfg.suffix, ch.answer, with_hidden=True)
    m = backend.model
    n_layers, c, n, d = reads.answer_hidden.shape
    lp = ref.lens_logprobs(reads.answer_hidden.reshape(n_layers, c * n, d), m.model.norm.weight, m.lm_head.weight,
                           torch.tensor(ch.answer * c), eps=m.config.rms_norm_eps)
    readouts = dict(zip(("shape", "height", "depth"), ref.lens_readouts(lp.reshape(n_layers, c, n).sum(-1).T)))
    torch.testing.assert_close(torch.tensor(choice.scores), readouts[readout], atol=1e-4, rtol=1e-4, equal_nan=True)


def test_entropy_and_margins_match_full_logits(backend):
    ch = chain(3)
    ids = torch.tensor(ch.prompt + ch.response)
    with torch.no_grad():
        logits = backend.model(ids[None]).logits[0, len(ch.prompt) - 1 : -1]  # predicting each response token
    sur, _ = ref.surprisal_entropy(logits, torch.tensor(ch.response))
    margin = ref.logit_margin(logits)
    ent = S.make_selector("entropy", CFG, backend).select([ch], MASK).choices[0]
    pos = ent.pool.positions
    want = [float(sur[t:e].mean()) for t, e in zip(pos, pos[1:] + [len(ch.response)])]
    assert ent.scores == pytest.approx(want, abs=1e-4)
    mm = S.make_selector("min_margin", CFG, backend).select([ch], MASK).choices[0]
    window = list(range(2, 30))
    assert mm.pool.positions == window and mm.fork == window[int(margin[window].argmin())]
    fg = S.make_selector("first_gap", S.SelectorConfig(margin_window=(2, 30), gap_threshold=float(margin[window].median())), backend).select([ch], MASK).choices[0]
    first = next(t for t in window if margin[t] <= float(margin[window].median()))
    assert fg.fork == first


def test_first_gap_falls_back_to_min_margin_without_gaps(backend):
    ch = chain(4)
    got = S.make_selector("first_gap", S.SelectorConfig(margin_window=(2, 30), gap_threshold=-1.0), backend).select([ch], MASK)
    want = S.make_selector("min_margin", S.SelectorConfig(margin_window=(2, 30)), backend).select([ch], MASK)
    assert got.forks == want.forks


def test_model_free_baselines():
    ch = chain(5, length=60, every=5)  # newline boundaries at 5, 10, ..., 55 (t <= 58)
    pos = list(range(5, 59, 5))
    assert S.make_selector("midpoint").select([ch], MASK).forks == [30]
    assert S.make_selector("newline").select([ch], MASK).forks == [5]
    uni = S.make_selector("uniform").select([ch], MASK).choices[0]
    assert uni.fork == 30 and uni.pool.positions == pos
    top3 = [uni.pool.positions[j] for j in sorted(range(len(pos)), key=lambda j: -uni.scores[j])[:3]]
    assert sorted(top3) == [5, 30, 55]  # the farthest-point order spreads the first picks
    r1 = S.make_selector("random", S.SelectorConfig(seed=1)).select([ch, ch], MASK)
    assert r1.forks == S.make_selector("random", S.SelectorConfig(seed=1)).select([ch, ch], MASK).forks
    assert r1.choices[0].scores != r1.choices[1].scores  # per-chain streams


def test_fallbacks_and_unforkable_are_counted(backend):
    chains = [chain(6), chain(7, answer=None), chain(8, length=20, every=100), S.ChainInput(prompt=[9], response=[10])]
    sel = S.make_selector("lens_shift", CFG, backend).select(chains, MASK)
    assert sel.unforkable == 1 and sel.forks[3] is None
    assert sel.choices[1].fallback == "no committed answer to teacher-force" and sel.choices[1].fork == 20
    assert sel.choices[2].fallback == "one candidate (midpoint)" and sel.choices[2].fork == 10
    assert sel.fallbacks == 2 and sel.choices[0].fallback == ""


def _flip_logits(cuts):
    logits = torch.full((len(cuts), 1, 30), -5.0)
    logits[:3, :, 4] = 8.0
    logits[3:, :, 9] = 8.0
    return logits


class FlipBackend:
    """A black-box engine whose beliefs flip between boundary 2 and 3: Probe-JS must fork at boundary 2."""

    capabilities = Capabilities(belief_topk=True)

    def probe_topk(self, asks, suffix, read_len=1, k=20, seeds=None):
        return [(*ref.topk_logprobs(_flip_logits(cuts), k), len(prefix)) for prefix, cuts in asks]


class FlipLogits:
    """The same beliefs from a white-box backend that returns the read logits."""

    capabilities = Capabilities(belief_logits=True)

    def probe_logits(self, asks, suffix, read_len=1, seeds=None):
        return [(_flip_logits(cuts), len(prefix)) for prefix, cuts in asks]


@pytest.mark.parametrize("backend", [FlipBackend(), FlipLogits()], ids=["top-k", "logits"])
def test_probe_js_forks_before_the_belief_moving_step(backend):
    ch = chain(9)
    sel = S.make_selector("probe_js", CFG, backend).select([ch], MASK).choices[0]
    assert sel.fork == sel.pool.positions[2]
    assert sel.scores[2] > 0.5 and all(s < 1e-6 for j, s in enumerate(sel.scores) if j != 2 and not math.isnan(s))


@pytest.mark.parametrize("backend,op", [(FlipLogits(), "probe_js"), (FlipBackend(), "floored_js")], ids=["logits", "top-k"])
def test_pipeline_scores_come_from_the_kernel_provider_dispatch_names(backend, op, monkeypatch):
    """The selector's JS is bsb.kernels' op, served by the provider bsb.kernels.implementation names (not restated)."""
    from bsb.kernels import dispatch

    table = dispatch.table("cpu")
    provider, fn = table[op]
    assert provider == bsb.kernels.implementation(op, "cpu")
    calls = []

    def spy(*args, **kw):
        calls.append(provider)
        return fn(*args, **kw)

    monkeypatch.setitem(table, op, (provider, spy))
    choice = S.make_selector("probe_js", CFG, backend).select([chain(9)], MASK).choices[0]
    assert calls and set(calls) == {bsb.kernels.implementation(op, "cpu")}
    assert choice.fork == choice.pool.positions[2]


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: S.make_selector("prm"), "unknown selector 'prm'"),
        (lambda: S.make_selector("probe_js").select([chain(1)], MASK), "reads the model: pass a backend"),
        (lambda: S.make_selector("lens_shift", CFG, FlipBackend()), "needs white_box"),
        (lambda: S.make_selector("probe_js", CFG, object()), "object is not a bsb backend"),
        (lambda: S.SelectorConfig(lens_readout="width"), "lens_readout"),
        (lambda: S.SelectorConfig(margin_window=(10, 5)), "margin_window"),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_missing_suffix_is_a_clear_error(backend):
    with pytest.raises(ValueError, match="needs SelectorConfig.suffix"):
        S.make_selector("probe_js", backend=backend).select([chain(1)], MASK)


def test_generate_is_seeded_and_stops_at_eos(backend):
    a = backend.generate([[5, 6, 7], [8, 9]], max_new_tokens=12, temperature=1.0, seed=3)
    b = backend.generate([[5, 6, 7], [8, 9]], max_new_tokens=12, temperature=1.0, seed=3)
    assert a == b and len(a) == 2 and all(1 <= len(r) <= 12 for r in a)
    assert all(1 not in r[:-1] for r in a)  # nothing after EOS
    with pytest.raises(ValueError, match="non-empty prompt"):
        backend.generate([[]], max_new_tokens=3)


def test_generate_stops_at_the_first_of_several_stop_ids(backend):
    """eos_token_id as several ids (--stop): each row ends at the first of them it draws, which it keeps; what it
    draws before is what it draws without the extra stop (the per-request sampler)."""
    prompts = [[5, 6, 7], [8, 9]]
    free = backend.generate(prompts, max_new_tokens=12, temperature=1.0, seed=3, eos_token_id=1)
    assert len(free[0]) >= 4, "the scripted draw needs a longer first row"
    extra = free[0][2]
    stopped = backend.generate(prompts, max_new_tokens=12, temperature=1.0, seed=3, eos_token_id=[1, extra])
    cut = [r[: next((j for j, t in enumerate(r) if t in (1, extra)), len(r) - 1) + 1] for r in free]
    assert stopped == cut and len(stopped[0]) <= 3


@pytest.mark.parametrize("chunk", [1, 7, 40, 256])
def test_token_stats_chunks_agree_with_full_logits(backend, chunk):
    ch = chain(10)
    ids = torch.tensor(ch.prompt + ch.response)
    with torch.no_grad():
        logits = backend.model(ids[None]).logits[0, len(ch.prompt) - 1 : -1]
    stats = HFBackend(backend.model, chunk_positions=chunk).token_stats(ch.prompt, ch.response)
    s, h = ref.surprisal_entropy(logits, torch.tensor(ch.response))
    torch.testing.assert_close(stats.surprisal, s, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(stats.entropy, h, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(stats.margin, ref.logit_margin(logits), atol=1e-4, rtol=1e-4)
    assert stats.token_forwards == len(ids)


def test_sampled_reads_first_position_is_the_exact_read(backend):
    ch = chain(11)
    prefix, cuts = ch.prompt + ch.response, [10, 20, 30]
    logits, spent = backend.sampled_reads(prefix, cuts, CFG.suffix, read_len=4, seed=5)
    assert logits.shape == (3, 4, V) and spent == max(cuts) + 3 * 3 + 3 * 3  # the chain once, then E + L - 1 a row
    exact = backend.packed_reads(prefix, cuts, CFG.suffix).read_logits
    torch.testing.assert_close(logits[:, 0], exact, atol=1e-4, rtol=1e-4)
    again, _ = backend.sampled_reads(prefix, cuts, CFG.suffix, read_len=4, seed=5)
    torch.testing.assert_close(again, logits)  # seeded


def test_probe_js_with_several_read_positions(backend):
    ch = chain(12)
    cfg = S.SelectorConfig(suffix=CFG.suffix, top_k=10, read_len=3, seed=2)
    choice = S.make_selector("probe_js", cfg, backend).select([ch], MASK).choices[0]
    cuts = [len(ch.prompt) + t for t in choice.pool.positions]
    logits, _ = backend.sampled_reads(ch.prompt + ch.response, cuts, cfg.suffix, 3, seed=2)
    want = ref.probe_js(logits, torch.zeros(len(cuts), dtype=torch.long), 10)
    torch.testing.assert_close(torch.tensor(choice.scores), want, atol=2e-5, rtol=1e-4, equal_nan=True)


def test_lens_layers_select_the_profile(backend):
    ch = chain(13)
    full = S.make_selector("lens_shift", S.SelectorConfig(suffix=CFG.suffix), backend).select([ch], MASK).choices[0]
    last = S.make_selector("lens_shift", S.SelectorConfig(suffix=CFG.suffix, lens_layers=[-1]), backend).select([ch], MASK).choices[0]
    assert full.scores != last.scores and len(last.scores) == len(full.scores)
    with pytest.raises(ValueError, match="lens_layers must name layers"):
        S.make_selector("lens_shift", S.SelectorConfig(suffix=CFG.suffix, lens_layers=[5]), backend).select([ch], MASK)


def test_white_box_selectors_reject_a_black_box_backend():
    class BlackBox:
        capabilities = Capabilities(belief_topk=True)

        def probe_topk(self, *a, **k):
            raise AssertionError("not reached")

    for name in ("entropy", "lens_shift", "min_margin"):
        with pytest.raises(ValueError, match="which BlackBox does not provide"):
            S.make_selector(name, CFG, BlackBox()).select([chain(1)], MASK)
        assert not S.make_selector(name, CFG).can_read(BlackBox())
    assert S.make_selector("probe_js", CFG, BlackBox()).mode == "belief_topk"  # bound once, at construction


def test_selector_binding_prefers_logits_on_a_white_box_backend(backend):
    assert S.make_selector("probe_js", CFG, backend).mode == "belief_logits"
    assert S.make_selector("lens_shift", CFG, backend).mode == "white_box"


def test_a_call_seed_changes_random_scores():
    ch = chain(12)
    rnd = S.make_selector("random", CFG)
    a, b = rnd.select([ch], MASK, seed=1).choices[0].scores, rnd.select([ch], MASK, seed=2).choices[0].scores
    assert a != b and a == rnd.select([ch], MASK, seed=1).choices[0].scores


def test_triton_scores_and_their_error_status_come_back_in_one_copy(monkeypatch):
    """On the Triton provider the selector receives the input-error status with the scores (one host sync per
    selector call) and still raises the reference's error."""
    from bsb.kernels import dispatch

    monkeypatch.setenv("BSB_KERNELS", "triton")
    dispatch.reset()
    try:
        assert bsb.kernels.implementation("probe_js", "cpu") == "triton"
        choice = S.make_selector("probe_js", CFG, FlipLogits()).select([chain(9)], MASK).choices[0]
        assert choice.fork == choice.pool.positions[2]

        class NaNLogits(FlipLogits):
            def probe_logits(self, asks, suffix, read_len=1, seeds=None):
                out = super().probe_logits(asks, suffix, read_len, seeds)
                out[0][0][1, 0, 3] = float("nan")
                return out

        with pytest.raises(ValueError, match="logits contains NaN"):
            S.make_selector("probe_js", CFG, NaNLogits()).select([chain(9)], MASK)
    finally:
        monkeypatch.delenv("BSB_KERNELS")
        dispatch.reset()


def test_a_bound_copy_reads_through_its_own_backend_and_leaves_the_selector_as_it_was(backend):
    sel = S.make_selector("probe_js", CFG)
    twin = sel.bound_to(backend)
    assert twin.reader is backend and twin.mode == "belief_logits" and twin.config is sel.config
    assert sel.reader is None and sel.mode is None
    assert twin.select([chain(9)], MASK).forks == S.make_selector("probe_js", CFG, backend).select([chain(9)], MASK).forks
