"""The binding's fused layer ops (rms_norm, add_rms_norm, layer_norm,
swiglu, apply_rotary_emb) against numpy float64 formulas written here."""
import numpy as np
import pytest

from sf_testutil import DTYPES, TOL, f64, rel_err, np_dtype  # noqa: F401
import seqfuse
from seqfuse import SeqfuseError


def rnd(shape, dt, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np_dtype(dt))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("D", [1, 7, 300])
def test_rms_and_layer_norm(dt, D):
    x, r = rnd((3, 5, D), dt, 1), rnd((3, 5, D), dt, 2)
    w, b = rnd((D,), "float32", 3), rnd((D,), "float32", 4)
    h = f64(x) + f64(r)
    y, hh = seqfuse.rms_norm(x, w, eps=1e-6, residual=r, prenorm=True)
    want = h / np.sqrt((h ** 2).mean(-1, keepdims=True) + 1e-6) * w
    assert rel_err(y, want) < TOL[dt] and rel_err(hh, h) < TOL[dt]
    y2, _ = seqfuse.add_rms_norm(x, r, w, eps=1e-6)
    assert np.array_equal(f64(y2), f64(y))
    y = seqfuse.layer_norm(x, w, b, eps=1e-5, residual=r)
    m = h.mean(-1, keepdims=True)
    want = (h - m) / np.sqrt(((h - m) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
    assert rel_err(y, want) < TOL[dt]
    y = seqfuse.rms_norm(x, w)
    want = f64(x) / np.sqrt((f64(x) ** 2).mean(-1, keepdims=True) + 1e-6) * w
    assert rel_err(y, want) < TOL[dt]


def test_norm_errors():
    x = rnd((2, 8), "float32")
    with pytest.raises(SeqfuseError, match="eps"):
        seqfuse.rms_norm(x, np.ones(8, np.float32), eps=-1.0)
    with pytest.raises(SeqfuseError, match="weight"):
        seqfuse.rms_norm(x, np.ones(7, np.float32))


def silu64(v):
    return v / (1.0 + np.exp(-v))


@pytest.mark.parametrize("dt", DTYPES)
def test_swiglu_layouts(dt):
    g, u = rnd((4, 9), dt, 5), rnd((4, 9), dt, 6)
    want = silu64(f64(g)) * f64(u)
    assert rel_err(seqfuse.swiglu(g, u), want) < TOL[dt]
    assert rel_err(seqfuse.swiglu(np.concatenate([g, u], -1)), want) < TOL[dt]
    inter = np.stack([g, u], -1).reshape(4, 18)
    assert rel_err(seqfuse.swiglu(inter, layout="interleaved"), want) < TOL[dt]
    with pytest.raises(SeqfuseError, match="layout"):
        seqfuse.swiglu(g, layout="zigzag")


def rope64(x, cos, sin, pos, interleaved):
    x = f64(x).copy()
    R = 2 * cos.shape[1]
    c, s = f64(cos)[pos][:, None, :], f64(sin)[pos][:, None, :]
    if interleaved:
        x1, x2 = x[..., 0:R:2].copy(), x[..., 1:R:2].copy()
        x[..., 0:R:2], x[..., 1:R:2] = x1 * c - x2 * s, x2 * c + x1 * s
    else:
        x1, x2 = x[..., :R // 2].copy(), x[..., R // 2:R].copy()
        x[..., :R // 2], x[..., R // 2:R] = x1 * c - x2 * s, x2 * c + x1 * s
    return x


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rotary_emb(dt, interleaved):
    b, s, H, d, R = 2, 6, 3, 16, 12
    ang = np.arange(40)[:, None] * (10000.0 ** (-np.arange(R // 2) * 2.0 / R))[None, :]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    x = rnd((b, s, H, d), dt, 7)
    offs = np.array([0, 5])
    pos = (np.arange(s)[None, :] + offs[:, None]).reshape(-1)
    want = rope64(x.reshape(b * s, H, d), cos, sin, pos, interleaved).reshape(b, s, H, d)
    got = seqfuse.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=offs)
    assert rel_err(got, want) < TOL[dt]
    xc = x.copy()
    r = seqfuse.apply_rotary_emb(xc, cos, sin, interleaved=interleaved, inplace=True,
                                 seqlen_offsets=offs)
    assert r is xc and np.array_equal(f64(xc), f64(got))
    # varlen: sequences of 4 and 8 tokens packed, offset 3
    xv = rnd((12, H, d), dt, 8)
    cu = np.array([0, 4, 12], np.int32)
    posv = np.concatenate([np.arange(4), np.arange(8)]) + 3
    got = seqfuse.apply_rotary_emb(xv, cos, sin, interleaved=interleaved, seqlen_offsets=3,
                                   cu_seqlens=cu, max_seqlen=8)
    assert rel_err(got, rope64(xv, cos, sin, posv, interleaved)) < TOL[dt]


def test_rope_position_past_tables():
    cos = np.ones((4, 4), np.float32)
    with pytest.raises(SeqfuseError, match="positions"):
        seqfuse.apply_rotary_emb(rnd((1, 6, 1, 8), "float32"), cos, cos)


# ------------------------------------------------------------------ CUDA backend (torch tensors)
# The same formulas with torch CUDA tensors: the calls run on seqfuse's CUDA
# kernels (src/cuda/fused/); skipped, and listed as such, without torch, a
# GPU or a CUDA build of the library.

try:
    import torch
except ImportError:
    torch = None

HAS_GPU = (torch is not None and torch.cuda.is_available() and seqfuse.has_cuda())
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs torch with CUDA and a CUDA build of seqfuse")
TDT = ["float32", "float16", "bfloat16"]
# the GPU backend's bounds (tests/cases.c: sfc_tolerance on CUDA)
GTOL = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 1.5e-2}


def trnd(shape, dt, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(shape, generator=g).to(getattr(torch, dt))


def t64(t):
    return t.detach().float().cpu().numpy().astype(np.float64)


@needs_gpu
@pytest.mark.parametrize("dt", TDT)
@pytest.mark.parametrize("D", [7, 64, 4096, 8192, 8191])
def test_torch_cuda_norms(dt, D):
    x, r = trnd((3, 5, D), dt, 1), trnd((3, 5, D), dt, 2)
    w, b = trnd((D,), "float32", 3), trnd((D,), "float32", 4)
    xd, rd, wd, bd = x.cuda(), r.cuda(), w.cuda(), b.cuda()
    h = t64(x) + t64(r)
    y, hh = seqfuse.rms_norm(xd, wd, eps=1e-6, residual=rd, prenorm=True)
    assert y.is_cuda and y.dtype == x.dtype and hh.dtype == x.dtype
    want = h / np.sqrt((h ** 2).mean(-1, keepdims=True) + 1e-6) * t64(w)
    assert rel_err(t64(y), want) < GTOL[dt] and rel_err(t64(hh), h) < GTOL[dt]
    y, hh = seqfuse.layer_norm(xd, wd, bd, eps=1e-5, residual=rd, prenorm=True, residual_in_fp32=True)
    assert hh.dtype == torch.float32 and rel_err(t64(hh), h) < 1e-6
    m = h.mean(-1, keepdims=True)
    want = (h - m) / np.sqrt(((h - m) ** 2).mean(-1, keepdims=True) + 1e-5) * t64(w) + t64(b)
    assert rel_err(t64(y), want) < GTOL[dt]
    # the GPU agrees with the CPU backend on the same inputs
    yc = seqfuse.rms_norm(x.float().numpy(), w.numpy(), eps=1e-6, residual=r.float().numpy())
    yg = seqfuse.rms_norm(xd.float(), wd, eps=1e-6, residual=rd.float())
    assert rel_err(t64(yg), yc) < 1e-5


@needs_gpu
def test_torch_cuda_norm_graph_capture():
    """add + RMSNorm captured in a CUDA graph (no allocation or sync inside
    the call), replayed after the input changed in place."""
    x, r, w = trnd((16, 4096), "bfloat16", 5).cuda(), trnd((16, 4096), "bfloat16", 6).cuda(), torch.ones(4096, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # seqfuse's context for the capture stream exists before it
        seqfuse.add_rms_norm(x, r, w)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        y, h = seqfuse.add_rms_norm(x, r, w)
    x.copy_(trnd((16, 4096), "bfloat16", 7))
    g.replay()
    torch.cuda.synchronize()
    y2, h2 = seqfuse.add_rms_norm(x, r, w)
    assert torch.equal(y, y2) and torch.equal(h, h2)


@needs_gpu
@pytest.mark.parametrize("dt", TDT)
@pytest.mark.parametrize("n", [9, 4096])
def test_torch_cuda_swiglu(dt, n):
    g, u = trnd((6, n), dt, 5), trnd((6, n), dt, 6)
    want = silu64(t64(g)) * t64(u)
    gd, ud = g.cuda(), u.cuda()
    assert rel_err(t64(seqfuse.swiglu(gd, ud)), want) < GTOL[dt]
    assert rel_err(t64(seqfuse.swiglu(torch.cat([gd, ud], -1))), want) < GTOL[dt]
    inter = torch.stack([gd, ud], -1).reshape(6, 2 * n)
    assert rel_err(t64(seqfuse.swiglu(inter, layout="interleaved")), want) < GTOL[dt]


@needs_gpu
@pytest.mark.parametrize("dt", TDT)
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("d,R", [(16, 12), (128, 128), (128, 64)])
def test_torch_cuda_apply_rotary_emb(dt, interleaved, d, R):
    b, s, H = 2, 37, 4
    ang = np.arange(200)[:, None] * (10000.0 ** (-np.arange(R // 2) * 2.0 / R))[None, :]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    x = trnd((b, s, H, d), dt, 7)
    offs = np.array([0, 150])
    pos = (np.arange(s)[None, :] + offs[:, None]).reshape(-1)
    want = rope64(t64(x).reshape(b * s, H, d), cos, sin, pos, interleaved).reshape(b, s, H, d)
    xd, cd, sd = x.cuda(), torch.from_numpy(cos).cuda(), torch.from_numpy(sin).cuda()
    got = seqfuse.apply_rotary_emb(xd, cd, sd, interleaved=interleaved, seqlen_offsets=offs)
    assert got.is_cuda and rel_err(t64(got), want) < GTOL[dt]
    xi = xd.clone()
    r = seqfuse.apply_rotary_emb(xi, cd, sd, interleaved=interleaved, inplace=True, seqlen_offsets=offs)
    assert r is xi and torch.equal(xi, got)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("M,I,K", [(1, 5, 7), (9, 33, 40)])
def test_gemm_swiglu(dt, M, I, K):
    x = rnd((M, K), dt, 11)
    w = (rnd((2 * I, K), dt, 12).astype(np.float32) / np.sqrt(K)).astype(np_dtype(dt))
    wg, wu = w[:I], w[I:]  # the halves of a concatenated projection: two views
    want = silu64(f64(x) @ f64(wg).T) * (f64(x) @ f64(wu).T)
    assert rel_err(seqfuse.gemm_swiglu(x, wg, wu), want) < TOL[dt]
    y3 = seqfuse.gemm_swiglu(x.reshape(1, M, K), wg, wu)
    assert y3.shape == (1, M, I)
    with pytest.raises(SeqfuseError, match="w_up"):
        seqfuse.gemm_swiglu(x, wg, wu[:, :-1])


def test_gemm_swiglu_params_layout(tmp_path):
    """sf_gemm_swiglu_params's size and field offsets as the C compiler lays
    them out, against the binding's ctypes struct (skipped without a C
    compiler)."""
    import ctypes
    import os
    import shutil
    import subprocess
    from seqfuse import _lib
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    S = _lib.sf_gemm_swiglu_params
    fields = [f for f, _ in S._fields_]
    assert fields == ["x", "w_gate", "w_up", "y", "backend"]
    src = tmp_path / "off.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include \"seqfuse.h\"\nint main(void) {\n"
                   "printf(\"SIZE %zu\\n\", sizeof(sf_gemm_swiglu_params));\n"
                   + "".join('printf("%s %%zu\\n", offsetof(sf_gemm_swiglu_params, %s));\n' % (f, f) for f in fields)
                   + "return 0;\n}\n")
    exe = tmp_path / "off"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(repo, "include"), str(src), "-o", str(exe)], check=True)
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n"):
        if line:
            f, v = line.split()
            assert (ctypes.sizeof(S) if f == "SIZE" else getattr(S, f).offset) == int(v), (f, v)


@needs_gpu
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("M", [1, 16, 200])
def test_torch_cuda_gemm_swiglu(dt, M):
    I, K = 320, 512
    x = trnd((M, K), dt, 13)
    w = (trnd((2 * I, K), "float32", 14) / K ** 0.5).to(x.dtype)
    want = silu64(t64(x) @ t64(w[:I]).T) * (t64(x) @ t64(w[I:]).T)
    wd = w.cuda()
    y = seqfuse.gemm_swiglu(x.cuda(), wd[:I], wd[I:])
    assert rel_err(t64(y), want) < GTOL[dt]
