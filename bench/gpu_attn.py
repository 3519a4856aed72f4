"""Attention forward on the GPU: seqfuse vs torch SDPA (cuDNN and flash backends),
side by side in one run on the same inputs.

The FlashAttention benchmark convention: hidden 2048 (H = 2048 / d), batch * L = 16384,
L from 512 to 16384, d in {64, 128, 256}, causal and not; FLOPs = 4 B H L^2 d, halved
when causal.  Plus the ViT-B/16 shape (b 256, N 196, 12 heads of 64).

    PYTHONPATH=python:bench SEQFUSE_LIB=build-gpu/libseqfuse.so python3 bench/gpu_attn.py \
        [--quick] [--rounds 3] [--csv out.csv] [--plot [out.png]] [--results bench/RESULTS.md] \
        [--no-tune-first]

--results PATH writes the run as the attn_fwd section of PATH (between the markers
<!-- BEGIN attn_fwd --> and <!-- END attn_fwd -->; bench/RESULTS.md's section is made so:
`--rounds 3 --results bench/RESULTS.md --plot`).  --plot alone writes bench/attn_fwd_h200.png.

seqfuse's first call of a shape runs the autotuner (its choice is kept in a cache file,
SF_AUTOTUNE_CACHE, so a machine tunes a shape once).  For long calls the tuner runs its
close candidates back to back for about 2 s at the board's power cap; timed right after,
ours and the peers would both see a board heated by the tuning, not by the calls being
compared.  So by default every point is tuned first (one call of ours each), the GPU then
idles for --cool seconds, and only then is anything timed.  --no-tune-first tunes each
point just before timing it; with a pinned configuration (SF_AUTOTUNE_FORCE) there is
nothing to tune and no pass is made.
"""
import argparse
import os
import statistics
import sys
import time

from benchutil import BF16_TFLOPS, commit, md_table, merge_rounds, replace_section, write_csv

try:  # the GPU side; results_section() runs without it
    import torch
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import seqfuse
except ImportError:
    torch = None

PLOT = "bench/attn_fwd_h200.png"  # the plot bench/RESULTS.md shows


