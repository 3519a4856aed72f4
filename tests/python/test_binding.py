"""Tests of the Python binding (python/seqfuse) against independent numpy
float64 implementations written here: a sequential recurrence for the SSD
ops, a materialised softmax for attention, direct sums for the causal conv1d
and per-group RMS for the gated norm.  numpy only; torch and GPU tests
skip themselves when torch or a CUDA device is missing.

Run: SEQFUSE_LIB=build/libseqfuse.so python -m pytest -q tests/python
"""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO, "python"))

import seqfuse  # noqa: E402
from seqfuse import SeqfuseError  # noqa: E402
from seqfuse import _lib  # noqa: E402
from sf_testutil import (BACKENDS, DTYPES, TOL, _FakeCudaArray, _REPO, _raises, f64,  # noqa: E402
                         np_dtype, rel_err, rnd)

try:
    import torch
except ImportError:
    torch = None

HAS_GPU = (torch is not None and torch.cuda.is_available() and seqfuse.has_cuda())









# ------------------------------------------------------------------ references

def process_dt(dt, dt_bias, softplus, dt_limit):
    dt = f64(dt)
    if dt_bias is not None:
        dt = dt + f64(dt_bias)
    if softplus:
        dt = np.logaddexp(0.0, dt)
    return np.clip(dt, dt_limit[0], dt_limit[1])


def ref_ssd(x, dt, A, B, C, D=None, z=None, dt_bias=None, init=None, seq_idx=None, cu=None,
            softplus=False, dt_limit=(0.0, np.inf)):
    """Sequential recurrence h_t = exp(dt A) h + dt x B^T; y = h C + D x."""
    x, B, C, A = f64(x), f64(B), f64(C), f64(A)
    b, L, H, P = x.shape
    G, N = B.shape[2:]
    rep = H // G
    dt = process_dt(dt, dt_bias, softplus, dt_limit)
    # segments: (row, start, end, index of the initial state or None, index of the final state or None)
    segs = []
    if cu is not None:
        cu = [int(c) for c in cu]
        segs = [(0, cu[i], cu[i + 1], i, i) for i in range(len(cu) - 1)]
        nfinal = len(cu) - 1
    elif seq_idx is not None:
        nfinal = b
        for r in range(b):
            s = 0
            for t in range(1, L + 1):
                if t < L and seq_idx[r, t] == seq_idx[r, t - 1]:
                    continue
                segs.append((r, s, t, r if s == 0 else None, r if t == L else None))
                s = t
    else:
        nfinal = b
        segs = [(r, 0, L, r, r) for r in range(b)]
    y = np.zeros_like(x)
    final = np.zeros((nfinal, H, P, N))
    for r, s, e, ii, fi in segs:
        h = f64(init[ii]).copy() if (init is not None and ii is not None) else np.zeros((H, P, N))
        for t in range(s, e):
            dA = np.exp(np.minimum(dt[r, t] * A, 0.0))
            Bt = np.repeat(B[r, t], rep, axis=0)  # (H, N)
            Ct = np.repeat(C[r, t], rep, axis=0)
            h = dA[:, None, None] * h + (dt[r, t][:, None] * x[r, t])[:, :, None] * Bt[:, None, :]
            y[r, t] = np.einsum("hpn,hn->hp", h, Ct)
        if fi is not None:
            final[fi] = h
    if D is not None:
        D = f64(D)
        y += (D[:, None] if D.ndim == 1 else D) * x
    if z is not None:
        z = f64(z)
        y *= z / (1.0 + np.exp(-z))
    return y, final


def ref_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, idx=None, softplus=False,
             dt_limit=(0.0, np.inf)):
    state = f64(state).copy()
    x, B, C, A = f64(x), f64(B), f64(C), f64(A)
    b, H, P = x.shape
    rep = H // B.shape[1]
    dt = process_dt(dt, dt_bias, softplus, dt_limit)
    out = np.zeros_like(x)
    for i in range(b):
        s = i if idx is None else int(idx[i])
        if s < 0:
            continue
        dA = np.exp(np.minimum(dt[i] * A, 0.0))
        Bi = np.repeat(B[i], rep, axis=0)
        Ci = np.repeat(C[i], rep, axis=0)
        state[s] = dA[:, None, None] * state[s] + (dt[i][:, None] * x[i])[:, :, None] * Bi[:, None, :]
        out[i] = np.einsum("hpn,hn->hp", state[s], Ci)
        if D is not None:
            Dd = f64(D)
            out[i] += (Dd[:, None] if Dd.ndim == 1 else Dd) * x[i]
        if z is not None:
            zi = f64(z[i])
            out[i] *= zi / (1.0 + np.exp(-zi))
    return out, state


