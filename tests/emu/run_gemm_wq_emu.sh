#!/bin/bash
# run_gemm_wq_emu.sh - checks sf_gemm_wq's streaming decode kernel without a
# GPU: its sources prepared by emu_prep.py, compiled for the host with
# emu_rt.h as sm_80 code (one block along K; cp.async, mma.sync and the
# shuffles emulated) and run on small cases against a double-precision
# product of the dequantised weights.  Needs no build folder.
#   tests/emu/run_gemm_wq_emu.sh [case]
set -eu
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 tests/emu/emu_prep.py "$W" gemm_wq
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -D__CUDA_ARCH__=800 -I"$W" -Itests/emu -Isrc/cuda -Isrc/core -Iinclude \
  tests/emu/gemm_wq_emu_main.cpp -lm -rdynamic -o "$W/emu"
"$W/emu" ${1:-}
