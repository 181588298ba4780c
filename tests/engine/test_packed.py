"""The packed prefix-shared forward agrees with the paper's per-candidate re-forward on every supported family."""

import copy

import pytest
import torch

from bsb.engine import packed
from bsb.engine.hf_backend import HFBackend
from bsb.engine.hf_model import lens_parts
from bsb.kernels import lens_logprobs

transformers = pytest.importorskip("transformers")

COMMON = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
              num_key_value_heads=1, max_position_embeddings=512, eos_token_id=1, pad_token_id=0, bos_token_id=2)
FAMILIES = {
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),
    "qwen3": lambda: transformers.Qwen3Config(head_dim=32, **COMMON),
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "olmo2": lambda: transformers.Olmo2Config(**COMMON),
}
if hasattr(transformers, "Olmo3Config"):
    FAMILIES["olmo3"] = lambda: transformers.Olmo3Config(**COMMON)

_cache = {}


def tiny(family: str, attn: str):
    if (family, attn) not in _cache:
        cfg = FAMILIES[family]()
        cfg._attn_implementation = attn
        torch.manual_seed(0)
        _cache[family, attn] = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    return _cache[family, attn]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_packed_equals_naive_reforward(family, attn):
    model = tiny(family, attn)
    g = torch.Generator().manual_seed(1)
    prefix = torch.randint(3, 97, (150,), generator=g)  # long enough that 16 suffixes are packed
    cuts = sorted(torch.randperm(149, generator=g)[:16].add(1).tolist())
    suffix = torch.randint(3, 97, (7,), generator=g)
    answer = torch.randint(3, 97, (3,), generator=g)
    got = packed.packed_reads(model, prefix, cuts, suffix, answer, with_hidden=True)
    want = packed.naive_reads(model, prefix, cuts, suffix, answer, with_hidden=True)
    torch.testing.assert_close(got.read_logits, want.read_logits, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got.answer_logits, want.answer_logits, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got.answer_hidden, want.answer_hidden, atol=2e-5, rtol=1e-5)
    assert got.answer_hidden.shape == (3, 16, 3, 64)
    assert got.token_forwards == max(cuts) + 16 * 9  # the prefix up to the last cut, then every E + n − 1 segment
    assert want.token_forwards == sum(cuts) + 16 * 10


def test_max_tokens_splits_the_suffixes_and_keeps_the_reads():
    model = tiny("qwen3", "sdpa")
    prefix, suffix = torch.randint(3, 97, (40,)), torch.randint(3, 97, (5,))
    cuts = [3, 9, 15, 22, 30, 38]
    whole = packed.packed_reads(model, prefix, cuts, suffix)
    split = packed.packed_reads(model, prefix, cuts, suffix, max_tokens=40 + 2 * 5)  # two suffixes per pass
    torch.testing.assert_close(split.read_logits, whole.read_logits, atol=2e-5, rtol=1e-5)
    assert split.token_forwards == (9 + 10) + (22 + 10) + (38 + 10) and whole.token_forwards == 38 + 30  # to each group's last cut


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("budget", [10_000, 120])  # every chain in one forward; groups of one or two chains
def test_grouped_reads_of_several_chains_equal_each_chains_reads(attn, budget):
    model = tiny("qwen3", attn)
    g = torch.Generator().manual_seed(2)
    suffix = torch.randint(3, 97, (4,), generator=g)
    chains = []
    for length in (30, 55, 12, 80):
        prefix = torch.randint(3, 97, (length,), generator=g)
        cuts = sorted(torch.randperm(length - 1, generator=g)[: min(6, length - 1)].add(1).tolist())
        chains.append((prefix, cuts))
    got = packed.packed_reads_many(model, chains, suffix, max_tokens=budget)
    for (prefix, cuts), reads in zip(chains, got):
        want = packed.naive_reads(model, prefix, cuts, suffix)
        torch.testing.assert_close(reads.read_logits, want.read_logits, atol=2e-5, rtol=1e-5)
        assert reads.token_forwards == max(cuts) + len(cuts) * len(suffix)
        top = torch.topk(reads.read_logits, 20).indices
        assert torch.equal(top, torch.topk(want.read_logits, 20).indices)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", ["qwen3", "olmo2"])
