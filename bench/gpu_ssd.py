"""Mamba-2 SSD on the GPU: seqfuse vs mamba_ssm's Triton kernels, side by side in one
run on the same inputs.

Peer: mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined (forward only) and
mamba_ssm.ops.triton.selective_state_update, imported from PYTHONPATH (the benchmark
does not ship them: put a checkout of state-spaces/mamba's python package there).
Shapes: Mamba-2 2.7B layer, H 80, P 64, N 128, G 1, chunk 256, with D and z, dt_bias and
softplus; (b 8, L 4096) and (b 1, L 16384); bf16 and f32.  Decode: batch 1..256.

    PYTHONPATH=python:bench:.peer SEQFUSE_LIB=build-gpu/libseqfuse.so python3 bench/gpu_ssd.py \
        [--csv out.csv] [--results bench/RESULTS.md] [--configs wgq,fuq] [--profile]

--results PATH writes the run as the ssd_fwd and ssd_step sections of PATH (between the
markers <!-- BEGIN ssd_fwd --> / <!-- END ssd_fwd --> and the same for ssd_step).
"""
import argparse
import os
import time

from benchutil import BF16_TFLOPS, COPY_TBS, TF32_TFLOPS, commit, md_table, merge_rounds, replace_section, write_csv

try:  # the GPU side; the section writers run without it
    import torch
    import triton.testing

    import seqfuse
except ImportError:
    torch = None