def ref_attn_one(q, k, v, scale, causal, window, softcap=0.0, slopes=None):
    """One sequence: q (Lq, H, d), k/v (Lk, Hkv, d) -> out (Lq, H, d), lse (H, Lq).
    softcap > 0: s = softcap tanh(s / softcap); slopes (H,): ALiBi, s -= slope
    |i + Lk - Lq - j| (flash_attn's attention_ref, in that order)."""
    q, k, v = f64(q), f64(k), f64(v)
    Lq, H, d = q.shape
    Lk, Hkv = k.shape[:2]
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    if Lq == 0:
        return np.zeros((0, H, d)), np.zeros((H, 0))
    kk = np.repeat(k, H // Hkv, axis=1)
    vv = np.repeat(v, H // Hkv, axis=1)
    s = np.einsum("qhd,khd->hqk", q, kk) * scale
    i = np.arange(Lq)[:, None] + Lk - Lq
    j = np.arange(Lk)[None, :]
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    if slopes is not None:
        s = s - f64(slopes)[:, None, None] * np.abs(i - j)[None]
    wl, wr = window
    if causal:
        wr = 0
    mask = np.ones((Lq, Lk), bool)
    if wl >= 0:
        mask &= j >= i - wl
    if wr >= 0:
        mask &= j <= i + wr
    s = np.where(mask[None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if Lk else np.full((H, Lq, 1), -np.inf)
    msafe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - msafe)
    l = p.sum(axis=-1, keepdims=True)
    o = np.einsum("hqk,khd->qhd", p / np.where(l > 0, l, 1.0), vv)
    with np.errstate(divide="ignore"):
        lse = np.where(l[..., 0] > 0, msafe[..., 0] + np.log(l[..., 0]), -np.inf)
    return o, lse


def ref_attn(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0, slopes=None):
    """slopes (H,) or (b, H)."""
    sl = [None if slopes is None else (slopes if np.ndim(slopes) == 1 else slopes[b])
          for b in range(q.shape[0])]
    outs, lses = zip(*[ref_attn_one(q[b], k[b], v[b], scale, causal, window, softcap, sl[b])
                       for b in range(q.shape[0])])
    return np.stack(outs), np.stack(lses)


# ------------------------------------------------------------------ data



def ssd_inputs(rng, dtype, b=2, L=150, H=4, P=16, G=2, N=8):
    return dict(
        x=rnd(rng, (b, L, H, P), dtype),
        dt=(rng.standard_normal((b, L, H)) * 0.5 - 1.0).astype(np_dtype(dtype)),
        A=-rng.uniform(0.5, 2.0, H).astype(np.float32),
        B=rnd(rng, (b, L, G, N), dtype),
        C=rnd(rng, (b, L, G, N), dtype),
    )




# ------------------------------------------------------------------ SSD forward

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_ssd_full(backend, dtype):
    rng = np.random.default_rng(1)
    a = ssd_inputs(rng, dtype)
    b, L, H, P = a["x"].shape
    N = a["B"].shape[3]
    D = rng.standard_normal(H).astype(np.float32)
    z = rnd(rng, (b, L, H, P), dtype)
    dt_bias = (rng.standard_normal(H) * 0.3).astype(np.float32)
    init = rng.standard_normal((b, H, P, N)).astype(np.float32)
    out, fin = seqfuse.mamba_chunk_scan_combined(
        a["x"], a["dt"], a["A"], a["B"], a["C"], 64, D=D, z=z, dt_bias=dt_bias,
        initial_states=init, dt_softplus=True, dt_limit=(0.01, 0.5), return_final_states=True,
        backend=backend)
    want, wfin = ref_ssd(**a, D=D, z=z, dt_bias=dt_bias, init=init, softplus=True,
                         dt_limit=(0.01, 0.5))
    assert isinstance(out, np.ndarray) and out.dtype == a["x"].dtype and out.shape == (b, L, H, P)
    assert fin.dtype == np.float32 and fin.shape == (b, H, P, N)
    assert rel_err(out, want) < TOL[dtype]
    assert rel_err(fin, wfin) < TOL[dtype]
    if backend == "auto":
        assert seqfuse.last_backend() == "cpu"


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("chunk", [64, 128, 256])
def test_ssd_plain_D_per_channel(backend, chunk):
    rng = np.random.default_rng(2)
    a = ssd_inputs(rng, "float32", b=1, L=300, H=4, P=8, G=1, N=16)
    D = rng.standard_normal((4, 8)).astype(np.float64)  # float64: converted to f32
    out = seqfuse.mamba_chunk_scan_combined(**a, chunk_size=chunk, D=D, backend=backend)
    want, _ = ref_ssd(**a, D=D.astype(np.float32))
    assert rel_err(out, want) < TOL["float32"]


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_ssd_seq_idx(backend):
    rng = np.random.default_rng(3)
    a = ssd_inputs(rng, "float32", b=2, L=130)
    seq_idx = np.zeros((2, 130), np.int64)  # int64: converted to int32
    seq_idx[0, 40:] = 1
    seq_idx[0, 100:] = 2
    seq_idx[1, 65:] = 5
    init = rng.standard_normal((2, 4, 16, 8)).astype(np.float32)
    out, fin = seqfuse.mamba_chunk_scan_combined(**a, chunk_size=64, seq_idx=seq_idx,
                                                 initial_states=init, return_final_states=True,
                                                 backend=backend)
    want, wfin = ref_ssd(**a, seq_idx=seq_idx, init=init)
    assert rel_err(out, want) < TOL["float32"]
    assert rel_err(fin, wfin) < TOL["float32"]


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_ssd_cu_seqlens(backend, dtype):
    rng = np.random.default_rng(4)
    a = ssd_inputs(rng, dtype, b=1, L=200)
    cu = np.array([0, 37, 37, 150, 200], np.int64)  # with an empty sequence
    init = rng.standard_normal((4, 4, 16, 8)).astype(np.float32)
    out, fin = seqfuse.mamba_chunk_scan_combined(**a, chunk_size=64, cu_seqlens=cu,
                                                 initial_states=init, return_final_states=True,
                                                 backend=backend)
    want, wfin = ref_ssd(**a, cu=cu, init=init)
    assert fin.shape == (4, 4, 16, 8)  # per sequence
    assert rel_err(out, want) < TOL[dtype]
    assert rel_err(fin, wfin) < TOL[dtype]
    # the empty sequence ends in its initial state
    np.testing.assert_allclose(fin[1], init[1], rtol=1e-6)


def test_ssd_varlen_states_like_mamba_ssm():
    """mamba_ssm callers pass seq_idx and cu_seqlens together and ask for
    return_varlen_states: (out, final_states (1,...), varlen_states)."""
    rng = np.random.default_rng(5)
    a = ssd_inputs(rng, "float32", b=1, L=120)
    cu = np.array([0, 50, 120], np.int32)
    seq_idx = np.repeat(np.arange(2), [50, 70])[None].astype(np.int32)
    out, fin, vstates = seqfuse.mamba_chunk_scan_combined(
        **a, chunk_size=64, seq_idx=seq_idx, cu_seqlens=cu, return_final_states=True,
        return_varlen_states=True)
    want, wfin = ref_ssd(**a, cu=cu)
    assert rel_err(out, want) < TOL["float32"]
    assert vstates.shape == (2, 4, 16, 8) and fin.shape == (1, 4, 16, 8)
    assert rel_err(vstates, wfin) < TOL["float32"]
    np.testing.assert_array_equal(fin[0], vstates[1])
    out2, v2 = seqfuse.mamba_chunk_scan_combined(**a, chunk_size=64, cu_seqlens=cu,
                                                 return_varlen_states=True)
    np.testing.assert_allclose(v2, vstates, rtol=1e-6, atol=1e-6)
    bad = seq_idx.copy()
    bad[0, 60:] = 7  # cuts at 50 and 60: disagrees with cu_seqlens
    with pytest.raises(SeqfuseError) as e:
        seqfuse.mamba_chunk_scan_combined(**a, chunk_size=64, seq_idx=bad, cu_seqlens=cu)
    assert e.value.status == seqfuse.SF_ERR_INVALID_ARG
    with pytest.raises(SeqfuseError) as e:
        seqfuse.mamba_chunk_scan_combined(**a, chunk_size=64, return_varlen_states=True)
    assert e.value.status == seqfuse.SF_ERR_INVALID_ARG


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_ssd_strided_views(backend):
    """Inputs as views of larger buffers (as after splitting zxbcdt): any
    outer strides, unit inner stride; dt with no unit stride at all."""
    rng = np.random.default_rng(6)
    b, L, H, P, G, N = 2, 100, 4, 16, 1, 8
    big = rng.standard_normal((b, L, H * P + 2 * G * N + 5)).astype(np.float32)
    x = big[:, :, :H * P].reshape(b, L, H, P)  # a view with row stride H*P+2GN+5
    Bv = big[:, :, H * P:H * P + G * N].reshape(b, L, G, N)
    Cv = big[:, :, H * P + G * N:H * P + 2 * G * N].reshape(b, L, G, N)
    assert not x.flags.c_contiguous and np.shares_memory(x, big)
    dt = (rng.standard_normal((b, H, L)) * 0.5 - 1).astype(np.float32).transpose(0, 2, 1)
    A = -rng.uniform(0.5, 2.0, H).astype(np.float32)
    out = seqfuse.mamba_chunk_scan_combined(x, dt, A, Bv, Cv, 64, dt_softplus=True,
                                            backend=backend)
    ref = seqfuse.mamba_chunk_scan_combined(*[np.ascontiguousarray(t) for t in (x, dt, A, Bv, Cv)],
                                            64, dt_softplus=True, backend=backend)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    want, _ = ref_ssd(x, dt, A, Bv, Cv, softplus=True)
    assert rel_err(out, want) < TOL["float32"]


# ------------------------------------------------------------------ SSD step

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_step_in_place(backend, dtype):
    rng = np.random.default_rng(7)
    nslots, b, H, P, G, N = 6, 3, 4, 16, 2, 8
    state = rng.standard_normal((nslots, H, P, N)).astype(np.float32)
    x = rnd(rng, (b, H, P), dtype)
    dt = (rng.standard_normal((b, H)) * 0.5 - 1).astype(np_dtype(dtype))
    A = -rng.uniform(0.5, 2.0, H).astype(np.float32)
    B = rnd(rng, (b, G, N), dtype)
    C = rnd(rng, (b, G, N), dtype)
    D = rng.standard_normal(H).astype(np.float32)
    z = rnd(rng, (b, H, P), dtype)
    dt_bias = rng.standard_normal(H).astype(np.float32) * 0.3
    idx = np.array([4, 0, 2], np.int64)  # int64: converted to int32
    before = state.copy()
    want, wstate = ref_step(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, idx=idx,
                            softplus=True)
    ptr = state.__array_interface__["data"][0]
    out = seqfuse.selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                         dt_softplus=True, state_batch_indices=idx,
                                         backend=backend)
    assert state.__array_interface__["data"][0] == ptr
    assert out.dtype == x.dtype and out.shape == (b, H, P)
    assert rel_err(out, want) < TOL[dtype]
    assert rel_err(state, wstate) < TOL[dtype]
    np.testing.assert_array_equal(state[[1, 3, 5]], before[[1, 3, 5]])  # untouched slots


STATE_DTYPES = ["float16"] + (["bfloat16"] if "bfloat16" in DTYPES else [])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("xdtype", [d for d in DTYPES if d != "float32"])
@pytest.mark.parametrize("sdtype", STATE_DTYPES)
def test_step_16bit_state_f32_BC(backend, xdtype, sdtype):
    """mamba_ssm's own test of selective_state_update: x, dt, z and the state
    in the model dtype, B, C, D in float32; vLLM keeps the state in the model
    dtype too.  The state is updated in f32 and stored rounded to its dtype."""
    rng = np.random.default_rng(17)
    nslots, b, H, P, G, N = 5, 3, 4, 16, 2, 32
    state = rnd(rng, (nslots, H, P, N), sdtype)
    x = rnd(rng, (b, H, P), xdtype)
    dt = (rng.standard_normal((b, H)) * 0.5 - 1).astype(np_dtype(xdtype))
    A = -rng.uniform(0.5, 2.0, H).astype(np.float32)
    B = rng.standard_normal((b, G, N)).astype(np.float32)
    C = rng.standard_normal((b, G, N)).astype(np.float32)
    D = rng.standard_normal(H).astype(np.float32)
    z = rnd(rng, (b, H, P), xdtype)
    dt_bias = rng.standard_normal(H).astype(np.float32) * 0.3
    idx = np.array([3, -1, 0], np.int32)
    before = state.copy()
    want, wstate = ref_step(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, idx=idx,
                            softplus=True)
    out = seqfuse.selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                         dt_softplus=True, state_batch_indices=idx,
                                         backend=backend)
    assert state.dtype == np_dtype(sdtype) and out.dtype == x.dtype
    assert rel_err(out, want) < TOL[xdtype]
    # the state's own rounding: half an ulp of its dtype, relative
    assert rel_err(state[[3, 0]], wstate[[3, 0]]) < (2e-3 if sdtype == "float16" else 8e-3)
    np.testing.assert_array_equal(f64(state[[1, 2, 4]]), f64(before[[1, 2, 4]]))  # untouched slots
    # the update did happen: the new state is far from the old one
    assert rel_err(state[[3, 0]], before[[3, 0]]) > 1e-2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "float32"])
