"""The binding's quantised weights and product (quantize_weights, QWeight,
repack_gguf, gemm_wq) against numpy float64 formulas written here from the
layout of seqfuse.h and the GGUF block definitions; torch CPU tensors, and
torch CUDA tensors when there is a GPU (skipped, with the reason, without)."""
import numpy as np
import pytest

from sf_testutil import DTYPES, TOL, f64, rel_err, np_dtype
import seqfuse
from seqfuse import SeqfuseError

try:
    import torch
except ImportError:
    torch = None

HAVE_CUDA = torch is not None and torch.cuda.is_available() and seqfuse.has_cuda()


def rnd(shape, dt, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np_dtype(dt))


def np_dequant(qw):
    """W from the layout's definition: codes, offsets, group scales and mins."""
    data = np.asarray(qw.data).view(np.uint8)
    if qw.bits == 4:
        u = np.empty((qw.n, qw.k), np.int64)
        u[:, 0::2] = data & 15
        u[:, 1::2] = data >> 4
        v = u if qw.mins is not None else u - 8
    else:
        v = data.astype(np.int64) if qw.mins is not None else data.view(np.int8).astype(np.int64)
    s = np.repeat(f64(qw.scales).T, qw.group_size, axis=1)
    m = 0.0 if qw.mins is None else np.repeat(f64(qw.mins).T, qw.group_size, axis=1)
    return s * v + m


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("bits,group,symmetric", [(4, 128, True), (4, 32, False), (8, 64, True),
                                                  (8, 128, False), (4, 64, True)])
