"""Mamba-2 SSD backward on the GPU: seqfuse vs mamba_ssm, side by side in one run on the
same inputs.

Peer: mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined with requires_grad (its
_mamba_chunk_scan_combined_bwd), imported from PYTHONPATH (put a checkout of
state-spaces/mamba's python package in .peer/).  Ours: seqfuse.mamba_chunk_scan_combined
under torch autograd (sf_ssd_fwd, then sf_ssd_bwd).
Shapes: the Mamba-2 2.7B layer, H 80, P 64, N 128, G 1, chunk 256, with D and z, dt_bias and
softplus; (b 8, L 4096) and (b 1, L 16384); bf16 and f32.  Timed: the backward alone
(torch.autograd.grad over a kept graph) and forward + backward.  Errors: every gradient of
both against a float64 chunked reference (torch autograd, written here) on a smaller shape
of the same heads (--err-shape), relative Frobenius.

    PYTHONPATH=python:bench:.peer SEQFUSE_LIB=build/libseqfuse.so python3 bench/gpu_ssd_bwd.py \
        [--shapes 8x4096,1x16384] [--dtypes bfloat16,float32] [--configs cpar,cpar4,seq]
        [--results bench/RESULTS.md]

--results PATH writes the run as the ssd_bwd section of PATH (between <!-- BEGIN ssd_bwd -->
and <!-- END ssd_bwd -->); --plot [PNG] draws its times (bench/ssd_bwd.png); --from-results PATH
(no GPU) redraws the plot and the section from the run recorded in PATH's section.
"""
import argparse
import datetime
import os
import re

from benchutil import commit, md_table, replace_section

try:
    import torch
    import torch.nn.functional as F
    import triton.testing

    import seqfuse
except ImportError:
    torch = None

try:
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined as peer_scan
except Exception as e:  # noqa: BLE001 - report and run ours alone
    print(f"mamba_ssm peer not importable ({e}); timing seqfuse alone")
    peer_scan = None

NAMES = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")


def bench(fn):
    return triton.testing.do_bench(fn, warmup=5, rep=50, return_mode="median")


def inputs(b, L, H, P, G, N, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
    t = dict(x=r(b, L, H, P).to(dtype), dt=(torch.rand(b, L, H, device="cuda", generator=g) * 3 - 4).to(dtype),
             A=-(0.5 + 7.5 * torch.rand(H, device="cuda", generator=g)), B=(0.5 * r(b, L, G, N)).to(dtype),
             C=(0.5 * r(b, L, G, N)).to(dtype), D=r(H), z=r(b, L, H, P).to(dtype),
             dt_bias=-1 + 1.5 * torch.rand(H, device="cuda", generator=g))
    dout = r(b, L, H, P).to(dtype)
    return t, dout


def ref64(t, chunk):
    """float64 chunked SSD forward (H/G heads a group, no varlen), differentiable."""
    x, dt, A, B, C, D, z, bias = (t[k] for k in NAMES)
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    dt = torch.clamp(F.softplus(dt + bias), min=0.0)
    pad = (-L) % chunk
    if pad:
        x, dt, B, C = (F.pad(v, (0, 0) * (v.dim() - 2) + (0, pad)) for v in (x, dt, B, C))
    nc = (L + pad) // chunk
    rep = H // G
    Bh = B.repeat_interleave(rep, dim=2).reshape(b, nc, chunk, H, N)
    Ch = C.repeat_interleave(rep, dim=2).reshape(b, nc, chunk, H, N)
    xc = x.reshape(b, nc, chunk, H, P)
    dtc = dt.reshape(b, nc, chunk, H)
    cs = torch.cumsum(torch.clamp(dtc * A, max=0.0), dim=2)                  # b c l h
    diff = cs.permute(0, 1, 3, 2)[..., :, None] - cs.permute(0, 1, 3, 2)[..., None, :]  # b c h l s
    mask = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=x.device))
    seg = torch.exp(torch.where(mask, diff, torch.full_like(diff, -float("inf"))))
    W = torch.einsum("bclhn,bcshn->bchls", Ch, Bh) * seg * dtc.permute(0, 1, 3, 2)[..., None, :]
    y = torch.einsum("bchls,bcshp->bclhp", W, xc)
    last = cs[:, :, -1:, :]
    cst = torch.einsum("bclhn,bclh,bclhp->bchpn", Bh, torch.exp(last - cs) * dtc, xc)
    h = torch.zeros(b, H, P, N, dtype=x.dtype, device=x.device)
    ins = []
    for c in range(nc):
        ins.append(h)
        h = torch.exp(last[:, c, 0, :])[:, :, None, None] * h + cst[:, c]
    hin = torch.stack(ins, dim=1)                                            # b c h p n
    y = y + torch.einsum("bclhn,bchpn,bclh->bclhp", Ch, hin, torch.exp(cs))
    y = y.reshape(b, nc * chunk, H, P)[:, :L] + D[:, None] * t["x"]
    return y * F.silu(z)


