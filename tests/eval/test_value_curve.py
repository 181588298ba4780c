"""Monte-Carlo V*: estimates from a scripted backend, and resuming after an interruption without repeating
finished completions."""

import json

import pytest
from tiny_models import tiny_config

from bsb.eval.value_curve import CompletionStore, draw_seed, mc_values


class Scripted:
    """A backend whose completion of a prefix of length n is correct iff n is even; counts requests."""

    def __init__(self):
        self.requests = 0

    def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, eos_token_id=None):
        self.requests += len(prompts)
        return [[1 if len(p) % 2 == 0 else 0, 9] for p in prompts]


def grade(ids):
    return ids[-2] == 1, str(ids[-2])


def test_values_and_validation():
    b = Scripted()
    v = mc_values(b, [5], list(range(10, 20)), [1, 2, 3], n_mc=4, grade=grade, max_response=30, eos_id=9)
    assert v == [1.0, 0.0, 1.0] and b.requests == 12
    with pytest.raises(ValueError, match="n_mc"):
        mc_values(b, [5], [1, 2], [1], 0, grade, 30, 9)
    with pytest.raises(ValueError, match="cuts"):
        mc_values(b, [5], [1, 2], [3], 2, grade, 30, 9)
    with pytest.raises(ValueError, match="max_response"):
        mc_values(b, [5], [1, 2], [2], 2, grade, 2, 9)


def test_resume_after_interruption_repeats_nothing(tmp_path):
    path = tmp_path / "completions.jsonl"
    b = Scripted()

    def boom(n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # dies right after the first batch is written
        mc_values(b, [5], list(range(10, 30)), [1, 2, 3, 4, 5], 4, grade, 40, 9, batch_size=8, store=CompletionStore(path),
                  chain_id="c", progress=boom)
    assert b.requests == 8 and len(path.read_text().splitlines()) == 8
    with path.open("a") as f:
        f.write('{"chain": "c", "cut"')  # a line cut short by the crash
    b2 = Scripted()
    store = CompletionStore(path)
    assert len(store) == 8
    v = mc_values(b2, [5], list(range(10, 30)), [1, 2, 3, 4, 5], 4, grade, 40, 9, batch_size=8, store=store, chain_id="c")
    assert b2.requests == 12  # only the 12 unfinished completions
    assert v == [1.0, 0.0, 1.0, 0.0, 1.0]
    keys = [(r["chain"], r["cut"], r["draw"]) for r in map(json.loads, path.read_text().splitlines())]
    assert len(keys) == len(set(keys)) == 20


class SeedRecorder:
    """A backend that records each request's seed by (prefix length, request): the cut and draw it belongs to."""

    def __init__(self):
        self.seeds = []

    def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, eos_token_id=None):
        assert isinstance(seed, list) and len(seed) == len(prompts)  # one seed a completion, never an offset
        self.seeds += seed
        return [[len(p) % 2, 9] for p in prompts]


def test_each_completion_samples_from_its_own_seed_whatever_the_batching_or_a_resume(tmp_path):
    """A completion's seed is a function of (run seed, chain, cut, draw) alone: the same seeds in one batch, in
    batches of 3, and across an interruption and its resume; distinct across chains, cuts, draws and run seeds (the
    old per-chain offset gave neighbouring chains' completions the same seeds)."""
    cuts, response = [1, 2, 3, 4, 5], list(range(10, 30))

    def seeds_of(chain, seed=0, **kw):
        b = SeedRecorder()
        mc_values(b, [5], response, cuts, 4, grade, 40, 9, seed=seed, chain_id=chain, **kw)
        return b.seeds

    one = seeds_of("c", batch_size=64)
    assert one == [draw_seed(0, "c", c, j) for c in cuts for j in range(4)]
    assert seeds_of("c", batch_size=3) == one
    path = tmp_path / "completions.jsonl"

    def boom(n):
        raise KeyboardInterrupt

    first = SeedRecorder()
    with pytest.raises(KeyboardInterrupt):
        mc_values(first, [5], response, cuts, 4, grade, 40, 9, batch_size=7, store=CompletionStore(path), chain_id="c",
                  progress=boom)
    rest = seeds_of("c", batch_size=5, store=CompletionStore(path))
    assert first.seeds + rest == one
    every = one + seeds_of("d") + seeds_of("c", seed=1) + seeds_of("c#c1")
    assert len(set(every)) == len(every) and all(0 <= s < 2**63 for s in every)


