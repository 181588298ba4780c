"""Where the policy's weights live, chosen once: :func:`place_policy` returns a :class:`Placement`, plain (one
process) or :class:`Sharded` over a data-parallel world with PyTorch's FSDP2 (``fully_shard``), with checkpoints in
``torch.distributed.checkpoint`` (DCP). The trainer and the run folder ask the placement, never the world, how to
gather weights for the engine and the policy's own forwards, how to save, load and export.

* :func:`shard_policy`: one FSDP unit per decoder layer plus the root (embeddings, final norm, LM head: a tied
  head stays with its embedding). fp32 master weights and AdamW state are sharded, ``16·P/N`` bytes a rank; on CUDA
  a bf16 (or fp16) compute dtype becomes FSDP2's mixed-precision policy (params gathered in that dtype, gradients
  reduced in fp32). ``gradient_checkpointing`` recomputes each decoder layer in the backward;
  ``fsdp_cpu_offload`` keeps the shards and their optimizer state in host memory.
* :func:`token_logprobs_method`: the update's forward (hidden states, then the chunked log-probs of the response
  tokens through the LM head) registered as an FSDP forward method, so the root's parameters are gathered for it
  and its gradients reduce-scattered like any forward's.
* :func:`unsharded`: every unit gathered once for a rollout phase (generation and white-box reads run many
  forwards of different counts on different ranks; with the weights already whole, none of them is a collective).
* :func:`engine_weights`: the weights for a rank's rollout engine, gathered one tensor at a time (peak: one
  tensor's full copy beyond the engine's own weights).
* :func:`save_sharded` / :func:`load_sharded`: model and optimizer as a DCP checkpoint; DCP reshards on load, so a
  run resumes at another world size (or without torchrun, world size 1). :func:`full_state_dict`: the whole model on
  rank 0 for the Hugging Face export.
"""

from __future__ import annotations

import contextlib
import types
from pathlib import Path

import torch

from bsb.engine.device import compute_device
from bsb.train.distributed import SOLO, World

DCP_DIR = "dcp"


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of ``t`` (``t`` itself unless it is an FSDP2 DTensor)."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def whole(t: torch.Tensor) -> torch.Tensor:
    """The whole of ``t`` gathered from every rank (a collective for an FSDP2 DTensor; ``t`` itself otherwise)."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


class Placement:
    """The policy in one process: its weights as they are. :class:`Sharded` is the FSDP2 one; both are built by
    :func:`place_policy`, once."""

    sharded = False

    def __init__(self, model, world: World = SOLO):
        self.model, self.world = model, world

    def whole_weights(self, enabled: bool = True):
        """A context in which the policy's own forwards (HF rollouts, white-box reads) see whole weights."""
        return contextlib.nullcontext()

    def engine_weights(self, dtype: torch.dtype):
        """``(name, tensor)`` of every weight in the engine's dtype (a bf16 engine gets half the bytes, and no
        per-tensor casts)."""
        return ((k, v.detach().to(dtype)) for k, v in self.model.state_dict().items())

    def save(self, optimizer, folder: Path, tokenizer) -> dict:
        """Write the model (and, sharded, the optimizer) into the checkpoint ``folder``; returns what goes into its
        ``trainer.pt`` besides the scheduler and RNG states."""
        self.model.save_pretrained(folder / "model")
        tokenizer.save_pretrained(folder / "model")
        return {"optimizer": optimizer.state_dict()}

    def load(self, optimizer, folder: Path, blob: dict) -> None:
        """The optimizer (and, from a DCP checkpoint, the model) of checkpoint ``folder``; DCP reshards to this
        world, so a checkpoint of any world size resumes here."""
        if (folder / DCP_DIR).exists():
            load_sharded(self.model, optimizer, folder / DCP_DIR)
        else:
            self._load_full_optimizer(optimizer, blob["optimizer"])

    def _load_full_optimizer(self, optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)

    def export(self, path: Path, tokenizer) -> None:
        """The policy as a Hugging Face folder (written by rank 0)."""
        self.model.save_pretrained(path)
        tokenizer.save_pretrained(path)