def grads(scan, t, dout, chunk, dtype=None):
    leaves = {k: (v.to(dtype) if dtype is not None else v).detach().requires_grad_(True) for k, v in t.items()}
    out = scan(leaves, chunk)
    g = torch.autograd.grad(out, [leaves[k] for k in NAMES], dout.to(out.dtype))
    return dict(zip(NAMES, g))


def ours_scan(v, chunk):
    return seqfuse.mamba_chunk_scan_combined(v["x"], v["dt"], v["A"], v["B"], v["C"], chunk, D=v["D"], z=v["z"],
                                             dt_bias=v["dt_bias"], dt_softplus=True)


def peer_fn(v, chunk):
    return peer_scan(v["x"], v["dt"], v["A"], v["B"], v["C"], chunk, D=v["D"], z=v["z"], dt_bias=v["dt_bias"],
                     dt_softplus=True)


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def errors(b, L, dtype, H=80, P=64, G=1, N=128, chunk=256):
    """Every gradient of ours and the peer's against float64 (max over the inputs)."""
    t, dout = inputs(b, L, H, P, G, N, dtype, seed=1)
    ref = grads(ref64, {k: v.double() for k, v in t.items()}, dout.double(), chunk)
    res = {}
    for name, fn in (("ours", ours_scan), ("peer", peer_fn if peer_scan else None)):
        if fn is None:
            continue
        g = grads(fn, t, dout, chunk)
        res[name] = {k: rel(g[k], ref[k]) for k in NAMES}
    return res


def time_point(b, L, dtype, H=80, P=64, G=1, N=128, chunk=256, configs=()):
    """Times of ours (the default configuration, then each of `configs`
    pinned through SF_AUTOTUNE_FORCE) and the peer's."""
    t, dout = inputs(b, L, H, P, G, N, dtype)
    row = {}
    runs = [("ours", ours_scan), ("peer", peer_fn if peer_scan else None)]
    runs += [("cfg:" + c, ours_scan) for c in configs]
    for name, fn in runs:
        if fn is None:
            row[name + "_bwd"] = row[name + "_fb"] = float("nan")
            continue
        if name.startswith("cfg:"):
            os.environ["SF_AUTOTUNE_FORCE"] = "ssd_bwd:" + name[4:]
        leaves = {k: v.detach().requires_grad_(True) for k, v in t.items()}
        lv = [leaves[k] for k in NAMES]
        out = fn(leaves, chunk)
        row[name + "_bwd"] = bench(lambda: torch.autograd.grad(out, lv, dout, retain_graph=True))
        row[name + "_fb"] = bench(lambda: torch.autograd.grad(fn(leaves, chunk), lv, dout))
        del out
        os.environ.pop("SF_AUTOTUNE_FORCE", None)
        torch.cuda.empty_cache()
    return row


PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ssd_bwd.png")


def plot(rows, meta, path):
    """Backward and forward + backward times of ours and the peer, one group of bars a shape."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = (("ours_bwd", "seqfuse bwd"), ("peer_bwd", "mamba_ssm bwd"), ("ours_fb", "seqfuse fwd+bwd"),
            ("peer_fb", "mamba_ssm fwd+bwd"))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    w = 0.8 / len(keys)
    for i, (k, lab) in enumerate(keys):
        ax.bar([x + (i - 1.5) * w for x in range(len(rows))], [r[k] for r in rows], w, label=lab)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["shape"] for r in rows])
    ax.set_ylabel("ms (lower is better)")
    ax.legend(fontsize=8)
    ax.set_title(f"Mamba-2 SSD backward, {meta['gpu']}, {meta['date']}, commit {meta['commit']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def from_results(path):
    """The run recorded in PATH's ssd_bwd section: (rows, errs, meta)."""
    text = open(path).read()
    sec = text[text.index("<!-- BEGIN ssd_bwd -->"):text.index("<!-- END ssd_bwd -->")]
    cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in sec.splitlines() if ln.startswith("| ")]
    meta, rows, errs = None, [], []
    for c in cells:
        if re.fullmatch(r"\d{4}-\d\d-\d\d", c[0]):
            meta = dict(date=c[0], gpu=c[1], commit=c[2], torch=re.sub(r".*torch (.*)\)", r"\1", c[3]))
        elif len(c) == 7 and c[3].endswith("x"):
            rows.append(dict(shape=c[0], ours_bwd=float(c[1]), peer_bwd=float(c[2]), ours_fb=float(c[4]),
                             peer_fb=float(c[5])))
        elif len(c) == 2 + len(NAMES) and c[1] in ("ours", "peer"):
            if not errs or errs[-1][0] != c[0]:
                errs.append((c[0], {}))
            errs[-1][1][c[1]] = {k: float(v) for k, v in zip(NAMES, c[2:])}
    if meta is None or not rows:
        raise SystemExit(f"{path}: no ssd_bwd run recorded")
    return rows, errs, meta


