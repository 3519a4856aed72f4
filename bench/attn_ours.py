"""Time seqfuse's attention forward alone at points of the FlashAttention sweep
(B = 16384 / L, H = 2048 / d, bf16), one line per call: for A/B runs of library
builds or pinned configurations, where the peers would only add time (their
numbers come from bench/gpu_attn.py in the same device run).

    SEQFUSE_LIB=build/libseqfuse.so SF_AUTOTUNE_FORCE=attn_fwd:wsp128 \\
        python3 bench/attn_ours.py TAG d:L:causal [d:L:causal ...]
e.g. python3 bench/attn_ours.py main 128:512:1 256:2048:0   (prints TFLOP/s, triton
do_bench medians; FLOPs = 4 B H L^2 d, halved when causal).
"""
import sys

import torch
import triton.testing

import seqfuse


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    tag, out = sys.argv[1], []
    for spec in sys.argv[2:]:
        d, L, causal = (int(x) for x in spec.split(":"))
        B, H = 16384 // L, 2048 // d
        g = torch.Generator(device="cuda").manual_seed(B * 131 + L + d)
        q, k, v = (torch.randn(B, L, H, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))

        def call():
            return seqfuse.flash_attn_func(q, k, v, causal=bool(causal))

        call()  # the autotuner (or the pinned configuration) settles outside the timing
        torch.cuda.synchronize()
        ms = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median")
        flops = 4.0 * B * H * L * L * d / (2 if causal else 1)
        out.append("%s %.1f" % (spec, flops / (ms * 1e-3) / 1e12))
    print("%-24s" % tag, "  ".join(out), flush=True)


if __name__ == "__main__":
    main()
