"""The README and docs/: the README stays a first screen (under 10 KB), and every link resolves.

Checked for README.md and every docs/*.md:

* every relative link ``[text](target)`` and image ``![alt](target)`` (and reference definitions ``[id]: target``)
  names a file or folder of the repository, relative to the file that holds the link, and never leaves the repository;
* every ``#anchor`` (in-page or ``file.md#anchor``) matches a heading of the target file under GitHub's slug rule;
* http(s) and mailto links are well-formed (they are not fetched: the tests run without network).

Links inside code (fenced blocks and inline code spans) are not links and are skipped.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_LIMIT = 10_240  # bytes

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:.+?)\1", re.S)
# [text](target "title") and ![alt](target); the text may hold one level of brackets ([**[Fork]**](...)).
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(<[^>]*>|\S+)", re.M)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def outside_fences(text: str) -> list[str]:
    """The lines of ``text``, each line of a fenced code block (fences included) blanked out."""
    lines, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            lines.append("")
        elif fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) <= {fence[0]}:
                fence = None
            lines.append("")
        else:
            lines.append(line)
    return lines


def strip_code(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks, with inline code spans blanked out."""
    prose = "\n".join(outside_fences(text))
    return INLINE_CODE.sub(lambda m: " " * len(m.group(0)), prose).split("\n")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text (markup dropped) lowercased, punctuation dropped except
    hyphens and spaces (letters, digits and underscores are kept), spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or image: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in outside_fences(path.read_text(encoding="utf-8")):  # inline code is part of a heading
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in ``path`` outside code."""
    out = []
    for no, line in enumerate(strip_code(path.read_text(encoding="utf-8")), 1):
        for m in INLINE_LINK.finditer(line):
            out.append((no, m.group(2).strip("<>")))
        for m in REF_DEF.finditer(line):
            out.append((no, m.group(2).strip("<>")))
    return out


def problems(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the links of ``path`` (empty when every one resolves)."""
    root = root.resolve()
    errors = []
    for no, target in links(path):
        where = f"{path.relative_to(root)}:{no}: ({target})"
        if not target:
            errors.append(f"{where} empty link target")
            continue
        if SCHEME.match(target):
            url = urlparse(target)
            if url.scheme in ("http", "https"):
                if not url.netloc or "." not in url.netloc or any(c.isspace() for c in target):
                    errors.append(f"{where} malformed URL")
            elif url.scheme == "mailto":
                if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", url.path):
                    errors.append(f"{where} malformed mailto address")
            else:
                errors.append(f"{where} scheme {url.scheme!r}: only relative paths, http(s) and mailto are allowed")
            continue
        file_part, _, anchor = target.partition("#")
        file_part = unquote(file_part)
        if file_part.startswith("/"):
            resolved = (root / file_part.lstrip("/")).resolve()  # GitHub: relative to the repository root
        elif file_part:
            resolved = (path.parent / file_part).resolve()
        else:
            resolved = path.resolve()
        if resolved != root and root not in resolved.parents:
            errors.append(f"{where} leaves the repository")
            continue
        if not resolved.exists():
            errors.append(f"{where} no such file {resolved.relative_to(root)}")
            continue
        if anchor:
            if resolved.is_dir() or resolved.suffix.lower() != ".md":
                errors.append(f"{where} an anchor into a file that is not markdown")
            elif unquote(anchor) not in anchors(resolved):
                errors.append(f"{where} no heading #{anchor} in {resolved.relative_to(root)}")
    return errors


def test_readme_is_a_first_screen():
    size = (ROOT / "README.md").stat().st_size
    assert size < README_LIMIT, f"README.md is {size} bytes; keep it under {README_LIMIT} (move details to docs/)"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(path):
    assert problems(path) == []


def test_every_docs_page_is_in_the_readme_index():
    linked = {(ROOT / t.partition("#")[0]).resolve() for _, t in links(ROOT / "README.md") if not SCHEME.match(t)}
    missing = [p.name for p in doc_files()[1:] if p.resolve() not in linked]
    assert missing == [], f"docs pages the README does not link: {missing}"