def section(rows, errs, meta, plot_path=None):
    tab = []
    for r in rows:
        tab.append([r["shape"], f"{r['ours_bwd']:.3f}", f"{r['peer_bwd']:.3f}", f"{r['peer_bwd'] / r['ours_bwd']:.2f}x",
                    f"{r['ours_fb']:.3f}", f"{r['peer_fb']:.3f}", f"{r['peer_fb'] / r['ours_fb']:.2f}x"])
    etab = []
    for shape, e in errs:
        for name in ("ours", "peer"):
            if name in e:
                etab.append([shape, name] + [f"{e[name][k]:.1e}" for k in NAMES])
    return "\n".join([
        "## Mamba-2 SSD backward", "",
        md_table(["date", "GPU", "commit", "peer (same run, same inputs)"],
                 [[meta["date"], meta["gpu"], meta["commit"], f"mamba_ssm (torch {meta['torch']})"]]), "",
        "The 2.7B layer: H 80, P 64, N 128, G 1, chunk 256, with D, z, dt_bias and softplus; median "
        "times (triton do_bench).  bwd: torch.autograd.grad over a kept graph (the backward kernels "
        "alone); fwd+bwd: the forward and that.  Written by `bench/gpu_ssd_bwd.py --results "
        "bench/RESULTS.md`.", "",
        md_table(["shape", "ours bwd ms", "mamba_ssm bwd ms", "peer / ours", "ours fwd+bwd ms",
                  "mamba_ssm fwd+bwd ms", "peer / ours"], tab), "",
        *([f"![SSD backward]({os.path.relpath(plot_path, 'bench')})", ""] if plot_path else []),
        "Relative Frobenius error of each gradient against a float64 chunked reference (torch "
        "autograd) on the same inputs:", "",
        md_table(["shape", "impl"] + ["d" + k for k in NAMES], etab)]) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="8x4096,1x16384")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--err-shape", default="2x2048", help="bxL of the float64 error check ('' skips it)")
    ap.add_argument("--configs", default="", help="also time ours with each of these CUDA "
                    "configurations pinned (src/cuda/ssd/bwd_configs.h), e.g. cpar,cpar4,seq")
    ap.add_argument("--results", default=None, metavar="PATH")
    ap.add_argument("--plot", nargs="?", const=PLOT, default=None,
                    help=f"write the plot (to {PLOT} unless a path is given)")
    ap.add_argument("--from-results", default=None, metavar="PATH",
                    help="no GPU: redraw --plot and rewrite the section of --results from PATH's recorded run")
    a = ap.parse_args()
    if a.from_results:
        rows, errs, meta = from_results(a.from_results)
        if a.plot:
            plot(rows, meta, a.plot)
        if a.results:
            how = replace_section(a.results, "ssd_bwd", section(rows, errs, meta, a.plot))
            print(f"{a.results}: ssd_bwd section {how}")
        return
    if torch is None or not torch.cuda.is_available():
        print("no torch with CUDA: nothing to run")
        return
    rows, errs = [], []
    for dname in a.dtypes.split(","):
        dtype = getattr(torch, dname)
        if a.err_shape:
            b, L = (int(v) for v in a.err_shape.split("x"))
            e = errors(b, L, dtype)
            errs.append((f"b{b} L{L} {dname}", e))
            for name, d in e.items():
                print(f"errors b{b} L{L} {dname} {name}: " + " ".join(f"d{k} {v:.1e}" for k, v in d.items()))
        for s in a.shapes.split(","):
            b, L = (int(v) for v in s.split("x"))
            cfgs = [c for c in a.configs.split(",") if c]
            r = time_point(b, L, dtype, configs=cfgs)
            r["shape"] = f"b{b} L{L} {dname}"
            rows.append(r)
            for c in cfgs:
                print(f"{r['shape']}: ours pinned to {c}: bwd {r['cfg:' + c + '_bwd']:.3f} ms, "
                      f"fwd+bwd {r['cfg:' + c + '_fb']:.3f} ms", flush=True)
            print(f"{r['shape']}: bwd ours {r['ours_bwd']:.3f} ms peer {r['peer_bwd']:.3f} ms "
                  f"(peer/ours {r['peer_bwd'] / r['ours_bwd']:.2f}x); fwd+bwd ours {r['ours_fb']:.3f} ms "
                  f"peer {r['peer_fb']:.3f} ms (peer/ours {r['peer_fb'] / r['ours_fb']:.2f}x)", flush=True)
    if a.results:
        meta = dict(date=datetime.date.today().isoformat(), gpu=torch.cuda.get_device_name(), commit=commit(),
                    torch=torch.__version__)
        if a.plot:
            plot(rows, meta, a.plot)
        how = replace_section(a.results, "ssd_bwd", section(rows, errs, meta, a.plot))
        print(f"{a.results}: ssd_bwd section {how}")
    elif a.plot:
        meta = dict(date=datetime.date.today().isoformat(), gpu=torch.cuda.get_device_name(), commit=commit())
        plot(rows, meta, a.plot)


if __name__ == "__main__":
    main()
