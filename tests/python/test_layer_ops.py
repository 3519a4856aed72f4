"""Tests of the Python binding's layer ops (causal conv1d, gated RMSNorm),
split from test_binding.py; tests of the Python binding (python/seqfuse) against independent numpy
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
                         rel_err, rnd)

try:
    import torch
except ImportError:
    torch = None

HAS_GPU = (torch is not None and torch.cuda.is_available() and seqfuse.has_cuda())


# ------------------------------------------------------------------ layer ops: conv1d, RMSNorm
# References in float64, channels-first like the causal_conv1d package:
# x (b, dim, L), weight (dim, W), states (n, dim, W-1) oldest first.

def silu64(v):
    return v / (1.0 + np.exp(-v))


def ref_conv1d(x, w, bias=None, init=None, silu=False, cu=None):
    x, w = f64(x), f64(w)
    b, dim, L = x.shape
    W = w.shape[1]
    if cu is not None:
        cu = [int(c) for c in cu]
        segs = [(0, cu[i], cu[i + 1], i) for i in range(len(cu) - 1)]
    else:
        segs = [(r, 0, L, r) for r in range(b)]
    out = np.zeros_like(x)
    final = np.zeros((len(segs), dim, W - 1))
    for r, s, e, i in segs:
        prev = f64(init[i]) if init is not None else np.zeros((dim, W - 1))
        seq = np.concatenate([prev, x[r, :, s:e]], axis=1)  # (dim, W-1 + len)
        for t in range(e - s):
            v = np.sum(w * seq[:, t:t + W], axis=1)
            if bias is not None:
                v = v + f64(bias)
            out[r, :, s + t] = silu64(v) if silu else v
        final[i] = seq[:, seq.shape[1] - (W - 1):]
    return out, final


def ref_conv1d_update(state, x, w, bias=None, silu=False, idx=None):
    state, x, w = f64(state).copy(), f64(x), f64(w)
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        s = i if idx is None else int(idx[i])
        if s < 0:
            continue
        win = np.concatenate([state[s], x[i][:, None]], axis=1)
        v = np.sum(w * win, axis=1)
        if bias is not None:
            v = v + f64(bias)
        out[i] = silu64(v) if silu else v
        state[s] = win[:, 1:]
    return out, state


def ref_rmsnorm(x, w, z=None, eps=1e-6, group=None, norm_before_gate=True):
    x = f64(x)
    shp = x.shape
    D = shp[-1]
    g = D if group is None else group
    h = x.reshape(-1, D)
    zz = None if z is None else f64(z).reshape(-1, D)
    if zz is not None and not norm_before_gate:
        h = h * silu64(zz)
    hg = h.reshape(h.shape[0], D // g, g)
    rstd = 1.0 / np.sqrt(np.mean(hg * hg, axis=-1, keepdims=True) + eps)
    out = (hg * rstd).reshape(h.shape) * f64(w)
    if zz is not None and norm_before_gate:
        out = out * silu64(zz)
    return out.reshape(shp)


def channels_last(a):
    """(b, dim, L) with stride 1 along dim, as causal_conv1d's fast path wants."""
    return np.ascontiguousarray(a.transpose(0, 2, 1)).transpose(0, 2, 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("bias_silu", [False, True])
def test_conv1d_fwd(backend, dtype, width, bias_silu):
    rng = np.random.default_rng(30 + width)
    b, dim, L = 2, 24, 37
    x = channels_last(rnd(rng, (b, dim, L), dtype))
    w = rng.standard_normal((dim, width)).astype(np.float32) * 0.5
    bias = rng.standard_normal(dim).astype(np.float32) if bias_silu else None
    act = "silu" if bias_silu else None
    out = seqfuse.causal_conv1d_fn(x, w, bias, activation=act, backend=backend)
    want, _ = ref_conv1d(x, w, bias, silu=bias_silu)
    assert isinstance(out, np.ndarray) and out.dtype == x.dtype and out.shape == (b, dim, L)
    assert out.strides[1] == out.itemsize  # channels-last in, channels-last out (no copy)
    assert rel_err(out, want) < TOL[dtype]
    if backend == "auto":
        assert seqfuse.last_backend() == "cpu"


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [2, 3, 4])
def test_conv1d_states_and_layouts(backend, dtype, width):
    """initial_states in, final_states out (x's dtype, as causal_conv1d);
    a contiguous (b, dim, L) x is copied and out comes back contiguous;
    "swish" is SiLU."""
    rng = np.random.default_rng(40 + width)
    b, dim, L = 3, 16, 9
    x = rnd(rng, (b, dim, L), dtype)  # contiguous: stride 1 along L
    w = rng.standard_normal((dim, width)).astype(np.float32)
    bias = rng.standard_normal(dim).astype(np.float32)
    init = rng.standard_normal((b, dim, width - 1)).astype(np.float32)
    out, fin = seqfuse.causal_conv1d_fn(x, w, bias, initial_states=init,
                                        return_final_states=True, activation="swish",
                                        backend=backend)
    want, wfin = ref_conv1d(x, w, bias, init=init, silu=True)
    assert out.flags.c_contiguous and out.dtype == x.dtype
    assert fin.shape == (b, dim, width - 1) and fin.dtype == x.dtype
    assert rel_err(out, want) < TOL[dtype]
    np.testing.assert_array_equal(fin, x[:, :, L - (width - 1):])  # the last inputs, exactly
    # the same through the channels-last fast path, and initial_states in x's dtype
    init_x = init.astype(x.dtype)
    out2, fin2 = seqfuse.causal_conv1d_fn(channels_last(x), w, bias, initial_states=init_x,
                                          return_final_states=True, activation="silu",
                                          backend=backend)
    want2, _ = ref_conv1d(x, w, bias, init=init_x, silu=True)
    assert rel_err(out2, want2) < TOL[dtype]
    np.testing.assert_array_equal(fin2, fin)
    # final_states_out: float32 written directly; x's dtype through a copy
    for fdt in (np.float32, x.dtype):
        buf = np.full((b, dim, width - 1), 7.0, dtype=fdt)
        o3, f3 = seqfuse.causal_conv1d_fn(x, w, bias, initial_states=init,
                                          return_final_states=True, final_states_out=buf,
                                          activation="silu", backend=backend)
        assert f3 is buf
        np.testing.assert_array_equal(buf.astype(np.float32), fin.astype(np.float32))
        np.testing.assert_array_equal(o3, out)


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("width", [2, 4])
def test_conv1d_short_sequence_final_state(backend, width):
    """A sequence shorter than width-1: the final state keeps initial
    states (or zeros) in front."""
    rng = np.random.default_rng(50)
    x = channels_last(rnd(rng, (2, 8, 2)))
    w = rnd(rng, (8, width))
    init = rnd(rng, (2, 8, width - 1))
    for ini in (init, None):
        out, fin = seqfuse.causal_conv1d_fn(x, w, initial_states=ini, return_final_states=True,
                                            backend=backend)
        want, wfin = ref_conv1d(x, w, init=ini)
        assert rel_err(out, want) < TOL["float32"]
        np.testing.assert_allclose(fin, wfin, rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("width", [2, 3, 4])
def test_conv1d_cu_seqlens(backend, dtype, width):
    rng = np.random.default_rng(60 + width)
    dim, L = 20, 50
    x = channels_last(rnd(rng, (1, dim, L), dtype))
    w = rnd(rng, (dim, width))
    bias = rnd(rng, (dim,))
    cu = np.array([0, 1, 1, 20, 22, 50], np.int64)  # an empty and short sequences
    init = rnd(rng, (5, dim, width - 1))
    out, fin = seqfuse.causal_conv1d_fn(x, w, bias, initial_states=init, return_final_states=True,
                                        activation="silu", cu_seqlens=cu, backend=backend)
    want, wfin = ref_conv1d(x, w, bias, init=init, silu=True, cu=cu)
    assert fin.shape == (5, dim, width - 1)
    assert rel_err(out, want) < TOL[dtype]
    assert rel_err(fin, wfin) < TOL[dtype]
    np.testing.assert_allclose(f64(fin[1]), f64(init[1].astype(x.dtype)))  # empty: its init
    # without states, int32 cu_seqlens as a list
    out2 = seqfuse.causal_conv1d_fn(x, w, cu_seqlens=[0, 20, 50], backend=backend)
    want2, _ = ref_conv1d(x, w, cu=[0, 20, 50])
    assert rel_err(out2, want2) < TOL[dtype]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [2, 3, 4])
