"""The agent loop ``bsb_tree``: one call builds one prompt's whole tree on verl's servers (needs verl).

Per call (``actor_rollout_ref.rollout.n = 1``; one dataset row = one tree):

1. the prompt is tokenised by verl (its chat template and Continuous Token builder), the row's
   ``reward_model.ground_truth`` becomes the bsb :class:`~bsb.tasks.base.Problem`'s gold answer;
2. :func:`bsb.train.rollout.tree_rollout`, unchanged, builds the tree through a
   :class:`~bsb.integrations.verl.server_backend.ServerBackend` in a worker thread: M roots, the selector's reads,
   refills for chains that cannot fork, k siblings at each fork: exactly M(1+k) leaves. Root, probes and siblings
   share one request id, so verl's sticky routing sends them to the replica that holds the prefix in its cache;
   the probe reads go to that replica's ``/v1/completions`` (:mod:`~bsb.integrations.verl.probe_client`);
3. every leaf gets the task's verdict plus DAPO's overlong penalty (:func:`bsb.train.phases.score_trees`) as its
   own reward, its correctness as ``reward_extra_info["acc"]`` (DAPO's filter by accuracy), and its tree position
   (group, shared-prefix length, fork) in ``extra_fields``, which the ``bsb_tree`` worker writes into its uid;
4. the tree's forks (:func:`bsb.train.fork_stats.tree_forks`) wait in the worker until the trainer collects them
   for the step's fork statistics (:func:`take_finished`, :mod:`~bsb.integrations.verl.metrics`).

Validation rows go to ``bsb_single`` (one chain per call, the same verifier): trees are a training device.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from bsb.engine.boundaries import newline_token_mask
from bsb.engine.probe import resolve
from bsb.engine.selectors import Selector, make_selector
from bsb.integrations.verl.probe_client import CompletionsProbe, PromptLogprobsProbe
from bsb.integrations.verl.server_backend import ServerBackend
from bsb.integrations.verl.settings import BsbSettings, check_config, server_max_logprobs
from bsb.tasks.base import Problem, Task, hook
from bsb.tasks.registry import make_task
from bsb.train.fork_stats import TreeForks, tree_forks
from bsb.train.phases import score_trees
from bsb.train.rewards import RewardConfig
from bsb.train.rollout import flat_rollout, tree_rollout
from bsb.train.sampling import Sampling
from bsb.train.seeds import derive
from bsb.train.tree import PromptTree


@dataclass
class TreeKit:
    """What every tree of a worker shares, built once per config."""

    settings: BsbSettings
    task: Task
    selector: Selector  # the worker's, unbound: each tree reads through its own copy bound to its backend
    newline: torch.Tensor
    eos: int
    max_logprobs: int
    pool: ThreadPoolExecutor
    probe: CompletionsProbe | PromptLogprobsProbe
    addresses: dict


_KITS: dict[str, TreeKit] = {}
# The forks of the trees this worker process finished since the trainer last collected them; bounded, so a run whose
# trainer never collects them (verl's own launcher) does not grow without end.
_FINISHED: deque[TreeForks] = deque(maxlen=1 << 16)


def take_finished() -> list[TreeForks]:
    """The forks of the trees finished since the last call (the worker's share of a step's fork statistics)."""
    out = []
    while _FINISHED:
        out.append(_FINISHED.popleft())
    return out


def tree_kit(config, tokenizer) -> TreeKit:
    """The worker's :class:`TreeKit` for this config and tokenizer (checked and built on first use)."""
    from omegaconf import OmegaConf

    bsb = OmegaConf.to_container(config.bsb, resolve=True) if "bsb" in config else {}
    key = json.dumps(
        [
            bsb,
            OmegaConf.select(config, "actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs"),
            getattr(tokenizer, "name_or_path", ""),
            len(tokenizer),
        ],
        sort_keys=True,
        default=str,
    )
    if key not in _KITS:
        plain = OmegaConf.to_container(config, resolve=True)
        s = check_config(plain)
        task = make_task(s.task, s.task_options)
        sel = make_selector(s.selector, resolve(s, task, tokenizer, seed=s.seed))
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos_token_id: bsb's tree needs one to tell finished chains")
        probe = CompletionsProbe(s.probe_timeout_s) if s.probe_endpoint == "completions" else PromptLogprobsProbe()
        _KITS[key] = TreeKit(
            s,
            task,
            sel,
            newline_token_mask(tokenizer),
            int(eos),
            server_max_logprobs(plain),
            ThreadPoolExecutor(s.threads, thread_name_prefix="bsb-tree"),
            probe,
            {},
        )
    return _KITS[key]


def problem_from_row(row: Mapping[str, Any], task: Task | None = None) -> Problem:
    """The bsb problem of a verl dataset row: its uid, the last user message, ``reward_model.ground_truth`` (read by the
    task's ``parse_answer`` when it has one: the code task's hidden tests)."""
    reward_model = row.get("reward_model") or {}
    if "ground_truth" not in reward_model:
        raise ValueError(
            f"dataset row {row.get('uid')!r} has no reward_model.ground_truth: bsb's verifier needs the gold answer "
            "(verl's data preprocessing writes it; see `bsb data`)"
        )
    messages = list(row.get("raw_prompt") or [])
    text = next(
        (m.get("content", "") for m in reversed(messages) if isinstance(m, Mapping) and m.get("role") == "user"), ""
    )
    meta = dict(row.get("extra_info") or {})
    meta.setdefault("data_source", row.get("data_source"))
    answer = hook(task, "parse_answer")(reward_model["ground_truth"])
    return Problem(str(row.get("uid")), str(text), answer, meta)