def test_slug_rule():
    assert slug("The ops (`bsb.kernels`)") == "the-ops-bsbkernels"
    assert slug("Cost model and `bsb cost`") == "cost-model-and-bsb-cost"
    assert slug("Not met: the probe's share of a training step") == "not-met-the-probes-share-of-a-training-step"
    assert slug("verl's extension points and traps, as bsb uses them") == "verls-extension-points-and-traps-as-bsb-uses-them"
    assert slug("The `bsb_tree` loop") == "the-bsb_tree-loop"


def test_the_checker_catches_broken_links(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Second part\n", encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text(
        "# Top\n\n"
        "[ok](docs/a.md) [ok](docs/a.md#second-part) [ok](#top) [ok](https://example.org/x) [ok](mailto:a@b.org)\n"
        "`[in code](missing.md)`\n\n```\n[in a fence](missing.md)\n```\n"
        "[gone](docs/missing.md) ![img](docs/missing.png) [bad anchor](docs/a.md#nowhere) [bad](#nowhere)\n"
        "[out](../outside.md) [url](https://) [mail](mailto:nobody) [file](file:///etc/passwd)\n"
        "[ref]: docs/also-missing.md\n",
        encoding="utf-8",
    )
    found = problems(page, root=tmp_path)
    assert len(found) == 9, "\n".join(found)
    for needle in ("docs/missing.md", "docs/missing.png", "#nowhere)", "leaves the repository", "malformed URL",
                   "malformed mailto", "scheme 'file'", "also-missing.md"):
        assert any(needle in f for f in found), (needle, found)
    assert not any("in code" in f or "in a fence" in f for f in found)


# ------------------------------------------------------------------ docs/scale.md: the launches compose, the table is made


def _torchrun_lines(page: Path) -> list[str]:
    """Every torchrun command in ``page``'s code blocks, with the shell loops around it unrolled."""
    import itertools
    import re

    lines, loops = [], []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
        loops = [re.match(r"\s*for (\w+) in (.+); do", line).groups() for line in block.splitlines()
                 if re.match(r"\s*for \w+ in .+; do", line)]
        for line in (x.strip() for x in block.splitlines() if x.strip().startswith("torchrun")):
            values = [[(name, v) for v in words.split()] for name, words in loops]
            for combo in itertools.product(*values) if values else [()]:
                text = line
                for name, v in combo:
                    text = text.replace(f"${name}", v)
                lines.append(text)
    return lines


def test_the_scale_launches_compose():
    import shlex

    from torch.distributed.run import get_args_parser

    from bsb.cli import build_parser
    from bsb.train.config import TrainConfig, parse_overrides

    lines = _torchrun_lines(ROOT / "docs" / "scale.md")
    assert len(lines) == 13  # Table 3: three models x four arms on one node, one line for two nodes
    for line in lines:
        launch = get_args_parser().parse_args(shlex.split(line)[1:])
        assert launch.module and launch.training_script == "bsb.cli", line
        args = build_parser().parse_args(launch.training_script_args)
        assert args.command == "train"
        cfg = TrainConfig.from_dict(parse_overrides(args.set, TrainConfig.from_yaml(ROOT / args.config).to_dict()))
        nodes = int(str(launch.nnodes).split(":")[-1])
        world = nodes * int(launch.nproc_per_node)
        assert cfg.prompts_per_step % world == 0 and cfg.gen_prompts % world == 0, line


def test_the_scale_memory_table_is_what_bsb_cost_prints(capsys):
    from bsb.commands.cost import memory_report

    memory_report([str(ROOT / "configs" / "paper")], [1, 2, 4, 8], 150e9, markdown=True)
    printed = capsys.readouterr().out.split("\n\n", 1)[1].strip()
    assert printed in (ROOT / "docs" / "scale.md").read_text()
