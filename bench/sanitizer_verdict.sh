# Sourced by the device validation scripts (bench/device_*.sh):
#   sanitizer_verdict TOOL LABEL LOG RC
# prints one PASS / FAIL line for a compute-sanitizer run (TOOL memcheck or
# racecheck) whose output is in LOG and whose exit status was RC (124 / 137:
# killed by timeout).  PASS needs exit 0 and a clean summary line.
sanitizer_verdict() {
  local tool=$1 label=$2 log=$3 rc=$4 summ clean=0
  if [ "$tool" = memcheck ]; then
    summ=$(grep -E "ERROR SUMMARY" "$log" | tail -n 1)
    echo "$summ" | grep -q "ERROR SUMMARY: 0 errors" && clean=1
  else
    summ=$(grep -E "RACECHECK SUMMARY" "$log" | tail -n 1)
    echo "$summ" | grep -q "RACECHECK SUMMARY: 0 hazards" && clean=1
  fi
  if [ "$rc" = 0 ] && [ $clean = 1 ]; then
    echo "PASS $tool $label ($summ; test: $(grep -E "passed.*failed" "$log" | tail -n 1))"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "FAIL $tool $label: TIMEOUT ($log)"
  else
    echo "FAIL $tool $label: exit $rc, $summ ($log)"
    grep -E "Race reported|Invalid|ERROR|FAIL" "$log" | head -6
  fi
}
