"""The probe and candidate options, declared once: :class:`ProbeConfig`.

``bsb train``'s :class:`~bsb.train.config.TrainConfig`, the verl plugin's ``bsb:`` settings and the offline commands
all inherit these fields (flat, so ``--set top_k=10`` and ``bsb.top_k=10`` keep working), and every value is checked
here, once (:meth:`ProbeConfig.probe_problems`). :func:`resolve` turns them, a task and a tokenizer into the
:class:`~bsb.engine.selectors.SelectorConfig` a selector reads with ("None: the task's" is decided here only), and
:func:`answer_tokens` is the committed-answer reader Lens-Shift teacher-forces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bsb.engine.selectors import MARGIN_WINDOW, SelectorConfig, probe_value_problems
from bsb.fields import help_field


@dataclass
class ProbeConfig:
    """How candidate boundaries are chosen and read (defaults: [Fork] App. A)."""

    max_candidates: int = help_field(16, "C, candidate boundaries scored per chain")
    range_cap: float = help_field(1.0, "ρ, score only the first ρ of each chain (0.5 on base models, 1 on SFT models)")
    probe_suffix: str | None = help_field(None, "elicitation suffix of Probe-JS / Lens-Shift; None: the task's")
    read_len: int | None = help_field(
        None, "L, Probe-JS read positions after the suffix (1 math, 16 code); None: the task's"
    )
    top_k: int = help_field(20, "K of the Probe-JS belief")
    lens_readout: str = help_field("shape", "Lens-Shift read-out: shape | height | depth")
    lens_layers: list | None = help_field(
        None, "decoder layers in the Lens-Shift profile (e.g. the full-attention ones); None: all"
    )
    lens_eps: float = help_field(0.1, "ε of the Lens-Shift lock-in layer (depth read-out)")
    margin_window: list = help_field(
        list(MARGIN_WINDOW), "zero-based token positions [lo, hi) searched by min_margin / first_gap"
    )
    gap_threshold: float = help_field(0.5, "Δz threshold of first_gap")

    def probe_problems(self) -> list[str]:
        """Every invalid probe value, one message each (empty: valid)."""
        out = probe_value_problems(self)
        if self.probe_suffix is not None and not self.probe_suffix:
            out.append("probe_suffix must be non-empty (or None: the task's)")
        return out


def resolve(probe: ProbeConfig, task, tokenizer, **extra) -> SelectorConfig:
    """The :class:`SelectorConfig` of ``probe`` on ``task`` with ``tokenizer``: the suffix (the probe's or the task's)
    as token ids, the read length (the probe's or the task's), the candidate, Lens-Shift and margin options;
    ``extra``: the remaining SelectorConfig fields (``seed``, ``bsv_path``, ``judge``, ``decode``)."""
    suffix = tokenizer.encode(probe.probe_suffix or task.probe_suffix, add_special_tokens=False)
    lo, hi = probe.margin_window
    return SelectorConfig(
        max_candidates=probe.max_candidates,
        range_cap=probe.range_cap,
        suffix=suffix,
        top_k=probe.top_k,
        read_len=probe.read_len or task.read_len,
        lens_readout=probe.lens_readout,
        lens_eps=probe.lens_eps,
        lens_layers=probe.lens_layers,
        margin_window=(lo, hi),
        gap_threshold=probe.gap_threshold,
        **extra,
    )


def answer_ids(task, tokenizer, text: str) -> list[int] | None:
    """The committed answer of a decoded response as token ids (what Lens-Shift teacher-forces), or None."""
    ans = task.answer_span(text)
    return tokenizer.encode(ans, add_special_tokens=False) or None if ans else None


def answer_tokens(task, tokenizer) -> Callable[[list[int]], list[int] | None]:
    """:func:`answer_ids` of a response given as token ids."""
    return lambda response: answer_ids(task, tokenizer, tokenizer.decode(response, skip_special_tokens=True))