def test_ssd_f32_dt_B_C(backend, dtype):
    """mamba_chunk_scan_combined with x, z in 16 bits and dt, B, C in float32."""
    rng = np.random.default_rng(18)
    a = ssd_inputs(rng, "float32", L=90)
    a["x"] = a["x"].astype(np_dtype(dtype))
    z = rnd(rng, a["x"].shape, dtype)
    H = a["x"].shape[2]
    D = rng.standard_normal(H).astype(np.float32)
    out, fin = seqfuse.mamba_chunk_scan_combined(a["x"], a["dt"], a["A"], a["B"], a["C"], 64, D=D, z=z,
                                                 dt_softplus=True, return_final_states=True,
                                                 backend=backend)
    want, wfin = ref_ssd(**a, D=D, z=z, softplus=True)
    assert out.dtype == a["x"].dtype
    assert rel_err(out, want) < TOL[dtype]
    assert rel_err(fin, wfin) < TOL[dtype]


def test_step_padding_and_no_index():
    rng = np.random.default_rng(8)
    H, P, N = 2, 8, 4
    state = rng.standard_normal((3, H, P, N)).astype(np.float32)
    x = rnd(rng, (3, H, P))
    dt = np.full((3, H), 0.1, np.float32)
    A = np.array([-1.0, -0.5], np.float32)
    B = rnd(rng, (3, 1, N))
    C = rnd(rng, (3, 1, N))
    before = state.copy()
    out = seqfuse.selective_state_update(state, x, dt, A, B, C,
                                         state_batch_indices=np.array([-1, 2, 0], np.int32))
    np.testing.assert_array_equal(out[0], 0)
    np.testing.assert_array_equal(state[1], before[1])
    # without indices sequence i owns slot i
    s2 = before.copy()
    out2 = seqfuse.selective_state_update(s2, x, dt, A, B, C)
    want, wstate = ref_step(before, x, dt, A, B, C)
    assert rel_err(out2, want) < TOL["float32"] and rel_err(s2, wstate) < TOL["float32"]


