"""The trainer's configuration: one typed dataclass, validated on construction, loadable from YAML.

Defaults follow [Fork] App. A where they make sense at the embedded default's scale (M=4, k=2, C=16,
clipping 0.2/0.28, token-mean, no KL, dynamic sampling, TreeRL advantages), with a learning rate, batch and
response budget sized for the tiny model on a CPU.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from bsb.engine.backend import BACKEND_NAMES, CPU_PROCESS_MODES
from bsb.engine.probe import ProbeConfig
from bsb.engine.reader import PROBE_READERS
from bsb.engine.run_options import RunOptions
from bsb.engine.selectors import SELECTORS
from bsb.fields import check_values, named
from bsb.fields import help_field as _f
from bsb.registry import import_plugins
from bsb.tasks.prompting import PromptConfig
from bsb.tasks.registry import TASKS
from bsb.train.advantages import ADVANTAGES
from bsb.train.logprob_pass import PASS_NAMES, TreePass
from bsb.train.loss import LOSS_AGGS, LOSSES
from bsb.train.rollout import fork_room_problem
from bsb.train.sampling import Sampling
from bsb.train.trackers import tracker_names, tracker_problems
from bsb.train.tree_options import CreditOptions, TreeOptions
from bsb.train.two_stage import EARLY_EOS_RULES, TwoStageConfig


@dataclass
class TrainConfig(RunOptions, ProbeConfig, PromptConfig, TreeOptions, CreditOptions):
    """``bsb train``'s options: the run options of :class:`~bsb.engine.run_options.RunOptions` (model, task and its
    options, device, dtype), the probe and candidate options of :class:`~bsb.engine.probe.ProbeConfig`, the prompt
    options of :class:`~bsb.tasks.prompting.PromptConfig`, the tree's and the credit's options
    (:mod:`bsb.train.tree_options`, shared with verl's ``bsb:`` section), all inherited, flat, and the fields below."""

    # --- model and task (model, task, task_options, device and dtype: bsb.engine.run_options)
    plugins: list = _f(
        [],
        "modules imported first, e.g. [my_pkg.selectors]: they register their own selectors, advantages, "
        "losses or tasks (bsb.registry), then named here by their registered names",
    )
    val_problems: int = _f(
        128,
        "held-out problems used for validation (the first N of the task's held-out set)",
        ge=1,
        size_limit=1_000_000,
        evaluation=True,
    )
    val_temperature: float = _f(
        1.0, "validation decoding temperature (the paper: 1.0 with top-p 0.95); 0: greedy", ge=0, evaluation=True
    )
    val_top_p: float = _f(0.95, "validation nucleus", gt=0, le=1, evaluation=True)
    val_samples: int = _f(4, "draws per held-out problem (1 when greedy)", ge=1, size_limit=4096, evaluation=True)
    # --- rollout
    rollout: str = _f(
        "tree",
        "tree ([Fork]) | two_stage ([TwoStage] §4.2) | flat (GRPO groups)",
        choices=("tree", "two_stage", "flat"),
    )
    bifurcate_after_active: int = _f(
        0,
        "[TwoStage]'s flat warm-up: flat groups until this many active steps have passed, then "
        "the tree / two-stage rollout (3 in the paper); 0: bifurcate from the start",
        ge=0,
    )
    selector: str = _f(
        "probe_js",
        "fork-point selector of the tree rollout: "
        + ", ".join(n for n, c in SELECTORS.items() if c.trainable)
        + ", or package.module:Class",
    )
    two_stage_t_min: int = _f(96, "T_min of the causal newline stop (two_stage)")
    two_stage_t_max: int = _f(160, "T_max, the stage-1 length and latest stop (two_stage)")
    early_eos: str = _f(
        "terminal_dup",
        "two_stage early-EOS rule: terminal_dup | root_resample | midpoint_fallback",
        choices=EARLY_EOS_RULES,
    )
    max_prompt_len: int = _f(256, "prompts longer than this many tokens are an error", size_limit=10_000_000)
    max_response_len: int = _f(256, "response token cap", size_limit=10_000_000, evaluation=True)
    temperature: float = _f(1.0, "rollout sampling temperature", gt=0)
    top_p: float = _f(1.0, "rollout nucleus", gt=0, le=1)
    # --- reward and keeping
    dynamic_sampling: bool = _f(True, "DAPO dynamic sampling: train only groups whose outcomes differ")
    keep_by: str = _f(
        "accuracy",
        "what must differ for dynamic sampling to keep a group: accuracy ([Fork] App. A, DAPO's "
        "metric) | reward (then leaves that differ only by the overlong penalty count)",
        choices=("accuracy", "reward"),
    )
    # --- advantages and loss
    advantage: str = _f(
        "treerl",
        ADVANTAGES.help(),
    )
    subsegments: bool = _f(False, "TreeRL: subdivide segment advantages width-proportionally at line breaks")
    loss: str = _f("composite", LOSSES.help())
    loss_agg: str = _f(
        "token-mean",
        "composite loss aggregation (verl's loss_agg_mode): token-mean (the paper) | seq-mean-token-mean "
        "(standard GRPO) | seq-mean-token-sum",
        choices=LOSS_AGGS,
    )
    clip_low: float = _f(0.2, "PPO clip ε_low", ge=0, lt=1)
    clip_high: float = _f(0.28, "PPO clip ε_high (clip-higher; 0.2 = symmetric, standard GRPO)", ge=0)
    clip_ratio_c: float | None = _f(
        3.0,
        "dual clip: a negative-advantage token's loss capped at ratio c (verl's clip_ratio_c, > 1); null: off",
        gt=1,
    )
    # --- batching and optimisation
    steps: int = _f(
        40,
        "training steps (rollout batches); 0: score the model once on the held-out problems (a fresh out_dir, no "
        "training, no checkpoint)",
        ge=0,
        size_limit=1_000_000_000,
        resume_safe=True,
    )
    prompts_per_step: int = _f(8, "P_train groups trained per step", ge=1, size_limit=1_000_000)
    gen_prompts: int = _f(
        16,
        "P_gen prompts generated per round (dynamic sampling keeps the informative groups)",
        size_limit=1_000_000,
    )
    max_gen_rounds: int = _f(2, "generation rounds per step to fill P_train groups", ge=1, size_limit=1000)
    fill_batch: bool = _f(
        False,
        "verl's DAPO trainer: rounds until P_train groups are kept, an error after max_gen_rounds; false: train on "
        "what max_gen_rounds kept",
    )
    homogeneous: str = _f(
        "zero_grad_step",
        "a mini-batch with no non-zero advantage: zero_grad_step | skip_step | backward",
        choices=("zero_grad_step", "skip_step", "backward"),
    )
    minibatches: int = _f(
        1, "optimizer steps per rollout batch (PPO ratios move from 1 after the first)", ge=1, size_limit=65536
    )
    micro_batch: int = _f(
        16, "rows per forward/backward (gradient accumulation; does not change the loss)", ge=1, size_limit=65536
    )
    micro_batch_tokens: int = _f(
        0,
        "token positions a forward/backward computes at most, as verl's ppo_max_token_len_per_gpu: whole fork groups "
        "(their prompt and shared prefix once) packed while they fit, a group past it split by rows; with "
        "micro_batch, whichever is reached first; 0: rows only (does not change the loss; a run that ran out of "
        "memory resumes with a smaller one)",
        ge=0,
        resume_safe=True,
    )
    update_packing: str = _f(
        TreePass.name,
        "how the update forwards the rows: tree (each micro-batch's shared prompt and fork prefixes computed once, "
        "bsb.train.tree_pack; the same loss and gradients) | path (each leaf as its own sequence, the specification)",
        choices=PASS_NAMES,
        resume_safe=True,
    )
    unit_question_grad: bool = _f(
        False, "[TwoStage] Arm 11: each question's gradient scaled to unit norm before accumulation"
    )
    grad_accum_questions: int = _f(
        1, "questions per optimizer step when unit_question_grad (4 in Arm 11)", ge=1, size_limit=1_000_000
    )
    lr: float = _f(
        2e-4,
        "learning rate (2e-4 for the embedded default; 1e-3 collapses it; the paper uses 1e-6 on 4-9B models)",
        gt=0,
    )
    weight_decay: float = _f(0.1, "AdamW weight decay")
    warmup_steps: int = _f(2, "linear learning-rate warm-up in optimizer steps")
    grad_clip: float = _f(1.0, "gradient norm clip", gt=0)
    # --- run
    backend: str = _f("auto", "rollout engine: auto (vLLM when installed) | vllm | hf", choices=BACKEND_NAMES)
    sync_check_every: int = _f(
        50,
        "check that the rollout engine serves the policy's weights (log-probs of a fixed sequence, "
        "bsb.engine.weight_sync) after the first weight sync and then every N syncs; 0: never",
        ge=0,
        resume_safe=True,
    )
    probe_reader: str = _f(
        "auto",
        "who serves the selector's reads: engine (the rollout engine) | policy (the trainer's HF policy: packed "
        "forwards grouped over a round's chains) | auto (the engine, but the policy beside a CPU vLLM engine for a "
        "model under 10M parameters, whose per-request cost dominates short reads, and for token statistics)",
        choices=PROBE_READERS,
    )
    vllm_gpu_memory_utilization: float = _f(
        0.5,
        "GPU memory share of the colocated vLLM engine (the paper: 0.5 with a scorer); the rest is the trainer's",
        gt=0,
        lt=1,
    )
    vllm_sleep: bool = _f(
        True, "put the vLLM engine to sleep (weights offloaded, KV cache freed) during the update, on CUDA"
    )
    # resume_safe here: how the same numbers are computed (memory for compute, where shards live, how long a
    # collective may wait)
    gradient_checkpointing: bool = _f(
        False,
        "recompute each decoder layer's activations in the backward (less memory, about a third more compute)",
        resume_safe=True,
    )
    fsdp_cpu_offload: bool = _f(
        False, "under torchrun: keep the FSDP2 parameter shards and their AdamW state in host memory", resume_safe=True
    )
    dist_timeout_s: int = _f(
        600,
        "under torchrun: a collective that waits longer than this ends every rank (a hung or lost rank)",
        ge=1,
        resume_safe=True,
    )
    seed: int = _f(0, "the run's seed; every sampling stream derives from (seed, step, round, phase)")
    out_dir: str = _f(
        "",
        "metrics.jsonl, config.yaml, checkpoints and the final model go here; empty: runs/TASK-SELECTOR-seedSEED-HASH, "
        "named by the run's config (the same command resumes it, a different one never meets it)",
        resume_safe=True,
        run_only=True,
        path="folder",
    )
    val_every: int = _f(
        10, "validate every N steps (and at the start and the end); 0: only start and end", ge=0, resume_safe=True
    )
    save_every: int = _f(10, "checkpoint every N steps; 0: only at the end", ge=0, resume_safe=True, run_only=True)
    keep_last: int = _f(
        0,
        "weights of the last N validation steps kept as out_dir/weights/step-S (HF format); -1: every one; 0: none",
        ge=-1,
        resume_safe=True,
    )
    keep_best: bool = _f(
        False, "keep the weights of the best held-out accuracy so far in out_dir/best (ties: earlier)", resume_safe=True
    )
    report_to: list = _f(
        ["jsonl"],
        "trackers beside metrics.jsonl (always written): tensorboard | wandb (WANDB_MODE=offline: no account)",
        resume_safe=True,
    )
    wandb_project: str = _f("bsb", "the W&B project of report_to wandb", resume_safe=True)
    progress: bool = _f(True, "progress bars", resume_safe=True, run_only=True)
    vllm_kv_cache_gib: int = _f(1, "KV cache of the CPU vLLM engine, GiB")
    vllm_batch_tokens: int | None = _f(
        None,
        "prompt tokens the CPU vLLM engine takes in one scheduler step (default: the larger of 8,192 and its length); "
        "a request goes in waves whose prompts fit one step, so a larger step sends more of a call at once (the "
        "held-out passes' 64 prompts). The KV cache grows to hold a full wave (at least vllm_kv_cache_gib); the "
        "engine's warm-up step takes longer (about 100 s more at 65,536 for Qwen2.5-Coder-0.5B on 2 cores)",
        ge=1,
        # which requests share a wave: the same seeds, the same numbers up to their batch's (a bf16 near-tie may flip,
        # as micro_batch_tokens reorders a float sum), so among "how the same numbers are computed"
        resume_safe=True,
    )
    vllm_cpu_process: str = _f(
        "in",
        "where a CPU vLLM engine runs: in (the trainer's process) | own (a process of its own bound to every core; "
        "the weight sync goes through a safetensors file; faster where many chains decode at once, "
        "docs/performance.md)",
        choices=CPU_PROCESS_MODES,
        resume_safe=True,  # the same seeds give the same tokens in either process
    )
    resume_changes: list = _f(
        [],
        "fields allowed to differ from the checkpoint's config when resuming, e.g. [lr]: changed "
        "on purpose and recorded in the next metrics row (steps, progress, val_every, "
        "save_every may always change)",
        resume_safe=True,
    )

    def __post_init__(self):
        """The facts of each field (:func:`bsb.fields.check_values`), the registries' names and the rules across
        fields; one ``ValueError`` (``invalid config: ...``) for the first that fails."""
        self.task = "walk" if self.task is None else self.task  # training's task left out
        self.task_options = dict(self.task_options or {})
        self.margin_window = list(self.margin_window)
        self.report_to = tracker_names(self.report_to)
        if isinstance(self.plugins, str):
            raise ValueError(f"invalid config: plugins must be a list of module names, got {self.plugins!r}")
        self.plugins = list(self.plugins or [])
        try:
            import_plugins(self.plugins)  # first: they register names the checks below look up
            check_values(self)
        except ValueError as err:
            raise ValueError(f"invalid config: {str(err).removeprefix('invalid config: ')}") from None
        problem = next(self._problems(), None)
        if problem:
            raise ValueError(f"invalid config: {problem}")
        if not self.out_dir:
            self.out_dir = default_out_dir(self)

    def _problems(self):
        """What the fields' facts cannot say: names looked up in the registries, formats, and rules across fields."""
        selector, unknown_selector = _lookup(SELECTORS, self.selector)
        if not (isinstance(self.task, str) and self.task):
            yield f"task must name a task: {TASKS.help()}"
        yield from self.run_problems()
        looked_up = (unknown_selector, _lookup(ADVANTAGES, self.advantage)[1], _lookup(LOSSES, self.loss)[1])
        yield from (why for why in looked_up if why)
        yield from self.prompt_problems()
        if selector is not None and not selector.trainable:
            yield f"the {self.selector} selector cannot choose RL forks: {selector.untrainable}"
        yield from self.probe_problems()
        yield from tracker_problems(self.report_to)
        if self.gen_prompts < self.prompts_per_step:
            yield f"gen_prompts ({self.gen_prompts}) must be >= prompts_per_step ({self.prompts_per_step})"
        if self.unit_question_grad and self.minibatches != 1:
            yield "unit_question_grad sets its own optimizer steps: keep minibatches=1"
        if self.clamped_prefix and self.advantage != "prefix_credit":
            yield "clamped_prefix modifies prefix_credit: set advantage=prefix_credit"
        if self.vllm_batch_tokens is not None and self.backend == "hf":
            yield "vllm_batch_tokens sets the vLLM engine's step; backend=hf has none"
        names = {f.name for f in dataclasses.fields(self)}
        unknown = [n for n in self.resume_changes if not isinstance(n, str) or n not in names]
        if unknown:
            yield f"resume_changes names no field: {', '.join(map(repr, unknown))} (it lists config fields, e.g. [lr])"
        # the rollouts' own checks, made here once at start: room for a fork, stopping times within the cap
        yield from filter(None, [fork_room_problem(self.max_response_len)])
        if self.rollout == "two_stage" and self.early_eos in EARLY_EOS_RULES:
            yield from filter(None, [self.two_stage_config().problem(self.max_response_len)])
        if not 0 <= self.overlong_buffer <= self.max_response_len:
            yield f"overlong_buffer must be in [0, max_response_len], got {self.overlong_buffer}"

    def sampling(self) -> Sampling:
        """How every rollout of the run samples: the response cap, temperature and top-p."""
        return Sampling(self.max_response_len, self.temperature, self.top_p)

    def two_stage_config(self) -> TwoStageConfig:
        """[TwoStage]'s stopping rule as this config sets it (its K and B are ``chains`` and ``siblings``)."""
        return TwoStageConfig(self.two_stage_t_min, self.two_stage_t_max, self.early_eos)

    @property
    def group_size(self) -> int:
        """Leaves per prompt: M(1+k) for tree and flat, K·B for two_stage (a flat warm-up keeps the same size)."""
        return self.chains * self.siblings if self.rollout == "two_stage" else self.chains * (1 + self.siblings)

    @classmethod
    def help_text(cls) -> str:
        """Every field with its type, default and help, grouped as in the class (``bsb train --help``)."""
        lines = []
        for f in _fields():
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            lines.append(f"  {f.name} = {default!r}\n      {f.metadata.get('help', '')}")
        return "\n".join(lines)

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"unknown config field(s): {', '.join(unknown)}; known fields: {', '.join(known)}")
        if "report_to" in data:
            data = {**data, "report_to": tracker_names(data["report_to"])}
        hints = typing.get_type_hints(cls)
        return cls(**{k: _coerce(k, hints[k], v) for k, v in data.items()})

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        """A config file: ``field: value`` pairs, and optionally ``base: FILE`` (relative to this file), a config
        whose fields this one starts from and overrides (``task_options`` merged option by option)."""
        return cls.from_dict(read_yaml(Path(path)))

    def micro_batch_shapes(self) -> list[tuple[int, int, bool]]:
        """The largest micro-batches the update can form, as the memory model sees them (:mod:`bsb.engine.activations`:
        ``(rows, tokens a row, gradient checkpointing)``); the start check prices the worst of them. Without a token
        budget, ``micro_batch`` rows of the longest prompt + response. With ``micro_batch_tokens``, the update prices a
        micro-batch padded (rows x its widest row, ``bsb.train.update``), so it admits one row of the longest length
        (a row over the budget goes alone) and, for each row count r up to ``micro_batch``, r rows padded to the
        widest that fits (``micro_batch_tokens // r``)."""
        width, ckpt = self.max_prompt_len + self.max_response_len, self.gradient_checkpointing
        if not self.micro_batch_tokens:
            return [(self.micro_batch, width, ckpt)]
        wide = [(r, min(width, self.micro_batch_tokens // r), ckpt) for r in range(2, self.micro_batch + 1)]
        return [(1, width, ckpt)] + [s for s in wide if s[1] > 0]

    def to_dict(self) -> dict:
        """The fields and their values (copies), model and task first, the probe options beside the selector."""
        values = dataclasses.asdict(self)
        return {f.name: values[f.name] for f in _fields()}


# Fields a resume may change without a word (their ``resume_safe``): how long, how often and how visibly the same run
# goes on, where its folder now lives, and how the same numbers are computed.
RESUME_SAFE = named(TrainConfig, "resume_safe")
# Fields that change where and how a run is written, not what it computes (their ``run_only``; bsb sweep's reruns).
RUN_ONLY = named(TrainConfig, "run_only")
# What decides the evaluation (their ``evaluation``): the runs of one sweep must agree on these (and on the held-out
# problems themselves).
EVAL_FIELDS = named(TrainConfig, "evaluation")


def default_out_dir(cfg: TrainConfig) -> str:
    """``runs/TASK-SELECTOR-seedSEED-HASH``: the hash is of every field that changes the run's results (all but
    :data:`RESUME_SAFE`), so rerunning a command finds its run and a different command gets its own folder."""
    import hashlib
    import json
    import re

    values = {k: v for k, v in cfg.to_dict().items() if k not in RESUME_SAFE}
    digest = hashlib.blake2b(json.dumps(values, sort_keys=True, default=str).encode(), digest_size=4).hexdigest()
    kind = cfg.selector if cfg.rollout == "tree" else cfg.rollout
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{cfg.task}-{kind}")  # task=pkg.mod:Class stays one path part
    return f"runs/{name}-seed{cfg.seed}-{digest}"


def resume_changes(stored: dict, cfg: TrainConfig) -> dict[str, tuple]:
    """The fields of ``cfg`` that differ from a checkpoint's stored config, as {field: (stored, new)}, except the
    :data:`RESUME_SAFE` ones. A field the stored config lacks (written before the field existed) counts as its
    default."""
    import json

    defaults = {f.name: (f.default_factory() if f.default is dataclasses.MISSING else f.default) for f in _fields()}
    new = json.loads(json.dumps(cfg.to_dict(), default=str))  # the JSON state.json holds: tuples as lists
    out = {}
    for name, value in new.items():
        old = stored.get(name, json.loads(json.dumps(defaults[name], default=str)))
        if name not in RESUME_SAFE and old != value:
            out[name] = (old, value)
    return out


def _lookup(registry, name):
    """(the implementation ``name`` names, "") or (None, why not)."""
    try:
        return registry.get(name), ""
    except ValueError as err:
        return None, str(err)


# each inherited group follows the field it belongs beside
_GROUPS = {"task_options": PromptConfig, "rollout": TreeOptions, "selector": ProbeConfig, "advantage": CreditOptions}


def _fields() -> list[dataclasses.Field]:
    """TrainConfig's fields in the order a reader expects (model and task first, the prompt options after the task's,
    the tree's after the rollout, the probe options beside the selector, the credit's after the advantage), not the
    dataclass order (inherited fields first)."""
    inherited = {f.name for cls in (RunOptions, *_GROUPS.values()) for f in dataclasses.fields(cls)}
    own = [f for f in dataclasses.fields(TrainConfig) if f.name not in inherited]
    out = []
    for f in [*dataclasses.fields(RunOptions), *own]:
        out.append(f)
        out += dataclasses.fields(_GROUPS[f.name]) if f.name in _GROUPS else ()
    return out


def _coerce(name: str, hint, value):
    """YAML reads ``1e-4`` as a string (YAML 1.1): convert numbers by the field's type, and name the field when
    a value does not fit."""
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)
    if value is None:
        if optional or hint is typing.Any:
            return None
        raise ValueError(f"invalid config: {name} needs a value")
    base = (
        [t for t in typing.get_args(hint) if t is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType)
        else [hint]
    )
    target = base[0] if len(base) == 1 else None
    target = typing.get_origin(target) or target  # list[int] is checked as a list
    try:
        if target in (float, int) and isinstance(value, bool):  # YAML's true is not a number
            raise ValueError
        if target is float:
            return float(value)
        if target is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if target is bool and not isinstance(value, bool):
            raise ValueError
        if target is dict and not isinstance(value, dict):
            raise ValueError
        if target is list:
            if not isinstance(value, (list, tuple)):
                raise ValueError
            return list(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"invalid config: {name} expects {getattr(target, '__name__', target)}, got {value!r}"
        ) from None
    return value


def parse_overrides(pairs: list[str], base: dict | None = None) -> dict:
    """``["lr=1e-4", "selector=entropy", "task_options.ops=[2, 3]"]`` → typed values (YAML), merged into ``base``.
    A dotted key sets one entry of a mapping field, at any depth (``task_options.a.b=1``)."""
    import yaml

    out = dict(base or {})
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"override {pair!r} is not field=value")
        key, value = (x.strip() for x in pair.split("=", 1))
        parts = key.split(".")
        if not all(parts):
            raise ValueError(f"override {pair!r}: an empty name in {key!r}")
        node = out
        for depth, name in enumerate(parts[:-1]):
            inner = node.get(name)
            if inner is not None and not isinstance(inner, dict):
                raise ValueError(f"override {pair!r}: {'.'.join(parts[: depth + 1])} is not a mapping")
            node[name] = dict(inner or {})  # a copy: base is not modified
            node = node[name]
        node[parts[-1]] = yaml.safe_load(value)
    return out


def read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A config file's fields with its ``base:`` chain applied (:meth:`TrainConfig.from_yaml`)."""
    import yaml

    if path.resolve() in seen:
        raise ValueError(f"{path}: its base chain comes back to it ({' -> '.join(map(str, (*seen, path)))})")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file must be a mapping of field: value")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ValueError(f"{path}: base must name a config file, got {base!r}")
    merged = read_yaml(path.parent / base, (*seen, path.resolve()))
    if isinstance(merged.get("task_options"), dict) and isinstance(data.get("task_options"), dict):
        data["task_options"] = {**merged["task_options"], **data["task_options"]}
    return {**merged, **data}
