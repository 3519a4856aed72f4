"""Decode attention over a paged KV cache on the GPU: seqfuse's sf_attn_paged
against torch SDPA (cuDNN and flash backends) on the same K/V stored
contiguously, in one run on the same GPU.

32 query heads over 8 KV heads of 128 (Llama-3-8B's attention), bf16, one new
token per sequence (and 4 for the chunked case), pages of 16 and 64 tokens
handed out in a shuffled order.  Decode is bound by reading K and V once:
bandwidth = (K + V bytes of every sequence's context) / time, against the
copy ceiling of ~4.2 TB/s measured on this GPU.  The fp8 column reads the
same cache as e4m3 codes with a float32 scale per (token, KV head) (the
sf_kv_cache layout): its bandwidth counts 1 byte a K/V element plus the
scales; "fp8 speedup" is the bf16 time over the fp8 time.

    PYTHONPATH=python:bench SEQFUSE_LIB=build/libseqfuse.so python3 bench/gpu_paged.py \\
        [--results bench/RESULTS.md] [--csv out.csv] [--plot [out.png]]
    python3 bench/gpu_paged.py --from-csv out.csv --plot    (redraw without a GPU)
    ... bench/gpu_paged.py --split-sweep 0,1,2,4,8,16,32 --points 1:32768:1:16,8:8192:1:16
                                                            (the split count pinned: split_count's aim)
"""
import argparse
import sys

from benchutil import COPY_TBS, commit, graph_ms, md_table, replace_section, write_csv

try:
    import torch
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import seqfuse
except ImportError:
    torch = None

H, HKV, D = 32, 8, 128
# (batch, context, new tokens, page size)
POINTS = [(128, 2048, 1, 16), (32, 4096, 1, 16), (32, 4096, 1, 64), (8, 8192, 1, 16),
          (1, 32768, 1, 16), (32, 4096, 4, 16)]


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


GRAPH_CALLS = 20
LAYOUT = "nhd"  # the pools' layout (--layout)


def run_point(b, ctx, lq, ps, peers=True, fp8=True):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(b * 7 + ctx + ps)
    kc = torch.randn(b, ctx, HKV, D, device=dev, dtype=torch.bfloat16, generator=g)
    vc = torch.randn(b, ctx, HKV, D, device=dev, dtype=torch.bfloat16, generator=g)
    q = torch.randn(b, lq, H, D, device=dev, dtype=torch.bfloat16, generator=g)
    # the same K/V in pages, the pages of all sequences in a shuffled order
    npg = ctx // ps
    perm = torch.randperm(b * npg, device=dev, generator=g)
    table = perm.view(b, npg).to(torch.int32)
    if LAYOUT == "hnd":  # a page's rows of one kv head together: (pages, Hkv, page, d) viewed as NHD
        kp = torch.empty(b * npg, HKV, ps, D, device=dev, dtype=torch.bfloat16).permute(0, 2, 1, 3)
        vp = torch.empty(b * npg, HKV, ps, D, device=dev, dtype=torch.bfloat16).permute(0, 2, 1, 3)
    else:
        kp = torch.empty(b * npg, ps, HKV, D, device=dev, dtype=torch.bfloat16)
        vp = torch.empty_like(kp)
    kp[perm] = kc.view(b * npg, ps, HKV, D)
    vp[perm] = vc.view(b * npg, ps, HKV, D)
    lens = torch.full((b,), ctx, device=dev, dtype=torch.int32)

    def ours():
        return seqfuse.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, causal=True)

    # FP8 pools: per-(token, kv head) scales amax / 448, codes of x / scale
    def quant(x):
        sc = x.float().abs().amax(dim=-1) / 448.0
        codes = (x.float() / sc.clamp_min(1e-30)[..., None]).to(torch.float8_e4m3fn)
        return codes, sc

    has_fp8 = fp8 and hasattr(torch, "float8_e4m3fn")
    if has_fp8:
        k8, ks8 = quant(kp)
        v8, vs8 = quant(vp)

    def ours_fp8():
        return seqfuse.flash_attn_with_kvcache(q, k8, v8, cache_seqlens=lens, block_table=table, causal=True,
                                               k_scale=ks8, v_scale=vs8)

    qt, kt, vt = q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2)

    def peer(backend):
        with sdpa_kernel(backend):
            # bottom-right causal for lq > 1 through an explicit mask is not what SDPA's fast
            # paths take: for decode (lq 1) no mask is needed, for lq > 1 the mask is the
            # last lq rows of causal, built once
            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True)

    mask = None
    if lq > 1:
        i = torch.arange(lq, device=dev)[:, None] + ctx - lq
        mask = torch.arange(ctx, device=dev)[None, :] <= i
    out = ours()
    torch.cuda.synchronize()
    ref = None
    res = {"ours": graph_ms(ours, GRAPH_CALLS), "ours_eager": bench(ours)}
    res["fp8"], err8 = float("nan"), float("nan")
    if has_fp8:
        o8 = ours_fp8()
        torch.cuda.synchronize()
        err8 = ((o8.float() - out.float()).norm() / out.float().norm()).item()
        res["fp8"] = graph_ms(ours_fp8, GRAPH_CALLS)
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        if not peers:
            res[name] = float("nan")
            continue
        try:
            r = peer(be)
            torch.cuda.synchronize()
            if ref is None:
                ref = r.transpose(1, 2)
            res[name] = graph_ms(lambda: peer(be), GRAPH_CALLS)
        except RuntimeError:
            res[name] = float("nan")
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item() if ref is not None else float("nan")
    kv_bytes = 2.0 * b * ctx * HKV * D * 2
    res["fp8_bytes"] = 2.0 * b * ctx * HKV * (D * 1 + 4)  # codes and scales
    res["fp8_err"] = err8
    return res, kv_bytes, err


