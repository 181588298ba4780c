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
from bsb.fields import help_field as _f

HELP = "every selector on sampled chains, read costs, and a V* case plot (embedded default)"


@dataclass
class DemoConfig(OfflineConfig):
    n_problems: int = _f(4, "chains to sample, one per problem", flag="--chains")
    max_response: int = _f(256, "response token cap")
    temperature: float = _f(
        1.0, "chain and completion sampling temperature (the RL rollouts'; at 0.7 the walk model rarely slips)"
    )
    n_mc: int = _f(8, "completions per boundary for the value curve V*")
    seed: int = _f(0, "seed of the problems, chains and completions")
    out: str = _f("bsb_demo.png", "where the figure goes")
    quick: bool = _f(
        False, "a test-size model and tiny budgets: checks the pipeline in seconds (its forks mean little)"
    )
    progress: bool = _f(True, "progress bars", cli=False)

    def __post_init__(self):
        super().__post_init__()
        if self.n_problems < 1 or self.max_response < 8 or self.n_mc < 1 or not self.temperature > 0:
            raise ValueError("--chains and --n-mc must be >= 1, --max-response >= 8 and --temperature > 0")
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
    from tqdm import tqdm

    from bsb import kernels
    from bsb.embedded.model import quick_config, train_tiny_model
    from bsb.eval.figures import case_plot
    from bsb.eval.value_curve import answer_belief, mc_values
    from bsb.tasks.registry import offline_task

    console = console or Console()
    t_start = time.perf_counter()
    task = offline_task(cfg.task, cfg.task_options, cfg.problems)  # built once (a code task starts its sandbox pool)
    quick_path = (
        train_tiny_model(quick_config(task), progress=cfg.progress) if cfg.quick and cfg.model == "embedded" else None
    )
    session = open_session(cfg, cfg.n_problems, cfg.seed, path=quick_path, task=task)
    task, tok, model, backend = session.task, session.tok, session.model, session.hf
    newline, eos = session.newline, session.eos
    problem_set, prompts = session.problems, session.prompts
    problems = [(p.prompt, p.answer) for p in problem_set]

    # --- rollout: one chain per problem (timed per chain, so each read is set against its own rollout)
    responses, rollout_s = [], []
    for i, p in enumerate(tqdm(prompts, desc="sampling chains", disable=not cfg.progress, leave=False)):
        t0 = time.perf_counter()
        responses.append(
            backend.generate(
                [p], max_new_tokens=cfg.max_response, temperature=cfg.temperature, seed=cfg.seed + i, eos_token_id=eos
            )[0]
        )
        rollout_s.append(time.perf_counter() - t0)
    texts = [session.decode(r) for r in responses]
    correct = [task.verify(t, p).correct for t, p in zip(texts, problem_set)]
    chains = [ChainInput(p, r, answer=session.answer_ids(t)) for p, r, t in zip(prompts, responses, texts)]
    judge = judge_client(cfg)
    bsv = task_direction(
        session.path, task, model, tok
    )  # the task's BSV direction (walk), fitted once, cached with the model
    scfg = session.selector_config(
        seed=cfg.seed, judge=judge, decode=session.decode, bsv_path=str(bsv) if bsv else None
    )

    # --- every selector configured here, chain by chain (timed per chain): BSV when the task drafts its data, the LLM
    # judge when one is given
    names = [n for n, cls in SELECTORS.items() if cls.configured(scfg)]
    picks: dict[str, list] = {}
    read_s: dict[str, list[float]] = {}
    for name in tqdm(names, desc="selectors", disable=not cfg.progress, leave=False):
        sel = make_selector(name, scfg, backend)
        picks[name], read_s[name] = [], []
        for ch in chains:
            t0 = time.perf_counter()
            picks[name].append(sel.select([ch], newline, backend).choices[0])
            read_s[name].append(time.perf_counter() - t0)

    for i, (ch, text) in enumerate(zip(chains, texts)):
        console.rule(
            f"chain {i}: {problems[i][0].strip()[:100]}  (gold {gold_label(problems[i][1])}; "
            f"{'correct' if correct[i] else 'wrong'})"
        )
        console.print(text, markup=False, highlight=False)
        console.print(_chain_table(i, ch, names, picks, read_s, rollout_s[i]))
    console.print(
        "fork t: the response position siblings continue from (* the selector fell back to Midpoint or the pool held "
        "one candidate); score: the selector's own scale at its fork; pool: candidates scored; read tokens: "
        "token-forwards of the selector's reads; read/rollout: read time over the chain's sampling time. Kernels: "
        f"probe_js={kernels.implementation('probe_js')}, lens={kernels.implementation('lens_logprobs')}."
    )
    if judge is not None:  # the judge's read tokens are its prompt + completion; its calls and latency here
        console.print(f"llm_judge ({cfg.judge_model}): {judge.stats.summary()}")

    # --- V* at the candidate boundaries of every chain; the figure shows the chain whose V* moves most
    def boundaries(i):
        return [t for t in [0] + [t for t in picks["probe_js"][i].pool.positions if t != 0] if t < cfg.max_response]

    curves = {}
    bar = tqdm(
        total=sum(len(boundaries(i)) for i in range(len(chains))) * cfg.n_mc,
        desc=f"V* of {len(chains)} chains (x {cfg.n_mc})",
        disable=not cfg.progress,
        leave=False,
    )
    t0 = time.perf_counter()
    for i, ch in enumerate(chains):

        def solved(ids, problem=problem_set[i]):
            return task.verify(session.decode(ids), problem).correct, ""

        curves[i] = mc_values(
            backend,
            ch.prompt,
            ch.response,
            boundaries(i),
            cfg.n_mc,
            solved,
            cfg.max_response,
            eos,
            temperature=cfg.temperature,
            seed=cfg.seed + i,
            progress=bar.update,
        ) + [float(correct[i])]
    bar.close()
    mc_s = time.perf_counter() - t0
    k = max(range(len(chains)), key=lambda i: (max(curves[i]) - min(curves[i]), len(curves[i]), -i))
    ch, gold, cuts, v = chains[k], problems[k][1], boundaries(k), curves[k][:-1]
    xs, vs = cuts + [len(ch.response)], v + [float(correct[k])]
    # the elicited belief in the gold answer (as the task continues the suffix with it) and the JS score of each
    # boundary (fork-before)
    pool = picks["probe_js"][k].pool.positions
    belief = answer_belief(backend, ch.prompt, ch.response, cuts, scfg.suffix, session.gold_ids(problem_set[k]))
    js = [dict(zip(pool, picks["probe_js"][k].scores)).get(t, 0.0) for t in cuts]
    flips = {name: _flip_mass(xs, vs, picks[name][k].fork) for name in names}
    png = case_plot(
        cfg.out,
        xs,
        vs,
        {n: picks[n][k].fork for n in names},
        belief=belief + [math.nan],
        js=js + [0.0],
        chain_len=len(ch.response),
        captured=flips,
        title=f"chain {k}: {problems[k][0].strip()[:80]} (gold {gold_label(gold)}); "
        f"V* from {cfg.n_mc} completions per boundary",
    )
    total = time.perf_counter() - t_start
    console.print(
        f"V* of chain {k} (the one whose V* moves most) at t={xs}: {', '.join(f'{x:.2f}' for x in vs)} "
        f"({mc_s:.1f}s for {sum(len(c) - 1 for c in curves.values()) * cfg.n_mc} completions over {len(chains)} chains)"
    )
    best = max(names, key=lambda n: flips[n])
    console.print(
        "flip mass |ΔV*| of the segment each selector re-rolls: "
        + ", ".join(f"{n} {flips[n]:.2f}" for n in names)
        + f" (most: {best})"
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


def _chain_table(i: int, ch, names: list[str], picks: dict, read_s: dict, rollout_s: float):
    """Chain ``i``'s table: each selector's fork, its score there, the pool, the read tokens and time against the
    chain's rollout time."""
    from rich.table import Table

    table = Table(title=f"chain {i}: {len(ch.response)} tokens, rollout {1000 * rollout_s:.0f} ms")
    for col in ("selector", "fork t", "score", "pool", "read tokens", "read ms", "read/rollout"):
        table.add_column(col, justify="left" if col == "selector" else "right")
    for name in names:
        c = picks[name][i]
        if c.fork is None:
            table.add_row(name, "unforkable", "", "0", "0", "", "")
            continue
        j = c.pool.positions.index(c.fork) if c.fork in c.pool.positions else None
        score = c.scores[j] if j is not None and c.scores and not math.isnan(c.scores[j]) else float("nan")
        fork = f"{c.fork}*" if c.fallback else str(c.fork)
        table.add_row(
            name,
            fork,
            "" if math.isnan(score) else f"{score:.4f}",
            str(len(c.pool.positions)),
            str(c.token_forwards),
            f"{1000 * read_s[name][i]:.1f}",
            f"{read_s[name][i] / rollout_s:.3f}",
        )
    return table


def _flip_mass(xs: list[int], vs: list[float], fork: int | None) -> float:
    """|ΔV*| across the segment a fork at ``fork`` re-rolls: from the boundary at or before it to the next one."""
    if fork is None:
        return 0.0
    j = max(i for i, x in enumerate(xs) if x <= fork) if any(x <= fork for x in xs) else 0
    return abs(vs[min(j + 1, len(vs) - 1)] - vs[j])
