"""Split counts and kernel variants of sf_attn_paged, timed in one process
(SF_AUTOTUNE_FORCE=attn_paged:NAME is read at each call; see paged.cu):
each (name, point) pair as bench/gpu_paged.py times it (graph of 20 calls,
median), seqfuse alone, bf16.  One line a point: name, us a call, TB/s."""
import os
import sys

import gpu_paged

CASES = [
    ("1:32768:1:16", ["", "s16", "s24", "s32", "s64", "s99", "l2", "l2s32", "pf", "hws99", "hws198", "l2hws198",
                      "pfhws198"]),
    ("8:8192:1:16", ["", "s3", "s12", "s24", "l2", "pf", "hw", "l2hw", "pfhw"]),
    ("32:4096:1:16", ["", "s2", "s3", "s4", "l2", "l2s3", "pf", "pfs3", "hw", "l2hw", "pfhw"]),
    ("128:2048:1:16", ["", "s2", "s3", "l2", "l2s3", "pf", "pfs3", "hws3", "l2hws3", "pfhws3"]),
]
NAMES = sorted({n for _, ns in CASES for n in ns if n})


def check():
    """Each pinned name's output against the default's and a float32
    reference on sequences of uneven lengths (several splits, tails)."""
    import torch
    import seqfuse
    torch.manual_seed(0)
    b, ps, mp, h, hkv, d = 5, 16, 200, 32, 8, 128
    lens = torch.tensor([3000, 1, 777, 0, 2049], dtype=torch.int32, device="cuda")
    npool = b * mp
    kp = torch.randn(npool, ps, hkv, d, device="cuda", dtype=torch.bfloat16)
    vp = torch.randn_like(kp)
    table = torch.randperm(npool, device="cuda").view(b, mp).to(torch.int32)
    q = torch.randn(b, 1, h, d, device="cuda", dtype=torch.bfloat16)
    ref = torch.zeros(b, 1, h, d, device="cuda")
    for i in range(b):
        n = int(lens[i])
        if n == 0:
            continue
        k = kp[table[i]].reshape(-1, hkv, d)[:n].float().repeat_interleave(h // hkv, dim=1)
        v = vp[table[i]].reshape(-1, hkv, d)[:n].float().repeat_interleave(h // hkv, dim=1)
        s = torch.einsum("hd,khd->hk", q[i, 0].float(), k) / d ** 0.5
        ref[i, 0] = torch.einsum("hk,khd->hd", torch.softmax(s, -1), v)
    out = {}
    for n in [""] + NAMES:
        if n:
            os.environ["SF_AUTOTUNE_FORCE"] = "attn_paged:" + n
        else:
            os.environ.pop("SF_AUTOTUNE_FORCE", None)
        o = seqfuse.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, causal=True)
        torch.cuda.synchronize()
        out[n] = o.float()
    os.environ.pop("SF_AUTOTUNE_FORCE", None)
    parts = []
    for n, o in out.items():
        e = ((o - ref).norm() / ref.norm()).item()
        e0 = (o - out[""]).abs().max().item()
        parts.append(f"{n or 'default'} {e:.1e}/{e0:.0e}")
    print("sweep check (rel err vs f32 ref / max diff vs default): " + " ".join(parts), flush=True)


def main():
    check()
    for pt, names in CASES:
        b, ctx, lq, ps = (int(v) for v in pt.split(":"))
        parts = []
        for n in names:
            if n:
                os.environ["SF_AUTOTUNE_FORCE"] = "attn_paged:" + n
            else:
                os.environ.pop("SF_AUTOTUNE_FORCE", None)
            r, by, _ = gpu_paged.run_point(b, ctx, lq, ps, peers=False, fp8=False)
            parts.append(f"{n or 'default'} {r['ours'] * 1e3:.1f}us {by / (r['ours'] * 1e-3) / 1e12:.2f}")
        print(f"sweep b{b} ctx{ctx} ps{ps}: " + " | ".join(parts), flush=True)
    # The same bytes and CTAs as b128 ctx2k (H 32 / Hkv 8), but one KV head
    # (H 4 / Hkv 1, b 1024): a CTA's rows are then contiguous in the pages
    # instead of 256 of every 2048 bytes; cuDNN on both for reference.
    os.environ.pop("SF_AUTOTUNE_FORCE", None)
    parts = []
    for b, h, hkv in ((128, 32, 8), (1024, 4, 1)):
        gpu_paged.H, gpu_paged.HKV = h, hkv
        r, by, _ = gpu_paged.run_point(b, 2048, 1, 16, peers=True, fp8=False)
        parts.append(f"b{b} H{h}/{hkv}: ours {by / (r['ours'] * 1e-3) / 1e12:.2f} cudnn "
                     f"{by / (r['cudnn'] * 1e-3) / 1e12:.2f} TB/s")
    gpu_paged.H, gpu_paged.HKV = 32, 8
    print("sweep layout ctx2k: " + " | ".join(parts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
