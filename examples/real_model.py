"""The real-model validation's inputs (docs/RESULTS.md, "Pre-RL validation on real pretrained models"): problems at
each real checkpoint's level and a BSV direction fitted on it, from the models in the model cache (`make models`),
nothing downloaded. MODEL is ``smollm2`` (SmolLM2-135M-Instruct, the default) or ``gemma3`` (Gemma-3-270M, a base
model).

    python examples/real_model.py rates [MODEL]     # per-problem pass rates; writes examples/problems/<MODEL>_mid.jsonl
    python examples/real_model.py bsv [MODEL]       # the BSV direction for --bsv (runs/real/bsv_<MODEL>.pt)
    python examples/real_model.py command [MODEL]   # the bsb validate command of the recorded run
    python examples/real_model.py remedy L4 [MODEL] # the same run with one of the paper's remedies (L4, K5, suffix)

``rates``: 208 arithmetic problems (the ``arith`` task's own generator, 1-3 operations on operands 0-9) and the 48
templated word problems of examples/problems/grade_school.jsonl, each sampled N = 8 times at temperature 0.7 through
the model's few-shot prompt below; a problem joins the model's set when its pass rate lies in [0.2, 0.8], listed
REPEAT times (the checkpoints solve few problems: SmolLM2's Q4_1 GGUF 11 of 256). ``bsv``: the direction from drafted
arithmetic continuations on the same prompt: a correct next step (steady), a wrong one (drop) and the line that
catches a wrong step (surge), as ``bsb.tasks.synthetic.arith`` drafts its chains.

The prompts: SmolLM2's own chat format written out (its system turn, two worked examples as earlier turns), the
problem as the last user turn, so the model ends its turn with its EOS after a boxed answer; ``--prompt-format plain``
keeps it as written (the transcript's special tokens are the tokenizer's own). Gemma-3-270M is a base model without
a chat template: the same two worked examples as plain text, each ending with a blank line, and ``--stop $'\\n\\n'``
(one token in its tokenizer) ends its chain there, as it would otherwise go on to invent and answer new problems.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N, TEMPERATURE, MAX_TOKENS, LO, HI = 8, 0.7, 128, 0.2, 0.8
CANDIDATES = [(1, 64), (2, 96), (3, 48)]  # (operations, problems) of the arith generator, seed 7
SHOTS = [
    ("Compute (8 - 3) * 2.", "8 - 3 = 5\n= 5 * 2\n5 * 2 = 10\n= 10\nSo the final answer is \\boxed{10}."),
    (
        "Compute 7 - 2 * 3 + 4.",
        "2 * 3 = 6\n= 7 - 6 + 4\n7 - 6 = 1\n= 1 + 4\n1 + 4 = 5\n= 5\nSo the final answer is \\boxed{5}.",
    ),
]
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


def smollm2_transcript(prompt: str) -> str:
    """SmolLM2's input for ``prompt``: the system turn, the worked examples, the problem's user turn."""
    turns = "".join(f"<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n" for u, a in SHOTS)
    return f"{SYSTEM}{turns}<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def gemma3_transcript(prompt: str) -> str:
    """Gemma-3-270M's input for ``prompt`` (plain text; bsb adds its <bos>): the worked examples, then the problem."""
    head = "Solve each problem step by step, one step a line, and put the final answer in \\boxed{}.\n\n"
    shots = "".join(f"Problem: {u}\nSolution:\n{a}\n\n" for u, a in SHOTS)
    return f"{head}{shots}Problem: {prompt}\nSolution:\n"


