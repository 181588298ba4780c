"""``bsb demo``: every fork-point selector on chains the model samples, the cost of each read next to the
rollout's, and the Monte-Carlo value curve of each chain; the chain whose value moves most is drawn with each
selector's fork ([Fork] Figure 1 style).

On the embedded default (the tiny Qwen3 trained on the synthetic map walks) it needs no GPU and no
download; given a local Hugging Face model directory and a problem file it runs the same on that model.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

from bsb.commands.flags import command_parser, from_args
from bsb.engine.bsv import task_direction
from bsb.engine.selectors import SELECTORS, ChainInput, make_selector
from bsb.eval.session import OfflineConfig, gold_label, judge_client, open_session
from bsb.fields import MAX_COUNT
from bsb.fields import help_field as _f

HELP = "every selector on sampled chains, read costs, and a V* case plot (embedded default)"


@dataclass
class DemoConfig(OfflineConfig):
    n_problems: int = _f(4, "chains to sample, one per problem", flag="--chains", ge=1, size_limit=MAX_COUNT)
    max_response: int = _f(256, "response token cap", ge=8, size_limit=MAX_COUNT)
    temperature: float = _f(
        1.0, "chain and completion sampling temperature (the RL rollouts'; at 0.7 the walk model rarely slips)", gt=0
    )
    n_mc: int = _f(8, "completions per boundary for the value curve V*", ge=1, size_limit=MAX_COUNT)
    seed: int = _f(0, "seed of the problems, chains and completions")
    out: str = _f("bsb_demo.png", "where the figure goes", path="file")
    quick: bool = _f(
        False, "a test-size model and tiny budgets: checks the pipeline in seconds (its forks mean little)"
    )
    progress: bool = _f(True, "progress bars", cli=False)

    def __post_init__(self):
        super().__post_init__()
        if self.model != "embedded" and self.problems is None:
            raise ValueError("a model other than the embedded default needs a problem file: bsb demo MODEL PROBLEMS")
        if self.quick:
            self.n_problems, self.n_mc, self.max_response = (
                min(self.n_problems, 2),
                min(self.n_mc, 2),
                min(self.max_response, 64),
            )


def add_parser(sub) -> argparse.ArgumentParser:
    return command_parser(sub, "demo", HELP, DemoConfig)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    run_demo(from_args(DemoConfig, args, parser))
    return 0


def run_demo(cfg: DemoConfig, console=None) -> dict:
    from rich.console import Console

    from bsb.embedded.model import quick_config, train_tiny_model
    from bsb.eval.demo_report import boundaries
    from bsb.tasks.registry import offline_task

    console = console or Console()
    t_start = time.perf_counter()
    task = offline_task(cfg.task, cfg.task_options, cfg.problems)  # built once (a code task starts its sandbox pool)
    quick_path = (
        train_tiny_model(quick_config(task), progress=cfg.progress) if cfg.quick and cfg.model == "embedded" else None
    )
    session = open_session(cfg, cfg.n_problems, cfg.seed, path=quick_path, task=task)
    problems = session.problems
    responses, rollout_s = _sample_chains(cfg, session)
    texts = [session.decode(r) for r in responses]
    correct = [session.task.verify(t, p).correct for t, p in zip(texts, problems)]
    chains = [ChainInput(p, r, answer=session.answer_ids(t)) for p, r, t in zip(session.prompts, responses, texts)]
    judge = judge_client(cfg)
    # the task's BSV direction (walk), fitted once, cached with the model
    bsv = task_direction(session.path, session.task, session.model, session.tok)
    scfg = session.selector_config(
        seed=cfg.seed, judge=judge, decode=session.decode, bsv_path=str(bsv) if bsv else None
    )
    names, picks, read_s = _forks(cfg, scfg, session, chains)
    _show_forks(console, session, texts, correct, chains, (names, picks, read_s), rollout_s)
    if judge is not None:  # the judge's read tokens are its prompt + completion; its calls and latency here
        console.print(f"llm_judge ({cfg.judge_model}): {judge.stats.summary()}")

    # --- V* at the candidate boundaries of every chain; the figure shows the chain whose V* moves most
    t0 = time.perf_counter()
    curves = _value_curves(cfg, session, chains, [boundaries(c, cfg.max_response) for c in picks["probe_js"]])
    mc_s = time.perf_counter() - t0
    curves = [v + [float(ok)] for v, ok in zip(curves, correct)]
    k, xs, vs, belief, flips, png = _case_figure(cfg, session, chains, curves, (names, picks), scfg.suffix)
    total = time.perf_counter() - t_start
    console.print(
        f"V* of chain {k} (the one whose V* moves most) at t={xs}: {', '.join(f'{x:.2f}' for x in vs)} "
        f"({mc_s:.1f}s for {sum(len(c) - 1 for c in curves) * cfg.n_mc} completions over {len(chains)} chains)"
    )
    console.print(
        "flip mass |ΔV*| of the segment each selector re-rolls: "
        + ", ".join(f"{n} {flips[n]:.2f}" for n in names)
        + most_text(flips)
    )
    console.print(f"figure: {Path(png).resolve()}")
    console.print(f"demo wall time: {total:.1f}s")
    return {
        "png": str(png),
        "v_star": vs,
        "cuts": xs,
        "chain": k,
        "belief": belief,
        "forks": {n: [c.fork for c in picks[n]] for n in names},
        "flip_mass": flips,
        "seconds": total,
        "correct": correct,
    }


def most_text(flips: dict[str, float]) -> str:
    """Which selectors re-roll the most flip mass: every one tied at the top, or none when no segment moved V*."""
    top = max(flips.values(), default=0.0)
    if not top > 0:
        return " (no selector's segment moves V* on this chain)"
    return f" (most: {', '.join(n for n, f in flips.items() if f == top)})"


def _case_figure(cfg: DemoConfig, session, chains, curves, forks, suffix) -> tuple:
    """The chain whose V* moves most (``curves``: each chain's V* at its boundaries and its outcome) drawn with every
    selector's fork, the elicited belief in the gold answer (as the task continues ``suffix`` with it) and the JS
    score of each boundary (fork-before): its index, positions, V*, belief, each fork's flip mass, and the figure."""
    from bsb.eval import demo_report as report
    from bsb.eval.figures import case_plot
    from bsb.eval.flip_mass import at_fork
    from bsb.eval.value_curve import answer_belief

    names, picks = forks
    k = report.case_chain(curves)
    ch, p, cuts = chains[k], session.problems[k], report.boundaries(picks["probe_js"][k], cfg.max_response)
    xs, vs = cuts + [len(ch.response)], curves[k]
    gold = session.gold_ids(p)
    belief = answer_belief(session.hf, ch.prompt, ch.response, cuts, suffix, gold, session.closing_ids(gold))
    flips = {name: at_fork(xs, vs, picks[name][k].fork) for name in names}
    png = case_plot(
        cfg.out,
        xs,
        vs,
        {n: picks[n][k].fork for n in names},
        belief=belief + [math.nan],
        js=report.scores_at(picks["probe_js"][k], cuts) + [0.0],
        chain_len=len(ch.response),
        captured=flips,
        title=f"chain {k}: {p.prompt.strip()[:80]} (gold {gold_label(p.answer)}); "
        f"V* from {cfg.n_mc} completions per boundary",
    )
    return k, xs, vs, belief, flips, png


def _show_forks(console, session, texts, correct, chains, forks, rollout_s) -> None:
    """Each chain (its problem, text and verdict) and its table of every selector's fork; ``forks``: the selectors'
    names, and by name their fork choices and read times."""
    from bsb import kernels
    from bsb.eval import demo_report as report
    from bsb.eval.table import rich_table

    names, picks, read_s = forks
    for i, (ch, text, p) in enumerate(zip(chains, texts, session.problems)):
        verdict = "correct" if correct[i] else "wrong"
        console.rule(f"chain {i}: {p.prompt.strip()[:100]}  (gold {gold_label(p.answer)}; {verdict})")
        console.print(text, markup=False, highlight=False)
        rows = report.chain_rows(i, names, picks, read_s, rollout_s[i])
        console.print(rich_table(report.COLUMNS, rows, title=report.chain_title(i, len(ch.response), rollout_s[i])))
    console.print(
        "fork t: the response position siblings continue from (* the selector fell back to Midpoint or the pool held "
        "one candidate); score: the selector's own scale at its fork; pool: candidates scored; read tokens: "
        "token-forwards of the selector's reads; read/rollout: read time over the chain's sampling time. Kernels: "
        f"probe_js={kernels.implementation('probe_js')}, lens={kernels.implementation('lens_logprobs')}."
    )


def _sample_chains(cfg: DemoConfig, session) -> tuple[list[list[int]], list[float]]:
    """One chain per problem, each timed, so that each read is set against its own rollout."""
    from tqdm import tqdm

    responses, seconds = [], []
    for i, p in enumerate(tqdm(session.prompts, desc="sampling chains", disable=not cfg.progress, leave=False)):
        t0 = time.perf_counter()
        responses.append(
            session.hf.generate(
                [p],
                max_new_tokens=cfg.max_response,
                temperature=cfg.temperature,
                seed=cfg.seed + i,
                eos_token_id=session.eos,
            )[0]
        )
        seconds.append(time.perf_counter() - t0)
    return responses, seconds


def _forks(cfg: DemoConfig, scfg, session, chains) -> tuple[list[str], dict, dict]:
    """Every selector configured here (BSV when the task drafts its data, the LLM judge when one is given), chain by
    chain: the selectors' names, and by name their fork choices and read times."""
    from tqdm import tqdm

    names = [n for n, cls in SELECTORS.items() if cls.configured(scfg)]
    picks: dict[str, list] = {}
    read_s: dict[str, list[float]] = {}
    for name in tqdm(names, desc="selectors", disable=not cfg.progress, leave=False):
        sel = make_selector(name, scfg, session.hf)
        picks[name], read_s[name] = [], []
        for ch in chains:
            t0 = time.perf_counter()
            picks[name].append(sel.select([ch], session.newline).choices[0])
            read_s[name].append(time.perf_counter() - t0)
    return names, picks, read_s


def _value_curves(cfg: DemoConfig, session, chains, cuts: list[list[int]]) -> list[list[float]]:
    """V* of every chain at its ``cuts`` from ``cfg.n_mc`` completions each."""
    from tqdm import tqdm

    from bsb.eval.value_curve import mc_values

    bar = tqdm(
        total=sum(len(c) for c in cuts) * cfg.n_mc,
        desc=f"V* of {len(chains)} chains (x {cfg.n_mc})",
        disable=not cfg.progress,
        leave=False,
    )
    curves = []
    for i, ch in enumerate(chains):

        def solved(ids, problem=session.problems[i]):
            return session.task.verify(session.decode(ids), problem).correct, ""

        curves.append(
            mc_values(
                session.hf,
                ch.prompt,
                ch.response,
                cuts[i],
                cfg.n_mc,
                solved,
                cfg.max_response,
                session.eos,
                temperature=cfg.temperature,
                seed=cfg.seed,
                chain_id=str(i),
                progress=bar.update,
            )
        )
    bar.close()
    return curves
