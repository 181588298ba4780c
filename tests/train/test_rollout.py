"""The [Fork] tree rollout on a scripted backend: exactly M(1+k) leaves per prompt, refills of chains that
cannot fork, siblings continuing the chosen prefix."""

import pytest
import torch

from bsb.engine.backend import Capabilities, ChainResults
from bsb.engine.selectors import SelectorConfig, make_selector
from bsb.kernels.reference import topk_logprobs
from bsb.train.rollout import flat_rollout, tree_rollout
from bsb.train.sampling import Sampling
from bsb.train.tree_options import TreeOptions

EOS, NL = 1, 7
MASK = torch.zeros(16, dtype=torch.bool)
MASK[NL] = True


class Scripted:
    """Fresh roots (requests equal to a prompt) come from a queue of scripted chains; continuations are
    [9, 9, EOS]. Records every request."""

    def __init__(self, roots):
        self.roots, self.requests, self.budgets = list(roots), [], []

    def generate(self, prompts, max_new_tokens, seed=0, temperature=1.0, top_p=1.0, eos_token_id=None):
        self.requests.append([list(p) for p in prompts])
        self.budgets.append(max_new_tokens)
        return [list(self.roots.pop(0)) if len(p) == 2 else [9, 9, EOS] for p in prompts]


def test_every_prompt_emits_m_times_1_plus_k_leaves_and_unforkable_chains_are_refilled():
    good = [5, 5, NL, 6, 6, NL, 4, 4, EOS]
    roots = [[EOS], good, good, [EOS]] + [good, [EOS]] + [[EOS]] * 5  # prompt 1's second chain never becomes forkable
    backend = Scripted(roots)
    cfg = TreeOptions(chains=2, siblings=2, max_refills=2)
    trees, times = tree_rollout([[2, 3], [2, 4]], ["a", "b"], ["1", "1"], backend, make_selector("midpoint", SelectorConfig()),
                                MASK, cfg, Sampling(20), EOS, seed=0)
    for tree in trees:
        assert len(tree.leaves) == 2 * (1 + 2)
    a, b = trees
    assert a.refills == 1 and a.fork_positions[0] is not None and b.refills == 2
    assert b.fork_positions[1] is None  # never forkable: forked at 0, its siblings are fresh roots of the prompt
    assert [leaf.prefix_len for leaf in b.leaves if leaf.group == 1] == [0, 0, 0]
    for tree in trees:  # siblings share the chosen prefix of their chain and continue it
        for idx in tree.groups().values():
            root = tree.leaves[idx[0]]
            for i in idx[1:]:
                assert tree.leaves[i].response[: root.prefix_len] == root.response[: root.prefix_len]
                assert tree.leaves[i].origin == "sibling"
    assert times.tokens_generated > 0


def test_flat_rollout_groups():
    backend = Scripted([[5, EOS]] * 6)
    trees, _ = flat_rollout([[2, 3], [2, 4]], ["a", "b"], ["1", "1"], backend, group_size=3, sampling=Sampling(8), eos_id=EOS, seed=0)
    assert [len(t.leaves) for t in trees] == [3, 3] and all(leaf.prefix_len == 0 for t in trees for leaf in t.leaves)


class CachedReads:
    """A top-k reader that reports, per chain, its read positions' prefixes as served from its cache."""

    capabilities = Capabilities(generate=False, belief_topk=True)

    def probe_topk(self, asks, suffix, read_len=1, k=20, seeds=None):
        out = [(*topk_logprobs(torch.randn(len(cuts), 1, 16), k), len(cuts)) for _, cuts in asks]
        return ChainResults(out, cached=[sum(cuts) for _, cuts in asks])


def test_the_cached_read_tokens_are_what_the_selections_report():
    good = [5, 5, NL, 6, 6, NL, 4, 4, EOS]  # candidates 3 and 6: read at 2 + 3 and 2 + 6 after the 2-token prompt
    sel = make_selector("probe_js", SelectorConfig(suffix=[11], top_k=4), CachedReads())
    _, times = tree_rollout([[2, 3], [2, 4]], ["a", "b"], ["1", "1"], Scripted([good] * 4), sel, MASK,
                            TreeOptions(chains=2, siblings=1), Sampling(20), EOS, seed=0)
    assert times.probe_cached == 4 * (5 + 8)


def test_each_sibling_decodes_to_its_own_budget():
    """Siblings of a fork at t ask for max_response - t tokens each, not the batch's largest budget."""
    good = [5, 5, NL, 6, 6, NL, 4, 4, EOS]
    early = [5, 5, 5, 5, 5, 5, 5, NL, 6, 6, 6, 6, 6, 6, 6, NL, 4, 4, EOS]
    backend = Scripted([good, early])
    cfg = TreeOptions(chains=2, siblings=2)
    (tree,), _ = tree_rollout([[2, 3]], ["a"], ["1"], backend, make_selector("midpoint", SelectorConfig()), MASK, cfg,
                              Sampling(20), EOS, seed=0)  # fmt: skip
    cuts = tree.fork_positions
    assert backend.budgets[0] == 20 and backend.budgets[-1] == [20 - cuts[0]] * 2 + [20 - cuts[1]] * 2
    assert cuts[0] != cuts[1]


@pytest.mark.parametrize("shape, what", [(TreeOptions(chains=0), "chains must be >= 1, got 0"),
                                         (TreeOptions(siblings=0), "siblings must be >= 1, got 0"),
                                         (TreeOptions(max_refills=-1), "max_refills must be >= 0")])
def test_a_tree_the_caller_built_out_of_bounds_is_refused_before_generating(shape, what):
    """The rollouts hold a hand-built TreeOptions to its fields' own bounds (a config's are checked at start)."""
    from bsb.train.two_stage import TwoStageConfig, two_stage_rollout

    never = Scripted([])
    with pytest.raises(ValueError, match=f"invalid tree: {what}"):
        tree_rollout([[2, 3]], ["a"], ["1"], never, make_selector("midpoint", SelectorConfig()), MASK, shape,
                     Sampling(20), EOS, seed=0)
    with pytest.raises(ValueError, match=f"invalid tree: {what}"):
        two_stage_rollout(never.generate, [2, 3], shape, TwoStageConfig(4, 8), Sampling(20), MASK, EOS)
