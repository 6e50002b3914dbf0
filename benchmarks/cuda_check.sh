#!/usr/bin/env bash
# The CUDA checks of plga in one run: the CUDA tests, the conformance suite on the device (its
# parts side by side: on an H200 the quick profile in one process outran a 120-s cap twice;
# the same profile takes 38 s on a 2-core CPU), the CLI on the device, and
# `plga bench --device "$dev"`. For a machine with a CUDA GPU and an
# environment that already has torch (CUDA build), numpy, mpmath, pytest, hypothesis and
# safetensors; plga is installed from this checkout without touching the network.
#
#   bash benchmarks/cuda_check.sh [OUTDIR] [BENCH_ARGS...]
#
# OUTDIR (default cuda-check-out, or $OUT where set) receives the logs and bench JSON/markdown.
# BENCH_ARGS replace the default bench selection, the rows of the CUDA targets (about 4 minutes
# on an H200): batch-1 decoding of paper-110m in kvg and collapsed, plain and captured (CUDA
# graphs), float32 and bfloat16; prefill eager / fused / bfloat16 at b8 s1024 and the smallest
# shape of both configs; the cold compiles timed, not the cached ones.
# Golden-vector tests read the shipped tests/data ($PLGA_SHARED_DATA overrides it).
# STEP_TIMEOUT_S (default 0: none; 150 suits a 15-minute lease) caps each step before the
# bench, so that one hung step cannot take the bench's time (a conformance run stopped so
# reports the checks that finished, verdict INTERRUPTED; the bench writes
# OUTDIR/bench-cuda.json.partial as it goes and caps each case with --case-timeout-s).
# OUTDIR receives seven files, logs and bench results; the CLI step's tokens, arrays and audit
# go to a temporary folder.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-cuda-check-out}}"; shift || true
mkdir -p "$out"
bench_args=("$@")
scratch="$(mktemp -d)"
limit() { timeout --kill-after=10 "${STEP_TIMEOUT_S:-0}" "$@"; }
export PYTHONUNBUFFERED=1
[ ${#bench_args[@]} -eq 0 ] && bench_args=(--config paper-110m,small --cases prefill,decode --no-cached-compile
  --only 'paper-110m/decode/kvg/,paper-110m/decode/collapsed/,/b8s1024/,/b1s128/')
py="${PYTHON:-python3}"
dev="${PLGA_CHECK_DEVICE:-cuda}"  # cpu: a dry run of this script on a machine without CUDA
status=0
step() { echo; echo "=== $* ==="; }

step machine
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$out/machine.txt"
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" 2>&1 | tee -a "$out/machine.txt"

step install
"$py" -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -3 || { echo "install failed"; exit 1; }
# the native CPU kernels build once here, not inside the first timed step that loads them
"$py" -c "import torch; from plga.kernels import native; print('native CPU kernels:', native.prepare(torch.float32))" 2>&1 | tail -1

step "CUDA tests"
limit "$py" -m pytest -q -p no:cacheprovider -m cuda tests/kernels 2>&1 | tee "$out/cuda_tests.log" | tail -25 || status=1

# A conformance run in parts side by side, one process each (the GPU machine has cores to
# spare; a part's own checks run in turn): every part's report goes to one log, in order, and
# its verdict line to the screen. Each PART is one shell-quoted string of plga conformance
# options. Stopped by the step's time cap, every part still reports the checks it finished
# (verdict INTERRUPTED); the function waits for those reports.
conformance_parts() {
  local dev="$1" py="$2" tmp="$3"; shift 3
  local i=0 rc=0 pids=() part parts=("$@")
  trap 'echo "(time cap: the parts report what they finished)"' TERM
  for part in "$@"; do
    eval "set -- $part"
    OMP_NUM_THREADS=2 PLGA_DEVICE="$dev" PLGA_NO_PROGRESS=1 "$py" -m plga.conformance --profile quick "$@" \
      > "$tmp/part$i.log" 2>&1 &
    pids+=($!); i=$((i + 1))
  done
  # a trapped TERM ends a `wait` early, and `timeout` sends one to bash and then another to the
  # whole group: wait again until each part has exited (a zombie still answers kill -0), so no
  # log is printed before its part has written its report
  local pid status
  for pid in "${pids[@]}"; do
    until wait "$pid"; status=$?; ! kill -0 "$pid" 2>/dev/null; do :; done
    [ "$status" -eq 0 ] || rc=1
  done
  i=0
  for part in "${parts[@]}"; do echo "--- plga conformance $part ---"; cat "$tmp/part$i.log"; echo; i=$((i + 1)); done
  return $rc
}
export -f conformance_parts

step "conformance on cuda (quick profile, its five groups side by side)"
limit bash -c 'conformance_parts "$@"' _ "$dev" "$py" "$scratch" \
  "--group attention" "--group structure" "--group chain" "--group decoder" "--group cache" \
  > "$out/conformance_cuda.log" 2>&1 || status=1
grep -E "^(--- plga conformance|plga conformance: [A-Z])" "$out/conformance_cuda.log" | uniq

step "conformance on cuda, captured decoding steps (CUDA graphs; the float32 generation checks, side by side)"
# every drawn model shape compiles a step: the whole cache group in three dtypes takes far longer
limit bash -c 'conformance_parts "$@"' _ "$dev" "$py" "$scratch" \
  "--impl kernels-captured -k 'cache_modes and float32'" \
  "--impl kernels-captured -k 'collapsed_equals_kvg and float32'" \
  "--impl kernels-captured -k 'gcache_invalidated and float32'" \
  > "$out/conformance_cuda_captured.log" 2>&1 || status=1
grep -E "^(--- plga conformance|plga conformance: [A-Z])" "$out/conformance_cuda_captured.log" | uniq

step "CLI on cuda (golden checkpoint: torch on cuda against the float64 reference)"
cli_on_device() {
  local ck="$1" dev="$2" py="$3" tmp="$4"
  echo '[[5, 9, 1, 30, 2, 7], [0, 0, 4, 8, 15, 16]]' > "$tmp/tokens.json"
  plga forward "$ck" --tokens "$tmp/tokens.json" --out "$tmp/fwd_ref.npz" --max-seq-len 64 &&
  plga forward "$ck" --tokens "$tmp/tokens.json" --out "$tmp/fwd_cuda.npz" --max-seq-len 64 \
    --backend torch --device "$dev" --dtype float64 &&
  plga generate "$ck" --tokens "$tmp/tokens.json" --out "$tmp/gen_cuda.npz" --max-seq-len 64 \
    --backend torch --device "$dev" --dtype float32 --mode kvg --max-new-tokens 8 &&
  plga audit "$ck" --device "$dev" --dtype float32 --out "$tmp/audit_cuda" --quick --no-plots --no-progress &&
  "$py" - "$tmp" <<'PY'
import sys
import numpy as np
a = np.load(f"{sys.argv[1]}/fwd_ref.npz")["logits"]
c = np.load(f"{sys.argv[1]}/fwd_cuda.npz")["logits"]
e = float(abs(c - a).max() / abs(a).max())
print("cuda float64 logits vs reference: max rel err", e)
assert e < 1e-10
PY
}
export -f cli_on_device
ck="${PLGA_SHARED_DATA:-tests/data}/golden/small_seed0.pth"
if [ -f "$ck" ]; then
  limit bash -c 'cli_on_device "$@"' _ "$ck" "$dev" "$py" "$scratch" 2>&1 | tee "$out/cli_cuda.log" | tail -15 || status=1
else
  echo "skipped: $ck absent (set PLGA_SHARED_DATA)"
fi

step "plga bench --device "$dev" ${bench_args[*]}"
plga bench --device "$dev" --case-timeout-s 120 --out "$out/bench-cuda.json" "${bench_args[@]}" 2>&1 \
  | tee "$out/bench-cuda.md" | tail -60 || status=1
exit $status