def test_step_mamba_ssm_broadcast_forms():
    """Mamba2 layers call selective_state_update with A (H, P, N), dt (b, H, P)
    and dt_bias/D (H, P) broadcast with stride 0 (mamba_ssm's tied form)."""
    rng = np.random.default_rng(9)
    b, H, P, N = 2, 4, 8, 16
    state = rng.standard_normal((b, H, P, N)).astype(np.float32)
    s2 = state.copy()
    x = rnd(rng, (b, H, P))
    dt = rnd(rng, (b, H), scale=0.3)
    A = -rng.uniform(0.5, 2, H).astype(np.float32)
    dtb = rng.standard_normal(H).astype(np.float32)
    D = rng.standard_normal(H).astype(np.float32)
    B = rnd(rng, (b, 1, N))
    C = rnd(rng, (b, 1, N))
    out1 = seqfuse.selective_state_update(state, x, dt, A, B, C, D=D, dt_bias=dtb,
                                          dt_softplus=True)
    out2 = seqfuse.selective_state_update(
        s2, x, np.broadcast_to(dt[:, :, None], (b, H, P)),
        np.broadcast_to(A[:, None, None], (H, P, N)), B, C,
        D=np.broadcast_to(D[:, None], (H, P)), dt_bias=np.broadcast_to(dtb[:, None], (H, P)),
        dt_softplus=True)
    np.testing.assert_allclose(out1, out2, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(state, s2, rtol=1e-6, atol=1e-6)
    with pytest.raises(SeqfuseError) as e:  # truly per-channel A is beyond the C API
        seqfuse.selective_state_update(s2, x, dt, -np.ones((H, P, N), np.float32), B, C)
    assert e.value.status == seqfuse.SF_ERR_UNSUPPORTED


# ------------------------------------------------------------------ attention

ATTN_CASES = {
    # name: (b, Lq, Lk, H, Hkv, d, causal, window)
    "mha": (2, 33, 33, 4, 4, 32, False, (-1, -1)),
    "causal_square": (2, 40, 40, 4, 4, 64, True, (-1, -1)),
    "causal_lq_lt_lk": (1, 7, 50, 4, 2, 32, True, (-1, -1)),
    "causal_lq_gt_lk": (1, 50, 20, 4, 4, 16, True, (-1, -1)),  # first rows see nothing
    "window": (2, 45, 45, 6, 2, 40, False, (8, 4)),
    "window_causal": (1, 30, 60, 4, 1, 24, True, (16, -1)),
    "gqa_d256": (1, 17, 23, 8, 2, 256, False, (-1, -1)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(ATTN_CASES))
def test_attn(case, dtype, backend):
    b, Lq, Lk, H, Hkv, d, causal, window = ATTN_CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    q = rnd(rng, (b, Lq, H, d), dtype)
    k = rnd(rng, (b, Lk, Hkv, d), dtype)
    v = rnd(rng, (b, Lk, Hkv, d), dtype)
    out, lse = seqfuse.flash_attn_func(q, k, v, causal=causal, window_size=window,
                                       return_lse=True, backend=backend)
    want, wlse = ref_attn(q, k, v, None, causal, window)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == (b, H, Lq)
    assert rel_err(out, want) < TOL[dtype]
    np.testing.assert_array_equal(np.isinf(lse), np.isinf(wlse))
    fin = np.isfinite(wlse)
    np.testing.assert_allclose(lse[fin], wlse[fin], rtol=1e-4, atol=1e-4)
    if case == "causal_lq_gt_lk":  # a row that sees no key: zeros, -inf
        assert np.all(f64(out)[:, :30] == 0) and np.all(lse[:, :, :30] == -np.inf)


# (b, Lq, Lk, H, Hkv, d, causal, window, softcap, alibi: None, "h" or "bh")
MOD_CASES = {
    "softcap_d59": (2, 37, 37, 4, 2, 59, False, (-1, -1), 5.0, None),
    "alibi_causal_d111": (1, 45, 60, 4, 4, 111, True, (-1, -1), 0.0, "h"),
    "both_window_d40": (2, 30, 30, 6, 3, 40, False, (7, 5), 2.0, "bh"),
    "odd_d1": (1, 9, 13, 2, 1, 1, True, (-1, -1), 0.0, None),
    "odd_d250_cap": (1, 20, 20, 2, 2, 250, False, (-1, -1), 30.0, "h"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(MOD_CASES))
def test_attn_softcap_alibi_odd_dims(case, dtype, backend):
    """softcap, ALiBi (per head and per batch x head) and head dims that are
    not multiples of 8, against the float64 formula of flash_attn's tests."""
    b, Lq, Lk, H, Hkv, d, causal, window, cap, al = MOD_CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    q = rnd(rng, (b, Lq, H, d), dtype) * 3  # scores large enough for the cap to bite
    k = rnd(rng, (b, Lk, Hkv, d), dtype)
    v = rnd(rng, (b, Lk, Hkv, d), dtype)
    slopes = None
    if al == "h":
        slopes = rng.uniform(0.05, 0.5, H).astype(np.float32)
    elif al == "bh":
        slopes = rng.uniform(0.05, 0.5, (b, H)).astype(np.float32)
    out, lse = seqfuse.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=cap,
                                       alibi_slopes=slopes, return_lse=True, backend=backend)
    want, wlse = ref_attn(q, k, v, None, causal, window, cap, slopes)
    assert rel_err(out, want) < TOL[dtype]
    np.testing.assert_array_equal(np.isinf(lse), np.isinf(wlse))
    fin = np.isfinite(wlse)
    np.testing.assert_allclose(lse[fin], wlse[fin], rtol=1e-4, atol=1e-4)
    # the same through the varlen entry (ALiBi distances per sequence)
    if al != "bh":
        cu = np.arange(b + 1, dtype=np.int32)
        o2 = seqfuse.flash_attn_varlen_func(q.reshape(b * Lq, H, d), k.reshape(b * Lk, Hkv, d),
                                            v.reshape(b * Lk, Hkv, d), cu * Lq, cu * Lk,
                                            causal=causal, window_size=window, softcap=cap,
                                            alibi_slopes=slopes, backend=backend)
        assert rel_err(o2.reshape(out.shape), want) < TOL[dtype]


def test_attn_softcap_alibi_errors():
    rng = np.random.default_rng(5)
    q = rnd(rng, (2, 6, 4, 8))
    for cap in (-1.0, float("inf"), float("nan"), "3", True):
        _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.flash_attn_func, q, q, q, softcap=cap)
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.flash_attn_func, q, q, q, alibi_slopes=np.ones(3, np.float32))
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.flash_attn_func, q, q, q, alibi_slopes=np.ones((3, 4), np.float32))
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.flash_attn_func, q, q, q,
            alibi_slopes=np.array([0.1, np.nan, 0.1, 0.1], np.float32))


