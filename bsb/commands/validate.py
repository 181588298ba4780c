"""``bsb validate``: pre-RL validation of fork selectors against Monte-Carlo value curves (seed 000 §4, App. D).

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

Selectors that rank boundaries: every engine selector except the token-window ones (min_margin, first_gap,
which pick token positions, see ``bsb evaluate``). A selector that cannot score a chain (no committed answer
for Lens-Shift) ranks it by closeness to the midpoint, counted in the report.

Outputs in ``out_dir``: ``chains.jsonl`` (the sampled chains), ``completions.jsonl`` (every finished
completion), ``curves.jsonl`` (per problem: cuts, V*, every selector's scores, top-B and error: enough to
re-score new selectors without re-sampling), ``table.md``, ``bars.png`` (Figure 3 style) and ``case_*.png``
(Figure 1 style).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bsb.engine.boundaries import CandidatePool, candidate_pool, newline_token_mask
from bsb.engine.bsv import task_direction
from bsb.engine.selectors import SELECTORS, CannotScore, ChainInput, SelectorConfig, make_selector
from bsb.engine.vllm_backend import rollout_backend
from bsb.eval.offline import OfflineConfig, gold_label, jsonable, judge_client
from bsb.eval.reconstruction import is_flat, oracle_floor, reconstruction_error, top_b
from bsb.eval.value_curve import CompletionStore, answer_belief, mc_values
from bsb.tasks.prompting import render_prompt
from bsb.tasks.registry import offline_task

TOKEN_WINDOW = ("min_margin", "first_gap")
DEFAULT_SELECTORS = ("probe_js", "lens_shift", "entropy", "midpoint", "uniform", "random", "newline")


@dataclass
class ValidateConfig(OfflineConfig):
    task_options: dict | None = None  # the task's options; None: arith problems of 2-4 operations, no options otherwise
    n_problems: int = 24
    selectors: tuple[str, ...] = DEFAULT_SELECTORS
    bsv_path: str | None = None  # a fitted BSV direction adds the bsv selector
    task_bsv: bool = True  # a task that drafts BSV continuations (walk) adds bsv, its direction fitted once and cached with the model
    read_len: int | None = None  # L, Probe-JS read positions; None: the task's (L > 1 reads past an uninformative first token)
    temperature: float = 0.7  # chain and completion sampling temperature
    max_response: int = 160
    m: int = 128  # candidate boundaries per chain
    n_mc: int = 16  # completions per boundary
    b: int = 10  # kept boundaries per selector
    seed: int = 0
    out_dir: str = "runs/validate"
    backend: str = "auto"  # completions through vLLM when installed (auto), or hf
    case_plots: int = 3
    batch_size: int = 64
    progress: bool = True

    def __post_init__(self):
        super().__post_init__()
        self.selectors = tuple(self.selectors)
        bad = [s for s in self.selectors if s not in SELECTORS]
        if bad:
            raise ValueError(f"unknown selector(s) {bad}; choose from {', '.join(SELECTORS)}")
        window = [s for s in self.selectors if s in TOKEN_WINDOW]
        if window:
            raise ValueError(f"{window} pick token positions, not boundaries; they are evaluated by bsb evaluate")
        if "bsv" in self.selectors and not self.bsv_path:
            raise ValueError("the bsv selector needs bsv_path (a direction fitted with bsb.engine.bsv.fit_bsv)")
        if self.bsv_path and "bsv" not in self.selectors:
            self.selectors = self.selectors + ("bsv",)
        if "llm_judge" in self.selectors and not self.judge_url:
            raise ValueError("the llm_judge selector needs a judge: --judge-url URL --judge-model NAME (or --judge-url local)")
        if self.judge_url and "llm_judge" not in self.selectors:
            self.selectors = self.selectors + ("llm_judge",)
        if min(self.m, self.n_mc, self.b, self.n_problems) < 1:
            raise ValueError("m, n_mc, b and n_problems must be >= 1")
        if self.backend not in ("auto", "hf", "vllm"):
            raise ValueError(f"backend must be auto, hf or vllm, got {self.backend!r}")


def _scores(name: str, sel, chain: ChainInput, pool: CandidatePool, reads, index: int, seed: int) -> tuple[list[float], bool]:
    """Per-boundary scores and whether the selector fell back to the midpoint ranking."""
    mid = [-abs(t - pool.chain_len / 2) for t in pool.positions]
    if name == "midpoint":
        return mid, False
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


def run_validate(cfg: ValidateConfig, console=None) -> dict:
    import transformers
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from bsb.embedded.model import resolve_model
    from bsb.engine.hf_backend import HFBackend
    from bsb.engine.hf_model import load_for_inference
    from bsb.eval.figures import bar_chart, case_plot

    console = console or Console()
    name = cfg.task or ("math" if cfg.problems else "walk")
    task = offline_task(name, cfg.task_options if cfg.task_options is not None else ({"ops": [2, 3, 4]} if name == "arith" else {}), cfg.problems)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = resolve_model(cfg.model, task)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = load_for_inference(path, cfg.device, cfg.dtype)
    hf = HFBackend(model, tok)
    bsv_path = cfg.bsv_path
    if bsv_path is None and cfg.task_bsv:
        fitted = task_direction(path, task, model, tok)
        bsv_path = str(fitted) if fitted else None
    selector_names = cfg.selectors + (("bsv",) if bsv_path and "bsv" not in cfg.selectors else ())
    gen = rollout_backend(cfg.backend, path, hf, 1024 + cfg.max_response, cfg.seed, dtype=model.dtype)  # completions through vLLM when installed
    eos = tok.eos_token_id
    newline = newline_token_mask(tok, hf.vocab_size)
    problems = task.sample(cfg.n_problems, cfg.seed)
    prompts = [tok.encode(render_prompt(task, p, tok, cfg.prompt_format), add_special_tokens=False) for p in problems]

    # --- chains: sampled once, reused on resume
    chains_path = out / "chains.jsonl"
    saved = {r["id"]: r["response"] for r in map(json.loads, chains_path.read_text().splitlines())} if chains_path.exists() else {}
    missing = [i for i, p in enumerate(problems) if p.id not in saved]
    if missing:
        outs = gen.generate([prompts[i] for i in missing], max_new_tokens=cfg.max_response, temperature=cfg.temperature,
                            seed=cfg.seed, eos_token_id=eos)
        with chains_path.open("a") as f:
            for i, r in zip(missing, outs):
                saved[problems[i].id] = list(r)
                f.write(json.dumps({"id": problems[i].id, "prompt": problems[i].prompt, "gold": problems[i].answer, "response": list(r)},
                                   default=jsonable) + "\n")

    def answer_ids(text):
        ans = task.answer_span(text)
        return tok.encode(ans, add_special_tokens=False) if ans else None

    store = CompletionStore(out / "completions.jsonl")
    judge = judge_client(cfg)
    scfg = SelectorConfig(suffix=tok.encode(task.probe_suffix, add_special_tokens=False), seed=cfg.seed, bsv_path=bsv_path,
                          read_len=cfg.read_len or task.read_len, judge=judge, decode=lambda ids: tok.decode(ids, skip_special_tokens=True))
    selectors = {n: make_selector(n, scfg, hf) for n in selector_names}  # every selector reads through the HF model
    todo = []
    for i, p in enumerate(problems):
        resp = saved[p.id]
        pool = candidate_pool(resp, newline, cfg.m, 1.0, 1)
        if pool.kind == "newline":
            todo.append((i, pool.positions))
    total = sum(len(c) for _, c in todo) * cfg.n_mc
    bar = tqdm(total=total, initial=sum(1 for (c, _, _) in store.done if c in {problems[i].id for i, _ in todo}),
               desc="V* completions", disable=not cfg.progress)
    curves, skipped = [], len(problems) - len(todo)
    for i, cuts in todo:
        p, resp = problems[i], saved[problems[i].id]

        def grade(ids, problem=p):
            verdict = task.verify(tok.decode(ids, skip_special_tokens=True), problem)
            return verdict.correct, verdict.answer

        v = mc_values(gen, prompts[i], resp, cuts, cfg.n_mc, grade, cfg.max_response, eos, temperature=cfg.temperature,
                      seed=cfg.seed + 7 * i, batch_size=cfg.batch_size, store=store, chain_id=p.id, progress=bar.update)
        text = tok.decode(resp, skip_special_tokens=True)
        chain = ChainInput(prompts[i], resp, answer=answer_ids(text))
        pool = CandidatePool(list(cuts), "newline", len(resp))
        row = {"id": p.id, "prompt": p.prompt, "gold": p.answer, "response": resp, "text": text, "cuts": list(cuts), "v_star": v,
               "flat": is_flat(v), "scores": {}, "top_b": {}, "error": {}, "fallback": {}}
        floor, best = oracle_floor(v, min(cfg.b, len(v)))
        row["floor"], row["floor_points"] = floor, best
        for name, sel in selectors.items():
            s, fb = _scores(name, sel, chain, pool, hf, i, cfg.seed)
            kept = top_b(s, cfg.b)
            row["scores"][name] = [None if math.isnan(x) else x for x in s]
            row["top_b"][name], row["fallback"][name] = kept, fb
            row["error"][name] = reconstruction_error(v, kept)
        row["siblings"] = [[store.answers.get((p.id, c, j), "") for j in range(min(2, cfg.n_mc))] for c in cuts]
        curves.append(row)
    bar.close()
    (out / "curves.jsonl").write_text("".join(json.dumps(r, default=jsonable) + "\n" for r in curves))

    # --- table: mean E over non-flat problems, excess over the floor
    live = [r for r in curves if not r["flat"]]
    whole = sum(len(r["cuts"]) <= cfg.b for r in live)
    if whole:
        console.print(f"[yellow]B={cfg.b} keeps every boundary of {whole} of {len(live)} non-flat chains: any selector that ranks "
                      "them all scores E=0 there; a smaller --b separates the selectors[/yellow]")
    names = list(selectors)
    mean_e = {n: float(np.mean([r["error"][n] for r in live])) if live else math.nan for n in names}
    sem = {n: float(np.std([r["error"][n] for r in live]) / math.sqrt(len(live))) if len(live) > 1 else 0.0 for n in names}
    floor = float(np.mean([r["floor"] for r in live])) if live else math.nan
    ranked = sorted(names, key=lambda n: mean_e[n]) if live else []
    mark = dict(zip(ranked[:2], ("**", "_")))
    label = f"embedded default ({task.name})" if cfg.model == "embedded" else path.name
    title = f"{label}: {len(live)} non-flat of {len(curves)} chains ({skipped} without a newline boundary), B={cfg.b}, N_MC={cfg.n_mc}"
    table = Table(title=title)
    for col in ("selector", "mean E", "± s.e.", "excess over floor", "fallbacks", "flip mass captured"):
        table.add_column(col, justify="left" if col == "selector" else "right")
    md = [f"# {title}", "", "| selector | mean E | ± s.e. | excess over floor | fallbacks | flip mass captured |", "|---|---:|---:|---:|---:|---:|"]
    total_flip = sum(flip_mass(r["v_star"], list(range(len(r["v_star"])))) for r in live)
    for n in names:
        captured = sum(flip_mass(r["v_star"], r["top_b"][n]) for r in live) / total_flip if total_flip else math.nan
        fbs = sum(r["fallback"][n] for r in curves)
        cells = [f"{mean_e[n]:.3f}", f"{sem[n]:.3f}", f"{mean_e[n] - floor:.3f}", str(fbs), f"{captured:.2f}"]
        table.add_row(("★ " if ranked and n == ranked[0] else "") + n, *cells)
        md.append(f"| {n} | {mark.get(n, '')}{cells[0]}{mark.get(n, '')} | " + " | ".join(cells[1:]) + " |")
    md.append(f"| oracle floor (DP) | {floor:.3f} | | 0 | | |")
    console.print(table)
    console.print(f"oracle floor (best E of any {cfg.b} points): {floor:.3f}")
    if judge is not None:
        console.print(f"llm_judge ({cfg.judge_model}): {judge.stats.summary()}")

    # --- fork contrast (App. D)
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
        terciles = {"bottom": js_pairs[:k], "middle": js_pairs[k : len(js_pairs) - k], "top": js_pairs[len(js_pairs) - k :]}
        contrast["disagreement_by_js_tercile"] = {t: 1 - float(np.mean([a for _, a in xs])) for t, xs in terciles.items() if xs}
    console.print(f"fork contrast: siblings agree on {contrast['sibling_agreement']:.2f} of {contrast['pairs']} boundary forks"
                  + ("; disagreement by Probe-JS tercile (bottom/middle/top): "
                     + " / ".join(f"{contrast['disagreement_by_js_tercile'][t]:.2f}" for t in ("bottom", "middle", "top"))
                     if "disagreement_by_js_tercile" in contrast else ""))
    md += ["", f"Fork contrast (App. D): sibling agreement {contrast['sibling_agreement']:.3f} over {contrast['pairs']} pairs; "
           f"disagreement by Probe-JS tercile: {json.dumps(contrast.get('disagreement_by_js_tercile', {}))}"]
    (out / "table.md").write_text("\n".join(md) + "\n")

    # --- figures
    if live:
        bar_chart(out / "bars.png", mean_e, sem, ylabel="mean reconstruction error E (lower is better)", title=title, floor=floor)
    two = [n for n in ("probe_js", "entropy") if n in selectors] or names[:2]
    for r in sorted(live, key=lambda r: -flip_mass(r["v_star"], list(range(len(r["v_star"])))))[: cfg.case_plots]:
        i = next(k for k, p in enumerate(problems) if p.id == r["id"])
        belief = answer_belief(hf, prompts[i], r["response"], r["cuts"], scfg.suffix,
                               tok.encode(task.gold_continuation(problems[i]), add_special_tokens=False))
        forks = {n: r["cuts"][r["top_b"][n][0]] if r["top_b"][n] else None for n in two}
        captured = {n: flip_mass(r["v_star"], r["top_b"][n]) for n in two}
        js = r["scores"].get("probe_js")
        case_plot(out / f"case_{r['id']}.png", r["cuts"], r["v_star"], forks, belief=belief,
                  js=[0.0 if x is None else x for x in js] if js else None, chain_len=len(r["response"]), captured=captured,
                  title=f"{r['prompt'].strip()[:80]} (gold {gold_label(problems[i].answer)}); top-1 forks; flip mass of each top-{cfg.b}")
    console.print(f"wrote {out / 'table.md'}, {out / 'curves.jsonl'}, figures in {out}")
    return {"mean_error": mean_e, "sem": sem, "floor": floor, "ranking": ranked, "non_flat": len(live), "chains": len(curves),
            "contrast": contrast, "completions": len(store)}
