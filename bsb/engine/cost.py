"""Cost model of a tree RLVR step: token-forwards and FLOPs of rollout, probing and training (Eq. 8, App. B).

With N parameters, a forward costs 2N FLOPs per token and a forward+backward 6N, so every ratio below is a
ratio of token counts weighted by 2 or 6 (N cancels). Per step:

* T_probe = P_gen · M · C · (E + L)                  every generated prompt is probed, C candidates per chain
* T_roll  = P_gen · M · T̄ · [1 + k (1 − c)]          each chain plus its k siblings cut at fraction c
* F_probe / F_roll = T_probe / T_roll                 (per chain: C (E + L) / ([1 + k(1 − c)] T̄), Eq. 8)
* F_probe / F_step = 2 T_probe / (2 T_roll + 6 T_train + 2 T_probe)

:func:`update_share` is the update's share of the step per path and tree-packed (``update_packing``), whose token
ratio :func:`update_token_ratio` depends on where forks land (c) and on the prompt's length.

:func:`read_tokens_per_chain` prices each read design (the floor, a prefix-caching engine's block sizes, bsb's packed
forward on a trainer copy) and :func:`read_share_of_step` its share of the step.

Lens-Shift per chain: ``C·ρ·T̄/2`` token-forwards when each prefix is re-forwarded (the paper's co-located
copy), ``C·(E + n)`` with prefix reuse, and ``T̄ + C·(E + n)`` for bsb's packed prefix-shared forward, which also
forwards the chain once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The paper's arms (App. B): (domain, model, T̄ mean chain length, T_train tokens trained per step, L read length).
# Nemotron's math T̄ is inferred from its measured T_roll ≈ 660k over 8·32 chain-equivalents.
PAPER_ARMS = (
    ("math", "OLMo", 1327, 389_000, 1),
    ("math", "Qwen", 4164, 1_158_000, 1),
    ("math", "Nemotron", 660_000 / (8 * 32), 752_000, 1),
    ("code", "OLMo", 1179, 415_000, 16),
    ("code", "Qwen", 760, 312_000, 16),
    ("code", "Nemotron", 6557, 1_977_000, 16),
)


@dataclass(frozen=True)
class StepShape:
    """The inputs of the accounting (defaults: the paper's math setting, App. A-B)."""

    mean_chain_len: float  # T̄, mean response tokens per chain
    train_tokens: float = 0.0  # T_train, tokens trained per step (prompt + response of the kept rollouts)
    prompts: int = 32  # P_gen, prompts generated (and probed) per step
    chains: int = 4  # M, root chains per prompt
    siblings: int = 2  # k, siblings per fork
    cut: float = 0.5  # c, mean fork position as a fraction of the chain
    candidates: int = 16  # C, candidate boundaries scored per chain (a cap)
    suffix_len: int = 9  # E, elicitation suffix tokens
    read_len: int = 1  # L, read positions after the suffix (1 math, 16 code)

    def __post_init__(self):
        if self.mean_chain_len <= 0:
            raise ValueError(f"mean_chain_len must be > 0, got {self.mean_chain_len}")
        for name in ("prompts", "chains", "candidates", "suffix_len", "read_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.siblings < 0 or not 0.0 <= self.cut <= 1.0 or self.train_tokens < 0:
            raise ValueError("siblings must be >= 0, cut in [0, 1] and train_tokens >= 0")


def probe_tokens(s: StepShape) -> float:
    """T_probe: token-forwards of Probe-JS per step (on the engine's prefix cache)."""
    return s.prompts * s.chains * s.candidates * (s.suffix_len + s.read_len)


def rollout_tokens(s: StepShape) -> float:
    """T_roll: generated tokens per step, root chains plus siblings from the cut."""
    return s.prompts * s.chains * s.mean_chain_len * (1 + s.siblings * (1 - s.cut))


def probe_over_rollout(s: StepShape) -> float:
    """F_probe / F_roll (Eq. 8)."""
    return probe_tokens(s) / rollout_tokens(s)


def probe_over_step(s: StepShape) -> float:
    """F_probe / F_step with forward = 2N and forward+backward = 6N FLOPs per token (App. B)."""
    tp = probe_tokens(s)
    return 2 * tp / (2 * rollout_tokens(s) + 6 * s.train_tokens + 2 * tp)


def lens_tokens_per_chain(
    mean_chain_len: float,
    candidates: int,
    suffix_len: int,
    answer_len: int,
    range_cap: float = 1.0,
    mode: str = "packed",
) -> float:
    """Token-forwards of one Lens-Shift read of a chain.

    ``mode``: "reforward" (each prefix forwarded again, C·ρ·T̄/2, App. B), "prefix_reuse" (C·(E + n)) or
    "packed" (bsb: the chain once plus every suffix, T̄ + C·(E + n)).
    """
    per_suffix = candidates * (suffix_len + answer_len)
    if mode == "reforward":
        return candidates * range_cap * mean_chain_len / 2
    if mode == "prefix_reuse":
        return per_suffix
    if mode == "packed":
        return mean_chain_len + per_suffix
    raise ValueError(f"mode must be 'reforward', 'prefix_reuse' or 'packed', got {mode!r}")


# Read designs (docs/performance.md): who computes which tokens of one chain's C probe reads.
READ_DESIGNS = ("floor", "vllm_block16", "vllm_block32", "vllm_block128", "packed")


def read_tokens_per_chain(s: StepShape, design: str) -> float:
    """Token-forwards of one chain's Probe-JS reads by ``design``:

    * ``floor``: the chain's keys and values are there (kept from its generation): C·(E + L);
    * ``vllm_blockB``: a prefix-caching engine reuses whole B-token blocks of the prefix, so each probe recomputes
      on average (B − 1)/2 prefix tokens beside its suffix: C·((B − 1)/2 + E + L);
    * ``packed``: bsb's packed forward on a trainer copy forwards the chain once (to its last cut, here T̄):
      T̄ + C·(E + L).
    """
    reads = s.candidates * (s.suffix_len + s.read_len)
    if design == "floor":
        return reads
    if design == "packed":
        return s.mean_chain_len + reads
    if design.startswith("vllm_block") and design in READ_DESIGNS:
        return reads + s.candidates * (int(design.removeprefix("vllm_block")) - 1) / 2
    raise ValueError(f"design must be one of {', '.join(READ_DESIGNS)}, got {design!r}")


def read_share_of_step(s: StepShape, design: str) -> float:
    """F_read / F_step of ``design``: :func:`probe_over_step` with :func:`read_tokens_per_chain` as the reads."""
    reads = s.prompts * s.chains * read_tokens_per_chain(s, design)
    return 2 * reads / (2 * rollout_tokens(s) + 6 * s.train_tokens + 2 * reads)


STEP_FIELDS = ("probe_tokens", "tokens_generated", "tokens_trained", "probe_frac")  # what measured_shares reads


def update_token_ratio(s: StepShape, prompt_len: float = 0.0) -> float:
    """Token positions of the per-path update over the tree-packed one's, for a tree of ``s``'s shape with prompts of
    ``prompt_len`` tokens: ``M(1 + k)(P + T̄) / (P + M·T̄·(1 + k(1 − c)))`` (each leaf about T̄ long; tree-packed, the
    prompt once, each prefix c·T̄ once, each of the 1 + k continuations (1 − c)·T̄)."""
    leaves = s.chains * (1 + s.siblings)
    return (
        leaves
        * (prompt_len + s.mean_chain_len)
        / (prompt_len + s.chains * s.mean_chain_len * (1 + s.siblings * (1 - s.cut)))
    )


def update_share(s: StepShape, packing: str = "path", prompt_len: float = 0.0) -> float:
    """F_update / F_step: ``6 T_train`` (forward + backward, ``T_train`` as the per-path update counts it) over
    ``2 T_roll + 6 T_train + 2 T_probe``; tree-packed (``packing="tree"``), ``T_train`` divided by
    :func:`update_token_ratio`."""
    if packing not in ("path", "tree"):
        raise ValueError(f"packing must be 'path' or 'tree', got {packing!r}")
    train = s.train_tokens / (update_token_ratio(s, prompt_len) if packing == "tree" else 1.0)
    return 6 * train / (2 * rollout_tokens(s) + 6 * train + 2 * probe_tokens(s))


def measured_shares(rows: list[dict]) -> dict:
    """Probe overhead measured by a run, from its ``metrics.jsonl`` step rows: token-forwards of the probe reads over
    the tokens generated (the measured F_probe / F_roll), the FLOP share of the step with the same 2N / 6N weights as
    :func:`probe_over_step`, and the wall-clock share of the step spent selecting (``probe_frac``)."""
    steps = [r for r in rows if isinstance(r, dict) and "probe_tokens" in r]
    if not steps:
        raise ValueError("no training-step rows (with probe_tokens) in these metrics")
    for r in steps:  # a row that is not a step's numbers is one error naming it, not a TypeError or KeyError
        for key in (*STEP_FIELDS, *(k for k in ("probe_tokens_floor",) if k in r)):
            v = r.get(key)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ValueError(f"metrics row of step {r.get('step')!r}: {key} must be a number >= 0, got {v!r}")
    probe = sum(r["probe_tokens"] for r in steps)
    gen = sum(r["tokens_generated"] for r in steps)
    train = sum(r["tokens_trained"] for r in steps)
    floor = sum(r.get("probe_tokens_floor", 0) for r in steps)
    return {
        "steps": len(steps),
        "read_paths": sorted({r["probe_read_path"] for r in steps if isinstance(r.get("probe_read_path"), str)}),
        "probe_tokens": probe,
        "probe_floor": floor,
        "computed_over_floor": probe / floor if floor else float("nan"),  # runs before the floor was logged: nan
        "probe_over_rollout": probe / gen if gen else float("nan"),
        "probe_over_step": 2 * probe / (2 * gen + 6 * train + 2 * probe) if gen + train + probe else float("nan"),
        "time_share": sum(r["probe_frac"] for r in steps) / len(steps),
    }
