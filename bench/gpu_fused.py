"""The fused layer ops on the GPU (src/cuda/fused/) and the causal conv1d
prefill, against PyTorch in the same run on the same GPU.

 - add + RMSNorm (h = x + r written out, y = rmsnorm(h) * w) and SwiGLU
   (silu(gate) * up, gate and up separate) at 16384 x 8192 bf16: time and
   bandwidth = bytes that must move / time (norm: x, r in, y, h out; SwiGLU:
   gate, up in, out), against the ~4.2 TB/s copy ceiling; the peers are
   torch eager and torch.compile of the same formula.
 - decode sizes, 1 / 16 / 64 / 256 rows x 4096: microseconds per call of
   the GPU alone, each side captured 20 calls to a CUDA graph and replayed
   (the binding's Python overhead, ~tens of us, is not the kernel's), against
   torch.compile (and eager) captured alike.
 - RoPE of q (16384, 32, 128) and k (16384, 8, 128) bf16 in place, llama3
   frequencies and positions 0..T-1, q and k in one call, against a torch
   eager rotation from cos/sin tables (the formula flash-attention's tests use).
 - conv1d prefill at 8 x 4096 x 5376, width 4, bias, SiLU, bf16 and f32,
   channels-last (no copies), against the causal-conv1d package when it
   imports (channels-last input too).

    PYTHONPATH=python:bench SEQFUSE_LIB=build/libseqfuse.so python3 bench/gpu_fused.py \\
        [--results bench/RESULTS.md] [--no-compile]
"""
import argparse
import ctypes
import sys

from benchutil import COPY_TBS, commit, graph_ms, md_table, replace_section

try:
    import torch
    import torch.nn.functional as F
    import triton.testing

    import seqfuse
    from seqfuse import _lib as L
    from seqfuse._core import Call
except ImportError:
    torch = None

ROWS, D = 16384, 8192
DECODE_ROWS, DECODE_D = [1, 16, 64, 256], 4096
EPS = 1e-6


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def graph_us(fn):
    """GPU microseconds per call of fn (benchutil.graph_ms: 20 calls in a CUDA graph)."""
    return graph_ms(fn) * 1e3


def tbs(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e12


def rms_torch(x, r, w):
    h = x + r
    hf = h.float()
    y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS) * w
    return y.to(x.dtype), h


def swiglu_torch(g, u):
    return F.silu(g) * u


def compiled(fn, use):
    if not use:
        return None
    try:
        return torch.compile(fn, dynamic=False)
    except Exception as e:  # noqa: BLE001 - no compiler: say so
        print(f"torch.compile unavailable: {e}", file=sys.stderr)
        return None


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def big_norm_swiglu(use_compile):
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(ROWS, D, device=dev, dtype=bf, generator=g)
    r = torch.randn(ROWS, D, device=dev, dtype=bf, generator=g)
    w = torch.rand(D, device=dev, generator=g) + 0.5
    out = {}
    ours = lambda: seqfuse.add_rms_norm(x, r, w, eps=EPS)  # noqa: E731
    y, h = ours()
    ye, he = rms_torch(x, r, w)
    out["norm"] = dict(err=rel(y, ye), ours=bench(ours), eager=bench(lambda: rms_torch(x, r, w)))
    rc = compiled(rms_torch, use_compile)
    out["norm"]["compile"] = bench(lambda: rc(x, r, w)) if rc else float("nan")
    out["norm"]["bytes"] = 4.0 * ROWS * D * 2
    gt = torch.randn(ROWS, D, device=dev, dtype=bf, generator=g)
    up = torch.randn(ROWS, D, device=dev, dtype=bf, generator=g)
    ours = lambda: seqfuse.swiglu(gt, up)  # noqa: E731
    out["swiglu"] = dict(err=rel(ours(), swiglu_torch(gt, up)), ours=bench(ours),
                         eager=bench(lambda: swiglu_torch(gt, up)))
    sc = compiled(swiglu_torch, use_compile)
    out["swiglu"]["compile"] = bench(lambda: sc(gt, up)) if sc else float("nan")
    out["swiglu"]["bytes"] = 3.0 * ROWS * D * 2
    return out


def decode(use_compile):
    dev, bf = "cuda", torch.bfloat16
    rows = []
    rc = compiled(rms_torch, use_compile)
    sc = compiled(swiglu_torch, use_compile)
    for n in DECODE_ROWS:
        g = torch.Generator(device=dev).manual_seed(n)
        x = torch.randn(n, DECODE_D, device=dev, dtype=bf, generator=g)
        r = torch.randn(n, DECODE_D, device=dev, dtype=bf, generator=g)
        w = torch.rand(DECODE_D, device=dev, generator=g) + 0.5
        u = torch.randn(n, DECODE_D, device=dev, dtype=bf, generator=g)
        row = dict(rows=n)
        row["norm_ours"] = graph_us(lambda: seqfuse.add_rms_norm(x, r, w, eps=EPS))
        row["norm_eager"] = graph_us(lambda: rms_torch(x, r, w))
        row["norm_compile"] = graph_us(lambda: rc(x, r, w)) if rc else float("nan")
        row["swiglu_ours"] = graph_us(lambda: seqfuse.swiglu(x, u))
        row["swiglu_eager"] = graph_us(lambda: swiglu_torch(x, u))
        row["swiglu_compile"] = graph_us(lambda: sc(x, u)) if sc else float("nan")
        rows.append(row)
    return rows