def test_attn_scale_and_out_only():
    rng = np.random.default_rng(11)
    q, k, v = (rnd(rng, (1, 20, 2, 16)) for _ in range(3))
    out = seqfuse.flash_attn_func(q, k, v, softmax_scale=0.3)
    want, _ = ref_attn(q, k, v, 0.3)
    assert isinstance(out, np.ndarray) and rel_err(out, want) < TOL["float32"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (5, 3))])
def test_attn_varlen(backend, dtype, causal, window):
    rng = np.random.default_rng(12)
    lq = [5, 0, 17, 33, 9]
    lk = [9, 4, 17, 20, 0]
    H, Hkv, d = 6, 3, 32
    q = rnd(rng, (sum(lq), H, d), dtype)
    k = rnd(rng, (sum(lk), Hkv, d), dtype)
    v = rnd(rng, (sum(lk), Hkv, d), dtype)
    cuq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int64)  # int64: converted
    cuk = list(np.concatenate([[0], np.cumsum(lk)]).tolist())   # a plain list works too
    out, lse = seqfuse.flash_attn_varlen_func(q, k, v, cuq, cuk, max(lq), max(lk),
                                              causal=causal, window_size=window,
                                              return_lse=True, backend=backend)
    assert out.shape == q.shape and lse.shape == (H, sum(lq))
    for i in range(len(lq)):
        qs = slice(cuq[i], cuq[i + 1])
        ks = slice(cuk[i], cuk[i + 1])
        o, l = ref_attn_one(q[qs], k[ks], v[ks], None, causal, window)
        if lq[i] == 0:
            continue
        if np.linalg.norm(o) > 0:
            assert rel_err(out[qs], o) < TOL[dtype], i
        else:
            assert np.all(f64(out[qs]) == 0)
        np.testing.assert_array_equal(np.isinf(lse[:, qs]), np.isinf(l))
        f = np.isfinite(l)
        np.testing.assert_allclose(lse[:, qs][f], l[f], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ errors



def test_error_ssd_shape_mismatch():
    rng = np.random.default_rng(13)
    a = ssd_inputs(rng, "float32", b=1, L=70)
    a["B"] = a["B"][:, :69]
    err = _raises(seqfuse.SF_ERR_SHAPE, seqfuse.mamba_chunk_scan_combined, chunk_size=64, **a)
    assert "B" in err.detail and "sf_ssd_fwd" in str(err)
    a = ssd_inputs(rng, "float32", b=1, L=70, H=3, G=2)  # ngroups does not divide nheads
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.mamba_chunk_scan_combined, chunk_size=64, **a)


