"""2 steps of ``bsb train`` on one GPU under torchrun (NCCL, FSDP2, bf16 compute) on a Qwen3-0.6B-shaped model with
random weights: each step's time split and the GPU's memory, written to ``OUT/gpu_train.json`` after the build and
after every step (a stage cut off by its time limit keeps what it measured).

    torchrun --standalone --nproc_per_node=1 bench/gpu_train.py OUT [--smoke]

The rollouts go through the HF backend (the GPU machine has no vLLM), the walk task's prompts and tokenizer; a random
model never answers right, so every group is homogeneous: ``homogeneous=backward`` runs the (0-weighted) backward of
every row anyway, so the update is timed at its full size. The steps are the trainer's own ``train_step``; the
validation, checkpoint and export around them (seconds of disk writes for a 0.6B model) are left out.
``--smoke``: a tiny model on the CPU (gloo), to check the script (the test suite runs it).
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from inputs import QWEN3_06B, QWEN3_TOY  # noqa: E402

GIB = 2**30
STEP_KEYS = ("step", "tokens_generated", "tokens_trained", "loss", "groups_kept")


def _model_dir(path: Path, smoke: bool) -> None:
    import transformers

    from bsb.embedded.tokenizer import walk_tokenizer

    cfg = transformers.Qwen3Config(num_hidden_layers=2 if smoke else 28, **(QWEN3_TOY if smoke else QWEN3_06B))
    tok = walk_tokenizer()
    cfg.eos_token_id, cfg.pad_token_id = tok.eos_token_id, tok.pad_token_id
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    tok.save_pretrained(path)


def _memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {}
    return {
        "allocated_gib": torch.cuda.memory_allocated(device) / GIB,
        "reserved_gib": torch.cuda.memory_reserved(device) / GIB,
        "peak_gib": torch.cuda.max_memory_allocated(device) / GIB,
    }


def _stop(signum, frame):
    # torchrun ends its workers with SIGTERM when the stage's limit sends it SIGINT: unwind so the report is written
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    from bsb.train.config import TrainConfig
    from bsb.train.sharding import local_bytes
    from bsb.train.trainer import Trainer

    out, smoke = Path(argv[0]), "--smoke" in argv
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _stop)
    report: dict = {"complete": False, "smoke": smoke, "torch": torch.__version__, "steps": []}
    main_rank = True

    def write():
        if main_rank:
            (out / "gpu_train.json").write_text(json.dumps(report, indent=1))

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        _model_dir(Path(tmp) / "model", smoke)
        report["model_s"] = time.perf_counter() - start
        cfg = TrainConfig(
            model=str(Path(tmp) / "model"),
            task="walk",
            backend="hf",
            device="cpu" if smoke else "cuda",
            steps=2,
            gen_prompts=4,
            prompts_per_step=4,
            chains=2,
            siblings=2,
            max_response_len=48 if smoke else 256,
            dynamic_sampling=False,
            homogeneous="backward",
            micro_batch=4,
            val_problems=4,
            val_samples=1,
            val_every=0,
            save_every=0,
            progress=False,
            out_dir=str(Path(tmp) / "run"),
        )
        start = time.perf_counter()
        trainer = Trainer(cfg, resume=False)
        main_rank = trainer.world.main
        params, state = local_bytes(trainer.policy, trainer.opt)
        report.update(
            world_size=trainer.world.size,
            device=str(trainer.device),
            dtype=str(trainer.dtype),
            build_s=time.perf_counter() - start,
            param_gib=params / GIB,
            optimizer_gib=state / GIB,
            after_build=_memory(trainer.device),
        )
        write()
        try:
            for _ in range(cfg.steps):
                if trainer.device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(trainer.device)
                m = trainer.train_step()
                row = {k: v for k, v in m.items() if k.startswith("time_") or k in STEP_KEYS}
                report["steps"].append({**row, **_memory(trainer.device)})
                write()
                if main_rank:
                    print(json.dumps(report["steps"][-1]), flush=True)
            report["complete"] = True
        finally:
            write()
            trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
