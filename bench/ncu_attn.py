"""One attention forward at one shape, for Nsight Compute (ours, or the cuDNN peer).

    ncu --profile-from-start off --clock-control none --kernel-name regex:attn_fwd \\
        --section SourceCounters -f -o rep python3 bench/ncu_attn.py 32 512 32 64 [causal] [cudnn]
Arguments: B L H d, then the words `causal` and/or `cudnn` (the peer through SDPA, same
layout as bench/gpu_attn.py gives it).  The first call runs outside the profiled range (it may
time every candidate configuration: the autotuner), the second inside it
(torch.cuda.profiler.start / stop), so ncu sees only the configuration that serves the
shape (a --launch-skip would count tuning candidates' launches too).
"""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import seqfuse


def main():
    B, L, H, d = (int(v) for v in sys.argv[1:5])
    words = sys.argv[5:]
    causal = "causal" in words
    q, k, v = (torch.randn(B, L, H, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))

    def call():
        if "cudnn" in words:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        else:
            seqfuse.flash_attn_func(q, k, v, causal=causal)

    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
