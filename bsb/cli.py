"""The ``bsb`` command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _judge(args: argparse.Namespace) -> dict:
    return dict(judge_url=args.judge_url, judge_model=args.judge_model, judge_endpoint=args.judge_endpoint, judge_key_env=args.judge_key_env,
                judge_template=args.judge_template)


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.demo import DemoConfig, run_demo

    if args.chains < 1 or args.max_response < 8 or args.n_mc < 1 or args.temperature <= 0:
        parser.error("--chains and --n-mc must be >= 1, --max-response >= 8 and --temperature > 0")
    if args.model != "embedded" and args.problems is None:
        parser.error("a model other than the embedded default needs a problem file: bsb demo MODEL PROBLEMS")
    try:
        cfg = DemoConfig(model=args.model, problems=args.problems, task=args.task, task_options=_task_options(args.task_option, parser),
                         prompt_format=args.prompt_format, device=args.device, dtype=args.dtype, **_judge(args),
                         n_problems=args.chains, max_response=args.max_response, n_mc=args.n_mc, temperature=args.temperature, seed=args.seed,
                         out=args.out, quick=args.quick)
    except ValueError as err:
        parser.error(str(err))
    if args.quick:
        cfg.n_problems, cfg.n_mc, cfg.max_response = min(cfg.n_problems, 2), min(cfg.n_mc, 2), min(cfg.max_response, 64)
    run_demo(cfg)
    return 0


def _train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.train.config import TrainConfig, parse_overrides
    from bsb.train.trainer import Trainer

    try:  # a config or a model that cannot run is a usage error, reported in one line
        data = TrainConfig.from_yaml(args.config).to_dict() if args.config else {}
        trainer = Trainer(TrainConfig.from_dict(parse_overrides(args.set, data)), resume=not args.no_resume)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    rows = trainer.run()
    vals = [(r["step"], r["val_accuracy"]) for r in rows if "val_accuracy" in r]
    print(f"held-out accuracy by step: {', '.join(f'{s}: {a:.3f}' for s, a in vals)}")
    print(f"metrics: {trainer.out / 'metrics.jsonl'}; final model: {trainer.out / 'final'}")
    return 0


def _validate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.eval.validate import ValidateConfig, run_validate

    try:
        b = args.b if args.b is not None else (3 if args.model == "embedded" else 10)
        cfg = ValidateConfig(model=args.model, problems=args.problems, n_problems=args.n_problems, m=args.m, n_mc=args.n_mc, b=b,
                             temperature=args.temperature, max_response=args.max_response, seed=args.seed, out_dir=args.out,
                             backend=args.backend, bsv_path=args.bsv, read_len=args.read_len, task=args.task, prompt_format=args.prompt_format,
                             device=args.device, dtype=args.dtype, **_judge(args),
                             task_options=_task_options(args.task_option, parser), **({"selectors": tuple(args.selectors)} if args.selectors else {}))
    except ValueError as err:
        parser.error(str(err))
    result = run_validate(cfg)
    if not result["ranking"]:
        print("every V* curve was flat: no selector can be scored (more problems, or a model that solves some of them)")
        return 0
    first = result["ranking"][0]
    print(f"ranks first: {first} (mean E {result['mean_error'][first]:.3f}; oracle floor {result['floor']:.3f})")
    return 0


def _evaluate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.eval.evaluate import EvaluateConfig, run_evaluate

    if args.k < 1 or args.n_problems < 1:
        parser.error("--k and --n-problems must be >= 1")
    cfg = EvaluateConfig(model=args.model, problems=args.problems, n_problems=args.n_problems, k=args.k, temperature=args.temperature,
                         max_response=args.max_response, seed=args.seed, out_dir=args.out, budget=args.budget, task=args.task,
                         prompt_format=args.prompt_format, device=args.device, dtype=args.dtype,
                         task_options=_task_options(args.task_option, parser))
    run_evaluate(cfg)
    return 0


def _cost(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.engine.cost import StepShape
    from bsb.eval.overhead import cost_report

    try:
        shape = None
        if args.mean_chain_len is not None:
            shape = StepShape(mean_chain_len=args.mean_chain_len, train_tokens=args.train_tokens, prompts=args.prompts, chains=args.chains,
                              siblings=args.siblings, candidates=args.candidates, suffix_len=args.suffix_len, read_len=args.read_len)
        cost_report(shape, args.metrics)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    return 0


def _data(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.tasks.math.report import data_report

    tok = None
    if args.model:
        import transformers

        from bsb.embedded.model import resolve_model

        tok = transformers.AutoTokenizer.from_pretrained(resolve_model(args.model))
    if args.prompt_format == "chat" and tok is None:
        parser.error("--prompt-format chat renders through a tokenizer's chat template: pass --model PATH")
    try:
        data_report(args.file, args.format, args.rows, tok, args.prompt_format, args.choice_seed)
    except (ValueError, FileNotFoundError, ImportError) as err:
        parser.error(str(err))
    return 0


def _sweep(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.eval.sweep import execute, plan, summarize
    from bsb.train.config import parse_overrides

    try:  # everything is checked before anything trains
        runs = plan(args.configs, args.seeds, args.out, parse_overrides(args.set))
        names = list(dict.fromkeys(r.name for r in runs))
        if args.reference is not None and args.reference not in names:
            raise ValueError(f"--reference {args.reference!r} is none of the sweep's configs: {', '.join(names)}")
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    if not args.summarize_only:
        execute(runs)
    try:
        result = summarize(runs, args.out, args.reference)
    except ValueError as err:
        parser.error(str(err))
    print(result["table"])
    print(f"table: {Path(args.out) / 'table.md'}; figure: {Path(args.out) / 'curves.png'}")
    return 0


def _task_options(pairs: list[str], parser: argparse.ArgumentParser) -> dict | None:
    from bsb.train.config import parse_overrides

    try:
        return parse_overrides(pairs) if pairs else None
    except ValueError as err:
        parser.error(str(err))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bsb", description="Belief-shift branching for tree-structured RLVR")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="every selector on sampled chains, read costs, and a V* case plot (embedded default)")
    demo.add_argument("model", nargs="?", default="embedded", help="a local Hugging Face model directory (default: the embedded tiny model)")
    demo.add_argument("problems", nargs="?", default=None, help="a JSONL/Parquet problem file (default: the task's synthetic problems)")
    demo.add_argument("--chains", type=int, default=4, help="chains to sample, one per problem")
    demo.add_argument("--max-response", type=int, default=160, help="response token cap")
    demo.add_argument("--n-mc", type=int, default=8, help="completions per boundary for the value curve V*")
    demo.add_argument("--temperature", type=float, default=1.0, help="chain and completion sampling temperature (the RL rollouts')")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--out", default="bsb_demo.png", help="where the figure goes")
    demo.add_argument("--quick", action="store_true", help="a test-size model and tiny budgets: checks the pipeline in seconds")
    from bsb.train.config import TrainConfig

    train = sub.add_parser("train", help="tree RLVR training (vLLM rollouts when installed)", formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="config fields (set in YAML with --config, or with --set FIELD=VALUE; task_options.NAME=VALUE sets one "
                                  "task option):\n" + TrainConfig.help_text())
    train.add_argument("--config", help="YAML file of TrainConfig fields (see bsb/train/config.py)")
    train.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="override config fields, e.g. --set selector=entropy steps=20")
    train.add_argument("--no-resume", action="store_true", help="start over even if out_dir holds a checkpoint")
    val = sub.add_parser("validate", help="pre-RL validation: selectors' top-B boundaries against Monte-Carlo V* curves")
    val.add_argument("model", nargs="?", default="embedded", help="a local HF model directory (default: the embedded tiny model)")
    val.add_argument("problems", nargs="?", default=None, help="a JSONL/Parquet problem file (default: synthetic arithmetic)")
    val.add_argument("--n-problems", type=int, default=24)
    val.add_argument("--m", type=int, default=128, help="candidate boundaries per chain")
    val.add_argument("--n-mc", type=int, default=16, help="completions per boundary")
    val.add_argument("--b", type=int, default=None,
                     help="boundaries each selector keeps (default 10 as in the paper; 3 on the embedded default, whose chains have about 8)")
    val.add_argument("--temperature", type=float, default=0.7)
    val.add_argument("--max-response", type=int, default=160)
    val.add_argument("--selectors", nargs="*", help="selectors to rank (default: every boundary selector)")
    val.add_argument("--bsv", help="a fitted BSV direction file (adds the bsv selector)")
    val.add_argument("--read-len", type=int, default=None, help="Probe-JS read positions L (default: the task's; 1 for math)")
    val.add_argument("--backend", default="auto", choices=("auto", "hf", "vllm"), help="completions through vLLM (auto: when installed)")
    val.add_argument("--seed", type=int, default=0)
    val.add_argument("--out", default="runs/validate", help="output directory (rerun with the same one to resume)")
    ev = sub.add_parser("evaluate", help="test-time voting (k=3) and native branching rules with bootstrap CIs")
    ev.add_argument("model", nargs="?", default="embedded")
    ev.add_argument("problems", nargs="?", default=None)
    ev.add_argument("--n-problems", type=int, default=64)
    ev.add_argument("--k", type=int, default=3)
    ev.add_argument("--temperature", type=float, default=0.6)
    ev.add_argument("--max-response", type=int, default=160)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--out", default="runs/evaluate")
    ev.add_argument("--budget", default="exact", choices=("exact", "eff_cap"),
                    help="branch continuations' cap: exact, or seed 001's batched per-row eff_cap")
    for p in (demo, val):
        p.add_argument("--judge-url", help="an OpenAI-compatible endpoint for the llm_judge baseline (or 'local' with a checkpoint path as --judge-model)")
        p.add_argument("--judge-model", help="the judge's model name at --judge-url")
        p.add_argument("--judge-endpoint", default="chat", choices=("chat", "completions"))
        p.add_argument("--judge-key-env", default="BSB_JUDGE_API_KEY", help="environment variable holding the judge's API key")
        p.add_argument("--judge-template", help="a judge prompt template file (default: bsb/engine/judge_prompt.txt)")
    for p in (demo, val, ev):
        p.add_argument("--device", default="auto", help="auto (CUDA when present) | cpu | cuda | cuda:N")
        p.add_argument("--dtype", default="auto", help="auto (bf16 on a GPU, fp32 on the CPU) | bfloat16 | float16 | float32")
        p.add_argument("--prompt-format", default="plain", choices=("plain", "chat"), help="plain text, or the tokenizer's chat template")
        p.add_argument("--task", default=None, help="arith | math | package.module:Class (default: math with a problem file, else arith)")
        p.add_argument("--task-option", nargs="*", default=[], metavar="NAME=VALUE", help="task options, e.g. --task-option ops=[2,3] gate_chars=30")
    cst = sub.add_parser("cost", help="probe FLOP overhead: the paper's arms (App. B), your step shape, a run's measured shares")
    cst.add_argument("--metrics", help="a run's metrics.jsonl: print its measured shares beside the analytical ones")
    cst.add_argument("--mean-chain-len", type=float, help="T̄ of your shape (adds a row)")
    cst.add_argument("--train-tokens", type=float, default=0.0, help="T_train, tokens trained per step")
    cst.add_argument("--prompts", type=int, default=32, help="P_gen")
    cst.add_argument("--chains", type=int, default=4, help="M")
    cst.add_argument("--siblings", type=int, default=2, help="k")
    cst.add_argument("--candidates", type=int, default=16, help="C")
    cst.add_argument("--suffix-len", type=int, default=9, help="E, suffix tokens")
    cst.add_argument("--read-len", type=int, default=1, help="L")
    from bsb.tasks.data.schemas import SCHEMAS

    dat = sub.add_parser("data", help="check a problem file: its schema, row count and first rows as the model sees them")
    dat.add_argument("file", help="a JSONL / JSON / Parquet / CSV problem file")
    dat.add_argument("--format", choices=list(SCHEMAS), help="name the schema (default: recognised from the columns)")
    dat.add_argument("--rows", type=int, default=3, help="rows to show")
    dat.add_argument("--model", help="a local model directory whose tokenizer renders the prompts (needed for --prompt-format chat)")
    dat.add_argument("--prompt-format", default="plain", choices=("plain", "chat"))
    dat.add_argument("--choice-seed", type=int, default=0, help="the seed of multiple-choice option orders")
    swp = sub.add_parser("sweep", help="several configs x seeds, each in its own process and folder (resumable); one table and figure")
    swp.add_argument("configs", nargs="+", help="YAML configs (bsb train --config files); each run is named after its file")
    swp.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    swp.add_argument("--out", default="runs/sweep", help="one folder per run inside, plus table.md and curves.png")
    swp.add_argument("--reference", help="the config the others are compared with (default: the first)")
    swp.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="overrides applied to every config")
    swp.add_argument("--summarize-only", action="store_true", help="write the table and figure from finished runs, train nothing")
    args = parser.parse_args(argv)
    commands = {"demo": _demo, "train": _train, "validate": _validate, "evaluate": _evaluate, "cost": _cost, "data": _data, "sweep": _sweep}
    return commands[args.command](args, parser)


if __name__ == "__main__":
    sys.exit(main())
