#!/usr/bin/env bash
# Runs the fuzz harness: first every input in REGRESSIONS (each a crash the
# fuzzer once found, kept as a test), then SECONDS of fuzzing from the case
# table's seeds (and whatever CORPUS holds from earlier runs).  Prints the
# executions and coverage libFuzzer reports.
#   run_fuzz.sh FUZZ_BINARY CORPUS_DIR SECONDS REGRESSIONS_DIR [SEEDER]
# SEEDER: a program writing the seeds with `SEEDER --write-seeds DIR` (the
# default is the harness's own -write_seeds=DIR).
set -euo pipefail
bin=$1 corpus=$2 secs=$3 regr=$4 seeder=${5:-}
mkdir -p "$corpus"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
shopt -s nullglob
reg=("$regr"/*)
if [ ${#reg[@]} -gt 0 ]; then
  "$bin" "${reg[@]}" 2>&1 | tail -n 2
fi
if [ -n "$seeder" ]; then
  "$seeder" --write-seeds "$corpus"
else
  "$bin" -write_seeds="$corpus"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 "$corpus" > "$log" 2>&1; then
  tail -n 60 "$log"
  echo "$(basename "$bin"): a crash (the input is in crash-* beside the run; add it to $regr)"
  exit 1
fi
grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|cov:" "$log" | tail -n 3
