"""[Fork]'s tree rollout (§3.5, App. A): M root chains per prompt, one fork per chain at the selector's top
boundary, k sibling continuations from that prefix, and refills for chains that cannot fork.

Per prompt: M chains are sampled; once they have finished, the selector scores their boundaries and each
chain forks at its choice ``t``; k siblings continue ``response[:t]`` (sent as token ids, so a vLLM engine
reuses the prefix's cached KV blocks and generates only the continuation). A chain that cannot fork (under
two tokens, or no budget left) is replaced by a fresh root chain, up to ``max_refills`` rounds; one that still
cannot fork after that forks at 0, i.e. its k siblings are fresh roots sharing no prefix, and is counted. Every
prompt therefore emits exactly ``M (1 + k)`` leaves. All prompts of a step are generated together, one batched
request per phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import torch

from bsb.engine.selectors import ChainInput, Selector
from bsb.train.seeds import derive
from bsb.train.tree import Leaf, PromptTree


@dataclass(frozen=True)
class TreeConfig:
    chains: int = 4  # M, root chains per prompt
    siblings: int = 2  # k, continuations per fork
    max_response: int = 256  # response token cap of every chain and continuation
    temperature: float = 1.0
    top_p: float = 1.0
    max_refills: int = 2  # rounds of fresh root chains for chains that cannot fork

    def __post_init__(self):
        if self.chains < 1:
            raise ValueError(f"chains (M) must be >= 1, got {self.chains}")
        if self.siblings < 1:
            raise ValueError(f"siblings (k) must be >= 1, got {self.siblings}")
        if self.max_response < 3:
            raise ValueError(
                f"max_response must be >= 3 (a fork needs a prefix and a 2-token tail), got {self.max_response}"
            )


@dataclass
class RolloutTimes:
    generate_s: float = 0.0
    select_s: float = 0.0
    tokens_generated: int = 0
    probe_cached: int = 0  # prefix tokens the reads took from a cache (vLLM's prefix cache, the kept KV)
    probe_floor: int = 0  # the reads' floor: C·(E + L) a Probe-JS chain, C·(E + n) a Lens-Shift one

    def add(self, other: RolloutTimes) -> None:
        """Accumulate another round's times and counts (one process, in sequence)."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @classmethod
    def across(cls, ranks: Sequence[RolloutTimes]) -> RolloutTimes:
        """One round over data-parallel ranks: wall times are the slowest rank's, counts add up."""
        out = cls(**{f.name: sum(getattr(r, f.name) for r in ranks) for f in fields(cls)})
        out.generate_s = max(r.generate_s for r in ranks)
        out.select_s = max(r.select_s for r in ranks)
        return out


