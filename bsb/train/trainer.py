"""The tree RLVR trainer: the loop around the phases of :mod:`bsb.train.phases` and the update of
:mod:`bsb.train.update`.

One step (``Trainer.train_step``), each phase a function on plain data:

1. **draw** the task's problems for a generation round (``gen_prompts`` of them);
2. **generate trees**: [Fork]'s tree rollout with the selector's forks, [TwoStage]'s two-stage sampler, flat
   GRPO groups, or the flat warm-up before bifurcating (rollouts through vLLM when installed, else the HF model);
3. **score** every leaf with the task's verifier plus the overlong penalty;
4. **keep** the groups whose outcomes differ (dynamic sampling, up to ``max_gen_rounds`` rounds until
   ``prompts_per_step`` are kept);
5. **advantage rows**: TreeRL, GRPO or prefix credit per kept tree, one row per leaf;
6. **update**: the optimizer steps over the rows (:func:`bsb.train.update.update_policy`);
7. **sync** the new weights into a running engine, then **metrics**.

What is not the loop has its own home: the run folder (lock, checkpoints, resume, metrics rows, kept weights) is
:class:`~bsb.train.run_folder.RunFolder`; where the policy's weights live (one process, or FSDP2 shards under
torchrun) is the :class:`~bsb.train.sharding.Placement` chosen once by :func:`~bsb.train.sharding.place_policy`; who
reads for the selector is the engine's choice (:func:`bsb.engine.reader.choose_reader`). Reproducible: every sampling
stream derives from ``(seed, step, round, phase)`` (:mod:`bsb.train.seeds`), so a resumed run draws the same data.
Nothing here is specific to a domain: the task (:mod:`bsb.tasks`) owns problems, prompts, the probe suffix, the
committed answer and the verifier.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import torch

from bsb import min_versions
from bsb.embedded.model import resolve_model
from bsb.engine.backend import BackendError, capabilities
from bsb.engine.boundaries import newline_token_mask
from bsb.engine.device import resolve_device, resolve_dtype
from bsb.engine.memory import check_colocation, peak_rss_gb
from bsb.engine.probe import SelectorConfig, answer_tokens, check_against_model, resolve
from bsb.engine.reader import bind_reader, read_path
from bsb.engine.selectors import make_selector
from bsb.engine.weight_sync import check_gap, check_ids, sync_gap
from bsb.tasks.base import NO_ANSWER_REASONS, Problem, hook
from bsb.tasks.registry import make_task
from bsb.train import phases
from bsb.train.answer_watch import AnswerWatch
from bsb.train.config import TrainConfig
from bsb.train.distributed import close_world, init_world
from bsb.train.rewards import RewardConfig
from bsb.train.rollout import RolloutTimes
from bsb.train.run_folder import RunFolder
from bsb.train.run_plan import resolve_plan
from bsb.train.seeds import VAL_SEED, stream
from bsb.train.sharding import place_policy
from bsb.train.update import update_policy

log = logging.getLogger(__name__)
VAL_CHUNK = 64  # held-out problems a validation request decodes (the progress bar's step)


class Trainer:
    def __init__(self, cfg: TrainConfig, rollout_backend=None, resume: bool = True):
        """``rollout_backend``: an existing engine to generate with (e.g. one shared vLLM engine); by default one
        is built from ``cfg.backend``. ``resume``: continue from ``out_dir/checkpoint`` when it exists."""
        import transformers

        from bsb.engine.hf_backend import HFBackend

        min_versions.check("transformers")  # an older release: one error naming the one bsb needs

        self.cfg = cfg
        # The task first: an unknown task, a bad option or a malformed problem file fails before any model loads.
        self.task = make_task(cfg.task, cfg.task_options)
        self.val_problems = self.task.held_out(cfg.val_problems)
        self.held_out = {p.prompt for p in self.val_problems}
        self.device = resolve_device(cfg.device)  # CUDA asked for where there is none: an error before any model loads
        # under torchrun: the launch checked (an error on every rank), this rank's GPU, the process group
        self.world, self.device = init_world(cfg, self.device)
        self.dtype = resolve_dtype(cfg.dtype, self.device)
        self.folder = RunFolder(Path(cfg.out_dir), self.world)
        self.out = self.folder.out
        if cfg.steps == 0:  # a score, never written over a run
            self.folder.check_fresh("steps=0 scores a model")
        state, self.resumed_changes = self.folder.resume_state(cfg, resume)  # checked before any model loads
        # rank 0 builds (or finds) the embedded model first: one writer of the cache
        self.model_path = self.world.main_first(lambda: resolve_model(cfg.model, self.task))
        if self.device.type == "cuda" and cfg.backend != "hf":
            update = cfg.micro_batch_shapes()
            check_colocation(
                self.model_path,
                self.device,
                cfg.vllm_gpu_memory_utilization,
                self.world.size,
                update,
                offload=cfg.fsdp_cpu_offload,
                compute_bytes=self.dtype.itemsize,
            )
        plain_ckpt = state is not None and not self.folder.sharded
        load_from = self.folder.ckpt / "model" if plain_ckpt else self.model_path
        self.tok = transformers.AutoTokenizer.from_pretrained(self.model_path)
        self.cfg.render(
            self.task, self.val_problems[0], self.tok
        )  # a prompt format the tokenizer cannot render fails before the model loads
        torch.manual_seed(cfg.seed)
        self.placement = place_policy(load_from, self.world, self.device, self.dtype, cfg)
        self.policy = self.placement.model
        self.plan, why = resolve_plan(cfg, self.policy)  # the pass, loss and estimator, resolved once
        if why:  # decided before any rollout, said once: the per-path update computes the same loss
            log.warning("update_packing=%s cannot update this model (%s): updating per path", cfg.update_packing, why)
            self.cfg = cfg = replace(cfg, update_packing=self.plan.logprob_pass.name)
        compute = None if self.dtype == torch.float32 else self.dtype
        self.hf = HFBackend(self.policy, self.tok, compute_dtype=compute)  # reads, generation: eval mode
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
        self.selector = self._make_selector(cfg)  # before an engine starts
        self.step, self.active_steps = 0, 0
        if state is not None:
            self.step, self.active_steps = state["step"], state.get("active_steps", 0)
            self.folder.load_checkpoint(self.placement, self.opt, self.sched, state)
            self._apply_optimizer_changes()
        self.owns_backend = rollout_backend is None
        self.backend = rollout_backend if rollout_backend is not None else self._make_backend(load_from)
        # the engine holds its own copy of the weights: synced after every update
        self.separate_engine = capabilities(self.backend).weight_sync
        self.syncs, self.sync_ids = 0, check_ids(self.tok, self.hf.vocab_size)
        if self.separate_engine and (rollout_backend is not None or (state is not None and self.folder.sharded)):
            self._sync_engine()  # a shared engine may hold others
        self._bind_selector()

    # ---------------------------------------------------------------- setup
    def selector_config(self) -> SelectorConfig:
        return resolve(self.cfg, self.task, self.tok, seed=self.cfg.seed)

    def _make_selector(self, cfg: TrainConfig):
        selector = make_selector(cfg.selector, resolve(cfg, self.task, self.tok, seed=cfg.seed))
        if "white_box" in selector.requires and not self.hf.capabilities.white_box:
            raise BackendError(
                f"selector={cfg.selector} reads hidden states, which bsb does not read on this model: "
                f"{self.hf.plan.why}; train it with a selector that reads no hidden states: --set selector=probe_js "
                "(or entropy, midpoint)"
            )
        return selector

    def _bind_selector(self) -> None:
        # who reads for the selector, chosen and bound once (the policy keeps its KV when it generates and reads)
        bind_reader(self.cfg.probe_reader, self.selector, self.backend, self.hf)
        # sharded: forwards of the policy itself (HF rollouts, white-box reads) run on its gathered weights
        self.rollout_on_policy = self.backend is self.hf or self.selector.reader is self.hf
        answers = answer_tokens(self.task, self.tok) if self.selector.needs_answer else None
        self.ctx = phases.RolloutContext(self.backend, self.selector, self.newline, self.eos, answers)

    def use_selector(self, name: str) -> None:
        """Fork the next steps with selector ``name`` on the same policy, optimizer and rollout engine: selectors
        compared on one model without loading it again. The engine keeps the context length it was started with, so a
        selector whose probe needs more room than the first one's is refused (start a trainer for it instead)."""
        cfg = replace(self.cfg, selector=name)  # the config's own checks
        selector, before = self._make_selector(cfg), self.selector.config
        room = lambda probe: len(probe.suffix) + probe.read_len  # noqa: E731
        if self.backend is not self.hf and room(selector.config) > room(before):
            raise ValueError(
                f"selector={name} probes {room(selector.config)} tokens after a chain, more than the "
                f"{room(before)} the rollout engine was started with; start a trainer with it"
            )
        self.cfg, self.selector = cfg, selector
        self._bind_selector()

    def _make_backend(self, path: Path):
        from bsb.engine.rollout_engine import engine_max_len, make_rollout_backend, model_positions, wave_kv_cache_gib

        cfg = self.cfg
        limit = model_positions(self.policy.config)
        if limit and cfg.max_prompt_len + cfg.max_response_len > limit:
            raise ValueError(
                f"max_prompt_len + max_response_len = {cfg.max_prompt_len + cfg.max_response_len} exceeds the model's "
                f"{limit} positions"
            )
        probe = self.selector.config  # room for a probe after a chain: the elicitation suffix and its read
        max_len = engine_max_len(cfg.max_prompt_len, cfg.max_response_len, len(probe.suffix), probe.read_len)
        kv = cfg.vllm_kv_cache_gib
        if cfg.vllm_batch_tokens is not None and self.device.type == "cpu":  # a GPU engine chunks its prefills
            try:
                wave = wave_kv_cache_gib(
                    self.hf.model.config,
                    cfg.vllm_batch_tokens,
                    min(max_len, limit or max_len),
                    cfg.max_response_len,
                    self.dtype,
                )
            except ValueError as err:
                raise ValueError(f"vllm_batch_tokens: {err}") from None
            kv = max(kv, wave)
        backend = make_rollout_backend(
            cfg.backend,
            path,
            self.hf,
            max_len,
            cfg.seed,
            kv,
            self.dtype,
            cfg.vllm_gpu_memory_utilization,
            cfg.vllm_sleep,
            log_file=self.out / "vllm.log",  # not under the progress bar (VLLM_LOGGING_LEVEL brings it back)
            cpu_process=cfg.vllm_cpu_process,
            max_num_batched_tokens=cfg.vllm_batch_tokens,
        )
        if backend is self.hf and cfg.vllm_batch_tokens is not None:
            log.warning("vllm_batch_tokens=%d unused: backend=auto rolls out with the HF model", cfg.vllm_batch_tokens)
        return backend

    def _encode(self, problem: Problem) -> list[int]:
        ids = self.cfg.encode(self.task, problem, self.tok)
        if not ids or len(ids) > self.cfg.max_prompt_len:
            raise ValueError(
                f"a prompt of {len(ids)} tokens does not fit max_prompt_len={self.cfg.max_prompt_len}: "
                f"{problem.prompt[:80]!r}"
            )
        return ids

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

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

    # ---------------------------------------------------------------- one step
    def train_step(self) -> dict:
        cfg, step = self.cfg, self.step
        t0 = time.perf_counter()
        kind = phases.rollout_kind(cfg, self.active_steps)
        generated, kept, reasons = [], [], Counter()
        total = phases.Generated([], kind=kind)
        with self.placement.whole_weights(self.rollout_on_policy):
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
        rows = phases.advantage_rows(kept, cfg, self.newline, self.plan.advantage)
        if self.separate_engine:
            self.backend.sleep()  # a GPU engine frees its memory for the update (no-op on the CPU)
        shuffle = stream(cfg.seed, step, 0, "shuffle")
        update = update_policy(
            self.policy, self.opt, self.sched, rows, cfg, self.plan, self.pad, shuffle, self.dtype, self.world
        )
        self.active_steps += any(r.active for r in rows)
        t_update = time.perf_counter() - t1
        t2 = time.perf_counter()
        gap = self._sync_engine() if self.separate_engine else None  # the engine wakes itself: weights, KV cache
        t_sync = time.perf_counter() - t2
        self.step += 1
        timing = {"time_rollout": t_rollout, "time_update": t_update, "time_sync": t_sync}
        timing["time_step"] = time.perf_counter() - t0
        m = phases.step_metrics(self.step, generated, kept, rows, total, reasons, update, timing)
        m["active_steps"] = self.active_steps
        m["probe_read_path"] = read_path(self.selector)
        m["mem_peak_gb"] = peak_rss_gb()  # this process's peak resident memory so far (policy, optimizer, engine)
        if gap is not None:
            m["sync_gap"] = gap
        return m

    def _sync_engine(self) -> float | None:
        """The policy's weights into the rollout engine, checked (:func:`check_gap`) after the first sync and then
        every ``sync_check_every``: the gap in nats a token, or None when not checked."""
        self.backend.load_weights(self.placement.engine_weights(self.dtype))
        self.syncs += 1
        every = self.cfg.sync_check_every
        if not every or (self.syncs - 1) % every:
            return None
        with self.placement.whole_weights(True):
            gap = sync_gap(self.backend, self.hf, self.sync_ids)
        # every rank's engine checked; all stop on the worst, none left waiting in a collective the others quit
        worst = max(self.world.gather(gap), key=lambda g: math.inf if math.isnan(g) else g)
        name = getattr(self.backend, "engine_name", "") or type(self.backend).__name__
        return check_gap(worst, len(self.sync_ids), self.dtype, name)

    def _generate_round(self, problems: list[Problem], kind: str, seed: int) -> tuple[phases.Generated, Counter]:
        """One round's trees, scored: this rank generates its contiguous share of ``problems`` (seeded by their
        global indices), then every rank's trees are gathered in rank order, i.e. the round's order, so every rank
        holds what one process would have generated (one process: its own, as they are)."""
        lo, hi = self.world.share(len(problems))
        mine = problems[lo:hi]
        gen = phases.generate_trees(
            mine, [self._encode(p) for p in mine], kind, self.cfg, self.plan, self.ctx, seed, first=lo
        )
        reasons = phases.score_trees(gen.trees, mine, self.task, self._decode, self.reward_cfg, self.eos)
        parts = self.world.gather((gen.trees, gen.times, gen.census, reasons))
        out = phases.Generated([t for trees, _, _, _ in parts for t in trees], kind=kind)
        out.times = RolloutTimes.across([times for _, times, _, _ in parts])
        reasons = Counter()
        for _, _, census, why in parts:
            out.census.update(census)  # update keeps zero counts (+= would drop them)
            reasons.update(why)
        return out, reasons

    # ---------------------------------------------------------------- validation
    @torch.no_grad()
    def validate(self) -> dict:
        """Accuracy on the held-out problems, decoded as the paper validates (temperature 1.0, top-p 0.95, by
        default; ``val_temperature=0`` is greedy), ``val_samples`` draws per problem with fixed seeds (the same
        draws for every run and step, so curves compare with less noise). ``val_correct`` lists each problem's
        correct draws, for paired statistics across runs; ``val_no_answer`` is the share of draws holding no answer
        the task can read, ``val_cut`` the share stopped by ``max_response_len`` before the EOS, ``val_tokens`` the
        mean response length."""
        cfg = self.cfg
        from tqdm import tqdm

        lo, hi = self.world.split(len(self.val_problems))  # data parallel: each rank decodes its share
        mine = self.val_problems[lo:hi]
        n = 1 if cfg.val_temperature == 0 else cfg.val_samples
        rows = []  # per problem: correct, no-answer and cut draws, tokens
        bar = tqdm(total=len(mine), desc="validating", leave=False, disable=not (cfg.progress and self.world.main))
        # every rank gathers the weights (a collective), even one with no share of a small held-out set
        with self.placement.whole_weights(self.backend is self.hf), bar:
            for start in range(0, len(mine), VAL_CHUNK):  # a chunk a request: the bar moves, the batch stays large
                part = mine[start : start + VAL_CHUNK]
                prompts = [self._encode(p) for p in part]
                outs = self.backend.generate(
                    [p for p in prompts for _ in range(n)],
                    max_new_tokens=cfg.max_response_len,
                    temperature=cfg.val_temperature,
                    top_p=cfg.val_top_p if cfg.val_temperature else 1.0,
                    seed=VAL_SEED + (lo + start) * n,  # request i of the whole set draws from VAL_SEED + i anywhere
                    eos_token_id=self.eos,
                )
                texts = self.tok.batch_decode(outs, skip_special_tokens=True)
                bar.update(len(part))
                for i, p in enumerate(part):
                    verdicts = [self.task.verify(texts[i * n + j], p) for j in range(n)]
                    draws = outs[i * n : (i + 1) * n]
                    cut = sum(len(o) >= cfg.max_response_len and o[-1] != self.eos for o in draws)
                    no_answer = sum(v.reason in NO_ANSWER_REASONS for v in verdicts)
                    rows.append((sum(v.correct for v in verdicts), no_answer, cut, sum(map(len, draws))))
        rows = [r for part in self.world.gather(rows) for r in part]
        draws = n * len(rows)
        correct, no_answer, cut, tokens = (sum(col) for col in zip(*rows))
        return {
            "val_accuracy": correct / draws,
            "val_correct": [r[0] for r in rows],
            "val_samples": n,
            "val_no_answer": no_answer / draws,
            "val_cut": cut / draws,
            "val_tokens": tokens / draws,
        }

    # ---------------------------------------------------------------- the run
    def run(self) -> list[dict]:
        """Train to ``cfg.steps``: validation at step 0 (a fresh run), every ``val_every`` steps and at the end;
        checkpoints every ``save_every`` steps and at the end; the final weights in ``out_dir/final``."""
        from tqdm import tqdm

        cfg = self.cfg
        example = cfg.render(self.task, self.val_problems[0], self.tok)  # the first held-out prompt, rendered
        self.folder.begin(cfg, example, self.step)
        rows = []
        if self.step == 0:
            rows.append({"step": 0, **self.validate()})
            self.folder.record(rows[-1])
            if cfg.steps:  # a score keeps no weights
                self.folder.keep_weights(rows[-1], self.placement, self.tok, cfg)
        watch = AnswerWatch(self.task.name, hook(self.task, "answer_format")(), cfg.prompt_format, example)
        bar = tqdm(
            range(self.step, cfg.steps),
            desc=f"training ({cfg.rollout}, {cfg.selector})",
            disable=not (cfg.progress and self.world.main),  # rank 0 draws the progress bar
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
                self.folder.keep_weights(m, self.placement, self.tok, cfg)
            rows.append(m)
            self.folder.record(m)
            warning = watch.see(m)
            if warning and self.world.main:
                log.warning(warning)
            bar.set_postfix(
                acc=f"{m['accuracy']:.2f}",
                kept=m["groups_kept"],
                **({"val": f"{m['val_accuracy']:.2f}"} if "val_accuracy" in m else {}),
            )
            if (cfg.save_every and self.step % cfg.save_every == 0) or self.step == cfg.steps:
                self.save()
        if cfg.steps:
            self.export(self.out / "final")
        self.folder.close()
        return rows

    def save(self) -> None:
        self.folder.save_checkpoint(
            self.placement, self.opt, self.sched, self.tok, self.step, self.active_steps, self.cfg
        )

    def export(self, path: Path) -> None:
        """The policy in Hugging Face format at ``path`` (sharded: gathered to rank 0, which writes it)."""
        self.folder.export(self.placement, self.tok, Path(path))

    def close(self) -> None:
        """Release the rollout engine this trainer built, the run folder, and the process group (under torchrun)."""
        self.folder.close()
        if self.owns_backend:
            self.backend.close()
        close_world(self.world)
