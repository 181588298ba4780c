"""The probe options are declared once: SelectorConfig is ProbeConfig resolved (every probe field, its facts
included), resolve() carries each option into it, and ProbeConfig's facts are checked for each config that inherits
it."""

import dataclasses

import pytest

from bsb.engine.probe import ProbeConfig, SelectorConfig, check_against_model, resolve
from bsb.tasks.registry import make_task


class Words:
    """A tokenizer stand-in: one id per character."""

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


def test_selector_config_is_the_probe_config_resolved():
    probe = {f.name: f for f in dataclasses.fields(ProbeConfig)}
    own = {f.name: f for f in dataclasses.fields(SelectorConfig)}
    assert issubclass(SelectorConfig, ProbeConfig) and set(probe) <= set(own)
    for name, f in probe.items():  # the same facts (read_len narrowed to a number: its default only differs)
        assert own[name].metadata == f.metadata, name
    assert SelectorConfig().read_len == 1 and ProbeConfig().read_len is None


def test_resolve_carries_every_probe_option():
    probe = ProbeConfig(max_candidates=7, range_cap=0.5, probe_suffix="ab", top_k=5, lens_readout="depth",
                        lens_layers=[0, -1], lens_eps=0.2, margin_window=[2, 9], gap_threshold=0.25)
    task = make_task("walk")
    cfg = resolve(probe, task, Words(), seed=3)
    for f in dataclasses.fields(ProbeConfig):
        if f.name != "read_len":
            assert getattr(cfg, f.name) == getattr(probe, f.name), f.name
    assert cfg.read_len == task.read_len and cfg.suffix == [97, 98] and cfg.seed == 3
    assert resolve(ProbeConfig(read_len=4), task, Words()).suffix == Words().encode(task.probe_suffix)
    assert resolve(ProbeConfig(read_len=4), task, Words()).read_len == 4


@pytest.mark.parametrize("kw,message", [(dict(top_k=0), "top_k must be >= 1, got 0"),
                                        (dict(range_cap=0.0), r"range_cap must be in \(0, 1\]"),
                                        (dict(read_len=None), "resolve None against the task"),
                                        (dict(lens_eps=1.0), r"lens_eps must be in \(0, 1\)"),
                                        (dict(lens_layers=[]), "lens_layers must be a non-empty list"),
                                        (dict(probe_suffix=""), "probe_suffix must be non-empty")])
def test_a_selector_config_checks_the_probe_facts(kw, message):
    with pytest.raises(ValueError, match=message):
        SelectorConfig(**kw)


def test_the_model_bounds_top_k_and_the_lens_layers():
    check_against_model(ProbeConfig(top_k=256, lens_layers=[0, -2]), vocab_size=256, n_layers=2)
    with pytest.raises(ValueError, match="top_k = 257 exceeds the model's vocabulary of 256"):
        check_against_model(ProbeConfig(top_k=257), vocab_size=256, n_layers=2)
    with pytest.raises(ValueError, match=r"lens_layers \[2, -3\] are not layers of this 2-layer model"):
        check_against_model(ProbeConfig(lens_layers=[0, 2, -3]), vocab_size=256, n_layers=2)
