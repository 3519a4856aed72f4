#!/usr/bin/env bash
# Configure and build a CUDA release build for the device in $1 (default build).
set -euo pipefail
B=${1:-build}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSF_CUDA_ARCHS="90a;80" > "$B.cfg.log" 2>&1 || { tail -20 "$B.cfg.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" > "$B.build.log" 2>&1 || { grep -m5 -i error "$B.build.log"; exit 1; }
echo "built $B"
