"""The probe and candidate options, declared once: :class:`ProbeConfig`, and what a selector reads of them.

``bsb train``'s :class:`~bsb.train.config.TrainConfig`, the verl plugin's ``bsb:`` settings and the offline commands'
:class:`~bsb.eval.session.OfflineConfig` all inherit these fields (flat, so ``--set top_k=10``, ``bsb.top_k=10`` and
``bsb validate --top-k 10`` keep working). Each field carries its own facts (choices, bounds, size limit), which
:func:`bsb.fields.check_values` checks for every config; :meth:`ProbeConfig.probe_problems` holds the rules the facts
cannot say, and :func:`check_against_model` the ones that need the model (train and the offline session call it once
the model is loaded). :func:`resolve` turns the options, a task and a tokenizer into the :class:`SelectorConfig` a
selector reads with (a ProbeConfig resolved: "None: the task's" is decided here only), and :func:`answer_tokens` is
the committed-answer reader Lens-Shift teacher-forces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bsb.fields import help_field, value_problems
from bsb.tasks.base import hook

LENS_READOUTS = ("shape", "height", "depth")
MARGIN_WINDOW = (4, 64)  # [TwoStage] §5.6: zero-based token positions searched by min_margin / first_gap


@dataclass
class ProbeConfig:
    """How candidate boundaries are chosen and read (defaults: [Fork] App. A)."""

    max_candidates: int = help_field(16, "C, candidate boundaries scored per chain", ge=1, size_limit=65536)
    range_cap: float = help_field(
        1.0, "ρ, score only the first ρ of each chain (0.5 on base models, 1 on SFT models)", gt=0, le=1
    )
    probe_suffix: str | None = help_field(None, "elicitation suffix of Probe-JS / Lens-Shift; None: the task's")
    read_len: int | None = help_field(
        None, "L, Probe-JS read positions after the suffix (1 math, 16 code); None: the task's", ge=1, size_limit=65536
    )
    top_k: int = help_field(20, "K of the Probe-JS belief", ge=1, size_limit=1_000_000)
    lens_readout: str = help_field("shape", "Lens-Shift read-out: shape | height | depth", choices=LENS_READOUTS)
    lens_layers: list[int] | None = help_field(
        None, "decoder layers in the Lens-Shift profile (e.g. the full-attention ones); None: all"
    )
    lens_eps: float = help_field(0.1, "ε of the Lens-Shift lock-in layer (depth read-out)", gt=0, lt=1)
    margin_window: list[int] = help_field(
        list(MARGIN_WINDOW), "zero-based token positions [lo, hi) searched by min_margin / first_gap"
    )
    gap_threshold: float = help_field(0.5, "Δz threshold of first_gap")

    def probe_problems(self) -> list[str]:
        """Every invalid probe value the fields' own facts do not cover (those: :func:`bsb.fields.value_problems`),
        one message each (empty: valid)."""
        out = []
        window, layers = self.margin_window, self.lens_layers
        if (
            not isinstance(window, list | tuple)
            or len(window) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) for x in window)
            or not 0 <= window[0] < window[1]
        ):
            out.append(f"margin_window must be [lo, hi) with 0 <= lo < hi, got {window}")
        if layers is not None and (
            not isinstance(layers, list | tuple)
            or not layers
            or any(isinstance(x, bool) or not isinstance(x, int) for x in layers)
        ):
            out.append(f"lens_layers must be a non-empty list of layer indices (or None: all), got {layers!r}")
        if self.probe_suffix is not None and not self.probe_suffix:
            out.append("probe_suffix must be non-empty (or None: the task's)")
        return out


_PROBE_FIELDS = {f.name: f for f in dataclasses.fields(ProbeConfig)}


@dataclass
class SelectorConfig(ProbeConfig):
    """What a selector reads: the options of :class:`ProbeConfig` resolved against a task and a tokenizer
    (:func:`resolve`), and what some selectors need beside them. Invalid values are one ``ValueError``."""

    # L itself, the probe's field narrowed to a number: resolve() puts in the task's where the probe says None
    read_len: int = dataclasses.field(default=1, metadata=_PROBE_FIELDS["read_len"].metadata)
    suffix: Sequence[int] = ()  # the elicitation suffix as token ids (Probe-JS, Lens-Shift)
    min_tail: int = 2  # tokens a sibling re-rolls at least
    seed: int = 0  # base seed of the Random selector and of sampled reads (L > 1) when select() gets none
    bsv_path: str | None = None  # a saved BSVDirection (bsv selector; pre-RL validation only)
    judge: object | None = None  # llm_judge: a bsb.engine.judge client (OpenAIJudge or LocalJudge)
    judge_template: str | None = None  # llm_judge: a prompt template file (default: bsb/engine/judge_prompt.txt)
    decode: Callable[[list[int]], str] | None = None  # llm_judge: token ids -> text (the judge reads text)

    def __post_init__(self):
        problems = value_problems(self) + self.probe_problems()
        if self.read_len is None:
            problems.append("read_len must be >= 1 (resolve None against the task: bsb.engine.probe.resolve)")
        if problems:
            raise ValueError("; ".join(problems))


def read_tokens(suffix_len: int, read_len: int) -> int:
    """Tokens one belief read of a cut forwards beyond the cut's cached prefix: the suffix (E), then the read's own
    L - 1 tokens (Probe-JS's sampled read tokens, or a Lens-Shift answer but its last token): the suffix's last
    position gives the first read. A chain's read floor is C of them, C·(E + L - 1); the one place that says so."""
    return suffix_len + max(read_len - 1, 0)


def check_against_model(config: ProbeConfig, vocab_size: int, n_layers: int) -> None:
    """The probe values that depend on the model, checked once it is known: ``top_k`` within the vocabulary and
    ``lens_layers`` among its decoder layers (one error before any training or reading)."""
    if config.top_k > vocab_size:
        raise ValueError(f"invalid config: top_k = {config.top_k} exceeds the model's vocabulary of {vocab_size}")
    bad = [x for x in config.lens_layers or [] if not -n_layers <= x < n_layers]
    if bad:
        raise ValueError(f"invalid config: lens_layers {bad} are not layers of this {n_layers}-layer model")


def resolve(probe: ProbeConfig, task, tokenizer, **extra) -> SelectorConfig:
    """The :class:`SelectorConfig` of ``probe`` (any ProbeConfig, e.g. a TrainConfig) on ``task`` with
    ``tokenizer``: its probe options, the suffix (the probe's or the task's) as token ids and the read length (the
    probe's or the task's); ``extra``: the fields only selectors have (``seed``, ``bsv_path``, ``judge``,
    ``decode``)."""
    options = {name: getattr(probe, name) for name in _PROBE_FIELDS}
    options.update(
        suffix=tokenizer.encode(probe.probe_suffix or task.probe_suffix, add_special_tokens=False),
        read_len=probe.read_len or task.read_len,
        margin_window=list(probe.margin_window),
    )
    return SelectorConfig(**options, **extra)


def answer_ids(task, tokenizer, text: str) -> list[int] | None:
    """The committed answer of a decoded response as token ids (what Lens-Shift teacher-forces: at most the task's
    ``answer_len`` first tokens), or None."""
    ans = task.answer_span(text)
    ids = tokenizer.encode(ans, add_special_tokens=False)[: hook(task, "answer_len")] if ans else []
    return ids or None


def answer_tokens(task, tokenizer) -> Callable[[list[int]], list[int] | None]:
    """:func:`answer_ids` of a response given as token ids."""
    return lambda response: answer_ids(task, tokenizer, tokenizer.decode(response, skip_special_tokens=True))
