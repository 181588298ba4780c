"""Run several short trainings in one torchrun launch (one process group, many Trainers), for the data-parallel
tests: ``torchrun --nproc_per_node=N tests/support/dist_train.py CASES.json``. CASES.json is a list of
``{"config": {...TrainConfig fields...}, "check_shards": bool}``; each case writes its own out_dir, and rank r writes
``out_dir/rank{r}.json`` (the bytes of parameters and optimizer state it holds, and the chains it generated)."""

import json
import sys
from pathlib import Path

from bsb.train.config import TrainConfig
from bsb.train.sharding import local_bytes
from bsb.train.trainer import Trainer


def counting(generate, served: list[int]):
    """``generate`` that records how many requests each call of this rank's engine served."""

    def wrapped(prompts, *args, **kwargs):
        served.append(len(prompts))
        return generate(prompts, *args, **kwargs)

    return wrapped


def main(path: str) -> None:
    trainer = None
    for case in json.loads(Path(path).read_text()):
        trainer = Trainer(TrainConfig.from_dict(case["config"]), resume=False)
        world = trainer.world
        if world.size > 1 and trainer.backend is not trainer.hf:  # its own vLLM engine (one per rank)
            assert trainer.separate_engine
        mine: list[int] = []
        trainer.backend.generate = counting(trainer.backend.generate, mine)
        trainer.run()
        params, state = local_bytes(trainer.policy, trainer.opt)
        report = {"param_bytes": params, "optimizer_bytes": state, "requests": mine, "world": world.size}
        if trainer.backend is not trainer.hf:  # the executor vLLM itself runs this rank's engine with
            report["executor"] = trainer.backend.llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend
        (trainer.out / f"rank{world.rank}.json").write_text(json.dumps(report))
    if trainer is not None:
        trainer.close()  # the last one: an engine it built goes with the process group


if __name__ == "__main__":
    main(sys.argv[1])
