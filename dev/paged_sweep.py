"""Split counts and kernel variants of sf_attn_paged, timed in one process
(SF_AUTOTUNE_FORCE=attn_paged:NAME is read at each call; see paged.cu):
each (name, point) pair as bench/gpu_paged.py times it (graph of 20 calls,
median), seqfuse alone, bf16.  One line a point: name, us a call, TB/s."""
import os
import sys

import gpu_paged

CASES = [
    ("1:32768:1:16", ["", "s16", "s24", "s32", "s64", "s99", "l2", "l2s32"]),
    ("8:8192:1:16", ["", "s3", "s12", "s24", "l2"]),
    ("32:4096:1:16", ["", "s2", "s3", "s4", "l2", "l2s3"]),
    ("128:2048:1:16", ["", "s2", "s3", "l2", "l2s3"]),
]


def main():
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
