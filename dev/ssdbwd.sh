#!/bin/bash
# dev/ssdbwd.sh - one device round of the SSD backward (issue 37), from the
# repo root with the prebuilt build/ (B), on one GPU:
#   1. build/tests/test_ssd_bwd --backend cuda with each configuration of
#      src/cuda/ssd/bwd_configs.h pinned (SF_AUTOTUNE_FORCE);
#   2. bench/gpu_ssd_bwd.py (bf16 errors against float64 at b2 L2048, times
#      at b8 L4096 and b1 L16384): ours (default, and tc pinned, or the
#      configurations in $SSDBWD_CONFIGS, e.g. tc,cpar) against mamba_ssm in
#      the same run;
#   2b. per-kernel times of one backward (dev/ssdbwd_prof.py);
#   3. compute-sanitizer memcheck (ssd_2p7b_small, ssd_basic) and racecheck
#      (ssd_2p7b_small) with the tensor-core configuration pinned;
#   4. the 2.7B case (ssd_2p7b, --all) with the tensor-core one pinned.
# Writes $OUT/summary.txt (short) and one log per step.
set -u
B=${B:-build}
OUT=${OUT:-/tmp/ssdbwd_out}
mkdir -p "$OUT"
S=$OUT/summary.txt
: > "$S"
say() { echo "$*" | tee -a "$S"; }
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
CFGS=$(sed -n 's/^ *{"\([a-z0-9_]*\)", SsdBwdPath::.*/\1/p' src/cuda/ssd/bwd_configs.h)
TC=$(echo "$CFGS" | grep -x tc || true)
say "configs: $(echo $CFGS) ; gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

# 1. correctness, every configuration
for c in $CFGS; do
  SF_AUTOTUNE_FORCE=ssd_bwd:$c timeout 40 "$B"/tests/test_ssd_bwd --backend cuda $([ $c = tc ] && echo -v) \
    > "$OUT/test_$c.log" 2>&1
  rc=$?
  say "test_ssd_bwd cuda [$c]: rc $rc, $(grep -c '^ok' "$OUT/test_$c.log") ok, $(grep -c '^skip' "$OUT/test_$c.log") skip, $(grep -c '^FAIL' "$OUT/test_$c.log") FAIL"
  grep '^FAIL' "$OUT/test_$c.log" | head -6 | cut -c1-200 | tee -a "$S"
  [ $c = tc ] && grep -E '^ok +ssd_(2p7b_small|chunk256|full) ' "$OUT/test_$c.log" | cut -c1-200 | tee -a "$S"
done
# 2. timings against mamba_ssm, same run
BC=${SSDBWD_CONFIGS:-cpar}  # cpar takes ~0.4 s a call at b8 L4096: only when asked for beside tc
[ -n "$TC" ] && BC=${SSDBWD_CONFIGS:-tc}
PYTHONPATH=python:bench:/work/main/.peer:${PYTHONPATH:-} timeout 150 python bench/gpu_ssd_bwd.py \
  --dtypes bfloat16 --err-shape 2x2048 --configs $BC > "$OUT/bench.log" 2>&1
say "bench rc $?"
grep -E '^(errors|b[0-9])' "$OUT/bench.log" | cut -c1-230 | tee -a "$S"
tail -3 "$OUT/bench.log" | cut -c1-200 >> "$S"

# 2b. per-kernel times of one backward (default configuration)
PYTHONPATH=python:bench:/work/main/.peer:${PYTHONPATH:-} timeout 60 python dev/ssdbwd_prof.py > "$OUT/prof.log" 2>&1
say "profile rc $?"
grep '^kernel' "$OUT/prof.log" | head -9 | cut -c1-120 | tee -a "$S"

# 3. sanitizers on small cases, the tensor-core configuration pinned
if [ -n "$TC" ]; then
  for tool in memcheck racecheck; do
    for cs in ssd_2p7b_small $([ $tool = memcheck ] && echo ssd_basic); do
      SF_AUTOTUNE_FORCE=ssd_bwd:tc timeout 60 "$SAN" --tool $tool --error-exitcode 9 \
        "$B"/tests/test_ssd_bwd --backend cuda --case $cs > "$OUT/san_${tool}_$cs.log" 2>&1
      say "$tool [tc] $cs: rc $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san_${tool}_$cs.log" | tail -1))"
    done
  done
fi


# 4. the 2.7B shape (b1 L4096 H80 P64 N128, chunk 256) against the reference
if [ -n "$TC" ]; then
  SF_AUTOTUNE_FORCE=ssd_bwd:tc timeout 90 "$B"/tests/test_ssd_bwd --backend cuda --all --case ssd_2p7b -v \
    > "$OUT/test_tc_2p7b.log" 2>&1
  say "test_ssd_bwd cuda [tc] ssd_2p7b: rc $?"
  grep -E '^(ok|FAIL)' "$OUT/test_tc_2p7b.log" | cut -c1-220 | tee -a "$S"
fi

