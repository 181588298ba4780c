"""The ``bsb:`` section of a verl config, and the start-up check of everything the tree needs from verl's config.

:func:`check_config` runs before any Ray worker spawns (``python -m bsb.integrations.verl.launch`` calls it on the
composed config; the agent loop calls it again in each worker). It raises one :class:`VerlConfigError` listing
every problem: a selector that cannot read through verl's servers, K above the servers' logprob limit, a tree that
cannot yield M(1+k) leaves, a task that does not build, and the verl switches the tree relies on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from bsb.engine.backend import CAPABILITY_HELP
from bsb.engine.probe import ProbeConfig
from bsb.engine.selectors import SELECTORS
from bsb.fields import help_field as _f
from bsb.fields import value_problems, with_default
from bsb.integrations.verl.server_backend import ServerBackend
from bsb.train.rollout import fork_room_problem
from bsb.train.tree_options import CreditOptions, TreeOptions


def _why_not(selector) -> str:
    """Why a selector cannot fork trees through verl's servers ("" when it can)."""
    if not selector.can_read(ServerBackend):
        needs = " or ".join(CAPABILITY_HELP[c] for c in selector.requires)
        return f"it needs {needs}, which verl's vLLM servers do not expose (use bsb train, or probe_js)"
    return "" if selector.trainable else selector.untrainable


# Selectors whose reads a vLLM replica serves (top-K beliefs over HTTP, or no model reads): derived from the selectors'
# traits and ServerBackend's capabilities.
SERVER_SELECTORS = tuple(n for n, cls in SELECTORS.items() if not _why_not(cls))
# ProbeConfig fields only Lens-Shift and the margin selectors read: none of them runs through verl
UNUSED_ON_VERL = ("lens_readout", "lens_layers", "lens_eps", "margin_window", "gap_threshold")
# verl's names of bsb's tree estimators (bsb.integrations.verl.estimators) -> bsb's advantage (bsb.train.advantages)
ESTIMATORS = {"bsb_treerl": "treerl", "bsb_treerl_released": "treerl_released", "bsb_prefix_credit": "prefix_credit"}
PROBE_ENDPOINTS = ("completions", "prompt_logprobs")
MANAGER = "bsb.integrations.verl.worker.BsbTreeAgentLoopManager"
AGENT_LOOP = "bsb_tree"
DEFAULT_SERVER_LOGPROBS = 20  # vLLM's max_logprobs default; raise it with engine_kwargs.vllm.max_logprobs


class VerlConfigError(ValueError):
    """The verl config cannot run bsb's tree rollouts; the message lists every problem found."""


