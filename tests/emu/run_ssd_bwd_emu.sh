#!/bin/bash
# run_ssd_bwd_emu.sh - checks the CUDA SSD backward without a GPU: its
# sources prepared by emu_prep.py (launches through emu_launch, shared memory
# in the emulator's buffer), compiled for the host (emu_rt.h) and
# linked with the CPU build's objects for the reference.  Configurations
# cpar, seq, cpars on the f32/bf16 cases; the tc* rows (ldmatrix and
# mma.sync emulated by common/ptx.cuh) on the tc_* cases (tc_big, the
# 2.7B tiling, and tc_wide, P 128, take minutes: run only when named).
#   tests/emu/run_ssd_bwd_emu.sh [build-cpu folder] [case] [tc | plain]
# With tc, only the tc rows (on the case, or on the tc_* cases but tc_big and
# tc_wide); with plain, only the other rows (cpar, cpar4, seq, cpars): what
# CTest runs, as two entries.  Run from the repository root; the CPU build
# must be current.
set -eu
BC=${1:-build-cpu}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 tests/emu/emu_prep.py "$W" ssd src/cuda/ssd/bwd.cu emu_cuda_ssd_bwd sf_cuda_ssd_bwd
BLAS=$(grep -o '/[^ ]*blas[^ ]*\.so' "$BC/CMakeFiles/seqfuse.dir/link.txt" | head -1 || true)
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -I"$W" -Itests/emu -Isrc/cuda -Isrc/core -Iinclude \
  tests/emu/ssd_bwd_emu_main.cpp "$W/launcher_emu.cpp" -x none \
  "$BC"/CMakeFiles/seqfuse_obj.dir/src/{core,ref,cpu}/*.o ${BLAS} -lm -fopenmp -o "$W/emu"
rc=0
ONLY=${3:-}
if [ "$ONLY" != tc ]; then
  for cfg in cpar cpar4 seq; do SF_AUTOTUNE_FORCE=ssd_bwd:$cfg "$W/emu" ${2:-} || rc=1; done
fi
# the tensor-core configurations on their 16-bit cases (ldmatrix and mma
# emulated: common/ptx.cuh)
# (the rows src/cuda/ssd/bwd_configs.h has)
for cfg in $([ "$ONLY" = plain ] || grep -o '{"tc[a-z]*"' src/cuda/ssd/bwd_configs.h | tr -d '{"'); do
  for c in ${2:-tc_g2 tc_g1 tc_geqh tc_hk tc_nofin tc_onlyB tc_onlyC tc_onlyx tc_shift}; do
    case $c in tc_*) ;; *) continue ;; esac
    SF_AUTOTUNE_FORCE=ssd_bwd:$cfg "$W/emu" $c || rc=1
  done
done
# cpars with room for 4 states of the P 8, N 16 cases beside the adjoint
# (sub-blocks of 3 tokens; 10 at N 8); the odd case's adjoint would not fit
[ "$ONLY" = tc ] && exit $rc
for c in ${2:-all_opts seq_idx cu_seqlens emptyL emptyb all_bf16}; do
  case $c in tc_*) continue ;; esac
  EMU_SMEM_OPTIN=3872 SF_AUTOTUNE_FORCE=ssd_bwd:cpars "$W/emu" $c || rc=1
done
exit $rc
