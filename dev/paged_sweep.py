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
    return 0


if __name__ == "__main__":
    sys.exit(main())
