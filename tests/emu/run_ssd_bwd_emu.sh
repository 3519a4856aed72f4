#!/bin/bash
# run_ssd_bwd_emu.sh - checks the CUDA SSD backward without a GPU: its
# sources with the <<<>>> launches rewritten to emu_launch and shared memory
# pointed at the emulator's buffer, compiled for the host (emu_rt.h) and
# linked with the CPU build's objects for the reference.
#   tests/emu/run_ssd_bwd_emu.sh [build-cpu folder] [case]
# Run from the repository root; the CPU build must be current.
set -eu
BC=${1:-build-cpu}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/ssd"
python3 - "$W" <<'PY'
import glob, os, re, sys
w = sys.argv[1]
src = open("src/cuda/ssd/bwd.cu").read()
src = re.sub(r"(\w+)<<<(.*?)>>>\((\w+)\);",
             lambda m: "emu_launch(%s, %s, %s);" % (m.group(1), ",".join(x.strip() for x in m.group(2).split(",")[:3]), m.group(3)),
             src, flags=re.S)
src = src.replace('extern "C" sf_status sf_cuda_ssd_bwd', 'extern "C" sf_status emu_cuda_ssd_bwd')
open(os.path.join(w, "bwd_emu.cpp"), "w").write(src)
for f in glob.glob("src/cuda/ssd/bwd_*"):
    s = open(f).read().replace("extern __shared__ float sm[];", "float *sm = emu_smem;")
    s = s.replace("__shared__ float chan[256];", "static float chan[256];")
    open(os.path.join(w, "ssd", os.path.basename(f)), "w").write(s)
PY
BLAS=$(grep -o '/[^ ]*blas[^ ]*\.so' "$BC/CMakeFiles/seqfuse.dir/link.txt" | head -1 || true)
g++ -std=c++20 -O1 -pthread -I"$W" -Itests/emu -Isrc/cuda -Isrc/core -Iinclude \
  tests/emu/ssd_bwd_emu_main.cpp "$W/bwd_emu.cpp" -x none \
  "$BC"/CMakeFiles/seqfuse_obj.dir/src/{core,ref,cpu}/*.o ${BLAS} -lm -fopenmp -o "$W/emu"
rc=0
for cfg in cpar seq; do SF_AUTOTUNE_FORCE=ssd_bwd:$cfg "$W/emu" ${2:-} || rc=1; done
# cpars with room for 4 states of the P 8, N 16 cases beside the adjoint
# (sub-blocks of 3 tokens; 10 at N 8); the odd case's adjoint would not fit
for c in ${2:-all_opts seq_idx cu_seqlens emptyL emptyb all_bf16}; do
  EMU_SMEM_OPTIN=3872 SF_AUTOTUNE_FORCE=ssd_bwd:cpars "$W/emu" $c || rc=1
done
exit $rc
