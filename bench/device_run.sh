#!/usr/bin/env bash
# One batched run on a GPU machine: bench/device_check.sh (every CUDA test,
# each configuration pinned, memcheck and racecheck), the Python binding's GPU
# tests, the default workload, and the side-by-side benchmarks against the
# peers, which write $OUT/RESULTS.md.  Logs go to $OUT (or ./out).
#   bench/device_run.sh BUILD_DIR        (a CUDA build made by CMake)
# The peer for the SSD benchmark (mamba_ssm's Triton kernels) is looked up on
# PYTHONPATH; put a checkout's python package in .peer/ to include it.
set -uo pipefail
B=${1:-build-gpu}
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=python:bench:.peer${PYTHONPATH:+:$PYTHONPATH}
export SEQFUSE_LIB=$PWD/$B/libseqfuse.so
export PYTHONUNBUFFERED=1
# the commit the benchmarks report (the tree copied to a device may hold a stale .git):
#   SF_COMMIT=$(git rev-parse --short HEAD) before sending the run
export SF_COMMIT=${SF_COMMIT:-}
export SF_AUTOTUNE_CACHE=$OUT/autotune.tsv
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
rc=0
OUT=$OUT bash bench/device_check.sh "$B" || rc=1
echo "== Python binding on the GPU =="
python3 -m pytest -q tests/python -k "cuda or torch" 2>&1 | tail -3
echo "== seqfuse default workload =="
"$B/seqfuse" 2>/dev/null | tee "$OUT/seqfuse_default.txt"
# $OUT/RESULTS.md: bench/RESULTS.md with the ssd_fwd, ssd_step, attn_fwd, paged_decode and
# peers sections of this run (copy it, $OUT/attn_fwd_h200.png and $OUT/paged_decode_h200.png back
# into bench/ to publish them)
cp bench/RESULTS.md "$OUT/RESULTS.md"
echo "== SSD vs mamba_ssm =="
python3 bench/gpu_ssd.py --csv "$OUT/ssd.csv" --results "$OUT/RESULTS.md" 2>&1 | tee "$OUT/ssd.txt"
echo "== attention vs SDPA (cuDNN, FA2) =="
python3 bench/gpu_attn.py --rounds 3 --csv "$OUT/attn.csv" --plot "$OUT/attn_fwd_h200.png" \
  --results "$OUT/RESULTS.md" 2>&1 | tee "$OUT/attn.txt"
echo "== paged decode vs SDPA on contiguous K/V =="
python3 bench/gpu_paged.py --csv "$OUT/paged.csv" --plot "$OUT/paged_decode_h200.png" --results "$OUT/RESULTS.md" 2>&1 | tee "$OUT/paged.txt"
if [ -d .peers ]; then  # bench/peers/prepare.sh filled it on the machine that sent the run
  echo "== the peers' own test suites =="
  OUT=$OUT bash bench/peers/run_peer_suites.sh "$B" 2>&1 | tail -16
fi
exit $rc