def test_offset_seeding_is_the_seeds_of_runs_sampled_before_per_draw():
    """``seeding="offset"``: request k of the call starting at ``start`` of the chain's unfinished completions samples
    from ``seed + 7919 start + k`` (what a run recorded before 2026-12-07 drew with); an unknown seeding is an error."""
    class Offsets:
        def __init__(self):
            self.seeds = []

        def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, eos_token_id=None):
            assert isinstance(seed, int)
            self.seeds += [seed + k for k in range(len(prompts))]
            return [[1, 9] for _ in prompts]

    b = Offsets()
    mc_values(b, [5], list(range(10, 30)), [1, 2, 3], 4, grade, 40, 9, seed=14, batch_size=5, seeding="offset")
    assert b.seeds == [14 + 7919 * start + k for start in (0, 5, 10) for k in range(5 if start < 10 else 2)]
    with pytest.raises(ValueError, match="seeding must be one of per-draw, offset"):
        mc_values(b, [5], [1, 2], [1], 2, grade, 30, 9, seeding="clock")


def test_an_offset_run_extended_past_its_draws_seeds_the_new_ones_by_draw():
    """An offset-seeded run with 4 draws a boundary, extended to 6: the first extension call's offsets would repeat
    the first call's seeds on the same prefixes (a copy of each old draw); past ``offset_draws`` each new draw takes
    its own hashed seed, the unfinished old ones keep their offsets, and a call of old draws alone passes one int."""
    class Recorder:
        def __init__(self):
            self.calls = []

        def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, eos_token_id=None):
            self.calls.append(seed)
            return [[1, 9] for _ in prompts]

    store = CompletionStore()
    first = Recorder()
    mc_values(first, [5], list(range(10, 30)), [1, 2, 3], 4, grade, 40, 9, seed=14, batch_size=64, store=store,
              seeding="offset", offset_draws=4)
    assert first.calls == [14]  # the recorded run: one call, offsets 14..25
    del store.done[("chain", 3, 3)]  # one old draw unfinished
    again = Recorder()
    mc_values(again, [5], list(range(10, 30)), [1, 2, 3], 6, grade, 40, 9, seed=14, batch_size=64, store=store,
              seeding="offset", offset_draws=4)
    (seeds,) = again.calls
    new = [(c, j) for c in (1, 2, 3) for j in (4, 5)]
    todo = sorted([(3, 3), *new])  # the order mc_values asks in: by cut, then draw
    assert seeds == [14 + k if (c, j) == (3, 3) else draw_seed(14, "chain", c, j) for k, (c, j) in enumerate(todo)]
    fresh = [x for x, cj in zip(seeds, todo) if cj != (3, 3)]
    assert len(set(seeds)) == len(seeds) and not set(fresh) & set(range(14, 14 + 12))  # no old offset for a new draw