@dataclass
class BsbSettings(ProbeConfig, TreeOptions, CreditOptions):
    """bsb's options under ``bsb:`` in the verl config (the paper's App. A defaults): the probe and candidate options
    of :class:`~bsb.engine.probe.ProbeConfig` (``bsb.top_k``, ``bsb.read_len``, ...), the tree's and the credit's
    (:mod:`bsb.train.tree_options`, shared with ``bsb train``: the same bounds, help and names) and the fields below."""

    task: str = _f("math", "a bsb task name or package.module:Class: the verifier, probe suffix and L")
    task_options: dict = _f({}, "the task's options")
    selector: str = _f("probe_js", "one of SERVER_SELECTORS")
    probe_endpoint: str = _f(
        "completions",
        "completions (rides the prefix cache) | prompt_logprobs (fallback, skips it)",
        choices=PROBE_ENDPOINTS,
    )
    probe_timeout_s: float = _f(120.0, "seconds a probe request may take", gt=0)
    overlong_buffer: int = with_default(CreditOptions, "overlong_buffer", 0)  # verl's reward manager may own it
    seed: int = _f(0, "base seed of roots, probes and siblings (each tree derives its own from its uid)")
    threads: int = _f(64, "trees built at once per agent-loop worker (each waits on the servers in a thread)", ge=1)

    @classmethod
    def from_mapping(cls, section: Mapping) -> BsbSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise VerlConfigError(f"bsb: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        values = {k: section[k] for k in section}
        if "task_options" in values:
            values["task_options"] = dict(values["task_options"] or {})
        return cls(**values)

    def problems(self) -> list[str]:
        """Every invalid setting, one message each (empty: valid): the fields' facts, the probe's rules, the
        selector's reach through verl's servers, the tree's shape."""
        out = [f"bsb.{problem}" for problem in value_problems(self) + self.probe_problems()]
        out += [
            f"bsb.{name} has no effect through verl (no server-readable selector reads it): remove it"
            for name in UNUSED_ON_VERL
            if getattr(self, name) != getattr(ProbeConfig(), name)
        ]
        try:
            selector = SELECTORS.get(self.selector)
        except ValueError as err:
            selector = None
            out.append(f"bsb.selector: {err}")
        if selector is not None and _why_not(selector):
            out.append(
                f"bsb.selector={self.selector!r} cannot run through verl's servers: {_why_not(selector)}. "
                f"Choose one of {', '.join(SERVER_SELECTORS)}"
            )
        if selector is not None and 1 <= self.max_candidates < selector.min_candidates:
            out.append(
                f"bsb.max_candidates must be >= {selector.min_candidates} for {self.selector} to choose, "
                f"got {self.max_candidates}"
            )
        return out


def _get(cfg: Mapping, dotted: str, default=None):
    node = cfg
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return default
        node = node[key]
    return node


def server_max_logprobs(cfg: Mapping) -> int:
    """The replicas' logprob limit: ``engine_kwargs.vllm.max_logprobs`` of the rollout, vLLM's 20 by default."""
    return int(
        _get(cfg, "actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs", DEFAULT_SERVER_LOGPROBS)
        or DEFAULT_SERVER_LOGPROBS
    )


def check_config(cfg: Mapping, build_task: bool = True) -> BsbSettings:
    """The validated :class:`BsbSettings` of a composed verl config; a :class:`VerlConfigError` listing every
    problem otherwise. ``build_task``: also build the task (loads its problem files, if any)."""
    try:
        settings = BsbSettings.from_mapping(_get(cfg, "bsb", {}) or {})
    except TypeError as err:
        raise VerlConfigError(f"bsb: {err}") from err
    problems = settings.problems()
    rollout = "actor_rollout_ref.rollout"
    try:  # a selector of your own (package.module:Class) that reads top-K beliefs is held to the limit too
        reads_topk = "belief_topk" in SELECTORS.get(settings.selector).requires
    except ValueError:  # unknown: problems() reported it
        reads_topk = False
    if reads_topk and settings.top_k > server_max_logprobs(cfg):
        problems.append(
            f"bsb.top_k={settings.top_k} exceeds the servers' logprob limit {server_max_logprobs(cfg)}: lower it or "
            f"raise {rollout}.engine_kwargs.vllm.max_logprobs"
        )
    response = _get(cfg, f"{rollout}.response_length")
    if response is not None:
        problems.extend(filter(None, [fork_room_problem(int(response), f"{rollout}.response_length")]))
    checks = [
        (f"{rollout}.n", 1, "one agent-loop call builds one prompt's whole tree of M(1+k) leaves"),
        (f"{rollout}.agent.default_agent_loop", AGENT_LOOP, "the tree rollout is the bsb_tree agent loop"),
        (
            f"{rollout}.agent.agent_loop_manager_class",
            MANAGER,
            "verl's own worker copies the last leaf's reward onto every leaf",
        ),
        ("trainer.use_v1", True, "only verl's v1 (TransferQueue) trainer accepts several outputs per agent-loop call"),
    ]
    for key, want, why in checks:
        got = _get(cfg, key)
        if got != want:
            problems.append(f"{key} must be {want!r} ({why}), got {got!r}")
    if _get(cfg, "distillation.enabled"):
        problems.append("distillation.enabled: bsb's tree worker does not compute teacher log-probs (set it false)")
    if _get(cfg, "reward.reward_model.enable") and not _get(cfg, "reward.reward_model.enable_resource_pool"):
        problems.append(
            "reward.reward_model.enable: each leaf's reward is bsb's task verifier; a reward model is not used"
        )
    estimator = _get(cfg, "algorithm.adv_estimator")
    if estimator not in ESTIMATORS:
        problems.append(
            f"algorithm.adv_estimator must be one of {', '.join(ESTIMATORS)} (the rows' uids carry the tree, which "
            f"verl's own estimators would read as groups), got {estimator!r}"
        )
    if build_task and not any(p.startswith("bsb: unknown") for p in problems):
        from bsb.tasks.registry import make_task

        try:
            make_task(settings.task, settings.task_options)
        except (ValueError, ImportError, OSError, TypeError) as err:
            problems.append(f"bsb.task={settings.task!r}: {err}")
    if problems:
        raise VerlConfigError("bsb cannot run on this verl config:\n  - " + "\n  - ".join(problems))
    return settings
