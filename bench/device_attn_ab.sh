#!/usr/bin/env bash
# A/B of two builds of the library on the attention benchmark, in one device
# run: each build's pinned configuration (SF_AUTOTUNE_FORCE=attn_fwd:CFG) over
# the same points, in alternating rounds so that clock or temperature drift
# falls on both; cuDNN and FA2 are timed in every round too.
#   bench/device_attn_ab.sh BUILD_A BUILD_B CFG ROUNDS [bench/gpu_attn.py args]
# e.g. bench/device_attn_ab.sh build-main build-try wsp128 2 --d 64 --L 512,1024 --no-vit
# (No bare `wait` in scripts that tee their own output: bash waits on the tee.)
set -uo pipefail
A=${1:?build A}; B=${2:?build B}; CFG=${3:?configuration}; R=${4:?rounds}
shift 4
export PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 SF_AUTOTUNE_CACHE=
for ((r = 1; r <= R; r++)); do
  for D in "$A" "$B"; do
    echo "== round $r: $D, attn_fwd:$CFG"
    LD_LIBRARY_PATH=$PWD/$D SEQFUSE_LIB=$PWD/$D/libseqfuse.so SF_AUTOTUNE_FORCE=attn_fwd:$CFG \
      timeout 150 python3 bench/gpu_attn.py "$@" 2>&1 | grep -E "^B[0-9]|unavailable|Error|error"
  done
done
