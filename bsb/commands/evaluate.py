"""``bsb evaluate``: a checkpoint on a problem file with [TwoStage]'s test-time rules (§5.5-5.6).

Per question: the greedy root (Mean@1); k sampled responses voted by every rule of :mod:`bsb.eval.voting`
(Rand-/MaxLen-/MDL-/CompletedRoot-Maj@k); and the native branching rules of :mod:`bsb.eval.branching`
(MinMargin-Fork@3, FirstGap05-Fork@3), whose root + two branches are voted the same way. Every score comes
with a question-clustered paired bootstrap 95% interval of its difference to Mean@1 (the modes and their scores:
:mod:`bsb.eval.modes`). Writes ``items.jsonl`` (one row per question: its root, sampled candidates and each branching
rule's fork positions and branches), ``table.md`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from bsb.commands.flags import command_parser, from_args
from bsb.eval.branching import RULES as BRANCH_RULES
from bsb.eval.branching import branch_prefixes, eff_caps
from bsb.eval.modes import COLUMNS, MARKDOWN_COLUMNS, mode_names, question_scores, summarize
from bsb.eval.session import JUDGE, OfflineConfig, open_session
from bsb.eval.voting import Candidate
from bsb.fields import MAX_COUNT
from bsb.fields import help_field as _f

HELP = "test-time voting (k=3) and native branching rules with bootstrap CIs"


@dataclass
class EvaluateConfig(OfflineConfig):
    """``bsb evaluate``'s options: the branching window is the inherited ``margin_window`` (``--margin-window``)."""

    n_problems: int = _f(64, "questions", ge=1, size_limit=MAX_COUNT)
    k: int = _f(3, "sampled candidates per question", ge=1, size_limit=MAX_COUNT)
    temperature: float = _f(0.6, "sampling temperature ([TwoStage]'s single-seed sampled mode: T=0.6, top-p 0.9)", ge=0)
    top_p: float = _f(0.9, "sampling nucleus", gt=0, le=1)
    max_response: int = _f(256, "response token cap", size_limit=MAX_COUNT)
    min_len: int = _f(15, "MDL eligibility: min_len <= L < max_response", size_limit=MAX_COUNT)
    budget: str = _f(
        "exact",
        "branch continuations' cap: exact (max_response each), or [TwoStage]'s batched per-row eff_cap",
        choices=("exact", "eff_cap"),
    )
    seed: int = _f(0, "seed of the problems and the sampled draws")
    resamples: int = _f(4000, "bootstrap resamples", size_limit=MAX_COUNT)
    out_dir: str = _f("runs/evaluate", "where items.jsonl and table.md go", flag="--out", path="folder")
    progress: bool = _f(True, "progress bars", cli=False)

    @property
    def window(self) -> tuple[int, int]:
        """The branching rules' window of zero-based response positions (the probe's ``margin_window``)."""
        lo, hi = self.margin_window
        return lo, hi


def add_parser(sub) -> argparse.ArgumentParser:
    return command_parser(
        sub, "evaluate", HELP, EvaluateConfig, skip=JUDGE
    )  # no judge here: the rules read the model's own margins


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    run_evaluate(from_args(EvaluateConfig, args, parser))
    return 0


def run_evaluate(cfg: EvaluateConfig, console=None) -> dict:
    from rich.console import Console

    from bsb.eval import table

    console = console or Console()
    session = open_session(cfg, cfg.n_problems, cfg.seed)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    roots, draws, plans, branches = _generate(cfg, session)

    def cand(problem, resp) -> Candidate:
        verdict = session.task.verify(session.decode(resp), problem)
        return Candidate(verdict.correct, len(resp), verdict.answer)

    scores = {m: [] for m in mode_names(cfg.k)}
    fallbacks = {b: 0 for b in BRANCH_RULES}
    rows = []
    for qi, problem in enumerate(session.problems):
        r0 = cand(problem, roots[qi])
        cs = [cand(problem, d) for d in draws[qi * cfg.k : (qi + 1) * cfg.k]]
        trios = {b: [r0] + [cand(problem, x) for x in branches[(b, qi)]] for b in BRANCH_RULES}
        for m, score in question_scores(r0, cs, trios, cfg.max_response, cfg.min_len).items():
            scores[m].append(score)
        row = {"question": qi, "gold": problem.answer, "root": r0.__dict__, "sampled": [c.__dict__ for c in cs]}
        for b in BRANCH_RULES:
            _, picks, fb = plans[b][qi]
            fallbacks[b] += fb
            row[b] = {"positions": picks, "fallback": fb, "branches": [c.__dict__ for c in trios[b][1:]]}
        rows.append(row)
    (out / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    summary, cells = summarize(scores, cfg.resamples, cfg.seed)
    label = "embedded default" if cfg.model == "embedded" else session.path.name
    title = f"{label}: {len(session.problems)} questions, k={cfg.k} (T={cfg.temperature}, top-p {cfg.top_p})"
    console.print(table.rich_table(COLUMNS, cells, title=title))
    console.print(
        f"first_gap slots that fell back to the minimum margin: {fallbacks['first_gap']} of {2 * len(session.problems)}"
    )
    (out / "table.md").write_text("\n".join(table.markdown(MARKDOWN_COLUMNS, cells)) + "\n")
    console.print(f"items: {out / 'items.jsonl'}; table: {out / 'table.md'}")
    return {"summary": summary, "fallbacks": fallbacks}


def _generate(cfg: EvaluateConfig, session) -> tuple[list, list, dict, dict]:
    """One batched request per phase: the greedy roots, the k sampled draws of each question, then every branch
    continuation (its prefix and the continuation cut at its budget), by (branching rule, question)."""
    from tqdm import tqdm

    backend, prompts, eos = session.hf, session.prompts, session.eos
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
    plans = {
        b: [branch_prefixes(session.model, p, r, b, cfg.window) for p, r in zip(prompts, roots)] for b in BRANCH_RULES
    }
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
    branches = {(b, qi): [] for b in BRANCH_RULES for qi in range(len(prompts))}
    caps = (
        eff_caps(
            [len(prompts[qi]) + len(pre) for _, qi, pre in reqs], [len(pre) for _, _, pre in reqs], cfg.max_response
        )
        if cfg.budget == "eff_cap"
        else [cfg.max_response] * len(reqs)
    )
    for (b, qi, pre), c, cap in zip(reqs, conts, caps):
        branches[(b, qi)].append(pre + c[: cap - len(pre)])
    return roots, draws, plans, branches
