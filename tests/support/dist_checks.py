"""Checks of the data-parallel mechanisms, run by every rank of ``torchrun --nproc_per_node=2 dist_checks.py OUT``;
rank r writes ``OUT/rank{r}.json`` with what it measured (the test asserts on it):

* ``uneven_reads``: under :func:`unsharded`, rank r runs r + 1 Lens-Shift reads of different lengths (forward
  counts that differ by rank) without a collective, and they equal an unsharded copy's;
* ``update``: :func:`update_policy` over 5 rows with micro_batch 2 (rank 0 back-propagates 3 rows in two
  micro-batches, rank 1 two rows and one empty micro-batch) gives the weights one process gets on the same rows;
* ``unit_question``: the same for [TwoStage] Arm 11's per-question unit-norm accumulation.
"""

import copy
import datetime
import json
import sys
from pathlib import Path

import torch
import transformers

from bsb.engine.hf_backend import HFBackend
from bsb.train.config import TrainConfig
from bsb.train.distributed import World
from bsb.train.sharding import full_state_dict, shard_policy, unsharded
from bsb.train.update import Row, update_policy


def tiny():
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    return transformers.Qwen3ForCausalLM(cfg).eval()


def rows():
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(5):
        n = 3 + i
        resp = torch.randint(3, 40, (n,), generator=g).tolist()
        out.append(Row([1, 2 + i], resp, torch.randn(n, generator=g), question=i % 2))
    return out


def updated(model, cfg, world):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    info = update_policy(model, opt, sched, rows(), cfg, 0, seed=3, world=world)
    return info


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

    for name, extra in (("update", {}), ("unit_question", {"unit_question_grad": True, "grad_accum_questions": 2})):
        cfg = TrainConfig(micro_batch=2, minibatches=1 if extra else 2, **extra)
        alone = copy.deepcopy(plain)
        info_alone = updated(alone, cfg, World())
        together = shard_policy(copy.deepcopy(plain), torch.device("cpu"), torch.float32)
        info = updated(together, cfg, world)
        full = full_state_dict(together)
        want = alone.state_dict()
        report[name] = {
            "max_diff": max(float((full[k] - want[k]).abs().max()) for k in full) if full else None,  # rank 0 only
            "loss": [info["loss"], info_alone["loss"]],
            "grad_norm": [info["grad_norm"], info_alone["grad_norm"]],
            "clip_frac": [info["clip_frac"], info_alone["clip_frac"]],
        }
    Path(out, f"rank{rank}.json").write_text(json.dumps(report))
    torch.distributed.barrier()  # no rank leaves while another still talks
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
