"""sf_sample and sf_embed on the GPU (src/cuda/sample/), against PyTorch in
the same run on the same GPU.

 - greedy (the benchmarks' decode step) and top-p sampling (temperature
   0.8, top_p 0.9; and top_k 50 + top_p 0.9 + repetition penalty 1.1 with
   a seen mask) at n = 1 / 32 / 128 rows, V = 49152 / 128256 f32 logits:
   microseconds per call of the GPU alone (benchutil.graph_ms: 20 calls in
   a CUDA graph), and the logits' read rate against the ~4.2 TB/s copy
   ceiling.  Peers: torch.argmax for greedy; for top-p the usual torch
   formulation (softmax, sort, cumsum, mask, then the exponential-race draw
   argmax(p / Exp(1)), which is graph-capturable), torch eager; with the
   penalty the peer applies it too (a seen logit divided by 1.1 when
   positive, else multiplied) and marks the drawn tokens in seen, as ours
   does.  TB/s counts the logits and, with the penalty, the seen mask.
   Greedy tokens are checked against torch.argmax before timing.
 - embed: 128 ids from a (128256, 4096) bf16 table, against table[ids].

    PYTHONPATH=python:bench SEQFUSE_LIB=build/libseqfuse.so python3 bench/gpu_sample.py
"""
import sys

from benchutil import COPY_TBS, graph_ms

try:
    import torch

    import seqfuse
except ImportError:
    torch = None


def torch_top_p(logits, T, top_p, top_k=0, penalty=1.0, seen=None):
    x = logits
    if seen is not None:
        hit = seen.bool()
        x = torch.where(hit, torch.where(x > 0, x / penalty, x * penalty), x)
    x = x / T
    if top_k:
        kth = torch.topk(x, top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    p = torch.softmax(x, dim=-1)
    ps, idx = torch.sort(p, dim=-1, descending=True)
    cum = torch.cumsum(ps, dim=-1)
    ps = ps.masked_fill(cum - ps >= top_p, 0.0)
    q = torch.empty_like(ps).exponential_()
    tok = idx.gather(-1, torch.argmax(ps / q, dim=-1, keepdim=True))
    if seen is not None:
        seen.scatter_(1, tok, 1)
    return tok


def main():
    if torch is None or not torch.cuda.is_available():
        print("SKIP gpu_sample: needs torch with CUDA")
        return 0
    print("GPU: %s" % torch.cuda.get_device_name())
    g = torch.Generator(device="cuda").manual_seed(0)
    print("%-28s %6s %7s %10s %10s %7s %9s" % ("case", "n", "V", "seqfuse us", "torch us", "ratio", "TB/s"))
    for V in (49152, 128256):
        for n in (1, 32, 128):
            logits = torch.randn(n, V, device="cuda", generator=g) * 3
            seen = (torch.rand(n, V, device="cuda", generator=g) < 0.01).to(torch.uint8)
            seen_peer = seen.clone()
            rng = torch.arange(n, device="cuda", dtype=torch.int64) * 7919 + 1
            got, want = seqfuse.sample(logits).long(), torch.argmax(logits, dim=-1)
            if not torch.equal(got, want):
                print("FAIL greedy n %d V %d: %d rows differ from torch.argmax" % (n, V, int((got != want).sum())))
                return 1
            cases = [
                ("greedy", lambda: seqfuse.sample(logits), lambda: torch.argmax(logits, dim=-1)),
                ("top_p0.9 T0.8", lambda: seqfuse.sample(logits, temperature=0.8, top_p=0.9, rng=rng),
                 lambda: torch_top_p(logits, 0.8, 0.9)),
                ("top_k50 top_p0.9 penalty", lambda: seqfuse.sample(logits, temperature=0.8, top_k=50, top_p=0.9,
                                                                    repetition_penalty=1.1, seen=seen, rng=rng),
                 lambda: torch_top_p(logits, 0.8, 0.9, 50, 1.1, seen_peer)),
            ]
            for name, ours, peer in cases:
                us = graph_ms(ours) * 1e3
                tu = graph_ms(peer) * 1e3
                tbs = n * V * (5 if "penalty" in name else 4) / (us * 1e-6) / 1e12
                print("%-28s %6d %7d %10.1f %10.1f %6.2fx %6.2f (%.0f%% of %.1f)" %
                      (name, n, V, us, tu, tu / us, tbs, 100 * tbs / COPY_TBS, COPY_TBS))
    table = torch.randn(128256, 4096, device="cuda", generator=g).to(torch.bfloat16)
    ids = torch.randint(0, 128256, (128,), device="cuda", dtype=torch.int32, generator=g)
    idl = ids.long()
    us, tu = graph_ms(lambda: seqfuse.embed(table, ids)) * 1e3, graph_ms(lambda: table[idl]) * 1e3
    print("%-28s %6d %7d %10.1f %10.1f %6.2fx" % ("embed bf16 D4096", 128, 128256, us, tu, tu / us))
    return 0


if __name__ == "__main__":
    sys.exit(main())