PLOT = "bench/paged_decode_h200.png"  # the plot bench/RESULTS.md shows


def plot(rows, path, title):
    """Bars of TB/s per point (ours and each peer that ran) under the copy ceiling."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = [("ours_tbs", "seqfuse (paged)"), ("cudnn_tbs", "SDPA cuDNN (contiguous)"),
              ("flash_tbs", "SDPA flash (contiguous)")]
    if rows and "fp8_tbs" in rows[0]:
        series.append(("fp8_tbs", "seqfuse fp8 pages (1 B + scales)"))
    fig, ax = plt.subplots(figsize=(9, 3.8))
    w = 0.8 / len(series)
    for i, (key, lab) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * w for j in range(len(rows))]
        ax.bar(xs, [float(r[key]) if float(r[key]) == float(r[key]) else 0.0 for r in rows], w, label=lab)
    ax.axhline(COPY_TBS, color="k", lw=0.8, ls="--", label=f"copy ~{COPY_TBS} TB/s")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"b{r['b']} ctx{r['ctx']}\nk={r['lq']} page {r['ps']}" for r in rows], fontsize=8)
    ax.set_ylabel("K+V bytes / time (TB/s)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"{path}: written")


def read_csv(path):
    with open(path) as f:
        keys = f.readline().strip().split(",")
        return [dict(zip(keys, line.strip().split(","))) for line in f if line.strip()]


def with_splits(force, n):
    """SF_AUTOTUNE_FORCE with attn_paged's split count pinned to n (0: as it was); joined to an
    attn_paged name already there by '+' (the library reads the first attn_paged entry only)."""
    if not n:
        return force
    parts = [v for v in force.split(",") if v]
    for i, v in enumerate(parts):
        if v.startswith("attn_paged:"):
            parts[i] = f"{v}+s{n}"
            return ",".join(parts)
    return ",".join(parts + [f"attn_paged:s{n}"])


def split_sweep(points, counts, fp8):
    """Each point with SF_AUTOTUNE_FORCE=attn_paged:s<N> for each N (0: unpinned); TB/s per N."""
    import os
    base = os.environ.get("SF_AUTOTUNE_FORCE", "")
    print("b ctx lq page | " + " ".join(f"{'own' if n == 0 else 's' + str(n):>11s}" for n in counts)
          + " | best bf16, best fp8   (bf16 / fp8 TB/s)")
    for b, ctx, lq, ps in points:
        got = []
        for n in counts:
            os.environ["SF_AUTOTUNE_FORCE"] = with_splits(base, n)
            r, by, _ = run_point(b, ctx, lq, ps, False, fp8)
            got.append((by / (r["ours"] * 1e-3) / 1e12,
                        r["fp8_bytes"] / (r["fp8"] * 1e-3) / 1e12 if r["fp8"] == r["fp8"] else float("nan")))
        os.environ["SF_AUTOTUNE_FORCE"] = base
        bi = max(range(len(counts)), key=lambda i: got[i][0])
        fi = max(range(len(counts)), key=lambda i: got[i][1] if got[i][1] == got[i][1] else -1)
        name = lambda i: "own" if counts[i] == 0 else f"s{counts[i]}"
        print(f"{b} {ctx} {lq} {ps} | " + " ".join(f"{x:5.2f}/{y:5.2f}" for x, y in got)
              + f" | {name(bi)}, {name(fi)}", flush=True)
    return 0


def main():
    global D, LAYOUT
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=None)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--no-peers", action="store_true", help="time seqfuse alone (comparing its variants)")
    ap.add_argument("--no-fp8", action="store_true",
                    help="skip the FP8 pools (a configuration pinned by SF_AUTOTUNE_FORCE that serves 16-bit only)")
    ap.add_argument("--points", default="", metavar="B:CTX:LQ:PS,...",
                    help="these points instead of the default list")
    ap.add_argument("--plot", nargs="?", const=PLOT, default=None,
                    help=f"write the plot (to {PLOT} unless a path is given)")
    ap.add_argument("--from-csv", default="", metavar="CSV",
                    help="no GPU: draw --plot from an earlier run's --csv (title from --title)")
    ap.add_argument("--head-dim", type=int, default=D, help=f"the head dim (default {D})")
    ap.add_argument("--title", default="paged decode, H 32 / Hkv 8, d 128, bf16")
    ap.add_argument("--split-sweep", default="", metavar="N,N,...",
                    help="seqfuse alone at each point with its split count pinned to each N (0: its own "
                         "choice), bf16 and fp8 TB/s and the best N of each (checks split_count's aim)")
    ap.add_argument("--layout", choices=("nhd", "hnd"), default="nhd",
                    help="the pools' layout: (pages, page, Hkv, d), the default, or (pages, Hkv, page, d) "
                         "passed as its strided view")
    a = ap.parse_args()
    D, LAYOUT = a.head_dim, a.layout
    if a.from_csv:
        if a.plot:
            plot(read_csv(a.from_csv), a.plot, a.title)
        return 0
    if torch is None or not torch.cuda.is_available():
        print("gpu_paged.py: needs torch with CUDA, triton and seqfuse", file=sys.stderr)
        return 77
    gpu = torch.cuda.get_device_name()
    import datetime
    date = datetime.date.today().isoformat()
    rows = []
    print(f"{gpu}, torch {torch.__version__}, commit {commit()}, H {H} Hkv {HKV} d {D} bf16")
    print(f"{'b':>4s} {'ctx':>6s} {'lq':>3s} {'page':>4s}   ours TB/s   cuDNN    flash   efficient   "
          f"ours/best peer  err vs peer")
    points = [tuple(int(v) for v in pt.split(":")) for pt in a.points.split(",")] if a.points else POINTS
    if a.split_sweep:
        return split_sweep(points, [int(v) for v in a.split_sweep.split(",")], not a.no_fp8)
    for b, ctx, lq, ps in points:
        r, by, err = run_point(b, ctx, lq, ps, not a.no_peers, not a.no_fp8)
        fp8_bytes, fp8_err = r.pop("fp8_bytes"), r.pop("fp8_err")
        tbs = {k: ((fp8_bytes if k == "fp8" else by) / (v * 1e-3) / 1e12 if v == v else float("nan"))
               for k, v in r.items()}
        peers = [v for k, v in r.items() if not k.startswith("ours") and k != "fp8" and v == v]
        best = min(peers) if peers else float("nan")
        ratio = best / r["ours"]
        print(f"{b:4d} {ctx:6d} {lq:3d} {ps:4d}   {tbs['ours']:8.2f} {tbs['cudnn']:8.2f} {tbs['flash']:8.2f}"
              f" {tbs['efficient']:8.2f}      {ratio:6.2f}x       {err:.1e}   (ours {r['ours'] * 1e3:.1f} us a call in a graph, eager {r['ours_eager'] * 1e3:.1f} us"
              f" a call; fp8 {tbs['fp8']:.2f} TB/s, {r['ours'] / r['fp8']:.2f}x the bf16 speed, err vs bf16"
              f" {fp8_err:.1e})", flush=True)
        rows.append(dict(b=b, ctx=ctx, lq=lq, ps=ps, ours_ms=r["ours"], ours_eager_ms=r["ours_eager"], cudnn_ms=r["cudnn"], flash_ms=r["flash"],
                         efficient_ms=r["efficient"], ours_tbs=tbs["ours"], cudnn_tbs=tbs["cudnn"],
                         flash_tbs=tbs["flash"], efficient_tbs=tbs["efficient"], ratio=ratio, err=err,
                         fp8_ms=r["fp8"], fp8_tbs=tbs["fp8"], fp8_speedup=r["ours"] / r["fp8"], fp8_err=fp8_err))
    if a.csv:
        write_csv(a.csv, rows)
    if a.plot:
        plot(rows, a.plot, f"{gpu}, commit {commit()}: paged decode, H {H} / Hkv {HKV}, d {D}, bf16 (CUDA graphs)")
    if a.results:
        body = [f"{date}, {gpu}, commit {commit()}, torch {torch.__version__}; H {H} over {HKV} KV heads, d {D}, "
                f"bf16, causal; pages shuffled across the pool; the peers read the same K/V stored "
                f"contiguously.  TB/s = K and V bytes of the contexts / GPU time of a call (median of triton "
                f"do_bench over a CUDA graph of {GRAPH_CALLS} calls, the same for every column); "
                f"copy ceiling ~{COPY_TBS} TB/s.  fp8: the same cache as e4m3 codes with an f32 scale per "
                f"(token, KV head), its bytes (1 a K/V element plus the scales) over its time; speedup = bf16 "
                f"time / fp8 time; err = its output against the bf16 cache's."
                + (f"  Plot: {PLOT}." if a.plot else ""), ""]
        body.append(md_table(["b", "context", "new tokens", "page", "ours TB/s", "cuDNN", "flash", "efficient",
                              "best peer / ours (time)", "% of copy", "rel. err vs peer", "ours eager us/call",
                              "fp8 TB/s", "fp8 speedup", "fp8 err"],
                             [[r["b"], r["ctx"], r["lq"], r["ps"], f"{r['ours_tbs']:.2f}", f"{r['cudnn_tbs']:.2f}",
                               f"{r['flash_tbs']:.2f}", f"{r['efficient_tbs']:.2f}", f"{r['ratio']:.2f}x",
                               f"{100 * r['ours_tbs'] / COPY_TBS:.0f}%", f"{r['err']:.1e}",
                               f"{r['ours_eager_ms'] * 1e3:.1f}", f"{r['fp8_tbs']:.2f}",
                               f"{r['fp8_speedup']:.2f}x", f"{r['fp8_err']:.1e}"] for r in rows]))
        how = replace_section(a.results, "paged_decode", "\n".join(body))
        print(f"{a.results}: paged_decode section {how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
