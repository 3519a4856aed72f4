"""One paged decode call at one point, for Nsight Compute (ours, or SDPA
cuDNN on the same K/V stored contiguously), inside a profiler range:

    ncu --profile-from-start off --section SpeedOfLight ... \\
        python3 dev/paged_ncu.py B CTX PS [cudnn]
H 32 over 8 KV heads, d 128, bf16, one new token, pages shuffled."""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import seqfuse

H, HKV, D = 32, 8, 128


def main():
    b, ctx, ps = (int(v) for v in sys.argv[1:4])
    peer = "cudnn" in sys.argv[4:]
    dev = "cuda"
    kc = torch.randn(b, ctx, HKV, D, device=dev, dtype=torch.bfloat16)
    vc = torch.randn(b, ctx, HKV, D, device=dev, dtype=torch.bfloat16)
    q = torch.randn(b, 1, H, D, device=dev, dtype=torch.bfloat16)
    npg = ctx // ps
    perm = torch.randperm(b * npg, device=dev)
    table = perm.view(b, npg).to(torch.int32)
    kp = torch.empty(b * npg, ps, HKV, D, device=dev, dtype=torch.bfloat16)
    vp = torch.empty_like(kp)
    kp[perm] = kc.view(b * npg, ps, HKV, D)
    vp[perm] = vc.view(b * npg, ps, HKV, D)
    lens = torch.full((b,), ctx, device=dev, dtype=torch.int32)
    qt, kt, vt = q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2)

    def call():
        if peer:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        else:
            seqfuse.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, causal=True)

    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
