"""Short-context decode as the engine calls it (batch 1, one new token,
contexts of 128 and 192 tokens): microseconds a call (graph of 20 calls,
median) at the SmolLM2-135M (H 9 / Hkv 3, d 64), Llama-3.2-1B (H 32 / Hkv 8,
d 64) and Llama-3-8B (H 32 / Hkv 8, d 128) attention shapes, bf16; the default, then each variant named on
the command line (SF_AUTOTUNE_FORCE=attn_paged:NAME), "/" between."""
import os
import sys

import gpu_paged

# pinned variants timed after the default (argv: names, e.g. pf s2)
FORCE = [""] + sys.argv[1:]


def main():
    parts = []
    for name, h, hkv, d in (("smollm2", 9, 3, 64), ("llama1b", 32, 8, 64), ("llama8b", 32, 8, 128)):
        gpu_paged.H, gpu_paged.HKV, gpu_paged.D = h, hkv, d
        for ctx in (128, 192):
            ts = []
            for force in FORCE:
                if force:
                    os.environ["SF_AUTOTUNE_FORCE"] = "attn_paged:" + force
                r, _, _ = gpu_paged.run_point(1, ctx, 1, 16, peers=False, fp8=False)
                os.environ.pop("SF_AUTOTUNE_FORCE", None)
                ts.append(f"{r['ours'] * 1e3:.1f}")
            parts.append(f"{name} ctx{ctx} {'/'.join(ts)}us")
    print("short: " + " | ".join(parts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