def test_error_bad_dtypes():
    rng = np.random.default_rng(14)
    a = ssd_inputs(rng, "float32", b=1, L=70)
    a64 = dict(a, x=a["x"].astype(np.float64))  # no float64 in seqfuse: caught by the binding
    err = _raises(seqfuse.SF_ERR_DTYPE, seqfuse.mamba_chunk_scan_combined, chunk_size=64, **a64)
    assert "float64" in str(err)
    amix = dict(a, B=a["B"].astype(np.float16))  # dtypes disagree: caught by the library
    err = _raises(seqfuse.SF_ERR_DTYPE, seqfuse.mamba_chunk_scan_combined, chunk_size=64, **amix)
    assert "B" in err.detail
    q = rnd(rng, (1, 4, 2, 8))
    _raises(seqfuse.SF_ERR_DTYPE, seqfuse.flash_attn_func, q, q.astype(np.float16), q)
    _raises(seqfuse.SF_ERR_DTYPE, seqfuse.flash_attn_func, q.astype(np.int32), q, q)


def test_error_chunk_size():
    a = ssd_inputs(np.random.default_rng(15), "float32", b=1, L=70)
    err = _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.mamba_chunk_scan_combined,
                  chunk_size=100, **a)
    assert "chunk_size" in err.detail


def test_error_head_dim_300():
    rng = np.random.default_rng(16)
    q = rnd(rng, (1, 4, 2, 300))
    err = _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.flash_attn_func, q, q, q)
    assert "300" in err.detail


def test_error_cuda_backend_on_host_arrays():
    """backend="cuda" with host arrays fails clearly, GPU present or not."""
    rng = np.random.default_rng(17)
    q = rnd(rng, (1, 4, 2, 8))
    err = _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.flash_attn_func, q, q, q, backend="cuda")
    assert "cuda" in str(err).lower() and "host" in str(err)
    a = ssd_inputs(rng, "float32", b=1, L=10)
    _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.mamba_chunk_scan_combined, chunk_size=64,
            backend="cuda", **a)


def test_error_misc():
    rng = np.random.default_rng(18)
    q = rnd(rng, (1, 4, 6, 8))
    kv = rnd(rng, (1, 4, 4, 8))  # 4 kv heads do not divide 6
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.flash_attn_func, q, kv, kv)
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.flash_attn_func, q, q, q, backend="gpu")
    _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.flash_attn_func, q, q, q, dropout_p=0.1)
    # inner stride not 1: refused by the library
    qs = rnd(rng, (1, 4, 6, 16))[..., ::2]
    _raises(seqfuse.SF_ERR_STRIDE, seqfuse.flash_attn_func, qs, qs, qs)
    # a stride that is not a whole number of elements: refused by the binding
    raw = np.zeros(4096, np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw.view(np.float32), (1, 4, 6, 8), (800, 196, 34, 4))
    err = _raises(seqfuse.SF_ERR_STRIDE, seqfuse.flash_attn_func, odd, q, q)
    assert "34 bytes" in err.detail
    # varlen: cu_seqlens not ending at the packed length
    qv = rnd(rng, (10, 2, 8))
    _raises(seqfuse.SF_ERR_INDEX, seqfuse.flash_attn_varlen_func, qv, qv, qv, [0, 4, 9],
            [0, 4, 10])
    # step: slot out of range, slot used twice
    st = np.zeros((2, 2, 8, 4), np.float32)
    x = rnd(rng, (2, 2, 8))
    dt = rnd(rng, (2, 2))
    A = -np.ones(2, np.float32)
    B = rnd(rng, (2, 1, 4))
    _raises(seqfuse.SF_ERR_INDEX, seqfuse.selective_state_update, st, x, dt, A, B, B,
            state_batch_indices=[0, 2])
    _raises(seqfuse.SF_ERR_INDEX, seqfuse.selective_state_update, st, x, dt, A, B, B,
            state_batch_indices=[1, 1])
    ro = st.copy()
    ro.flags.writeable = False
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.selective_state_update, ro, x, dt, A, B, B)
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.flash_attn_func, [[1.0]], q, q)


# ------------------------------------------------------------------ helpers, ABI

def test_helpers():
    assert seqfuse.version() == seqfuse.__version__
    assert seqfuse.version().count(".") == 2
    n = seqfuse.cuda_device_count()
    assert n >= 0
    assert seqfuse.has_cuda() == (seqfuse.has_cuda_build() and n > 0)
    if n == 0:
        with pytest.raises(SeqfuseError) as e:
            seqfuse.cuda_device_name(0)
        assert e.value.status == seqfuse.SF_ERR_NO_DEVICE
    with pytest.raises(SeqfuseError) as e:
        seqfuse.set_num_threads(0)
    assert e.value.status == seqfuse.SF_ERR_INVALID_ARG
    rng = np.random.default_rng(19)
    q, k, v = (rnd(rng, (2, 64, 4, 32)) for _ in range(3))
    old = seqfuse.get_num_threads()
    try:
        seqfuse.set_num_threads(1)
        assert seqfuse.get_num_threads() == 1
        one = seqfuse.flash_attn_func(q, k, v, causal=True, backend="cpu")
        seqfuse.set_num_threads(2)
        two = seqfuse.flash_attn_func(q, k, v, causal=True, backend="cpu")
    finally:
        seqfuse.set_num_threads(old)
    np.testing.assert_allclose(one, two, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["ssd_fwd", "ssd_step", "attn_fwd"])
