"""Gradients of flash_attn_func / flash_attn_varlen_func (sf_attn_bwd) against
torch autograd of a naive float64 attention: CPU float32 always (when torch is
installed), CUDA bf16/fp16 when a GPU is there (skipped otherwise); the low-
level attn_bwd on numpy arrays; deterministic mode bit-identical; the op pair
under torch.compile.

Run: SEQFUSE_LIB=build/libseqfuse.so python -m pytest -q tests/python/test_attn_bwd.py
"""
import math

import numpy as np
import pytest

from sf_testutil import rnd  # first: puts python/ on the path and loads the library
import seqfuse  # noqa: E402
from seqfuse import _attn_grad  # noqa: E402

torch = pytest.importorskip("torch")


def naive(q, k, v, causal=False, window=(-1, -1), softcap=0.0, alibi=None, scale=None):
    """softmax attention of (b, Lq, H, d) in q's dtype, from the definitions;
    rows with no visible key give 0."""
    b, Lq, H, d = q.shape
    Lk, Hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=2)
    v = v.repeat_interleave(H // Hkv, dim=2)
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    s = torch.einsum("bihd,bjhd->bhij", q, k) * sc
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Lq, device=q.device).view(Lq, 1) + (Lk - Lq)
    j = torch.arange(Lk, device=q.device).view(1, Lk)
    if alibi is not None:
        s = s - alibi.to(s.dtype).reshape(-1 if alibi.dim() == 2 else 1, H, 1, 1) * (i - j).abs().to(s.dtype)
    wl, wr = window
    if causal:
        wr = 0
    hidden = torch.zeros(Lq, Lk, dtype=torch.bool, device=q.device)
    if wr >= 0:
        hidden |= j > i + wr
    if wl >= 0:
        hidden |= j < i - wl
    empty = hidden.all(dim=-1, keepdim=True)
    s = s.masked_fill(hidden & ~empty, float("-inf")).masked_fill(empty, 0.0)
    p = torch.softmax(s, dim=-1).masked_fill(empty, 0.0)
    return torch.einsum("bhij,bjhd->bihd", p, v)


def grads_ref(fn, dout, *xs):
    xs = [x.detach().double().requires_grad_() for x in xs]
    out = fn(*xs)
    return torch.autograd.grad(out, xs, dout.double())


CASES = [  # b, Lq, Lk, H, Hkv, d, kwargs
    (2, 17, 17, 2, 2, 16, {}),
    (1, 33, 20, 4, 2, 40, dict(causal=True)),           # Lq > Lk: rows with no key
    (2, 9, 30, 4, 1, 64, dict(causal=True)),            # MQA, Lq < Lk
    (1, 40, 40, 2, 2, 32, dict(window=(5, 2))),
    (1, 25, 25, 2, 1, 32, dict(softcap=3.0, scale=0.3)),
    (2, 20, 24, 2, 2, 32, dict(alibi="bh", causal=True)),
]


def _alibi(kind, b, H, device):
    if kind is None:
        return None
    g = torch.Generator().manual_seed(5)
    shape = (b, H) if kind == "bh" else (H,)
    return (torch.rand(shape, generator=g) * 0.3 + 0.02).to(device)


def _run_case(case, device, dtype, tol, deterministic=False):
    b, Lq, Lk, H, Hkv, d, kw = case
    kw = dict(kw)
    g = torch.Generator().manual_seed(1000 + Lq * 7 + d)
    q = (torch.randn(b, Lq, H, d, generator=g)).to(device, dtype).requires_grad_()
    k = (torch.randn(b, Lk, Hkv, d, generator=g)).to(device, dtype).requires_grad_()
    v = (torch.randn(b, Lk, Hkv, d, generator=g)).to(device, dtype).requires_grad_()
    dout = torch.randn(b, Lq, H, d, generator=g).to(device, dtype)
    alibi = _alibi(kw.pop("alibi", None), b, H, device)
    out = seqfuse.flash_attn_func(q, k, v, softmax_scale=kw.get("scale"), causal=kw.get("causal", False),
                                  window_size=kw.get("window", (-1, -1)), softcap=kw.get("softcap", 0.0),
                                  alibi_slopes=alibi, deterministic=deterministic)
    out.backward(dout)
    fn = lambda a, b_, c: naive(a, b_, c, alibi=alibi, **kw)  # noqa: E731
    want = grads_ref(fn, dout, q, k, v)
    lowp = None
    if dtype != torch.float32:  # flash-attention's rule: within twice a naive low-precision backward
        xs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        lowp = torch.autograd.grad(fn(*xs), xs, dout)
    for i, (name, got, w) in enumerate(zip("qkv", (q.grad, k.grad, v.grad), want)):
        assert torch.isfinite(got).all(), "d%s has non-finite values" % name
        e = (got.double() - w).norm() / max(w.norm().item(), 1e-30)
        assert e <= tol, "d%s: relative error %.3g > %.3g" % (name, e, tol)
        if lowp is not None:
            mine, naive_err = (got.double() - w).abs().max().item(), (lowp[i].double() - w).abs().max().item()
            assert mine <= 2 * naive_err + 1e-3, "d%s: max error %.3g, naive %s backward %.3g" % (
                name, mine, dtype, naive_err)
    return q.grad.clone(), k.grad.clone(), v.grad.clone()