@pytest.mark.parametrize("M", [1, 3, 17])
def test_quantize_and_product(dt, bits, group, symmetric, M):
    n, k = 37, 256
    w = rnd((n, k), dt, 1)
    qw = seqfuse.quantize_weights(w, bits=bits, group_size=group, symmetric=symmetric)
    assert qw.shape == (n, k) and qw.symmetric == symmetric and qw.bits == bits
    assert qw.data.shape == (n, k // 2 if bits == 4 else k) and qw.scales.shape == (k // group, n)
    wd = np_dequant(qw)
    # the library's dequantisation is the definition's, rounded once to f32
    assert np.array_equal(qw.dequantize("float32"), wd.astype(np.float32))
    # round to nearest, no code clamped: within half a step
    step = np.repeat(f64(qw.scales).T, group, axis=1)
    assert np.all(np.abs(wd - f64(w)) <= step * (0.5 + 1e-6))
    x = rnd((M, k), dt, 2)
    bias = rnd((n,), "float32", 3)
    y = seqfuse.gemm_wq(x, qw, bias=bias)
    assert y.shape == (M, n) and y.dtype == x.dtype
    assert rel_err(y, f64(x) @ wd.T + bias) < TOL[dt]


def test_batched_rows_and_backends():
    qw = seqfuse.quantize_weights(rnd((16, 64), "float32"), bits=4, group_size=32)
    x = rnd((2, 3, 64), "float32", 5)
    want = f64(x) @ np_dequant(qw).T
    for be in ("ref", "cpu", "auto"):
        y = seqfuse.gemm_wq(x, qw, backend=be)
        assert y.shape == (2, 3, 16) and rel_err(y, want) < 1e-5


def _gguf_value(kind, blocks, n, k):
    bs = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}[kind]
    b = np.frombuffer(blocks, np.uint8).reshape(n, k // 32, bs)
    d = f64(b[:, :, 0:2].copy().view(np.float16))  # (n, k/32, 1)
    if kind == "Q8_0":
        q = b[:, :, 2:].view(np.int8).astype(np.float64)
        return (d * q).reshape(n, k)
    o = 4 if kind == "Q4_1" else 2
    qs = b[:, :, o:o + 16]
    u = np.concatenate([qs & 15, qs >> 4], axis=2).astype(np.float64)  # elements 0..15, 16..31
    if kind == "Q4_0":
        return (d * (u - 8)).reshape(n, k)
    m = f64(b[:, :, 2:4].copy().view(np.float16))
    return (d * u + m).reshape(n, k)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
@pytest.mark.parametrize("sdt", ["float16", "float32"])
def test_repack_gguf(kind, sdt):
    n, k = 5, 128
    bs = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}[kind]
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(n, k // 32, bs), dtype=np.uint8)
    # finite f16 scales and mins: exponent field below 31
    halves = rng.integers(0x0400, 0x5c00, size=(n, k // 32, 2), dtype=np.uint16)
    halves |= (rng.integers(0, 2, size=halves.shape, dtype=np.uint16) << 15)
    raw[:, :, 0:4 if kind == "Q4_1" else 2] = halves.view(np.uint8)[:, :, :4 if kind == "Q4_1" else 2]
    blocks = raw.tobytes()
    qw = seqfuse.repack_gguf(blocks, kind, n, k, scale_dtype=sdt)
    want = _gguf_value(kind, blocks, n, k)
    assert np.array_equal(qw.dequantize("float32"), want.astype(np.float32))
    x = rnd((3, k), "float32", 8)
    assert rel_err(seqfuse.gemm_wq(x, qw), f64(x) @ want.T) < 1e-5


def test_errors():
    w = rnd((8, 96), "float32")
    with pytest.raises(SeqfuseError, match="not a multiple of group_size 64") as e:
        seqfuse.quantize_weights(w, group_size=64)
    assert e.value.status == seqfuse.SF_ERR_SHAPE
    with pytest.raises(SeqfuseError, match="group_size 48"):
        seqfuse.quantize_weights(w, group_size=48)
    with pytest.raises(SeqfuseError, match="bits"):
        seqfuse.quantize_weights(w, bits=3)
    qw = seqfuse.quantize_weights(w, group_size=32)
    with pytest.raises(SeqfuseError, match="x has shape") as e:
        seqfuse.gemm_wq(rnd((2, 64), "float32"), qw)
    assert e.value.status == seqfuse.SF_ERR_SHAPE
    with pytest.raises(SeqfuseError, match="qweight"):
        seqfuse.gemm_wq(rnd((2, 96), "float32"), w)
    with pytest.raises(SeqfuseError, match="expected"):
        seqfuse.repack_gguf(b"\0" * 17, "Q4_0", 1, 32)
    with pytest.raises(SeqfuseError, match="ggml_type"):
        seqfuse.repack_gguf(b"\0" * 18, "Q5_0", 1, 32)
    bad = rnd((2, 32), "float32")
    bad[1, 3] = np.nan
    with pytest.raises(SeqfuseError, match="row 1, group 0"):
        seqfuse.quantize_weights(bad, group_size=32)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_cpu():
    w = torch.randn(24, 128, dtype=torch.bfloat16)
    qw = seqfuse.quantize_weights(w, bits=8, group_size=64, symmetric=False)
    assert qw.data.dtype == torch.uint8 and qw.scales.dtype == torch.bfloat16
    x = torch.randn(5, 128, dtype=torch.bfloat16)
    y = seqfuse.gemm_wq(x, qw)
    wd = qw.dequantize().double()
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    assert rel_err(y.float().numpy(), (x.double() @ wd.T).numpy()) < TOL["bfloat16"]


@pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (or a library built without CUDA)")
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("bits,group,symmetric", [(4, 128, True), (4, 32, False), (8, 64, True),
                                                  (8, 128, False)])
@pytest.mark.parametrize("M", [1, 5, 16, 33, 300])
def test_torch_cuda(dt, bits, group, symmetric, M):
    tdt = getattr(torch, dt)
    n, k = 200, 512
    w = torch.randn(n, k, dtype=tdt, device="cuda")
    qw = seqfuse.quantize_weights(w, bits=bits, group_size=group, symmetric=symmetric)
    assert qw.data.device.type == "cuda"
    x = torch.randn(M, k, dtype=tdt, device="cuda")
    bias = torch.randn(n, dtype=tdt, device="cuda")
    y = seqfuse.gemm_wq(x, qw, bias=bias)
    assert y.device.type == "cuda" and y.dtype == tdt and seqfuse.last_backend() == "cuda"
    wd = qw.dequantize().double()
    want = x.double() @ wd.T + bias.double()
    assert rel_err(y.float().cpu().numpy(), want.cpu().numpy()) < {"float16": 5e-3, "bfloat16": 1.5e-2}[dt]


@pytest.mark.parametrize("bits,symmetric", [(4, True), (4, False), (8, True)])
def test_tiled_host(bits, symmetric):
    """QWeight.tiled(): the padded shape, the same dequantised weights, the
    reference product unchanged; the CPU backend refuses the layout."""
    n, k = 133, 288
    w = rnd((n, k), "float32", 3)
    qw = seqfuse.quantize_weights(w, bits=bits, group_size=32, symmetric=symmetric)
    qt = qw.tiled()
    assert qt.layout == "tiled" and qt.shape == (n, k)
    assert qt.data.shape == (256, ((k // 2 if bits == 4 else k) + 63) // 64 * 64)
    assert np.array_equal(qt.dequantize(), qw.dequantize())
    x = rnd((3, k), "float32", 4)
    assert np.array_equal(seqfuse.gemm_wq(x, qt, backend="ref"), seqfuse.gemm_wq(x, qw, backend="ref"))
    with pytest.raises(SeqfuseError, match="SF_QW_TILED"):
        seqfuse.gemm_wq(x, qt, backend="cpu")
    with pytest.raises(SeqfuseError, match="give n and k"):
        seqfuse.QWeight(qt.data, qt.scales, qt.mins, bits, 32, layout="tiled")


@pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (or a library built without CUDA)")
@pytest.mark.parametrize("bits,group,symmetric", [(4, 128, True), (4, 32, False), (8, 64, True)])
@pytest.mark.parametrize("M", [1, 16, 40])
def test_tiled_cuda(bits, group, symmetric, M):
    """The tiled codes on the GPU give the row layout's product."""
    n, k = 300, 1024
    w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    qw = seqfuse.quantize_weights(w, bits=bits, group_size=group, symmetric=symmetric)
    qt = qw.tiled()
    assert qt.data.device.type == "cuda"
    x = torch.randn(M, k, dtype=torch.bfloat16, device="cuda")
    y = seqfuse.gemm_wq(x, qt)
    want = x.double() @ qw.dequantize().double().T
    assert rel_err(y.float().cpu().numpy(), want.cpu().numpy()) < 1.5e-2


def test_params_struct_layout():
    """sf_gemm_wq_params (with the sf_qweight inside) has the C size and
    field offsets: sf_gemm_wq_params_init writes exactly sizeof bytes and
    its defaults land where ctypes reads them."""
    import ctypes
    from seqfuse import _lib
    S = _lib.sf_gemm_wq_params
    n = ctypes.sizeof(S)
    buf = (ctypes.c_ubyte * (n + 64))(*([0xAB] * (n + 64)))
    _lib.sf_gemm_wq_params_init(ctypes.cast(buf, ctypes.POINTER(S)))
    assert bytes(buf[n:]) == b"\xab" * 64, "the C struct is larger than the ctypes one"
    p = S.from_buffer(buf)
    assert p.backend == _lib.SF_BACKEND_AUTO and p.w.group_size == 128 and p.w.format == _lib.SF_QW_INT4
    assert p.w.n == 0 and p.w.k == 0 and p.y.data is None and p.w.mins.data is None
    assert p.w.layout == _lib.SF_QW_ROWS
