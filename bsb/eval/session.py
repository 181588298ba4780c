"""The offline commands' shared session (validate, evaluate, demo): what they are given (:class:`OfflineConfig`: the
probe options of :class:`~bsb.engine.probe.ProbeConfig`, the model, the task and its problems, the prompt format, the
device and dtype, an optional LLM judge for the ``llm_judge`` baseline) and what they open from it
(:func:`open_session`: task, tokenizer, model, HF backend, newline mask and the rendered problems, the probe options
checked against the model as ``bsb train`` checks them), written once."""

from __future__ import annotations

from collections.abc import Mapping, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bsb.engine.probe import ProbeConfig, answer_ids, check_against_model, resolve
from bsb.engine.run_options import RunOptions
from bsb.fields import check_values
from bsb.fields import help_field as _f
from bsb.tasks.base import hook
from bsb.tasks.prompting import PromptConfig

JUDGE = ("judge_url", "judge_model", "judge_endpoint", "judge_key_env", "judge_template", "judge_timeout_s")


@dataclass
class OfflineConfig(RunOptions, ProbeConfig, PromptConfig):
    """What every offline command is given: the run options of :class:`~bsb.engine.run_options.RunOptions` (``MODEL``
    positional, ``--task``, ``--task-option``, ``--device``, ``--dtype``), the probe and candidate options of
    :class:`~bsb.engine.probe.ProbeConfig` (inherited, flat: ``--top-k``, ``--lens-layers``, ...), the prompt options
    of :class:`~bsb.tasks.prompting.PromptConfig` (``--prompt-format``, ``--prompt-template``, ..., as ``bsb train``
    has them) and the fields below. Invalid values are one ``ValueError``, before anything loads."""

    problems: str | None = _f(
        None,
        "a problem file (JSONL / JSON / Parquet / CSV; the math task's held-out set); default: the task's own problems",
        positional=True,
    )
    stop: tuple[str, ...] = _f(
        (),
        "texts that end a response as the EOS does, each one token of the tokenizer (a base model that writes on "
        "past its answer after few-shot examples: --stop $'\\n\\n')",
    )
    judge_url: str | None = _f(
        None,
        "an OpenAI-compatible endpoint for the llm_judge baseline (or 'local' with a checkpoint path as --judge-model)",
    )
    judge_model: str | None = _f(None, "the judge's model name at --judge-url (or its local path)")
    judge_endpoint: str = _f("chat", "the judge's API", choices=("chat", "completions"))
    judge_key_env: str = _f("BSB_JUDGE_API_KEY", "environment variable holding the judge's API key (optional)")
    judge_template: str | None = _f(None, "a judge prompt template file (default: bsb/engine/judge_prompt.txt)")
    judge_timeout_s: float = _f(60.0, "seconds a judge request may take", gt=0, le=3600)

    def __post_init__(self):
        check_values(self)  # every field's facts, a subclass's too
        problems = self.run_problems() + self.probe_problems() + self.prompt_problems()
        if problems:
            raise ValueError(f"invalid config: {'; '.join(problems)}")
        if self.judge_url is not None and not self.judge_model:
            raise ValueError(
                "--judge-url needs --judge-model (the model name at that endpoint, or a local checkpoint with "
                "--judge-url local)"
            )


@dataclass
class Session:
    """What an offline command works on, opened once by :func:`open_session`."""

    task: Any
    path: Path  # the checkpoint directory
    tok: Any
    model: Any
    hf: Any  # the HF backend on the model (white-box reads, generation)
    newline: Any  # (V,) bool newline-token mask
    eos: int | tuple[int, ...] | None  # what ends a response: the tokenizer's EOS, and the --stop tokens when given
    problems: list = field(default_factory=list)
    prompts: list[list[int]] = field(default_factory=list)  # each problem rendered and encoded
    probe: ProbeConfig = field(default_factory=ProbeConfig)  # the command's probe options, checked against the model

    def decode(self, ids) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def answer_ids(self, text: str) -> list[int] | None:
        """The committed answer of a decoded response as token ids (Lens-Shift's teacher-forced answer), or None."""
        return answer_ids(self.task, self.tok, text)

    def selector_config(self, probe: ProbeConfig | None = None, **extra):
        """The :class:`~bsb.engine.probe.SelectorConfig` of ``probe`` (default: the session's, the command's own
        options) on this session's task and tokenizer; ``extra``: seed, bsv_path, judge, decode."""
        return resolve(probe if probe is not None else self.probe, self.task, self.tok, **extra)

    def gold_ids(self, problem) -> list[int]:
        """The gold answer as it follows the elicitation suffix, as token ids (the figures' belief in the gold
        answer): at most the task's ``answer_len`` first tokens, as the chain's own committed answer."""
        ids = self.tok.encode(self.task.gold_continuation(problem), add_special_tokens=False)
        return ids[: hook(self.task, "answer_len")]

    def closing_ids(self, ids: list[int]) -> list[int]:
        """Every token that writes the text of ``ids``' last token and maybe more: how the model may close the gold
        answer. A boxed ``4}`` is ``4`` then ``}``, but a model that ends its answer with ``}.`` writes that as one
        token; the belief counts each way to close it (:func:`bsb.eval.value_curve.answer_belief`)."""
        if not ids:
            return []
        found = self.__dict__.setdefault("_closers", {})  # by last token: a set repeats its gold answers
        if ids[-1] not in found:
            vocab = self.__dict__.get("_vocab")
            if vocab is None:  # the vocabulary's pieces, read once a session (262k of them for Gemma)
                vocab = self.__dict__["_vocab"] = self.tok.convert_ids_to_tokens(list(range(len(self.tok))))
            last = vocab[ids[-1]] if ids[-1] < len(vocab) else None
            found[ids[-1]] = (
                [i for i, piece in enumerate(vocab) if piece is not None and piece.startswith(last)]
                if last
                else [ids[-1]]
            )
        return list(found[ids[-1]])


