"""``bsb evaluate``: a checkpoint on a problem file with [TwoStage]'s test-time rules (§5.5-5.6).

Per question: the greedy root (Mean@1); k sampled responses voted by every rule of :mod:`bsb.eval.voting`
(Rand-/MaxLen-/MDL-/CompletedRoot-Maj@k); and the native branching rules of :mod:`bsb.eval.branching`
(MinMargin-Fork@3, FirstGap05-Fork@3), whose root + two branches are voted the same way. Every score comes
with a question-clustered paired bootstrap 95% interval of its difference to Mean@1. Writes ``items.jsonl``
(one row per question and mode), ``table.md`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bsb.commands.flags import command_parser, from_args
from bsb.engine.selectors import MARGIN_WINDOW
from bsb.eval.bootstrap import question_clustered
from bsb.eval.branching import RULES as BRANCH_RULES
from bsb.eval.branching import branch_prefixes, eff_caps
from bsb.eval.session import JUDGE, OfflineConfig, open_session
from bsb.eval.voting import RULES as VOTE_RULES
from bsb.eval.voting import Candidate, vote
from bsb.fields import help_field as _f

HELP = "test-time voting (k=3) and native branching rules with bootstrap CIs"
BUDGETS = ("exact", "eff_cap")


@dataclass
class EvaluateConfig(OfflineConfig):
    n_problems: int = _f(64, "questions")
    k: int = _f(3, "sampled candidates per question")
    temperature: float = _f(0.6, "sampling temperature ([TwoStage]'s single-seed sampled mode: T=0.6, top-p 0.9)")
    top_p: float = _f(0.9, "sampling nucleus")
    max_response: int = _f(256, "response token cap")
    min_len: int = _f(15, "MDL eligibility: min_len <= L < max_response")
    window: tuple[int, int] = _f(MARGIN_WINDOW, "branching window (zero-based response positions)", cli=False)
    budget: str = _f(
        "exact",
        "branch continuations' cap: exact (max_response each), or [TwoStage]'s batched per-row eff_cap",
        choices=BUDGETS,
    )
    seed: int = _f(0, "seed of the problems and the sampled draws")
    resamples: int = _f(4000, "bootstrap resamples")
    out_dir: str = _f("runs/evaluate", "output directory", flag="--out")
    progress: bool = _f(True, "progress bars", cli=False)

    def __post_init__(self):
        super().__post_init__()
        if self.k < 1 or self.n_problems < 1:
            raise ValueError("--k and --n-problems must be >= 1")
        if self.budget not in BUDGETS:
            raise ValueError(f"budget must be one of {', '.join(BUDGETS)}, got {self.budget!r}")
        if not self.temperature >= 0 or not 0 < self.top_p <= 1:
            raise ValueError("temperature must be >= 0 and top_p in (0, 1]")


def add_parser(sub) -> argparse.ArgumentParser:
    return command_parser(
        sub, "evaluate", HELP, EvaluateConfig, skip=JUDGE
    )  # no judge here: the rules read the model's own margins


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    run_evaluate(from_args(EvaluateConfig, args, parser))
    return 0


def run_evaluate(cfg: EvaluateConfig, console=None) -> dict:
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    console = console or Console()
    session = open_session(cfg, cfg.n_problems, cfg.seed)
    task, model, backend, eos = session.task, session.model, session.hf, session.eos
    problems, prompts, path = session.problems, session.prompts, session.path
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def cand(problem, resp) -> Candidate:
        verdict = task.verify(session.decode(resp), problem)
        return Candidate(verdict.correct, len(resp), verdict.answer)

    modes = ["mean@1"] + [f"{r}@{cfg.k}" for r in VOTE_RULES] + [f"pass@{cfg.k}"]
    modes += [f"{b}_fork@3:{r}" for b in BRANCH_RULES for r in ("mdl_maj", "completed_root_maj")]
    scores = {m: [] for m in modes}
    fallbacks = {b: 0 for b in BRANCH_RULES}
    # one batched request per phase: the greedy roots, the k sampled draws, then every branch continuation
    bar = tqdm(total=4, desc="evaluating (roots, draws, branch points, branches)", disable=not cfg.progress)
    roots = backend.generate(prompts, cfg.max_response, temperature=0.0, eos_token_id=eos)
    bar.update()
    draws = backend.generate(
        [p for p in prompts for _ in range(cfg.k)],
        cfg.max_response,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        seed=cfg.seed,
        eos_token_id=eos,
    )
    bar.update()
    plans = {b: [branch_prefixes(model, p, r, b, cfg.window) for p, r in zip(prompts, roots)] for b in BRANCH_RULES}
    bar.update()
    reqs = [(b, qi, pre) for b in BRANCH_RULES for qi, (pres, _, _) in enumerate(plans[b]) for pre in pres]
    conts = (
        backend.generate(
            [prompts[qi] + pre for _, qi, pre in reqs], cfg.max_response, temperature=0.0, eos_token_id=eos
        )
        if reqs
        else []
    )
    bar.update()
    bar.close()
    branches = {(b, qi): [] for b in BRANCH_RULES for qi in range(len(problems))}
    caps = (
        eff_caps(
            [len(prompts[qi]) + len(pre) for _, qi, pre in reqs], [len(pre) for _, _, pre in reqs], cfg.max_response
        )
        if cfg.budget == "eff_cap"
        else [cfg.max_response] * len(reqs)
    )
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
    console.print(
        f"first_gap slots that fell back to the minimum margin: {fallbacks['first_gap']} of {2 * len(problems)}"
    )
    (out / "table.md").write_text("\n".join(md) + "\n")
    console.print(f"items: {out / 'items.jsonl'}; table: {out / 'table.md'}")
    return {"summary": summary, "fallbacks": fallbacks}
