"""Checks of the data-parallel mechanisms, run by every rank of ``torchrun --nproc_per_node=2 dist_checks.py OUT``;
rank r writes ``OUT/rank{r}.json`` with what it measured (the test asserts on it):

* ``uneven_reads``: under :func:`unsharded`, rank r runs r + 1 Lens-Shift reads of different lengths (forward
  counts that differ by rank) without a collective, and they equal an unsharded copy's;
* ``update``: :func:`update_policy` over 5 rows with micro_batch 2 (rank 0 back-propagates 3 rows in two
  micro-batches, rank 1 two rows and one empty micro-batch) gives the weights one process gets on the same rows;
* ``unit_question``: the same for [TwoStage] Arm 11's per-question unit-norm accumulation;
* ``tree_update``, ``tree_unit_question``: the same two tree-packed (``update_packing=tree``) over rows of three fork
  groups (rank 0 takes two whole groups, rank 1 one and empty micro-batches) against one process's (the tree-packed
  update against the per-path one: tests/train/test_tree_pack.py);
* ``placed``: :func:`place_policy` under torchrun builds the policy on the meta device, shards it and fills the shards
  from rank 0 (the only rank that reads the checkpoint): its weights, rotary buffers, generation defaults and logits
  equal ``from_pretrained``'s.
"""

import copy
import datetime
import json
import sys
from pathlib import Path

import torch
import transformers
from tiny_models import tiny_model

from bsb.engine.hf_backend import HFBackend
from bsb.train.config import TrainConfig
from bsb.train.distributed import World
from bsb.train.run_plan import resolve_plan
from bsb.train.sharding import full_state_dict, place_policy, shard_policy, unsharded
from bsb.train.tree import Row
from bsb.train.update import update_policy


def tiny():
    return tiny_model("xs", num_hidden_layers=2, tie_word_embeddings=True)


def rows():
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(5):
        n = 3 + i
        resp = torch.randint(3, 40, (n,), generator=g).tolist()
        out.append(Row([1, 2 + i], resp, torch.randn(n, generator=g), question=i % 2))
    return out


def tree_rows():
    """Two trees: one of a fork group after 3 shared tokens and a group forked at 0 (3 leaves each), one of a group
    after 2 shared tokens."""
    g = torch.Generator().manual_seed(2)
    ids = lambda n: torch.randint(3, 40, (n,), generator=g).tolist()  # noqa: E731
    out = []
    for q, group, shared in ((0, 0, 3), (0, 1, 0), (1, 0, 2)):
        prompt, pre = [1, 2 + q, 5], ids(shared)
        for tail in (2, 4, 3):
            resp = pre + ids(tail)
            out.append(Row(prompt, resp, torch.randn(len(resp), generator=g), q, group, shared))
    return out


def updated(model, cfg, world, rows_of=rows):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    info = update_policy(model, opt, sched, rows_of(), cfg, resolve_plan(cfg, model)[0], 0, seed=3, world=world)
    return info


def grad_diff(together, alone) -> dict:
    """The last mini-batch's gradients, gathered (a collective: every rank calls it), against one process's, and the
    largest gradient entry they are relative to."""
    diff = top = 0.0
    for p, q in zip(together.parameters(), alone.parameters(), strict=True):
        if q.grad is None:
            continue
        g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        diff, top = max(diff, float((g - q.grad).abs().max())), max(top, float(q.grad.abs().max()))
    return {"grad_diff": diff, "grad_max": top}