def test_conv1d_update_slots(backend, dtype, width):
    rng = np.random.default_rng(70 + width)
    nslots, b, dim = 6, 4, 24
    state = rng.standard_normal((nslots, dim, width - 1)).astype(np.float32)
    x = rnd(rng, (b, dim), dtype)
    w = rnd(rng, (dim, width))
    bias = rnd(rng, (dim,))
    idx = np.array([4, -1, 0, 2], np.int64)  # a padding entry; int64 converted to int32
    before = state.copy()
    want, wstate = ref_conv1d_update(state, x, w, bias, silu=True, idx=idx)
    ptr = state.__array_interface__["data"][0]
    out = seqfuse.causal_conv1d_update(x, state, w, bias, "silu", conv_state_indices=idx,
                                       backend=backend)
    assert state.__array_interface__["data"][0] == ptr
    assert out.shape == (b, dim) and out.dtype == x.dtype
    assert rel_err(out, want) < TOL[dtype]
    assert np.all(f64(out[1]) == 0.0)  # padding: zero output
    np.testing.assert_allclose(state, wstate, rtol=1e-6, atol=0)
    np.testing.assert_array_equal(state[[1, 3, 5]], before[[1, 3, 5]])  # untouched slots


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("width", [2, 3, 4])
def test_conv1d_update_matches_fwd(backend, width):
    """Token-by-token updates (2-D and 3-D x, f32 and f16 state) give the
    prefill's outputs and final state."""
    rng = np.random.default_rng(80 + width)
    b, dim, L = 2, 12, 6
    x = rnd(rng, (b, dim, L))
    w = rnd(rng, (dim, width))
    bias = rnd(rng, (dim,))
    init = rnd(rng, (b, dim, width - 1))
    out, fin = seqfuse.causal_conv1d_fn(x, w, bias, initial_states=init,
                                        return_final_states=True, activation="silu",
                                        backend=backend)
    st = init.copy()
    steps = [seqfuse.causal_conv1d_update(x[:, :, t], st, w, bias, "silu", backend=backend)
             for t in range(L)]
    np.testing.assert_allclose(np.stack(steps, axis=2), out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(st, fin, rtol=0, atol=0)
    st3 = init.copy()
    out3 = seqfuse.causal_conv1d_update(x, st3, w, bias, "silu", backend=backend)
    assert out3.shape == (b, dim, L)
    np.testing.assert_allclose(out3, out, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(st3, fin)
    # a float16 conv_state (causal_conv1d keeps it in x's dtype): updated in place
    st16 = init.astype(np.float16)
    want, wst = ref_conv1d_update(st16, x[:, :, 0], w, bias)
    o16 = seqfuse.causal_conv1d_update(x[:, :, 0], st16, w, bias, backend=backend)
    assert st16.dtype == np.float16 and rel_err(o16, want) < TOL["float32"]
    np.testing.assert_array_equal(st16, wst.astype(np.float16))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gate", ["none", "before", "after"])
@pytest.mark.parametrize("group", [None, 16])
def test_rmsnorm_gated(backend, dtype, gate, group):
    rng = np.random.default_rng(90)
    shape = (2, 5, 64)  # rank 3: flattened to (10, 64)
    x = rnd(rng, shape, dtype)
    z = None if gate == "none" else rnd(rng, shape, dtype)
    w = (1.0 + 0.3 * rng.standard_normal(64)).astype(np.float32)
    nbg = gate != "after"
    out = seqfuse.rmsnorm_fn(x, w, None, z=z, eps=1e-5, group_size=group, norm_before_gate=nbg,
                             backend=backend)
    want = ref_rmsnorm(x, w, z, eps=1e-5, group=group, norm_before_gate=nbg)
    assert out.shape == shape and out.dtype == x.dtype
    assert rel_err(out, want) < TOL[dtype]
    if backend == "auto":
        assert seqfuse.last_backend() == "cpu"


def test_rmsnorm_shapes_and_views():
    rng = np.random.default_rng(91)
    w = rnd(rng, (32,), "float32")
    # rank 1: one row; default eps 1e-6 and norm_before_gate=True, as mamba_ssm
    x1 = rnd(rng, (32,))
    z1 = rnd(rng, (32,))
    o1 = seqfuse.rmsnorm_fn(x1, w, z=z1)
    assert o1.shape == (32,)
    assert rel_err(o1, ref_rmsnorm(x1, w, z1, eps=1e-6)) < TOL["float32"]
    # leading dims that cannot merge into one stride (a strided view): copied
    big = rnd(rng, (3, 8, 32))
    xv = big[:, ::2, :]
    zv = rnd(rng, (3, 8, 32))[:, 1::2, :]
    ov = seqfuse.rmsnorm_fn(xv, w, z=zv, group_size=8, norm_before_gate=False)
    assert ov.shape == (3, 4, 32)
    assert rel_err(ov, ref_rmsnorm(xv, w, zv, group=8, norm_before_gate=False)) < TOL["float32"]
    # rows that are a view with a row stride (a slice of a wider buffer): no copy needed
    wide = rnd(rng, (6, 48))
    xs = wide[:, 8:40]
    assert rel_err(seqfuse.rmsnorm_fn(xs, w), ref_rmsnorm(xs, w)) < TOL["float32"]
    # weight given as float64 / bf16: used as float32
    o64 = seqfuse.rmsnorm_fn(xs, w.astype(np.float64))
    np.testing.assert_array_equal(o64, seqfuse.rmsnorm_fn(xs, w))
    # empty leading dim
    assert seqfuse.rmsnorm_fn(np.zeros((0, 32), np.float32), w).shape == (0, 32)


def test_layer_ops_errors():
    rng = np.random.default_rng(92)
    x = channels_last(rnd(rng, (1, 8, 10)))
    w5 = rnd(rng, (8, 5))
    err = _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.causal_conv1d_fn, x, w5)
    assert "width 5" in err.detail and "sf_conv1d_fwd" in str(err)
    _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.causal_conv1d_fn, x, w5,
            return_final_states=True)
    _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.causal_conv1d_fn, x, rnd(rng, (8, 1)))
    st5 = np.zeros((1, 8, 4), np.float32)
    _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.causal_conv1d_update, x[:, :, 0], st5, w5)
    w = rnd(rng, (8, 4))
    # shapes
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.causal_conv1d_fn, x[0], w)             # rank 2 x
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.causal_conv1d_fn, x, rnd(rng, (7, 4)))  # dim mismatch
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.causal_conv1d_fn, x, w, rnd(rng, (9,)))  # bias
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.causal_conv1d_fn, x, w,
            initial_states=rnd(rng, (1, 8, 2)))                                       # W-1 = 3
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.causal_conv1d_fn, x, w, return_final_states=True,
            final_states_out=np.zeros((1, 8, 2), np.float32))
    x2 = channels_last(rnd(rng, (2, 8, 10)))
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.causal_conv1d_fn, x2, w, cu_seqlens=[0, 10])  # batch 2
    _raises(seqfuse.SF_ERR_INDEX, seqfuse.causal_conv1d_fn, x, w, cu_seqlens=[0, 4, 9])
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.causal_conv1d_fn, x, w, activation="relu")
    _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.causal_conv1d_fn, x, w,
            seq_idx=np.zeros((1, 10), np.int32))
    _raises(seqfuse.SF_ERR_DTYPE, seqfuse.causal_conv1d_fn, x.astype(np.float64), w)
    # update
    xu = rnd(rng, (2, 8))
    st = np.zeros((2, 8, 3), np.float32)
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.causal_conv1d_update, xu, np.zeros((2, 8, 4),
                                                                             np.float32), w)
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.causal_conv1d_update, xu, np.zeros((3, 8, 3),
                                                                             np.float32), w)
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.causal_conv1d_update, rnd(rng, (2,)), st, w)
    _raises(seqfuse.SF_ERR_INDEX, seqfuse.causal_conv1d_update, xu, st, w,
            conv_state_indices=[0, 2])
    _raises(seqfuse.SF_ERR_INDEX, seqfuse.causal_conv1d_update, xu, st, w,
            conv_state_indices=[1, 1])
    _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.causal_conv1d_update, xu, st, w,
            cache_seqlens=np.zeros(2, np.int32))
    ro = st.copy()
    ro.flags.writeable = False
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.causal_conv1d_update, xu, ro, w)
    # rmsnorm
    xr = rnd(rng, (4, 32))
    wr = rnd(rng, (32,))
    err = _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.rmsnorm_fn, xr, wr, np.zeros(32, np.float32))
    assert "bias" in err.detail
    _raises(seqfuse.SF_ERR_STRIDE, seqfuse.rmsnorm_fn, rnd(rng, (4, 64))[:, ::2], wr)
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.rmsnorm_fn, xr, wr, group_size=12)
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.rmsnorm_fn, xr, wr, group_size=0)
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.rmsnorm_fn, xr, wr, z=rnd(rng, (4, 31)))
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.rmsnorm_fn, xr, rnd(rng, (16,)))
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.rmsnorm_fn, xr, wr, eps=0.0)
    _raises(seqfuse.SF_ERR_DTYPE, seqfuse.rmsnorm_fn, xr, wr, z=xr.astype(np.float16))


