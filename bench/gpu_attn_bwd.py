"""Attention backward on the GPU: seqfuse (sf_attn_bwd, fast and deterministic modes) vs
torch SDPA's backward with the cuDNN and flash backends, side by side in one run on the
same inputs.

The FlashAttention convention: hidden 2048 (H = 2048 / d), batch * L = 16384, L from 512
to 16384, d in {64, 128, 256}, causal and not; backward FLOPs = 2.5 x the forward's
4 B H L^2 d (halved when causal).  "bwd" times the backward alone: ours is one
sf_attn_bwd call from saved out and lse; a peer's is torch.autograd.grad of its SDPA output
(graph kept).  "fwd+bwd" times the forward and the backward together (FLOPs 3.5 x).

    PYTHONPATH=python:bench SEQFUSE_LIB=build/libseqfuse.so python3 bench/gpu_attn_bwd.py \
        [--quick] [--d 64,128] [--L 512,1024] [--causal both|yes|no] [--csv out.csv] \
        [--results bench/RESULTS.md] [--configs fa64,mmal64]

--configs A,B times ours once more per named configuration of src/cuda/attn/bwd_configs.h
(SF_AUTOTUNE_FORCE=attn_bwd:<name>; a configuration that does not serve the head dim is
skipped) next to the default choice, fast mode, printed as extra columns.

--results PATH writes the run as the attn_bwd section of PATH (between <!-- BEGIN attn_bwd -->
and <!-- END attn_bwd -->); --plot [PNG] draws it (bench/attn_bwd.png); --from-csv A.csv,B.csv
writes both from earlier runs' --csv files (no GPU; each time the median over them).  Each time is the median of event-timed calls after one warm-up,
as many calls as fit in about --budget-ms (at least 3).
"""
import argparse
import os
import statistics
import sys
import time

from benchutil import BF16_TFLOPS, commit, md_table, merge_rounds, replace_section, write_csv

PLOT = "bench/attn_bwd.png"  # the plot bench/RESULTS.md shows

try:  # the GPU side; results_section() runs without it
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import seqfuse
    from seqfuse import _attn_grad
except ImportError:
    torch = None


def timed(fn, budget_ms):
    """Median ms of event-timed calls of fn: one warm-up, then as many as fit in budget_ms (3+)."""
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    torch.cuda.synchronize()
    first = e0.elapsed_time(e1)
    n = max(3, min(50, int(budget_ms / max(first, 1e-3))))
    ts = []
    for _ in range(n):
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)


def fwd_flops(B, L, H, d, causal):
    return 4.0 * B * H * L * L * d / (2 if causal else 1)


