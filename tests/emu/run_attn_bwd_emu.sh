#!/bin/bash
# run_attn_bwd_emu.sh - runs the CUDA attention backward (src/cuda/attn/bwd.cu
# and its kernels) under the host emulator against the reference backward,
# fast and deterministic modes, for each configuration named (default: the
# GPU-tested FA2 rows fa64 and fa128, and the wgmma rows wg64 / wg128 / wg256
# and ws64 / ws128 when bwd_configs.h has them).  Sources prepared by emu_prep.py (sf_cuda_attn_bwd
# renamed emu_cuda_attn_bwd, launches through emu_launch), compiled for the
# host with __CUDA_ARCH__ 800 and __CUDA_ARCH_FEAT_SM90_ALL, linked with the
# CPU build's objects for the reference.
#   tests/emu/run_attn_bwd_emu.sh [build-cpu folder] [case|all] [fast|det|both] [configs...]
# Run from the repository root; the CPU build must be current.
set -eu
BC=${1:-build-cpu}
CASE=${2:-all}
MODE=${3:-both}
shift $(( $# < 3 ? $# : 3 ))
CFGS=${*:-fa64 fa128 $(grep -o '{"w[gs][0-9]*"' src/cuda/attn/bwd_configs.h | tr -d '{"' | tr '\n' ' ')}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 tests/emu/emu_prep.py "$W" attn src/cuda/attn/bwd.cu emu_cuda_attn_bwd sf_cuda_attn_bwd
BLAS=$(grep -o '/[^ ]*blas[^ ]*\.so' "$BC/CMakeFiles/seqfuse.dir/link.txt" | head -1 || true)
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -D__CUDA_ARCH__=900 -D__CUDA_ARCH_FEAT_SM90_ALL -I"$W" -Itests/emu -Isrc/cuda -Isrc/core -Iinclude \
  tests/emu/attn_bwd_emu_main.cpp "$W/launcher_emu.cpp" -x none \
  "$BC"/CMakeFiles/seqfuse_obj.dir/src/{core,ref,cpu}/*.o ${BLAS} -lm -fopenmp -rdynamic -o "$W/emu"
rc=0
for cfg in $CFGS; do SF_AUTOTUNE_FORCE=attn_bwd:$cfg "$W/emu" "$CASE" "$MODE" || rc=1; done
exit $rc
