"""What a run needs of a GPU's memory, planned before any model loads: the trainer's fp32 state (16 bytes a parameter,
sharded over the ranks, or in host memory with ``fsdp_cpu_offload``), the colocated engine's bf16 weights, the state a
chain keeps in the engine (keys and values, a hybrid's recurrent state), and the update's activations
(:mod:`bsb.engine.activations`): :func:`memory_plan` for ``bsb cost --memory``, :func:`check_colocation` for the
trainer's start, each from a local checkpoint's files or a known model's shape (:mod:`bsb.engine.known_models`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bsb.engine.known_models import COUNTED, known_config, known_params


def checkpoint_params(path) -> int:
    """Parameters of a local checkpoint, from its weight files' sizes and stored dtype (no weights loaded)."""
    path = Path(path)
    config = json.loads((path / "config.json").read_text()) if (path / "config.json").exists() else {}
    stored = str(config.get("torch_dtype") or config.get("dtype") or "float32")
    width = 2 if stored in ("bfloat16", "float16") else 4
    size = sum(f.stat().st_size for pattern in ("*.safetensors", "*.bin") for f in path.glob(pattern))
    return size // width


TRAIN_BYTES_PER_PARAM = 16  # fp32 weights, fp32 gradients, AdamW's two fp32 moments
ENGINE_BYTES_PER_PARAM = 2  # the rollout engine's bf16 copy of the weights


def model_params(path) -> float:
    """Parameters of the model at ``path``: counted from a local checkpoint, else [Fork]'s model of that name."""
    path = Path(path)
    if path.is_dir():
        n = checkpoint_params(path)
        if n:
            return float(n)
    known = known_params(path)
    if known is not None:
        return known
    raise ValueError(
        f"cannot count the parameters of {path}: no local checkpoint there and not one of "
        f"{', '.join(COUNTED)}; pass --params"
    )


def rollout_architecture(path):
    """The config of the model at ``path`` as transformers builds it (its ``layer_types`` resolved): a local
    checkpoint's config.json, else the known model of that name (:data:`bsb.engine.known_models.KNOWN_MODELS`); None
    when neither."""
    from transformers import AutoConfig

    path = Path(path)
    if (path / "config.json").is_file():
        return AutoConfig.from_pretrained(path)
    return known_config(path)


def rollout_state_bytes(config, tokens: int, bytes_per_value: int = 2) -> dict:
    """What the rollout engine keeps for one chain of ``tokens`` tokens, by layer type (bf16 by default): keys and
    values for a full-attention layer (2·H_kv·d_head a token), for a sliding layer only its window's, and for a
    recurrent (Mamba-2) layer its fixed state whatever the length: the SSM state (heads·head_dim·state) and the conv
    state ((heads·head_dim + 2·groups·state)·(kernel − 1)); MLP and MoE blocks keep nothing. ``{"kv": bytes,
    "recurrent": bytes, "total": bytes}``."""
    from bsb.engine.families import layer_kinds

    kinds = layer_kinds(config)
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * heads * head_dim * bytes_per_value
    window = getattr(config, "sliding_window", None) or tokens
    kv = sum(
        per_token * (tokens if k == "full_attention" else min(tokens, window))
        for k in kinds
        if k in ("full_attention", "sliding_attention")
    )
    recurrent = 0
    if "linear_attention" in kinds:
        inner = config.mamba_num_heads * config.mamba_head_dim
        ssm = inner * config.ssm_state_size
        conv = (inner + 2 * config.n_groups * config.ssm_state_size) * (config.conv_kernel - 1)
        recurrent = kinds.count("linear_attention") * (ssm + conv) * bytes_per_value
    return {"kv": kv, "recurrent": recurrent, "total": kv + recurrent}


OFFLOAD_BYTES_PER_PARAM = 6  # a gathered parameter in bf16 and its fp32 gradient before it is reduced and offloaded


