#!/bin/bash
# dev/attnbwd.sh - one device round of the attention backward (issue 36),
# from the repo root with the prebuilt build/ (B), on one GPU:
#   1. build/tests/test_attn_bwd --backend cuda: the default choice and each
#      configuration of src/cuda/attn/bwd_configs.h pinned (SF_AUTOTUNE_FORCE);
#   2. bench/gpu_attn_bwd.py (bf16, d 64 and 128, causal and not, L 1024 and
#      4096): ours (default) fast and deterministic against SDPA cuDNN and
#      FA2, then the new rows and the old best (mmal64 / mmal128) pinned;
#   3. compute-sanitizer memcheck (fa64, fa128, fa128q32 pinned) and
#      racecheck (fa64, fa128) on a small case, bf16, fast and deterministic.
# Writes $OUT/summary.txt (short) and one log per step.
set -u
B=${B:-build}
OUT=${OUT:-/tmp/attnbwd_out}
mkdir -p "$OUT"
S=$OUT/summary.txt
: > "$S"
say() { echo "$*" | tee -a "$S"; }
export LD_LIBRARY_PATH=$PWD/$B:${LD_LIBRARY_PATH:-} # the tests find libseqfuse.so.0 in the unpacked build/
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
CFGS=$(sed -n 's/^ *{"\([a-z0-9]*\)", BwdKernel::.*/\1/p' src/cuda/attn/bwd_configs.h)
say "configs: $(echo $CFGS) ; gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

# 1. correctness: default, then every configuration pinned
for c in default $CFGS; do
  if [ $c = default ]; then F=; else F=attn_bwd:$c; fi
  SF_AUTOTUNE_FORCE=$F SF_AUTOTUNE_CACHE= timeout 40 "$B"/tests/test_attn_bwd --backend cuda > "$OUT/test_$c.log" 2>&1
  rc=$?
  say "test_attn_bwd cuda [$c]: rc $rc, $(grep -c 'rel err' "$OUT/test_$c.log") checked, $(grep -c 'skipped' "$OUT/test_$c.log") skipped, $(grep -c '^FAIL ' "$OUT/test_$c.log") FAIL; $(tail -1 "$OUT/test_$c.log" | cut -c1-100)"
  grep '^FAIL ' "$OUT/test_$c.log" | head -5 | cut -c1-200 | tee -a "$S"
done

# 2. timings (before the sanitizers: the 300 s limit): ours against cuDNN and FA2, old and new rows pinned
PYTHONPATH=python:bench:${PYTHONPATH:-} timeout 120 python bench/gpu_attn_bwd.py --d 64,128 --L 1024,4096 \
  --budget-ms 60 --configs fa64,fa64q32,fa64q32x2,fa128,fa128q32,mmal64,mmal128 > "$OUT/bench.log" 2>&1
say "bench rc $?"
grep -E '^(shape|B[0-9])|pinned' "$OUT/bench.log" | cut -c1-260 | tee -a "$S"
tail -3 "$OUT/bench.log" | cut -c1-200 >> "$S"

# 3. sanitizers on small cases, the FA2 rows pinned
for c in fa64 fa128 fa128q32; do
  for tool in memcheck racecheck; do
    [ $c = fa128q32 ] && [ $tool = racecheck ] && continue
    cs=L129_d64_causal_gqa4
    [ $c != fa64 ] && cs=L200_d128_causal_gqa4
    SF_AUTOTUNE_FORCE=attn_bwd:$c SF_AUTOTUNE_CACHE= timeout 45 "$SAN" --tool $tool --error-exitcode 9 \
      "$B"/tests/test_attn_bwd --backend cuda --case $cs --dtype bf16 > "$OUT/san_${tool}_$c.log" 2>&1
    say "$tool [$c] $cs: rc $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san_${tool}_$c.log" | tail -1))"
  done
done