_LAYER_STRUCTS = {
    "sf_conv1d_params": ["x", "weight", "bias", "initial_state", "final_state", "cu_seqlens",
                         "out", "silu", "backend"],
    "sf_conv1d_update_params": ["conv_state", "x", "weight", "bias", "state_idx", "out", "silu",
                                "backend"],
    "sf_rmsnorm_gated_params": ["x", "z", "weight", "out", "group_size", "norm_before_gate",
                                "eps", "backend"],
}


@pytest.mark.parametrize("name", ["conv1d", "conv1d_update", "rmsnorm_gated"])
def test_layer_params_struct_layout(name):
    """As test_params_struct_layout, for the layer ops' structs."""
    S = getattr(_lib, "sf_%s_params" % name)
    init = getattr(_lib, "sf_%s_params_init" % name)
    n = ctypes.sizeof(S)
    buf = (ctypes.c_ubyte * (n + 64))(*([0xAB] * (n + 64)))
    init(ctypes.cast(buf, ctypes.POINTER(S)))
    assert bytes(buf[n:]) == b"\xab" * 64, "the C struct is larger than the ctypes one"
    p = S.from_buffer(buf)
    assert p.backend == _lib.SF_BACKEND_AUTO
    if name == "rmsnorm_gated":
        assert p.group_size == 0 and p.norm_before_gate == 0
        assert abs(p.eps - 1e-5) < 1e-12
    else:
        assert p.silu == 0 and p.x.data is None


