"""mamba_chunk_scan_combined under torch autograd (sf_ssd_bwd): every input's
gradient against torch autograd of a float64 sequential reference written
here (the recurrence of seqfuse.h, token by token), on CPU float32 inputs;
on a GPU (skipped without one) in float32 and bfloat16.  Also the explicit
mamba_chunk_scan_combined_bwd on numpy arrays.

Run: SEQFUSE_LIB=build/libseqfuse.so python -m pytest -q tests/python/test_mamba_bwd.py
"""
import math

import numpy as np
import pytest

import sf_testutil  # noqa: F401  (puts the repo's python/ on the path)
import seqfuse
from seqfuse._mamba import mamba_chunk_scan_combined_bwd

torch = pytest.importorskip("torch")
F = torch.nn.functional


def ref_scan(x, dt, A, B, C, D, z, dt_bias, init, seq_idx, cu, softplus, dt_limit):
    """float64 sequential reference; returns out and the final states (one
    per batch row, or one per cu_seqlens sequence)."""
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    rep = H // G
    d = dt + (dt_bias if dt_bias is not None else 0.0)
    if softplus:
        d = F.softplus(d)
    d = torch.clamp(d, min=dt_limit[0], max=dt_limit[1])
    Bh = B.repeat_interleave(rep, dim=2)
    Ch = C.repeat_interleave(rep, dim=2)

    def scan(lo, hi, h):
        outs = []
        for t in range(lo, hi):
            if seq_idx is not None and t > 0:
                same = (seq_idx[:, t] == seq_idx[:, t - 1]).to(torch.float64)
                h = h * same[:, None, None, None]
            a = torch.exp(torch.clamp(d[:, t] * A, max=0.0))
            h = a[:, :, None, None] * h + (d[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
            y = torch.einsum("bhpn,bhn->bhp", h, Ch[:, t])
            if D is not None:
                y = y + (D[None] if D.dim() == 2 else D[None, :, None]) * x[:, t]
            if z is not None:
                y = y * F.silu(z[:, t])
            outs.append(y)
        return outs, h

    zero = torch.zeros(b, H, P, N, dtype=torch.float64)
    if cu is None:
        outs, h = scan(0, L, init if init is not None else zero)
        return torch.stack(outs, dim=1), h
    outs, fins = [], []
    for i in range(len(cu) - 1):
        o, h = scan(int(cu[i]), int(cu[i + 1]), init[i:i + 1] if init is not None else zero)
        outs += o
        fins.append(h[0])
    return torch.stack(outs, dim=1), torch.stack(fins)


def make(seed, b=2, L=37, H=4, P=8, G=2, N=6, Dper=False, nseq=None, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    ns = nseq if nseq is not None else b
    t = dict(x=r(b, L, H, P), dt=-3.0 + 2.5 * torch.rand(b, L, H, generator=g, dtype=torch.float64),
             A=-(0.5 + 3.0 * torch.rand(H, generator=g, dtype=torch.float64)),
             B=0.5 * r(b, L, G, N), C=0.5 * r(b, L, G, N),
             D=r(H, P) if Dper else r(H), z=r(b, L, H, P),
             dt_bias=-0.5 + torch.rand(H, generator=g, dtype=torch.float64),
             initial_states=0.5 * r(ns, H, P, N))
    # the inputs as the library sees them (rounded to dtype), in float64
    for k in ("x", "dt", "B", "C", "z"):
        t[k] = t[k].to(dtype).to(torch.float64)
    for k in ("A", "D", "dt_bias", "initial_states"):
        t[k] = t[k].float().double()
    return t


def rel(a, b):
    a, b = a.double(), b.double()
    return (torch.linalg.norm(a - b) / max(torch.linalg.norm(b), 1e-30)).item()


def run_both(t, kw, device, dtype, tol, ret_final=True, varlen=False, seq_idx=None, cu=None):
    # reference
    leaves = {k: v.clone().requires_grad_(True) for k, v in t.items()}
    out, fin = ref_scan(leaves["x"], leaves["dt"], leaves["A"], leaves["B"], leaves["C"], leaves["D"],
                        leaves["z"], leaves["dt_bias"], leaves["initial_states"], seq_idx, cu,
                        kw["dt_softplus"], kw["dt_limit"])
    g = torch.Generator().manual_seed(99)
    wout = torch.randn(out.shape, generator=g, dtype=torch.float64)
    wfin = torch.randn(fin.shape, generator=g, dtype=torch.float64)
    ((out * wout).sum() + (fin * wfin).sum()).backward()
    # seqfuse
    lo = {}
    for k, v in t.items():
        vt = v.to(dtype) if k in ("x", "dt", "B", "C", "z") else v.float()
        lo[k] = vt.to(device).requires_grad_(True)
    extra = {}
    if seq_idx is not None:
        extra["seq_idx"] = seq_idx.to(torch.int32).to(device)
    if cu is not None:
        extra["cu_seqlens"] = cu.to(torch.int32).to(device)
    res = seqfuse.mamba_chunk_scan_combined(
        lo["x"], lo["dt"], lo["A"], lo["B"], lo["C"], kw["chunk_size"], D=lo["D"], z=lo["z"],
        dt_bias=lo["dt_bias"], initial_states=lo["initial_states"], dt_softplus=kw["dt_softplus"],
        dt_limit=kw["dt_limit"], return_final_states=ret_final and not varlen,
        return_varlen_states=varlen, **extra)
    sout, sfin = res
    assert sout.requires_grad and sfin.requires_grad
    assert rel(sout.detach().cpu(), out.detach()) < tol
    ((sout.double() * wout.to(device)).sum() + (sfin.double() * wfin.to(device)).sum()).backward()
    for k in t:
        e = rel(lo[k].grad.cpu(), leaves[k].grad)
        assert e < tol, (k, e)
        assert lo[k].grad.dtype == lo[k].dtype


KW = dict(chunk_size=64, dt_softplus=True, dt_limit=(0.0, float("inf")))


def test_grads_cpu_f32_all_inputs():
    t = make(1)
    run_both(t, KW, "cpu", torch.float32, 1e-4)


def test_grads_cpu_f32_seq_idx_dt_limit_D_per_channel():
    t = make(2, b=2, L=45, H=2, P=4, G=1, N=8, Dper=True)
    seq_idx = torch.tensor([[0] * 10 + [1] * 20 + [2] * 15, [0] * 45])
    kw = dict(chunk_size=128, dt_softplus=True, dt_limit=(0.05, 0.3))
    run_both(t, kw, "cpu", torch.float32, 1e-4, seq_idx=seq_idx)


def test_grads_cpu_f32_cu_seqlens_varlen_states():
    cu = torch.tensor([0, 12, 13, 13, 40])
    t = make(3, b=1, L=40, H=4, P=4, G=4, N=4, nseq=4)
    kw = dict(chunk_size=64, dt_softplus=False, dt_limit=(0.0, float("inf")))
    t["dt"] = 0.01 + 0.2 * torch.rand(t["dt"].shape, dtype=torch.float64).float().double()
    run_both(t, kw, "cpu", torch.float32, 1e-4, varlen=True, cu=cu)


def test_no_grad_path_unchanged():
    t = make(4)
    x = t["x"].float().requires_grad_(True)
    with torch.no_grad():
        out = seqfuse.mamba_chunk_scan_combined(x, t["dt"].float(), t["A"].float(), t["B"].float(),
                                                t["C"].float(), 64)
    assert not out.requires_grad


def test_bwd_numpy_matches_autograd():
    t = make(5, b=1, L=20, H=2, P=4, G=1, N=4)
    a = {k: v.float().numpy() for k, v in t.items()}
    dout = np.random.default_rng(0).standard_normal(a["x"].shape).astype(np.float32)
    g = mamba_chunk_scan_combined_bwd(dout, a["x"], a["dt"], a["A"], a["B"], a["C"], 64, D=a["D"],
                                      z=a["z"], dt_bias=a["dt_bias"], initial_states=a["initial_states"],
                                      dt_softplus=True)
    lo = {k: torch.from_numpy(v).requires_grad_(True) for k, v in a.items()}
    out = seqfuse.mamba_chunk_scan_combined(lo["x"], lo["dt"], lo["A"], lo["B"], lo["C"], 64, D=lo["D"],
                                            z=lo["z"], dt_bias=lo["dt_bias"],
                                            initial_states=lo["initial_states"], dt_softplus=True)
    (out * torch.from_numpy(dout)).sum().backward()
    for k in t:
        np.testing.assert_array_equal(g["d" + k], lo[k].grad.numpy())


def test_strided_inputs_as_in_mamba2_layer():
    """x, z, B and C as column slices of a transposed conv1d output, as
    mamba_ssm's Mamba2 layer passes them (last dim strided): the same out and
    gradients as contiguous copies give."""
    g = torch.Generator().manual_seed(7)
    b, L, H, P, N = 2, 33, 2, 4, 8
    width = 2 * H * P + 2 * N
    base = torch.randn(b, width, L, generator=g).transpose(1, 2)           # (b, L, width), strides (., 1, L)
    dt = -2.0 + torch.rand(b, L, H, generator=g)
    A = -(0.5 + torch.rand(H, generator=g))
    D, bias = torch.randn(H, generator=g), torch.rand(H, generator=g) - 0.5
    dout = torch.randn(b, L, H, P, generator=g)

    def split(t):
        z, x, B, C = t.split([H * P, H * P, N, N], dim=-1)
        return x.reshape(b, L, H, P), z.reshape(b, L, H, P), B.reshape(b, L, 1, N), C.reshape(b, L, 1, N)

    outs, grads = [], []
    for strided in (True, False):
        leaf = base.detach().clone() if strided else base.detach().contiguous()
        leaf.requires_grad_(True)
        x, z, B, C = split(leaf)
        assert (x.stride(-1) != 1) == strided
        out = seqfuse.mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, z=z, dt_bias=bias, dt_softplus=True)
        (out * dout).sum().backward()
        outs.append(out.detach())
        grads.append(leaf.grad)
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
    # the numpy path takes a strided view too
    xs, zs, Bs, Cs = (v.detach().numpy() for v in split(base.detach()))
    assert xs.strides[-1] != xs.itemsize
    o = seqfuse.mamba_chunk_scan_combined(xs, dt.numpy(), A.numpy(), Bs, Cs, 64, D=D.numpy(), z=zs,
                                          dt_bias=bias.numpy(), dt_softplus=True)
    np.testing.assert_array_equal(o, outs[1].numpy())


def _cuda():
    if not torch.cuda.is_available() or not seqfuse.has_cuda():
        pytest.skip("no CUDA device (or a build without CUDA)")


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 2e-2)])
def test_grads_cuda(dtype, tol):
    _cuda()
    t = make(6, b=2, L=300, H=4, P=64, G=1, N=32, dtype=dtype)
    run_both(t, dict(chunk_size=128, dt_softplus=True, dt_limit=(0.0, float("inf"))), "cuda", dtype, tol)


def test_grads_cuda_seq_idx():
    _cuda()
    t = make(7, b=2, L=150, H=2, P=32, G=2, N=16)
    seq_idx = torch.tensor([[0] * 70 + [1] * 80, [0] * 1 + [1] * 149])
    run_both(t, dict(chunk_size=64, dt_softplus=True, dt_limit=(0.01, 0.2)), "cuda", torch.float32, 1e-3,
             seq_idx=seq_idx)


def test_grads_cuda_cu_seqlens():
    _cuda()
    cu = torch.tensor([0, 100, 101, 101, 230])
    t = make(8, b=1, L=230, H=4, P=16, G=2, N=16, nseq=4)
    run_both(t, dict(chunk_size=64, dt_softplus=True, dt_limit=(0.0, float("inf"))), "cuda", torch.float32,
             1e-3, varlen=True, cu=cu)