@register("bsb_tree")
class BsbTreeAgentLoop(AgentLoopBase):
    """One prompt's tree of M(1+k) leaves per call, with bsb's fork-point selector and verifier."""

    tree = True

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> list[AgentLoopOutput]:
        kit = tree_kit(self.config, self.tokenizer)
        s, loop = kit.settings, asyncio.get_running_loop()
        prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        problem = problem_from_row(kwargs, kit.task)
        request_id = uuid4().hex  # root, probes and siblings: one sticky replica, one warm prefix cache
        response_length = int(self.rollout_config.response_length)

        steps: list[int] = []  # the policy versions (global steps) the servers generated with

        async def call(ids: list[int], params: dict):
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=ids, sampling_params=params)
            steps.extend(
                out.extra_fields[k]
                for k in ("global_steps", "min_global_steps", "max_global_steps")
                if out.extra_fields.get(k) is not None
            )
            return out

        async def generate(ids: list[int], params: dict):
            out = await call(ids, params)
            return out.token_ids, out.log_probs

        async def generate_extra(ids: list[int], params: dict):  # the prompt_logprobs probe reads extra_fields
            out = await call(ids, params)
            return out.token_ids, out.extra_fields

        async def read(prefix, cuts, suffix, read_len, k, seed):
            if isinstance(kit.probe, PromptLogprobsProbe):
                return await kit.probe.read(generate_extra, prefix, cuts, suffix, read_len, k, seed)
            return await kit.probe.read(
                await self._replica_url(kit, request_id), prefix, cuts, suffix, read_len, k, seed
            )

        extras = {
            key: sampling_params[key] for key in ("top_k", "repetition_penalty", "logprobs") if key in sampling_params
        }
        backend = ServerBackend(loop, generate, read, kit.max_logprobs, extras)
        temperature, top_p = float(sampling_params.get("temperature", 1.0)), float(sampling_params.get("top_p", 1.0))
        seed = derive(s.seed, problem.id, kwargs.get("session_id", 0))
        sampling = Sampling(response_length, temperature, top_p)
        if self.tree:
            build = functools.partial(
                tree_rollout,
                [prompt_ids],
                [problem.id],
                [problem.answer],
                backend,
                kit.selector.bound_to(backend),
                kit.newline,
                s,
                sampling,
                kit.eos,
                seed,
            )
        else:
            build = functools.partial(
                flat_rollout,
                [prompt_ids],
                [problem.id],
                [problem.answer],
                backend,
                1,
                sampling,
                kit.eos,
                seed,
            )
        trees, times = await loop.run_in_executor(kit.pool, build)
        tree = trees[0]
        decode = functools.partial(self.tokenizer.decode, skip_special_tokens=True)
        reward_cfg = RewardConfig(response_length, s.overlong_buffer, s.overlong_factor)
        await loop.run_in_executor(kit.pool, score_trees, trees, [problem], kit.task, decode, reward_cfg, kit.eos)
        if self.tree:
            _FINISHED.append(tree_forks(tree))
        metrics = AgentLoopMetrics(generate_sequences=times.generate_s)
        outputs = leaf_outputs(
            tree, prompt_ids, backend if sampling_params.get("logprobs") else None, metrics, times.select_s
        )
        if steps:
            for out in outputs:
                out.extra_fields.update(min_global_steps=min(steps), max_global_steps=max(steps))
        return outputs

    async def _replica_url(self, kit: TreeKit, request_id: str) -> str:
        """The OpenAI base URL of the replica that sticky routing gives ``request_id``."""
        server_id, handle = await self.server_manager._acquire_server(request_id)
        try:
            if server_id not in kit.addresses:
                host, port = await handle.get_server_address.remote()
                host = f"[{host}]" if ":" in str(host) else host
                kit.addresses[server_id] = f"http://{host}:{port}"
            return kit.addresses[server_id]
        finally:
            self.server_manager._release_server(server_id, request_id=request_id)


@register("bsb_single")
class BsbSingleAgentLoop(BsbTreeAgentLoop):
    """One chain per call, scored by the bsb task's verifier (validation)."""

    tree = False


def leaf_outputs(
    tree: PromptTree,
    prompt_ids: list[int],
    backend: ServerBackend | None,
    metrics: AgentLoopMetrics,
    select_s: float = 0.0,
) -> list[AgentLoopOutput]:
    """One verl output per leaf, with its own reward, correctness and place in the tree."""
    roots = {leaf.group: leaf.response for leaf in tree.leaves if leaf.origin == "root"}
    out = []
    for leaf in tree.leaves:
        fork = tree.fork_positions[leaf.group] if leaf.group < len(tree.fork_positions) else None
        score = tree.fork_scores[leaf.group] if leaf.group < len(tree.fork_scores) else math.nan
        logprobs = (
            backend.leaf_logprobs(prompt_ids, roots.get(leaf.group, leaf.response), leaf.response, leaf.prefix_len)
            if backend
            else None
        )
        out.append(
            AgentLoopOutput(
                prompt_ids=list(prompt_ids),
                response_ids=list(leaf.response),
                response_mask=[1] * len(leaf.response),
                response_logprobs=logprobs,
                reward_score=float(leaf.reward),
                num_turns=2,
                metrics=metrics,
                extra_fields={
                    "reward_extra_info": {"acc": float(leaf.correct), "score": float(leaf.reward)},
                    "bsb_group": int(leaf.group),
                    "bsb_prefix_len": int(leaf.prefix_len),
                    "bsb_origin": leaf.origin,
                    "bsb_fork": -1 if fork is None else int(fork),
                    "bsb_fork_score": float(score),
                    "bsb_refills": tree.refills,
                    "bsb_fallbacks": tree.fallbacks,
                    "bsb_probe_tokens": tree.probe_tokens,
                    "bsb_select_s": select_s,
                    "turn_scores": [],
                    "tool_rewards": [],
                },
            )
        )
    return out