@pytest.mark.parametrize("case", CASES)
def test_grad_cpu_f32(case):
    _run_case(case, "cpu", torch.float32, 2e-5)


def test_varlen_grad_cpu_f32():
    """Packed sequences, one of them empty on the query side, one with no keys."""
    lq, lk, H, Hkv, d = [5, 0, 12, 7], [6, 3, 9, 0], 4, 2, 24
    g = torch.Generator().manual_seed(77)
    q = torch.randn(sum(lq), H, d, generator=g, requires_grad=True)
    k = torch.randn(sum(lk), Hkv, d, generator=g, requires_grad=True)
    v = torch.randn(sum(lk), Hkv, d, generator=g, requires_grad=True)
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lq)]), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lk)]), dtype=torch.int32)
    out = seqfuse.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True)
    dout = torch.randn(out.shape, generator=g)
    out.backward(dout)

    def packed(a, b_, c):
        outs = []
        for s in range(len(lq)):
            qs, ks = slice(int(cu_q[s]), int(cu_q[s + 1])), slice(int(cu_k[s]), int(cu_k[s + 1]))
            outs.append(naive(a[qs][None], b_[ks][None], c[ks][None], causal=True)[0])
        return torch.cat(outs)

    want = grads_ref(packed, dout, q, k, v)
    for got, w in zip((q.grad, k.grad, v.grad), want):
        assert torch.isfinite(got).all()
        assert ((got.double() - w).norm() / w.norm()).item() <= 2e-5


def test_numpy_attn_bwd_matches_torch():
    """The low-level attn_bwd on numpy arrays gives the autograd path's gradients."""
    rng = np.random.default_rng(3)
    q, k, v = rnd(rng, (1, 11, 2, 16)), rnd(rng, (1, 13, 1, 16)), rnd(rng, (1, 13, 1, 16))
    dout = rnd(rng, (1, 11, 2, 16))
    out, lse = seqfuse.flash_attn_func(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = _attn_grad.attn_bwd(dout, q, k, v, out, lse, causal=True)
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    seqfuse.flash_attn_func(tq, tk, tv, causal=True).backward(torch.from_numpy(dout))
    for a, t in zip((dq, dk, dv), (tq, tk, tv)):
        assert np.abs(a - t.grad.numpy()).max() <= 1e-6


def test_deterministic_cpu_bits():
    a = _run_case(CASES[1], "cpu", torch.float32, 2e-5, deterministic=True)
    b = _run_case(CASES[1], "cpu", torch.float32, 2e-5, deterministic=True)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_no_grad_path_unchanged():
    """Without requires_grad the forward is the plain call (no op pair)."""
    q = torch.randn(1, 5, 2, 8)
    with torch.no_grad():
        out = seqfuse.flash_attn_func(q, q, q)
    assert out.shape == q.shape and not out.requires_grad


def test_torch_compile_opaque():
    """Under torch.compile (aot_eager: no code generation) the op pair stays
    opaque and gives the eager gradients."""
    if not hasattr(torch, "compile"):
        pytest.skip("torch.compile is not available")

    def f(q, k, v):
        return seqfuse.flash_attn_func(q, k, v, causal=True).square().sum()

    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(1, 12, 2, 16, generator=g, requires_grad=True) for _ in range(3))
    f(q, k, v).backward()
    want = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    torch._dynamo.reset()
    cf = torch.compile(f, backend="aot_eager", fullgraph=False)
    cf(q, k, v).backward()
    for t, w in zip((q, k, v), want):
        assert torch.allclose(t.grad, w, rtol=1e-5, atol=1e-6)


cuda = pytest.mark.skipif(not (torch.cuda.is_available() and seqfuse._lib.sf_cuda_device_count() > 0),
                          reason="no CUDA device")


@cuda
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", CASES)
def test_grad_cuda(case, dtype):
    dt = getattr(torch, dtype)
    _run_case(case, "cuda", dt, 2e-2 if dtype == "bfloat16" else 4e-3)


@cuda
def test_deterministic_cuda_bits():
    case = (2, 300, 300, 8, 2, 128, dict(causal=True))
    a = _run_case(case, "cuda", torch.bfloat16, 2e-2, deterministic=True)
    for _ in range(3):
        b = _run_case(case, "cuda", torch.bfloat16, 2e-2, deterministic=True)
        assert all(torch.equal(x, y) for x, y in zip(a, b))
