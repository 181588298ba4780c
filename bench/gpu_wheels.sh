#!/usr/bin/env bash
# The Python 3.12 manylinux x86_64 wheels the GPU machine's image lacks, fetched here (the GPU machine has no network)
# into a folder that travels beside the tree; bench/gpu_check.sh installs them (pip --no-index --target) before its
# first stage.
#
# The image (Python 3.12) has torch 2.11, Triton 3.6, transformers 5.17, tokenizers, safetensors, huggingface_hub,
# numpy, scipy, matplotlib, tensorboard, pytest, pytest-benchmark, hypothesis, PyYAML, tqdm, rich and pyarrow: every
# import of the check but bsb's math grader. What travels, and what does not:
#   math-verify 0.9.0 + latex2sympy2_extended 1.11.0 + antlr4-python3-runtime 4.13.2   about 1 MB together
#   vLLM (>= 0.19.1, the floor)      left out: a wheel of about 500 MB; the GPU check runs the HF path
#   flashinfer (flashinfer-python)   left out: 0.7.4 is a 101 MB wheel before its CUDA dependencies (cuda-python,
#                                    nvidia-cutlass-dsl, apache-tvm-ffi, ...), and older releases ship no wheel and
#                                    compile their kernels with nvcc at first use (minutes the check does not have)
# The tree and the wheels travel together in 64 MiB; this script fails if they would not fit.
#
# Usage: bench/gpu_wheels.sh [DIR]      (DIR defaults to .whl, which it adds to .git/info/exclude; carry it to the
#                                        GPU machine beside the tree: the device tool's carry=[".whl"])
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.whl}
py=${PYTHON:-python3}
budget=$((64 * 1024 * 1024))
wheels=(math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2)

mkdir -p "$dest"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dest" "${wheels[@]}"
if [ "$dest" = .whl ] && [ -d .git ] && ! grep -qx '/.whl/' .git/info/exclude 2>/dev/null; then
  echo '/.whl/' >> .git/info/exclude  # carried explicitly, never committed
fi
# what travels besides: tracked and untracked-not-ignored files (a deleted tracked file counts nothing)
tree=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null || true) | awk '{s += $1} END {print s + 0}')
carried=$(stat -c %s "$dest"/*.whl | awk '{s += $1} END {print s + 0}')
ls -l "$dest"
echo "tree $((tree / 1024)) KiB + wheels $((carried / 1024)) KiB of $((budget / 1024)) KiB"
[ $((tree + carried)) -le "$budget" ] || { echo "over the 64 MiB the GPU machine takes" >&2; exit 1; }
