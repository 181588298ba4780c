"""[TwoStage]'s two-stage samplers on a scripted finite policy: exact leaf marginals by enumeration."""

import itertools

import pytest
import torch

from bsb.engine.backend import request_budgets
from bsb.train.sampling import Sampling
from bsb.train.tree_options import TreeOptions
from bsb.train.two_stage import TwoStageConfig, causal_tau, two_stage_rollout

EOS, NL, A = 1, 7, 5
MASK = torch.zeros(10, dtype=torch.bool)
MASK[NL] = True
PROMPT = [3, 3]
ONE_ROOT = TreeOptions(chains=1, siblings=2)  # K = 1 root, B = 2 branches
LONG = [A] * 48 + [NL] + [A] * 20  # a root that reaches its causal stop at τ = 49


class FinitePolicy:
    """A fresh root emits EOS at once with probability 1/2 (coin 1) and otherwise the long chain (coin 0);
    a continuation of a non-empty prefix is deterministic. The coins come from a script, so every outcome can
    be enumerated with its exact probability."""

    def __init__(self, coins):
        self.coins = iter(coins)

    def generate(self, prompts, max_new_tokens, seed=0, temperature=1.0, top_p=1.0, eos_token_id=None):
        out = []
        for p, budget in zip(prompts, request_budgets(max_new_tokens, len(prompts))):
            if len(p) == len(PROMPT):
                out.append([EOS] if next(self.coins) else list(LONG))
            else:
                out.append([A, A, EOS])
            out[-1] = out[-1][:budget]
        return out


def marginals(rule, flips=2):
    cfg = TwoStageConfig(t_min=40, t_max=60, early_eos=rule)
    p_eos, prefixes = [0.0, 0.0], set()
    for coins in itertools.product([0, 1], repeat=flips):
        leaves, census = two_stage_rollout(FinitePolicy(coins).generate, PROMPT, ONE_ROOT, cfg, Sampling(100), MASK, EOS)
        assert len(leaves) == 2 and sum(census.values()) == 1
        for b, leaf in enumerate(leaves):
            p_eos[b] += (leaf.response == [EOS]) / 2**flips
        prefixes.add(tuple(leaf.prefix_len for leaf in leaves))
    return tuple(p_eos), prefixes


def test_terminal_dup_keeps_the_exact_leaf_marginals():
    p, prefixes = marginals("terminal_dup")
    assert p == (0.5, 0.5)
    assert prefixes == {(1, 1), (49, 49)}


def test_root_resample_biases_the_second_branch():
    p, prefixes = marginals("root_resample")
    assert p == (0.5, 0.25)
    assert prefixes == {(0, 0), (49, 49)}


def test_causal_tau_and_midpoint_fallback():
    assert causal_tau(LONG, MASK, 40, 60) == 49
    assert causal_tau([A] * 70, MASK, 40, 60) == 60  # no line break in range: T_max
    assert causal_tau([NL] + [A] * 70, MASK, 40, 60) == 60  # a line break before T_min does not stop
    early = [A] * 10 + [NL] + [A] * 9 + [NL] + [A] * 9 + [EOS]  # 31 tokens, EOS before τ
    cfg = TwoStageConfig(t_min=40, t_max=60, early_eos="midpoint_fallback", min_split=16)

    def gen(prompts, max_new_tokens, **kw):
        return [list(early) if len(p) == len(PROMPT) else [A, EOS] for p in prompts]

    leaves, census = two_stage_rollout(gen, PROMPT, ONE_ROOT, cfg, Sampling(100), MASK, EOS)
    assert census["midpoint_fallback"] == 1
    assert leaves[0].response == early and leaves[0].prefix_len == 11  # the line break nearest the middle
    assert leaves[1].response == early[:11] + [A, EOS] and leaves[1].prefix_len == 11


def test_bad_configs():
    with pytest.raises(ValueError, match="early_eos"):
        TwoStageConfig(early_eos="restart")
    assert TwoStageConfig(t_min=40, t_max=60).problem(100) is None
    for t_min, t_max, cap in ((200, 100, 512), (0, 60, 100), (40, 100, 100)):  # out of order, T_min 0, T_max at the cap
        why = TwoStageConfig(t_min=t_min, t_max=t_max).problem(cap)
        assert why == f"two_stage needs 1 <= two_stage_t_min <= two_stage_t_max < max_response_len, got {t_min}, {t_max}, {cap}"
        with pytest.raises(ValueError, match="two_stage needs"):  # the rollout refuses them too, before generating
            two_stage_rollout(lambda *a, **k: pytest.fail("generated"), PROMPT, ONE_ROOT, TwoStageConfig(t_min, t_max),
                              Sampling(cap), MASK, EOS)
