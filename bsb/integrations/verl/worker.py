"""The TransferQueue worker override that keeps each leaf's own reward and writes the tree into its uid (needs verl).

verl's v1 worker (``AgentLoopWorkerTQ``) stores every output of a multi-output agent-loop call, but first copies the
last output's reward and ``reward_extra_info`` onto all of them. :class:`BsbTreeAgentLoopWorker` stores them as
they are and sets each row's ``uid`` to ``"{uid}#{group}#{prefix_len}"`` (:func:`~bsb.integrations.verl.estimators.
encode_uid`), which is all verl passes an advantage estimator. The TransferQueue keys stay ``{uid}_{session}_{i}``,
so the replay buffer and DAPO's filter still see one group per prompt. Validation rows run ``bsb_single``.

It also hands the trainer the forks of the trees it finished (:meth:`BsbTreeAgentLoopWorker.bsb_fork_trees`), for
the step's fork statistics in verl's metrics (:mod:`~bsb.integrations.verl.metrics`).

Select it with ``actor_rollout_ref.rollout.agent.agent_loop_manager_class:
bsb.integrations.verl.worker.BsbTreeAgentLoopManager`` (``bsb_tree.yaml`` does). The worker subclasses verl's
plain ``AgentLoopWorker`` and borrows the TransferQueue methods: the Ray-wrapped TQ class cannot be subclassed
(zero-argument ``super()`` inside verl).
"""

from __future__ import annotations

import torch
import transfer_queue as tq
from verl.experimental.agent_loop import AgentLoopManager, AgentLoopOutput, AgentLoopWorker
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from bsb.integrations.verl.estimators import encode_uid
from bsb.integrations.verl.tree_loop import take_finished
from bsb.train.fork_stats import TreeForks

_TQ = AgentLoopWorkerTQ.__ray_actor_class__


class BsbTreeAgentLoopWorker(AgentLoopWorker):
    def __init__(self, *args, **kwargs):
        AgentLoopWorker.__init__(self, *args, **kwargs)
        tq.init()
        self.background_tasks = set()

    generate_sequences = _TQ.generate_sequences
    _run_prompt = _TQ._run_prompt

    def bsb_fork_trees(self) -> list[TreeForks]:
        """The forks of the trees this worker finished since the last call (the trainer's fork statistics,
        :mod:`bsb.integrations.verl.metrics`)."""
        return take_finished()

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name: str, trace: bool = True, **kwargs):
        if trajectory["validate"] and agent_name == "bsb_tree":
            agent_name = "bsb_single"
        return await AgentLoopWorker._run_agent_loop(
            self, sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs
        )

    async def _agent_loop_postprocess(
        self, output: AgentLoopOutput | list[AgentLoopOutput], validate, **kwargs
    ) -> None:
        """verl's TQ post-processing, minus the reward copy; each row's uid carries its place in the tree."""
        uid, session_id = kwargs["uid"], kwargs["session_id"]
        outputs = output if isinstance(output, list) else [output]
        if not outputs:
            return
        await self._compute_score(outputs, kwargs=kwargs)  # a no-op for bsb's leaves: each carries its own reward
        keys, fields, tags = [], [], []
        for i, out in enumerate(outputs):
            prompts = torch.tensor(out.prompt_ids, dtype=torch.int64)
            responses = torch.tensor(out.response_ids, dtype=torch.int64)
            input_ids = torch.cat([prompts, responses], dim=0)
            attention_mask = torch.ones_like(input_ids, dtype=torch.int64)
            multi_modal_inputs = self._compute_multi_modal_inputs(out, input_ids)
            position_ids = self._compute_position_ids(
                input_ids.unsqueeze(0), attention_mask.unsqueeze(0), multi_modal_inputs
            ).squeeze(0)
            keys.append(f"{uid}_{session_id}_{i}")
            field = out.as_dict()
            field.update(kwargs)
            field.pop("multi_modal_data", None)
            extra = field["extra_fields"]
            field["uid"] = encode_uid(uid, extra.get("bsb_group", i), extra.get("bsb_prefix_len", 0))
            field["loss_mask"] = field["response_mask"]
            field["input_ids"], field["position_ids"], field["multi_modal_inputs"] = (
                input_ids,
                position_ids,
                multi_modal_inputs,
            )
            fields.append(field)
            tags.append(
                {
                    "status": "success",
                    "prompt_len": prompts.size(0),
                    "response_len": responses.size(0),
                    "seq_len": prompts.size(0) + responses.size(0),
                    "global_steps": kwargs["global_steps"],
                    "min_global_steps": extra.get("min_global_steps"),
                    "max_global_steps": extra.get("max_global_steps"),
                }
            )
        await tq.async_kv_batch_put(
            keys=keys,
            fields=list_of_dict_to_tensordict(fields),
            tags=tags,
            partition_id="train" if not validate else "val",
        )


class BsbTreeAgentLoopManager(AgentLoopManagerTQ):
    """verl's TQ agent-loop manager with :class:`BsbTreeAgentLoopWorker` as its workers."""

    def __init__(self, *args, **kwargs):
        import ray

        self.agent_loop_workers_class = ray.remote(BsbTreeAgentLoopWorker)
        AgentLoopManager.__init__(self, *args, **kwargs)
