"""One SSD forward on the 2.7B layer shape (b 8, L 4096, bf16), for Nsight Compute:
the output kernel's stall reasons (latency vs issue vs memory).

    SF_AUTOTUNE_FORCE=ssd_fwd:wg8 ncu --clock-control none --kernel-name regex:ssd_out \\
        --launch-skip 1 --launch-count 1 --section WarpStateStats --section SchedulerStats \\
        python3 bench/ncu_ssd_out.py
f32 (the split32 output kernel ssd_out_sc32): SF_AUTOTUNE_FORCE=ssd_fwd:split32,
--kernel-name regex:ssd_out_sc32, and `python3 bench/ncu_ssd_out.py --f32`.
"""
import sys

import torch

import seqfuse
from gpu_ssd import inputs


def main():
    x, dt, A, B, C, D, z, dtb = inputs(8, 4096, 80, 64, 1, 128,
                                     torch.float32 if "--f32" in sys.argv[1:] else torch.bfloat16)
    for _ in range(2):  # the first call may tune; ncu skips it (--launch-skip 1)
        seqfuse.mamba_chunk_scan_combined(x, dt, A, B, C, 256, D=D, z=z, dt_bias=dtb,
                                          dt_softplus=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
