"""The data-parallel world a trainer runs in: ranks launched by ``torchrun``, and the few collectives the trainer uses.

``bsb train`` started by ``torchrun`` (it sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``) joins one
process group: gloo on the CPU, NCCL on CUDA (one GPU a rank, ``cuda:LOCAL_RANK``, made current before the group
starts, and the group bound to it), NCCL for CUDA tensors and gloo for host ones with ``fsdp_cpu_offload`` (its
shards live in host memory: gradient norms and gathers over them run there). Started without torchrun it is
:data:`SOLO`, world size 1 with no process group: today's one-process trainer, unchanged. Everything here is
PyTorch's own (``torch.distributed``); bsb adds no communication layer, only these names for what it asks of it:

* :meth:`World.split` / :meth:`World.part`: the one rule that divides work between ranks: contiguous slices, the
  first ``n % size`` ranks one item more (:meth:`World.share`: the same where the count must divide evenly, a round's
  prompts);
* :meth:`World.gather`: every rank's Python objects (trees, counts) in rank order, i.e. the global order;
* :meth:`World.sum`: a float summed over ranks (loss and token counts for the metrics).

Collectives time out after ``dist_timeout_s``: a rank that hangs ends every rank with an error naming the
collective instead of a silent wait; ``torchrun`` itself ends the others when one dies.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch

from bsb.engine.device import TORCHRUN_ENV, launched_by_torchrun


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    launched: bool = False  # under torchrun (a process group exists, the policy is sharded with FSDP2)

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes metrics, config.yaml and the progress bar."""
        return self.rank == 0

    def split(self, n: int) -> tuple[int, int]:
        """``[start, stop)`` of this rank's contiguous share of ``n`` items, the first ``n % size`` ranks one more."""
        per, extra = divmod(n, self.size)
        start = self.rank * per + min(self.rank, extra)
        return start, start + per + (self.rank < extra)

    def share(self, n: int) -> tuple[int, int]:
        """:meth:`split` of ``n`` items that must divide evenly over the ranks."""
        if n % self.size:
            raise ValueError(f"{n} items do not split evenly over {self.size} ranks")
        return self.split(n)

    def part(self, items: list) -> list:
        """This rank's :meth:`split` of ``items``."""
        lo, hi = self.split(len(items))
        return items[lo:hi]

    def gather(self, obj) -> list:
        """``obj`` of every rank, in rank order (``[obj]`` at world size 1 without torchrun)."""
        if not self.launched:
            return [obj]
        out = [None] * self.size
        torch.distributed.all_gather_object(out, obj)
        return out

    def sum(self, value: float) -> float:
        if not self.launched:
            return float(value)
        return float(sum(self.gather(float(value))))

    def barrier(self) -> None:
        if self.launched:
            torch.distributed.barrier()

    def main_first(self, fn):
        """``fn()`` on rank 0 first, then on the other ranks (one writer of a cache the others then read)."""
        if not self.main:
            self.barrier()
        out = fn()
        if self.main:
            self.barrier()
        return out


SOLO = World()


def torchrun_env() -> dict | None:
    """The launch torchrun describes in the environment, or None when not launched by it."""
    if not launched_by_torchrun():
        return None
    try:
        return {k: int(os.environ[k]) for k in TORCHRUN_ENV}
    except ValueError:
        raise ValueError(f"torchrun's {', '.join(TORCHRUN_ENV)} must be integers") from None


def check_launch(cfg, size: int, device: torch.device) -> None:
    """A world the run cannot use: one clear error, on every rank, before any model loads."""
    if cfg.prompts_per_step % size or cfg.gen_prompts % size:
        raise ValueError(
            f"world size {size} must divide prompts_per_step ({cfg.prompts_per_step}) and gen_prompts "
            f"({cfg.gen_prompts}): every rank generates an equal share of a round"
        )
    if cfg.fsdp_cpu_offload and device.type != "cuda":
        raise ValueError("fsdp_cpu_offload moves GPU shards to host memory: it needs device=cuda")
    if device.type == "cuda":
        visible = torch.cuda.device_count()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", size))
        if local > visible:
            raise ValueError(
                f"torchrun started {local} ranks on this node but only {visible} CUDA device(s) are visible: "
                f"use --nproc_per_node={visible} or fewer"
            )


def init_world(cfg, device: torch.device) -> tuple[World, torch.device]:
    """The world of this process and its device: :data:`SOLO` and ``device`` without torchrun; under torchrun the
    launch is checked, this rank's GPU chosen (``cuda:LOCAL_RANK``) and the process group joined."""
    env = torchrun_env()
    if env is None:
        if cfg.fsdp_cpu_offload:
            raise ValueError(
                "fsdp_cpu_offload offloads FSDP2 shards: launch with torchrun (--nproc_per_node=1 for one GPU)"
            )
        return SOLO, device
    if cfg.device.startswith("cuda:"):
        raise ValueError(f"device={cfg.device} under torchrun: use device=cuda (each rank takes cuda:LOCAL_RANK)")
    world = World(env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], launched=True)
    check_launch(cfg, world.size, device)
    if device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(
            process_group_backend(device, cfg.fsdp_cpu_offload),
            timeout=datetime.timedelta(seconds=cfg.dist_timeout_s),
            **({"device_id": device} if device.type == "cuda" else {}),
        )
    return world, device


def process_group_backend(device: torch.device, cpu_offload: bool) -> str:
    """gloo on the CPU; NCCL on CUDA, plus gloo for host tensors when FSDP2 shards are offloaded (a norm or a
    ``full_tensor()`` over CPU shards otherwise fails: "No backend type associated with device type cpu"), as
    torchtitan and torchtune do."""
    if device.type != "cuda":
        return "gloo"
    return "cuda:nccl,cpu:gloo" if cpu_offload else "nccl"


# what gloo and NCCL say when a peer is gone or a collective waited past the timeout (gloo raises plain RuntimeErrors)
PEER_LOST = ("connection closed by peer", "connection reset by peer", "timed out", "timeout", "broken pipe", "nccl")


def collective_failure(err: BaseException) -> bool:
    """Whether ``err`` is a collective that failed because another rank died or hung."""
    if isinstance(err, torch.distributed.DistError):
        return True
    return isinstance(err, RuntimeError) and any(m in str(err).lower() for m in PEER_LOST)


def close_world(world: World) -> None:
    if world.launched and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
