"""bsb's loss, clip fractions and GRPO standardisation against verl's own functions on the same random batches."""

import numpy as np
import pytest
import torch

from bsb.train.advantages import grpo_advantages
from bsb.train.loss import composite_loss
from bsb.train.tree import Leaf, PromptTree

core = pytest.importorskip("verl.trainer.ppo.core_algos")


class ActorCfg(dict):
    """The fields of verl's ActorConfig that compute_policy_loss_vanilla reads."""

    def __getattr__(self, name):
        return self[name]


def _batch(seed, spread):
    g = torch.Generator().manual_seed(seed)
    b, t = 6, 9
    old = torch.randn(b, t, generator=g) - 2
    logp = old + spread * torch.randn(b, t, generator=g)  # ratios up to e^(3·spread): some beyond the dual clip
    adv = torch.randn(b, 1, generator=g).expand(b, t).clone()
    mask = torch.rand(b, t, generator=g) < 0.8
    mask[:, 0] = True
    return logp, old, adv, mask


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("spread", [0.5, 2.0])
@pytest.mark.parametrize("c", [3.0, None])
def test_the_loss_and_clip_fractions_equal_verls(agg, spread, c):
    for seed in range(20):
        logp, old, adv, mask = _batch(seed, spread)
        cfg = ActorCfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=c or 1e9,
                       global_batch_info={})
        want, stats = core.compute_policy_loss_vanilla(old, logp, adv, mask.float(), agg, cfg)
        got, info = composite_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, agg=agg, clip_ratio_c=c)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert info["clip_frac"] == pytest.approx(stats["actor/pg_clipfrac"], abs=1e-6)
        assert info["clip_frac_lower"] == pytest.approx(stats["actor/pg_clipfrac_lower"], abs=1e-6)


def test_grpo_sample_std_equals_verls_grpo_advantage():
    rng = np.random.default_rng(0)
    for _ in range(30):
        rewards = rng.integers(0, 2, size=int(rng.integers(2, 9))).astype(float)
        tree = PromptTree("p", "1", [Leaf([1], [2, 3], i, 0, reward=float(r)) for i, r in enumerate(rewards)])
        got = torch.stack([a[0] for a in grpo_advantages(tree, std="sample")])
        scores = torch.zeros(len(rewards), 2)
        scores[:, -1] = torch.tensor(rewards)
        want, _ = core.compute_grpo_outcome_advantage(scores, torch.ones(len(rewards), 2), np.array(["p"] * len(rewards)),
                                                      epsilon=1e-4)
        torch.testing.assert_close(got, want[:, 0], atol=1e-5, rtol=1e-5)
