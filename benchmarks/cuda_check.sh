#!/usr/bin/env bash
# The CUDA checks of plga in one run: the CUDA tests, the conformance suite on the device, the
# CLI on the device, and `plga bench --device "$dev"`. For a machine with a CUDA GPU and an
# environment that already has torch (CUDA build), numpy, mpmath, pytest, hypothesis and
# safetensors; plga is installed from this checkout without touching the network.
#
#   bash benchmarks/cuda_check.sh [OUTDIR] [BENCH_ARGS...]
#
# OUTDIR (default cuda-check-out, or $OUT where set) receives the logs and bench JSON/markdown.
# BENCH_ARGS replace the default bench selection (--config small,paper-110m --cases prefill,decode
# --no-cached-compile: the device time is short; the cold compiles are timed).
# Golden-vector tests read the shipped tests/data ($PLGA_SHARED_DATA overrides it).
# STEP_TIMEOUT_S (default 0: none) caps each step before the bench, so that one hung step cannot
# take a short lease's remaining time from the bench (which writes OUTDIR/bench-cuda.json.partial
# as it goes, and caps each case with --case-timeout-s). OUTDIR receives logs and bench files only (seven
# files); the CLI step's tokens, arrays and audit go to a temporary folder.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-cuda-check-out}}"; shift || true
mkdir -p "$out"
bench_args=("$@")
scratch="$(mktemp -d)"
limit() { timeout --kill-after=10 "${STEP_TIMEOUT_S:-0}" "$@"; }
export PYTHONUNBUFFERED=1
[ ${#bench_args[@]} -eq 0 ] && bench_args=(--config small,paper-110m --cases prefill,decode --no-cached-compile)
py="${PYTHON:-python3}"
dev="${PLGA_CHECK_DEVICE:-cuda}"  # cpu: a dry run of this script on a machine without CUDA
status=0
step() { echo; echo "=== $* ==="; }

step machine
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$out/machine.txt"
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" 2>&1 | tee -a "$out/machine.txt"

step install
"$py" -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -3 || { echo "install failed"; exit 1; }

step "CUDA tests"
limit "$py" -m pytest -q -p no:cacheprovider -m cuda tests/kernels 2>&1 | tee "$out/cuda_tests.log" | tail -25 || status=1

step "conformance on cuda (quick profile)"
PLGA_DEVICE="$dev" limit "$py" -m plga.conformance --profile quick 2>&1 | tee "$out/conformance_cuda.log" | tail -25 || status=1

step "conformance on cuda, captured decoding steps (CUDA graphs; generation checks)"
PLGA_DEVICE="$dev" limit "$py" -m plga.conformance --profile quick --impl kernels-captured --group cache 2>&1 \
  | tee "$out/conformance_cuda_captured.log" | tail -15 || status=1

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
