#!/bin/bash
# run_gemm_wq_launch_emu.sh - runs sf_gemm_wq's CUDA backend (the launcher
# src/cuda/gemm_wq/gemm_wq.cu and every kernel it dispatches to) under the
# host emulator against the reference product, each configuration pinned
# in turn.  Sources prepared by emu_prep.py (sf_cuda_gemm_wq renamed
# emu_cuda_gemm_wq, launches through emu_launch), compiled for the host as
# sm_80 code, linked with the CPU build's objects for the reference.
#   tests/emu/run_gemm_wq_launch_emu.sh [build-cpu folder] [case]
# Run from the repository root; the CPU build must be current.
set -eu
BC=${1:-build-cpu}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 tests/emu/emu_prep.py "$W" gemm_wq src/cuda/gemm_wq/gemm_wq.cu emu_cuda_gemm_wq sf_cuda_gemm_wq
BLAS=$(grep -o '/[^ ]*blas[^ ]*\.so' "$BC/CMakeFiles/seqfuse.dir/link.txt" | head -1 || true)
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -D__CUDA_ARCH__=800 -I"$W" -Itests/emu -Isrc/cuda -Isrc/core -Iinclude \
  tests/emu/gemm_wq_launch_emu_main.cpp "$W/launcher_emu.cpp" -x none \
  "$BC"/CMakeFiles/seqfuse_obj.dir/src/{core,ref,cpu}/*.o ${BLAS} -lm -fopenmp -rdynamic -o "$W/emu"
"$W/emu" ${2:-}