def open_session(
    cfg: OfflineConfig,
    n_problems: int,
    seed: int,
    task_options: Mapping | None = None,
    path: str | Path | None = None,
    task=None,
) -> Session:
    """The task (``task`` when given, else ``cfg.task`` with ``task_options``, default ``cfg.task_options``), the
    checkpoint (``path``, else ``cfg.model`` resolved against the task), its tokenizer and model on ``cfg.device`` /
    ``cfg.dtype``, the HF backend, the newline mask, and ``n_problems`` of the task's sample for ``seed`` encoded by
    ``cfg``'s prompt options (:meth:`~bsb.tasks.prompting.PromptConfig.encode`, as ``bsb train`` encodes them).
    ``cfg``'s ``top_k`` and ``lens_layers`` are checked against the model as soon as it is loaded (one ``ValueError``
    before any problem is drawn)."""
    import transformers

    from bsb import min_versions
    from bsb.embedded.model import resolve_model
    from bsb.engine.boundaries import newline_token_mask
    from bsb.engine.hf_backend import HFBackend
    from bsb.engine.hf_model import load_for_inference
    from bsb.tasks.registry import offline_task

    min_versions.check("transformers")
    if task is None:
        task = offline_task(cfg.task, cfg.task_options if task_options is None else task_options, cfg.problems)
    path = Path(path) if path is not None else resolve_model(cfg.model, task)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    eos = stop_tokens(tok, cfg.stop)
    model = load_for_inference(path, cfg.device, cfg.dtype)
    hf = HFBackend(model, tok)
    check_against_model(cfg, hf.vocab_size, model.config.num_hidden_layers)
    problems = task.sample(n_problems, seed)
    prompts = [cfg.encode(task, p, tok) for p in problems]
    newline = newline_token_mask(tok, hf.vocab_size)
    return Session(task, path, tok, model, hf, newline, eos, problems, prompts, cfg)


def stop_tokens(tok, stop) -> int | tuple[int, ...] | None:
    """The tokenizer's EOS, or it and the token of each ``stop`` text (one ``ValueError`` for a text that is not one
    token: a stop must be a token the model writes, or it would never end a response)."""
    if not stop:
        return tok.eos_token_id
    ids = []
    for text in stop:
        got = tok.encode(text, add_special_tokens=False)
        if len(got) != 1:
            raise ValueError(
                f"--stop {text!r} is {len(got)} tokens for this tokenizer ({got}); each stop text must be one token"
            )
        ids.append(got[0])
    return tuple(dict.fromkeys(([tok.eos_token_id] if tok.eos_token_id is not None else []) + ids))


def jsonable(value):
    """``json.dumps`` default for what a task keeps as a gold answer (the code task's CodeTests: its fields)."""
    import dataclasses

    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else str(value)


def gold_label(answer) -> str:
    """A short label of a gold answer for titles: the answer, or the number of hidden tests (the code task)."""
    if isinstance(answer, (str, int, float)):
        return str(answer)[:40]
    return f"{len(answer)} hidden tests" if isinstance(answer, Sized) else str(answer)[:40]


def judge_client(cfg: OfflineConfig):
    """The judge of ``llm_judge`` the config names (None when it names none)."""
    if cfg.judge_url is None:
        return None
    if cfg.judge_template is not None and not Path(cfg.judge_template).is_file():
        raise FileNotFoundError(f"judge template {cfg.judge_template!r} is not a file")
    from bsb.engine.judge import LocalJudge, OpenAIJudge

    if cfg.judge_url == "local":
        import transformers

        from bsb.embedded.model import resolve_model
        from bsb.engine.hf_backend import HFBackend
        from bsb.engine.hf_model import load_for_inference

        path = resolve_model(cfg.judge_model)
        tok = transformers.AutoTokenizer.from_pretrained(path)
        return LocalJudge(HFBackend(load_for_inference(path, cfg.device, cfg.dtype), tok), tok)
    return OpenAIJudge(cfg.judge_url, cfg.judge_model, cfg.judge_endpoint, cfg.judge_key_env, cfg.judge_timeout_s)
