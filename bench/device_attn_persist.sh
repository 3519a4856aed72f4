#!/usr/bin/env bash
# Validates and times the persistent attention kernel (attn_fwd_wsp, autotuner
# configurations wsp128 / wsp192) on an H200, in about two minutes.
# Run from the repository root with a CUDA build of this branch in build-gpu/
# (libseqfuse.so* and tests/test_ops):
#   bench/device_attn_persist.sh            (logs in $OUT, default ./out)
# Phase 1 (concurrent, correctness only): every test case pinned to wsp128 and
# to wsp192 (--all, so the ViT and LLM shapes with several tiles per CTA run);
# compute-sanitizer memcheck and racecheck on the quick set pinned to each
# (bench/device_validate.sh; the attn_causal_nokey_* cases already give the
# CTAs more than one tile each).
# Phase 2 (one at a time, timing): bench/gpu_attn.py pinned to wsp128, wsp192
# (d 64 only: it serves nothing else) and ws128 (the non-persistent kernel),
# ours vs cuDNN vs FA2 in TFLOP/s.
set -uo pipefail
B=build-gpu
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>&1 | head -2

echo "== phase 1: correctness (concurrent) =="
LOGS=$OUT/validate bash "$(dirname "$0")/device_validate.sh" "$B" attn_fwd:wsp128 attn_fwd:wsp192
declare -A ok
for cfg in wsp128 wsp192; do ok[$cfg]=$(cat "$OUT/validate/pin_attn_fwd_$cfg.rc"); done
echo "phase 1: $((SECONDS - T0)) s"

echo "== phase 2: timing (ours vs cuDNN vs FA2, TFLOP/s) =="
bench() { # cfg dims
  if [ "${ok[$1]:-0}" = 124 ] || [ "${ok[$1]:-0}" = 137 ]; then
    echo "SKIP timing of $1: its test hung"; return
  fi
  echo "-- forced $1 (d $2) --"
  SF_AUTOTUNE_CACHE= SF_AUTOTUNE_FORCE=attn_fwd:$1 PYTHONPATH=python SEQFUSE_LIB=$PWD/$B/libseqfuse.so \
    timeout -k 5 50 python3 bench/gpu_attn.py --d "$2" --L 512,1024,2048 --csv "$OUT/persist_bench_$1.csv" \
    2>&1 | tee "$OUT/persist_bench_$1.txt"
  r=${PIPESTATUS[0]}
  [ "$r" = 0 ] && echo "PASS bench $1 ran" || echo "FAIL bench $1: exit $r"
}
bench wsp128 64,128
bench wsp192 64
bench ws128 64,128
# the non-persistent 192-row d 64 kernel too, when the budget allows
if [ $((SECONDS - T0)) -lt 115 ]; then bench ws192 64; else echo "SKIP timing of ws192 (time budget)"; fi
echo "total: $((SECONDS - T0)) s"
