#!/usr/bin/env bash
# The test command: builds seqfuse twice and runs every test.
#  1. the release build (with the CUDA backend when nvcc is present), warnings
#     as errors, all CTest tests (CUDA tests skip, visibly, without a GPU);
#  2. a CPU-only build under AddressSanitizer + UBSan (no leaks, no invalid
#     access), running the C tests again;
#  3. a CPU-only build without OpenMP (single-threaded CPU backend);
#  4. the libFuzzer harness over the C API (clang, ASan + UBSan), run for
#     SF_FUZZ_SECONDS (default 60) from the case table's seeds, and the
#     checkpoint loaders' harness for 30 s from test_checkpoint's seeds.
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
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -E "python_binding|install_consumer|main_job_cpu_json"
echo "== build (CPU only, no OpenMP) =="
cmake -S . -B build-noomp -DCMAKE_BUILD_TYPE=Release -DSF_CUDA=OFF -DSF_OPENMP=OFF -DSF_WERROR=ON >/dev/null
cmake --build build-noomp -j"$jobs"
ctest --test-dir build-noomp --output-on-failure -j"$jobs" -E python_binding
echo "== fuzzing the C API (libFuzzer, ASan + UBSan) =="
if command -v clang >/dev/null && echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' \
    | clang -x c -fsanitize=fuzzer - -o /tmp/sf_fuzz_probe.$$ 2>/dev/null; then
  rm -f /tmp/sf_fuzz_probe.$$
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DSF_FUZZ=ON -DSF_CUDA=OFF \
    -DSF_FUZZ_SECONDS="${SF_FUZZ_SECONDS:-60}" >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_api fuzz_model_load test_checkpoint fuzz_tokenizer
  ctest --test-dir build-fuzz --output-on-failure -R '^fuzz_api$' -V | grep -E "seeds|DONE|executed_units|Passed|Failed|crash"
  ctest --test-dir build-fuzz --output-on-failure -R '^fuzz_model_load$' -V | grep -E "seeds|DONE|executed_units|Passed|Failed|crash"
  ctest --test-dir build-fuzz --output-on-failure -R '^fuzz_tokenizer$' -V | grep -E "seeds|DONE|executed_units|Passed|Failed|crash"
else
  echo "SKIPPED: clang with libFuzzer not found (apt-get install clang libclang-rt-14-dev)"
fi
echo "all tests passed"
