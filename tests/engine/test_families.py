"""The family conformance suite: every declared family (bsb.engine.families), on a tiny random model built from its
real config quirks (tests/support/families.py), against transformers' own forward:

* reads (packed, or state carried from cut to cut for recurrent layers) = the per-cut re-forward, cuts beyond the
  sliding window included;
* the lens profile = the model's own final norm module and head applied to ``output_hidden_states``;
* kept-KV reads = the re-forward (where the family keeps a whole-sequence cache);
* sampled reads (L > 1) from the chain's own keys and values = every row's re-forward, the same tokens sampled;
* the tree-packed update's loss and every gradient = the per-path update's (where it runs; else the trainer's
  choice of the per-path update);
* HF generation.
docs/families.md is generated from the declarations and names these tests (checked here)."""

import copy
from pathlib import Path

import pytest
import torch
from families import CONFIGS, VOCAB, WINDOW, tiny_model

from bsb.engine import families as F
from bsb.engine.hf_backend import HFBackend
from bsb.engine.packed import naive_reads
from bsb.train.loss import response_logprobs
from bsb.train.tree_pack import tree_attention_on, tree_logprobs, tree_update_refusal

DECLARED = list(F.FAMILIES)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "families.md"


def test_every_declared_family_has_a_tiny_model_in_the_suite():
    assert set(CONFIGS) == set(DECLARED)
    assert len(DECLARED) >= 10
    for name in DECLARED:
        assert F.model_family(tiny_model(name)) == name


def _chains(g, lengths=(150, 60, 31)):
    """Chains longer than the window, cuts at 1, at the end and beyond the window, one prompt's chains sharing it."""
    prompt = torch.randint(3, VOCAB, (12,), generator=g).tolist()
    out = []
    for n in lengths:
        prefix = prompt + torch.randint(3, VOCAB, (n - 12,), generator=g).tolist()
        inner = torch.randperm(n - 2, generator=g)[:9].add(2).tolist()
        out.append((prefix, sorted({1, n, *inner})))
    return out


def _stateful_chain(cuts):
    """(tokens the chain is forwarded to, rows whose cut is one token past the last cut the chain was forwarded to:
    each carried through that token in its own row, so one token wider)."""
    done, detoured = 0, set()
    for t in sorted(set(cuts)):
        if done and t - done == 1:
            detoured.add(t)
        else:
            done = t
    return done, sum(t in detoured for t in cuts)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", DECLARED)
