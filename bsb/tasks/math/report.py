"""``bsb data FILE``: what a problem file holds, as the model will see it, before a long run.

Prints the recognised schema, the row count, the answer conventions, and the first rows: the rendered prompt (plain,
or through a tokenizer's chat template), the gold answer(s) and how they are matched, and the probe suffix.
"""

from __future__ import annotations

from collections import Counter

from bsb.tasks.math.task import MathTask
from bsb.tasks.prompting import PromptConfig, adds_bos


def data_report(
    path: str,
    format: str | None = None,
    rows: int = 3,
    tokenizer=None,
    prompt: PromptConfig | None = None,
    choice_seed: int = 0,
    console=None,
) -> dict:
    from rich.console import Console
    from rich.panel import Panel

    console = console or Console()
    prompt = prompt or PromptConfig()
    task = MathTask(val_file=path, format=format, choice_seed=choice_seed)
    problems = task.val
    conventions = Counter(p.meta.get("convention", "boxed") for p in problems)
    console.print(
        f"[bold]{path}[/bold]: schema [bold]{task.val_set.schema}[/bold], {len(problems)} problems; "
        f"columns: {', '.join(task.val_set.columns)}"
    )
    console.print(
        f"answer convention: {', '.join(f'{c} ({n})' for c, n in conventions.items())}; "
        f"probe suffix {task.probe_suffix!r}; "
        f"prompt format: {prompt.prompt_format}"
        + (f", template {prompt.prompt_template!r}" if prompt.prompt_template != "{prompt}" else "")
        + (f"; the tokenizer's BOS {tokenizer.bos_token!r} opens each plain prompt" if _bos(tokenizer, prompt) else "")
    )
    shown = []
    for p in problems[:rows]:
        text = prompt.render(task, p, tokenizer)
        answers = p.meta.get("answers", [p.answer])
        how = "all of" if p.meta.get("match") == "all" else ("any of" if len(answers) > 1 else "")
        console.print(Panel(text, title=f"{p.id}: the prompt as the model sees it", title_align="left"))
        console.print(
            f"  gold: {how + ' ' if how else ''}{' | '.join(map(str, answers))}   "
            f"convention: {p.meta.get('convention', 'boxed')}"
        )
        shown.append({"id": p.id, "prompt": text, "gold": p.answer, "answers": answers})
    return {"schema": task.val_set.schema, "rows": len(problems), "conventions": dict(conventions), "shown": shown}


def _bos(tokenizer, prompt: PromptConfig) -> bool:
    return tokenizer is not None and prompt.prompt_format == "plain" and adds_bos(tokenizer)
