#!/bin/bash
# run_dec_gemv_launch_emu.sh - runs tests/test_dec_gemv.c (the engine's
# decode-step products, every configuration row, against its double
# reference, and the refusals), tests/test_dec_qkv.c (the q/k/v product
# with the rotary embedding and the KV-cache append) or tests/test_gemv_norm.c
# (the product + residual add + RMSNorm of layer/gemv_norm.cu) on the host
# emulator: the launcher src/cuda/layer/dec_gemv.cu (or gemv_norm.cu) and
# its kernels prepared by emu_prep.py
# (entry points renamed emu_...), the test built with SF_TEST_EMU (its
# context on the host) and --quick (the small shapes), linked with the CPU
# build's objects.
#   tests/emu/run_dec_gemv_launch_emu.sh [build-cpu folder] [test_dec_gemv | test_dec_qkv | test_gemv_norm]
# Run from the repository root; the CPU build must be current.
set -eu
BC=${1:-build-cpu}
T=${2:-test_dec_gemv}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 tests/emu/emu_prep.py "$W" gemm_swiglu
if [ "$T" = test_gemv_norm ]; then
  NAMES="sf_cuda_gemv_add_rmsnorm sf_gemv_norm_supports sf_gemv_norm_scratch_bytes"
  L=src/cuda/layer/gemv_norm.cu
else
  NAMES="sf_cuda_dec_gemv sf_dec_gemv_supports sf_dec_gemv_nconfig sf_dec_gemv_config_name"
  L=src/cuda/layer/dec_gemv.cu
fi
PAIRS="" REN=""
for n in $NAMES; do PAIRS="$PAIRS emu_${n#sf_} $n"; REN="$REN -D$n=emu_${n#sf_}"; done
python3 tests/emu/emu_prep.py "$W" layer $L $PAIRS
gcc -std=c11 -O1 -c $REN -DSF_TEST_EMU -I"$W" -Itests -Isrc/cuda -Iinclude "tests/$T.c" -o "$W/test.o"
BLAS=$(grep -o '/[^ ]*blas[^ ]*\.so' "$BC/CMakeFiles/seqfuse.dir/link.txt" | head -1 || true)
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -D__CUDA_ARCH__=900 -D__CUDA_ARCH_FEAT_SM90_ALL -include emu_rt.h \
  -I"$W" -Itests/emu -Isrc/cuda -Isrc/core -Iinclude "$W/launcher_emu.cpp" "$W/test.o" -x none \
  "$BC"/CMakeFiles/seqfuse_obj.dir/src/{core,ref,cpu}/*.o ${BLAS} -lm -fopenmp -rdynamic -o "$W/emu"
SF_SEED=${SF_SEED:-1} "$W/emu" --quick
