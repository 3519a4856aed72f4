#!/usr/bin/env bash
# One batched run on a GPU machine: the CUDA tests of every op, the default
# workload, the Python binding's GPU tests, compute-sanitizer on the CUDA op
# tests, and the side-by-side benchmarks against the peers.  Logs go to $OUT
# (or ./out).
#   bench/device_run.sh BUILD_DIR        (a CUDA build made by CMake)
# The peer for the SSD benchmark (mamba_ssm's Triton kernels) is looked up on
# PYTHONPATH; put a checkout's python package in .peer/ to include it.
set -uo pipefail
B=${1:-build-gpu}
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=python:.peer${PYTHONPATH:+:$PYTHONPATH}
export SEQFUSE_LIB=$PWD/$B/libseqfuse.so
export PYTHONUNBUFFERED=1
# the commit the benchmarks report (the tree copied to a device may hold a stale .git):
#   SF_COMMIT=$(git rev-parse --short HEAD) before sending the run
export SF_COMMIT=${SF_COMMIT:-}
export SF_AUTOTUNE_CACHE=$OUT/autotune.tsv
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
rc=0
echo "== CUDA op tests =="
for op in ssd_fwd ssd_step attn_fwd conv1d_fwd conv1d_update rmsnorm_gated; do
  "$B/tests/test_ops" --op "$op" --backend cuda > "$OUT/test_$op.log" 2>&1
  r=$?
  tail -1 "$OUT/test_$op.log"
  grep -E "FAIL" "$OUT/test_$op.log" | head -5
  [ $r -eq 0 ] || rc=1
done
echo "== every autotuner configuration pinned (in-memory choices) =="
for cfg in ssd_fwd:wg8 ssd_fwd:wg4 ssd_fwd:wg16 ssd_fwd:wgp8 ssd_fwd:wgp4 ssd_fwd:wgp16 ssd_fwd:split ssd_fwd:general ssd_fwd:split32 ssd_fwd:split32l ssd_fwd:wg20 ssd_fwd:wg40 ssd_fwd:fu8 ssd_fwd:fu40 ssd_fwd:fs32 ssd_fwd:fo32 ssd_fwd:fq32 \
           ssd_fwd:fg32 ssd_fwd:fg32s ssd_fwd:wgm40 ssd_fwd:wgb40 ssd_fwd:fub40 ssd_fwd:fnb40 ssd_fwd:wgq ssd_fwd:fuq \
           attn_fwd:auto attn_fwd:ws128 attn_fwd:ws192 attn_fwd:wgmma attn_fwd:mma \
           attn_fwd:wsp128 attn_fwd:wsp192 attn_fwd:wsp128k112 attn_fwd:wsp128k64 attn_fwd:wsp128c2; do
  log="$OUT/test_${cfg/:/_}.log"
  SF_AUTOTUNE_CACHE= SF_AUTOTUNE_FORCE=$cfg "$B/tests/test_ops" --op "${cfg%%:*}" --backend cuda --all \
    > "$log" 2>&1
  r=$?
  echo "$cfg: $(tail -n 1 "$log")"
  grep -E "FAIL" "$log" | head -5
  [ $r -eq 0 ] || rc=1
done
if [ -x "$B/tests/test_ssd_big" ]; then
  echo "== more than 2^31 elements of x =="
  "$B/tests/test_ssd_big" 2>&1 | tail -4
fi
echo "== compute-sanitizer memcheck on the CUDA op tests =="
for op in ssd_fwd ssd_step attn_fwd conv1d_fwd; do
  compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/test_ops" --op "$op" --backend cuda \
    > "$OUT/memcheck_$op.log" 2>&1
  echo "memcheck $op: exit $? ($(grep -c 'ERROR SUMMARY: 0' "$OUT/memcheck_$op.log") clean summaries)"
done
echo "== Python binding on the GPU =="
python3 -m pytest -q tests/python -k "cuda or torch" 2>&1 | tail -3
echo "== seqfuse default workload =="
"$B/seqfuse" 2>/dev/null | tee "$OUT/seqfuse_default.txt"
echo "== SSD vs mamba_ssm =="
python3 bench/gpu_ssd.py --csv "$OUT/ssd.csv" 2>&1 | tee "$OUT/ssd.txt"
echo "== attention vs SDPA (cuDNN, FA2) =="
python3 bench/gpu_attn.py --csv "$OUT/attn.csv" --plot "$OUT/attn_sweep.png" 2>&1 | tee "$OUT/attn.txt"
exit $rc
