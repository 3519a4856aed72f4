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
