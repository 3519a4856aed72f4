#!/usr/bin/env bash
# One device run that validates and times branch next/ssd-out-pipe (see
# notes/next-ssd-out-pipe.md).  Needs a CUDA build of this branch with 90a in
# SF_CUDA_ARCHS in $1 (default build-gpu: libseqfuse.so*, tests/test_ops,
# tests/test_ssd_big) and mamba_ssm's Triton files under .peer for the peer.
set -uo pipefail
B=${1:-build-gpu}
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B PYTHONPATH=python:.peer SEQFUSE_LIB=$PWD/$B/libseqfuse.so
export SF_AUTOTUNE_CACHE= PYTHONUNBUFFERED=1
for c in wgp8 wgp4 wgp16 wg8 general; do
  SF_AUTOTUNE_FORCE=ssd_fwd:$c "$B/tests/test_ops" --op ssd_fwd --backend cuda --all > "$OUT/t_$c.log" 2>&1
  echo "$c rc=$? $(tail -n 1 "$OUT/t_$c.log")"; grep FAIL "$OUT/t_$c.log" | head -5
done
"$B/tests/test_ops" --op ssd_fwd --backend cuda --all > "$OUT/t_auto.log" 2>&1
echo "auto rc=$? $(tail -n 1 "$OUT/t_auto.log")"
for tool in memcheck racecheck; do
  SF_AUTOTUNE_FORCE=ssd_fwd:wgp8 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 \
    "$B/tests/test_ops" --op ssd_fwd --backend cuda > "$OUT/$tool.log" 2>&1
  echo "$tool wgp8 rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)"
done
timeout 300 "$B/tests/test_ssd_big" 2>&1 | tail -4
timeout 240 python3 bench/gpu_ssd.py --configs wg8,wgp8,wgp4,wgp16 2>&1 | grep -v "^batch\|decode"
timeout 90 python3 bench/gpu_ssd.py --profile 2>&1 | grep -A8 "^seqfuse\|^mamba"
