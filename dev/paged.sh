#!/bin/bash
# dev/paged.sh - one device round of the paged decode (issue 33), from the
# repo root with the prebuilt build/ (B), on one GPU:
#   1. the paged tests on the GPU: test_ops attn_paged (--all) and kv_append,
#      test_paged_bad (bad tables and lengths), test_paged_fp8, test_paged,
#      test_kv_cache, test_graph (capture, replays with new lengths),
#      tests/python/test_paged.py;
#   2. bench/gpu_paged.py at b1 ctx32k, b8 ctx8k, b32 ctx4k (pages 16, 64),
#      b128 ctx2k, b32 ctx4k k=4, b1 ctx160: this branch against SDPA cuDNN
#      (contiguous K/V) in the same run;
#   3. dev/paged_sweep.py: the pinned variants' outputs against a float32
#      reference, then split counts, the L2-hint and four-heads-a-CTA
#      variants at four points (SF_AUTOTUNE_FORCE=attn_paged:NAME), and one
#      KV head against eight at the same bytes, seqfuse alone;
#      then dev/paged_short.py: b1 contexts 128 and 192 at the engine's
#      shapes (us a call), this branch (default / pf / m64s4 / m32s8) and the
#      base library;
#   4. compute-sanitizer memcheck and racecheck on small cases: test_ops
#      attn_paged (the small cases, no --all), test_paged_fp8 (FP8 pools),
#      test_paged_bad (bad tables, memcheck only);
#   5. the branch's base library (build/libseqfuse.so.base, a copy of the
#      library built from the commit the branch started at, when present)
#      at the points of 2, bf16 only, seqfuse alone;
#   6. Nsight Compute metrics of ours and SDPA cuDNN at b128 ctx2k.
# Writes $OUT/summary.txt (short) and one log per step.
set -u
B=${B:-build}
OUT=${OUT:-/tmp/paged_out}
mkdir -p "$OUT"
S=$OUT/summary.txt
: > "$S"
say() { echo "$*" | tee -a "$S"; }
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
say "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

# 1. correctness
run_t() { # name, command...
  local n=$1; shift
  timeout 120 "$@" > "$OUT/t_$n.log" 2>&1
  local rc=$?
  say "$n: rc $rc, $(grep -c -E '^ *(ok|PASS)' "$OUT/t_$n.log") ok, $(grep -c '^ *FAIL' "$OUT/t_$n.log") FAIL; $(tail -1 "$OUT/t_$n.log" | cut -c1-120)"
  grep -E '^ *FAIL' "$OUT/t_$n.log" | head -5 | cut -c1-200 | tee -a "$S"
}
run_t ops_attn_paged "$B"/tests/test_ops --op attn_paged --backend cuda --all
run_t ops_kv_append "$B"/tests/test_ops --op kv_append --backend cuda --all
run_t paged_bad "$B"/tests/test_paged_bad
run_t paged_fp8 "$B"/tests/test_paged_fp8
run_t paged "$B"/tests/test_paged
run_t kv_cache "$B"/tests/test_kv_cache
run_t graph "$B"/tests/test_graph
PYTHONPATH=python:bench:${PYTHONPATH:-} SEQFUSE_LIB=$PWD/$B/libseqfuse.so timeout 120 python3 -m pytest -q -x \
  tests/python/test_paged.py > "$OUT/pytest.log" 2>&1
say "pytest test_paged.py: rc $?; $(tail -1 "$OUT/pytest.log" | cut -c1-150)"

# 2. timings (graph of 20 calls, median), same run
PTS=1:32768:1:16,8:8192:1:16,32:4096:1:16,32:4096:1:64,128:2048:1:16,32:4096:4:16,1:160:1:16
PYTHONPATH=python:bench:${PYTHONPATH:-} SEQFUSE_LIB=$PWD/$B/libseqfuse.so timeout 100 python3 bench/gpu_paged.py \
  --points $PTS --csv "$OUT/new.csv" > "$OUT/bench_new.log" 2>&1
say "bench (this branch, with peers) rc $?"
grep -E '^ *[0-9]+ ' "$OUT/bench_new.log" | sed -E 's/ +/ /g' | cut -c1-210 | tee -a "$S"
# 3. pinned variants: check, split counts, variants
PYTHONPATH=python:bench:${PYTHONPATH:-} SEQFUSE_LIB=$PWD/$B/libseqfuse.so timeout 100 python3 dev/paged_sweep.py \
  > "$OUT/sweep.log" 2>&1
say "sweep rc $?"
grep '^sweep' "$OUT/sweep.log" | sed -E 's/ +/ /g' >> "$OUT/summary.txt"

# short contexts at the engine's shapes, this branch then the base library
for lib in libseqfuse.so libseqfuse.so.base; do
  [ -e "$B/$lib" ] || continue
  V=""; [ $lib = libseqfuse.so ] && V="pf m64s4 m32s8"
  PYTHONPATH=python:bench:${PYTHONPATH:-} SEQFUSE_LIB=$PWD/$B/$lib timeout 40 python3 dev/paged_short.py $V \
    > "$OUT/short_$lib.log" 2>&1
  say "$lib rc $?: $(grep '^short' "$OUT/short_$lib.log" | cut -c1-220)"
done

# 4. sanitizers on small cases
for tool in memcheck racecheck; do
  for c in "ops:$B/tests/test_ops --op attn_paged --backend cuda" "bad:$B/tests/test_paged_bad" \
           "fp8:$B/tests/test_paged_fp8"; do
    [ $tool = racecheck ] && [ ${c%%:*} = bad ] && continue
    n=${c%%:*}; cmd=${c#*:}
    timeout 40 "$SAN" --tool $tool --error-exitcode 9 $cmd > "$OUT/san_${tool}_$n.log" 2>&1
    say "$tool $n: rc $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san_${tool}_$n.log" | tail -1))"
  done
done

# 5. the base library, same points
if [ -e "$B/libseqfuse.so.base" ]; then
  PYTHONPATH=python:bench:${PYTHONPATH:-} SEQFUSE_LIB=$PWD/$B/libseqfuse.so.base timeout 60 python3 bench/gpu_paged.py \
    --no-peers --no-fp8 --points $PTS --csv "$OUT/base.csv" > "$OUT/bench_base.log" 2>&1
  say "bench (base library, no peers) rc $?"
  grep -E '^ *[0-9]+ ' "$OUT/bench_base.log" | sed -E 's/ +/ /g' | cut -c1-150 | tee -a "$S"
fi

# 6. Nsight Compute at b128 ctx2k: ours against SDPA cuDNN
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,smsp__inst_executed.sum,lts__t_sector_hit_rate.pct
for c in "128 2048 16" "128 2048 16 cudnn"; do
  PYTHONPATH=python:bench:${PYTHONPATH:-} SEQFUSE_LIB=$PWD/$B/libseqfuse.so timeout 30 "$NCU" --profile-from-start off \
    --metrics $M python3 dev/paged_ncu.py $c > "$OUT/ncu_${c// /_}.log" 2>&1
  rc=$?
  say "ncu $c: rc $rc; $(grep -E '^ +[a-z_]+__[a-z_.]+ ' "$OUT/ncu_${c// /_}.log" | sed -E 's/ +/ /g; s/^ //' | tr '\n' ';' | cut -c1-600)"
done
