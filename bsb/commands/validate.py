"""``bsb validate``: pre-RL validation of fork selectors against Monte-Carlo value curves ([Fork] §4, App. D).

Per problem: sample one chain (temperature 0.7 by default); cut it at every newline boundary and keep at most
m (128) evenly spaced; estimate V*(t_j) at each with N_MC (16) completions (resumable, see
:mod:`bsb.eval.value_curve`). Problems whose V* is flat are excluded from the error (every selector scores 0 on
them). Each selector ranks the m boundaries by its own score, keeps its top B (10), and is charged
``E = Σ_j |V*(t_j) − V̂(t_j)|`` with V̂ the linear interpolation through the kept points, held constant beyond
the first and last kept points (:mod:`bsb.eval.reconstruction`). The DP oracle floor is the best E any B points
achieve; the table reports each selector's mean E, its excess over the floor, and marks the best (**bold**) and
second best (_italic_).

Fork contrast (App. D): the first two completions at each boundary are two siblings forked there; the report
gives how often they reach the same final answer, and the disagreement rate by Probe-JS tercile (pooled over
all boundaries with a JS score).

Selectors that rank boundaries: every engine selector whose ``ranks_boundaries`` trait is set (the token-window ones,
min_margin and first_gap, pick token positions: see ``bsb evaluate``). A selector that cannot score a chain (no
committed answer for Lens-Shift) ranks it by closeness to the midpoint, counted in the report.

Outputs in ``out_dir``: ``chains.jsonl`` (the sampled chains), ``completions.jsonl`` (every finished
completion), ``curves.jsonl`` (per problem: cuts, V*, every selector's scores, top-B and error: enough to
re-score new selectors without re-sampling), ``table.md``, ``bars.png`` (Figure 3 style) and ``case_*.png``
(Figure 1 style).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bsb.commands.flags import command_parser, from_args
from bsb.engine.boundaries import CandidatePool, candidate_pool
from bsb.engine.bsv import task_direction
from bsb.engine.selectors import SELECTORS, CannotScore, ChainInput, make_selector
from bsb.engine.vllm_backend import rollout_backend
from bsb.eval.reconstruction import is_flat, oracle_floor, reconstruction_error, top_b
from bsb.eval.session import OfflineConfig, gold_label, jsonable, judge_client, open_session
from bsb.eval.value_curve import CompletionStore, answer_belief, mc_values
from bsb.fields import help_field as _f

HELP = "pre-RL validation: selectors' top-B boundaries against Monte-Carlo V* curves"
# every trainable selector that ranks boundaries and needs nothing beyond the probe options (bsv and llm_judge join
# when a direction or a judge is given)
DEFAULT_SELECTORS = tuple(n for n, c in SELECTORS.items() if c.trainable and c.ranks_boundaries and not c.needs_config)


# SelectorConfig fields a selector may need (its needs_config) -> the ValidateConfig field that supplies it, and the fix
NEEDS = {
    "bsv_path": ("bsv_path", "bsv_path (a direction fitted with bsb.engine.bsv.fit_bsv)"),
    "judge": ("judge_url", "a judge: --judge-url URL --judge-model NAME (or --judge-url local)"),
}


@dataclass
class ValidateConfig(OfflineConfig):
    n_problems: int = _f(24, "problems (one sampled chain each)")
    selectors: tuple[str, ...] = _f(DEFAULT_SELECTORS, "selectors to rank (default: every boundary selector)")
    bsv_path: str | None = _f(None, "a fitted BSV direction file (adds the bsv selector)", flag="--bsv")
    task_bsv: bool = _f(
        True,
        "a task that drafts BSV continuations (walk) adds bsv, its direction fitted once and cached with the model",
    )
    read_len: int | None = _f(
        None,
        "Probe-JS read positions L (default: the task's; 1 for math; L > 1 reads past an uninformative first token)",
    )
    temperature: float = _f(0.7, "chain and completion sampling temperature")
    max_response: int = _f(256, "response token cap")
    m: int = _f(128, "candidate boundaries per chain")
    n_mc: int = _f(16, "completions per boundary")
    b: int | None = _f(None, "boundaries each selector keeps (default 10 as in the paper; 3 on the embedded default)")
    b_ratio: float | None = _f(
        None, "keep this share of each chain's boundaries instead of --b (the paper: B/m = 10/128 ≈ 0.08)"
    )
    seed: int = _f(0, "seed of the problems, chains and completions")
    out_dir: str = _f("runs/validate", "output directory (rerun with the same one to resume)", flag="--out")
    backend: str = _f(
        "auto", "completions through vLLM (auto: when installed) or the HF model", choices=("auto", "hf", "vllm")
    )
    case_plots: int = _f(3, "Figure-1 style case plots of the chains whose V* moves most")
    batch_size: int = _f(64, "completions per generation call")
    progress: bool = _f(True, "progress bars", cli=False)

    def __post_init__(self):
        super().__post_init__()
        if self.b is None:
            self.b = 3 if self.model == "embedded" else 10
        self.selectors = tuple(self.selectors) or DEFAULT_SELECTORS
        classes = {}
        for s in self.selectors:  # registered names or package.module:Class
            try:
                classes[s] = SELECTORS.get(s)
            except ValueError:
                raise ValueError(f"unknown selector(s) {[s]}; choose from {', '.join(SELECTORS)}") from None
        window = [s for s, cls in classes.items() if not cls.ranks_boundaries]
        if window:
            raise ValueError(f"{window} pick token positions, not boundaries; they are evaluated by bsb evaluate")
        for s, cls in classes.items():  # a selector named here needs what it cannot do without
            for need in cls.needs_config:
                if need in NEEDS and not getattr(self, NEEDS[need][0]):
                    raise ValueError(f"the {s} selector needs {NEEDS[need][1]}")
        # ... and what this config supplies adds the selectors that need it (a direction adds bsv, a judge llm_judge)
        self.selectors += tuple(
            n for n, cls in SELECTORS.items() if cls.needs_config and n not in self.selectors and self._supplies(cls)
        )
        if min(self.m, self.n_mc, self.b, self.n_problems) < 1:
            raise ValueError("m, n_mc, b and n_problems must be >= 1")
        if self.b_ratio is not None and not 0 < self.b_ratio <= 1:
            raise ValueError(f"b_ratio must be in (0, 1], got {self.b_ratio}")
        if self.backend not in ("auto", "hf", "vllm"):
            raise ValueError(f"backend must be auto, hf or vllm, got {self.backend!r}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")

    def chain_b(self, boundaries: int) -> int:
        """B of a chain with ``boundaries`` candidates: --b, or --b-ratio of them (at least 1)."""
        return self.b if self.b_ratio is None else max(1, round(self.b_ratio * boundaries))

    def _supplies(self, cls) -> bool:
        return all(need not in NEEDS or getattr(self, NEEDS[need][0]) for need in cls.needs_config)


def add_parser(sub) -> argparse.ArgumentParser:
    return command_parser(sub, "validate", HELP, ValidateConfig)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    result = run_validate(from_args(ValidateConfig, args, parser))
    if not result["ranking"]:
        print("every V* curve was flat: no selector can be scored (more problems, or a model that solves some of them)")
        return 0
    first = result["ranking"][0]
    print(f"ranks first: {first} (mean E {result['mean_error'][first]:.3f}; oracle floor {result['floor']:.3f})")
    return 0


def _scores(sel, chain: ChainInput, pool: CandidatePool, reads, index: int, seed: int) -> tuple[list[float], bool]:
    """Per-boundary scores and whether the selector fell back to the midpoint ranking."""
    mid = [-abs(t - pool.chain_len / 2) for t in pool.positions]
    try:
        scores, _ = sel.score(chain, pool, reads, index, seed)
    except CannotScore:
        return mid, True
    if all(isinstance(s, float) and math.isnan(s) for s in scores):
        return mid, True
    return [float(s) for s in scores], False


def flip_mass(v: list[float], kept: list[int]) -> float:
    """Σ |ΔV*| over the segments the kept boundaries re-roll (fork-before: boundary j re-rolls (t_j, t_j+1])."""
    return float(sum(abs(v[j + 1] - v[j]) for j in kept if j + 1 < len(v)))


def _sample_chains(cfg: ValidateConfig, gen, session, out: Path) -> dict[str, list[int]]:
    """One chain per problem, by problem id: read from ``chains.jsonl`` when a run already sampled it, else sampled and
    appended there (a rerun resumes)."""
    chains_path = out / "chains.jsonl"
    saved = (
        {r["id"]: r["response"] for r in map(json.loads, chains_path.read_text().splitlines())}
        if chains_path.exists()
        else {}
    )
    missing = [i for i, p in enumerate(session.problems) if p.id not in saved]
    if missing:
        outs = gen.generate(
            [session.prompts[i] for i in missing],
            max_new_tokens=cfg.max_response,
            temperature=cfg.temperature,
            seed=cfg.seed,
            eos_token_id=session.eos,
        )
        with chains_path.open("a") as f:
            for i, r in zip(missing, outs):
                p = session.problems[i]
                saved[p.id] = list(r)
                f.write(
                    json.dumps(
                        {"id": p.id, "prompt": p.prompt, "gold": p.answer, "response": list(r)}, default=jsonable
                    )
                )
                f.write("\n")
    return saved


def _score_chain(
    session, i: int, resp: list[int], cuts, v: list[float], selectors: dict, store, cfg: ValidateConfig
) -> dict:
    """The ``curves.jsonl`` row of chain ``i``: its V*, the DP floor, and every selector's scores, top-B, error and
    fallback, and the first two completions at each boundary (the fork contrast's siblings)."""
    p = session.problems[i]
    text = session.decode(resp)
    chain = ChainInput(session.prompts[i], resp, answer=session.answer_ids(text))
    pool = CandidatePool(list(cuts), "newline", len(resp))
    row = {
        "id": p.id,
        "prompt": p.prompt,
        "gold": p.answer,
        "response": resp,
        "text": text,
        "cuts": list(cuts),
        "v_star": v,
        "flat": is_flat(v),
        "scores": {},
        "top_b": {},
        "error": {},
        "fallback": {},
    }
    b = cfg.chain_b(len(cuts))
    floor, best = oracle_floor(v, min(b, len(v)))
    row["b"], row["floor"], row["floor_points"] = b, floor, best
    for name, sel in selectors.items():
        s, fb = _scores(sel, chain, pool, session.hf, i, cfg.seed)
        kept = top_b(s, b)
        row["scores"][name] = [None if math.isnan(x) else x for x in s]
        row["top_b"][name], row["fallback"][name] = kept, fb
        row["error"][name] = reconstruction_error(v, kept)
    row["siblings"] = [[store.answers.get((p.id, c, j), "") for j in range(min(2, cfg.n_mc))] for c in cuts]
    return row


def fork_contrast(curves: list[dict]) -> dict:
    """App. D: how often the two siblings forked at a boundary reach the same final answer, and the disagreement rate
    by Probe-JS tercile (pooled over every boundary with a JS score)."""
    pairs, js_pairs = [], []
    for r in curves:
        for j, sib in enumerate(r["siblings"]):
            if len(sib) == 2:
                agree = bool(sib[0]) and sib[0] == sib[1]
                pairs.append(agree)
                s = r["scores"].get("probe_js", [None] * len(r["cuts"]))[j]
                if s is not None:
                    js_pairs.append((s, agree))
    contrast = {"sibling_agreement": float(np.mean(pairs)) if pairs else math.nan, "pairs": len(pairs)}
    if len(js_pairs) >= 3:
        js_pairs.sort(key=lambda x: x[0])
        k = len(js_pairs) // 3
        terciles = {
            "bottom": js_pairs[:k],
            "middle": js_pairs[k : len(js_pairs) - k],
            "top": js_pairs[len(js_pairs) - k :],
        }
        contrast["disagreement_by_js_tercile"] = {
            t: 1 - float(np.mean([a for _, a in xs])) for t, xs in terciles.items() if xs
        }
    return contrast


def run_validate(cfg: ValidateConfig, console=None) -> dict:
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from bsb.engine.probe import ProbeConfig
    from bsb.eval.figures import bar_chart, case_plot, lag_plot
    from bsb.eval.lag import belief_changes, lag_profile

    console = console or Console()
    # explicit arith without options: problems of 2-4 operations (the arithmetic model's range)
    options = (
        cfg.task_options if cfg.task_options is not None else ({"ops": [2, 3, 4]} if cfg.task == "arith" else None)
    )
    session = open_session(cfg, cfg.n_problems, cfg.seed, task_options=options)
    task, tok, model, hf = session.task, session.tok, session.model, session.hf
    newline, eos = session.newline, session.eos
    problems, prompts, path = session.problems, session.prompts, session.path
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bsv_path = cfg.bsv_path
    if bsv_path is None and cfg.task_bsv:
        fitted = task_direction(path, task, model, tok)
        bsv_path = str(fitted) if fitted else None
    # completions through vLLM when installed
    gen = rollout_backend(cfg.backend, path, hf, 1024 + cfg.max_response, cfg.seed, dtype=model.dtype)

    saved = _sample_chains(cfg, gen, session, out)  # sampled once, reused on resume

    store = CompletionStore(out / "completions.jsonl")
    judge = judge_client(cfg)
    scfg = session.selector_config(
        ProbeConfig(read_len=cfg.read_len), seed=cfg.seed, bsv_path=bsv_path, judge=judge, decode=session.decode
    )
    # the configured selectors, and those the task's own BSV direction now configures; every one reads through HF
    names = cfg.selectors + tuple(
        n for n, c in SELECTORS.items() if c.needs_config and n not in cfg.selectors and c.configured(scfg)
    )
    selectors = {n: make_selector(n, scfg, hf) for n in names}
    todo = []
    for i, p in enumerate(problems):
        resp = saved[p.id]
        pool = candidate_pool(resp, newline, cfg.m, 1.0, 1)
        if pool.kind == "newline":
            todo.append((i, pool.positions))
    total = sum(len(c) for _, c in todo) * cfg.n_mc
    bar = tqdm(
        total=total,
        initial=sum(1 for (c, _, _) in store.done if c in {problems[i].id for i, _ in todo}),
        desc="V* completions",
        disable=not cfg.progress,
    )
    curves, skipped = [], len(problems) - len(todo)
    for i, cuts in todo:
        p, resp = problems[i], saved[problems[i].id]

        def grade(ids, problem=p):
            verdict = task.verify(session.decode(ids), problem)
            return verdict.correct, verdict.answer

        v = mc_values(
            gen,
            prompts[i],
            resp,
            cuts,
            cfg.n_mc,
            grade,
            cfg.max_response,
            eos,
            temperature=cfg.temperature,
            seed=cfg.seed + 7 * i,
            batch_size=cfg.batch_size,
            store=store,
            chain_id=p.id,
            progress=bar.update,
        )
        row = _score_chain(session, i, resp, cuts, v, selectors, store, cfg)
        curves.append(row)
    bar.close()
    (out / "curves.jsonl").write_text("".join(json.dumps(r, default=jsonable) + "\n" for r in curves))

    # --- table: mean E over non-flat problems, excess over the floor
    live = [r for r in curves if not r["flat"]]
    whole = sum(len(r["cuts"]) <= r["b"] for r in live)
    if whole:
        console.print(
            f"[yellow]B keeps every boundary of {whole} of {len(live)} non-flat chains: any selector that "
            "ranks them all scores E=0 there; a smaller --b separates the selectors[/yellow]"
        )
    b_over_m = float(np.median([r["b"] / len(r["cuts"]) for r in live])) if live else math.nan
    if b_over_m > 0.2:
        console.print(
            f"[yellow]B/m = {b_over_m:.2f} (median): most of each V* curve is kept, so evenly spaced points are "
            "near-optimal and selectors cannot separate; the paper keeps 10 of up to 128 (B/m ≈ 0.08): "
            "--b-ratio 0.08 with longer chains matches it[/yellow]"
        )
    names = list(selectors)
    mean_e = {n: float(np.mean([r["error"][n] for r in live])) if live else math.nan for n in names}
    sem = {
        n: float(np.std([r["error"][n] for r in live]) / math.sqrt(len(live))) if len(live) > 1 else 0.0 for n in names
    }
    floor = float(np.mean([r["floor"] for r in live])) if live else math.nan
    ranked = sorted(names, key=lambda n: mean_e[n]) if live else []
    mark = dict(zip(ranked[:2], ("**", "_")))
    label = f"embedded default ({task.name})" if cfg.model == "embedded" else path.name
    b_text = f"B={cfg.b}" if cfg.b_ratio is None else f"B={cfg.b_ratio:g}·m"
    title = (
        f"{label}: {len(live)} non-flat of {len(curves)} chains ({skipped} without a newline boundary), "
        f"{b_text}, B/m={b_over_m:.2f} (median), N_MC={cfg.n_mc}"
    )
    table = Table(title=title)
    for col in ("selector", "mean E", "± s.e.", "excess over floor", "fallbacks", "flip mass captured"):
        table.add_column(col, justify="left" if col == "selector" else "right")
    md = [
        f"# {title}",
        "",
        "| selector | mean E | ± s.e. | excess over floor | fallbacks | flip mass captured |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    total_flip = sum(flip_mass(r["v_star"], list(range(len(r["v_star"])))) for r in live)
    for n in names:
        captured = sum(flip_mass(r["v_star"], r["top_b"][n]) for r in live) / total_flip if total_flip else math.nan
        fbs = sum(r["fallback"][n] for r in curves)
        cells = [f"{mean_e[n]:.3f}", f"{sem[n]:.3f}", f"{mean_e[n] - floor:.3f}", str(fbs), f"{captured:.2f}"]
        table.add_row(("★ " if ranked and n == ranked[0] else "") + n, *cells)
        md.append(f"| {n} | {mark.get(n, '')}{cells[0]}{mark.get(n, '')} | " + " | ".join(cells[1:]) + " |")
    md.append(f"| oracle floor (DP) | {floor:.3f} | | 0 | | |")
    console.print(table)
    console.print(f"oracle floor (best E of any B points): {floor:.3f}")
    if judge is not None:
        console.print(f"llm_judge ({cfg.judge_model}): {judge.stats.summary()}")

    contrast = fork_contrast(curves)  # App. D
    console.print(
        f"fork contrast: siblings agree on {contrast['sibling_agreement']:.2f} of {contrast['pairs']} boundary forks"
        + (
            "; disagreement by Probe-JS tercile (bottom/middle/top): "
            + " / ".join(f"{contrast['disagreement_by_js_tercile'][t]:.2f}" for t in ("bottom", "middle", "top"))
            if "disagreement_by_js_tercile" in contrast
            else ""
        )
    )
    md += [
        "",
        f"Fork contrast (App. D): sibling agreement {contrast['sibling_agreement']:.3f} "
        f"over {contrast['pairs']} pairs; "
        "disagreement by Probe-JS tercile: "
        + (", ".join(f"{k} {v:.3f}" for k, v in contrast.get("disagreement_by_js_tercile", {}).items()) or "none"),
    ]
    # --- the lag diagnostic: every score, and the probe belief's own moves, against the value jumps
    beliefs = {}
    for r in live:
        i = next(k for k, p in enumerate(problems) if p.id == r["id"])
        beliefs[r["id"]] = answer_belief(
            hf, prompts[i], r["response"], r["cuts"], scfg.suffix, session.gold_ids(problems[i])
        )
    lags = {"belief": lag_profile([(belief_changes(beliefs[r["id"]]), r["v_star"]) for r in live], seed=cfg.seed)}
    lags.update({n: lag_profile([(r["scores"][n], r["v_star"]) for r in live], seed=cfg.seed) for n in names})
    md += ["", *lag_table(lags)]
    console.print("\n".join(lag_table(lags)))
    (out / "lag.json").write_text(json.dumps(lags, indent=1, default=jsonable) + "\n")
    (out / "table.md").write_text("\n".join(md) + "\n")

    # --- figures
    if live:
        lag_plot(out / "lag.png", lags, title=f"{label}: lag of each score against the V* pivots")
    if live:
        bar_chart(
            out / "bars.png",
            mean_e,
            sem,
            ylabel="mean reconstruction error E (lower is better)",
            title=title,
            floor=floor,
        )
    two = [n for n in ("probe_js", "entropy") if n in selectors] or names[:2]
    for r in sorted(live, key=lambda r: -flip_mass(r["v_star"], list(range(len(r["v_star"])))))[: cfg.case_plots]:
        i = next(k for k, p in enumerate(problems) if p.id == r["id"])
        belief = beliefs[r["id"]]
        forks = {n: r["cuts"][r["top_b"][n][0]] if r["top_b"][n] else None for n in two}
        captured = {n: flip_mass(r["v_star"], r["top_b"][n]) for n in two}
        js = r["scores"].get("probe_js")
        case_plot(
            out / f"case_{r['id']}.png",
            r["cuts"],
            r["v_star"],
            forks,
            belief=belief,
            js=[0.0 if x is None else x for x in js] if js else None,
            chain_len=len(r["response"]),
            captured=captured,
            title=f"{r['prompt'].strip()[:80]} (gold {gold_label(problems[i].answer)}); top-1 forks; "
            f"flip mass of each top-{r['b']}",
        )
    console.print(f"wrote {out / 'table.md'}, {out / 'curves.jsonl'}, figures in {out}")
    return {
        "mean_error": mean_e,
        "sem": sem,
        "floor": floor,
        "ranking": ranked,
        "non_flat": len(live),
        "chains": len(curves),
        "contrast": contrast,
        "completions": len(store),
        "b_over_m": b_over_m,
        "lag": lags,
    }


def lag_table(lags: dict) -> list[str]:
    """The lag diagnostic as Markdown rows: each score's pooled correlation at every lag, and its peak."""
    order = sorted(next(iter(lags.values()))["lags"]) if lags else []
    head = "| score | " + " | ".join(f"lag {k:+d}" for k in order) + " | peak |"
    rows = [
        "Lag diagnostic: correlation of the score at boundary j + lag with |V*(t_{j+1}) − V*(t_j)|, pooled over the "
        "non-flat chains [95% bootstrap over chains]; fork-before assumes the peak at lag 0 (peak: the largest "
        "correlation positive beyond its interval; none: the score does not mark the pivots).",
        "",
        head,
        "|---|" + "---:|" * (len(order) + 1),
    ]
    for name, prof in lags.items():
        cells = [
            f"{x['r']:.2f} [{x['lo']:.2f}, {x['hi']:.2f}]" if not math.isnan(x["r"]) else "n/a"
            for x in (prof["lags"][k] for k in order)
        ]
        peak = f"{prof['peak']:+d}" if prof["peak"] is not None else "none"
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {peak} |")
    return rows