def test_params_struct_layout(name):
    """The ctypes structs have the C sizes and field offsets: the library's
    *_params_init writes exactly sizeof(struct) bytes and sets the last
    fields where ctypes expects them."""
    S = getattr(_lib, "sf_%s_params" % name)
    init = getattr(_lib, "sf_%s_params_init" % name)
    n = ctypes.sizeof(S)
    buf = (ctypes.c_ubyte * (n + 64))(*([0xAB] * (n + 64)))
    init(ctypes.cast(buf, ctypes.POINTER(S)))
    assert bytes(buf[n:]) == b"\xab" * 64, "the C struct is larger than the ctypes one"
    p = S.from_buffer(buf)
    assert p.backend == _lib.SF_BACKEND_AUTO
    if name == "ssd_fwd":
        assert p.chunk_size == 256 and p.dt_min == 0.0 and p.dt_max == float("inf")
    elif name == "ssd_step":
        assert p.dt_min == 0.0 and p.dt_max == float("inf")
    else:
        assert p.window_left == -1 and p.window_right == -1 and p.softmax_scale == 0.0


def test_tensor_struct_layout():
    shape = (ctypes.c_int64 * 3)(2, 3, 5)
    t = _lib.sf_tensor_contiguous(ctypes.c_void_p(64), _lib.SF_F16, -1, 3, shape)
    assert (t.data, t.dtype, t.device, t.rank) == (64, _lib.SF_F16, -1, 3)
    assert list(t.shape[:3]) == [2, 3, 5] and list(t.stride[:3]) == [15, 5, 1]
    assert _lib.sf_tensor_numel(ctypes.byref(t)) == 30




def test_cuda_array_interface_descriptor():
    """Objects with __cuda_array_interface__ become sf_tensor with element
    strides (C-contiguous when the interface gives none)."""
    from seqfuse import _core
    c = _core.Call("t", np.zeros(1, np.float32), "x")
    t = c.tensor(_FakeCudaArray((2, 3, 4), "<f2", None, 4096), "a")
    assert (t.data, t.dtype, t.rank) == (4096, _lib.SF_F16, 3)
    assert list(t.shape[:3]) == [2, 3, 4] and list(t.stride[:3]) == [12, 4, 1]
    t = c.tensor(_FakeCudaArray((2, 3), "<f4", (40, 4), 8192), "a")
    assert list(t.stride[:2]) == [10, 1]
    with pytest.raises(SeqfuseError) as e:
        c.tensor(_FakeCudaArray((2, 3), "<f8", None, 4096), "a")
    assert e.value.status == seqfuse.SF_ERR_DTYPE
    with pytest.raises(SeqfuseError) as e:
        c.tensor(_FakeCudaArray((2, 3), "<f4", (40, 6), 4096), "a")
    assert e.value.status == seqfuse.SF_ERR_STRIDE


def test_threads_use_their_own_contexts():
    """ctypes drops the GIL during the call; each thread has its own context."""
    import threading
    rng = np.random.default_rng(22)
    qs = [rnd(rng, (1, 48, 4, 32)) for _ in range(4)]
    want = [seqfuse.flash_attn_func(q, q, q, causal=True) for q in qs]
    got = [None] * 4
    errors = []

    def work(i):
        try:
            for _ in range(5):
                got[i] = seqfuse.flash_attn_func(qs[i], qs[i], qs[i], causal=True)
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_missing_library_message():
    env = dict(os.environ, SEQFUSE_LIB="/nonexistent/libseqfuse.so",
               PYTHONPATH=os.path.join(_REPO, "python"))
    r = subprocess.run([sys.executable, "-c", "import seqfuse"], env=env, capture_output=True,
                       text=True)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "SEQFUSE_LIB" in r.stderr


# ------------------------------------------------------------------ torch

@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_cpu_tensors():
    rng = np.random.default_rng(20)
    a = ssd_inputs(rng, "float32", b=1, L=70)
    ref = seqfuse.mamba_chunk_scan_combined(chunk_size=64, **a)
    ta = {k: torch.from_numpy(v) for k, v in a.items()}
    out = seqfuse.mamba_chunk_scan_combined(chunk_size=64, **ta)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-6)
    q = torch.randn(1, 9, 4, 16, dtype=torch.bfloat16)
    o = seqfuse.flash_attn_func(q, q, q, causal=True)
    want, _ = ref_attn(q.float().numpy(), q.float().numpy(), q.float().numpy(), None, True)
    assert o.dtype == torch.bfloat16 and rel_err(o.float().numpy(), want) < TOL["bfloat16"]
    # varlen with int64 cu_seqlens tensors, GQA, lse
    qv, kv = torch.randn(30, 4, 16), torch.randn(25, 2, 16)
    cq, ck = torch.tensor([0, 10, 30]), torch.tensor([0, 5, 25])
    ov, lv = seqfuse.flash_attn_varlen_func(qv, kv, kv, cq, ck, causal=True, return_lse=True)
    assert isinstance(lv, torch.Tensor) and lv.shape == (4, 30)
    w0, _ = ref_attn_one(qv[:10].numpy(), kv[:5].numpy(), kv[:5].numpy(), None, True, (-1, -1))
    assert rel_err(ov[:10].numpy(), w0) < TOL["float32"]
    # step with mamba_ssm's expand()ed forms and bf16 side tensors (cast to f32)
    H, P, N = 4, 8, 16
    state = torch.randn(3, H, P, N)
    s2 = state.clone()
    x, dt = torch.randn(2, H, P), torch.rand(2, H) * 0.2
    A = -torch.rand(H) - 0.5
    B = torch.randn(2, 1, N)
    D = torch.randn(H).to(torch.bfloat16)
    idx = torch.tensor([2, 0])
    o1 = seqfuse.selective_state_update(state, x, dt, A, B, B, D=D, state_batch_indices=idx)
    o2 = seqfuse.selective_state_update(s2, x, dt[:, :, None].expand(2, H, P),
                                        A[:, None, None].expand(H, P, N), B, B,
                                        D=D.float()[:, None].expand(H, P),
                                        state_batch_indices=idx.to(torch.int32))
    torch.testing.assert_close(o1, o2)
    torch.testing.assert_close(state, s2)
    # SSD with cu_seqlens and return_varlen_states (.clone() of the last state)
    a1 = {k: torch.from_numpy(v[:1] if k != "A" else v) for k, v in a.items()}
    out, fin, vs = seqfuse.mamba_chunk_scan_combined(
        chunk_size=64, cu_seqlens=torch.tensor([0, 30, 70]), return_final_states=True,
        return_varlen_states=True, **a1)
    want, wfin = ref_ssd(**{k: v.numpy() for k, v in a1.items()}, cu=[0, 30, 70])
    assert rel_err(out.numpy(), want) < TOL["float32"] and rel_err(vs.numpy(), wfin) < 1e-4
    assert fin.shape == (1,) + tuple(vs.shape[1:]) and torch.equal(fin[0], vs[1])


