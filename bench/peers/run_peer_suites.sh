#!/usr/bin/env bash
# The peers' own published test suites against the seqfuse binding, on a GPU machine
# (bench/peers/README.md).  From the repository root, with .peers/ carried (filled by
# bench/peers/prepare.sh):
#
#   OUT=out SF_COMMIT=<commit> bash bench/peers/run_peer_suites.sh [BUILD_DIR]
#
# BUILD_DIR (default build) must hold libseqfuse.so; a missing one is built first with
# bench/device_build.sh.  Writes $OUT/peers_<suite>.json (the plugin's summaries),
# $OUT/peers_<suite>.log (pytest's output) and $OUT/RESULTS.md (bench/RESULTS.md with the
# peers section of this run; copy it back into bench/ to publish), and prints the table.
#
#   SF_PEERS_MAX_PER_TEST  parametrisations sampled per test function (default 600; 0: all)
#   SF_PEERS_SEED          the sample's seed (default 0)
#   SF_PEERS_BUDGET_S      seconds for the whole script, build included (default 540): the
#                          last suite gets what is left and, cut short, keeps its counts so far
set -uo pipefail
B=${1:-build}
OUT=${OUT:-out}
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET=${SF_PEERS_BUDGET_S:-540}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

[ -d .peers/flash-attention ] && [ -d .peers/mamba ] && [ -d .peers/site/einops ] || {
    echo "run_peer_suites.sh: .peers/ is missing or incomplete:" \
         "run bench/peers/prepare.sh here and carry .peers" >&2
    exit 2; }
if [ ! -f "$B/libseqfuse.so" ]; then
    echo "== building $B =="
    bash bench/device_build.sh "$B" || exit 1
fi

export SEQFUSE_LIB=$PWD/$B/libseqfuse.so
export PYTHONPATH=$PWD/bench/peers:$PWD/python:$PWD/.peers/site
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
export SF_AUTOTUNE=0                      # the heuristic configuration: no timing of candidates
export SF_PEERS_MAX_PER_TEST=${SF_PEERS_MAX_PER_TEST:-600}
export SF_PEERS_SEED=${SF_PEERS_SEED:-0}
export SF_COMMIT=${SF_COMMIT:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/peers_gpu.txt"
# Without a GPU every test fails at device="cuda": stop here (SF_PEERS_COLLECT_WITHOUT_GPU=1,
# the plugin's local-check switch, goes on, to try the script itself on a machine without one).
python3 -c "
import os, sys, torch, seqfuse
print('torch', torch.__version__, '| seqfuse', seqfuse.version(), '| CUDA build',
      seqfuse.has_cuda_build(), '| GPUs seen by seqfuse', seqfuse.cuda_device_count())
sys.exit(0 if seqfuse.has_cuda() or os.environ.get('SF_PEERS_COLLECT_WITHOUT_GPU') == '1' else 1)
" || { echo "run_peer_suites.sh: no CUDA device for seqfuse (or no CUDA build in $B)" >&2; exit 1; }

FA=.peers/flash-attention/tests/test_flash_attn.py
MT=.peers/mamba/tests/ops/triton
FA_TESTS="$FA::test_flash_attn_output $FA::test_flash_attn_varlen_output"
FA_TESTS+=" $FA::test_flash_attn_causal $FA::test_flash_attn_splitkv $FA::test_flash_attn_kvcache"
# suite name | seconds at most (0: whatever is left) | pytest targets
SUITES=(
    "mamba_selective_state_update|90|$MT/test_selective_state_update.py"
    "mamba_layernorm_gated|60|$MT/test_layernorm_gated.py"
    "flash_attn|0|$FA_TESTS"
)
jsons=()
for s in "${SUITES[@]}"; do
    IFS='|' read -r name cap targets <<< "$s"
    t=$(( $(left) - 20 ))
    [ "$cap" -gt 0 ] && [ "$cap" -lt "$t" ] && t=$cap
    if [ "$t" -le 10 ]; then echo "== $name: no time left, not run =="; continue; fi
    echo "== $name (at most ${t} s) =="
    # SIGINT at the limit: pytest stops, the plugin writes the counts so far.
    # shellcheck disable=SC2086
    SF_PEERS_SUITE=$name SF_PEERS_JSON=$OUT/peers_$name.json \
        timeout -s INT -k 15 "$t" python3 -m pytest -p sfpeers_plugin -p no:cacheprovider \
        -q --tb=no -o addopts= $targets > "$OUT/peers_$name.log" 2>&1
    tail -n 1 "$OUT/peers_$name.log"
    [ -f "$OUT/peers_$name.json" ] && jsons+=("$OUT/peers_$name.json")
done

[ ${#jsons[@]} -gt 0 ] || { echo "no suite produced a summary; see $OUT/peers_*.log" >&2; exit 1; }
# an $OUT/RESULTS.md another script of the same run wrote is updated, not replaced
[ -f "$OUT/RESULTS.md" ] || cp bench/RESULTS.md "$OUT/RESULTS.md"
python3 bench/peers/results.py "${jsons[@]}" --results "$OUT/RESULTS.md"
rc=$?
echo "total $(( $(date +%s) - T0 )) s"
exit $rc
