#!/usr/bin/env bash
# A new kernel's validation in one short device run: every case pinned to each
# given configuration (test_ops --all), compute-sanitizer memcheck and racecheck
# on the quick case set pinned to each, all at once on the GPU; one line per job.
#   bench/device_validate.sh BUILD_DIR OP:CONFIG [OP:CONFIG ...]
# e.g. bench/device_validate.sh build-gpu ssd_fwd:fg32 ssd_fwd:split32
# Logs stay in $LOGS (default /tmp/validate); exit 1 if any job failed.
set -uo pipefail
B=${1:?build directory}
shift
LOGS=${LOGS:-/tmp/validate}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH=$PWD/$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
. "$(dirname "$0")/sanitizer_verdict.sh"
job() { local n=$1; shift; ( timeout -k 5 300 "$@" > "$LOGS/$n.log" 2>&1; echo $? > "$LOGS/$n.rc" ) & }
for cfg in "$@"; do
  op=${cfg%%:*} tag=${cfg/:/_}
  job "pin_$tag" env SF_AUTOTUNE_CACHE= SF_AUTOTUNE_FORCE="$cfg" "$B/tests/test_ops" --op "$op" --backend cuda --all
  for tool in memcheck racecheck; do
    job "${tool}_$tag" env SF_AUTOTUNE_CACHE= SF_AUTOTUNE_FORCE="$cfg" \
      "$CS" --tool $tool --error-exitcode 9 "$B/tests/test_ops" --op "$op" --backend cuda
  done
done
wait
rc=0
for cfg in "$@"; do
  tag=${cfg/:/_}
  r=$(cat "$LOGS/pin_$tag.rc")
  if [ "$r" = 0 ]; then
    echo "PASS pinned $cfg ($(grep -E "passed.*failed" "$LOGS/pin_$tag.log" | tail -n 1))"
  else
    echo "FAIL pinned $cfg: exit $r"
    grep -E "FAIL" "$LOGS/pin_$tag.log" | head -6
    rc=1
  fi
  for tool in memcheck racecheck; do
    line=$(sanitizer_verdict $tool "$cfg" "$LOGS/${tool}_$tag.log" "$(cat "$LOGS/${tool}_$tag.rc")")
    echo "$line"
    case $line in PASS*) ;; *) rc=1 ;; esac
  done
done
exit $rc
