"""Weight-only quantised matrix product (sf_gemm_wq) and quantised weights:
QWeight (the sf_qweight layout of seqfuse.h), quantize_weights (round to
nearest, on the host), repack_gguf (GGUF Q4_0 / Q4_1 / Q8_0 blocks, bit for
bit) and QWeight.dequantize.

The conversions run on the host (the library's CPU context); torch tensors on
a GPU are copied to the host and the results copied back to their device.
gemm_wq runs where x is: numpy and torch CPU arrays on the CPU backends,
torch CUDA tensors on the CUDA backend (weights on the same device, scales
in x's dtype)."""
import ctypes

import numpy as np

from . import _lib as L
from ._core import Call, as_int, fail, get_ctx, kind_of
from ._fused import _rows

_FORMATS = {4: L.SF_QW_INT4, 8: L.SF_QW_INT8}
_LAYOUTS = {"rows": L.SF_QW_ROWS, "tiled": L.SF_QW_TILED}
# name: (ggml type id, bits, block bytes, has mins)
_GGUF = {"Q4_0": (L.SF_GGUF_Q4_0, 4, 18, False), "Q4_1": (L.SF_GGUF_Q4_1, 4, 20, True),
         "Q8_0": (L.SF_GGUF_Q8_0, 8, 34, False)}


def _is_torch(a):
    return kind_of(a) == "torch"


def _host(a):
    """A torch tensor on the host (numpy arrays pass through)."""
    return a.detach().cpu() if _is_torch(a) and a.device.type != "cpu" else a


def _empty(like, shape, dtype):
    """An output of like's kind (numpy or torch, on the host) of a numpy dtype
    name ("uint8", "float16", "bfloat16", ...)."""
    if _is_torch(like):
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype))
    if dtype == "bfloat16":
        import ml_dtypes
        return np.empty(shape, dtype=ml_dtypes.bfloat16)
    return np.empty(shape, dtype=np.dtype(dtype))


def _dtype_name(a):
    return str(a.dtype).replace("torch.", "")


def _run_host(op, fn, *args):
    ctx = get_ctx(L.SF_DEVICE_CPU)
    st = fn(ctx.handle, *args)
    if st != L.SF_OK:
        fail(st, L.sf_ctx_last_error(ctx.handle).decode(errors="replace"))


