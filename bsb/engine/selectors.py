"""Fork-point selectors: one interface over the belief reads and the baselines (§3, §3.5, [TwoStage] §5.6).

A selector scores the candidate boundaries of each finished chain and forks at the top score,
``t̂ = argmax_t s_t``. Belief-change scores are fork-before attributed: the change caused by the segment
``(t_j, t_{j+1}]`` lands on ``t_j``, so siblings re-roll exactly that segment. If a selector cannot score a
chain (no committed answer for Lens-Shift, no finite score), the chain falls back to Midpoint; a pool with a
single candidate forks there. The fallback is counted in the returned :class:`Selection`, never raised into a
training loop. A chain that cannot fork at all is returned as unforkable (``fork=None``) for the trainer to refill.

Selectors and their scores (higher forks first):

========== ==========================================================================================
probe_js   floored JS between consecutive elicited top-K beliefs (Eq. 1-2)
lens_shift Lens-Shift read-out (``shape`` | ``height`` | ``depth``) of the teacher-forced answer (Eq. 3-4)
entropy    mean sampled-token surprisal of the segment after the boundary (TreeRL-style, §3.5)
midpoint   closeness to the chain midpoint; forks at the midpoint itself
uniform    greedy farthest-point order from the midpoint: any top-B is evenly spread
random     seeded uniform scores
newline    earlier boundaries first
min_margin smallest top-1 − top-2 logit margin over token positions in a window ([TwoStage]: [4, 64))
first_gap  the first window position with margin <= 0.5, min-margin fallback ([TwoStage] FirstGap05)
bsv        projection of the boundary state on a fitted belief-shift direction (Eq. 6; pre-RL only)
llm_judge  a black-box LLM judge's 0-10 rating of the step each boundary re-rolls, from the text alone (§4)
========== ==========================================================================================
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from bsb import kernels
from bsb.engine.backend import ChainResults, cached_tokens, capabilities, require
from bsb.engine.boundaries import CandidatePool, candidate_pool
from bsb.engine.probe import SelectorConfig, read_tokens
from bsb.registry import Registry


@dataclass
class ChainInput:
    """A finished chain as a trainer has it (token ids)."""

    prompt: Sequence[int]
    response: Sequence[int]
    answer: Sequence[int] | None = None  # committed answer tokens, teacher-forced by Lens-Shift
    budget_left: int | None = None  # response tokens still allowed for a continuation


@dataclass
class ForkChoice:
    fork: int | None  # position in the response (siblings continue from response[:fork]); None: unforkable
    pool: CandidatePool
    scores: list[float]  # one per pool position (NaN where undefined)
    fallback: str = ""  # why Midpoint chose instead of the selector ("" when the selector chose)
    token_forwards: int = 0  # tokens the model processed for this chain's reads
    cached_tokens: int = 0  # prefix tokens its reads took from a cache instead (what the reader reported)


@dataclass
class Selection:
    selector: str
    choices: list[ForkChoice] = field(default_factory=list)

    @property
    def forks(self) -> list[int | None]:
        return [c.fork for c in self.choices]

    @property
    def fallbacks(self) -> int:
        return sum(bool(c.fallback) for c in self.choices)

    @property
    def unforkable(self) -> int:
        return sum(c.fork is None for c in self.choices)

    @property
    def token_forwards(self) -> int:
        return sum(c.token_forwards for c in self.choices)

    @property
    def cached_tokens(self) -> int:
        return sum(c.cached_tokens for c in self.choices)


class CannotScore(Exception):
    """A selector cannot score this chain; it falls back to Midpoint (counted)."""


class Selector:
    """Base of every selector. ``requires``: the backend capabilities its reads can use, in order of preference
    (any one suffices; empty: the selector reads no model). :meth:`bind` puts it together with the backend its reads
    go to (its :attr:`reader`, held here only) and checks them, once.

    Traits (class attributes; nothing outside this module tests a selector's name):

    * ``needs_answer``: its reads teacher-force the chain's committed answer (``ChainInput.answer``);
    * ``trainable``: it may choose the forks of RL training (False: a pre-RL validation instrument, ``untrainable``
      says why);
    * ``ranks_boundaries``: it scores candidate boundaries (False: token positions of a window; bsb evaluate's
      branching rules, not bsb validate's value curves);
    * ``needs_config``: :class:`SelectorConfig` fields it cannot do without (e.g. a fitted direction, a judge);
    * ``min_candidates``: the candidates it needs to choose between (Midpoint forks with one).

    :meth:`select` and :meth:`score` change no state of the selector (a selector serves concurrent calls, and its
    copies, :meth:`bound_to`, share what it loaded, as the verl agent loop's threads do); a selector of your own keeps
    that contract.
    """

    name = "base"
    requires: tuple[str, ...] = ()
    needs_answer: bool = False
    trainable: bool = True
    untrainable: str = ""
    ranks_boundaries: bool = True
    needs_config: tuple[str, ...] = ()
    min_candidates: int = 2

    def __init__(self, config: SelectorConfig | None = None, backend=None):
        self.config = config or SelectorConfig()
        self._reader, self.mode = None, None
        if backend is not None:
            self.bind(backend)

    def bind(self, backend) -> Selector:
        """Put the selector and the backend its reads go to together: check that the backend serves the reads (a
        clear error naming the missing capability otherwise) and choose, once, how it serves them (``self.mode``)."""
        if self.requires:
            self.mode = require(backend, f"selector {self.name!r}", *self.requires)
        self._reader = backend
        return self

    @property
    def reader(self):
        """The backend this selector's reads go to (None: not bound)."""
        return self._reader

    def bound_to(self, backend) -> Selector:
        """A copy of this selector bound to ``backend`` (its config and any loaded state shared, this one unchanged):
        one a reader, as the verl agent loop's concurrent trees each read through their own server backend."""
        return copy.copy(self).bind(backend)

    @classmethod
    def can_read(cls, backend) -> bool:
        """Whether ``backend`` (an instance or a backend class) declares what this selector's reads need (no error)."""
        caps = capabilities(backend)
        return not cls.requires or any(caps.has(c) for c in cls.requires)

    @classmethod
    def configured(cls, config: SelectorConfig) -> bool:
        """Whether ``config`` carries every field this selector needs (:attr:`needs_config`)."""
        return all(getattr(config, f) is not None for f in cls.needs_config)

    def _mode(self, backend) -> str:
        """How ``backend`` serves the reads: the bound mode for the reader; checked now for a backend handed to
        :meth:`score` directly."""
        if backend is self._reader and self.mode is not None:
            return self.mode
        return require(backend, f"selector {self.name!r}", *self.requires)

    def pool(self, chain: ChainInput, newline_mask: torch.Tensor) -> CandidatePool:
        c = self.config
        return candidate_pool(
            chain.response, newline_mask, c.max_candidates, c.range_cap, c.min_tail, chain.budget_left
        )

    def read_floor(self, chain: ChainInput, pool: CandidatePool) -> int:
        """The fewest token-forwards this selector's belief reads of ``pool`` can cost, when the chain's keys and
        values are already there: what each read must forward after its cut (0: the selector reads no belief)."""
        return 0

    def score(
        self, chain: ChainInput, pool: CandidatePool, backend, index: int, seed: int = 0
    ) -> tuple[list[float], int]:
        """Scores for ``pool.positions`` and the token-forwards spent; raise CannotScore to fall back. ``backend``: the
        backend to read with (:meth:`select` passes the :attr:`reader`); ``seed``: the call's seed (sampled reads,
        Random); ``index``: the chain's position in the call."""
        raise NotImplementedError

    def score_many(
        self, items: list[tuple[int, ChainInput, CandidatePool]], backend, seed: int = 0
    ) -> list[tuple[list[float], int] | CannotScore]:
        """Scores of several chains ``(index, chain, pool)``, or the CannotScore of each chain that has none (a
        :class:`~bsb.engine.backend.ChainResults` also carries the prefix tokens each chain's reads took from a
        cache). The default scores them one by one; a selector whose reads batch across chains overrides it."""
        out: list[tuple[list[float], int] | CannotScore] = []
        for i, chain, pool in items:
            try:
                out.append(self.score(chain, pool, backend, i, seed))
            except CannotScore as why:
                out.append(why)
        return out

    def select(
        self,
        chains: Sequence[ChainInput],
        newline_mask: torch.Tensor,
        *,
        seed: int | None = None,
        indices: Sequence[int] | None = None,
    ) -> Selection:
        """Fork choices for ``chains``, read through the :attr:`reader` bound to this selector. ``seed``: this call's
        seed (a trainer passes a fresh one per step and round; default ``config.seed``); ``indices``: each chain's
        index for its seed (``seed + index``; default its position in ``chains``), so a chain draws the same reads
        in whatever call it comes."""
        if self.requires and self._reader is None:
            require(None, f"selector {self.name!r}")  # a clear error: the selector reads the model, bind it
        seed = self.config.seed if seed is None else seed
        indices = list(range(len(chains))) if indices is None else list(indices)
        if len(indices) != len(chains):
            raise ValueError(f"{len(indices)} indices for {len(chains)} chains")
        choices: list[ForkChoice | None] = [None] * len(chains)
        items, where = [], []
        for i, chain in enumerate(chains):
            pool = self.pool(chain, newline_mask)
            if not pool.forkable:
                choices[i] = ForkChoice(None, pool, [])
            elif len(pool.positions) == 1:  # nothing to rank: every selector forks there
                choices[i] = ForkChoice(pool.positions[0], pool, [math.nan], fallback=f"one candidate ({pool.kind})")
            else:
                items.append((indices[i], chain, pool))
                where.append(i)
        results = self.score_many(items, self._reader, seed)
        for i, (_, _, pool), result, cached in zip(where, items, results, cached_tokens(results)):
            if not isinstance(result, CannotScore):
                scores, spent = result
                valid = [j for j, v in enumerate(scores) if not math.isnan(v)]
                if valid:
                    best = max(valid, key=lambda j: (scores[j], -j))  # ties: the earlier boundary
                    choices[i] = ForkChoice(
                        pool.positions[best], pool, scores, token_forwards=spent, cached_tokens=cached
                    )
                    continue
                result = CannotScore("no finite score")
            choices[i] = ForkChoice(
                _midpoint(pool, self.config),
                pool,
                [math.nan] * len(pool.positions),
                fallback=str(result),
                cached_tokens=cached,
            )
        return Selection(self.name, choices)


def _midpoint(pool: CandidatePool, config: SelectorConfig) -> int:
    """Midpoint of the chain, clamped to a valid cut (the fallback of every selector)."""
    n = pool.chain_len
    return min(max(1, n // 2), n - config.min_tail) if n - config.min_tail >= 1 else pool.positions[0]


def midpoint_scores(pool: CandidatePool) -> list[float]:
    """Each candidate's closeness to the chain's midpoint (the one midpoint ranking: Midpoint, Uniform's first pick,
    validation's fallback row)."""
    return [-abs(t - pool.chain_len / 2) for t in pool.positions]


# ---------------------------------------------------------------------------------------------- baselines


class Midpoint(Selector):
    name = "midpoint"
    min_candidates = 1

    def score(self, chain, pool, backend, index, seed=0):
        """Closeness to the chain midpoint (what :meth:`select` forks by)."""
        return midpoint_scores(pool), 0

    def select(self, chains, newline_mask, *, seed=None, indices=None) -> Selection:
        out = Selection(self.name)
        for chain in chains:
            pool = self.pool(chain, newline_mask)
            if not pool.forkable:
                out.choices.append(ForkChoice(None, pool, []))
                continue
            out.choices.append(ForkChoice(_midpoint(pool, self.config), pool, midpoint_scores(pool)))
        return out


class Uniform(Selector):
    name = "uniform"

    def score(self, chain, pool, backend, index, seed=0):
        pos = pool.positions
        order = [max(range(len(pos)), key=midpoint_scores(pool).__getitem__)]
        while len(order) < len(pos):  # next: the candidate farthest from every chosen one
            order.append(
                max(
                    (j for j in range(len(pos)) if j not in order),
                    key=lambda j: min(abs(pos[j] - pos[o]) for o in order),
                )
            )
        rank = {j: r for r, j in enumerate(order)}
        return [float(len(pos) - rank[j]) for j in range(len(pos))], 0


class Random(Selector):
    name = "random"

    def score(self, chain, pool, backend, index, seed=0):
        rng = random.Random(f"{seed}-{index}")
        return [rng.random() for _ in pool.positions], 0


class Newline(Selector):
    name = "newline"

    def score(self, chain, pool, backend, index, seed=0):
        return [float(-j) for j in range(len(pool.positions))], 0


class _TokenStatsSelector(Selector):
    """A selector scored from each chain's token statistics (surprisal, margins), every chain's read in one backend
    call (``token_stats_many``)."""

    requires = ("token_stats",)

    def from_stats(self, stats, pool) -> list[float]:
        raise NotImplementedError

    def score_many(self, items, backend, seed=0):
        stats = backend.token_stats_many([(chain.prompt, chain.response) for _, chain, _ in items]) if items else []
        return [(self.from_stats(s, pool), s.token_forwards) for (_, _, pool), s in zip(items, stats)]

    def score(self, chain, pool, backend, index, seed=0):
        return self.score_many([(index, chain, pool)], backend, seed)[0]


class Entropy(_TokenStatsSelector):
    """Segment-mean sampled-token surprisal after each boundary (TreeRL's read, adapted to the pool)."""

    name = "entropy"

    def from_stats(self, stats, pool):
        ends = pool.positions[1:] + [pool.chain_len]
        return [float(stats.surprisal[t:e].mean()) for t, e in zip(pool.positions, ends)]


class _MarginWindow(_TokenStatsSelector):
    """Token-position selectors of [TwoStage] §5.6: candidates are the positions of a window, not newlines."""

    ranks_boundaries = False

    def pool(self, chain, newline_mask):
        base = super().pool(chain, newline_mask)
        if not base.forkable:
            return base
        lo, hi = self.config.margin_window
        last = min(len(chain.response) - self.config.min_tail, hi - 1)
        positions = list(range(max(lo, 1), last + 1))
        return CandidatePool(positions, "window", len(chain.response)) if positions else base


class MinMargin(_MarginWindow):
    name = "min_margin"

    def from_stats(self, stats, pool):
        return [-float(stats.margin[t]) for t in pool.positions]


class FirstGap(_MarginWindow):
    name = "first_gap"

    def from_stats(self, stats, pool):
        margins = [float(stats.margin[t]) for t in pool.positions]
        gaps = [j for j, m in enumerate(margins) if m <= self.config.gap_threshold]
        if gaps:  # chronological: the first gap scores highest, later gaps after it
            return [float(len(margins) - gaps.index(j)) if j in gaps else -math.inf for j in range(len(margins))]
        return [-m for m in margins]  # min-margin fallback


# ---------------------------------------------------------------------------------------------- belief reads


class ProbeJS(Selector):
    """Probe-JS (§3.2): the elicited top-K answer belief after the suffix at each boundary; JS of consecutive
    beliefs, fork-before. The backend reads; ``bsb.kernels`` scores. A white-box backend returns the read logits on
    its device and the fused ``kernels.probe_js`` takes the top-K and the floored JS in one pass; a black-box engine
    returns top-K beliefs and ``kernels.probe_js_topk`` scores them. Either way the JS is averaged over the L read
    positions and lands on the earlier boundary. Every chain's scores stay on the device until one host copy."""

    name = "probe_js"
    requires = ("belief_logits", "belief_topk")

    def read_floor(self, chain, pool):
        return len(pool.positions) * read_tokens(len(self.config.suffix), self.config.read_len)  # C·(E + L − 1)

    def score(self, chain, pool, backend, index, seed=0):
        result = self.score_many([(index, chain, pool)], backend, seed)[0]
        if isinstance(result, CannotScore):
            raise result
        return result

    def score_many(self, items, backend, seed=0):
        c = self.config
        if not c.suffix:
            raise ValueError("probe_js needs SelectorConfig.suffix (the elicitation suffix token ids)")
        mode = self._mode(backend)
        live = [(i, chain, pool) for i, chain, pool in items if len(pool.positions) >= 2]
        asks = [
            (list(chain.prompt) + list(chain.response), [len(chain.prompt) + t for t in pool.positions])
            for _, chain, pool in live
        ]
        seeds = [seed + i for i, _, _ in live]
        scores, spent, status = [], [], None
        if mode == "belief_logits":
            reads = backend.probe_logits(asks, c.suffix, c.read_len, seeds)  # (C, L, V) each, on the backend's device
            if reads:
                # every chain in one fused call: rows of a chain contiguous, chain ids on the logits' device
                logits = torch.cat([lg for lg, _ in reads])
                chain_index = torch.repeat_interleave(
                    torch.arange(len(reads), device=logits.device),
                    torch.tensor([lg.shape[0] for lg, _ in reads], device=logits.device),
                )
                js, status = kernels.probe_js_deferred(logits, chain_index, min(c.top_k, logits.shape[-1]))
                scores = [js if status is None else torch.cat([js, status.to(js.dtype)[None]])]
                spent = [n for _, n in reads]
        else:
            reads = backend.probe_topk(asks, c.suffix, c.read_len, c.top_k, seeds)
            for logp, idx, n in reads:  # (C, L, k) each
                scores.append(
                    kernels.probe_js_topk(logp, idx, torch.zeros(logp.shape[0], dtype=torch.long, device=logp.device))
                )
                spent.append(n)
        flat = torch.cat(scores).tolist() if scores else []  # the one host sync of the call (scores and error status)
        if status is not None:
            kernels.raise_status(int(flat.pop()))
        scored, start = {}, 0
        for (i, _, pool), n, cached in zip(live, spent, cached_tokens(reads)):
            scored[i] = ((flat[start : start + len(pool.positions)], n), cached)
            start += len(pool.positions)
        return _per_item(items, scored, CannotScore("one boundary: no belief change to score"))


class LensShift(Selector):
    """Lens-Shift (§3.3): the committed answer's per-layer log-prob profile after the suffix at each boundary;
    change of the profile between consecutive boundaries (shape / height / depth), fork-before."""

    name = "lens_shift"
    requires = ("white_box",)
    needs_answer = True

    def read_floor(self, chain, pool):
        return len(pool.positions) * read_tokens(len(self.config.suffix), len(chain.answer or ()))  # C·(E + n − 1)

    def score(self, chain, pool, backend, index, seed=0):
        result = self.score_many([(index, chain, pool)], backend, seed)[0]
        if isinstance(result, CannotScore):
            raise result
        return result

    def score_many(self, items, backend, seed=0):
        """Every scorable chain's profiles from one batched read (``lens_profiles_many``), then the read-outs."""
        if not self.config.suffix:
            raise ValueError("lens_shift needs SelectorConfig.suffix (the elicitation suffix token ids)")
        self._mode(backend)  # a backend handed in directly: a clear error when it has no white box
        out = ChainResults([None] * len(items))
        live = []
        for k, (_, chain, pool) in enumerate(items):
            if not chain.answer:
                out[k] = CannotScore("no committed answer to teacher-force")
            elif len(pool.positions) < 2:
                out[k] = CannotScore("one boundary: no belief change to score")
            else:
                live.append(k)
        asks = []
        for k in live:
            chain, pool = items[k][1], items[k][2]
            prompt = list(chain.prompt)
            asks.append((prompt + list(chain.response), [len(prompt) + t for t in pool.positions], list(chain.answer)))
        layers = self.config.lens_layers  # the lens on those layers alone (most of the read's cost)
        picked = {} if layers is None else {"layers": list(layers)}
        reads = backend.lens_profiles_many(asks, self.config.suffix, **picked)
        for k, (profiles, spent), cached in zip(live, reads, cached_tokens(reads)):  # (C, layers) each
            out[k] = (self._readout(profiles).tolist(), spent)
            out.cached[k] = cached
        return out

    def _readout(self, profiles: torch.Tensor) -> torch.Tensor:
        """The read-out of (C, layers) profiles, of ``lens_layers`` alone where set (the backend read those)."""
        shape, height, depth = kernels.lens_readouts(profiles, self.config.lens_eps)
        return {"shape": shape, "height": height, "depth": depth}[self.config.lens_readout]


class BSV(Selector):
    """BSV (§3.4, Eq. 6): projection of the boundary's residual stream on the fitted drop direction. A frozen
    policy's validation instrument, not an RL arm (the direction goes off-policy as training moves θ)."""

    name = "bsv"
    requires = ("white_box",)
    trainable = False
    untrainable = "it is a pre-RL validation instrument (a frozen-policy direction), not an RL fork selector"
    needs_config = ("bsv_path",)

    def __init__(self, config: SelectorConfig | None = None, backend=None, direction=None):
        super().__init__(config, backend)
        if direction is None and self.config.bsv_path is None:
            raise ValueError(
                "bsv needs a fitted direction: pass direction= or SelectorConfig.bsv_path (bsb.engine.bsv.fit_bsv)"
            )
        if direction is None:  # loaded here, once: score() changes no state
            from bsb.engine.bsv import BSVDirection

            direction = BSVDirection.load(self.config.bsv_path)
        self.direction = direction

    def score(self, chain, pool, backend, index, seed=0):
        from bsb.engine.bsv import bsv_scores

        prompt = list(chain.prompt)
        prefix = prompt + list(chain.response)
        return bsv_scores(
            backend.model, prefix, [len(prompt) + t for t in pool.positions], self.direction
        ).tolist(), len(prefix)


class LLMJudge(Selector):
    """The LLM-judge baseline (§4): the chain is cut at its candidate boundaries into numbered steps, a judge model
    rates each step 0-10 from the text alone (no belief reads), and boundary j scores its step's rating. A reply that
    does not parse, an endpoint that is down, slow or failing: Midpoint (the fallback is counted, and the judge's
    ``stats`` count why). The read cost is the judge's prompt and completion tokens."""

    name = "llm_judge"
    trainable = False
    untrainable = "it is a pre-RL validation baseline (bsb validate --judge-url), not an RL fork selector"
    needs_config = ("judge", "decode")

    def __init__(self, config: SelectorConfig | None = None, backend=None):
        super().__init__(config, backend)
        if self.config.judge is None or self.config.decode is None:
            raise ValueError(
                "llm_judge needs a judge (SelectorConfig.judge: bsb.engine.judge.OpenAIJudge or LocalJudge) and "
                "SelectorConfig.decode (token ids -> text); bsb validate / demo take --judge-url and --judge-model"
            )

    def score(self, chain, pool, backend, index, seed=0):
        from bsb.engine.judge import JudgeError, judge_prompt, parse_scores

        c, response, pos = self.config, list(chain.response), pool.positions
        steps = [c.decode(response[t:e]) for t, e in zip(pos, pos[1:] + [len(response)])]
        prompt = judge_prompt(c.decode(list(chain.prompt)), c.decode(response[: pos[0]]), steps, c.judge_template)
        try:
            reply = c.judge.complete(prompt)
            scores = parse_scores(reply.text, len(steps))
        except JudgeError as err:
            c.judge.stats.failures[str(err)] += 1
            raise CannotScore(f"judge: {err}") from None
        return scores, reply.prompt_tokens + reply.completion_tokens


def _per_item(items, scored: dict, missing: CannotScore) -> ChainResults:
    """``score_many``'s answer in the order of ``items``: each index's ``(result, cached tokens)`` from ``scored``, or
    ``missing`` (nothing read, nothing cached)."""
    got = [scored.get(i, (missing, 0)) for i, _, _ in items]
    return ChainResults([r for r, _ in got], [n for _, n in got])


def _not_a_selector(obj) -> str:
    return (
        "" if isinstance(obj, type) and issubclass(obj, Selector) else "not a subclass of bsb.engine.selectors.Selector"
    )


SELECTORS: Registry[type[Selector]] = Registry("selector", _not_a_selector)
for _cls in (ProbeJS, LensShift, Entropy, Midpoint, Uniform, Random, Newline, MinMargin, FirstGap, BSV, LLMJudge):
    SELECTORS.register(_cls.name)(_cls)


def make_selector(name: str, config: SelectorConfig | None = None, backend=None) -> Selector:
    """The selector ``name`` (registered, or ``package.module:Class``); with ``backend``, bound to it (its reads
    checked once, here)."""
    return SELECTORS.get(name)(config, backend)