@pytest.mark.skipif(not HAS_GPU, reason="needs torch with CUDA and a CUDA build of seqfuse")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_torch_cuda_attn(dtype):
    tdt = getattr(torch, dtype)
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(2, 100, 8, 64, generator=g).to(tdt)
    k = torch.randn(2, 130, 2, 64, generator=g).to(tdt)
    v = torch.randn(2, 130, 2, 64, generator=g).to(tdt)
    want, wlse = ref_attn(q.float().numpy(), k.float().numpy(), v.float().numpy(), None, True)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # runs on torch's current stream
        qd, kd, vd = q.cuda(), k.cuda(), v.cuda()
        out, lse = seqfuse.flash_attn_func(qd, kd, vd, causal=True, return_lse=True)
    s.synchronize()
    assert out.device == qd.device and out.dtype == tdt and lse.shape == (2, 8, 100)
    assert rel_err(out.float().cpu().numpy(), want) < 2e-2
    np.testing.assert_allclose(lse.cpu().numpy(), wlse, rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(not HAS_GPU, reason="needs torch with CUDA and a CUDA build of seqfuse")
@pytest.mark.parametrize("case", list(MOD_CASES))
def test_torch_cuda_softcap_alibi_odd_dims(case):
    b, Lq, Lk, H, Hkv, d, causal, window, cap, al = MOD_CASES[case]
    g = torch.Generator(device="cpu").manual_seed(1)
    q = (torch.randn(b, Lq, H, d, generator=g) * 3).to(torch.bfloat16)
    k = torch.randn(b, Lk, Hkv, d, generator=g).to(torch.bfloat16)
    v = torch.randn(b, Lk, Hkv, d, generator=g).to(torch.bfloat16)
    slopes = None
    if al:
        slopes = torch.rand((H,) if al == "h" else (b, H), generator=g) * 0.45 + 0.05
    want, wlse = ref_attn(q.float().numpy(), k.float().numpy(), v.float().numpy(), None, causal, window,
                          cap, None if slopes is None else slopes.numpy())
    out, lse = seqfuse.flash_attn_func(q.cuda(), k.cuda(), v.cuda(), causal=causal, window_size=window,
                                       softcap=cap, alibi_slopes=None if slopes is None else slopes.cuda(),
                                       return_lse=True)
    assert rel_err(out.float().cpu().numpy(), want) < 2e-2
    fin = np.isfinite(wlse)
    np.testing.assert_allclose(lse.cpu().numpy()[fin], wlse[fin], rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(not HAS_GPU, reason="needs torch with CUDA and a CUDA build of seqfuse")
def test_torch_cuda_ssd_and_step():
    rng = np.random.default_rng(21)
    a = ssd_inputs(rng, "float32", b=2, L=300, H=4, P=64, G=1, N=64)
    cu = torch.tensor([0, 100, 300], dtype=torch.int64)
    ta = {k: torch.from_numpy(v).cuda() for k, v in a.items()}
    out, fin = seqfuse.mamba_chunk_scan_combined(chunk_size=128, return_final_states=True, **ta)
    want, wfin = ref_ssd(**a)
    assert rel_err(out.cpu().numpy(), want) < 1e-2 and rel_err(fin.cpu().numpy(), wfin) < 1e-2
    a1 = {k: (v[:1] if k != "A" else v) for k, v in a.items()}
    ta1 = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in a1.items()}
    out, fin = seqfuse.mamba_chunk_scan_combined(chunk_size=128, cu_seqlens=cu.cuda(),
                                                 seq_idx=None, return_final_states=True, **ta1)
    want, wfin = ref_ssd(**a1, cu=cu.numpy())
    assert rel_err(out.cpu().numpy(), want) < 1e-2 and rel_err(fin.cpu().numpy(), wfin) < 1e-2
    state = torch.randn(4, 4, 64, 64).cuda()
    x = torch.randn(2, 4, 64).cuda()
    dt = torch.rand(2, 4).cuda() * 0.1
    B = torch.randn(2, 1, 64).cuda()
    idx = torch.tensor([3, 1]).cuda()
    want, wstate = ref_step(state.cpu().numpy(), x.cpu().numpy(), dt.cpu().numpy(),
                            a["A"], B.cpu().numpy(), B.cpu().numpy(), idx=idx.cpu().numpy())
    out = seqfuse.selective_state_update(state, x, dt, torch.from_numpy(a["A"]).cuda(), B, B,
                                         state_batch_indices=idx)
    assert rel_err(out.cpu().numpy(), want) < 1e-3
    assert rel_err(state.cpu().numpy(), wstate) < 1e-3