def tree_rollout(
    prompts: Sequence[list[int]],
    ids: Sequence[str],
    golds: Sequence,
    backend,
    selector: Selector,
    reads_backend,
    newline_mask: torch.Tensor,
    cfg: TreeConfig,
    eos_id: int,
    seed: int,
    answer_tokens: Callable[[list[int]], list[int] | None] | None = None,
    first: int = 0,
) -> tuple[list[PromptTree], RolloutTimes]:
    """Trees for ``prompts`` (token ids). ``answer_tokens(response)`` gives a chain's committed answer tokens for
    Lens-Shift (None when it has none). ``seed``: the round's stream; roots, refills, probes and siblings each
    derive their own from it, and every request and read is seeded by its chain's global slot (``first``: the
    global index of ``prompts[0]`` in the round), so a prompt's tree does not depend on which rank generates it."""
    times = RolloutTimes()
    gen_kw = dict(temperature=cfg.temperature, top_p=cfg.top_p, eos_token_id=eos_id)

    def generate(reqs: list[list[int]], max_new: int, s) -> list[list[int]]:
        start = time.perf_counter()
        out = backend.generate(reqs, max_new_tokens=max_new, seed=s, **gen_kw)
        times.generate_s += time.perf_counter() - start
        times.tokens_generated += sum(map(len, out))
        return out

    trees = [PromptTree(i, g) for i, g in zip(ids, golds)]
    slots = [(p, m) for p in range(len(prompts)) for m in range(cfg.chains)]  # (prompt, chain) of each root
    base = first * cfg.chains  # the global slot of slots[0]
    responses = generate([list(prompts[p]) for p, _ in slots], cfg.max_response, seed + base)
    forks: list[int | None] = [None] * len(slots)
    pending = list(range(len(slots)))
    for round_ in range(cfg.max_refills + 1):
        if round_ > 0:  # refill the chains that could not fork with fresh roots
            refill = derive(seed, "refill", round_)
            fresh = generate(
                [list(prompts[slots[s][0]]) for s in pending], cfg.max_response, [refill + base + s for s in pending]
            )
            for s, r in zip(pending, fresh):
                responses[s] = r
                trees[slots[s][0]].refills += 1
        chains = [
            ChainInput(
                prompts[slots[s][0]], responses[s], answer=answer_tokens(responses[s]) if answer_tokens else None
            )
            for s in pending
        ]
        start, cached = time.perf_counter(), getattr(reads_backend, "cached_read_tokens", 0)
        sel = selector.select(
            chains, newline_mask, reads_backend, seed=derive(seed, "probe", round_), indices=[base + s for s in pending]
        )
        times.select_s += time.perf_counter() - start
        times.probe_cached += getattr(reads_backend, "cached_read_tokens", 0) - cached
        for s, chain, choice in zip(pending, chains, sel.choices):
            forks[s] = choice.fork
            trees[slots[s][0]].fallbacks += bool(choice.fallback) and choice.fork is not None
            trees[slots[s][0]].probe_tokens += choice.token_forwards
            times.probe_floor += selector.read_floor(chain, choice.pool) if choice.token_forwards else 0
        pending = [s for s in pending if forks[s] is None]
        if not pending:
            break
    cuts = [f if f is not None else 0 for f in forks]  # a chain that never became forkable forks at 0
    reqs = [
        list(prompts[slots[s][0]]) + list(responses[s][: cuts[s]])
        for s in range(len(slots))
        for _ in range(cfg.siblings)
    ]
    budget = [cfg.max_response - cuts[s] for s in range(len(slots)) for _ in range(cfg.siblings)]
    conts = generate(reqs, max(budget), derive(seed, "siblings") + base * cfg.siblings)
    for s, (p, m) in enumerate(slots):
        tree, t = trees[p], cuts[s]
        tree.fork_positions.append(forks[s])
        tree.leaves.append(Leaf(list(prompts[p]), list(responses[s]), m, t, origin="root"))
        for j in range(cfg.siblings):
            i = s * cfg.siblings + j
            tree.leaves.append(
                Leaf(list(prompts[p]), list(responses[s][:t]) + list(conts[i][: budget[i]]), m, t, origin="sibling")
            )
    return trees, times


def flat_rollout(
    prompts: Sequence[list[int]],
    ids: Sequence[str],
    golds: Sequence[str],
    backend,
    group_size: int,
    max_response: int,
    eos_id: int,
    seed: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    first: int = 0,
) -> tuple[list[PromptTree], RolloutTimes]:
    """G independent chains per prompt (the GRPO baseline): each leaf is its own group with no shared prefix. Chain
    ``j`` of prompt ``p`` is seeded by its global slot (``first``: the global index of ``prompts[0]``)."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    times = RolloutTimes()
    start = time.perf_counter()
    out = backend.generate(
        [list(p) for p in prompts for _ in range(group_size)],
        max_new_tokens=max_response,
        seed=seed + first * group_size,
        temperature=temperature,
        top_p=top_p,
        eos_token_id=eos_id,
    )
    times.generate_s, times.tokens_generated = time.perf_counter() - start, sum(map(len, out))
    trees = []
    for p, (i, g) in enumerate(zip(ids, golds)):
        tree = PromptTree(i, g)
        tree.leaves = [Leaf(list(prompts[p]), out[p * group_size + j], j, 0) for j in range(group_size)]
        trees.append(tree)
    return trees, times
