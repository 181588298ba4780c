"""The GPU check's warm-up stage: one tiny tree-packed forward and backward through bsb's flex attention, so the
compiled block-mask builder and flex kernels (``torch.compile(..., dynamic=True)``, bsb.train.tree_pack) sit in
inductor's on-disk cache before the timed stages (e2e, train, update) ask for them: a compile is then a cache hit, not
minutes of a stage's limit. One decoder layer with Qwen3-0.6B's attention heads (16 x 128, 8 key heads), which the
timed stages use, in bf16 under autocast; three sequence lengths (a dynamic graph serves them all).

On the CPU (``--smoke``, and wherever there is no GPU) the same pass runs the SDPA levels, a pipeline check.

    python bench/gpu_warm.py OUT [--smoke]        # writes OUT/warm.json: each pass's seconds
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from inputs import QWEN3_06B, QWEN3_TOY  # noqa: E402

from bsb.engine.device import autocast  # noqa: E402
from bsb.train.tree_pack import tree_attention_on, tree_logprobs  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    import transformers

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = QWEN3_TOY if args.smoke else QWEN3_06B
    cfg = transformers.Qwen3Config(num_hidden_layers=1, **{**shape, "hidden_size": min(shape["hidden_size"], 256)})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(device).train()
    rows, out = [], Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    vocab = cfg.vocab_size
    for width in (48, 160, 400) if not args.smoke else (24,):
        g = torch.Generator().manual_seed(width)
        ids = lambda n, g=g: torch.randint(3, vocab, (n,), generator=g).tolist()  # noqa: E731
        prompt, prefix = ids(16), ids(width // 2)
        responses = [prefix + ids(width // 2), prefix + ids(width // 3)]  # one fork group: the shared prefix once
        t0 = time.perf_counter()
        with tree_attention_on(model), autocast(device, torch.bfloat16):
            logp, mask, _ = tree_logprobs(model, [prompt, prompt], responses, [len(prefix)] * 2)
            (logp * mask).sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        rows.append({"tokens": len(prompt) + len(prefix) + sum(len(r) - len(prefix) for r in responses),
                     "seconds": round(time.perf_counter() - t0, 2), "device": str(device)})
        (out / "warm.json").write_text(json.dumps(rows, indent=1))
        print(json.dumps(rows[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
