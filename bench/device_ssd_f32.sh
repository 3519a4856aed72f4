#!/usr/bin/env bash
# Validates and times the f32 SSD output kernel ssd_out_sc32 (autotuner
# configurations split32 and split32l, which differ only in where C / B are
# rounded to TF32; branch next/ssd-f32-out) on an H200, in about two
# minutes.  Run from the repository root with a CUDA build of this branch in
# build-gpu/ (libseqfuse.so* and tests/test_ops):
#   bench/device_ssd_f32.sh            (logs in $OUT, default ./out)
# Phase 1 (concurrent, correctness only): every SSD test case pinned to
# split32 and to split32l (--all: also ssd_2p7b, the full 2.7B layer at
# L 4096; 16-bit cases are listed as skipped, split32 takes f32 only);
# compute-sanitizer memcheck and racecheck on the quick set pinned to each
# (bench/device_validate.sh).
# Phase 2 (one at a time, timing): bench/gpu_ssd.py on f32 (b8 L4096 and
# b1 L16384) with split, split32 and split32l pinned one after the other, then the
# autotuned forward against mamba_ssm; per-kernel times of one f32 forward
# (torch.profiler, b8 L4096) with split32 pinned.
# A failing forward line shows as "FAIL <case> f32 ..." (wrong answer) or as a
# status line (error); both make the first verdict FAIL.
set -uo pipefail
B=build-gpu
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>&1 | head -2
git log --oneline -1 2>/dev/null

echo "== phase 1: correctness (concurrent) =="
LOGS=$OUT/validate bash "$(dirname "$0")/device_validate.sh" "$B" ssd_fwd:split32 ssd_fwd:split32l
hung=0
for cfg in split32 split32l; do
  case $(cat "$OUT/validate/pin_ssd_fwd_$cfg.rc") in 124|137) hung=1 ;; esac
  # the f32 lines are the ones split32 serves: show them with their errors
  grep -E "^ +(ok|FAIL) .* f32 +cuda" "$OUT/validate/pin_ssd_fwd_$cfg.log" | head -12
done
echo "phase 1: $((SECONDS - T0)) s"

echo "== phase 2: timing =="
if [ $hung = 1 ]; then
  echo "SKIP timing: a split32 test hung"
  exit 1
fi
# split / split32 / split32l pinned (f32 only: split32 refuses 16-bit inputs),
# then the autotuned forward (which now may pick split32 for f32) vs mamba_ssm
SF_AUTOTUNE_CACHE= PYTHONPATH=python:.peer SEQFUSE_LIB=$PWD/$B/libseqfuse.so timeout -k 5 150 \
  python3 bench/gpu_ssd.py --configs split,split32,split32l --dtypes float32 --no-step > "$OUT/sc32_bench.log" 2>&1
rc=$?
grep -vE "^batch " "$OUT/sc32_bench.log" | head -40
[ $rc = 0 ] && echo "PASS gpu_ssd.py" || echo "FAIL gpu_ssd.py: exit $rc"
echo "-- per-kernel times, f32 b8 L4096, split32 pinned --"
SF_AUTOTUNE_CACHE= SF_AUTOTUNE_FORCE=ssd_fwd:split32 PYTHONPATH=python:.peer \
  SEQFUSE_LIB=$PWD/$B/libseqfuse.so timeout -k 5 90 \
  python3 bench/gpu_ssd.py --profile --profile-dtype float32 > "$OUT/sc32_profile.log" 2>&1
rc=$?
head -30 "$OUT/sc32_profile.log"
[ $rc = 0 ] && echo "PASS profile" || echo "FAIL profile: exit $rc"
echo "total: $((SECONDS - T0)) s"
