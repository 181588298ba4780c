"""The [Fork] tree rollout on a scripted backend: exactly M(1+k) leaves per prompt, refills of chains that
cannot fork, siblings continuing the chosen prefix."""

import torch

from bsb.engine.selectors import SelectorConfig, make_selector
from bsb.train.rollout import TreeConfig, flat_rollout, tree_rollout

EOS, NL = 1, 7
MASK = torch.zeros(16, dtype=torch.bool)
MASK[NL] = True


class Scripted:
    """Fresh roots (requests equal to a prompt) come from a queue of scripted chains; continuations are
    [9, 9, EOS]. Records every request."""

    def __init__(self, roots):
        self.roots, self.requests = list(roots), []

    def generate(self, prompts, max_new_tokens, seed=0, temperature=1.0, top_p=1.0, eos_token_id=None):
        self.requests.append([list(p) for p in prompts])
        return [list(self.roots.pop(0)) if len(p) == 2 else [9, 9, EOS] for p in prompts]


def test_every_prompt_emits_m_times_1_plus_k_leaves_and_unforkable_chains_are_refilled():
    good = [5, 5, NL, 6, 6, NL, 4, 4, EOS]
    roots = [[EOS], good, good, [EOS]] + [good, [EOS]] + [[EOS]] * 5  # prompt 1's second chain never becomes forkable
    backend = Scripted(roots)
    cfg = TreeConfig(chains=2, siblings=2, max_response=20, max_refills=2)
    trees, times = tree_rollout([[2, 3], [2, 4]], ["a", "b"], ["1", "1"], backend, make_selector("midpoint", SelectorConfig()),
                                None, MASK, cfg, EOS, seed=0)
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
    trees, _ = flat_rollout([[2, 3], [2, 4]], ["a", "b"], ["1", "1"], backend, group_size=3, max_response=8, eos_id=EOS, seed=0)
    assert [len(t.leaves) for t in trees] == [3, 3] and all(leaf.prefix_len == 0 for t in trees for leaf in t.leaves)
