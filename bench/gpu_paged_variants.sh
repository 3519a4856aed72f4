#!/usr/bin/env bash
# Paged decode: the library's kernel variants side by side in one run (no
# peers; bench/gpu_paged.py --no-peers at each variant pinned by
# SF_AUTOTUNE_FORCE=attn_paged:NAME, and the pools in HND layout), bf16 and
# FP8 TB/s at four points, then the split sweeps of the TMA kernel.  Variants:
# the default (cp.async, a ring a warp), tma / tma1 / tma3 (decode_tma.cuh:
# one ring a CTA filled by TMA; 2 / 1 / 3 blocks an SM), nar4 (FP8 narrow
# tiles at four blocks an SM), acc2 (S^T in two accumulators), l2 (the
# L2::256B hint on the K/V copies).
#   PYTHONPATH=python:bench SEQFUSE_LIB=build/libseqfuse.so bench/gpu_paged_variants.sh
set -uo pipefail
V=${POINTS:-128:2048:1:16,32:4096:1:16,8:8192:1:16,1:32768:1:16}
row() { sed -E 's/^(.{32}).*fp8 ([0-9.na]+) TB\/s, ([0-9.na]+)x.*/\1  fp8 \2 TB\/s  \3x bf16/'; }
echo "   b    ctx  lq page   bf16 TB/s (columns of gpu_paged.py), fp8"
for f in "" tma tma1 tma3 nar4 acc2 l2 hnd tma+hnd ""; do
  echo "-- ${f:-default}"
  case "$f" in
    hnd) python3 bench/gpu_paged.py --no-peers --points "$V" --layout hnd 2>&1 | tail -4 | row ;;
    tma+hnd) SF_AUTOTUNE_FORCE=attn_paged:tma python3 bench/gpu_paged.py --no-peers --points "$V" --layout hnd 2>&1 | tail -4 | row ;;
    *) SF_AUTOTUNE_FORCE=${f:+attn_paged:$f} python3 bench/gpu_paged.py --no-peers --points "$V" 2>&1 | tail -4 | row ;;
  esac
done
echo "-- split counts of the TMA kernel"
SF_AUTOTUNE_FORCE=attn_paged:tma python3 bench/gpu_paged.py --split-sweep 0,1,2,3,4,6,8,16,33,49 --points "$V" 2>&1 | tail -4