def placed(plain, out: Path, world) -> dict:
    """The sharded policy place_policy builds from a checkpoint of ``plain``, against from_pretrained's."""
    path = out / "checkpoint"
    if world.main:
        plain.generation_config.eos_token_id = 7  # a default only the checkpoint's generation_config.json carries
        plain.save_pretrained(path)
    torch.distributed.barrier()
    reads = []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def counted(*args, **kwargs):
        reads.append(str(args[0]))
        return real(*args, **kwargs)

    transformers.AutoModelForCausalLM.from_pretrained = counted
    try:
        cfg = TrainConfig(micro_batch=2)
        model = place_policy(path, world, torch.device("cpu"), torch.float32, cfg).model
    finally:
        transformers.AutoModelForCausalLM.from_pretrained = real
    want = real(path, dtype=torch.float32)
    full = full_state_dict(model)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    with unsharded(model), torch.no_grad():
        logits = model(ids).logits
    return {
        "checkpoint_reads": len(reads),
        "max_diff": max(float((full[k] - want.state_dict()[k]).abs().max()) for k in full) if full else None,
        "buffers": {k: float((b - want.get_buffer(k)).abs().max()) for k, b in model.named_buffers()},
        "meta": [k for k, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type == "meta"],
        "eos": model.generation_config.eos_token_id,
        "training": model.training,
        "logits_diff": float((logits - want(ids).logits).abs().max().detach()),
    }


def main(out: str) -> None:
    torch.distributed.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    world = World(rank, size, rank, launched=True)
    report = {}

    plain = tiny()
    sharded = shard_policy(copy.deepcopy(plain), torch.device("cpu"), torch.float32)
    prefix = list(range(3, 12 + 6 * rank))
    with unsharded(sharded):
        got = [HFBackend(sharded).lens_profiles(prefix[: 6 + j], [2, 4], [5, 6], [7, 8])[0] for j in range(rank + 1)]
    want = [HFBackend(plain).lens_profiles(prefix[: 6 + j], [2, 4], [5, 6], [7, 8])[0] for j in range(rank + 1)]
    report["uneven_reads"] = {
        "reads": len(got),
        "max_diff": max(float((a - b).abs().max()) for a, b in zip(got, want)),
    }
    # after unsharded(), each unit reshards after its forward as FSDP2 set it: the layers do, the root does not
    groups = lambda m: m._get_fsdp_state()._fsdp_param_groups  # noqa: E731
    layers = [m for m in sharded.modules() if m is not sharded and hasattr(m, "_get_fsdp_state")]
    report["reshard_after_forward"] = {
        "root": any(g.post_forward_mesh_info is not None for g in groups(sharded)),
        "layers": [all(g.post_forward_mesh_info is not None for g in groups(m)) for m in layers],
    }

    unit = {"unit_question_grad": True, "grad_accum_questions": 2}
    for name, extra, rows_of in (
        ("update", {}, rows),
        ("unit_question", unit, rows),
        ("tree_update", {"update_packing": "tree"}, tree_rows),
        ("tree_unit_question", {"update_packing": "tree", **unit}, tree_rows),
    ):
        cfg = TrainConfig(micro_batch=2, minibatches=2 if "unit_question_grad" not in extra else 1, **extra)
        alone = copy.deepcopy(plain)
        info_alone = updated(alone, cfg, World(), rows_of)
        together = shard_policy(copy.deepcopy(plain), torch.device("cpu"), torch.float32)
        info = updated(together, cfg, world, rows_of)
        full = full_state_dict(together)
        want = alone.state_dict()
        report[name] = {
            "max_diff": max(float((full[k] - want[k]).abs().max()) for k in full) if full else None,  # rank 0 only
            **grad_diff(together, alone),
            "loss": [info["loss"], info_alone["loss"]],
            "grad_norm": [info["grad_norm"], info_alone["grad_norm"]],
            "clip_frac": [info["clip_frac"], info_alone["clip_frac"]],
            "update_tokens": [info["update_tokens"], info_alone["update_tokens"]],
            "update_tokens_paths": [info["update_tokens_paths"], info_alone["update_tokens_paths"]],
        }
    report["placed"] = placed(plain, Path(out), world)
    Path(out, f"rank{rank}.json").write_text(json.dumps(report))
    torch.distributed.barrier()  # no rank leaves while another still talks
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