def rel_err(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


def forced(cfg):
    """SF_AUTOTUNE_FORCE set to attn_bwd:cfg (None: unset) for the calls that follow."""
    if cfg is None:
        os.environ.pop("SF_AUTOTUNE_FORCE", None)
    else:
        os.environ["SF_AUTOTUNE_FORCE"] = "attn_bwd:" + cfg


def run_configs(B, L, H, d, causal, dtype, budget_ms, cfgs):
    """TFLOP/s of ours (fast mode) per pinned configuration and its largest relative error in
    dq, dk, dv against configuration simt256 (f32 FMAs, any d); nan where it does not serve d."""
    g = torch.Generator(device="cuda").manual_seed(B * 131 + L + d)
    q, k, v, dout = (torch.randn(B, L, H, d, device="cuda", dtype=dtype, generator=g) for _ in range(4))
    out, lse = seqfuse.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    forced("simt256")  # the reference: f32 FMAs on the same 16-bit inputs
    ref = _attn_grad.attn_bwd(dout, q, k, v, out, lse, causal=causal)
    forced(None)
    res = {}
    for c in cfgs:
        forced(c)
        try:
            ms = timed(lambda: _attn_grad.attn_bwd(dout, q, k, v, out, lse, causal=causal), budget_ms)
            got = _attn_grad.attn_bwd(dout, q, k, v, out, lse, causal=causal)
            err = max(rel_err(x, y) for x, y in zip(got, ref))
            res[c] = (2.5 * fwd_flops(B, L, H, d, causal) / (ms * 1e-3) / 1e12, err)
        except Exception as e:  # noqa: BLE001 - a configuration that does not serve the shape
            res[c] = (float("nan"), float("nan"))
            if "head dim" not in str(e):
                print(f"  {c}: {str(e)[:100]}", file=sys.stderr)
        finally:
            forced(None)
    return res


def run_point(B, L, H, d, causal, dtype, budget_ms):
    g = torch.Generator(device="cuda").manual_seed(B * 131 + L + d)
    q, k, v, dout = (torch.randn(B, L, H, d, device="cuda", dtype=dtype, generator=g) for _ in range(4))
    out, lse = seqfuse.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    res = {}
    for name, det in (("ours", False), ("ours_det", True)):
        res[name] = timed(lambda: _attn_grad.attn_bwd(dout, q, k, v, out, lse, causal=causal,
                                                      deterministic=det), budget_ms)
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    res["ours_fb"] = timed(lambda: torch.autograd.grad(seqfuse.flash_attn_func(ql, kl, vl, causal=causal),
                                                       (ql, kl, vl), dout), budget_ms)
    dq_ours = _attn_grad.attn_bwd(dout, q, k, v, out, lse, causal=causal)[0]
    # peers take (B, H, L, d) contiguous: their preferred layout, same values
    qt, kt, vt = (t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
    dot = dout.transpose(1, 2).contiguous()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                o = sdpa(qt, kt, vt, is_causal=causal)
                res[name] = timed(lambda: torch.autograd.grad(o, (qt, kt, vt), dot, retain_graph=True),
                                  budget_ms)
                res[name + "_fb"] = timed(lambda: torch.autograd.grad(sdpa(qt, kt, vt, is_causal=causal),
                                                                      (qt, kt, vt), dot), budget_ms)
                if name == "cudnn":
                    dq = torch.autograd.grad(o, (qt,), dot, retain_graph=True)[0]
                    res["err_dq_vs_cudnn"] = rel_err(dq_ours, dq.transpose(1, 2))
                del o
        except Exception as e:  # a backend that does not serve the shape
            res[name] = res[name + "_fb"] = float("nan")
            print(f"  {name} unavailable at B{B} L{L} d{d}: {str(e)[:80]}", file=sys.stderr)
    return res


def plot(rows, path):
    """Backward TFLOP/s against L, one panel per (head dim, mask): ours (fast and
    deterministic) and the peers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    combos = [(d, c) for d in sorted({int(r["d"]) for r in rows}) for c in (0, 1)]
    combos = [dc for dc in combos if any(int(r["d"]) == dc[0] and int(r["causal"]) == dc[1] for r in rows)]
    fig, axes = plt.subplots(1, len(combos), figsize=(4 * len(combos), 3.6), sharey=True, squeeze=False)
    for ax, (d, c) in zip(axes[0], combos):
        sel = [r for r in rows if int(r["d"]) == d and int(r["causal"]) == c]
        for key, lab, st in (("ours_tflops", "seqfuse", "-"), ("ours_det_tflops", "seqfuse det", "--"),
                             ("cudnn_tflops", "cuDNN", "-"), ("fa2_tflops", "FA2 (SDPA)", "-")):
            ax.plot([int(r["L"]) for r in sel], [float(r[key]) for r in sel], st, marker="o", label=lab)
        ax.set_xscale("log", base=2)
        ax.set_title(f"d {d}, {'causal' if c else 'non-causal'}")
        ax.set_xlabel("sequence length")
    axes[0][0].set_ylabel(f"backward TFLOP/s ({rows[0]['dtype']})")
    axes[0][0].legend()
    fig.suptitle(f"attention backward, {rows[0]['gpu']}, {rows[0]['date']}, commit {rows[0]['commit']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def from_csv(paths, results, plot_path, torch_version):
    """--from-csv: the section and plot from earlier runs' CSVs, each time the median."""
    keys = ("ours", "ours_det", "cudnn", "fa2", "ours_fb", "cudnn_fb", "fa2_fb")
    rows, _ = merge_rounds(paths, ("B", "L", "H", "d", "causal"), tuple(k + "_ms" for k in keys))
    for r in rows:
        fl = fwd_flops(int(r["B"]), int(r["L"]), int(r["H"]), int(r["d"]), int(r["causal"]))
        for k in keys:
            r[k + "_tflops"] = (3.5 if k.endswith("_fb") else 2.5) * fl / (float(r[k + "_ms"]) * 1e-3) / 1e12
    if plot_path:
        plot(rows, plot_path)
    if results:
        how = replace_section(results, "attn_bwd", results_section(rows, torch_version, plot_path))
        print(f"{results}: attn_bwd section {how}")


def results_section(rows, torch_version="", plot_path=None):
    r0 = rows[0]
    out = [f"## Attention backward ({r0['dtype']})", "",
           md_table(["date", "GPU", "commit", "peers (same run, same inputs)"],
                    [[r0["date"], r0["gpu"], r0["commit"],
                      f"SDPA backward, cuDNN and FA2 backends{' (torch ' + torch_version + ')' if torch_version else ''}"]]),
           "",
           "FlashAttention convention: H = 2048 / d, B x L = 16384; backward FLOPs 2.5 x 4 B H L^2 d "
           "(fwd+bwd 3.5 x), halved when causal; TFLOP/s; ours det = the deterministic mode; ceiling: "
           f"the ~{BF16_TFLOPS:.0f} TFLOP/s bf16 matrix rate.  Written by `bench/gpu_attn_bwd.py "
           "--results bench/RESULTS.md`.", ""]
    tab = []
    for r in rows:
        f = lambda k: float(r[k])  # noqa: E731
        tab.append([r["d"], "causal" if int(r["causal"]) else "full", r["L"], f"{r['B']} x {r['H']}",
                    f"{f('ours_tflops'):.1f}", f"{f('ours_det_tflops'):.1f}", f"{f('cudnn_tflops'):.1f}",
                    f"{f('fa2_tflops'):.1f}", f"{f('ours_tflops') / f('cudnn_tflops'):.2f}x",
                    f"{f('ours_fb_tflops'):.1f}", f"{f('cudnn_fb_tflops'):.1f}",
                    f"{100 * f('ours_tflops') / BF16_TFLOPS:.0f}%"])
    out.append(md_table(["d", "mask", "L", "B x H", "ours bwd", "ours det", "cuDNN bwd", "FA2 bwd",
                         "ours / cuDNN", "ours fwd+bwd", "cuDNN fwd+bwd", "ours / ceiling"], tab))
    if plot_path:
        out += ["", f"![attention backward]({os.path.relpath(plot_path, 'bench')})"]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="d 64 and 128, L 512 and 2048 only")
    ap.add_argument("--d", default="", help="comma-separated head dims (default: 64,128,256)")
    ap.add_argument("--L", default="", help="comma-separated sequence lengths (default: 512..16384)")
    ap.add_argument("--causal", default="both", choices=("both", "yes", "no"))
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--budget-ms", type=float, default=300.0, help="timing budget per measurement")
    ap.add_argument("--configs", default="", help="comma-separated configurations to time pinned as well")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--results", default=None, metavar="PATH",
                    help="write the run as the attn_bwd section of PATH (e.g. a copy of bench/RESULTS.md)")
    ap.add_argument("--plot", nargs="?", const=PLOT, default=None,
                    help=f"write the plot (to {PLOT} unless a path is given)")
    ap.add_argument("--from-csv", default="", metavar="A.csv,B.csv",
                    help="no GPU: write --results / --plot from these runs' CSVs (median over them)")
    ap.add_argument("--torch-version", default="", help="with --from-csv: the torch of those runs")
    a = ap.parse_args()
    if a.from_csv:
        from_csv(a.from_csv.split(","), a.results, a.plot, a.torch_version)
        return
    if torch is None:
        raise SystemExit("needs torch and the seqfuse binding (PYTHONPATH=python)")
    dtype = getattr(torch, a.dtype)
    gpu = torch.cuda.get_device_name()
    date = time.strftime("%Y-%m-%d")
    Ls = [512, 2048] if a.quick else [512, 1024, 2048, 4096, 8192, 16384]
    ds = [64, 128] if a.quick else [64, 128, 256]
    if a.d:
        ds = [int(x) for x in a.d.split(",")]
    if a.L:
        Ls = [int(x) for x in a.L.split(",")]
    masks = {"both": (False, True), "yes": (True,), "no": (False,)}[a.causal]
    print(f"{gpu}, seqfuse {seqfuse.version()}, torch {torch.__version__}, commit {commit()}, {a.dtype}")
    print(f"{'shape':30s} {'ours':>7s} {'det':>7s} {'cudnn':>7s} {'fa2':>7s}  bwd TFLOP/s  ours/cudnn"
          f"  fwd+bwd ours/cudnn  err dq")
    rows = []
    for d in ds:
        for causal in masks:
            for L in Ls:
                B, H = 16384 // L, 2048 // d
                r = run_point(B, L, H, d, causal, dtype, a.budget_ms)
                fl = fwd_flops(B, L, H, d, causal)
                tf = {k: 2.5 * fl / (r[k] * 1e-3) / 1e12 for k in ("ours", "ours_det", "cudnn", "fa2")}
                tf.update({k: 3.5 * fl / (r[k] * 1e-3) / 1e12 for k in ("ours_fb", "cudnn_fb", "fa2_fb")})
                shape = f"B{B} L{L} H{H} d{d} {'causal' if causal else 'full'}"
                print(f"{shape:30s} {tf['ours']:7.1f} {tf['ours_det']:7.1f} {tf['cudnn']:7.1f} {tf['fa2']:7.1f}"
                      f"              {tf['ours'] / tf['cudnn']:5.2f}x   {tf['ours_fb']:7.1f} / "
                      f"{tf['cudnn_fb']:7.1f}  {r.get('err_dq_vs_cudnn', float('nan')):.1e}", flush=True)
                if a.configs:
                    rc = run_configs(B, L, H, d, causal, dtype, a.budget_ms, a.configs.split(","))
                    print("    pinned: " + "  ".join(f"{c} {tfl:.1f} (err {e:.1e})" for c, (tfl, e) in rc.items()),
                          flush=True)
                row = dict(date=date, gpu=gpu, dtype=a.dtype, B=B, L=L, H=H, d=d, causal=int(causal),
                           commit=commit(), err_dq_vs_cudnn=r.get("err_dq_vs_cudnn", float("nan")))
                for k in tf:
                    row[k + "_ms"] = r[k]
                    row[k + "_tflops"] = tf[k]
                rows.append(row)
    if a.csv:
        write_csv(a.csv, rows)
    if a.plot:
        plot(rows, a.plot)
    if a.results:
        how = replace_section(a.results, "attn_bwd", results_section(rows, torch.__version__, a.plot))
        print(f"{a.results}: attn_bwd section {how}")


if __name__ == "__main__":
    main()
