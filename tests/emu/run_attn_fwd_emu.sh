#!/bin/bash
# run_attn_fwd_emu.sh - runs the GPU-tested attention forward attn_fwd_wgmma
# (src/cuda/attn/fwd_wgmma.cuh, sm_90a wgmma) under the host emulator
# against the reference forward: the check of the emulator's wgmma
# (tests/emu/common/wgmma.cuh).  Sources prepared by emu_prep.py, compiled
# for the host with __CUDA_ARCH__ 800 (portable fallbacks of raw sm_90 asm)
# and __CUDA_ARCH_FEAT_SM90_ALL (the wgmma code), linked with the CPU
# build's objects for the reference.
#   tests/emu/run_attn_fwd_emu.sh [build-cpu folder] [case]
# Run from the repository root; the CPU build must be current.
set -eu
BC=${1:-build-cpu}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 tests/emu/emu_prep.py "$W" attn
BLAS=$(grep -o '/[^ ]*blas[^ ]*\.so' "$BC/CMakeFiles/seqfuse.dir/link.txt" | head -1 || true)
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -D__CUDA_ARCH__=900 -D__CUDA_ARCH_FEAT_SM90_ALL -I"$W" -Itests/emu -Isrc/cuda -Isrc/core -Iinclude \
  tests/emu/attn_fwd_emu_main.cpp -x none \
  "$BC"/CMakeFiles/seqfuse_obj.dir/src/{core,ref,cpu}/*.o ${BLAS} -lm -fopenmp -rdynamic -o "$W/emu"
"$W/emu" ${2:-}
