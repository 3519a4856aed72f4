#!/usr/bin/env bash
# Correctness on a GPU machine, for a CUDA build in $1 (default build): every
# CUDA CTest test (each configuration-table row pinned, the bit-for-bit
# comparisons), then compute-sanitizer memcheck and racecheck on the op tests
# with each configuration pinned, six sanitizer runs at a time.  Logs go to
# $OUT (default ./out); one PASS / FAIL line per sanitizer run.
#   bench/device_check.sh [BUILD [OP:CONFIG ...]]
# With configurations given (a new kernel's quick validation), only those are
# checked, and only under the sanitizers and test_ops --all.
set -uo pipefail
B=${1:-build}
shift || true
ONLY="$*"
OUT=${OUT:-out}
mkdir -p "$OUT/san"
export SF_AUTOTUNE_CACHE=
rc=0
if [ -z "$ONLY" ]; then
  echo "== CUDA tests (ctest) =="
  ctest --test-dir "$B" -R "_cuda$" -j 3 --timeout 300 > "$OUT/ctest_cuda.log" 2>&1 || rc=1
  grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest_cuda.log" | tail -15
else
  echo "== every case pinned to each of: $ONLY =="
  for cfg in $ONLY; do
    SF_AUTOTUNE_FORCE=$cfg "$B/tests/test_ops" --op "${cfg%%:*}" --backend cuda --all > "$OUT/all_${cfg/:/_}.log" 2>&1 \
      || rc=1
    echo "$cfg: $(tail -n 1 "$OUT/all_${cfg/:/_}.log")"
  done
fi
san_one() { # TOOL OP CONFIG
  local tool=$1 op=$2 cfg=$3 log="$OUT/san/${1}_${2}_${3}.log"
  SF_AUTOTUNE_FORCE=$op:$cfg timeout -k 5 200 compute-sanitizer --tool "$tool" --error-exitcode 9 \
    "$B/tests/test_ops" --op "$op" --backend cuda > "$log" 2>&1
  local r=$?
  . bench/sanitizer_verdict.sh
  sanitizer_verdict "$tool" "$op:$cfg" "$log" "$r"
}
export -f san_one
export B OUT
echo "== compute-sanitizer, each configuration pinned =="
{ if [ -n "$ONLY" ]; then printf '%s\n' $ONLY; else python3 tools/configs.py list; fi; } | while IFS=: read -r op cfg; do
  for tool in memcheck racecheck; do echo "$tool $op $cfg"; done
done | xargs -P 6 -L 1 bash -c 'san_one "$@"' _ | sort | tee "$OUT/sanitizers.txt"
grep -q "^FAIL" "$OUT/sanitizers.txt" && rc=1
[ -n "$ONLY" ] && exit $rc
for op in ssd_step conv1d_fwd conv1d_update rmsnorm_gated; do
  for tool in memcheck racecheck; do echo "$tool $op auto"; done
done | xargs -P 6 -L 1 bash -c 'san_one "$@"' _ | sort | tee -a "$OUT/sanitizers.txt"
exit $rc