@dataclass(frozen=True)
class Spec:
    name: str
    model: str  # the bsb model id
    transcript: object  # prompt -> the model's input text
    repeat: int  # chains per selected problem: the set lists each one `repeat` times (ids "<id>/k"), one chain each
    stop: tuple[str, ...] = ()  # texts that end a chain besides the EOS (bsb's --stop)

    @property
    def problems(self) -> Path:
        return ROOT / "examples" / "problems" / f"{self.name}_mid.jsonl"

    @property
    def rates(self) -> Path:
        return ROOT / "examples" / "results" / "real" / f"{self.name}_rates.jsonl"

    @property
    def bsv(self) -> Path:
        return ROOT / "runs" / "real" / f"bsv_{self.name}.pt"

    @property
    def out(self) -> str:
        return f"runs/real/{self.name}"

    @property
    def template(self) -> str:
        """bsb's --prompt-template: str.format with {prompt}, literal braces doubled."""
        return self.transcript("{prompt}").replace("{", "{{").replace("}", "}}").replace("{{prompt}}", "{prompt}")

    def validate(self) -> list[str]:
        rows = len(self.problems.read_text().splitlines()) if self.problems.exists() else 0
        stop = ["--stop", *self.stop] if self.stop else []
        return [
            "bsb", "validate", self.model, str(self.problems.relative_to(ROOT)), "--prompt-format", "plain",
            "--prompt-template", self.template, *stop, "--n-problems", str(rows), "--n-mc", "8", "--b-ratio", "0.08",
            "--max-response", "128", "--temperature", "0.7", "--backend", "vllm", "--bsv",
            str(self.bsv.relative_to(ROOT)), "--out", self.out,
        ]  # fmt: skip


SPECS = {
    "smollm2": Spec("smollm2", "pypi:smollm2-135m", smollm2_transcript, repeat=22),
    "gemma3": Spec("gemma3", "pypi:gemma3-270m", gemma3_transcript, repeat=4, stop=("\n\n",)),
}
VALIDATE = SPECS["smollm2"].validate()  # the recorded SmolLM2 run (the slow test reruns a slice of it)

# The paper's remedies when belief reads do not lead (§3.2, §7): a longer read, another K, another suffix wording.
# Each reruns the recorded run's chains and completions (copied into its own --out, so nothing is sampled again)
# with the belief reads changed, on the belief selectors and the two references.
REMEDIES = {
    "L4": ["--read-len", "4"],
    "K5": ["--top-k", "5"],
    "suffix": ["--probe-suffix", "Therefore, the answer is \\boxed{"],
}


def remedy(spec: Spec, name: str) -> list[str]:
    """The validate command of remedy ``name``, its out dir seeded with the recorded run's chains and completions."""
    import shutil

    if name not in REMEDIES:
        sys.exit(f"no remedy {name!r}: one of {', '.join(REMEDIES)}")
    command = spec.validate()
    src, out = ROOT / command[-1], ROOT / f"{command[-1]}_{name}"
    out.mkdir(parents=True, exist_ok=True)
    for f in ("chains.jsonl", "completions.jsonl", "sampling.json"):  # sampling.json: a run recorded since 2026-12-07
        if not (out / f).exists() and (f != "sampling.json" or (src / f).exists()):
            shutil.copy(src / f, out / f)
    selectors = ["--selectors", "probe_js", "lens_shift", "entropy", "midpoint"]
    return command[:-1] + [str(out.relative_to(ROOT))] + REMEDIES[name] + selectors


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


def rates(spec: Spec) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from bsb.embedded.pypi_models import pypi_model
    from bsb.eval.session import stop_tokens
    from bsb.tasks.base import Problem
    from bsb.tasks.prompting import encode_prompt
    from bsb.tasks.registry import make_task

    rows = candidates()
    grader = make_task("math", {})
    path = pypi_model(spec.model.removeprefix("pypi:"))
    tok = AutoTokenizer.from_pretrained(path)
    stops = stop_tokens(tok, spec.stop)
    stops = [stops] if isinstance(stops, int) else list(stops)
    llm = LLM(str(path), dtype="float32", max_model_len=1024, seed=0, enforce_eager=True)
    params = SamplingParams(n=N, temperature=TEMPERATURE, max_tokens=MAX_TOKENS, stop_token_ids=stops)
    start = time.time()
    prompts = [{"prompt_token_ids": encode_prompt(tok, spec.transcript(r["problem"]))} for r in rows]  # as bsb encodes
    outs = llm.generate(prompts, params, use_tqdm=True)
    spec.rates.parent.mkdir(parents=True, exist_ok=True)
    keep = []
    with open(spec.rates, "w") as f:
        for r, o in zip(rows, outs):
            problem = Problem(r["id"], r["problem"], str(r["answer"]), {"convention": "boxed"})
            correct = [grader.verify(x.text, problem).correct for x in o.outputs]
            r = {**r, "pass_rate": sum(correct) / N, "lines": sum(x.text.count("\n") for x in o.outputs) / N,
                 "tokens": sum(len(x.token_ids) for x in o.outputs) / N}  # fmt: skip
            f.write(json.dumps(r) + "\n")
            if LO <= r["pass_rate"] <= HI:
                keep.append({k: r[k] for k in ("id", "problem", "answer", "source", "pass_rate")})
    write_set(spec, keep)
    took = time.time() - start
    print(f"{len(keep)} of {len(rows)} problems with a pass rate in [{LO}, {HI}] -> {spec.problems} ({took:.0f} s)")