class Sharded(Placement):
    """The policy sharded with FSDP2 over ``world`` (:func:`shard_policy`)."""

    sharded = True

    def whole_weights(self, enabled: bool = True):
        return unsharded(self.model, enabled)

    def engine_weights(self, dtype: torch.dtype):
        return engine_weights(self.model, dtype)

    def save(self, optimizer, folder: Path, tokenizer) -> dict:
        save_sharded(self.model, optimizer, folder / DCP_DIR)
        return {}

    def _load_full_optimizer(self, optimizer, state: dict) -> None:
        load_full_optimizer(self.model, optimizer, state)  # a one-process checkpoint resumed sharded

    def export(self, path: Path, tokenizer) -> None:
        weights = full_state_dict(self.model)  # a collective: every rank takes part
        if self.world.main:
            self.model.save_pretrained(path, state_dict=weights)
            tokenizer.save_pretrained(path)
        self.world.barrier()


def place_policy(path: Path, world: World, device: torch.device, compute_dtype: torch.dtype, cfg) -> Placement:
    """The policy of checkpoint ``path`` as fp32 master weights on ``device`` (forwards run under autocast in
    ``compute_dtype``, :mod:`bsb.engine.device`): sharded with FSDP2 under torchrun (:func:`load_sharded_policy`),
    plain otherwise."""
    if world.launched:
        return Sharded(load_sharded_policy(path, world, device, compute_dtype, cfg), world)
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return Placement(model, world)


def load_sharded_policy(path: Path, world: World, device: torch.device, compute_dtype: torch.dtype, cfg):
    """The policy of checkpoint ``path`` sharded with FSDP2 (:func:`shard_policy`) the way torchtitan builds models
    larger than a GPU: built on the meta device, sharded, its shards allocated (on ``device``, or in host memory with
    ``fsdp_cpu_offload``) and filled one tensor at a time from rank 0, the only rank that reads the checkpoint (into
    host memory). No rank holds the whole fp32 model on its GPU: the peak there is one whole tensor beside the shards.
    """
    import transformers
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.from_pretrained(path), dtype=torch.float32
        )
    with contextlib.suppress(OSError):  # the checkpoint's generation defaults, as from_pretrained reads them
        model.generation_config = transformers.GenerationConfig.from_pretrained(path)
    shard_policy(model, device, compute_dtype, cfg.fsdp_cpu_offload, cfg.gradient_checkpointing)
    model.to_empty(device="cpu" if cfg.fsdp_cpu_offload else device)
    whole = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32) if world.main else None
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, whole.state_dict() if whole is not None else {}, options=options)
    fill_unsaved_tensors(model, whole, device)
    return model.eval()  # as from_pretrained returns it


def fill_unsaved_tensors(model, whole, device: torch.device) -> None:
    """The tensors of ``model`` no state dict carries (non-persistent buffers such as the rotary frequencies, and
    tensors kept as plain attributes), computed when ``whole`` (rank 0's copy, None elsewhere) was built and
    broadcast from it; every buffer on ``device``, where FSDP2 would have moved it had the model been built there."""
    saved = set(model.state_dict())
    for prefix, module in model.named_modules():
        for name, value in list(vars(module).items()) + list(module._buffers.items()):
            if not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter):
                continue
            key = f"{prefix}.{name}" if prefix else name
            if key in saved:  # a persistent buffer: loaded with the weights, moved to where forwards run
                setattr(module, name, value.to(device))
                continue
            if whole is not None:
                fresh = getattr(whole.get_submodule(prefix), name).detach().to(device).clone()
            else:
                fresh = torch.empty_like(value, device=device)
            torch.distributed.broadcast(fresh, src=0)
            setattr(module, name, fresh)


