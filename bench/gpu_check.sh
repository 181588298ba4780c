#!/usr/bin/env bash
# Every GPU check in one script, in stages, each under its own time limit and each writing its results into OUTDIR as
# soon as it finishes (a stage cut off by its limit loses only its own unfinished rows):
#   env         the machine, the versions                                   -> env.txt
#   compile     every Triton kernel for sm_90a: registers, spills, wgmma      -> sm90.md, sm90.json
#   tests       the GPU tests (Triton kernels against the reference)         -> gpu_tests.log
#   kernels     benchmarks: CUDA events over inputs rotated through 4x L2,   -> gpu-*.md/.json/.csv (rows written as
#               with the copy bandwidth and bf16 matmul rate measured too       they are measured)
#   e2e         a Qwen3-0.6B-shaped random model in bf16: packed vs naive     -> gpu_e2e.json (appended per measurement)
#               reads, the read share of a tree RLVR step, training log-prob memory
#   train       2 steps of bsb train under torchrun (world size 1, NCCL,     -> gpu_train.json
#               FSDP2, bf16) on a Qwen3-0.6B-shaped random model: step time split, peak memory
# Usage: bench/gpu_check.sh OUTDIR. Under 10 minutes on one H200 (10 + 60 + 110 + 170 + 120 + 120 s of limits). At most
# 9 files land in OUTDIR. Needs python3 with torch (CUDA), triton, transformers, pytest, pytest-benchmark, hypothesis.
set -uo pipefail
out=${1:?usage: bench/gpu_check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
py=${PYTHON:-python3}
log() { echo "[$(date -u +%T)] $*" | tee -a "$out/stages.log"; }

stage() {  # stage NAME SECONDS COMMAND...: SIGINT at the limit (Python unwinds and writes what it has), SIGKILL 10 s later
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout -s INT -k 10 "$limit" "$@"
  local rc=$?
  log "stage $name: exit $rc after $((SECONDS - start)) s (limit $limit s)"
}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  "$py" -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
  missing=$("$py" -c "import importlib.util as u; print(' '.join(m for m in ('pytest', 'hypothesis', 'pytest_benchmark', 'transformers') if u.find_spec(m) is None))")
  [ -n "$missing" ] && echo "missing python packages: $missing"
  "$py" setup.py -q build_ext --inplace >/dev/null 2>&1 && echo "bsb._C built" || echo "bsb._C not built (CPU provider skipped)"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

stage compile 60 "$py" bench/sm90.py --out "$out"
stage tests 110 "$py" -m pytest tests/kernels -m gpu -q -p no:cacheprovider -x > "$out/gpu_tests.log" 2>&1
tail -3 "$out/gpu_tests.log"
rm -f bench/results/gpu-*
stage kernels 170 "$py" -m pytest bench/test_bench_rows.py bench/test_bench_lens.py bench/test_bench_logprobs.py -q -p no:cacheprovider \
  --benchmark-disable-gc > "$out/bench.log" 2>&1
cp bench/results/gpu-*.md bench/results/gpu-*.json "$out/" 2>/dev/null
stage e2e 120 "$py" bench/gpu_e2e.py "$out"
stage train 120 "$py" -m torch.distributed.run --standalone --nproc_per_node=1 bench/gpu_train.py "$out" >> "$out/bench.log" 2>&1
ls -l "$out"
