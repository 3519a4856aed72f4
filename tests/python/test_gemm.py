"""seqfuse.gemm (sf_gemm) through the binding against numpy float64 on fresh
seeded inputs: every dtype, odd shapes, bias, beta with out, N-D x; the
argument errors; torch CUDA tensors when there is a GPU (skipped, with the
reason, without)."""
import numpy as np
import pytest

from sf_testutil import DTYPES, TOL, BACKENDS, _raises, f64, rel_err, rnd
import seqfuse
from seqfuse import _lib

try:
    import torch
except ImportError:
    torch = None

HAVE_CUDA = torch is not None and torch.cuda.is_available() and seqfuse.has_cuda()
SEED = 20261204


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M,N,K", [(1, 7, 5), (13, 33, 64), (64, 129, 257)])
def test_gemm_matches_float64(dt, backend, M, N, K):
    rng = np.random.default_rng(SEED + M * 1000 + N)
    print("seed", SEED + M * 1000 + N)
    x, w = rnd(rng, (M, K), dt), rnd(rng, (N, K), dt)
    bias = rnd(rng, (N,), "float32")
    y = seqfuse.gemm(x, w, backend=backend)
    assert y.shape == (M, N) and y.dtype == x.dtype
    assert rel_err(y, f64(x) @ f64(w).T) < TOL[dt]
    y = seqfuse.gemm(x, w, bias=bias, backend=backend)
    assert rel_err(y, f64(x) @ f64(w).T + f64(bias)) < TOL[dt]
    # beta: the residual add into out (its old values read), out returned itself
    old = rnd(rng, (M, N), dt)
    out = old.copy()
    got = seqfuse.gemm(x, w, out=out, beta=1.0, backend=backend)
    assert got is out
    assert rel_err(out, f64(x) @ f64(w).T + f64(old)) < TOL[dt]
    # beta 0 never reads out: NaN there must not leak
    out = np.full((M, N), np.nan, dtype=x.dtype)
    seqfuse.gemm(x, w, out=out, backend=backend)
    assert rel_err(out, f64(x) @ f64(w).T) < TOL[dt]


def test_gemm_nd_x():
    rng = np.random.default_rng(SEED)
    x, w = rnd(rng, (2, 3, 16), "float32"), rnd(rng, (5, 16), "float32")
    y = seqfuse.gemm(x, w)
    assert y.shape == (2, 3, 5)
    assert rel_err(y, f64(x) @ f64(w).T) < TOL["float32"]


def test_gemm_errors():
    rng = np.random.default_rng(SEED)
    x, w = rnd(rng, (4, 8), "float32"), rnd(rng, (3, 8), "float32")
    e = _raises(_lib.SF_ERR_SHAPE, seqfuse.gemm, x, w[:, :5].copy())
    assert "gemm" in str(e)
    _raises(_lib.SF_ERR_SHAPE, seqfuse.gemm, x, w.reshape(-1))
    e = _raises(_lib.SF_ERR_SHAPE, seqfuse.gemm, x, w, out=np.empty((4, 4), np.float32))
    assert "out" in str(e)
    _raises(_lib.SF_ERR_SHAPE, seqfuse.gemm, x.reshape(2, 2, 8), w, out=np.empty((4, 3), np.float32))
    _raises(_lib.SF_ERR_INVALID_ARG, seqfuse.gemm, x, w, beta=float("nan"))


@pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (or no CUDA build, or no torch)")
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_gemm_torch_cuda(dt):
    g = torch.Generator(device="cuda").manual_seed(SEED)
    tdt = getattr(torch, dt)
    x = torch.randn(37, 96, device="cuda", generator=g).to(tdt)
    w = torch.randn(65, 96, device="cuda", generator=g).to(tdt)
    out = torch.full((37, 65), float("nan"), device="cuda", dtype=tdt)
    got = seqfuse.gemm(x, w, out=out)
    assert got is out
    ref = x.double() @ w.double().t()
    assert rel_err(out.float().cpu().numpy(), ref.cpu().numpy()) < TOL[dt]