def bench(fn):
    # median of event-timed runs (triton's do_bench: warm-up and repeat in ms)
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def rel_err(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


def attn_inputs(B, L, H, d, dtype=None, device="cuda"):
    """q, k, v of one point, (B, L, H, d), bf16 unless given, seeded by the shape."""
    dtype = dtype or torch.bfloat16
    g = torch.Generator(device=device).manual_seed(B * 131 + L + d)
    return tuple(torch.randn(B, L, H, d, device=device, dtype=dtype, generator=g) for _ in range(3))


def attn_flops(B, L, H, d, causal):
    return 4.0 * B * H * L * L * d / (2 if causal else 1)


def run_point(B, L, H, d, causal, dtype=None, rounds=1):
    q, k, v = attn_inputs(B, L, H, d, dtype)
    # peers take (B, H, L, d) contiguous: their preferred layout, same values
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    flops = attn_flops(B, L, H, d, causal)
    res = {}
    out = seqfuse.flash_attn_func(q, k, v, causal=causal)
    torch.cuda.synchronize()
    # rounds > 1: ours and the peers alternate, and each reports the median of
    # its rounds, so that a clock or temperature change between calls (the
    # d 128 L 16384 point has moved by up to 10% between calls) falls on all
    times = {"ours": [], "cudnn": [], "fa2": []}
    failed = set()
    for _ in range(rounds):
        times["ours"].append(bench(lambda: seqfuse.flash_attn_func(q, k, v, causal=causal)))
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            if name in failed:
                continue
            try:
                with sdpa_kernel([be]):
                    if name == "cudnn" and "err_vs_cudnn" not in res:
                        ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                        res["err_vs_cudnn"] = rel_err(out, ref.transpose(1, 2))
                    times[name].append(bench(lambda: torch.nn.functional.scaled_dot_product_attention(
                        qt, kt, vt, is_causal=causal)))
            except Exception as e:  # a backend that does not serve the shape
                failed.add(name)
                times[name] = []  # a peer that fails in any round reports nothing
                print(f"  {name} unavailable at B{B} L{L} d{d}: {str(e)[:80]}", file=sys.stderr)
    for name, ts in times.items():
        res[name] = statistics.median(ts) if ts else float("nan")
    return flops, res


def results_section(rows, torch_version="", plot=None):
    """The attn_fwd section of bench/RESULTS.md for the rows of one run (the dicts main()
    makes, or the lines of its CSV): date, GPU, commit, then one line a point."""
    r0 = rows[0]
    rounds = r0.get("rounds", 1)
    out = [f"## Attention forward ({r0['dtype']})", "",
           md_table(["date", "GPU", "commit", "peers (same run, same inputs)", "timing"],
                    [[r0["date"], r0["gpu"], r0["commit"],
                      f"cuDNN and FA2 through torch SDPA{' (torch ' + torch_version + ')' if torch_version else ''}",
                      f"median of {rounds} alternating round(s), every point tuned first"]]),
           "",
           "FlashAttention convention: H = 2048 / d, B x L = 16384; FLOPs 4 B H L^2 d, halved when "
           f"causal; TFLOP/s; ceiling: the ~{BF16_TFLOPS:.0f} TFLOP/s bf16 matrix rate.  "
           "Written by `bench/gpu_attn.py --rounds 3 --results bench/RESULTS.md --plot`"
           + (f"; plot: {plot}." if plot else "."), ""]
    tab = []
    for r in rows:
        L, d = int(r["L"]), int(r["d"])
        vit = L == 196
        mask = "causal" if int(r["causal"]) else "full"
        ours, cudnn, fa2 = (float(r[k]) for k in ("ours_tflops", "cudnn_tflops", "fa2_tflops"))
        tab.append([f"ViT-B/16, {d}" if vit else d, mask, L, f"{r['B']} x {r['H']}",
                    f"{ours:.1f}", f"{cudnn:.1f}", f"{fa2:.1f}", f"{ours / cudnn:.2f}x",
                    f"{100 * ours / BF16_TFLOPS:.0f}%"])
    out.append(md_table(["d", "mask", "L", "B x H", "ours", "cuDNN", "FA2", "ours / cuDNN",
                         "ours / ceiling"], tab))
    return "\n".join(out) + "\n"


def plot(rows, path, gpu, date, dtype):
    """TFLOP/s against L, one panel per (head dim, mask), ours and the peers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ds = sorted({int(r["d"]) for r in rows if int(r["L"]) != 196})
    combos = [(d, c) for d in ds for c in (0, 1)]
    fig, axes = plt.subplots(1, len(combos), figsize=(4 * len(combos), 3.6), sharey=True)
    for ax, (d, c) in zip(axes, combos):
        sel = [r for r in rows if int(r["d"]) == d and int(r["causal"]) == c and int(r["L"]) != 196]
        for key, lab in (("ours_tflops", "seqfuse"), ("cudnn_tflops", "cuDNN"), ("fa2_tflops", "FA2")):
            ax.plot([int(r["L"]) for r in sel], [float(r[key]) for r in sel], marker="o", label=lab)
        ax.set_xscale("log", base=2)
        ax.set_title(f"d {d}, {'causal' if c else 'non-causal'}")
        ax.set_xlabel("sequence length")
    axes[0].set_ylabel(f"TFLOP/s ({dtype})")
    axes[0].legend()
    fig.suptitle(f"attention forward, {gpu}, {date}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def from_csv(paths, results, plot_path, torch_version):
    """--from-csv: the section and plot from the CSVs of earlier runs (rounds
    of one library, e.g. bench/compare_libs.sh's), each time the median."""
    rows, n = merge_rounds(paths, ("B", "L", "H", "d", "causal"), ("ours_ms", "cudnn_ms", "fa2_ms"))
    for r in rows:
        fl = attn_flops(int(r["B"]), int(r["L"]), int(r["H"]), int(r["d"]), int(r["causal"]))
        for k in ("ours", "cudnn", "fa2"):
            r[k + "_tflops"] = fl / (float(r[k + "_ms"]) * 1e-3) / 1e12
        r["rounds"] = n
    if plot_path:
        plot(rows, plot_path, rows[0]["gpu"], rows[0]["date"], rows[0]["dtype"])
    if results:
        how = replace_section(results, "attn_fwd", results_section(rows, torch_version, plot_path))
        print(f"{results}: attn_fwd section {how}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--from-csv", default="", metavar="A.csv,B.csv",
                    help="no GPU: write --results / --plot from these runs' CSVs (median over them)")
    ap.add_argument("--torch-version", default="", help="with --from-csv: the torch of those runs")
    ap.add_argument("--quick", action="store_true", help="d 128 and 64, L 512/4096/16384 only")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--plot", nargs="?", const=PLOT, default=None,
                    help=f"write the plot (to {PLOT} unless a path is given)")
    ap.add_argument("--results", default=None, metavar="PATH",
                    help="write the run as the attn_fwd section of PATH (e.g. bench/RESULTS.md)")
    ap.add_argument("--d", default="", help="comma-separated head dims (default: the sweep's)")
    ap.add_argument("--L", default="", help="comma-separated sequence lengths (default: the sweep's)")
    ap.add_argument("--no-vit", action="store_true", help="leave out the ViT point")
    ap.add_argument("--causal", default="both", choices=("both", "yes", "no"), help="which masks to time")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--no-tune-first", action="store_true",
                    help="tune each point right before timing it instead of all points first")
    ap.add_argument("--cool", type=float, default=10.0, help="idle seconds after tuning every point first")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternating rounds of ours and the peers per point; each reports its median")
    a = ap.parse_args()
    if a.from_csv:
        from_csv(a.from_csv.split(","), a.results, a.plot, a.torch_version)
        return
    if torch is None:
        raise SystemExit("needs torch, triton and the seqfuse binding (PYTHONPATH=python)")
    a.rounds = max(1, a.rounds)
    gpu = torch.cuda.get_device_name()
    date = time.strftime("%Y-%m-%d")
    Ls = [512, 4096, 16384] if a.quick else [512, 1024, 2048, 4096, 8192, 16384]
    ds = [64, 128] if a.quick else [64, 128, 256]
    if a.d:
        ds = [int(x) for x in a.d.split(",")]
    if a.L:
        Ls = [int(x) for x in a.L.split(",")]
    rows = []
    print(f"{gpu}, seqfuse {seqfuse.version()}, torch {torch.__version__}, commit {commit()}, {a.dtype}, "
          f"median of {a.rounds} round(s)")
    print(f"{'shape':34s} {'ours':>8s} {'cudnn':>8s} {'fa2':>8s}  TFLOP/s   ours/cudnn  err")
    masks = {"both": (False, True), "yes": (True,), "no": (False,)}[a.causal]
    points = [(16384 // L, L, 2048 // d, d, c) for d in ds for c in masks for L in Ls]
    if not a.no_vit:
        points.append((256, 196, 12, 64, False))  # ViT-B/16
    # a pinned configuration (SF_AUTOTUNE_FORCE) tunes nothing: no pass, no idle
    if not a.no_tune_first and "attn_fwd" not in os.environ.get("SF_AUTOTUNE_FORCE", ""):
        t0 = time.time()
        for B, L, H, d, causal in points:
            q, k, v = attn_inputs(B, L, H, d, getattr(torch, a.dtype))
            seqfuse.flash_attn_func(q, k, v, causal=causal)
            torch.cuda.synchronize()
            del q, k, v
        print(f"(every point tuned first: {time.time() - t0:.1f} s; then {a.cool:g} s idle)", flush=True)
        time.sleep(a.cool)
    for B, L, H, d, causal in points:
        flops, r = run_point(B, L, H, d, causal, dtype=getattr(torch, a.dtype), rounds=a.rounds)
        tf = {k: flops / (r[k] * 1e-3) / 1e12 for k in ("ours", "cudnn", "fa2")}
        shape = f"B{B} L{L} H{H} d{d} {'causal' if causal else 'full'}"
        ratio = r["cudnn"] / r["ours"]
        print(f"{shape:34s} {tf['ours']:8.1f} {tf['cudnn']:8.1f} {tf['fa2']:8.1f}"
              f"            {ratio:5.2f}x  {r.get('err_vs_cudnn', float('nan')):.1e}", flush=True)
        rows.append(dict(date=date, gpu=gpu, dtype=a.dtype, B=B, L=L, H=H, d=d, causal=int(causal),
                         ours_ms=r["ours"], cudnn_ms=r["cudnn"], fa2_ms=r["fa2"],
                         ours_tflops=tf["ours"], cudnn_tflops=tf["cudnn"], fa2_tflops=tf["fa2"],
                         ratio_vs_cudnn=ratio, err=r.get("err_vs_cudnn", float("nan")),
                         rounds=a.rounds, commit=commit()))
    if a.csv:
        write_csv(a.csv, rows)
    if a.plot:
        plot(rows, a.plot, gpu, date, a.dtype)
    if a.results:
        how = replace_section(a.results, "attn_fwd", results_section(rows, torch.__version__, a.plot))
        print(f"{a.results}: attn_fwd section {how}")


if __name__ == "__main__":
    main()