def test_layer_params_offsets_from_compiler(tmp_path):
    """Every field offset and struct size of the layer ops' params, as the C
    compiler lays them out (skipped without a C compiler)."""
    import shutil
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "seqfuse.h"',
             "int main(void) {"]
    for s, fields in _LAYER_STRUCTS.items():
        lines.append('printf("%s SIZE %%zu\\n", sizeof(%s));' % (s, s))
        for f in fields:
            lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (s, f, s, f))
    lines += ["return 0;", "}"]
    src = tmp_path / "off.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "off"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(_REPO, "include"), str(src), "-o",
                    str(exe)], check=True)
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    for line in got.split("\n"):
        if not line:
            continue
        s, f, v = line.split()
        S = getattr(_lib, s)
        mine = ctypes.sizeof(S) if f == "SIZE" else getattr(S, f).offset
        assert mine == int(v), (s, f, mine, v)
    assert set(f for s, fs in _LAYER_STRUCTS.items() for f in fs) <= set(
        f for s in _LAYER_STRUCTS for f, _ in getattr(_lib, s)._fields_)
    for s, fields in _LAYER_STRUCTS.items():  # the list above names every ctypes field
        assert [f for f, _ in getattr(_lib, s)._fields_] == fields


def test_cuda_array_interface_layer_views():
    """Bare __cuda_array_interface__ objects get permuted / row-merged views
    without copies (descriptors only: no GPU needed)."""
    from seqfuse import _core
    c = _core.Call("t", np.zeros(1, np.float32), "x")
    # (b, dim, L) channels-last: byte strides (L*dim*2, 2, dim*2) -> C (b, L, dim)
    a = _FakeCudaArray((2, 8, 5), "<f2", (160, 2, 16), 4096)
    t = c.tensor(seqfuse._permute(a, (0, 2, 1)), "x")
    assert list(t.shape[:3]) == [2, 5, 8] and list(t.stride[:3]) == [80, 8, 1]
    assert t.data == 4096
    # (3, 4, 32) with a padded row stride of 40 elements merges into (12, 32)
    r = _FakeCudaArray((3, 4, 32), "<f4", (640, 160, 4), 8192)
    t = c.tensor(seqfuse._rows_view(c, r, "x", 12, 32), "x")
    assert list(t.shape[:2]) == [12, 32] and list(t.stride[:2]) == [40, 1]
    # leading dims that do not merge are refused (no copy of bare interfaces)
    bad = _FakeCudaArray((3, 4, 32), "<f4", (1000, 160, 4), 8192)
    with pytest.raises(SeqfuseError) as e:
        seqfuse._rows_view(c, bad, "x", 12, 32)
    assert e.value.status == seqfuse.SF_ERR_STRIDE
