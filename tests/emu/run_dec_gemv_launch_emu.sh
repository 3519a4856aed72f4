#!/bin/bash
# run_dec_gemv_launch_emu.sh - runs tests/test_dec_gemv.c (the engine's
# decode-step products, every configuration row, against its double
# reference, and the refusals) or tests/test_dec_qkv.c (the q/k/v product
# with the rotary embedding and the KV-cache append) on the host emulator:
# the launcher
# src/cuda/layer/dec_gemv.cu and gs_dec_kernel prepared by emu_prep.py
# (entry points renamed emu_...), the test built with SF_TEST_EMU (its
# context on the host) and --quick (the small shapes), linked with the CPU
# build's objects.
#   tests/emu/run_dec_gemv_launch_emu.sh [build-cpu folder] [test_dec_gemv | test_dec_qkv]
# Run from the repository root; the CPU build must be current.
set -eu
BC=${1:-build-cpu}
T=${2:-test_dec_gemv}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 tests/emu/emu_prep.py "$W" gemm_swiglu
python3 tests/emu/emu_prep.py "$W" layer src/cuda/layer/dec_gemv.cu emu_cuda_dec_gemv sf_cuda_dec_gemv \
  emu_dec_gemv_supports sf_dec_gemv_supports emu_dec_gemv_nconfig sf_dec_gemv_nconfig \
  emu_dec_gemv_config_name sf_dec_gemv_config_name
REN="-Dsf_cuda_dec_gemv=emu_cuda_dec_gemv -Dsf_dec_gemv_supports=emu_dec_gemv_supports
     -Dsf_dec_gemv_nconfig=emu_dec_gemv_nconfig -Dsf_dec_gemv_config_name=emu_dec_gemv_config_name"
gcc -std=c11 -O1 -c $REN -DSF_TEST_EMU -I"$W" -Itests -Isrc/cuda -Iinclude "tests/$T.c" -o "$W/test.o"
BLAS=$(grep -o '/[^ ]*blas[^ ]*\.so' "$BC/CMakeFiles/seqfuse.dir/link.txt" | head -1 || true)
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -D__CUDA_ARCH__=900 -D__CUDA_ARCH_FEAT_SM90_ALL -include emu_rt.h \
  -I"$W" -Itests/emu -Isrc/cuda -Isrc/core -Iinclude "$W/launcher_emu.cpp" "$W/test.o" -x none \
  "$BC"/CMakeFiles/seqfuse_obj.dir/src/{core,ref,cpu}/*.o ${BLAS} -lm -fopenmp -rdynamic -o "$W/emu"
SF_SEED=${SF_SEED:-1} "$W/emu" --quick