def offload_gpu_bytes(config, params: float) -> float:
    """What the trainer keeps on a GPU under ``fsdp_cpu_offload`` (its shards and AdamW state in host memory): the
    root module's parameters (embeddings, an untied head) and two decoder layers (the one computing and the one
    prefetched), each gathered in bf16 with its fp32 gradient. A model from the code, not measured on a GPU."""
    root = config.vocab_size * config.hidden_size * (1 if getattr(config, "tie_word_embeddings", False) else 2)
    layer = max(0.0, params - root) / config.num_hidden_layers
    return OFFLOAD_BYTES_PER_PARAM * (root + 2 * layer)


def fsdp_root_bytes(config) -> float:
    """What FSDP2's root module keeps on a GPU beyond its shard, as bsb places the policy (:mod:`bsb.train.sharding`
    leaves the root gathered through the step): its parameters (the embeddings, an untied head) gathered in bf16, and
    in the backward the head's whole gradient in bf16 and its fp32 copy for the reduce-scatter. Qwen3-8B: 2.5 GB of
    root, 1.2 + 2.5 GB of head gradient. A model from the code, not measured on a GPU."""
    head = config.vocab_size * config.hidden_size
    root = head * (1 if getattr(config, "tie_word_embeddings", False) else 2)
    return 2 * root + (2 + 4) * head


def memory_plan(
    params: float,
    world_size: int,
    gpu_bytes: float,
    gpu_memory_utilization: float,
    offload: float | None = None,
    root: float = 0.0,
) -> dict:
    """What one GPU of a ``world_size``-rank FSDP2 run holds: the trainer's sharded fp32 state (16·P/N) and ``root``
    (:func:`fsdp_root_bytes`, under FSDP2) in the share the colocated engine leaves, and the engine's bf16 weights
    (2·P, whole on every rank) in its own share; with ``offload`` (:func:`offload_gpu_bytes`, ``fsdp_cpu_offload``)
    the trainer keeps that much on the GPU and its 16·P/N in host memory (``host_bytes``). Lower bounds:
    activations, the KV cache and one gathered layer come on top."""
    trainer = TRAIN_BYTES_PER_PARAM * params / world_size
    engine = ENGINE_BYTES_PER_PARAM * params
    room, share = (1 - gpu_memory_utilization) * gpu_bytes, gpu_memory_utilization * gpu_bytes
    on_gpu = trainer + root if offload is None else offload
    return {
        "gpus": world_size,
        "trainer_bytes": on_gpu,
        "host_bytes": 0.0 if offload is None else trainer,
        "root_bytes": root if offload is None else 0.0,
        "trainer_room": room,
        "engine_weight_bytes": engine,
        "engine_share": share,
        "fits": on_gpu <= room and engine <= share,
    }