try:
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined as peer_scan
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update as peer_step
except Exception as e:  # noqa: BLE001 - report and run ours alone
    print(f"mamba_ssm peer not importable ({e}); timing seqfuse alone")
    peer_scan = peer_step = None


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def rel_err(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def inputs(b, L, H, P, G, N, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
    x = r(b, L, H, P).to(dtype)
    dt = (torch.rand(b, L, H, device="cuda", generator=g) * 3 - 4).to(dtype)
    A = -(0.5 + 7.5 * torch.rand(H, device="cuda", generator=g))
    B = (0.5 * r(b, L, G, N)).to(dtype)
    C = (0.5 * r(b, L, G, N)).to(dtype)
    D = r(H)
    z = r(b, L, H, P).to(dtype)
    dt_bias = -1 + 1.5 * torch.rand(H, device="cuda", generator=g)
    return x, dt, A, B, C, D, z, dt_bias


def scan_point(b, L, dtype, H=80, P=64, G=1, N=128, chunk=256, peer=True):
    x, dt, A, B, C, D, z, dtb = inputs(b, L, H, P, G, N, dtype)
    kw = dict(D=D, z=z, dt_bias=dtb, dt_softplus=True)
    ours = lambda: seqfuse.mamba_chunk_scan_combined(x, dt, A, B, C, chunk, **kw)  # noqa: E731
    out = ours()
    torch.cuda.synchronize()
    t_ours = bench(ours)
    t_peer, err = float("nan"), float("nan")
    if peer and peer_scan is not None:
        peer = lambda: peer_scan(x, dt, A, B, C, chunk, **kw)  # noqa: E731
        ref = peer()
        t_peer = bench(peer)
        err = rel_err(out, ref)
    es = x.element_size()
    # fewest bytes: x, z, out (b L H P), dt (b L H), B, C (b L G N)
    nbytes = es * (3 * b * L * H * P + b * L * H + 2 * b * L * G * N)
    flops = b * L * H * (4.0 * P * N + chunk * N + chunk * P)
    return t_ours, t_peer, err, flops, nbytes


def profile_kernels(b=8, L=4096, dtype=None, H=80, P=64, G=1, N=128, chunk=256):
    """Per-kernel CUDA time of one forward, from torch.profiler (CUPTI)."""
    from torch.profiler import ProfilerActivity, profile
    dtype = dtype or torch.bfloat16
    x, dt, A, B, C, D, z, dtb = inputs(b, L, H, P, G, N, dtype)
    kw = dict(D=D, z=z, dt_bias=dtb, dt_softplus=True)
    runs = [("seqfuse", lambda: seqfuse.mamba_chunk_scan_combined(x, dt, A, B, C, chunk, **kw))]
    if peer_scan is not None:
        runs.append(("mamba_ssm", lambda: peer_scan(x, dt, A, B, C, chunk, **kw)))
    for name, fn in runs:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        tot = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                tot[ev.name] = tot.get(ev.name, 0.0) + ev.time_range.elapsed_us() / 5
        print(f"{name} b{b} L{L} {str(dtype).split('.')[-1]}: per-forward kernel time (us)")
        for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
            print(f"  {v:9.1f}  {k[:100]}")
        print(f"  {sum(tot.values()):9.1f}  total")


def step_point(batch, dtype, H=80, P=64, G=1, N=128):
    g = torch.Generator(device="cuda").manual_seed(batch)
    state = torch.randn(batch, H, P, N, device="cuda", generator=g)
    x = torch.randn(batch, H, P, device="cuda", generator=g).to(dtype)
    dt = torch.rand(batch, H, device="cuda", generator=g).to(dtype) * 0.1
    A = -torch.rand(H, device="cuda", generator=g) - 0.5
    B = torch.randn(batch, G, N, device="cuda", generator=g).to(dtype)
    C = torch.randn(batch, G, N, device="cuda", generator=g).to(dtype)
    D = torch.randn(H, device="cuda", generator=g)
    dtb = torch.zeros(H, device="cuda")
    s1 = state.clone()
    t_ours = bench(lambda: seqfuse.selective_state_update(s1, x, dt, A, B, C, D=D, dt_bias=dtb))
    t_peer = float("nan")
    if peer_step is not None:
        s2 = state.clone()
        # the peer takes A (H, P, N), dt (b, H, P), D (H, P): broadcast views of the same values
        A3 = A[:, None, None].expand(H, P, N)
        dt3 = dt[:, :, None].expand(batch, H, P)
        D2 = D[:, None].expand(H, P)
        dtb2 = dtb[:, None].expand(H, P)  # the peer needs dt_bias to take its tied-head path
        t_peer = bench(lambda: peer_step(s2, x, dt3, A3, B, C, D=D2, dt_bias=dtb2))
    nbytes = 2 * state.numel() * 4  # the state read and written: the rest is tiny
    return t_ours, t_peer, nbytes


def _meta(rows, torch_version):
    r0 = rows[0]
    return md_table(["date", "GPU", "commit", "peer (same run, same inputs)"],
                    [[r0["date"], r0["gpu"], r0["commit"],
                      "mamba_ssm's Triton kernels" + (f" (torch {torch_version})" if torch_version else "")]])


def ssd_fwd_section(rows, torch_version=""):
    """The ssd_fwd section of bench/RESULTS.md for the forward rows of one run."""
    tab = []
    for r in rows:
        f32 = r["shape"].endswith("float32")
        ceil = TF32_TFLOPS if f32 else BF16_TFLOPS
        t, tp = float(r["ours_ms"]), float(r["peer_ms"])
        tf, tbs = float(r["tflops"]), float(r["tbs"])
        tab.append([r["shape"], f"{t:.3f}", f"{tp:.3f}", f"{tp / t:.2f}x",
                    f"{tf:.1f} ({100 * tf / ceil:.0f}% of {'TF32' if f32 else 'bf16'})",
                    f"{tbs:.2f} ({100 * tbs / COPY_TBS:.0f}%)", f"{float(r['err']):.1e}"])
    return "\n".join([
        "## Mamba-2 SSD forward", "", _meta(rows, torch_version), "",
        "The 2.7B layer: H 80, P 64, N 128, G 1, chunk 256, with D, z, dt_bias and softplus; "
        "ours autotuned; median times (triton do_bench).  TFLOP/s counts b L H (4PN + QN + QP) "
        f"(Q the chunk), against the ~{BF16_TFLOPS:.0f} TFLOP/s bf16 or ~{TF32_TFLOPS:.0f} TF32 "
        f"rate (f32 runs on TF32 products, as the peer's); TB/s counts x, z, out, dt, B, C once, "
        f"against the ~{COPY_TBS} TB/s copy rate.  Written by `bench/gpu_ssd.py --results "
        "bench/RESULTS.md`.", "",
        md_table(["shape", "ours ms", "mamba_ssm ms", "ours / peer", "TFLOP/s (of ceiling)",
                  "TB/s (of copy)", "rel. diff vs peer"], tab)]) + "\n"


def ssd_step_section(rows, torch_version=""):
    """The ssd_step section of bench/RESULTS.md for the decode-step rows of one run."""
    tab = []
    for r in rows:
        t, tp, tbs = float(r["ours_ms"]), float(r["peer_ms"]), float(r["tbs"])
        tab.append([r["shape"].replace("batch ", ""), f"{t:.4f}", f"{tp:.4f}", f"{tp / t:.2f}x",
                    f"{tbs:.2f}", f"{100 * tbs / COPY_TBS:.0f}%"])
    return "\n".join([
        "## Mamba-2 decode step", "", _meta(rows, torch_version), "",
        "H 80, P 64, N 128, G 1, f32 state, bf16 x; the peer is selective_state_update's "
        "tied-head form.  TB/s counts the state read and written (the rest is tiny), against "
        f"the ~{COPY_TBS} TB/s copy rate.  Written by `bench/gpu_ssd.py --results bench/RESULTS.md`.",
        "",
        md_table(["batch", "ours ms", "mamba_ssm ms", "ours / peer", "TB/s", "of copy"], tab)]) + "\n"


def from_csv(paths, results, torch_version):
    """--from-csv: the sections from the CSVs of earlier runs (rounds of one
    library, e.g. bench/compare_libs.sh's), each time the median; TFLOP/s and
    TB/s scaled by the median time."""
    rows, _ = merge_rounds(paths, ("op", "shape"), ("ours_ms", "peer_ms"))
    first = {(r["op"], r["shape"]): r for r in merge_rounds(paths[:1], ("op", "shape"), ())[0]}
    for r in rows:
        r0 = first[(r["op"], r["shape"])]
        scale = float(r0["ours_ms"]) / float(r["ours_ms"])
        r["tflops"] = float(r0["tflops"]) * scale
        r["tbs"] = float(r0["tbs"]) * scale
    for op, make in (("ssd_fwd", ssd_fwd_section), ("ssd_step", ssd_step_section)):
        sel = [r for r in rows if r["op"] == op]
        if sel and results:
            how = replace_section(results, op, make(sel, torch_version))
            print(f"{results}: {op} section {how}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--from-csv", default="", metavar="A.csv,B.csv",
                    help="no GPU: write --results from these runs' CSVs (median over them)")
    ap.add_argument("--torch-version", default="", help="with --from-csv: the torch of those runs")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--results", default=None, metavar="PATH",
                    help="write the run as the ssd_fwd / ssd_step sections of PATH (bench/RESULTS.md)")
    ap.add_argument("--step-only", action="store_true", help="only the decode step")
    ap.add_argument("--no-step", action="store_true", help="skip the decode step")
    ap.add_argument("--dtypes", default="bfloat16,float32",
                    help="comma-separated dtypes of the forward points")
    ap.add_argument("--configs", default="",
                    help="comma-separated autotuner configurations of ours to time one by one "
                         "(SF_AUTOTUNE_FORCE=ssd_fwd:NAME), e.g. wgq,fuq,general")
    ap.add_argument("--profile", action="store_true",
                    help="time every kernel of one forward, ours and the peer")
    ap.add_argument("--profile-dtype", default="bfloat16", choices=("bfloat16", "float32"),
                    help="the dtype --profile uses")
    ap.add_argument("--profile-shape", default="8,4096", help="batch,seqlen for --profile")
    a = ap.parse_args()
    if a.from_csv:
        from_csv(a.from_csv.split(","), a.results, a.torch_version)
        return
    if torch is None:
        raise SystemExit("needs torch, triton and the seqfuse binding (PYTHONPATH=python)")
    if a.profile:
        pb, pL = (int(v) for v in a.profile_shape.split(","))
        profile_kernels(b=pb, L=pL, dtype=getattr(torch, a.profile_dtype))
        return
    gpu = torch.cuda.get_device_name()
    date = time.strftime("%Y-%m-%d")
    rows = []
    print(f"{gpu}, seqfuse {seqfuse.version()}, torch {torch.__version__}, commit {commit()}")
    print(f"{'SSD forward (H80 P64 N128 G1 chunk256, D, z)':48s} {'ours ms':>8s} {'peer ms':>8s}"
          f" {'speed-up':>8s} {'TFLOP/s':>8s} {'TB/s':>6s}  err")
    dtypes = [getattr(torch, d) for d in a.dtypes.split(",") if d]
    for dtype in () if a.step_only else dtypes:
        for b, L in ((8, 4096), (1, 16384)):
            for cfg in [c for c in a.configs.split(",") if c]:
                os.environ["SF_AUTOTUNE_FORCE"] = "ssd_fwd:" + cfg
                try:
                    t, _, err, flops, _ = scan_point(b, L, dtype, peer=False)
                    print(f"  config {cfg:10s} b{b} L{L} {str(dtype).split('.')[-1]}: {t:.3f} ms"
                          f" {flops / t / 1e9:.1f} TFLOP/s", flush=True)
                except Exception as e:  # noqa: BLE001 - a configuration may not serve the shape
                    print(f"  config {cfg:10s}: {str(e).splitlines()[0][:120]}", flush=True)
                del os.environ["SF_AUTOTUNE_FORCE"]
            t, tp, err, flops, nbytes = scan_point(b, L, dtype)
            name = f"b{b} L{L} {str(dtype).split('.')[-1]}"
            print(f"{name:48s} {t:8.3f} {tp:8.3f} {tp / t:7.2f}x {flops / t / 1e9:8.1f}"
                  f" {nbytes / t / 1e9:6.2f}  {err:.1e}", flush=True)
            rows.append(dict(date=date, gpu=gpu, op="ssd_fwd", shape=name, ours_ms=t, peer_ms=tp,
                             ratio=tp / t, tflops=flops / t / 1e9, tbs=nbytes / t / 1e9, err=err,
                             commit=commit()))
    print(f"{'decode step (H80 P64 N128, f32 state, bf16 x)':48s} {'ours ms':>8s} {'peer ms':>8s}"
          f" {'speed-up':>8s} {'TB/s':>8s} {'% copy':>6s}")
    for batch in () if a.no_step else (1, 16, 64, 128, 256):
        t, tp, nbytes = step_point(batch, torch.bfloat16)
        tbs = nbytes / t / 1e9
        print(f"{'batch ' + str(batch):48s} {t:8.4f} {tp:8.4f} {tp / t:7.2f}x {tbs:8.2f}"
              f" {100 * tbs / COPY_TBS:5.0f}%", flush=True)
        rows.append(dict(date=date, gpu=gpu, op="ssd_step", shape=f"batch {batch}", ours_ms=t,
                         peer_ms=tp, ratio=tp / t, tflops=0.0, tbs=tbs, err=float("nan"),
                         commit=commit()))
    if a.csv:
        write_csv(a.csv, rows)
    if a.results:
        for op, make in (("ssd_fwd", ssd_fwd_section), ("ssd_step", ssd_step_section)):
            sel = [r for r in rows if r["op"] == op]
            if sel:
                how = replace_section(a.results, op, make(sel, torch.__version__))
                print(f"{a.results}: {op} section {how}")


if __name__ == "__main__":
    main()
