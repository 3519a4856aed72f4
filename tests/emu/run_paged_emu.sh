#!/bin/bash
# run_paged_emu.sh - checks sf_attn_paged's decode kernel (paged/decode.cuh,
# 16-bit and FP8 pools) without a GPU: its sources and the attention
# forward's it includes prepared by emu_prep.py, compiled for the host with
# emu_rt.h and run on small cases against a double-precision attention.
# Needs no build folder.
#   tests/emu/run_paged_emu.sh [case]
set -eu
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 tests/emu/emu_prep.py "$W" paged
python3 tests/emu/emu_prep.py "$W" attn
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -D__CUDA_ARCH__=900 -D__CUDA_ARCH_FEAT_SM90_ALL -I"$W" -Itests/emu -Isrc/cuda -Isrc/core -Iinclude \
  tests/emu/paged_emu_main.cpp -lm -rdynamic -o "$W/emu"
"$W/emu" ${1:-}
