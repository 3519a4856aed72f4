#!/bin/bash
# run_paged_launch_emu.sh - runs sf_attn_paged's CUDA backend (the launcher
# src/cuda/paged/paged.cu and the decode kernels it dispatches to) under the
# host emulator against the reference backend, with the untuned and pinned
# split counts.  Sources prepared by emu_prep.py (sf_cuda_attn_paged renamed
# emu_cuda_attn_paged, sf_cuda_kv_append emu_cuda_kv_append, launches
# through emu_launch), compiled for the host as sm_90a code, linked with the
# CPU build's objects for the reference.
#   tests/emu/run_paged_launch_emu.sh [build-cpu folder] [case]
# Run from the repository root; the CPU build must be current.
set -eu
BC=${1:-build-cpu}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 tests/emu/emu_prep.py "$W" paged src/cuda/paged/paged.cu emu_cuda_attn_paged sf_cuda_attn_paged \
  emu_cuda_kv_append sf_cuda_kv_append
python3 tests/emu/emu_prep.py "$W" attn
BLAS=$(grep -o '/[^ ]*blas[^ ]*\.so' "$BC/CMakeFiles/seqfuse.dir/link.txt" | head -1 || true)
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -D__CUDA_ARCH__=900 -D__CUDA_ARCH_FEAT_SM90_ALL -include emu_rt.h -I"$W" -Itests/emu \
  -Isrc/cuda -Isrc/core -Iinclude tests/emu/paged_launch_emu_main.cpp "$W/launcher_emu.cpp" -x none \
  "$BC"/CMakeFiles/seqfuse_obj.dir/src/{core,ref,cpu}/*.o ${BLAS} -lm -fopenmp -rdynamic -o "$W/emu"
"$W/emu" ${2:-}
