"""The tree RLVR trainer: the loop, checkpoints and weight sync around the phases of :mod:`bsb.train.phases`.

One step (``Trainer.train_step``), each phase a function on plain data:

1. **draw** the task's problems for a generation round (``gen_prompts`` of them);
2. **generate trees**: [Fork]'s tree rollout with the selector's forks, [TwoStage]'s two-stage sampler, flat
   GRPO groups, or the flat warm-up before bifurcating (rollouts through vLLM when installed, else the HF model);
3. **score** every leaf with the task's verifier plus the overlong penalty;
4. **keep** the groups whose outcomes differ (dynamic sampling, up to ``max_gen_rounds`` rounds until
   ``prompts_per_step`` are kept);
5. **advantage rows**: TreeRL, GRPO or prefix credit per kept tree, one row per leaf;
6. **update**: the optimizer steps (policy in train mode; rows whose advantages are all zero are not
   back-propagated; a mini-batch with none takes the AdamW step on zero gradients, skips it, or runs the
   0-weighted backward, as ``homogeneous`` says). The PPO ratios are against the rollout policy;
7. **sync** the new weights into a running engine, then **metrics**.

Reproducible: every sampling stream derives from ``(seed, step, round, phase)`` (:mod:`bsb.train.seeds`), so a
resumed run draws the same data; checkpoints hold the model, optimizer, schedule, RNG states and the active-step
count, written atomically. Metrics go to ``out_dir/metrics.jsonl``, one JSON object per step (validation rows
carry ``"val_accuracy"``). Nothing here is specific to a domain: the task (:mod:`bsb.tasks`) owns problems,
prompts, the probe suffix, the committed answer and the verifier.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
import weakref
from collections import Counter
from pathlib import Path

import torch

from bsb.embedded.model import resolve_model
from bsb.engine.backend import capabilities
from bsb.engine.boundaries import newline_token_mask
from bsb.engine.device import check_colocation, resolve_device, resolve_dtype
from bsb.engine.probe import answer_tokens, resolve
from bsb.engine.selectors import SelectorConfig, check_against_model, make_selector
from bsb.tasks.base import Problem
from bsb.tasks.prompting import render_prompt
from bsb.tasks.registry import make_task
from bsb.train import phases
from bsb.train.config import TrainConfig, resume_changes
from bsb.train.distributed import close_world, init_world
from bsb.train.rewards import RewardConfig
from bsb.train.rollout import RolloutTimes
from bsb.train.run_folder import (
    BEST_NOTE,
    RunLock,
    best_weights,
    checkpoint_files,
    drop_weights_after,
    file_checksums,
    verify_checksums,
    weight_steps,
)
from bsb.train.seeds import VAL_SEED, stream
from bsb.train.sharding import (
    DCP_DIR,
    engine_weights,
    full_params,
    full_state_dict,
    load_full_optimizer,
    load_sharded,
    save_sharded,
    shard_policy,
)
from bsb.train.trackers import Trackers
from bsb.train.update import update_policy

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, cfg: TrainConfig, rollout_backend=None, resume: bool = True):
        """``rollout_backend``: an existing engine to generate with (e.g. one shared vLLM engine); by default one
        is built from ``cfg.backend``. ``resume``: continue from ``out_dir/checkpoint`` when it exists."""
        import transformers

        from bsb.engine.hf_backend import HFBackend

        self.cfg = cfg
        # The task first: an unknown task, a bad option or a malformed problem file fails before any model loads.
        self.task = make_task(cfg.task, cfg.task_options)
        self.val_problems = self.task.held_out(cfg.val_problems)
        self.held_out = {p.prompt for p in self.val_problems}
        self.device = resolve_device(cfg.device)  # CUDA asked for where there is none: an error before any model loads
        # under torchrun: the launch checked (an error on every rank), this rank's GPU, the process group
        self.world, self.device = init_world(cfg, self.device)
        self.dtype = resolve_dtype(cfg.dtype, self.device)
        self.out = Path(cfg.out_dir)
        self.ckpt = self.out / "checkpoint"
        self.lock = None
        if self.world.main:
            self.out.mkdir(parents=True, exist_ok=True)
            self.lock = RunLock(self.out)  # one trainer process a folder: a second is an error naming the first's pid
            weakref.finalize(self, self.lock.release)  # a trainer that fails to build lets the folder go
            recover_checkpoint(self.out)  # a crash inside save() must not turn into a silent restart at step 0
        self.world.barrier()
        resuming = resume and (self.ckpt / "state.json").exists()
        self.state = self._read_state() if resuming else None  # checked once, before any model loads
        if resuming:
            self._verify_checkpoint()  # every file as written: a flipped byte is an error, not silent training
        self.resumed_changes = self._check_resume() if resuming else {}
        self.sharded_ckpt = resuming and (self.ckpt / DCP_DIR).exists()
        if not self.world.main:
            self.world.barrier()  # rank 0 builds (or finds) the embedded model first: one writer of the cache
        self.model_path = resolve_model(cfg.model, self.task)
        if self.world.main:
            self.world.barrier()
        if self.device.type == "cuda" and cfg.backend != "hf":
            check_colocation(self.model_path, self.device, cfg.vllm_gpu_memory_utilization, self.world.size)
        load_from = self.ckpt / "model" if resuming and not self.sharded_ckpt else self.model_path
        self.tok = transformers.AutoTokenizer.from_pretrained(self.model_path)
        self._render(self.val_problems[0])  # a prompt format the tokenizer cannot render fails before the model loads
        torch.manual_seed(cfg.seed)
        # fp32 master weights on the device; forwards run under autocast in self.dtype (bsb.engine.device)
        self.policy = transformers.AutoModelForCausalLM.from_pretrained(load_from, dtype=torch.float32).to(self.device)
        if self.world.launched:  # FSDP2: per decoder layer and at the root, fp32 shards, mixed precision on CUDA
            shard_policy(self.policy, self.device, self.dtype, cfg.fsdp_cpu_offload, cfg.gradient_checkpointing)
        elif cfg.gradient_checkpointing:
            self.policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        compute = None if self.dtype == torch.float32 else self.dtype
        self.hf = HFBackend(
            self.policy, self.tok, compute_dtype=compute
        )  # reads, generation: eval mode; updates: train mode
        self.eos = self.tok.eos_token_id
        if self.eos is None:
            raise ValueError(f"tokenizer of {self.model_path} has no EOS token; rollouts could never end")
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eos
        self.newline = newline_token_mask(self.tok, self.hf.vocab_size)
        self.opt = torch.optim.AdamW(
            self.policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=self.device.type == "cuda"
        )
        warm = max(1, cfg.warmup_steps)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm))
        self.reward_cfg = RewardConfig(cfg.max_response_len, cfg.overlong_buffer, cfg.overlong_factor)
        check_against_model(cfg, self.hf.vocab_size, self.policy.config.num_hidden_layers)
        self.selector = make_selector(cfg.selector, self.selector_config())
        self.step, self.active_steps = 0, 0
        if resuming:
            self._load()
            self._apply_optimizer_changes()
        self.owns_backend = rollout_backend is None
        self.backend = rollout_backend if rollout_backend is not None else self._make_backend(load_from)
        self.syncs = capabilities(self.backend).weight_sync
        if self.syncs and (rollout_backend is not None or self.sharded_ckpt):
            self.backend.load_weights(self._engine_weights())  # a shared engine may hold other weights
        reads = self._reader()
        # sharded: forwards of the policy itself (HF rollouts, white-box reads) run on its gathered weights
        self.gathers = self.world.launched and (self.backend is self.hf or reads is self.hf)
        # reads on the policy that generates: from the keys and values its generation kept (only the suffixes computed)
        self.hf.keep_kv = reads is self.hf and self.backend is self.hf and self.selector.requires != ()
        self.selector.bind(reads)
        answers = answer_tokens(self.task, self.tok) if self.selector.needs_answer else None
        self.ctx = phases.RolloutContext(self.backend, reads, self.selector, self.newline, self.eos, answers)

    # ---------------------------------------------------------------- setup
    def _reader(self):
        """The backend the selector's reads go to. White-box reads (Lens-Shift) go to the HF policy whenever the engine
        cannot serve them; ``probe_reader`` chooses otherwise: ``auto`` reads on the policy beside a CPU vLLM engine
        (there a request costs about the same whatever its length, so a round's short probe requests cost more than
        grouped packed forwards of the policy; measured in docs/performance.md) and on the engine elsewhere."""
        engine_can = self.selector.can_read(self.backend)
        choice = self.cfg.probe_reader
        if choice == "auto":
            cpu_engine = self.backend is not self.hf and getattr(self.backend, "on_cpu", False)
            choice = "policy" if cpu_engine and self.selector.can_read(self.hf) else "engine"
        if choice == "policy" or not engine_can:
            return self.hf
        return self.backend

    def selector_config(self) -> SelectorConfig:
        return resolve(self.cfg, self.task, self.tok, seed=self.cfg.seed)

    def _make_backend(self, path: Path):
        from bsb.engine.vllm_backend import rollout_backend as make_backend

        cfg = self.cfg
        limit = getattr(self.policy.config, "max_position_embeddings", None)
        if limit and cfg.max_prompt_len + cfg.max_response_len > limit:
            raise ValueError(
                f"max_prompt_len + max_response_len = {cfg.max_prompt_len + cfg.max_response_len} exceeds the model's "
                f"{limit} positions"
            )
        # + room for a probe: the elicitation suffix and its read
        return make_backend(
            cfg.backend,
            path,
            self.hf,
            cfg.max_prompt_len + cfg.max_response_len + 64,
            cfg.seed,
            cfg.vllm_kv_cache_gib,
            self.dtype,
            cfg.vllm_gpu_memory_utilization,
            cfg.vllm_sleep,
        )

    def _render(self, problem: Problem) -> str:
        c = self.cfg
        return render_prompt(
            self.task, problem, self.tok, c.prompt_format, c.prompt_template, c.system_prompt, c.chat_template_kwargs
        )

    def _engine_weights(self):
        """The policy's weights in the engine's dtype (a bf16 engine gets half the bytes, and no per-tensor casts);
        sharded, gathered one tensor at a time as the engine loads them."""
        if self.world.launched:
            return engine_weights(self.policy, self.dtype)
        return {k: v.detach().to(self.dtype) for k, v in self.policy.state_dict().items()}

    def _rollout_weights(self):
        """Gather the sharded policy for a phase of its own forwards (a no-op unsharded or with an engine)."""
        return full_params(self.policy, self.gathers)

    def _encode(self, problem: Problem) -> list[int]:
        ids = self.tok.encode(self._render(problem), add_special_tokens=False)
        if not ids or len(ids) > self.cfg.max_prompt_len:
            raise ValueError(
                f"a prompt of {len(ids)} tokens does not fit max_prompt_len={self.cfg.max_prompt_len}: "
                f"{problem.prompt[:80]!r}"
            )
        return ids

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    # ---------------------------------------------------------------- one step
    def train_step(self) -> dict:
        cfg, step = self.cfg, self.step
        t0 = time.perf_counter()
        kind = phases.rollout_kind(cfg, self.active_steps)
        generated, kept, reasons = [], [], Counter()
        total = phases.Generated([], kind=kind)
        with self._rollout_weights():
            for round_ in range(cfg.max_gen_rounds):
                problems = phases.draw(self.task, cfg, step, round_, self.held_out)
                gen, round_reasons = self._generate_round(problems, kind, stream(cfg.seed, step, round_, "rollout"))
                reasons += round_reasons
                total.times.add(gen.times)
                total.census += gen.census
                generated += gen.trees
                kept += phases.keep_groups(gen.trees, cfg)
                if len(kept) >= cfg.prompts_per_step:  # the same on every rank: the trees are gathered
                    break
        self.hf.drop_kv()  # the last generation's keys and values are not needed by the update
        if cfg.fill_batch and len(kept) < cfg.prompts_per_step:  # verl's DAPO trainer raises here too
            raise ValueError(
                f"step {step}: fill_batch kept {len(kept)} of prompts_per_step={cfg.prompts_per_step} informative "
                f"groups in max_gen_rounds={cfg.max_gen_rounds} rounds of {cfg.gen_prompts} prompts; raise "
                "max_gen_rounds or gen_prompts (the problems may be too hard or too easy for the model), or set "
                "fill_batch false"
            )
        kept = (kept or generated)[: cfg.prompts_per_step]  # nothing informative: a homogeneous step
        t_rollout = time.perf_counter() - t0

        t1 = time.perf_counter()
        rows = phases.advantage_rows(kept, cfg, self.newline)
        if self.syncs:
            self.backend.sleep()  # a GPU engine frees its memory for the update (no-op on the CPU)
        update = update_policy(
            self.policy,
            self.opt,
            self.sched,
            rows,
            cfg,
            self.pad,
            stream(cfg.seed, step, 0, "shuffle"),
            self.dtype,
            self.world,
        )
        self.active_steps += any(r.active for r in rows)
        t_update = time.perf_counter() - t1
        t2 = time.perf_counter()
        if self.syncs:
            self.backend.wake_up()
            self.backend.load_weights(self._engine_weights())
        t_sync = time.perf_counter() - t2
        self.step += 1
        timing = {
            "time_rollout": t_rollout,
            "time_update": t_update,
            "time_sync": t_sync,
            "time_step": time.perf_counter() - t0,
        }
        m = phases.step_metrics(self.step, generated, kept, rows, total, reasons, update, timing)
        m["active_steps"] = self.active_steps
        return m

    def _generate_round(self, problems: list[Problem], kind: str, seed: int) -> tuple[phases.Generated, Counter]:
        """One round's trees, scored: this rank generates its contiguous share of ``problems`` (seeded by their
        global indices), then every rank's trees are gathered in rank order, i.e. the round's order, so every rank
        holds what one process would have generated."""
        lo, hi = self.world.share(len(problems))
        mine = problems[lo:hi]
        gen = phases.generate_trees(mine, [self._encode(p) for p in mine], kind, self.cfg, self.ctx, seed, first=lo)
        reasons = phases.score_trees(gen.trees, mine, self.task, self._decode, self.reward_cfg, self.eos)
        if not self.world.launched:
            return gen, reasons
        parts = self.world.gather((gen.trees, gen.times, gen.census, reasons))
        out = phases.Generated([t for trees, _, _, _ in parts for t in trees], kind=kind)
        out.times = RolloutTimes.across([times for _, times, _, _ in parts])
        for _, _, census, _ in parts:
            out.census += census
        return out, sum((why for _, _, _, why in parts), Counter())

    # ---------------------------------------------------------------- validation
    @torch.no_grad()
    def validate(self) -> dict:
        """Accuracy on the held-out problems, decoded as the paper validates (temperature 1.0, top-p 0.95, by
        default; ``val_temperature=0`` is greedy), ``val_samples`` draws per problem with fixed seeds (the same
        draws for every run and step, so curves compare with less noise). ``val_correct`` lists each problem's
        correct draws, for paired statistics across runs."""
        cfg = self.cfg
        lo, hi = self.world.split(len(self.val_problems))  # data parallel: each rank decodes its share
        mine = self.val_problems[lo:hi]
        n = 1 if cfg.val_temperature == 0 else cfg.val_samples
        counts = []
        if mine:
            prompts = [self._encode(p) for p in mine]
            with full_params(self.policy, self.world.launched and self.backend is self.hf):
                outs = self.backend.generate(
                    [p for p in prompts for _ in range(n)],
                    max_new_tokens=cfg.max_response_len,
                    temperature=cfg.val_temperature,
                    top_p=cfg.val_top_p if cfg.val_temperature else 1.0,
                    seed=VAL_SEED + lo * n,  # request i of the whole set draws from VAL_SEED + i on any rank
                    eos_token_id=self.eos,
                )
            texts = self.tok.batch_decode(outs, skip_special_tokens=True)
            ok = [self.task.verify(texts[i * n + j], p).correct for i, p in enumerate(mine) for j in range(n)]
            counts = [sum(ok[i * n : (i + 1) * n]) for i in range(len(mine))]
        counts = [c for part in self.world.gather(counts) for c in part]
        return {"val_accuracy": sum(counts) / (n * len(counts)), "val_correct": counts, "val_samples": n}

    # ---------------------------------------------------------------- run, save, resume
    def run(self) -> list[dict]:
        from tqdm import tqdm

        cfg, main = self.cfg, self.world.main  # rank 0 writes the files and draws the progress bar
        metrics_path = self.out / "metrics.jsonl"
        example = "".join(f"#   {line}\n" for line in self._render(self.val_problems[0]).splitlines())
        if main:
            (self.out / "config.yaml").write_text(
                _yaml(cfg.to_dict()) + f"# prompt_format: {cfg.prompt_format}; the first held-out "
                f"prompt as the model sees it:\n{example}"
            )
        rows = []
        if main:
            self.trackers = Trackers(
                cfg.report_to, self.out, cfg.to_dict(), self.out.name, self.step if self.step > 0 else None
            )
        if self.step == 0:
            rows.append({"step": 0, **self.validate()})
            if main:
                metrics_path.write_text("")
                self._record(metrics_path, rows[-1])
            self._keep_weights(rows[-1])
        bar = tqdm(
            range(self.step, cfg.steps),
            desc=f"training ({cfg.rollout}, {cfg.selector})",
            disable=not (cfg.progress and main),
            initial=self.step,
            total=cfg.steps,
        )
        for _ in bar:
            m = self.train_step()
            if self.resumed_changes:  # recorded once, in the first row after the resume
                m["resume_changed"] = {k: [old, new] for k, (old, new) in self.resumed_changes.items()}
                self.resumed_changes = {}
            if (cfg.val_every and self.step % cfg.val_every == 0) or self.step == cfg.steps:
                m.update(self.validate())
                self._keep_weights(m)
            rows.append(m)
            if main:
                self._record(metrics_path, m)
            bar.set_postfix(
                acc=f"{m['accuracy']:.2f}",
                kept=m["groups_kept"],
                **({"val": f"{m['val_accuracy']:.2f}"} if "val_accuracy" in m else {}),
            )
            if (cfg.save_every and self.step % cfg.save_every == 0) or self.step == cfg.steps:
                self.save()
        self.export(self.out / "final")
        self._close_trackers()
        if self.lock is not None:
            self.lock.release()
        return rows

    def _record(self, path: Path, row: dict) -> None:
        _append(path, row)
        self.trackers.log(row)

    def _close_trackers(self) -> None:
        if getattr(self, "trackers", None) is not None:
            self.trackers.close()
            self.trackers = None

    def close(self) -> None:
        """Release the rollout engine this trainer built and leave the process group (under torchrun)."""
        self._close_trackers()
        if self.backend is not self.hf and self.owns_backend and hasattr(self.backend, "close"):
            self.backend.close()
        if self.lock is not None:
            self.lock.release()
        close_world(self.world)

    def export(self, path: Path) -> None:
        """The policy in Hugging Face format (sharded: gathered to rank 0, which writes it)."""
        if not self.world.launched:
            self.policy.save_pretrained(path)
            self.tok.save_pretrained(path)
            return
        weights = full_state_dict(self.policy)  # a collective: every rank takes part
        if self.world.main:
            self.policy.save_pretrained(path, state_dict=weights)
            self.tok.save_pretrained(path)
        self.world.barrier()

    def _keep_weights(self, m: dict) -> None:
        """After a validation: this step's weights as ``weights/step-S`` (the newest ``keep_last`` kept; -1: all) and,
        with ``keep_best``, as ``best/`` when its held-out accuracy beats every earlier one (``best/bsb_best.json``
        names the step). Each folder is written beside its place and renamed in, so it is whole or absent."""
        cfg, main = self.cfg, self.world.main
        if cfg.keep_last != 0:
            self._export_to(self.out / "weights" / f"step-{m['step']}")
            if main and cfg.keep_last > 0:
                kept = sorted(weight_steps(self.out), reverse=True)
                for step in kept[cfg.keep_last :]:
                    shutil.rmtree(self.out / "weights" / f"step-{step}", ignore_errors=True)
        if cfg.keep_best:
            best = best_weights(self.out) if main else None
            if self.world.launched:  # rank 0's record on every rank: the export below is a collective
                best = self.world.gather(best)[0]
            if best is None or m["val_accuracy"] > best["val_accuracy"]:
                self._export_to(self.out / "best", {"step": m["step"], "val_accuracy": m["val_accuracy"]})

    def _export_to(self, path: Path, note: dict | None = None) -> None:
        tmp = path.with_name(path.name + ".tmp")
        if self.world.main:
            shutil.rmtree(tmp, ignore_errors=True)
        self.export(tmp)
        if self.world.main:
            if note is not None:
                (tmp / BEST_NOTE).write_text(json.dumps(note))
            old = path.with_name(path.name + ".old")
            if path.exists():
                shutil.rmtree(old, ignore_errors=True)
                os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        self.world.barrier()

    def save(self) -> None:
        """Atomic: written beside the old checkpoint, then swapped in by renames. Sharded (under torchrun), every rank
        writes its shards of the model and optimizer into one DCP checkpoint and rank 0 the rest."""
        tmp, old = self.out / "checkpoint.tmp", self.out / "checkpoint.old"
        main = self.world.main
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        self.world.barrier()
        blob = {
            "scheduler": self.sched.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
        }
        if self.world.launched:
            save_sharded(self.policy, self.opt, tmp / DCP_DIR)
        else:
            self.policy.save_pretrained(tmp / "model")
            self.tok.save_pretrained(tmp / "model")
            blob["optimizer"] = self.opt.state_dict()
        if main:
            torch.save(blob, tmp / "trainer.pt")
        self.world.barrier()  # every shard written before the checksums and rank 0's declaring it complete
        files = checkpoint_files(tmp)
        sums = {k: v for part in self.world.gather(file_checksums(tmp, self._share(files))) for k, v in part.items()}
        if main:
            # state.json last, and whole (renamed into place): a checkpoint.tmp holding it is complete
            state = {"step": self.step, "active_steps": self.active_steps, "config": self.cfg.to_dict()}
            state.update(world_size=self.world.size, checksums=sums)
            (tmp / "state.json.part").write_text(json.dumps(state, indent=1))
            os.replace(tmp / "state.json.part", tmp / "state.json")
            if self.ckpt.exists():
                shutil.rmtree(old, ignore_errors=True)
                os.replace(self.ckpt, old)
            os.replace(tmp, self.ckpt)
            shutil.rmtree(old, ignore_errors=True)
        self.world.barrier()

    def _read_state(self) -> dict:
        """The checkpoint's ``state.json``: a mapping with the run's config and step counts in range, or one error
        naming the file."""
        where = self.ckpt / "state.json"
        try:
            state = json.loads(where.read_text())
            stored, step, active = state["config"], state["step"], state.get("active_steps", 0)
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(
                f"{where}: not a bsb checkpoint state ({err!r}); move the checkpoint away to start over"
            ) from None
        if not isinstance(stored, dict):
            raise ValueError(f"{where}: holds no config; move the checkpoint away to start over")
        for name, value in (("step", step), ("active_steps", active)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= step:
                raise ValueError(
                    f"{where}: {name} {value!r} is not a step count in [0, step]; the checkpoint is damaged"
                )
        return state

    def _share(self, files: list[str]) -> list[str]:
        return files[self.world.rank :: self.world.size]  # each rank hashes a share of the files

    def _verify_checkpoint(self) -> None:
        """The checkpoint's files against the checksums its ``state.json`` records (each rank a share; one error on
        every rank). A checkpoint written before checksums existed records none and loads as it is."""
        expected = self.state.get("checksums")
        if expected is None:
            return
        if not isinstance(expected, dict) or not all(isinstance(v, str) for v in expected.values()):
            raise ValueError(f"{self.ckpt / 'state.json'}: its checksums are not a mapping of file: crc")
        try:
            verify_checksums(self.ckpt, expected, self._share(sorted(expected)))
            problem = None
        except ValueError as err:
            problem = str(err)
        problems = [p for p in self.world.gather(problem) if p]
        if problems:
            raise ValueError(problems[0])

    def _check_resume(self) -> dict:
        """The stored config against this one: a change that alters the run's results is an error listing the fields,
        unless ``resume_changes`` names them (then they are returned, to be recorded in the next metrics row)."""
        stored = self.state["config"]
        changed = resume_changes(stored, self.cfg)
        refused = {k: v for k, v in changed.items() if k not in self.cfg.resume_changes}
        if refused:
            listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in refused.items())
            raise ValueError(
                f"{self.out} holds a different run ({listed}): use another out_dir, --no-resume to start over, or "
                f"resume_changes=[{', '.join(refused)}] to change them on purpose"
            )
        return changed

    def _apply_optimizer_changes(self) -> None:
        """A resumed optimizer keeps its stored lr and weight decay: a change asked for with resume_changes is applied
        here (the schedule's base lr too), so what config.yaml records is what trains."""
        lam = self.sched.lr_lambdas[0]
        if "lr" in self.resumed_changes:
            self.sched.base_lrs = [self.cfg.lr for _ in self.opt.param_groups]
            for g in self.opt.param_groups:
                g["initial_lr"], g["lr"] = self.cfg.lr, self.cfg.lr * lam(self.sched.last_epoch)
        if "weight_decay" in self.resumed_changes:
            for g in self.opt.param_groups:
                g["weight_decay"] = self.cfg.weight_decay

    def _load(self) -> None:
        self.step, self.active_steps = self.state["step"], self.state.get("active_steps", 0)
        blob = torch.load(
            self.ckpt / "trainer.pt", weights_only=True, map_location="cpu"
        )  # the optimizer moves its state to the params
        if self.sharded_ckpt:  # DCP reshards to this world (any size, or one process)
            load_sharded(self.policy, self.opt, self.ckpt / DCP_DIR)
        elif self.world.launched:  # a one-process checkpoint resumed under torchrun: its full state, sharded here
            load_full_optimizer(self.policy, self.opt, blob["optimizer"])
        else:
            self.opt.load_state_dict(blob["optimizer"])
        self.sched.load_state_dict(blob["scheduler"])
        torch.set_rng_state(blob["torch_rng"])
        random.setstate(blob["python_rng"])
        path = self.out / "metrics.jsonl"
        if path.exists() and self.world.main:  # drop rows written after the checkpoint (a crash between save points)
            kept = [line for line in _metric_rows(path) if json.loads(line)["step"] <= self.step]
            path.write_text("".join(line + "\n" for line in kept))
        if self.world.main:  # and the weights kept after it: the resumed run writes its own
            drop_weights_after(self.out, self.step)


def recover_checkpoint(out: Path) -> str:
    """Undo a crash inside :meth:`Trainer.save`, which writes ``checkpoint.tmp`` (complete once its ``state.json``
    exists: written last, renamed into place), renames ``checkpoint`` to ``checkpoint.old``, then ``checkpoint.tmp``
    to ``checkpoint``. Between those renames there is no ``checkpoint/``: the newest complete one is put back.
    Returns what it did ("" when there was nothing to recover)."""
    ckpt, tmp, old = out / "checkpoint", out / "checkpoint.tmp", out / "checkpoint.old"
    if ckpt.exists():
        return ""
    for source in (tmp, old):  # tmp is the newer of the two
        if (source / "state.json").exists():
            os.replace(source, ckpt)
            log.warning("recovered %s from %s (a run stopped while saving)", ckpt, source.name)
            return source.name
    return ""


def _metric_rows(path: Path) -> list[str]:
    """The rows of a metrics file. A torn last line (a crash while it was written: no newline, not JSON) is dropped
    with a warning; any other row that is not a JSON object with a step is an error naming the file and line."""
    text = path.read_text()
    lines = text.splitlines()
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            ok = isinstance(row, dict) and isinstance(row.get("step"), int)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            if n == len(lines) and not text.endswith("\n"):
                log.warning("%s: dropped a torn last row (line %d, a run stopped while writing it)", path, n)
                continue
            raise ValueError(f"{path}, line {n}: not a metrics row (a JSON object with an integer step): {line[:80]!r}")
        rows.append(line)
    return rows


def _append(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def _yaml(d: dict) -> str:
    import yaml

    return yaml.safe_dump(d, sort_keys=False)