def test_chains_of_one_prompt_forward_their_prompt_once_and_keep_their_reads(family, attn):
    model = tiny(family, attn)
    g = torch.Generator().manual_seed(3)
    suffix, answer = torch.randint(3, 97, (4,), generator=g), torch.randint(3, 97, (2,), generator=g)
    prompt, other = torch.randint(3, 97, (20,), generator=g).tolist(), torch.randint(3, 97, (9,), generator=g).tolist()
    chains = [(p + torch.randint(3, 97, (n,), generator=g).tolist(), cuts)
              for p, n, cuts in [(prompt, 30, [21, 35, 49]), (prompt, 25, [12, 25, 40]),  # a cut inside the prompt
                                 (prompt, 18, [22, 30]), (other, 14, [10, 20]), (other, 10, [5, 15])]]
    got = packed.packed_reads_many(model, [(*c, answer) for c in chains], suffix, max_tokens=10_000, with_hidden=True)
    for (prefix, cuts), reads in zip(chains, got):
        want = packed.naive_reads(model, prefix, cuts, suffix, answer, with_hidden=True)
        torch.testing.assert_close(reads.read_logits, want.read_logits, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(reads.answer_hidden, want.answer_hidden, atol=2e-5, rtol=1e-5)
    own = [49, 40 - 20, 30 - 20, 20, 15 - 9]  # each chain to its last cut, less the prompt its run's first holds
    assert [r.token_forwards for r in got] == [o + len(c) * 5 for o, (_, c) in zip(own, chains)]  # E + n − 1 a cut


def _generated(model, lengths=(5, 12, 8), new=30, seed=1):
    """A batch the HF backend generated with ``keep_kv``: (backend, prompts, responses)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 97, (n,), generator=g).tolist() for n in lengths]
    hf = HFBackend(model, keep_kv=True)
    responses = hf.generate(prompts, max_new_tokens=new, temperature=1.0, seed=seed, eos_token_id=None)
    return hf, prompts, responses


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_reads_from_the_kept_kv_equal_the_naive_reforward(family, attn):
    model = tiny(family, attn)
    hf, prompts, responses = _generated(model)
    if family == "olmo3":  # sliding-window layers keep only their window: such a cache is never kept
        assert hf._kept is None
        pytest.skip("OLMo-3 has sliding-window layers: its reads go through the packed forward")
    kv, rows, _ = hf._kept
    suffix, answer = torch.randint(3, 97, (3,)), torch.randint(3, 97, (2,))
    chains = []
    for p, r in zip(prompts, responses):
        prefix = p + r
        cuts = sorted({len(p) + 1, len(p) + 5, len(p) + 17, len(prefix) - 1})  # the last cut needs the last kept key
        chains.append((rows[tuple(prefix)], prefix, cuts, answer))
    probe = packed.cached_reads(model, kv, [c[:3] for c in chains], suffix)
    lens = packed.cached_reads(model, kv, chains, suffix, with_hidden=True, max_tokens=60)  # one chain a forward
    for (_, prefix, cuts, _), p, ln in zip(chains, probe, lens):
        want = packed.naive_reads(model, prefix, cuts, suffix, answer, with_hidden=True)
        torch.testing.assert_close(p.read_logits, want.read_logits, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(ln.read_logits, want.read_logits, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(ln.answer_logits, want.answer_logits, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(ln.answer_hidden, want.answer_hidden, atol=2e-5, rtol=1e-5)
        assert torch.equal(torch.topk(p.read_logits, 20).indices, torch.topk(want.read_logits, 20).indices)
        assert p.token_forwards == len(cuts) * 3 and ln.token_forwards == len(cuts) * 4  # C·E and C·(E + n − 1)


def test_the_kept_kv_serves_the_backends_reads_until_the_weights_change():
    model = copy.deepcopy(tiny("qwen3", "sdpa"))
    hf, prompts, responses = _generated(model)
    suffix = [5, 6]
    asks = [(p + r, [len(p) + 2, len(p) + 9]) for p, r in zip(prompts, responses)]
    asks.append((prompts[0] + responses[0][:20], [3, 8]))  # not what the call generated: packed forwards (to the last cut)
    got = hf.probe_logits(asks, suffix)
    assert [n for _, n in got] == [4, 4, 4, 8 + 4] and sum(got.cached) == sum(sum(c) for _, c in asks[:3])
    for (prefix, cuts), (logits, _) in zip(asks, got):
        want = packed.naive_reads(model, prefix, cuts, suffix).read_logits
        torch.testing.assert_close(logits[:, 0], want, atol=2e-5, rtol=1e-5)
    lens = hf.lens_profiles_many([(*a, [7, 8]) for a in asks], suffix)
    for (prefix, cuts), (profile, _) in zip(asks, lens):
        torch.testing.assert_close(profile, HFBackend(model).lens_profiles(prefix, cuts, suffix, [7, 8])[0], atol=1e-4, rtol=1e-5)
    assert [n for _, n in lens] == [6, 6, 6, 8 + 6]  # C·(E + n − 1) from the kept KV
    # the lens on chosen layers alone (the remedy's upper layers): those columns of the whole profile, in that order
    picked = hf.lens_profiles_many([(*a, [7, 8]) for a in asks], suffix, layers=[-1, 0])
    for (profile, spent), (part, part_spent) in zip(lens, picked):
        torch.testing.assert_close(part, profile[:, [-1, 0]], atol=1e-5, rtol=1e-5)
        assert part_spent == spent
    with pytest.raises(ValueError, match="lens_layers must name layers of this"):
        hf.lens_profiles_many([(*asks[0], [7, 8])], suffix, layers=[99])
    # reads build no autograd graph through the trainable unembedding (it kept every logits chunk of a 262k
    # vocabulary, 85 MB a Gemma chain, past the call)
    assert model.lm_head.weight.requires_grad and not any(profile.requires_grad for profile, _ in lens)
    with torch.no_grad():
        model.lm_head.weight.add_(0.01)  # an update: the kept keys are stale
    assert [n for _, n in hf.probe_logits(asks[:1], suffix)] == [max(asks[0][1]) + 4] and hf._kept is None


def test_a_sliding_window_cache_is_not_kept():
    """A sliding-window layer keeps only its window's keys: such a generation's cache is not kept (packed reads)."""
    if "olmo3" not in FAMILIES:
        pytest.skip("this transformers has no OLMo-3")
    cfg = transformers.Olmo3Config(**{**COMMON, "num_hidden_layers": 4, "sliding_window": 8})  # 3 sliding, 1 full
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    hf, prompts, responses = _generated(model, lengths=(5, 6), new=12)
    assert hf._kept is None
    got = hf.probe_logits([(prompts[0] + responses[0], [3])], [5, 6])
    assert got[0][1] == 3 + 2  # packed: the prefix to the cut and the suffix


def test_lens_of_the_last_layer_is_the_models_answer_log_prob():
    model = tiny("llama", "sdpa")
    prefix, suffix, answer = torch.randint(3, 97, (30,)), torch.randint(3, 97, (4,)), torch.randint(3, 97, (2,))
    reads = packed.packed_reads(model, prefix, [10, 20, 30], suffix, answer, with_hidden=True)
    parts = lens_parts(model)
    hidden = reads.answer_hidden.reshape(3, 6, 64)  # (layers, C·n, d)
    lens = lens_logprobs(hidden, parts.norm_weight, parts.unembed, answer.repeat(3), eps=parts.norm_eps)  # (layers, C·n)
    final = torch.log_softmax(reads.answer_logits, -1).gather(-1, answer.repeat(3, 1)[..., None])[..., 0].reshape(-1)
    torch.testing.assert_close(lens[-1], final, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(prefix=[], cuts=[1], suffix=[5]), "prefix is empty"),
        (dict(prefix=[4, 5, 6], cuts=[], suffix=[5]), "cuts is empty"),
        (dict(prefix=[4, 5, 6], cuts=[4], suffix=[5]), r"every cut must be in \[1, 3\]"),
        (dict(prefix=[4, 5, 6], cuts=[1], suffix=[]), "suffix is empty"),
        (dict(prefix=[4, 5, 6], cuts=[1], suffix=[5], with_hidden=True), "needs the committed answer"),
        (dict(prefix=[4, 5, 6], cuts=[1], suffix=[5, 6], max_tokens=4), "cannot hold the prefix"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        packed.packed_reads(tiny("qwen3", "sdpa"), **kwargs)


def test_unknown_family_is_a_clear_error():
    gpt2 = transformers.AutoModelForCausalLM.from_config(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    with pytest.raises(ValueError, match="model family 'gpt2' is not declared"):
        packed.packed_reads(gpt2, [1, 2, 3], [2], [4])
    assert packed.naive_reads(gpt2, [1, 2, 3], [2], [4]).read_logits.shape == (1, 50)  # the fallback works


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_packed_reads_beyond_a_sliding_window_equal_the_naive_ones(attn):
    """OLMo-3's sliding layers see only their window: the packed forward gives them a mask of their own (cuts far
    beyond the window of 8 read what separate forwards read; a single mask was off by 0.055)."""
    if "olmo3" not in FAMILIES:
        pytest.skip("this transformers has no OLMo-3")
    cfg = transformers.Olmo3Config(**{**COMMON, "num_hidden_layers": 4, "sliding_window": 8})  # 3 sliding, 1 full
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    g = torch.Generator().manual_seed(3)
    prefix, suffix, answer = (torch.randint(3, 97, (n,), generator=g) for n in (40, 5, 2))
    cuts = [4, 12, 20, 33, 40]
    got = packed.packed_reads(model, prefix, cuts, suffix, answer, with_hidden=True)
    want = packed.naive_reads(model, prefix, cuts, suffix, answer, with_hidden=True)
    torch.testing.assert_close(got.read_logits, want.read_logits, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got.answer_logits, want.answer_logits, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got.answer_hidden, want.answer_hidden, atol=2e-5, rtol=1e-5)
    many = packed.packed_reads_many(model, [(prefix, cuts, answer), (prefix[:30], [9, 25], answer)], suffix, 64)
    torch.testing.assert_close(many[0].read_logits, want.read_logits, atol=2e-5, rtol=1e-5)


def test_an_attention_layer_type_the_packed_forward_cannot_mask_is_refused():
    model = tiny("qwen3", "sdpa")
    odd = copy.deepcopy(model)
    odd.config.layer_types = ["chunked_attention"] * odd.config.num_hidden_layers
    with pytest.raises(ValueError, match="chunked_attention"):
        packed.packed_reads(odd, torch.randint(3, 97, (20,)), [5, 10], torch.randint(3, 97, (3,)))