def write_set(spec: Spec, keep: list[dict]) -> None:
    """The selected problems, each listed ``spec.repeat`` times (bsb validate samples one chain a row)."""
    rows = [{**r, "id": f"{r['id']}/{k}"} for k in range(spec.repeat) for r in keep]
    spec.problems.write_text("".join(json.dumps(r) + "\n" for r in rows))


def drafts(spec: Spec, n: int = 48, seed: int = 11) -> list[tuple[str, str, str]]:
    """(prefix text, continuation, regime) of arithmetic chains drafted as the arith task drafts them."""
    from bsb.tasks.synthetic.arith import make_chain, make_problem

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        problem = make_problem(rng, rng.choice([2, 3]), 9)
        wrong = make_chain(problem, rng, "wrong")
        fixed = make_chain(problem, rng, "corrected")
        steady = make_chain(problem, rng, "correct").response.split("\n")
        prompt = spec.transcript(problem.prompt.strip())
        w, at = wrong.response.split("\n"), wrong.pivot_line
        out.append((prompt + "\n".join(w[:at]) + "\n" * bool(at), w[at], "drop"))
        c = fixed.response.split("\n")
        out.append((prompt + "\n".join(c[: fixed.pivot_line + 1]) + "\n", c[fixed.pivot_line + 1], "surge"))
        k = rng.randrange(0, len(steady) - 1)
        out.append((prompt + "\n".join(steady[:k]) + "\n" * bool(k), steady[k], "steady"))
    return out


def bsv(spec: Spec) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bsb.embedded.pypi_models import pypi_model
    from bsb.engine.bsv import BSVExample, fit_bsv
    from bsb.tasks.prompting import encode_prompt

    path = pypi_model(spec.model.removeprefix("pypi:"))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32").eval()
    ids = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    examples = [BSVExample(encode_prompt(tok, prefix), ids(cont), regime) for prefix, cont, regime in drafts(spec)]
    direction = fit_bsv(model, examples, window_after=8, window_before=8)
    spec.bsv.parent.mkdir(parents=True, exist_ok=True)
    direction.save(spec.bsv)
    print(f"BSV direction at layer {direction.layer} from {len(examples)} drafts -> {spec.bsv}")


def main(argv: list[str]) -> None:
    import shlex

    usage = "usage: python examples/real_model.py rates | bsv | command | remedy NAME  [smollm2 | gemma3]"
    what, rest = (argv[0], argv[1:]) if argv else ("command", [])
    name = rest.pop(0) if what == "remedy" and rest else None
    if what == "remedy" and name is None or len(rest) > 1 or (rest and rest[0] not in SPECS):
        sys.exit(f"{usage} (got {' '.join(argv)!r})")
    spec = SPECS[rest[0] if rest else "smollm2"]
    if what == "rates":
        rates(spec)
    elif what == "bsv":
        bsv(spec)
    elif what == "command":
        print(shlex.join(spec.validate()))
    elif what == "remedy":
        print(shlex.join(remedy(spec, name)))
    else:
        sys.exit(f"{usage} (got {what!r})")


if __name__ == "__main__":
    main(sys.argv[1:])