class QWeight:
    """A weight W (n x k) in seqfuse's quantised layout (seqfuse.h, sf_qweight):
    bits 4 (two codes per byte, element 2i in the low nibble of byte i) or 8;
    one scale, and optionally one min, per group of group_size (32, 64, 128)
    elements along k.  data (n, k/2) or (n, k) uint8 (int8 also for 8 bits
    without mins), scales and mins (k / group_size, n).  Values: 4 bits
    w = s (u - 8), or s u + m with mins; 8 bits w = s q (signed), or s u + m
    (unsigned) with mins.  Arrays are numpy or torch tensors of one device.
    layout "rows" (the above) or "tiled": the CUDA backend's streaming order
    of seqfuse.h's SF_QW_TILED (data (n rounded up to 128, bytes of a row
    rounded up to 64)), made by .tiled(); n and k must then be given."""

    def __init__(self, data, scales, mins=None, bits=4, group_size=128, n=None, k=None, layout="rows"):
        if bits not in _FORMATS:
            fail(L.SF_ERR_INVALID_ARG, "QWeight: bits %r; use 4 or 8" % (bits,))
        if layout not in _LAYOUTS:
            fail(L.SF_ERR_INVALID_ARG, "QWeight: layout %r; use 'rows' or 'tiled'" % (layout,))
        self.data, self.scales, self.mins = data, scales, mins
        self.bits = bits
        self.group_size = group_size
        self.layout = layout
        shp = tuple(data.shape)
        if len(shp) != 2:
            fail(L.SF_ERR_SHAPE, "QWeight: data has shape %s; expected (n, k/2) or (n, k)" % (shp,))
        if layout == "tiled" and (n is None or k is None):
            fail(L.SF_ERR_SHAPE, "QWeight: a tiled layout's data is padded: give n and k")
        self.n = shp[0] if n is None else n
        self.k = (shp[1] * 2 if bits == 4 else shp[1]) if k is None else k

    @property
    def shape(self):
        return (self.n, self.k)

    @property
    def symmetric(self):
        return self.mins is None

    def __repr__(self):
        return "QWeight(int%d, n=%d, k=%d, group_size=%d, %s, scales %s, %s)" % (
            self.bits, self.n, self.k, self.group_size, "symmetric" if self.symmetric else "mins",
            _dtype_name(self.scales), self.layout)

    def _fill(self, call, pre):
        q = L.sf_qweight()
        q.format = _FORMATS[self.bits]
        q.n = as_int(call.op, pre + ".n", self.n, -(2 ** 62), 2 ** 62)
        q.k = as_int(call.op, pre + ".k", self.k, -(2 ** 62), 2 ** 62)
        q.group_size = as_int(call.op, pre + ".group_size", self.group_size)
        q.layout = _LAYOUTS[self.layout]
        q.data = call.tensor(self.data, pre + ".data")
        q.scales = call.tensor(self.scales, pre + ".scales")
        if self.mins is not None:
            q.mins = call.tensor(self.mins, pre + ".mins")
        return q

    def _map(self, fn):
        return QWeight(fn(self.data), fn(self.scales), None if self.mins is None else fn(self.mins),
                       self.bits, self.group_size, self.n, self.k, self.layout)

    def to(self, *args, **kw):
        """torch: the same weight with every tensor .to(*args, **kw) (a device)."""
        return self._map(lambda t: t.to(*args, **kw))

    def dequantize(self, dtype="float32"):
        """W (n, k) as floats (float32, float16 or bfloat16): each value computed
        in double and rounded once; on the host, returned on data's device."""
        q = self._map(_host)
        call = Call("dequantize_weights", q.data, "data")
        out = _empty(q.data, (self.n, self.k), dtype)
        qd = q._fill(call, "q")
        wt = call.tensor(out, "w")
        _run_host(call.op, L.sf_dequantize_weights, ctypes.byref(qd), ctypes.byref(wt))
        if _is_torch(self.data) and self.data.device.type != "cpu":
            return out.to(self.data.device)
        return out


    def tiled(self):
        """The same weight in the "tiled" layout (sf_tile_qweight, on the host;
        returned on data's device): the CUDA backend's faster order at 1-16
        rows of x.  The CPU backend takes "rows" only."""
        if self.layout == "tiled":
            return self
        q = self._map(_host)
        call = Call("tile_qweight", q.data, "data")
        np_ = (self.n + 127) // 128 * 128
        bp = ((self.k // 2 if self.bits == 4 else self.k) + 63) // 64 * 64
        out = _empty(q.data, (np_, bp), _dtype_name(q.data))
        qd = q._fill(call, "q")
        tt = call.tensor(out, "tiled")
        _run_host(call.op, L.sf_tile_qweight, ctypes.byref(qd), ctypes.byref(tt))
        tq = QWeight(out, q.scales, q.mins, self.bits, self.group_size, self.n, self.k, "tiled")
        if _is_torch(self.data) and self.data.device.type != "cpu":
            return QWeight(out.to(self.data.device), self.scales, self.mins, self.bits, self.group_size,
                           self.n, self.k, "tiled")
        return tq


def quantize_weights(w, bits=4, group_size=128, symmetric=True, scale_dtype=None):
    """Round-to-nearest quantisation of w (n, k) (the rounding of seqfuse.h's
    sf_quantize_weights): per group of group_size values along k, symmetric
    (s = max|v| / 7 or / 127) or with mins (m = min, s = (max - m) / 15 or
    / 255).  Scales (and mins) in scale_dtype, by default w's dtype.  Runs on
    the host; a torch CUDA w gets its QWeight back on its device."""
    op = "quantize_weights"
    if bits not in _FORMATS:
        fail(L.SF_ERR_INVALID_ARG, "%s: bits %r; use 4 or 8" % (op, bits))
    wh = _host(w)
    call = Call(op, wh, "w")
    shp = tuple(wh.shape)
    if len(shp) != 2:
        fail(L.SF_ERR_SHAPE, "%s: w has shape %s; expected (n, k)" % (op, shp))
    n, k = shp
    g = as_int(op, "group_size", group_size)
    sdt = _dtype_name(wh) if scale_dtype is None else str(scale_dtype).replace("torch.", "")
    if sdt not in ("float32", "float16", "bfloat16"):
        fail(L.SF_ERR_DTYPE, "%s: scale_dtype %s; use float32, float16 or bfloat16" % (op, sdt))
    ng = k // g if g > 0 else 0
    data = _empty(wh, (n, k // 2 if bits == 4 else k), "uint8")
    scales = _empty(wh, (ng, n), sdt)
    mins = None if symmetric else _empty(wh, (ng, n), sdt)
    qw = QWeight(data, scales, mins, bits, g, n, k)
    qd = qw._fill(call, "q")
    wt = call.tensor(wh, "w")
    _run_host(op, L.sf_quantize_weights, ctypes.byref(wt), ctypes.byref(qd))
    if _is_torch(w) and w.device.type != "cpu":
        return qw.to(w.device)
    return qw


def repack_gguf(blocks, ggml_type, n, k, scale_dtype="float32"):
    """A GGUF tensor of n rows x k elements (blocks row after row: bytes,
    bytearray or a uint8 array of n * k / 32 blocks) as a numpy QWeight, bit
    for bit: ggml_type "Q4_0", "Q4_1" or "Q8_0" (or its ggml type id), group
    32, scales (and Q4_1's mins) float16 (copied) or float32 (exact)."""
    op = "repack_gguf"
    if not isinstance(ggml_type, str):
        names = {v[0]: name for name, v in _GGUF.items()}
        ggml_type = names.get(ggml_type, str(ggml_type))
    if ggml_type not in _GGUF:
        fail(L.SF_ERR_INVALID_ARG, "%s: ggml_type %r; use 'Q4_0', 'Q4_1' or 'Q8_0'" % (op, ggml_type))
    tid, bits, bs, has_min = _GGUF[ggml_type]
    n = as_int(op, "n", n, 1, 2 ** 31 - 1)
    k = as_int(op, "k", k, 1, 2 ** 31 - 1)
    buf = np.ascontiguousarray(np.frombuffer(blocks, dtype=np.uint8) if isinstance(
        blocks, (bytes, bytearray, memoryview)) else np.asarray(blocks).view(np.uint8).reshape(-1))
    data = np.empty((n, k // 2 if bits == 4 else k), np.uint8)
    scales = np.empty((k // 32, n), np.dtype(scale_dtype))
    mins = np.empty((k // 32, n), np.dtype(scale_dtype)) if has_min else None
    qw = QWeight(data, scales, mins, bits, 32, n, k)
    call = Call(op, data, "data")
    qd = qw._fill(call, "q")
    _run_host(op, L.sf_repack_gguf, tid, buf.ctypes.data_as(ctypes.c_void_p), buf.nbytes,
              ctypes.byref(qd))
    return qw


def gemm_wq(x, qweight, bias=None, backend="auto"):
    """y = x W^T (+ bias) with W a QWeight, dequantised inside the product:
    x (..., k) float32 (host only), float16 or bfloat16 with unit stride along
    k; bias (n,) optional; returns (..., n) in x's dtype."""
    op = "gemm_wq"
    if not isinstance(qweight, QWeight):
        fail(L.SF_ERR_INVALID_ARG, "%s: qweight is a %s; pass a QWeight (quantize_weights, "
                                   "repack_gguf)" % (op, type(qweight).__name__))
    call = Call(op, x, "x")
    x2, shp = _rows(call, x, "x")
    p = L.sf_gemm_wq_params()
    L.sf_gemm_wq_params_init(ctypes.byref(p))
    p.x = call.tensor(x2, "x")
    p.w = qweight._fill(call, "w")
    if bias is not None:
        p.bias = call.tensor(bias, "bias")
    y = call.empty((x2.shape[0], qweight.n), like=x)
    p.y = call.tensor(y, "y")
    call.run(L.sf_gemm_wq, p, backend)
    return y.reshape(shp[:-1] + (qweight.n,))
