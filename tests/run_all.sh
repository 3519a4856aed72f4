#!/usr/bin/env bash
# The test command: builds seqfuse twice and runs every test.
#  1. the release build (with the CUDA backend when nvcc is present), warnings
#     as errors, all CTest tests (CUDA tests skip, visibly, without a GPU);
#  2. a CPU-only build under AddressSanitizer + UBSan (no leaks, no invalid
#     access), running the C tests again;
#  3. a CPU-only build without OpenMP (single-threaded CPU backend).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
python3 -c "import numpy, pytest, ml_dtypes" 2>/dev/null \
  || python3 -m pip install -q numpy pytest ml_dtypes 2>/dev/null \
  || python3 -m pip install -q --break-system-packages numpy pytest ml_dtypes

echo "== build (release, -Werror) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSF_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
echo "== tests =="
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== build (CPU only, ASan + UBSan) =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSF_CUDA=OFF -DSF_SANITIZE=ON -DSF_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs"
echo "== tests under ASan + UBSan =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -E "python_binding|install_consumer"
echo "== build (CPU only, no OpenMP) =="
cmake -S . -B build-noomp -DCMAKE_BUILD_TYPE=Release -DSF_CUDA=OFF -DSF_OPENMP=OFF -DSF_WERROR=ON >/dev/null
cmake --build build-noomp -j"$jobs"
ctest --test-dir build-noomp --output-on-failure -j"$jobs" -E python_binding
echo "all tests passed"
