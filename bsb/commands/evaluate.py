"""``bsb evaluate``: a checkpoint on a problem file with seed 001's test-time rules (§5.5-5.6).

Per question: the greedy root (Mean@1); k sampled responses voted by every rule of :mod:`bsb.eval.voting`
(Rand-/MaxLen-/MDL-/CompletedRoot-Maj@k); and the native branching rules of :mod:`bsb.eval.branching`
(MinMargin-Fork@3, FirstGap05-Fork@3), whose root + two branches are voted the same way. Every score comes
with a question-clustered paired bootstrap 95% interval of its difference to Mean@1. Writes ``items.jsonl``
(one row per question and mode), ``table.md`` and prints the table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bsb.eval.bootstrap import question_clustered
from bsb.eval.branching import RULES as BRANCH_RULES
from bsb.eval.branching import branch_prefixes, eff_caps
from bsb.eval.offline import OfflineConfig
from bsb.eval.voting import RULES as VOTE_RULES
from bsb.eval.voting import Candidate, vote

BUDGETS = ("exact", "eff_cap")


@dataclass
class EvaluateConfig(OfflineConfig):
    n_problems: int = 64
    k: int = 3  # sampled candidates per question
    temperature: float = 0.6  # seed 001's single-seed sampled mode (T=0.6, top-p 0.9)
    top_p: float = 0.9
    max_response: int = 160
    min_len: int = 15  # MDL eligibility: min_len <= L < max_response
    window: tuple[int, int] = (4, 64)  # branching window (zero-based response positions)
    budget: str = "exact"  # branch continuations' total cap: exact (max_response each) | eff_cap (seed 001's batched eff_cap_i)
    seed: int = 0
    resamples: int = 4000
    out_dir: str = "runs/evaluate"
    progress: bool = True


def run_evaluate(cfg: EvaluateConfig, console=None) -> dict:
    import transformers
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from bsb.embedded.model import resolve_model
    from bsb.engine.hf_backend import HFBackend
    from bsb.engine.hf_model import load_for_inference
    from bsb.tasks.prompting import render_prompt
    from bsb.tasks.registry import offline_task

    if cfg.k < 1 or cfg.n_problems < 1:
        raise ValueError("k and n_problems must be >= 1")
    if cfg.budget not in BUDGETS:
        raise ValueError(f"budget must be one of {', '.join(BUDGETS)}, got {cfg.budget!r}")
    console = console or Console()
    task = offline_task(cfg.task, cfg.task_options, cfg.problems)
    path = resolve_model(cfg.model, task)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = load_for_inference(path, cfg.device, cfg.dtype)
    backend = HFBackend(model, tok)
    eos = tok.eos_token_id
    problems = task.sample(cfg.n_problems, cfg.seed)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def cand(problem, resp) -> Candidate:
        verdict = task.verify(tok.decode(resp, skip_special_tokens=True), problem)
        return Candidate(verdict.correct, len(resp), verdict.answer)

    modes = ["mean@1"] + [f"{r}@{cfg.k}" for r in VOTE_RULES] + [f"pass@{cfg.k}"]
    modes += [f"{b}_fork@3:{r}" for b in BRANCH_RULES for r in ("mdl_maj", "completed_root_maj")]
    scores = {m: [] for m in modes}
    fallbacks = {b: 0 for b in BRANCH_RULES}
    prompts = [tok.encode(render_prompt(task, p, tok, cfg.prompt_format), add_special_tokens=False) for p in problems]
    # one batched request per phase: the greedy roots, the k sampled draws, then every branch continuation
    bar = tqdm(total=4, desc="evaluating (roots, draws, branch points, branches)", disable=not cfg.progress)
    roots = backend.generate(prompts, cfg.max_response, temperature=0.0, eos_token_id=eos)
    bar.update()
    draws = backend.generate([p for p in prompts for _ in range(cfg.k)], cfg.max_response, temperature=cfg.temperature,
                             top_p=cfg.top_p, seed=cfg.seed, eos_token_id=eos)
    bar.update()
    plans = {b: [branch_prefixes(model, p, r, b, cfg.window) for p, r in zip(prompts, roots)] for b in BRANCH_RULES}
    bar.update()
    reqs = [(b, qi, pre) for b in BRANCH_RULES for qi, (pres, _, _) in enumerate(plans[b]) for pre in pres]
    conts = backend.generate([prompts[qi] + pre for _, qi, pre in reqs], cfg.max_response, temperature=0.0, eos_token_id=eos) if reqs else []
    bar.update()
    bar.close()
    branches = {(b, qi): [] for b in BRANCH_RULES for qi in range(len(problems))}
    caps = eff_caps([len(prompts[qi]) + len(pre) for _, qi, pre in reqs], [len(pre) for _, _, pre in reqs], cfg.max_response) \
        if cfg.budget == "eff_cap" else [cfg.max_response] * len(reqs)
    for (b, qi, pre), c, cap in zip(reqs, conts, caps):
        branches[(b, qi)].append(pre + c[: cap - len(pre)])
    rows = []
    for qi, problem in enumerate(problems):
        gold = problem.answer
        r0 = cand(problem, roots[qi])
        scores["mean@1"].append(float(r0.correct))
        cs = [cand(problem, d) for d in draws[qi * cfg.k : (qi + 1) * cfg.k]]
        for r in VOTE_RULES:
            scores[f"{r}@{cfg.k}"].append(vote(cs, r, cfg.max_response, cfg.min_len).score)
        scores[f"pass@{cfg.k}"].append(float(any(c.correct for c in cs)))
        row = {"question": qi, "gold": gold, "root": r0.__dict__, "sampled": [c.__dict__ for c in cs]}
        for b in BRANCH_RULES:
            _, picks, fb = plans[b][qi]
            fallbacks[b] += fb
            trio = [r0] + [cand(problem, x) for x in branches[(b, qi)]]
            for r in ("mdl_maj", "completed_root_maj"):
                scores[f"{b}_fork@3:{r}"].append(vote(trio, r, cfg.max_response, cfg.min_len).score)
            row[b] = {"positions": picks, "fallback": fb, "branches": [c.__dict__ for c in trio[1:]]}
        rows.append(row)
    (out / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    base = np.array(scores["mean@1"])
    label = "embedded default" if cfg.model == "embedded" else path.name
    table = Table(title=f"{label}: {len(problems)} questions, k={cfg.k} (T={cfg.temperature}, top-p {cfg.top_p})")
    for col in ("mode", "accuracy", "diff vs mean@1 [95% CI, question-clustered]"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    md = ["| mode | accuracy | diff vs mean@1 [95% CI] |", "|---|---:|---:|"]
    summary = {}
    for m in modes:
        s = np.array(scores[m])
        iv = question_clustered(s, base, cfg.resamples, cfg.seed) if m != "mean@1" else None
        summary[m] = {"accuracy": float(s.mean()), **({"diff": iv.diff, "low": iv.low, "high": iv.high} if iv else {})}
        table.add_row(m, f"{s.mean():.3f}", str(iv) if iv else "")
        md.append(f"| {m} | {s.mean():.3f} | {iv if iv else ''} |")
    console.print(table)
    console.print(f"first_gap slots that fell back to the minimum margin: {fallbacks['first_gap']} of {2 * len(problems)}")
    (out / "table.md").write_text("\n".join(md) + "\n")
    console.print(f"items: {out / 'items.jsonl'}; table: {out / 'table.md'}")
    return {"summary": summary, "fallbacks": fallbacks}
