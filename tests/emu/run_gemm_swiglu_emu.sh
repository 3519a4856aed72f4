#!/bin/bash
# run_gemm_swiglu_emu.sh - checks sf_gemm_swiglu's decode kernels
# (gs_dec_kernel: the dec4 row and the element-load fallback) without a
# GPU: their sources prepared by emu_prep.py, compiled for the host with
# emu_rt.h (mma.sync emulated by common/ptx.cuh) and run on small cases against a
# double-precision product.  Needs no build folder.
#   tests/emu/run_gemm_swiglu_emu.sh [case]
set -eu
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 tests/emu/emu_prep.py "$W" gemm_swiglu
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -D__CUDA_ARCH__=900 -D__CUDA_ARCH_FEAT_SM90_ALL -I"$W" -Itests/emu -Isrc/cuda -Isrc/core -Iinclude \
  tests/emu/gemm_swiglu_emu_main.cpp -lm -rdynamic -o "$W/emu"
"$W/emu" ${1:-}
