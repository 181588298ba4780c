#!/usr/bin/env bash
# Every GPU check in one command, in stages, each under its own time limit and each writing into OUTDIR as it goes (a
# stage cut off by its limit loses only its own unfinished rows). The stages (`--table` prints them for the docs):
#   env       installs the carried wheels (bench/gpu_wheels.sh), then records the machine, the versions  -> stages.log
#             and checks them against bsb's minimum versions
#   kernels   the ceilings first (copy bandwidth, bf16 and fp32 matmul rate), then the lens (MMA), row  -> gpu-<GPU>.json, after every row
#             and log-prob benchmarks: CUDA events over inputs rotated through 4x the L2 size
#   warm      one tiny tree-packed forward and backward through the compiled flex attention at three    -> warm.json
#             lengths (bench/gpu_warm.py), so the timed stages find its kernels in inductor's disk cache
#   e2e       a Qwen3-0.6B-shaped random model in bf16 (bench/gpu_e2e.py): a tree RLVR step with        -> gpu_e2e.json, after every row
#             Probe-JS and Lens-Shift reading from the kept keys and values first; packed vs naive reads
#             at 1,024 and 4,096 tokens with C = 16; the training log-probs' peak memory at 16 x 4,096
#   tests     the GPU tests, every Triton kernel against the reference in fp32, bf16 and fp16: the lens's -> tests.log
#             (its bf16 tl.dot) first, then the rest (the merge kernels' compiles come last)
#   train     2 steps of the trainer (bench/gpu_train.py) under torchrun, with NCCL, FSDP2 and bf16, on    -> gpu_train.json, after every step
#             the same shape: each step's time split and memory
#   update    the tree mask built on the host and on the device per group size (9k, 25k, 45k tokens); the -> bench.log, after every row
#             update per path and tree-packed under bf16 autocast on paper-shaped trees (28 layers, chains
#             of 1,024 and 2,048, forks at the midpoint): token-forwards, time, peak memory and the two
#             packings' gradient difference; one checkpointed 8,192-token row's measured peak against the
#             activation model; the two packings on an OLMo-3 shape whose sliding layers see 512 keys
# The figures that matter come first (the kernels' rows, then the tree step's), the GPU tests after them. Every stage
# ends with its processes: whatever it started that is still running (torchrun's workers start in their own session,
# beyond timeout's reach) is killed before the next starts. The sm_90a compile report needs no GPU and is not a stage here:
# `python bench/sm90.py` on any machine writes bench/results/sm90.{md,json}.
# At most 8 files land in OUTDIR (the GPU machine returns 8). The stage limits, plus 5 s for each stage to unwind
# after SIGINT, add up to 480 s: the whole check fits in 8 minutes on one H100 or H200.
#
# Usage:
#   bench/gpu_check.sh OUTDIR            on the GPU machine (python3 with torch + CUDA, Triton, transformers, pytest,
#                                        pytest-benchmark, hypothesis; PYTHON=... picks another interpreter)
#   bench/gpu_check.sh --dry-run         print the stage plan and its limits; fails if they exceed 480 s
#   bench/gpu_check.sh --smoke OUTDIR    every stage's script at toy sizes on the CPU, under the same limits (CI runs it)
#   bench/gpu_check.sh --table           the stage table of docs/performance.md, from this header and STAGES
set -uo pipefail

BUDGET=480  # seconds: 8 of the GPU machine's 10 minutes per command
GRACE=5     # seconds a stage gets to write what it has after SIGINT, before SIGKILL
# name and limit (seconds) of every stage, in order
STAGES=(env:20 kernels:85 warm:30 e2e:80 tests:80 train:90 update:60)

# what a stage left running (a torchrun worker in its own session, a compile worker) ends with it: every process
# whose environment carries this run's BSB_GPU_CHECK_RUN tag (inherited by everything the stages start), never one
# that another run or user started, even of the same scripts (matching command lines killed a test's bench/gpu_e2e.py
# run beside `--smoke`)
reap() {  # reap TAG
  local p
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    grep -qzxF "BSB_GPU_CHECK_RUN=$1" "$p/environ" 2>/dev/null && kill -KILL "${p#/proc/}" 2>/dev/null
  done
  return 0
}

mode=gpu
case "${1:-}" in
  --dry-run) mode=dry ;;
  --table) mode=table ;;
  --smoke) mode=smoke; shift ;;
  --reap) reap "${2:?usage: bench/gpu_check.sh --reap TAG}"; exit ;;  # what a stage does as it ends (tested alone)
esac