def test_reads_equal_the_per_cut_reforward(family, attn):
    model = tiny_model(family, attn)
    hf = HFBackend(model)
    g = torch.Generator().manual_seed(1)
    suffix, answer = torch.randint(3, VOCAB, (5,), generator=g).tolist(), torch.randint(3, VOCAB, (3,), generator=g)
    chains = _chains(g)
    assert max(len(p) for p, _ in chains) > WINDOW + 100
    probe = hf.probe_logits(chains, suffix)
    lens = hf.lens_profiles_many([(p, c, answer.tolist()) for p, c in chains], suffix)
    for (prefix, cuts), (logits, forwards), (profile, _) in zip(chains, probe, lens):
        want = naive_reads(model, prefix, cuts, suffix, answer, with_hidden=True)
        torch.testing.assert_close(logits[:, 0], want.read_logits, atol=2e-5, rtol=1e-5)
        # the prefix once (less a shared prompt), each suffix; a recurrent state is carried to a cut one token past
        # another through that token, in the suffix's row (bsb.engine.stateful: no one-token continuation)
        chain, wider = _stateful_chain(cuts) if F.plan(model).reads == "stateful" else (max(cuts), 0)
        assert forwards <= chain + len(cuts) * len(suffix) + wider
        one = hf.packed_reads(prefix, cuts, suffix, answer, with_hidden=True)
        torch.testing.assert_close(one.answer_hidden, want.answer_hidden, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(one.answer_logits, want.answer_logits, atol=2e-5, rtol=1e-5)
        assert one.token_forwards == chain + len(cuts) * (len(suffix) + 3 - 1) + wider  # E + n − 1: not the last answer token
        assert profile.shape == (len(cuts), len(model.model.layers))


@pytest.mark.parametrize("family", DECLARED)
def test_the_lens_is_the_models_own_final_norm_and_head_on_its_hidden_states(family):
    model = tiny_model(family)
    hf = HFBackend(model)
    g = torch.Generator().manual_seed(2)
    prefix = torch.randint(3, VOCAB, (40,), generator=g).tolist()
    suffix, answer = torch.randint(3, VOCAB, (4,), generator=g).tolist(), torch.randint(3, VOCAB, (3,), generator=g)
    cuts = [5, 17, 33, 40]
    profile, _ = hf.lens_profiles(prefix, cuts, suffix, answer.tolist())  # (C, layers)
    norm = getattr(model.model, F.FAMILIES[family].norm)  # the module itself, not bsb's rebuild of it
    head = model.get_output_embeddings()
    for c, t in enumerate(cuts):
        ids = torch.tensor(prefix[:t] + suffix + answer.tolist())[None]
        with torch.no_grad():
            out = model(ids, output_hidden_states=True)
        at = torch.arange(t + len(suffix) - 1, t + len(suffix) + 2)  # the positions predicting each answer token
        states = out.hidden_states[1:]  # after each layer; transformers normalises the last one already
        want = []
        for layer, h in enumerate(states):
            logits = head(norm(h[0, at])) if layer < len(states) - 1 else out.logits[0, at]
            want.append(torch.log_softmax(logits.float(), -1).gather(1, answer[:, None]).sum())
        torch.testing.assert_close(profile[c], torch.stack(want), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("family", DECLARED)
def test_kept_kv_reads_equal_the_reforward_where_the_family_keeps_its_cache(family):
    model = tiny_model(family, window=False)
    hf = HFBackend(model, keep_kv=True)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (5, 12, 8)]
    responses = hf.generate(prompts, max_new_tokens=30, temperature=1.0, seed=1, eos_token_id=None)
    assert all(3 <= len(r) <= 30 for r in responses)  # HF generation runs on every family (EOS may end a row)
    suffix = torch.randint(3, VOCAB, (4,), generator=g).tolist()
    # the last cut one before the end: the last sampled token was never forwarded, so its key is not kept
    asks = [(p + r, sorted({len(p) + 1, len(p) + len(r) // 2, len(p) + len(r) - 1})) for p, r in zip(prompts, responses)]
    got = hf.probe_logits(asks, suffix)
    assert (hf._kept is not None) == F.plan(model).kept_kv
    if F.plan(model).kept_kv:
        assert got.cached == [sum(c) for _, c in asks]  # every prefix token came from the kept cache
    for (prefix, cuts), (logits, _) in zip(asks, got):
        want = naive_reads(model, prefix, cuts, suffix)
        torch.testing.assert_close(logits[:, 0], want.read_logits, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("family", DECLARED)
def test_sampled_reads_from_the_chains_cache_equal_every_rows_reforward(family):
    """L > 1 reads start each boundary's row from one forward of the chain where the family keeps a whole-sequence
    cache, and re-forward every row's prefix otherwise (a sliding or recurrent layer); either way the logits and the
    tokens the seed samples are the re-forward's, and the token-forwards are what was computed."""
    model = tiny_model(family)  # with its window: cuts beyond it
    g = torch.Generator().manual_seed(7)
    prefix = torch.randint(3, VOCAB, (2 * WINDOW + 9,), generator=g).tolist()
    cuts, suffix, read_len = [1, WINDOW + 3, 2 * WINDOW + 8, len(prefix)], [5, 6, 7], 4
    hf = HFBackend(model)
    got, spent = hf.sampled_reads(prefix, cuts, suffix, read_len, seed=11)
    ref = HFBackend(model)
    ref._prefix_cache = lambda *_: (None, 0)  # the rows' own prefixes, forwarded in generate
    want, want_spent = ref.sampled_reads(prefix, cuts, suffix, read_len, seed=11)
    assert got.shape == (len(cuts), read_len, VOCAB)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)  # later positions: the same sampled tokens
    assert want_spent == sum(cuts) + len(cuts) * (len(suffix) + read_len - 1)
    one_forward = max(cuts) + len(cuts) * (len(suffix) + read_len - 1)
    assert spent == (one_forward if F.plan(model).kept_kv else want_spent)


def test_a_cache_that_slides_is_not_cut_and_its_forward_is_counted():
    """A family declared to keep its cache whose cache turns out to slide (here one forced on): the chain's forward
    is spent finding that out, and the rows' own prefixes are forwarded after it."""
    from dataclasses import replace

    model = tiny_model("olmo3")  # sliding layers in its tiny config
    hf = HFBackend(model)
    assert not hf.plan.kept_kv
    ref_logits, ref_spent = hf.sampled_reads(list(range(3, 3 + 2 * WINDOW)), [5, 2 * WINDOW], [4, 5], 3, seed=2)
    hf.plan = replace(hf.plan, kept_kv=True)
    logits, spent = hf.sampled_reads(list(range(3, 3 + 2 * WINDOW)), [5, 2 * WINDOW], [4, 5], 3, seed=2)
    assert spent == 2 * WINDOW + ref_spent
    torch.testing.assert_close(logits, ref_logits)


def _rows(g):
    """One prompt's tree: two fork groups (prefixes of 9 and 0 tokens) of three leaves, longer than the window."""
    prompt = torch.randint(3, VOCAB, (7,), generator=g).tolist()
    prompts, responses, prefix_lens = [], [], []
    for pre_len in (9, 0):
        pre = torch.randint(3, VOCAB, (pre_len,), generator=g).tolist()
        for tail in (30, 22, 4):
            prompts.append(prompt)
            responses.append(pre + torch.randint(3, VOCAB, (tail,), generator=g).tolist())
            prefix_lens.append(pre_len)
    return prompts, responses, prefix_lens


@pytest.mark.parametrize("family", DECLARED)
def test_the_tree_packed_update_equals_the_per_path_update_or_is_refused(family):
    model = copy.deepcopy(tiny_model(family)).train()
    g = torch.Generator().manual_seed(4)
    prompts, responses, prefix_lens = _rows(g)
    weights = torch.randn(len(prompts), max(len(r) for r in responses), generator=g)

    def loss_and_grads(run):
        model.zero_grad(set_to_none=True)
        logp, mask = run()
        loss = (logp * weights * mask).sum()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    path = loss_and_grads(lambda: response_logprobs(model, prompts, responses, 0))
    if not F.plan(model).tree_update:
        assert tree_update_refusal(model)  # the trainer updates per path and says why (test_trainer)
        return
    with tree_attention_on(model):
        tree = loss_and_grads(lambda: tree_logprobs(model, prompts, responses, prefix_lens)[:2])
    assert tree[0] == pytest.approx(path[0].item(), rel=1e-5)
    assert set(tree[1]) == set(path[1])
    for name, want in path[1].items():
        err = (tree[1][name] - want).norm().item()
        assert err <= 1e-5 * want.norm().item() + 1e-12, (name, err)


def test_gemma_scales_its_norm_by_one_plus_w_and_the_lens_reads_it():
    model = tiny_model("gemma3_text")
    parts = F.FAMILIES["gemma3_text"]
    assert parts.norm_offset == 1.0
    from bsb.engine.hf_model import lens_parts

    torch.testing.assert_close(lens_parts(model).norm_weight, model.model.norm.weight + 1)


def test_a_family_bsb_does_not_know_is_read_per_cut_and_updated_per_path():
    model = copy.deepcopy(tiny_model("llama"))
    model.config.model_type = "not_a_family"
    how = F.plan(model)
    assert (how.reads, how.lens, how.tree_update) == ("per_cut", False, False) and "not declared" in how.why
    with pytest.warns(RuntimeWarning, match="per-candidate re-forward"):
        hf = HFBackend(model)
    got = hf.probe_logits([([5, 6, 7, 8, 9], [2, 5])], [3, 4])
    want = naive_reads(model, [5, 6, 7, 8, 9], [2, 5], [3, 4])
    torch.testing.assert_close(got[0][0][:, 0], want.read_logits)


def test_a_head_with_a_softcap_is_not_taken_for_a_plain_unembedding():
    model = copy.deepcopy(tiny_model("gemma3_text"))
    model.config.final_logit_softcapping = 30.0
    assert not F.plain_unembedding(model) and not F.plan(model).lens and not F.plan(model).tree_update
    hf = HFBackend(model)
    ids = torch.randint(3, VOCAB, (20,)).tolist()
    with torch.no_grad():
        want = torch.log_softmax(model(torch.tensor([ids])).logits[0, 9:19].float(), -1)
    stats = hf.token_stats(ids[:10], ids[10:])
    torch.testing.assert_close(stats.surprisal, -want.gather(1, torch.tensor(ids[10:])[:, None])[:, 0], atol=1e-4,
                               rtol=1e-5)


def test_the_docs_table_is_generated_from_the_declarations():
    assert DOCS.read_text() == F.family_table(), "regenerate: python -m bsb.engine.families > docs/families.md"


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_a_familys_declared_recurrence_is_what_its_configs_layers_say(family):
    cls, kwargs = CONFIGS[family]
    assert F.has_recurrent_layers(cls(**kwargs)) == F.FAMILIES[family].recurrent
