"""The trainer's configuration: one typed dataclass, validated on construction, loadable from YAML.

Defaults follow seed 000 App. A where they make sense at the embedded default's scale (M=4, k=2, C=16,
clipping 0.2/0.28, token-mean, no KL, dynamic sampling, TreeRL advantages), with a learning rate, batch and
response budget sized for the tiny model on a CPU.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from bsb.engine.selectors import SELECTORS
from bsb.tasks.synthetic import ANSWER_PREFIX
from bsb.train.advantages import ADVANTAGES
from bsb.train.loss import LOSSES
from bsb.train.samplers import EARLY_EOS_RULES

ROLLOUTS = ("tree", "two_stage", "flat")
HOMOGENEOUS = ("zero_grad_step", "skip_step", "backward")
BACKENDS = ("auto", "vllm", "hf")


@dataclass
class TrainConfig:
    # --- model and data
    model: str = "embedded"  # a local Hugging Face checkpoint directory, or "embedded" (the tiny synthetic-task model)
    train_file: str | None = None  # JSONL/Parquet problems (prompt/answer/id); None: synthetic arithmetic problems
    val_file: str | None = None  # held-out problems; None: synthetic problems disjoint from training
    prompt_template: str = "{prompt}"  # how a problem's prompt becomes the model's input text
    synthetic_ops: tuple[int, ...] = (2, 3)  # difficulties (operation counts) of synthetic training problems
    synthetic_max_operand: int = 5  # operand range of synthetic problems (match the embedded model's)
    val_problems: int = 128  # held-out problems used for validation (the first N of val_file)
    val_temperature: float = 1.0  # validation decoding (the paper: temperature 1.0, top-p 0.95); 0: greedy
    val_top_p: float = 0.95
    val_samples: int = 4  # draws per held-out problem (1 when greedy)
    # --- rollout
    rollout: str = "tree"  # tree (seed 000) | two_stage (seed 001 §4.2) | flat (GRPO groups)
    chains: int = 4  # M root chains per prompt (tree); group size G = chains * (1 + siblings) for flat
    siblings: int = 2  # k continuations per fork (tree); B for two_stage
    selector: str = "probe_js"  # fork-point selector (tree rollout): one of bsb.engine.selectors.SELECTORS
    max_candidates: int = 16  # C, candidate boundaries scored per chain
    range_cap: float = 1.0  # ρ, score only the first ρ of each chain (0.5 on base models)
    probe_suffix: str = ANSWER_PREFIX  # elicitation suffix of Probe-JS / Lens-Shift (the synthetic chains' last line)
    max_refills: int = 2  # refill rounds for chains that cannot fork
    two_stage_t_min: int = 96  # T_min of the causal newline stop (two_stage)
    two_stage_t_max: int = 160  # T_max (two_stage)
    early_eos: str = "terminal_dup"  # two_stage early-EOS rule: terminal_dup | root_resample | midpoint_fallback
    max_prompt_len: int = 256  # prompts longer than this are an error
    max_response_len: int = 160  # response token cap
    temperature: float = 1.0  # rollout sampling temperature
    top_p: float = 1.0  # rollout nucleus
    # --- reward
    overlong_buffer: int = 16  # DAPO soft overlong buffer (tokens); 0: off
    overlong_factor: float = 1.0  # DAPO overlong penalty factor
    gate_chars: int | None = None  # seed 001 derivation gate (30 in the paper); None: off
    # --- advantages and loss
    advantage: str = "treerl"  # treerl | grpo | prefix_credit
    subsegments: bool = False  # TreeRL: subdivide segment advantages width-proportionally at line breaks
    prefix_beta: float = 0.0  # prefix_credit: max-backup bonus β
    prefix_alpha: float = 0.5  # prefix_credit: continuation mix α
    loss: str = "composite"  # composite (PPO clip, token-mean) | flat (sequence-summed log-probs)
    clip_low: float = 0.2
    clip_high: float = 0.28
    # --- batching and optimisation
    steps: int = 40  # optimizer steps (each on one rollout batch unless minibatches > 1)
    prompts_per_step: int = 8  # P_train groups trained per step
    gen_prompts: int = 16  # P_gen prompts generated per round (dynamic sampling keeps groups with reward variance)
    dynamic_sampling: bool = True  # DAPO: train only groups whose rewards differ
    max_gen_rounds: int = 2  # generation rounds per step to fill P_train groups
    homogeneous: str = "zero_grad_step"  # a step with no non-zero advantage: zero_grad_step | skip_step | backward
    minibatches: int = 1  # optimizer steps per rollout batch (PPO ratios move from 1 after the first)
    micro_batch: int = 16  # rows per forward/backward (gradient accumulation; does not change the loss)
    lr: float = 2e-4  # for the embedded default (1e-3 collapses it within 10 steps; the paper uses 1e-6 on 4-9B models)
    weight_decay: float = 0.1
    warmup_steps: int = 2
    grad_clip: float = 1.0
    # --- run
    backend: str = "auto"  # auto (vLLM when installed) | vllm | hf
    seed: int = 0
    out_dir: str = "runs/bsb"  # metrics.jsonl, checkpoints and the final model go here
    val_every: int = 10  # validate every N steps (and at the start and the end); 0: only start and end
    save_every: int = 10  # checkpoint every N steps; 0: only at the end
    progress: bool = True  # progress bars
    vllm_kv_cache_gib: int = 1

    def __post_init__(self):
        self.synthetic_ops = tuple(self.synthetic_ops)
        checks = [
            (self.rollout in ROLLOUTS, f"rollout must be one of {', '.join(ROLLOUTS)}, got {self.rollout!r}"),
            (self.selector in SELECTORS, f"unknown selector {self.selector!r}; choose one of {', '.join(SELECTORS)}"),
            (self.selector != "bsv", "the bsv selector is a pre-RL validation instrument (a frozen-policy direction), not an RL fork selector"),
            (self.advantage in ADVANTAGES, f"advantage must be one of {', '.join(ADVANTAGES)}, got {self.advantage!r}"),
            (self.loss in LOSSES, f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}"),
            (self.homogeneous in HOMOGENEOUS, f"homogeneous must be one of {', '.join(HOMOGENEOUS)}, got {self.homogeneous!r}"),
            (self.backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}"),
            (self.early_eos in EARLY_EOS_RULES, f"early_eos must be one of {', '.join(EARLY_EOS_RULES)}, got {self.early_eos!r}"),
            (self.chains >= 1, f"chains (M) must be >= 1, got {self.chains}"),
            (self.siblings >= 1, f"siblings (k) must be >= 1, got {self.siblings}"),
            (self.steps >= 1 and self.prompts_per_step >= 1, "steps and prompts_per_step must be >= 1"),
            (self.gen_prompts >= self.prompts_per_step, f"gen_prompts ({self.gen_prompts}) must be >= prompts_per_step ({self.prompts_per_step})"),
            (self.max_gen_rounds >= 1 and self.minibatches >= 1 and self.micro_batch >= 1, "max_gen_rounds, minibatches and micro_batch must be >= 1"),
            (0 < self.range_cap <= 1, f"range_cap must be in (0, 1], got {self.range_cap}"),
            (self.max_candidates >= 1, f"max_candidates must be >= 1, got {self.max_candidates}"),
            (self.temperature > 0 and 0 < self.top_p <= 1, "rollouts sample: temperature must be > 0 and top_p in (0, 1]"),
            (self.lr > 0 and self.grad_clip > 0, "lr and grad_clip must be > 0"),
            (0 <= self.clip_low < 1 and self.clip_high >= 0, "clip_low must be in [0, 1) and clip_high >= 0"),
            (self.val_every >= 0 and self.save_every >= 0 and self.val_problems >= 1, "val_every and save_every must be >= 0, val_problems >= 1"),
            (self.val_temperature >= 0 and 0 < self.val_top_p <= 1 and self.val_samples >= 1,
             "val_temperature must be >= 0, val_top_p in (0, 1], val_samples >= 1"),
            ("{prompt}" in self.prompt_template, "prompt_template must contain {prompt}"),
            (all(n >= 1 for n in self.synthetic_ops) and self.synthetic_ops, "synthetic_ops must be a non-empty list of counts >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"invalid config: {message}")
        # A probe reads the suffix and one token after a prefix; the response budget must leave room for a fork.
        if self.max_response_len < 3:
            raise ValueError(f"invalid config: max_response_len {self.max_response_len} is smaller than a probe (a prefix, a 2-token tail)")
        if self.rollout == "two_stage" and not 1 <= self.two_stage_t_min <= self.two_stage_t_max < self.max_response_len:
            raise ValueError("invalid config: two_stage needs 1 <= two_stage_t_min <= two_stage_t_max < max_response_len")
        if not 0 <= self.overlong_buffer <= self.max_response_len:
            raise ValueError(f"invalid config: overlong_buffer must be in [0, max_response_len], got {self.overlong_buffer}")

    @property
    def group_size(self) -> int:
        return self.chains * (1 + self.siblings)

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"unknown config field(s): {', '.join(unknown)}; known fields: {', '.join(known)}")
        hints = typing.get_type_hints(cls)
        return cls(**{k: _coerce(k, hints[k], v) for k, v in data.items()})

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        import yaml

        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a config file must be a mapping of field: value")
        return cls.from_dict(data)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["synthetic_ops"] = list(self.synthetic_ops)
        return d


def _coerce(name: str, hint, value):
    """YAML reads ``1e-4`` as a string (YAML 1.1): convert numbers by the field's type, and name the field when
    a value does not fit."""
    if value is None:
        return None
    base = [t for t in typing.get_args(hint) if t is not type(None)] if typing.get_origin(hint) in (typing.Union, types.UnionType) else [hint]
    target = base[0] if len(base) == 1 else None
    try:
        if target is float and not isinstance(value, bool):
            return float(value)
        if target is int and not isinstance(value, bool):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if target is bool and not isinstance(value, bool):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"invalid config: {name} expects {getattr(target, '__name__', target)}, got {value!r}") from None
    return value


def parse_overrides(pairs: list[str]) -> dict:
    """``["lr=1e-4", "selector=entropy"]`` → typed values (YAML scalars)."""
    import yaml

    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"override {pair!r} is not field=value")
        key, value = pair.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out



