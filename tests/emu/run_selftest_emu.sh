#!/bin/bash
# run_selftest_emu.sh - the host emulator's own primitives (mbarriers and
# bulk copies so far) on kernels of selftest_emu_main.cpp.  Needs no build
# folder.   tests/emu/run_selftest_emu.sh [test]
set -eu
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -D__CUDA_ARCH__=900 -D__CUDA_ARCH_FEAT_SM90_ALL -Itests/emu -Isrc/cuda -Isrc/core -Iinclude \
  tests/emu/selftest_emu_main.cpp -lm -rdynamic -o "$W/emu"
"$W/emu" ${1:-}
