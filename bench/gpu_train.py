"""2 steps of ``bsb train`` on one GPU under torchrun (NCCL, FSDP2, bf16 compute) on a Qwen3-0.6B-shaped model with
random weights: the step's time split and the GPU's peak memory, written to ``OUT/gpu_train.json``.

    torchrun --standalone --nproc_per_node=1 bench/gpu_train.py OUT [--smoke]

The rollouts go through the HF backend (the GPU machine has no vLLM), the walk task's prompts and tokenizer; a random
model never answers right, so every group is homogeneous: ``homogeneous=backward`` runs the (0-weighted) backward of
every row anyway, so the update is timed at its full size. ``--smoke``: a tiny model (CPU, gloo), to check the script.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _model_dir(path: Path, smoke: bool) -> None:
    import transformers

    from bsb.embedded.tokenizer import walk_tokenizer

    if smoke:
        cfg = transformers.Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                       max_position_embeddings=2048, tie_word_embeddings=True)
    else:  # the Qwen3-0.6B shape
        cfg = transformers.Qwen3Config(vocab_size=151_936, hidden_size=1024, intermediate_size=3072,
                                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                                       head_dim=128, max_position_embeddings=40_960, tie_word_embeddings=True)
    tok = walk_tokenizer()
    cfg.eos_token_id, cfg.pad_token_id = tok.eos_token_id, tok.pad_token_id
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    tok.save_pretrained(path)


def main(argv: list[str]) -> int:
    from bsb.train.config import TrainConfig
    from bsb.train.trainer import Trainer

    out, smoke = Path(argv[0]), "--smoke" in argv
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        _model_dir(Path(tmp) / "model", smoke)
        cfg = TrainConfig(
            model=str(Path(tmp) / "model"), task="walk", backend="hf", device="cpu" if smoke else "cuda",
            steps=2, gen_prompts=4, prompts_per_step=4, chains=2, siblings=2, max_response_len=256,
            dynamic_sampling=False, homogeneous="backward", micro_batch=4, val_problems=4, val_samples=1,
            val_every=0, save_every=0, progress=False, out_dir=str(Path(tmp) / "run"),
        )
        start = time.perf_counter()
        trainer = Trainer(cfg, resume=False)
        built = time.perf_counter() - start
        rows = trainer.run()
        report = {
            "world_size": trainer.world.size,
            "device": str(trainer.device),
            "dtype": str(trainer.dtype),
            "build_s": built,
            "steps": [{k: v for k, v in r.items() if k.startswith("time_") or k in ("step", "tokens_generated",
                                                                                   "tokens_trained", "loss")}
                      for r in rows if "time_step" in r],
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        }
        if trainer.world.main:
            (out / "gpu_train.json").write_text(json.dumps(report, indent=1))
            print(json.dumps(report))
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