def check_colocation(
    path,
    device: torch.device,
    gpu_memory_utilization: float,
    world_size: int = 1,
    update: list | None = None,
    offload: bool = False,
    compute_bytes: int = 2,
) -> None:
    """The trainer next to a vLLM engine on one GPU needs its fp32 weights, gradients and two AdamW moments (16 bytes
    a parameter; sharded over ``world_size`` ranks with FSDP2, 16·P/N a rank) in what the engine leaves, and beside
    them the activations of its largest micro-batch, the worst of ``update``'s shapes (rows, tokens a row, gradient
    checkpointing; ``TrainConfig.micro_batch_shapes``, :mod:`bsb.engine.activations`; a family it does not model is
    not checked): a share that leaves less is one error before any model loads, naming the fix. With ``offload``
    (``fsdp_cpu_offload``) the shards and AdamW state live in host memory: the GPU keeps
    :func:`offload_gpu_bytes`. Over several ranks FSDP2's root adds :func:`fsdp_root_bytes`, and a layer's input is
    ``compute_bytes`` a value (the compute dtype's size) instead of fp32's 4."""
    from bsb.engine.activations import input_bytes, update_activation_bytes, worst_micro_batch

    total = torch.cuda.get_device_properties(device).total_memory
    params = checkpoint_params(path)
    sharded = world_size > 1 or offload  # FSDP2 (launched with one rank without offload: priced as one process)
    arch = rollout_architecture(path) if update or sharded else None
    kept = offload_gpu_bytes(arch, params) if offload and arch is not None else None
    root = fsdp_root_bytes(arch) if world_size > 1 and arch is not None else 0.0
    plan = memory_plan(params, world_size, total, gpu_memory_utilization, kept, root)
    inputs = input_bytes(sharded, compute_bytes)
    need, room = plan["trainer_bytes"], plan["trainer_room"]
    if need > room and offload:
        raise ValueError(
            f"vllm_gpu_memory_utilization={gpu_memory_utilization} leaves the trainer {room / 2**30:.1f} GiB of "
            f"{total / 2**30:.1f} GiB, but even with fsdp_cpu_offload its root module and two gathered layers need "
            f"about {need / 2**30:.1f} GiB; lower vllm_gpu_memory_utilization"
        )
    if need > room:
        ranks = f" (sharded over {world_size} ranks)" if world_size > 1 else ""
        raise ValueError(
            f"vllm_gpu_memory_utilization={gpu_memory_utilization} leaves the trainer {room / 2**30:.1f} GiB of "
            f"{total / 2**30:.1f} GiB, but its fp32 weights, gradients and AdamW state need about "
            f"{need / 2**30:.1f} GiB a GPU{ranks}; "
            "lower vllm_gpu_memory_utilization, launch more ranks (torchrun --nproc_per_node), or keep the shards in "
            "host memory (fsdp_cpu_offload=true under torchrun; bsb cost --memory shows what stays on the GPU)"
        )
    update = worst_micro_batch(arch, update, inputs) if arch is not None and update else None
    acts = update_activation_bytes(arch, *update, input_bytes=inputs) if update is not None else None
    if acts is not None and need + acts > room:
        rows, width, checkpointing = update
        fit = int((room - need) // update_activation_bytes(arch, 1, width, True, input_bytes=inputs))
        fix = (
            f"set gradient_checkpointing=true and micro_batch_tokens={fit * width} ({fit} row(s) of {width:,} tokens "
            "fit)"
            if fit
            else "no checkpointed row of that length fits: launch more ranks or shorten max_response_len"
        )
        if mamba_fallback(arch):
            fix += "; or install mamba-ssm and causal-conv1d (their fused scan keeps far less)"
        raise ValueError(
            f"the update's micro-batch of {rows} x {width:,} tokens keeps about {acts / 2**30:.1f} GiB of activations"
            f"{' (checkpointed)' if checkpointing else ''}{mamba_fallback(arch)} beside {need / 2**30:.1f} GiB of "
            f"trainer state, in the {room / 2**30:.1f} GiB the engine leaves (bsb cost --memory); {fix}"
        )


def mamba_fallback(config) -> str:
    """What a model with Mamba-2 mixers runs them on, where the fast kernels are missing (``""`` otherwise): the
    figure above is transformers' PyTorch path, which the start check then names."""
    import importlib.util

    from bsb.engine.families import has_recurrent_layers

    missing = [m for m in ("mamba_ssm", "causal_conv1d") if importlib.util.find_spec(m) is None]
    if not has_recurrent_layers(config) or not missing:
        return ""
    return (
        f" on transformers' PyTorch path for its Mamba-2 mixers ({' and '.join(m.replace('_', '-') for m in missing)} "
        "not installed: the chunked scan keeps B and C repeated to every head)"
    )


def peak_rss_gb() -> float:
    """This process's peak resident memory so far, in GiB (``getrusage``: KiB on Linux, bytes on macOS)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**30 if sys.platform == "darwin" else 2**20)
