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

Lag diagnostic (:mod:`bsb.eval.lag`): each score, and the probe belief's own moves, correlated with the value jumps at
lags -2..+2.

Outputs in ``out_dir``: ``chains.jsonl`` (the sampled chains), ``completions.jsonl`` (every finished
completion), ``curves.jsonl`` (per problem: cuts, V*, every selector's scores, top-B and error: enough to
re-score new selectors without re-sampling; each selector's read token-forwards and seconds too), ``reads.jsonl``
(each selector's read of each chain, kept as it is done: :mod:`bsb.eval.read_store`), ``table.md`` (the selectors'
table, the fork contrast, the reads' cost against the chains' sampling and the lag diagnostic), ``lag.json`` (every
score's lag profile), ``contrast.png`` (the fork contrast by Probe-JS tercile, given three forks it scored); when
some V* curve is not flat, ``bars.png`` (Figure 3 style), ``lag.png`` and ``case_*.png`` (Figure 1 style). The
summaries and tables are :mod:`bsb.eval.validation` and :mod:`bsb.eval.validation_report`; this module loads and
writes.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bsb.commands.flags import command_parser, from_args
from bsb.engine.backend import BACKEND_NAMES
from bsb.engine.boundaries import candidate_pool
from bsb.engine.bsv import BSVDirection, task_direction
from bsb.engine.device import check_dtype_name, resolve_dtype
from bsb.engine.rollout_engine import (
    DeferredEngine,
    engine_max_len,
    make_rollout_backend,
    model_positions,
    rollout_choice,
    wave_kv_cache_gib,
)
from bsb.engine.selectors import SELECTORS, make_selector
from bsb.eval.contrast import fork_contrast
from bsb.eval.figures import contrast_plot
from bsb.eval.flip_mass import flip_mass
from bsb.eval.read_store import ReadStore
from bsb.eval.resolution import (
    resolution_line,
    resolution_warning,
    split_half_line,
    split_half_oracle,
    split_half_warning,
    step_resolution,
)
from bsb.eval.session import OfflineConfig, gold_label, jsonable, judge_client, open_session
from bsb.eval.validation import curve_row, gold_beliefs, lag_profiles, moving_most, summarize
from bsb.eval.value_curve import SEEDINGS, CompletionStore, mc_values
from bsb.fields import MAX_COUNT
from bsb.fields import help_field as _f
from bsb.run_storage import write_whole

PROMPT_ROOM = 1024  # prompt tokens the completion engine leaves room for (the tasks' prompts are far shorter)
HELP = "pre-RL validation: selectors' top-B boundaries against Monte-Carlo V* curves"
# every trainable selector that ranks boundaries and needs nothing beyond the probe options (bsv and llm_judge join
# when a direction or a judge is given)
DEFAULT_SELECTORS = tuple(n for n, c in SELECTORS.items() if c.trainable and c.ranks_boundaries and not c.needs_config)


# SelectorConfig fields a selector may need (its needs_config) -> the ValidateConfig field that supplies it, and the fix
NEEDS = {
    "bsv_path": ("bsv_path", "a direction: --bsv FILE (fitted with bsb.engine.bsv.fit_bsv) or --bsv-cross-fit"),
    "judge": ("judge_url", "a judge: --judge-url URL --judge-model NAME (or --judge-url local)"),
}


@dataclass
class ValidateConfig(OfflineConfig):
    n_problems: int = _f(24, "problems (one sampled chain each)", ge=1, size_limit=MAX_COUNT)
    chains_per_problem: int = _f(
        1,
        "chains sampled per problem, each with its own V* curve (the intervals resample problems, a problem's chains "
        "together)",
        ge=1,
        size_limit=MAX_COUNT,
    )
    pass_band: tuple[float, ...] = _f(
        (),
        "LO HI: keep only problems whose pass rate at --temperature lies in [LO, HI] (e.g. 0.2 0.8), each estimated "
        "from --screen-samples completions of its prompt, the first --n-problems of --screen-problems candidates",
        nargs=2,
    )
    screen_problems: int | None = _f(
        None, "candidates --pass-band screens (default 8 x --n-problems)", ge=1, size_limit=MAX_COUNT
    )
    screen_samples: int = _f(8, "completions that estimate a candidate's pass rate", ge=1, size_limit=MAX_COUNT)
    selectors: tuple[str, ...] = _f(DEFAULT_SELECTORS, "selectors to rank (default: every boundary selector)")
    bsv_path: str | None = _f(None, "a fitted BSV direction file (adds the bsv selector)", flag="--bsv")
    bsv_cross_fit: bool = _f(
        False,
        "add bsv fitted on this run's own V* curves (segments that raise, keep or drop V*), two folds by problem, "
        "each chain ranked by the direction fitted on the other fold's chains (bsb.eval.bsv_crossfit)",
    )
    task_bsv: bool = _f(
        True,
        "a task that drafts BSV continuations (walk) adds bsv, its direction fitted once and cached with the model",
    )
    temperature: float = _f(0.7, "chain and completion sampling temperature", ge=0)
    max_response: int = _f(256, "response token cap", size_limit=MAX_COUNT)
    m: int = _f(128, "candidate boundaries per chain", ge=1, size_limit=MAX_COUNT)
    n_mc: int = _f(16, "completions per boundary", ge=1, size_limit=MAX_COUNT)
    b: int | None = _f(
        None,
        "boundaries each selector keeps (default 10 as in the paper; 3 on the embedded default)",
        ge=1,
        size_limit=MAX_COUNT,
    )
    b_ratio: float | None = _f(
        None, "keep this share of each chain's boundaries instead of --b (the paper: B/m = 10/128 ≈ 0.08)", gt=0, le=1
    )
    seed: int = _f(0, "seed of the problems, chains and completions")
    out_dir: str = _f(
        "runs/validate",
        "where table.md, curves.jsonl and the figures go (rerun to resume)",
        flag="--out",
        path="folder",
    )
    backend: str = _f("auto", "completions through vLLM (auto: when installed) or the HF model", choices=BACKEND_NAMES)
    engine_dtype: str | None = _f(
        None,
        "the vLLM engine's dtype (screening, chains and V* completions; default --dtype); the reads stay in --dtype. "
        "bfloat16 halves the sampling on a CPU with AVX512-BF16",
    )
    engine_batch_tokens: int | None = _f(
        None,
        "prompt tokens the vLLM CPU engine takes in one scheduler step (default: the larger of 8,192 and the model "
        "length); a generation call goes in waves whose prompts fit one step, so more fit a wave; the KV cache is "
        "sized so that no sequence is preempted. Measured with 65,536 on Qwen2.5-Coder-0.5B's code chains: 1.13-1.36x "
        "the tokens a second of V* completions (two runs of bench/vllm_waves.py), for about 100 s more at engine start",
        ge=1,
        size_limit=MAX_COUNT,
    )
    case_plots: int = _f(3, "Figure-1 style case plots of the chains whose V* moves most", size_limit=MAX_COUNT)
    batch_size: int = _f(64, "completions per generation call", size_limit=MAX_COUNT)
    progress: bool = _f(True, "progress bars", cli=False)

    def __post_init__(self):
        super().__post_init__()
        self.pass_band = tuple(self.pass_band)
        if self.pass_band and not (len(self.pass_band) == 2 and 0 <= self.pass_band[0] <= self.pass_band[1] <= 1):
            raise ValueError(f"--pass-band takes LO HI with 0 <= LO <= HI <= 1, got {list(self.pass_band)}")
        if self.b is None:
            self.b = 3 if self.model == "embedded" else 10
        if self.engine_dtype is not None:
            check_dtype_name(self.engine_dtype)
            if self.backend == "hf":
                raise ValueError("--engine-dtype sets the vLLM engine's dtype; the HF backend samples with --dtype")
        if self.engine_batch_tokens is not None and self.backend == "hf":
            raise ValueError("--engine-batch-tokens sets the vLLM engine's step; the HF backend has none")
        if self.bsv_path is not None and self.bsv_cross_fit:
            raise ValueError("--bsv and --bsv-cross-fit each give bsv its direction: pass one of them")
        if self.bsv_path is not None:
            BSVDirection.load(self.bsv_path)  # a file that is not a direction: one error before any model loads
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
                if need in NEEDS and not self._has(need):
                    raise ValueError(f"the {s} selector needs {NEEDS[need][1]}")
        # ... and what this config supplies adds the selectors that need it (a direction adds bsv, a judge llm_judge)
        self.selectors += tuple(
            n for n, cls in SELECTORS.items() if cls.needs_config and n not in self.selectors and self._supplies(cls)
        )

    def chain_b(self, boundaries: int) -> int:
        """B of a chain with ``boundaries`` candidates: --b, or --b-ratio of them (at least 1)."""
        return self.b if self.b_ratio is None else max(1, round(self.b_ratio * boundaries))

    def _supplies(self, cls) -> bool:
        return all(need not in NEEDS or self._has(need) for need in cls.needs_config)

    def _has(self, need: str) -> bool:
        return bool(getattr(self, NEEDS[need][0]) or (need == "bsv_path" and self.bsv_cross_fit))


def add_parser(sub) -> argparse.ArgumentParser:
    return command_parser(sub, "validate", HELP, ValidateConfig)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        result = run_validate(from_args(ValidateConfig, args, parser))
    except ValueError as err:  # a screen that finds no problem at the model's level, a damaged screen.jsonl
        parser.error(str(err))
    if not result["ranking"]:
        print("every V* curve was flat: no selector can be scored (more problems, or a model that solves some of them)")
        return 0
    first = result["ranking"][0]
    print(f"ranks first: {first} (mean E {result['mean_error'][first]:.3f}; oracle floor {result['floor']:.3f})")
    return 0


def _screen(cfg: ValidateConfig, gen, session, out: Path, console) -> None:
    """Keep the first ``n_problems`` of the session's candidates whose pass rate lies in ``pass_band``
    (:mod:`bsb.eval.screen`); rates already in ``screen.jsonl`` are read, not sampled again, and screening stops
    once enough problems are in the band."""
    from tqdm import tqdm

    from bsb.eval.screen import in_band, pass_rates, read_screen

    path, k = out / "screen.jsonl", cfg.screen_samples
    done = read_screen(path, k)

    def kept() -> list[int]:
        return [i for i, p in enumerate(session.problems) if p.id in done and in_band(done[p.id], k, cfg.pass_band)]

    todo = [i for i, p in enumerate(session.problems) if p.id not in done]
    bar = tqdm(
        total=len(session.problems),
        initial=len(session.problems) - len(todo),
        desc="screening pass rates",
        disable=not cfg.progress,
    )
    for start in range(0, len(todo), 16):
        if len(kept()) >= cfg.n_problems:
            break
        chunk = todo[start : start + 16]
        got = pass_rates(gen, session, chunk, k, cfg.temperature, cfg.max_response, cfg.seed)
        with path.open("a") as f:
            for i, correct in got.items():
                done[session.problems[i].id] = correct
                f.write(json.dumps({"id": session.problems[i].id, "correct": correct, "samples": k}) + "\n")
        bar.update(len(chunk))
    bar.close()
    chosen = kept()[: cfg.n_problems]
    rates = [done[p.id] / k for p in session.problems if p.id in done]
    lo, hi = cfg.pass_band
    console.print(
        f"screened {len(rates)} problems ({k} completions each, T {cfg.temperature}): mean pass rate "
        f"{sum(rates) / max(1, len(rates)):.2f}, {sum(r == 0 for r in rates)} never solved, "
        f"{sum(r == 1 for r in rates)} always; {len(chosen)} in [{lo:g}, {hi:g}] kept"
    )
    if len(chosen) < cfg.n_problems:
        console.print(
            f"[yellow]only {len(chosen)} of the {cfg.n_problems} problems asked are in the band: more "
            "--screen-problems, a wider --pass-band, or an easier dataset[/yellow]"
        )
    if not chosen:
        raise ValueError(f"no screened problem has a pass rate in [{lo:g}, {hi:g}]")
    session.problems = [session.problems[i] for i in chosen]
    session.prompts = [session.prompts[i] for i in chosen]


def _engine_step(cfg: ValidateConfig, config, max_len: int, dtype, device) -> dict:
    """The engine's step budget and, on the CPU, a KV cache that holds a full wave of it (:func:`wave_kv_cache_gib`;
    a GPU engine chunks its prefills and sizes its own cache); empty without ``--engine-batch-tokens``."""
    if cfg.engine_batch_tokens is None:
        return {}
    if device.type != "cpu":
        return {"max_num_batched_tokens": cfg.engine_batch_tokens}
    try:
        kv = wave_kv_cache_gib(config, cfg.engine_batch_tokens, max_len, cfg.max_response, dtype)
    except ValueError as err:
        raise ValueError(f"--engine-batch-tokens: {err}") from None
    return {"max_num_batched_tokens": cfg.engine_batch_tokens, "kv_cache_gib": kv}


def _check_sampling(cfg: ValidateConfig, session, engine: str, dtype, out: Path) -> str:
    """The settings that shape what a run samples, kept in ``sampling.json`` by its first call: a rerun on the same
    ``out`` with other settings is an error naming them (its screen, chains and completions would mix two samplers).
    A folder without the record (an older run's) takes the current settings. Returns how the run's V* completions are
    seeded (``mc_values``' ``seeding``): ``per-draw`` for a new run, ``offset`` for one whose record predates the
    ``seeding`` key (2026-12-07), so that a resumed run keeps the seeds it began with."""
    now = {
        "model": cfg.model,
        "task": session.task.name,
        "task_options": cfg.task_options,
        "prompt_format": cfg.prompt_format,
        "prompt_template": cfg.prompt_template,
        "system_prompt": cfg.system_prompt,
        "chat_template_kwargs": cfg.chat_template_kwargs,
        "temperature": cfg.temperature,
        "max_response": cfg.max_response,
        "seed": cfg.seed,
        "engine": engine,
        "engine_dtype": str(dtype).removeprefix("torch."),
    }
    now = json.loads(json.dumps(now, default=jsonable))
    path = out / "sampling.json"
    if not path.exists():
        write_whole(path, json.dumps({**now, "seeding": SEEDINGS[0]}, indent=1) + "\n")
        return SEEDINGS[0]
    try:
        was = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a sampling record ({err})") from None
    if not isinstance(was, dict):
        raise ValueError(f"{path}: not a sampling record (a JSON object)")
    changed = [f"{k} {was[k]!r} then, {v!r} now" for k, v in now.items() if k in was and was[k] != v]
    if changed:
        raise ValueError(
            f"{out} was sampled with other settings ({'; '.join(changed)}): a rerun there would mix two samplers' "
            "chains and completions; use another --out"
        )
    seeding = was.get("seeding", "offset")
    if seeding not in SEEDINGS:
        raise ValueError(f"{path}: seeding {seeding!r} is not one of {', '.join(SEEDINGS)}")
    return seeding


def _offset_draws(out: Path, store: CompletionStore, n_mc: int) -> int:
    """How many draws a boundary an offset-seeded run began with, kept in its ``sampling.json`` (``offset_draws``)
    the first time a run goes on from it: then its store holds nothing but the draws it began with, and a chain's
    first call covers every draw of its first boundaries (``n_mc`` if it holds none). Draws past them are seeded by
    draw (:func:`~bsb.eval.value_curve.mc_values`), however often the extension is stopped and resumed."""
    path = out / "sampling.json"
    was = json.loads(path.read_text())
    began = was.get("offset_draws")
    if began is None:
        began = 1 + max((j for _, _, j in store.done), default=n_mc - 1)
        write_whole(path, json.dumps({**was, "offset_draws": began}, indent=1) + "\n")
    if type(began) is not int or began < 1:
        raise ValueError(f"{path}: offset_draws {began!r} is not a count of draws")
    return began


def _sample_chains(cfg: ValidateConfig, gen, session, out: Path) -> dict[str, list[int]]:
    """One chain per problem, by problem id: read from ``chains.jsonl`` when a run already sampled it, else sampled and
    appended there (a rerun resumes). Problem ``i`` is sampled with seed ``seed + i`` whichever run samples it, so
    a resumed or extended run draws the chains an uninterrupted one would (not the first rows' seeds again)."""
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
            seed=[cfg.seed + i for i in missing],
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


def _value_curves(cfg: ValidateConfig, session, gen, saved: dict, store, seeding: str) -> tuple[list[tuple], int]:
    """``(i, cuts, V*)`` of every chain with a newline boundary (their completions streamed to and resumed from
    ``store``), and how many chains had none."""
    from tqdm import tqdm

    todo = []
    for i, p in enumerate(session.problems):
        pool = candidate_pool(saved[p.id], session.newline, cfg.m, 1.0, 1)
        if pool.kind == "newline":
            todo.append((i, pool.positions))
    ids = {session.problems[i].id for i, _ in todo}
    bar = tqdm(
        total=sum(len(c) for _, c in todo) * cfg.n_mc,
        initial=sum(1 for (c, _, _) in store.done if c in ids),
        desc="V* completions",
        disable=not cfg.progress,
    )
    # an offset-seeded run extended past the draws it began with: those draws keep their offsets, the new ones are
    # seeded by draw (the offsets would give a new draw its old sibling's seed on the same prefix: a copy)
    began = _offset_draws(Path(cfg.out_dir), store, cfg.n_mc) if seeding == "offset" else None
    values = []
    for i, cuts in todo:
        p, resp = session.problems[i], saved[session.problems[i].id]

        def grade(tokens, problem=p):
            verdict = session.task.verify(session.decode(tokens), problem)
            return verdict.correct, verdict.answer

        v = mc_values(
            gen,
            session.prompts[i],
            resp,
            cuts,
            cfg.n_mc,
            grade,
            cfg.max_response,
            session.eos,
            temperature=cfg.temperature,
            seed=cfg.seed + 7 * i if seeding == "offset" else cfg.seed,  # the chain's seed, or the run's (draw_seed)
            batch_size=cfg.batch_size,
            store=store,
            chain_id=p.id,
            progress=bar.update,
            seeding=seeding,
            offset_draws=began,
        )
        values.append((i, cuts, v))
    bar.close()
    return values, len(session.problems) - len(todo)


def _cross_fitted_bsv(session, saved: dict, values: list[tuple], scfg, out: Path, console) -> tuple[list | None, list]:
    """Each chain's bsv selector, its direction fitted on the other fold's V* curves (saved as ``bsv_fold*.pt``), and
    the table's notes: None and why, said on the console too, when a fold has too few moving chains to fit on."""
    from bsb.engine.selectors import BSV
    from bsb.eval.bsv_crossfit import CurveChain, cross_fit

    chains = [
        CurveChain(session.problems[i].prompt, session.prompts[i], saved[session.problems[i].id], cuts, v)
        for i, cuts, v in values
    ]
    for stale in out.glob("bsv_fold*.pt"):  # an earlier run's directions: never left beside this run's table
        stale.unlink()
    try:
        fit = cross_fit(session.hf.model, chains)
    except ValueError as err:
        console.print(f"[yellow]bsv is not scored: {err}[/yellow]")
        return None, [f"bsv (--bsv-cross-fit) is not scored: {err}"]
    for k, d in fit.directions.items():
        d.save(out / f"bsv_fold{k}.pt")
        seg = ", ".join(f"{n} {g}" for g, n in fit.counts[k].items())
        console.print(f"bsv for fold {k}: layer {d.layer}, fitted on the other fold's segments ({seg})")
    selectors = {k: BSV(scfg, direction=d) for k, d in fit.directions.items()}
    return [selectors[f] for f in fit.fold_of], []


# ValidateConfig fields that shape what is sampled, ranked or written but not how a selector reads a given chain
NOT_READS = frozenset(
    ("out_dir", "progress", "case_plots", "batch_size", "backend", "engine_dtype", "engine_batch_tokens", "n_problems",
     "chains_per_problem", "pass_band", "screen_problems", "screen_samples", "selectors", "b", "b_ratio", "n_mc",
     "bsv_cross_fit", "task_bsv")
)  # fmt: skip


def read_options(cfg: ValidateConfig, dtype=None, device=None, scfg=None) -> dict:
    """The settings a kept read depends on (:class:`~bsb.eval.read_store.ReadStore`): every field but those in
    :data:`NOT_READS`, so that a field added later counts until it is listed there, and what ``auto`` options and the
    task resolved to: the reading model's ``dtype`` and ``device`` type, the selector config's suffix ids and L."""
    options = {k: v for k, v in asdict(cfg).items() if k not in NOT_READS}
    resolved = {"suffix": list(scfg.suffix), "read_len": scfg.read_len} if scfg is not None else {}
    options["resolved"] = {"dtype": str(dtype), "device": str(device), **resolved}
    return json.loads(json.dumps(options, default=jsonable))


def run_validate(cfg: ValidateConfig, console=None) -> dict:
    from rich.console import Console
    from tqdm import tqdm

    from bsb.eval import validation_report as report

    console = console or Console()
    # explicit arith without options: problems of 2-4 operations (the arithmetic model's range)
    options = (
        cfg.task_options if cfg.task_options is not None else ({"ops": [2, 3, 4]} if cfg.task == "arith" else None)
    )
    candidates = (cfg.screen_problems or 8 * cfg.n_problems) if cfg.pass_band else cfg.n_problems
    session = open_session(cfg, candidates, cfg.seed, task_options=options)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bsv_path = cfg.bsv_path
    if bsv_path is None and cfg.task_bsv and not cfg.bsv_cross_fit:
        fitted = task_direction(session.path, session.task, session.model, session.tok)
        bsv_path = str(fitted) if fitted else None
    # completions through vLLM when installed; no probe room: the reads go through the HF model
    max_len = engine_max_len(PROMPT_ROOM, cfg.max_response, 0, 0)
    dtype = resolve_dtype(cfg.engine_dtype, session.hf.device) if cfg.engine_dtype else session.model.dtype
    engine_len = min(max_len, model_positions(session.model.config) or max_len)  # the engine's own cap
    step = _engine_step(cfg, session.model.config, engine_len, dtype, session.hf.device)
    engine = rollout_choice(cfg.backend, session.hf)
    if engine == "hf" and dtype != session.model.dtype:
        raise ValueError(f"--engine-dtype {cfg.engine_dtype} needs the vLLM engine; the HF backend samples here")
    if engine == "hf" and step:
        raise ValueError("--engine-batch-tokens sets the vLLM engine's step; the HF backend samples here")
    # the engine starts with the first sample still to draw: none on a rerun with everything sampled
    log_file = out / "vllm.log"
    gen = session.hf if engine == "hf" else DeferredEngine(
        lambda: make_rollout_backend("vllm", session.path, session.hf, max_len, cfg.seed, dtype=dtype,
                                     log_file=log_file, **step)
    )  # fmt: skip
    seeding = _check_sampling(cfg, session, engine, dtype, out)
    if cfg.pass_band:
        _screen(cfg, gen, session, out, console)  # problems at the model's level only
    if cfg.chains_per_problem > 1:
        session.problems = [
            replace(p, id=f"{p.id}#c{j}") for p in session.problems for j in range(cfg.chains_per_problem)
        ]
        session.prompts = [p for p in session.prompts for _ in range(cfg.chains_per_problem)]
    saved = _sample_chains(cfg, gen, session, out)  # sampled once, reused on resume
    store = CompletionStore(out / "completions.jsonl")
    judge = judge_client(cfg)
    scfg = session.selector_config(seed=cfg.seed, bsv_path=bsv_path, judge=judge, decode=session.decode)
    # the configured selectors, and those the task's own BSV direction now configures; every one reads through HF
    names = cfg.selectors + tuple(
        n for n, c in SELECTORS.items() if c.needs_config and n not in cfg.selectors and c.configured(scfg)
    )
    # with --bsv-cross-fit, bsv's direction comes from the V* curves themselves: one a fold
    selectors = {n: make_selector(n, scfg, session.hf) for n in names if not (cfg.bsv_cross_fit and n == "bsv")}
    values, skipped = _value_curves(cfg, session, gen, saved, store, seeding)
    if engine != "hf":  # every sample is drawn: a started engine's weights and KV cache go before the reads
        gen.close()
        gc.collect()
    bsv, notes = _cross_fitted_bsv(session, saved, values, scfg, out, console) if cfg.bsv_cross_fit else (None, [])
    kept = ReadStore(out / "reads.jsonl")  # each chain's reads kept as they are done: a rerun reads what is missing
    options = read_options(cfg, session.model.dtype, session.hf.device.type, scfg)
    curves = []
    for k, (i, cuts, v) in enumerate(tqdm(values, desc="selector reads", unit="chain", disable=not cfg.progress)):
        scored = selectors if bsv is None else {**selectors, "bsv": bsv[k]}
        resp, b = saved[session.problems[i].id], cfg.chain_b(len(cuts))
        kw = dict(b=b, n_mc=cfg.n_mc, seed=cfg.seed, kept=kept, read_options=options)
        curves.append(curve_row(session, i, resp, cuts, v, scored, store, **kw))
    (out / "curves.jsonl").write_text("".join(json.dumps(r, default=jsonable) + "\n" for r in curves))

    summary = summarize(curves, [n for n in names if n in selectors or (n == "bsv" and bsv is not None)])
    label = f"embedded default ({session.task.name})" if cfg.model == "embedded" else session.path.name
    b_text = f"B={cfg.b}" if cfg.b_ratio is None else f"B={cfg.b_ratio:g}·m"
    title = report.title(summary, label, b_text, cfg.n_mc, skipped)
    v_stars = [r["v_star"] for r in summary.live]
    resolution = [step_resolution(v_stars, cfg.n_mc, lag) for lag in (1, 2)] if cfg.n_mc > 1 else []
    split = split_half_oracle(summary.live, store.done, cfg.n_mc, seed=cfg.seed) if cfg.n_mc > 1 else None
    warned = [resolution_warning(resolution[0] if resolution else None), split_half_warning(split)]
    for warning in [*report.warnings(summary), *warned]:
        if warning:
            console.print(f"[yellow]{warning}[/yellow]")
    console.print(report.rich_table(summary, title))
    console.print(f"oracle floor (best E of any B points): {report.num(summary.floor)}")
    if judge is not None:
        console.print(f"llm_judge ({cfg.judge_model}): {judge.stats.summary()}")
    contrast = fork_contrast(curves)  # App. D
    console.print(report.contrast_line(contrast))
    if report.read_cost_line(summary):
        console.print(report.read_cost_line(summary))
    split_text = split_half_line(split)
    if "midpoint" not in names and summary.live and cfg.n_mc > 1:  # what the oracle is held against: said
        split_text = "Split-half oracle: not measured (it holds the oracle against Midpoint's points: add midpoint to "
        split_text += "--selectors)."
    measured = "\n".join(line for line in (resolution_line(resolution), split_text) if line)
    if measured:
        console.print(measured)
    # the lag diagnostic: every score, and the probe belief's own moves, against the value jumps
    beliefs = gold_beliefs(session, summary.live, scfg.suffix, kept, options)  # kept as the reads are
    lags = lag_profiles(summary.live, beliefs, summary.names, cfg.seed)
    console.print("\n".join(report.lag_rows(lags)))
    (out / "lag.json").write_text(json.dumps(lags, indent=1, default=jsonable) + "\n")
    (out / "table.md").write_text(report.markdown(summary, title, contrast, lags, notes, measured))
    if summary.live:
        _figures(out, summary, lags, beliefs, session, label, title, cfg.case_plots)
    (out / "contrast.png").unlink(missing_ok=True)  # an earlier run's figure is not this one's
    if "interval_by_js_tercile" in contrast:
        contrast_plot(out / "contrast.png", contrast, title=f"{label}: fork contrast over {contrast['pairs']} forks")
    files = "table.md, curves.jsonl, lag.json" + (", bars.png, lag.png, case_*.png" if summary.live else "")
    files += ", contrast.png" * ("interval_by_js_tercile" in contrast)
    flat = "" if summary.live else "; no figures: every V* curve is flat"
    console.print(f"wrote {files} in {out} (beside chains.jsonl, completions.jsonl and reads.jsonl{flat})")
    return {
        "mean_error": summary.mean_error,
        "sem": summary.sem,
        "floor": summary.floor,
        "ranking": summary.ranking,
        "non_flat": len(summary.live),
        "chains": summary.chains,
        "contrast": contrast,
        "completions": len(store),
        "b_over_m": summary.b_over_m,
        "lag": lags,
        "resolution": [asdict(r) for r in resolution if r is not None],
        "split_half": None if split is None else asdict(split),
    }


def case_names(ids: list[str]) -> list[str]:
    """The case plots' file names: ``case_<id>.png`` with every run of characters but letters, digits, ``_``, ``.``
    and ``-`` made one ``_`` (a problem id is the problem file's to choose: ``HumanEval/5#c0`` or ``../x`` stays one
    file in the run's folder, linkable from markdown), cut to 200 characters and a hash of the id where longer (a file
    name holds 255 bytes), and ``_2``, ``_3``... after a name already taken."""
    out, taken = [], set()
    for i in ids:
        stem = "case_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", str(i))
        if len(stem) > 200:
            stem = f"{stem[:200]}_{hashlib.sha256(str(i).encode()).hexdigest()[:12]}"
        name, k = f"{stem}.png", 1
        while name in taken:
            k += 1
            name = f"{stem}_{k}.png"
        taken.add(name)
        out.append(name)
    return out


def _figures(out: Path, summary, lags: dict, beliefs: dict, session, label: str, title: str, cases: int) -> None:
    """``lag.png``, ``bars.png`` (Figure 3 style) and the ``case_*.png`` (Figure 1 style) of the ``cases`` chains whose
    V* moves most, each with the top-1 forks of Probe-JS and entropy (else the first two selectors)."""
    from bsb.eval.figures import bar_chart, case_plot, lag_plot

    lag_plot(out / "lag.png", lags, title=f"{label}: lag of each score against the V* pivots")
    ylabel = "mean reconstruction error E (lower is better)"
    bar_chart(out / "bars.png", summary.mean_error, summary.sem, ylabel=ylabel, title=title, floor=summary.floor)
    two = [n for n in ("probe_js", "entropy") if n in summary.names] or summary.names[:2]
    gold = {}
    for p in session.problems:
        gold.setdefault(p.id, p.answer)
    rows = moving_most(summary.live, cases)
    for r, name in zip(rows, case_names([r["id"] for r in rows])):
        js = r["scores"].get("probe_js")
        case_plot(
            out / name,
            r["cuts"],
            r["v_star"],
            {n: r["cuts"][r["top_b"][n][0]] if r["top_b"][n] else None for n in two},
            belief=beliefs[r["id"]],
            js=[0.0 if x is None else x for x in js] if js else None,
            chain_len=len(r["response"]),
            captured={n: flip_mass(r["v_star"], r["top_b"][n]) for n in two},
            title=f"{r['prompt'].strip()[:80]} (gold {gold_label(gold[r['id']])}); top-1 forks; "
            f"flip mass of each top-{r['b']}",
        )
