"""The tree RLVR trainer: rollouts (vLLM when installed, else the HF model), forks where the selector says,
rewards, advantages, the policy update in PyTorch, and the weight sync back into the engine every step.

One step:

1. **Generate** (up to ``max_gen_rounds`` rounds of ``gen_prompts`` prompts): a tree per prompt
   (:mod:`bsb.train.rollout`; or seed 001's two-stage sampler, or flat GRPO groups), scored leaf by leaf.
2. **Keep** ``prompts_per_step`` groups; with dynamic sampling only groups whose rewards differ (DAPO).
3. **Advantages** per group (TreeRL Eq. 7, GRPO, or seed 001's prefix credit).
4. **Update**: ``minibatches`` optimizer steps over the kept rows. Rows whose advantages are all zero are not
   back-propagated (their gradient is exactly zero; their tokens still count in the token mean). A mini-batch
   with no non-zero advantage takes the AdamW step on zero gradients (``zero_grad_step``), skips it
   (``skip_step``), or runs the 0-weighted backward anyway (``backward``). The PPO ratios are against the
   rollout policy: the log-probs of the weights that generated the batch (with one mini-batch they are the
   current weights, so the ratio is exactly 1 and the old log-probs need no extra forward).
5. **Sync** the new weights into the vLLM engine.

Reproducible: each step's problems and sampling seeds depend only on ``(seed, step)``, so a resumed run draws
the same data; checkpoints hold the model, the optimizer, the schedule and the RNG states, written atomically.
Metrics go to ``out_dir/metrics.jsonl``, one JSON object per step (validation rows carry ``"val_accuracy"``).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from pathlib import Path

import torch

from bsb.engine.boundaries import newline_token_mask
from bsb.engine.selectors import SelectorConfig, make_selector
from bsb.tasks.math_grader import MathGrader, extract_boxed
from bsb.tasks.tiny_model import resolve_model
from bsb.train.advantages import advantages
from bsb.train.config import TrainConfig
from bsb.train.loss import composite_loss, flat_loss, response_logprobs, zero_grad_step
from bsb.train.rewards import RewardConfig, leaf_reward
from bsb.train.rollout import RolloutTimes, TreeConfig, flat_rollout, tree_rollout
from bsb.train.samplers import TwoStageConfig, two_stage_rollout
from bsb.train.tree import PromptTree


class Trainer:
    def __init__(self, cfg: TrainConfig, rollout_backend=None, resume: bool = True):
        """``rollout_backend``: an existing engine to generate with (e.g. one shared vLLM engine); by default one
        is built from ``cfg.backend``. ``resume``: continue from ``out_dir/checkpoint`` when it exists."""
        import transformers

        from bsb.engine.hf_backend import HFBackend

        self.cfg = cfg
        self.out = Path(cfg.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.ckpt = self.out / "checkpoint"
        resuming = resume and (self.ckpt / "state.json").exists()
        self.model_path = resolve_model(cfg.model)
        load_from = self.ckpt / "model" if resuming else self.model_path
        self.tok = transformers.AutoTokenizer.from_pretrained(self.model_path)
        torch.manual_seed(cfg.seed)
        self.policy = transformers.AutoModelForCausalLM.from_pretrained(load_from, dtype=torch.float32)
        self.hf = HFBackend(self.policy, self.tok)
        self.eos = self.tok.eos_token_id
        if self.eos is None:
            raise ValueError(f"tokenizer of {self.model_path} has no EOS token; rollouts could never end")
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eos
        self.newline = newline_token_mask(self.tok, self.hf.vocab_size)
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        warm = max(1, cfg.warmup_steps)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm))
        self.grader = MathGrader()
        self.reward_cfg = RewardConfig(cfg.max_response_len, cfg.overlong_buffer, cfg.overlong_factor, cfg.gate_chars)
        suffix = self.tok.encode(cfg.probe_suffix, add_special_tokens=False)
        self.selector = make_selector(cfg.selector, SelectorConfig(max_candidates=cfg.max_candidates, range_cap=cfg.range_cap,
                                                                   suffix=suffix, seed=cfg.seed))
        self.train_problems, self.val_problems = self._problems()
        self.step = 0
        if resuming:
            self._load()
        self.backend = rollout_backend if rollout_backend is not None else self._make_backend(load_from)
        self.is_vllm = hasattr(self.backend, "load_weights")
        if self.is_vllm and rollout_backend is not None:
            self.backend.load_weights(self.policy.state_dict())  # a shared engine may hold other weights
        missing = [m for m in self.selector.needs if not hasattr(self.backend, m)]
        self.reads = self.hf if missing else self.backend  # white-box reads go to the HF copy of the policy

    # ---------------------------------------------------------------- setup
    def _make_backend(self, path: Path):
        from bsb.engine.vllm_backend import rollout_backend as make_backend

        cfg = self.cfg
        limit = getattr(self.policy.config, "max_position_embeddings", None)
        if limit and cfg.max_prompt_len + cfg.max_response_len > limit:
            raise ValueError(f"max_prompt_len + max_response_len = {cfg.max_prompt_len + cfg.max_response_len} exceeds the model's "
                             f"{limit} positions")
        # + room for a probe: the elicitation suffix and its read
        return make_backend(cfg.backend, path, self.hf, cfg.max_prompt_len + cfg.max_response_len + 64, cfg.seed, cfg.vllm_kv_cache_gib)

    def _problems(self):
        """(train, val): lists of (id, prompt text, gold), or for synthetic training a generator per step."""
        from bsb.tasks.problems import load_problems
        from bsb.tasks.synthetic import make_problem

        cfg = self.cfg
        if cfg.val_file:
            val = [(p.id, p.prompt, p.answer) for p in load_problems(cfg.val_file)[: cfg.val_problems]]
        else:
            rng = random.Random(10**9)  # the same held-out set for every seed, so runs compare question by question
            val, seen = [], set()
            for _ in range(1000 * cfg.val_problems):
                if len(val) == cfg.val_problems:
                    break
                p = make_problem(rng, cfg.synthetic_ops[len(val) % len(cfg.synthetic_ops)], cfg.synthetic_max_operand)
                if p.prompt not in seen:
                    seen.add(p.prompt)
                    val.append((f"val-{len(val)}", p.prompt, str(p.answer)))
            if len(val) < cfg.val_problems:
                raise ValueError(f"invalid config: only {len(val)} distinct synthetic problems with synthetic_ops={cfg.synthetic_ops} and "
                                 f"synthetic_max_operand={cfg.synthetic_max_operand}; lower val_problems or widen the task")
        train = [(p.id, p.prompt, p.answer) for p in load_problems(cfg.train_file)] if cfg.train_file else None
        if train is not None and not train:
            raise ValueError(f"{cfg.train_file} holds no problems")
        return train, val

    def _draw(self, step: int, round_: int) -> list[tuple[str, str, str]]:
        from bsb.tasks.synthetic import make_problem

        rng = random.Random(f"{self.cfg.seed}-{step}-{round_}")  # str seeds are stable across runs
        n = self.cfg.gen_prompts
        if self.train_problems is None:  # synthetic: fresh problems, never one of the held-out set
            held_out = {prompt for _, prompt, _ in self.val_problems}
            out = []
            for _ in range(1000 * n):
                if len(out) == n:
                    return out
                p = make_problem(rng, rng.choice(self.cfg.synthetic_ops), self.cfg.synthetic_max_operand)
                if p.prompt not in held_out:
                    out.append((f"train-{step}-{round_}-{len(out)}", p.prompt, str(p.answer)))
            raise ValueError("the held-out set covers (almost) every synthetic problem of this difficulty: lower val_problems")
        return [self.train_problems[i] for i in rng.sample(range(len(self.train_problems)), min(n, len(self.train_problems)))]

    def _encode(self, prompt: str) -> list[int]:
        ids = self.tok.encode(self.cfg.prompt_template.format(prompt=prompt), add_special_tokens=False)
        if not ids or len(ids) > self.cfg.max_prompt_len:
            raise ValueError(f"a prompt of {len(ids)} tokens does not fit max_prompt_len={self.cfg.max_prompt_len}: {prompt[:80]!r}")
        return ids

    def _answer_tokens(self, response: list[int]) -> list[int] | None:
        ans = extract_boxed(self.tok.decode(response, skip_special_tokens=True))
        return self.tok.encode(ans, add_special_tokens=False) or None if ans else None

    # ---------------------------------------------------------------- one step
    def _rollout(self, batch, seed: int) -> tuple[list[PromptTree], RolloutTimes, dict]:
        cfg = self.cfg
        ids, prompts, golds = [b[0] for b in batch], [self._encode(b[1]) for b in batch], [b[2] for b in batch]
        census: dict = {}
        if cfg.rollout == "tree":
            tcfg = TreeConfig(cfg.chains, cfg.siblings, cfg.max_response_len, cfg.temperature, cfg.top_p, cfg.max_refills)
            trees, times = tree_rollout(prompts, ids, golds, self.backend, self.selector, self.reads, self.newline, tcfg, self.eos, seed,
                                        self._answer_tokens if cfg.selector == "lens_shift" else None)
        elif cfg.rollout == "flat":
            trees, times = flat_rollout(prompts, ids, golds, self.backend, cfg.group_size, cfg.max_response_len, self.eos, seed,
                                        cfg.temperature, cfg.top_p)
        else:
            scfg = TwoStageConfig(cfg.chains, cfg.siblings, cfg.two_stage_t_min, cfg.two_stage_t_max, cfg.max_response_len, cfg.early_eos)
            trees, times = [], RolloutTimes()
            start = time.perf_counter()
            for j, (i, p, g) in enumerate(zip(ids, prompts, golds)):
                leaves, c = two_stage_rollout(self.backend.generate, p, scfg, self.newline, self.eos, cfg.temperature, cfg.top_p, seed + 104729 * j)
                trees.append(PromptTree(i, g, leaves))
                census = {k: census.get(k, 0) + v for k, v in c.items()}
            times.generate_s = time.perf_counter() - start
            times.tokens_generated = sum(len(leaf.response) - leaf.prefix_len for t in trees for leaf in t.leaves)
        for tree in trees:
            for leaf in tree.leaves:
                text = self.tok.decode(leaf.response, skip_special_tokens=True)
                leaf.truncated = not leaf.response or leaf.response[-1] != self.eos
                leaf.reward, leaf.correct = leaf_reward(text, tree.gold, len(leaf.response), self.reward_cfg, self.grader)
        return trees, times, census

    def train_step(self) -> dict:
        cfg, step = self.cfg, self.step
        t0 = time.perf_counter()
        kept: list[PromptTree] = []
        generated: list[PromptTree] = []
        times = RolloutTimes()
        census: dict = {}
        for round_ in range(cfg.max_gen_rounds):
            trees, t, c = self._rollout(self._draw(step, round_), seed=(cfg.seed * 1_000_003 + step) * 1_000_000_007 + round_ * 10_000_019)  # disjoint seed ranges
            times.generate_s += t.generate_s
            times.select_s += t.select_s
            times.tokens_generated += t.tokens_generated
            census = {k: census.get(k, 0) + v for k, v in c.items()}
            generated += trees
            kept += [tr for tr in trees if not (cfg.dynamic_sampling and tr.homogeneous)]
            if len(kept) >= cfg.prompts_per_step:
                break
        if not cfg.dynamic_sampling or not kept:
            kept = kept or generated  # nothing with reward variance: the step is homogeneous
        kept = kept[: cfg.prompts_per_step]
        t_rollout = time.perf_counter() - t0

        t1 = time.perf_counter()
        rows = []  # (prompt, response, advantage per token)
        for tree in kept:
            for leaf, adv in zip(tree.leaves, advantages(tree, cfg.advantage, self.newline, cfg.prefix_beta, cfg.prefix_alpha, cfg.subsegments)):
                rows.append((leaf.prompt, leaf.response, adv))
        update = self._update(rows, step)
        t_update = time.perf_counter() - t1
        t2 = time.perf_counter()
        if self.is_vllm:
            self.backend.load_weights(self.policy.state_dict())
        t_sync = time.perf_counter() - t2
        self.step += 1

        leaves = [leaf for tr in generated for leaf in tr.leaves]
        kept_leaves = [leaf for tr in kept for leaf in tr.leaves]
        all_adv = torch.cat([a for _, _, a in rows]) if rows else torch.zeros(0)
        # each group's first leaf is its root chain; its shared prefix ends at the fork (tree) or the stop τ (two-stage)
        forks = [(tr.leaves[idx[0]].prefix_len, len(tr.leaves[idx[0]].response)) for tr in generated for idx in tr.groups().values()]
        if cfg.rollout == "flat":
            forks = []
        groups = [[tr.leaves[i] for i in idx] for tr in generated for idx in tr.groups().values()]
        total = time.perf_counter() - t0
        m = {
            "step": self.step,
            "reward_mean": _mean([leaf.reward for leaf in leaves]),
            "accuracy": _mean([float(leaf.correct) for leaf in leaves]),
            "kept_accuracy": _mean([float(leaf.correct) for leaf in kept_leaves]),
            "groups_generated": len(generated),
            "groups_kept": len(kept),
            "groups_homogeneous": sum(tr.homogeneous for tr in generated),
            "adv_mean": all_adv.mean().item() if all_adv.numel() else 0.0,
            "adv_std": all_adv.std(correction=0).item() if all_adv.numel() else 0.0,
            "adv_absmax": all_adv.abs().max().item() if all_adv.numel() else 0.0,
            "fork_positions": [f for f, _ in forks],
            "fork_rel_mean": _mean([f / max(1, n) for f, n in forks]),
            "sibling_disagreement": _mean([float(len({leaf.correct for leaf in g}) > 1) for g in groups if len(g) > 1]),
            "refills": sum(tr.refills for tr in generated),
            "fallbacks": sum(tr.fallbacks for tr in generated),
            "probe_tokens": sum(tr.probe_tokens for tr in generated),
            "probe_frac": times.select_s / total if total else 0.0,
            "truncated_frac": _mean([float(leaf.truncated) for leaf in leaves]),
            "tokens_generated": times.tokens_generated,
            "tokens_trained": sum(len(r) for _, r, _ in rows),
            "time_generate": times.generate_s,
            "time_select": times.select_s,
            "time_rollout": t_rollout,
            "time_update": t_update,
            "time_sync": t_sync,
            "time_step": total,
            **update,
            **({f"census_{k}": v for k, v in census.items()}),
        }
        return m

    def _update(self, rows, step: int) -> dict:
        cfg = self.cfg
        if not rows:
            return {"loss": 0.0, "grad_norm": 0.0, "clip_frac": 0.0, "optimizer": "no rows", "lr": self.sched.get_last_lr()[0]}
        order = list(range(len(rows)))
        random.Random(cfg.seed * 7 + step).shuffle(order)
        minis = [order[i::cfg.minibatches] for i in range(cfg.minibatches)]
        old = {}
        if cfg.loss == "composite" and cfg.minibatches > 1:
            with torch.no_grad():
                for chunk in _chunks(order, cfg.micro_batch):
                    lp, _ = response_logprobs(self.policy, [rows[i][0] for i in chunk], [rows[i][1] for i in chunk], self.pad)
                    for j, i in enumerate(chunk):
                        old[i] = lp[j, : len(rows[i][1])]
        losses, norms, clips, kinds = [], [], [], []
        for mb in minis:
            if not mb:
                continue
            active = [i for i in mb if rows[i][2].abs().max().item() > 0 and len(rows[i][1]) > 0]
            if not active and cfg.homogeneous != "backward":
                if cfg.homogeneous == "zero_grad_step":
                    zero_grad_step(self.opt)
                    self.sched.step()
                kinds.append(cfg.homogeneous)
                continue
            todo = mb if cfg.homogeneous == "backward" else active
            n_tokens = max(1, sum(len(rows[i][1]) for i in mb))
            self.opt.zero_grad(set_to_none=True)
            total = 0.0
            for chunk in _chunks(todo, cfg.micro_batch):
                logp, mask = response_logprobs(self.policy, [rows[i][0] for i in chunk], [rows[i][1] for i in chunk], self.pad)
                adv = torch.zeros_like(logp)
                for j, i in enumerate(chunk):
                    adv[j, : len(rows[i][1])] = rows[i][2]
                if cfg.loss == "composite":
                    old_lp = torch.zeros_like(logp)
                    for j, i in enumerate(chunk):
                        old_lp[j, : len(rows[i][1])] = old[i] if i in old else logp[j, : len(rows[i][1])].detach()
                    loss, info = composite_loss(logp, old_lp, adv, mask, n_tokens, cfg.clip_low, cfg.clip_high)
                else:
                    loss, info = flat_loss(logp, adv, mask, n_sequences=len(mb))
                loss.backward()
                total += loss.item()
                clips.append(info["clip_frac"])
            norms.append(torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip).item())
            self.opt.step()
            self.sched.step()
            losses.append(total)
            kinds.append("step")
        return {"loss": _mean(losses), "grad_norm": _mean(norms), "clip_frac": _mean(clips), "optimizer": ",".join(kinds),
                "lr": self.sched.get_last_lr()[0]}

    # ---------------------------------------------------------------- validation
    @torch.no_grad()
    def validate(self) -> dict:
        """Accuracy on the held-out problems, decoded as the paper validates (temperature 1.0, top-p 0.95, by
        default; ``val_temperature=0`` is greedy), ``val_samples`` draws per problem with fixed seeds (the same
        draws for every run and step, so curves compare with less noise). ``val_correct`` lists each problem's
        correct draws, for paired statistics across runs."""
        cfg = self.cfg
        prompts = [self._encode(p) for _, p, _ in self.val_problems]
        n = 1 if cfg.val_temperature == 0 else cfg.val_samples
        outs = self.backend.generate([p for p in prompts for _ in range(n)], max_new_tokens=cfg.max_response_len,
                                     temperature=cfg.val_temperature, top_p=cfg.val_top_p if cfg.val_temperature else 1.0,
                                     seed=10**6, eos_token_id=self.eos)
        texts = self.tok.batch_decode(outs, skip_special_tokens=True)
        ok = [self.grader.grade(texts[i * n + j], g) for i, (_, _, g) in enumerate(self.val_problems) for j in range(n)]
        counts = [sum(ok[i * n : (i + 1) * n]) for i in range(len(self.val_problems))]
        return {"val_accuracy": sum(ok) / len(ok), "val_correct": counts, "val_samples": n}

    # ---------------------------------------------------------------- run, save, resume
    def run(self) -> list[dict]:
        from tqdm import tqdm

        cfg = self.cfg
        metrics_path = self.out / "metrics.jsonl"
        (self.out / "config.yaml").write_text(_yaml(cfg.to_dict()))
        rows = []
        if self.step == 0:
            metrics_path.write_text("")
            rows.append({"step": 0, **self.validate()})
            _append(metrics_path, rows[-1])
        bar = tqdm(range(self.step, cfg.steps), desc=f"training ({cfg.rollout}, {cfg.selector})", disable=not cfg.progress,
                   initial=self.step, total=cfg.steps)
        for _ in bar:
            m = self.train_step()
            if (cfg.val_every and self.step % cfg.val_every == 0) or self.step == cfg.steps:
                m.update(self.validate())
            rows.append(m)
            _append(metrics_path, m)
            bar.set_postfix(acc=f"{m['accuracy']:.2f}", kept=m["groups_kept"], **({"val": f"{m['val_accuracy']:.2f}"} if "val_accuracy" in m else {}))
            if (cfg.save_every and self.step % cfg.save_every == 0) or self.step == cfg.steps:
                self.save()
        self.policy.save_pretrained(self.out / "final")
        self.tok.save_pretrained(self.out / "final")
        return rows

    def save(self) -> None:
        """Atomic: written beside the old checkpoint, then swapped in by renames."""
        tmp, old = self.out / "checkpoint.tmp", self.out / "checkpoint.old"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        self.policy.save_pretrained(tmp / "model")
        self.tok.save_pretrained(tmp / "model")
        torch.save({"optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(), "torch_rng": torch.get_rng_state(),
                    "python_rng": random.getstate()}, tmp / "trainer.pt")
        (tmp / "state.json").write_text(json.dumps({"step": self.step, "config": self.cfg.to_dict()}, indent=1))
        if self.ckpt.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(self.ckpt, old)
        os.replace(tmp, self.ckpt)
        shutil.rmtree(old, ignore_errors=True)

    def _load(self) -> None:
        state = json.loads((self.ckpt / "state.json").read_text())
        self.step = state["step"]
        blob = torch.load(self.ckpt / "trainer.pt", weights_only=False)
        self.opt.load_state_dict(blob["optimizer"])
        self.sched.load_state_dict(blob["scheduler"])
        torch.set_rng_state(blob["torch_rng"])
        random.setstate(blob["python_rng"])
        path = self.out / "metrics.jsonl"
        if path.exists():  # drop rows written after the checkpoint (a crash between save points)
            kept = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= self.step]
            path.write_text("".join(line + "\n" for line in kept))


def _chunks(xs: list, n: int):
    for i in range(0, len(xs), n):
        yield xs[i : i + n]


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else math.nan


def _append(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def _yaml(d: dict) -> str:
    import yaml

    return yaml.safe_dump(d, sort_keys=False)