total=0
for s in "${STAGES[@]}"; do total=$((total + ${s#*:} + GRACE)); done
if [ "$mode" = table ]; then  # one row a stage: its header entry split at "->", its limit from STAGES
  echo "| stage | limit | what | writes |"
  echo "|---|---|---|---|"
  limits=" ${STAGES[*]} "
  awk -v limits="$limits" '
    /^# At most 8 files/ { flush(); go = 0 }
    go && /^#   [a-z0-9]+ / {
      flush(); name = $2; line = substr($0, 5 + length(name)); at = index(line, "->")
      what = substr(line, 1, at - 1); writes = substr(line, at + 2); next
    }
    go && /^#     / { what = what " " substr($0, 2); next }
    /^# stage cut off/ { go = 1 }
    function flush(   lim) {
      if (name == "") return
      gsub(/  +/, " ", what); gsub(/^ +| +$/, "", what); gsub(/^ +| +$/, "", writes)
      match(limits, " " name ":[0-9]+ "); lim = substr(limits, RSTART + length(name) + 2, RLENGTH - length(name) - 3)
      printf "| %s | %s s | %s | %s |\n", name, lim, what, writes
      name = ""
    }' "$0"
  total=0
  for s in "${STAGES[@]}"; do total=$((total + ${s#*:} + GRACE)); done
  echo
  echo "With $GRACE s of grace a stage, the limits add up to $total s."
  exit
fi
if [ "$mode" = dry ]; then
  for s in "${STAGES[@]}"; do echo "stage ${s%%:*} ${s#*:} s"; done
  echo "total $total s with $GRACE s of grace a stage (budget $BUDGET s)"
  [ "$total" -le "$BUDGET" ]
  exit
fi

out=${1:?usage: bench/gpu_check.sh [--dry-run | --smoke] OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export BSB_GPU_CHECK_RUN="$$-$(date +%s%N)"  # this run's tag: what reap ends
py=${PYTHON:-python3}
if [ "$mode" = gpu ]; then unset TRITON_INTERPRET; else export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""; fi
failed=0
log() { echo "[$(date -u +%T)] $*" | tee -a "$out/stages.log"; }
limit() { local s; for s in "${STAGES[@]}"; do [ "${s%%:*}" = "$1" ] && echo "${s#*:}"; done; }


stage() {  # stage NAME COMMAND...: SIGINT at the limit (Python unwinds and writes what it has), SIGKILL GRACE s later
  local name=$1 lim start rc
  lim=$(limit "$1")
  shift
  start=$SECONDS
  log "stage $name: start (limit $lim s)"
  timeout -s INT -k "$GRACE" "$lim" "$@"
  rc=$?
  reap "$BSB_GPU_CHECK_RUN"
  [ "$rc" -ne 0 ] && failed=$((failed + 1))
  log "stage $name: exit $rc after $((SECONDS - start)) s (limit $lim s)"
}

env_stage() {
  local wheels=${BSB_WHEELS:-.whl}
  if compgen -G "$wheels/*.whl" >/dev/null; then  # the wheels the image lacks, carried beside the tree
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/bsb-site "$wheels"/*.whl &&
      echo "installed $(ls "$wheels" | tr '\n' ' ')"
  fi
  date -u
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$py" - <<'EOF'
import importlib.util as u
import torch, triton, transformers
from bsb import min_versions
print("python", __import__("sys").version.split()[0], "torch", torch.__version__, "triton", triton.__version__,
      "transformers", transformers.__version__, "cuda", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
for package in ("torch", "triton", "transformers"):
    min_versions.check(package)
missing = [m for m in ("pytest", "hypothesis", "pytest_benchmark", "math_verify") if u.find_spec(m) is None]
print("missing python packages:", " ".join(missing) or "none")
EOF
}
export -f env_stage
export py out PYTHONPATH="/tmp/bsb-site:$PYTHONPATH"  # the carried wheels first
stage env bash -c 'env_stage >> "$out/stages.log" 2>&1'

if [ "$mode" = gpu ]; then
  rm -f bench/results/gpu-*
  stage kernels "$py" -m pytest bench/test_bench_ceilings.py bench/test_bench_lens.py bench/test_bench_rows.py \
    bench/test_bench_logprobs.py -q -p no:cacheprovider --benchmark-disable-gc > "$out/bench.log" 2>&1
  cp bench/results/gpu-*.json "$out/" 2>/dev/null  # the .md and .csv say the same: 8 files come back
  stage warm "$py" bench/gpu_warm.py "$out" >> "$out/bench.log" 2>&1
  stage e2e "$py" bench/gpu_e2e.py "$out"
  stage tests bash -c '"$py" -m pytest tests/kernels -m gpu -k lens -q -p no:cacheprovider
    "$py" -m pytest tests/kernels -m gpu -k "not lens" -q -p no:cacheprovider' > "$out/tests.log" 2>&1
  tail -3 "$out/tests.log"
  stage train "$py" -m torch.distributed.run --standalone --nproc_per_node=1 bench/gpu_train.py "$out" >> "$out/bench.log" 2>&1
  stage update "$py" bench/update.py --lens 1024 2048 --forks mid --steps 0 --dtype bfloat16 --mem-tokens 8192 \
    --olmo-window 512 >> "$out/bench.log" 2>&1
else  # the same scripts at toy sizes on the CPU: each GPU script's pipeline, in seconds
  stage kernels "$py" -m pytest bench/test_bench_ceilings.py bench/test_bench_lens.py bench/test_bench_rows.py \
    bench/test_bench_logprobs.py -q -p no:cacheprovider --collect-only > "$out/bench.log" 2>&1
  stage warm "$py" bench/gpu_warm.py "$out" --smoke >> "$out/bench.log" 2>&1
  stage e2e "$py" bench/gpu_e2e.py "$out" --smoke
  stage tests "$py" -m pytest tests/kernels -m gpu -k lens -q -p no:cacheprovider --collect-only > "$out/tests.log" 2>&1
  stage train "$py" -m torch.distributed.run --standalone --nproc_per_node=1 bench/gpu_train.py "$out" --smoke >> "$out/bench.log" 2>&1
  stage update "$py" bench/update.py --smoke --steps 0 --mem-tokens 256 --olmo-window 32 >> "$out/bench.log" 2>&1
fi
ls -l "$out"
log "$failed stage(s) failed"
[ "$failed" -eq 0 ]
