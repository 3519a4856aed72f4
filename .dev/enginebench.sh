#!/bin/bash
# Device round for bench/gpu_engine.py (issue 35: the engine against transformers on the H200).
# Run from the repository root with a CUDA build of this tree in $B (default build-dev: its
# seqfuse executable and libseqfuse.so); $SF_EXTRA_LIBS, when set, goes first on
# LD_LIBRARY_PATH (libcjson / libpcre2 where the box lacks them).  Checks, in order:
#   1. seqfuse.gemm (the binding of sf_gemm that times the prefill's products) against float64
#      on torch CUDA tensors (tests/python/test_gemm.py; its CPU cases too);
#   2. the quick benchmark on the SmolLM2-135M and Llama-3.2-1B shapes, one process per model
#      (each bounded by `timeout 250`; the JSON is written after every stage, so a piece cut
#      short keeps what it measured): batch 1 and 32 decode (128-token prompt, 32 new tokens)
#      and 512 / 4096-token prefill: ours (as built, and --no-graphs when bench-model lists it),
#      transformers eager and static+compile, the floor, the prefill's GEMMs alone;
#   3. the engine section and the plot from the two pieces (into $OUT/RESULTS.md, a copy).
# No new kernel here (seqfuse.gemm calls sf_gemm, cuBLAS): no compute-sanitizer pass.
# Output in $OUT: engine_<model>.json / .log, RESULTS.md, engine_h200.png, gemm_test.log.
set -u
OUT=${OUT:-/tmp/enginebench_out}
mkdir -p "$OUT"
B=${B:-build-dev}
case "$B" in /*) ;; *) B=$PWD/$B ;; esac
if [ -n "${SF_EXTRA_LIBS:-}" ]; then export LD_LIBRARY_PATH=$SF_EXTRA_LIBS:${LD_LIBRARY_PATH:-}; fi
export PYTHONPATH=$PWD/python:$PWD/bench SEQFUSE_LIB=$B/libseqfuse.so
export SF_COMMIT=${SF_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
if [ ! -x "$B/seqfuse" ] || [ ! -f "$B/libseqfuse.so" ]; then
    echo "enginebench.sh: no $B/seqfuse or $B/libseqfuse.so: build this tree with CUDA first (B=dir)"
    exit 2
fi
ldd "$B/seqfuse" | grep "not found" && echo "enginebench.sh: missing libraries: set SF_EXTRA_LIBS"
"$B/seqfuse" bench-model --help | grep -q -- --no-graphs && echo "bench-model has --no-graphs" \
    || echo "bench-model has no --no-graphs: that variant is skipped"

echo "== 1. seqfuse.gemm against float64 (CUDA cases included)"
timeout 60 python3 -m pytest -q -rs tests/python/test_gemm.py > "$OUT/gemm_test.log" 2>&1
echo "rc $?"; tail -4 "$OUT/gemm_test.log"

echo "== 2. the quick engine benchmark"
for m in smollm2-135m llama-1b; do
    timeout 250 python3 bench/gpu_engine.py --quick --models "$m" --build "$B" --cache /tmp/sf_engine_ckpt \
        --json-out "$OUT/engine_$m.json" > "$OUT/engine_$m.log" 2>&1
    echo "$m: rc $?"
    grep -v -i "warn" "$OUT/engine_$m.log" | tail -25
done

echo "== 3. section and plot"
cp bench/RESULTS.md "$OUT/RESULTS.md"
ls "$OUT"/engine_*.json > /dev/null 2>&1 && python3 bench/gpu_engine.py --from-json "$OUT"/engine_*.json \
    --results "$OUT/RESULTS.md" --plot "$OUT/engine_h200.png" | tail -3
