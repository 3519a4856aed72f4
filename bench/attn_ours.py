"""Time seqfuse's attention forward alone at points of the FlashAttention sweep
(B = 16384 / L, H = 2048 / d, bf16), one line per call: for A/B runs of library
builds or pinned configurations, where the peers would only add time (their
numbers come from bench/gpu_attn.py in the same device run).

    SEQFUSE_LIB=build/libseqfuse.so SF_AUTOTUNE_FORCE=attn_fwd:wsp128 \\
        PYTHONPATH=python:bench python3 bench/attn_ours.py TAG d:L:causal [d:L:causal ...]
e.g. python3 bench/attn_ours.py main 128:512:1 256:2048:0 vit   (prints TFLOP/s, triton
do_bench medians; FLOPs = 4 B H L^2 d, halved when causal; `vit` is bench/gpu_attn.py's
ViT-B/16 point: B 256, L 196, 12 heads of 64, full).
"""
import sys

import torch

import seqfuse
from gpu_attn import attn_flops, attn_inputs, bench


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    tag, out = sys.argv[1], []
    for spec in sys.argv[2:]:
        if spec == "vit":
            B, L, H, d, causal = 256, 196, 12, 64, 0
        else:
            d, L, causal = (int(x) for x in spec.split(":"))
            B, H = 16384 // L, 2048 // d
        q, k, v = attn_inputs(B, L, H, d)

        def call():
            return seqfuse.flash_attn_func(q, k, v, causal=bool(causal))

        call()  # the autotuner (or the pinned configuration) settles outside the timing
        torch.cuda.synchronize()
        out.append("%s %.1f" % (spec, attn_flops(B, L, H, d, causal) / (bench(call) * 1e-3) / 1e12))
    print("%-24s" % tag, "  ".join(out), flush=True)


if __name__ == "__main__":
    main()