def decoder_layers(model) -> list[torch.nn.Module]:
    """The model's decoder layers: modules of the classes its ``_no_split_modules`` names (transformers' own list of
    the blocks that must stay whole)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} names no decoder layer class (_no_split_modules): cannot shard it per layer"
        )
    return layers


def shard_policy(
    model, device: torch.device, compute_dtype: torch.dtype, cpu_offload: bool = False, checkpointing: bool = False
):
    """``model`` (fp32, on ``device``) wrapped with FSDP2 per decoder layer and at the root, in place."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mixed = device.type == "cuda" and compute_dtype != torch.float32
    kw = dict(
        mp_policy=MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
        if mixed
        else MixedPrecisionPolicy(),
        offload_policy=CPUOffloadPolicy() if cpu_offload else OffloadPolicy(),
    )
    for layer in decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    token_logprobs_method(model)
    return model


def token_logprobs_method(model) -> None:
    """Give the sharded ``model`` a ``bsb_token_logprobs(ids, attn, rows, positions, targets)`` forward method
    (:func:`bsb.train.loss.hidden_token_logprobs`) that FSDP2 treats as a forward."""
    from torch.distributed.fsdp import register_fsdp_forward_method

    from bsb.train.loss import hidden_token_logprobs

    model.bsb_token_logprobs = types.MethodType(hidden_token_logprobs, model)
    register_fsdp_forward_method(model, "bsb_token_logprobs")


def _units(model):
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def unsharded(model, enabled: bool = True):
    """Every FSDP unit of ``model`` gathered (one collective each, on every rank) for the duration, and kept whole
    across forwards, so generation and reads that run different numbers of forwards on different ranks issue no
    collective. Resharded on exit, each unit back to FSDP2's own setting: the layers reshard after their forward, the
    root does not (its embedding and head would be gathered again at once for the backward: one more all-gather a
    micro-batch). A no-op when not ``enabled`` (an unsharded model)."""
    if not enabled:
        yield
        return
    units = _units(model)
    for unit in units:
        unit.unshard()
    model.set_reshard_after_forward(False)
    try:
        yield
    finally:
        model.set_reshard_after_forward(True)
        model.set_reshard_after_forward(False, recurse=False)  # the root, as fully_shard leaves it
        for unit in units:
            unit.reshard()


def engine_weights(model, dtype: torch.dtype):
    """``(name, tensor)`` of every weight, gathered and cast one at a time (a generator: a rollout engine loads each
    before the next is gathered). A shard offloaded to host memory goes to the compute device first, so the gather
    runs on NCCL rather than on gloo over the host (as TRL syncs an offloaded FSDP2 policy)."""
    device = compute_device(model)
    for name, value in model.state_dict().items():
        yield name, whole(value.to(device)).detach().to(dtype)


def local_bytes(model, optimizer) -> tuple[int, int]:
    """Bytes of parameters and of optimizer state this rank holds (its shards, not the logical sizes)."""
    params = sum(local(p).numel() * local(p).element_size() for p in model.parameters())
    state = sum(
        local(v).numel() * local(v).element_size()
        for s in optimizer.state.values()
        for v in s.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    )
    return params, state


def save_sharded(model, optimizer, path: Path) -> None:
    """Model and optimizer state as one DCP checkpoint in ``path`` (every rank writes its shards)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, optimizer)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(path))


def load_sharded(model, optimizer, path: Path) -> None:
    """Load a :func:`save_sharded` checkpoint into ``model`` and ``optimizer``, resharded to this world (sharded or
    a plain one-process model)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    msd, osd = get_state_dict(model, optimizer)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def full_state_dict(model) -> dict:
    """The whole model's weights on rank 0, in host memory (empty on other ranks)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    seen, tied = set(), set()  # a tied LM head is its embedding: written once, as a one-process save_pretrained does
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            tied.add(name)
        seen.add(id(p))
    return {k: v for k, v in weights.items() if k not in tied}


def load_full_optimizer(model, optimizer, state: dict) -> None:
    """A one-process optimizer state (``optimizer.state_dict()``: parameters by index, in ``model.parameters()``
    order) loaded into the sharded ``optimizer``: keyed by parameter name, then sharded by PyTorch's state-dict API."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = [name for name, _ in model.named_parameters()]
    by_name = {
        "state": {names[i]: v for i, v in state["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]],
    }
    set_optimizer_state_dict(model, optimizer, optim_state_dict=by_name, options=StateDictOptions(full_state_dict=True))
