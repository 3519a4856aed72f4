"""The dense matrix product of a Linear layer (sf_gemm): y = x W^T (+ bias)
(+ beta y), W in torch.nn.Linear's (out, in) layout.  numpy arrays run on
the CPU backends, torch CUDA tensors on the CUDA one (cuBLAS).  The engine
runs every unquantised projection through this call; bench/gpu_engine.py
times the prefill's products alone with it."""
import ctypes

from . import _lib as L
from ._core import Call, fail
from ._fused import _rows


def gemm(x, w, bias=None, out=None, beta=0.0, backend="auto"):
    """y = x @ w.T (+ bias) (+ beta * out): x (..., K), w (N, K) with unit
    stride along K (x's dtype on CUDA), bias (N,) float32 or x's dtype.
    Returns (..., N) in x's dtype: `out` itself when given (x 2-D only;
    out (M, N) of x's dtype with unit stride along N, read only when
    beta != 0), else a new array.  Sums in float32 on every backend but the reference."""
    op = "gemm"
    call = Call(op, x, "x")
    x2, shp = _rows(call, x, "x")
    if len(tuple(w.shape)) != 2:
        fail(L.SF_ERR_SHAPE, "%s: w has shape %s; expected (N, K)" % (op, tuple(w.shape)))
    n = tuple(w.shape)[0]
    p = L.sf_gemm_params()
    L.sf_gemm_params_init(ctypes.byref(p))
    p.x = call.tensor(x2, "x")
    p.w = call.tensor(w, "w")
    if bias is not None:
        p.bias = call.tensor(bias, "bias")
    if out is None:
        y = call.empty((x2.shape[0], n), like=x)
    else:
        if len(shp) != 2:
            fail(L.SF_ERR_SHAPE, "%s: out is taken with a 2-D x only; x has shape %s" % (op, shp))
        if tuple(out.shape) != (shp[0], n):
            fail(L.SF_ERR_SHAPE, "%s: out has shape %s, expected %s" % (op, tuple(out.shape), (shp[0], n)))
        y = out
    p.y = call.tensor(y, "y")
    p.beta = float(beta)
    call.run(L.sf_gemm, p, backend)
    return y.reshape(shp[:-1] + (n,)) if out is None else out
