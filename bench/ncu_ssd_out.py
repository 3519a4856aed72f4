"""One SSD forward on the 2.7B layer shape (default b 8, L 4096, bf16), for Nsight
Compute: a kernel's stall reasons or memory throughput.

    SF_AUTOTUNE_FORCE=ssd_fwd:wg8 ncu --clock-control none --kernel-name regex:ssd_out \\
        --launch-skip 1 --launch-count 1 --section WarpStateStats --section SchedulerStats \\
        python3 bench/ncu_ssd_out.py
f32: `--f32`; the b 1 L 16384 point: `--batch 1 --seqlen 16384`.
"""
import argparse

import torch

import seqfuse
from gpu_ssd import inputs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--f32", action="store_true", help="f32 inputs (default bf16)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seqlen", type=int, default=4096)
    o = ap.parse_args()
    x, dt, A, B, C, D, z, dtb = inputs(o.batch, o.seqlen, 80, 64, 1, 128,
                                     torch.float32 if o.f32 else torch.bfloat16)
    for _ in range(2):  # the first call may tune; ncu skips it (--launch-skip 1)
        seqfuse.mamba_chunk_scan_combined(x, dt, A, B, C, 256, D=D, z=z, dt_bias=dtb,
                                          dt_softplus=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