def test_a_corrupt_store_is_an_error(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("not json\n{}\n")
    with pytest.raises(ValueError, match="c.jsonl:1"):
        CompletionStore(path)
    good = {"chain": "a", "cut": 3, "draw": 0, "correct": False, "answer": "7"}
    for bad in ({"correct": "false"}, {"cut": "3"}, {"draw": -1}, {"chain": 5}, {"answer": None}, {"cut": True}):
        path.write_text(json.dumps(good) + "\n" + json.dumps({**good, **bad}) + "\n")
        with pytest.raises(ValueError, match="c.jsonl:2: not a completion record"):  # never a silent true or a redraw
            CompletionStore(path)
    path.write_text(json.dumps(good) + "\n")
    assert CompletionStore(path).done == {("a", 3, 0): False}


def test_the_belief_counts_every_token_that_closes_the_answer():
    """With closers, the last factor is the summed probability of every token that may close the answer: the belief
    equals the sum of the beliefs in each closed answer, and the plain belief is one of its terms."""
    import torch
    import transformers

    from bsb.engine.hf_backend import HFBackend
    from bsb.eval.value_curve import answer_belief

    torch.manual_seed(0)
    hf = HFBackend(transformers.Qwen3ForCausalLM(tiny_config("xs", eos_token_id=1, pad_token_id=0)).eval())
    args = ([3, 4, 5], [6, 7, 8, 9, 10], [1, 3, 5], [11, 12])
    answer, closers = [13, 14], [14, 15, 16]
    both = answer_belief(hf, *args, answer, closers)
    each = [answer_belief(hf, *args, [13, c]) for c in closers]
    assert both == pytest.approx([sum(x) for x in zip(*each)], rel=1e-5)
    assert all(b > p for b, p in zip(both, answer_belief(hf, *args, answer)))


def test_a_boxed_answers_closers_include_the_brace_merged_with_what_follows():
    """SmolLM2 writes ``\\boxed{4}.`` as ``4`` then ``}.``: the gold ``4}`` is closed by ``}`` or ``}.``."""
    from types import SimpleNamespace

    from real_models import real_model
    from transformers import AutoTokenizer

    from bsb.eval.session import Session

    tok = AutoTokenizer.from_pretrained(real_model("smollm2-135m"))
    gold = tok.encode("4}", add_special_tokens=False)
    closers = Session.closing_ids(SimpleNamespace(tok=tok), gold)
    merged = tok.encode("4}.", add_special_tokens=False)[-1]
    assert gold[-1] in closers and merged in closers and tok.encode("4", add_special_tokens=False)[0] not in closers


def test_an_offset_run_extended_stopped_and_resumed_never_repeats_a_seed_on_a_prefix(tmp_path):
    """The draws an offset run began with are kept in its sampling.json the first time it goes on (not inferred
    again from a store that an interrupted extension has grown), so every new draw of every chain, before and after
    the stop, gets its own seed: no (prefix, seed) pair is sampled twice."""
    import json

    from bsb.commands.validate import _offset_draws

    class Recorder:
        def __init__(self):
            self.asked = []

        def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, eos_token_id=None):
            seeds = seed if isinstance(seed, list) else [seed + k for k in range(len(prompts))]
            self.asked += [(len(p), s) for p, s in zip(prompts, seeds)]
            return [[1, 9] for _ in prompts]

    (tmp_path / "sampling.json").write_text(json.dumps({"seed": 0}))  # recorded before the seeding key
    store, b = CompletionStore(tmp_path / "completions.jsonl"), Recorder()
    chains = {"a": 14, "b": 21}  # each chain's offset seed

    def run(n_mc, only=None):
        began = _offset_draws(tmp_path, store, n_mc)
        for chain, seed in chains.items():
            if only is None or chain in only:
                mc_values(
                    b,
                    [5],
                    list(range(10, 30)),
                    [1, 2, 3],
                    n_mc,
                    grade,
                    40,
                    9,
                    seed=seed,
                    store=store,
                    chain_id=chain,
                    seeding="offset",
                    offset_draws=began,
                )
        return began

    assert run(4) == 4 and json.loads((tmp_path / "sampling.json").read_text())["offset_draws"] == 4
    assert run(6, only={"a"}) == 4  # the extension stops after chain a
    assert run(6) == 4  # resumed: chain b's new draws are still past the 4 it began with
    by_chain = {}
    for chain, _cut, draw in store.done:
        by_chain.setdefault(chain, set()).add(draw)
    assert by_chain == {"a": set(range(6)), "b": set(range(6))}
    assert len(set(b.asked)) == len(b.asked) == 2 * 3 * 6  # no prefix sampled twice from one seed
    (tmp_path / "sampling.json").write_text(json.dumps({"seed": 0, "offset_draws": 0}))
    with pytest.raises(ValueError, match="offset_draws 0 is not a count of draws"):
        _offset_draws(tmp_path, store, 4)
    empty = tmp_path / "fresh"
    empty.mkdir()
    (empty / "sampling.json").write_text("{}")
    assert _offset_draws(empty, CompletionStore(), 8) == 8  # nothing sampled yet: the draws it asks for
