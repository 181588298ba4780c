"""The packed prefix-shared forward agrees with the paper's per-candidate re-forward on every supported family."""

import pytest
import torch

from bsb.engine import packed
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
    assert got.token_forwards == 150 + 16 * 10
    assert want.token_forwards == sum(cuts) + 16 * 10


def test_max_tokens_splits_the_suffixes_and_keeps_the_reads():
    model = tiny("qwen3", "sdpa")
    prefix, suffix = torch.randint(3, 97, (40,)), torch.randint(3, 97, (5,))
    cuts = [3, 9, 15, 22, 30, 38]
    whole = packed.packed_reads(model, prefix, cuts, suffix)
    split = packed.packed_reads(model, prefix, cuts, suffix, max_tokens=40 + 2 * 5)  # two suffixes per pass
    torch.testing.assert_close(split.read_logits, whole.read_logits, atol=2e-5, rtol=1e-5)
    assert split.token_forwards == 3 * (40 + 10) and whole.token_forwards == 40 + 30


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
        assert reads.token_forwards == len(prefix) + len(cuts) * len(suffix)
        top = torch.topk(reads.read_logits, 20).indices
        assert torch.equal(top, torch.topk(want.read_logits, 20).indices)


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
    with pytest.raises(ValueError, match="does not know model family 'gpt2'"):
        packed.packed_reads(gpt2, [1, 2, 3], [2], [4])
    assert packed.naive_reads(gpt2, [1, 2, 3], [2], [4]).read_logits.shape == (1, 50)  # the fallback works
