#!/usr/bin/env bash
# Every GPU check of the kernels in one script: the Triton fast paths against the reference on the GPU (the
# tests marked `gpu`), then the benchmarks with their side-by-side ratios and the device's measured ceilings.
# Usage: bench/gpu_check.sh OUTDIR. Writes at most 8 files into OUTDIR; budgeted to finish in under 8 minutes
# on one H200 (tests <= 4 min, benchmarks <= 3.5 min, each cut off by timeout).
# Needs python3 with torch (CUDA), triton, pytest, pytest-benchmark, hypothesis (the GPU image has them).
set -uo pipefail
out=${1:?usage: bench/gpu_check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
py=${PYTHON:-python3}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  "$py" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  missing=$("$py" -c "import importlib.util as u; print(' '.join(m for m in ('pytest', 'hypothesis', 'pytest_benchmark') if u.find_spec(m) is None))")
  [ -n "$missing" ] && echo "missing python packages: $missing"
  # The C++ extension serves CPU tensors only; build it when pybind11 is there so the CPU rows run too.
  "$py" setup.py -q build_ext --inplace >/dev/null 2>&1 && echo "bsb._C built" || echo "bsb._C not built (CPU provider skipped)"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

timeout 240 "$py" -m pytest tests/kernels -m gpu -q -p no:cacheprovider --junitxml="$out/gpu_tests.xml" > "$out/gpu_tests.log" 2>&1
echo "gpu tests: exit $? (see gpu_tests.log)"; tail -3 "$out/gpu_tests.log"

timeout 210 "$py" -m pytest bench -q -p no:cacheprovider --benchmark-columns=median,rounds > "$out/bench.log" 2>&1
echo "benchmarks: exit $? (see bench.log)"; tail -3 "$out/bench.log"
cp bench/results/gpu-*.md bench/results/gpu-*.json bench/results/gpu-*.csv "$out/" 2>/dev/null
ls -l "$out"