def rope_qk(q, k, theta=500000.0):
    """q and k rotated in place in one sf_rope call: NeoX halves, positions
    0..T-1, Llama 3.1's llama3 frequencies."""
    call = Call("rope", q, "q")
    p = L.sf_rope_params()
    L.sf_rope_params_init(ctypes.byref(p))
    p.q = call.tensor(q, "q")
    p.k = call.tensor(k, "k")
    p.theta = theta
    p.scaling = L.SF_ROPE_LLAMA3
    call.run(L.sf_rope, p, "auto")


def llama3_cos_sin(T, d, theta=500000.0):
    """The cos/sin tables of the llama3 frequencies (float64 on the host)."""
    import math
    f = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    wl = 2 * math.pi / f
    lo, hi = 8192 / 1.0, 8192 / 4.0
    s = (8192 / wl - 1.0) / 3.0
    f = torch.where(wl < hi, f, torch.where(wl > lo, f / 8.0, (1 - s) * f / 8.0 + s * f))
    a = torch.arange(T, dtype=torch.float64)[:, None] * f[None, :]
    return torch.cos(a).float().cuda(), torch.sin(a).float().cuda()


def rope_torch(x, cos, sin):
    """flash-attention's reference rotation (NeoX halves), out of place."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h].float(), x[..., h:].float()
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(x.dtype)


def rope_bench():
    T, H, HKV, DH = 16384, 32, 8, 128
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(3)
    q = torch.randn(T, H, DH, device=dev, dtype=bf, generator=g)
    k = torch.randn(T, HKV, DH, device=dev, dtype=bf, generator=g)
    cos, sin = llama3_cos_sin(T, DH)
    qw, kw = rope_torch(q, cos, sin), rope_torch(k, cos, sin)
    q1, k1 = q.clone(), k.clone()
    rope_qk(q1, k1)
    err = max(rel(q1, qw), rel(k1, kw))
    qb, kb = q.clone(), k.clone()
    ours = bench(lambda: rope_qk(qb, kb))
    eager = bench(lambda: (rope_torch(q, cos, sin), rope_torch(k, cos, sin)))
    nbytes = 2.0 * (q.numel() + k.numel()) * 2
    return dict(ours=ours, eager=eager, bytes=nbytes, err=err, shape=f"T {T}, H {H}, Hkv {HKV}, d {DH}")


def conv_bench():
    B, Lc, C, W = 8, 4096, 5376, 4
    try:
        from causal_conv1d import causal_conv1d_fn as peer_fn
    except ImportError:
        peer_fn = None
    res = []
    for dt in (torch.bfloat16, torch.float32):
        g = torch.Generator(device="cuda").manual_seed(4)
        xbl = torch.randn(B, Lc, C, device="cuda", dtype=dt, generator=g)
        x = xbl.transpose(1, 2)  # (b, dim, L) view of channels-last memory: no copy
        w = torch.randn(C, W, device="cuda", generator=g) * 0.3
        b = torch.randn(C, device="cuda", generator=g)
        ours = lambda: seqfuse.causal_conv1d_fn(x, w, b, activation="silu")  # noqa: E731
        t = bench(ours)
        row = dict(dtype=str(dt).replace("torch.", ""), ours=t, bytes=2.0 * x.numel() * x.element_size())
        row["peer"], row["err"] = float("nan"), float("nan")
        if peer_fn is not None:
            try:
                wp, bp = w.to(dt), b.to(dt)
                ref = peer_fn(x, wp, bp, activation="silu")
                row["err"] = rel(ours(), ref)
                row["peer"] = bench(lambda: peer_fn(x, wp, bp, activation="silu"))
            except Exception as e:  # noqa: BLE001 - the peer refuses this layout or dtype
                print(f"causal_conv1d ({row['dtype']}): {e}", file=sys.stderr)
        res.append(row)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=None)
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out (faster)")
    a = ap.parse_args()
    if torch is None or not torch.cuda.is_available():
        print("gpu_fused.py: needs torch with CUDA, triton and seqfuse", file=sys.stderr)
        return 77
    import datetime
    gpu, date, use_c = torch.cuda.get_device_name(), datetime.date.today().isoformat(), not a.no_compile
    print(f"{gpu}, torch {torch.__version__}, commit {commit()}")
    md = [f"{date}, {gpu}, commit {commit()}, torch {torch.__version__}.  Times: medians of triton "
          f"do_bench; TB/s = bytes that must move / time; copy ceiling ~{COPY_TBS} TB/s.", ""]

    big = big_norm_swiglu(use_c)
    hdr = ["op (16384 x 8192 bf16)", "ours ms", "ours TB/s", "% of copy", "torch.compile ms", "compile TB/s",
           "eager ms", "eager TB/s", "compile / ours", "rel. err vs eager"]
    rows = []
    for name, lab in (("norm", "add + RMSNorm (x, r in; y, h out)"), ("swiglu", "SwiGLU (gate, up in; out)")):
        b = big[name]
        ot, ct, et = tbs(b["bytes"], b["ours"]), tbs(b["bytes"], b["compile"]), tbs(b["bytes"], b["eager"])
        print(f"{lab:36s} ours {b['ours']:.3f} ms {ot:.2f} TB/s ({100 * ot / COPY_TBS:.0f}% of copy)  "
              f"compile {b['compile']:.3f} ms {ct:.2f}  eager {b['eager']:.3f} ms {et:.2f}  err {b['err']:.1e}",
              flush=True)
        rows.append([lab, f"{b['ours']:.3f}", f"{ot:.2f}", f"{100 * ot / COPY_TBS:.0f}%", f"{b['compile']:.3f}",
                     f"{ct:.2f}", f"{b['eager']:.3f}", f"{et:.2f}", f"{b['compile'] / b['ours']:.2f}x",
                     f"{b['err']:.1e}"])
    md += [md_table(hdr, rows), ""]

    dec = decode(use_c)
    print("decode (x 4096 bf16), us per call on the GPU (CUDA graph of 20 calls):")
    hdr = ["rows x 4096", "add+RMSNorm ours us", "torch.compile", "eager", "SwiGLU ours us", "torch.compile",
           "eager"]
    rows = []
    for d in dec:
        print(f"  {d['rows']:4d}  norm ours {d['norm_ours']:6.2f} compile {d['norm_compile']:6.2f} eager "
              f"{d['norm_eager']:6.2f}   swiglu ours {d['swiglu_ours']:6.2f} compile {d['swiglu_compile']:6.2f} "
              f"eager {d['swiglu_eager']:6.2f}", flush=True)
        rows.append([d["rows"]] + [f"{d[k]:.2f}" for k in ("norm_ours", "norm_compile", "norm_eager",
                                                           "swiglu_ours", "swiglu_compile", "swiglu_eager")])
    md += ["Decode sizes: GPU microseconds per call, each side 20 calls captured in a CUDA graph and "
           "replayed (the binding's Python overhead left out).", "", md_table(hdr, rows), ""]

    rp = rope_bench()
    ot, et = tbs(rp["bytes"], rp["ours"]), tbs(rp["bytes"], rp["eager"])
    print(f"RoPE q+k in place ({rp['shape']}, bf16, llama3): ours {rp['ours']:.3f} ms {ot:.2f} TB/s "
          f"({100 * ot / COPY_TBS:.0f}% of copy), torch eager (tables) {rp['eager']:.3f} ms {et:.2f} TB/s, "
          f"err {rp['err']:.1e}", flush=True)
    md += [md_table(["RoPE q and k, bf16, llama3 (" + rp["shape"] + ")", "ours ms", "ours TB/s", "% of copy",
                     "torch eager ms", "eager TB/s", "eager / ours", "rel. err vs eager"],
                    [["in place, one call", f"{rp['ours']:.3f}", f"{ot:.2f}", f"{100 * ot / COPY_TBS:.0f}%",
                      f"{rp['eager']:.3f}", f"{et:.2f}", f"{rp['eager'] / rp['ours']:.2f}x",
                      f"{rp['err']:.1e}"]]), ""]

    cv = conv_bench()
    rows = []
    for c in cv:
        ot, pt = tbs(c["bytes"], c["ours"]), tbs(c["bytes"], c["peer"])
        print(f"conv1d 8 x 4096 x 5376 W4 SiLU {c['dtype']:8s}: ours {c['ours']:.3f} ms {ot:.2f} TB/s "
              f"({100 * ot / COPY_TBS:.0f}% of copy), causal-conv1d {c['peer']:.3f} ms {pt:.2f} TB/s, "
              f"err {c['err']:.1e}", flush=True)
        rows.append([c["dtype"], f"{c['ours']:.3f}", f"{ot:.2f}", f"{100 * ot / COPY_TBS:.0f}%",
                     f"{c['peer']:.3f}", f"{pt:.2f}", f"{c['err']:.1e}"])
    md += [md_table(["conv1d prefill 8 x 4096 x 5376, W 4, bias, SiLU", "ours ms", "ours TB/s", "% of copy",
                     "causal-conv1d ms", "causal-conv1d TB/s", "rel. err vs peer"], rows)]

    if a.results:
        how = replace_section(a.results, "fused_ops", "\n".join(md))
        print(f"{a.results}: fused_ops section {how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
