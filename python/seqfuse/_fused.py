"""The fused layer ops of the binding: residual add + RMSNorm / LayerNorm
(flash-attention's layer_norm_fn / rms_norm_fn shape of call), SwiGLU, the
gate/up projection with SwiGLU fused in, and rotary embedding (flash_attn.layers.rotary.apply_rotary_emb's signature).
numpy arrays run on the CPU backend, torch CUDA tensors on the CUDA one."""
import ctypes

import numpy as np

from . import _lib as L
from ._core import Call, as_flag, fail


def _rows(call, obj, name):
    shp = tuple(obj.shape)
    if len(shp) < 1:
        fail(L.SF_ERR_SHAPE, "%s: %s is a scalar; expected (..., D)" % (call.op, name))
    rows = 1
    for n in shp[:-1]:
        rows *= n
    return obj.reshape(rows, shp[-1]), shp


def _norm(op, fn, x, weight, bias, eps, residual, prenorm, residual_in_fp32, backend):
    call = Call(op, x, "x")
    x2, shp = _rows(call, x, "x")
    p = L.sf_norm_params()
    L.sf_norm_params_init(ctypes.byref(p))
    p.x = call.tensor(x2, "x")
    p.weight = call.tensor(call.as_f32(weight, "weight"), "weight")
    if bias is not None:
        p.bias = call.tensor(call.as_f32(bias, "bias"), "bias")
    if residual is not None:
        if tuple(residual.shape) != shp:
            fail(L.SF_ERR_SHAPE, "%s: residual has shape %s, expected x's %s" %
                 (op, tuple(residual.shape), shp))
        p.residual = call.tensor(residual.reshape(x2.shape), "residual")
    out = call.empty(x2.shape, like=x)
    p.out = call.tensor(out, "out")
    h = None
    if as_flag(op, "prenorm", prenorm):
        h = call.empty(x2.shape, like=None if residual_in_fp32 else x)
        p.residual_out = call.tensor(h, "residual_out")
    p.eps = float(eps)
    call.run(fn, p, backend)
    out = out.reshape(shp)
    return (out, h.reshape(shp)) if h is not None else out


def rms_norm(x, weight, eps=1e-6, residual=None, prenorm=False, bias=None,
             residual_in_fp32=False, backend="auto"):
    """y = (x + residual) * rsqrt(mean((x + residual)^2) + eps) * weight (+ bias)
    over the last dim; returns y, or (y, h = x + residual) with prenorm
    (h in float32 with residual_in_fp32).  x (..., D) with unit stride along
    D; weight and bias (D,) used as float32."""
    return _norm("rms_norm", L.sf_add_rmsnorm, x, weight, bias, eps, residual, prenorm,
                 residual_in_fp32, backend)


def add_rms_norm(x, residual, weight, eps=1e-6, prenorm=True, bias=None,
                 residual_in_fp32=False, backend="auto"):
    """rms_norm with the residual given: returns (y, h) by default."""
    return _norm("add_rms_norm", L.sf_add_rmsnorm, x, weight, bias, eps, residual, prenorm,
                 residual_in_fp32, backend)


def layer_norm(x, weight, bias, eps=1e-5, residual=None, prenorm=False, residual_in_fp32=False,
               backend="auto"):
    """LayerNorm of h = x + residual over the last dim (biased variance):
    y = (h - mean) * rsqrt(var + eps) * weight + bias; returns y or (y, h)."""
    return _norm("layer_norm", L.sf_add_layernorm, x, weight, bias, eps, residual, prenorm,
                 residual_in_fp32, backend)


_LAYOUTS = {"separate": L.SF_SWIGLU_SEPARATE, "concat": L.SF_SWIGLU_CONCAT,
            "interleaved": L.SF_SWIGLU_INTERLEAVED}


def swiglu(gate, up=None, layout=None, backend="auto"):
    """silu(gate) * up over the last dim.  With up given: two arrays of one
    shape (layout "separate").  Without: gate (..., 2n) holds both halves,
    layout "concat" ([gate | up], the default) or "interleaved" (gate0,
    up0, gate1, up1, ...).  Returns (..., n) in gate's dtype."""
    op = "swiglu"
    call = Call(op, gate, "gate")
    if layout is None:
        layout = "separate" if up is not None else "concat"
    if layout not in _LAYOUTS:
        fail(L.SF_ERR_INVALID_ARG, "%s: layout %r; use 'separate', 'concat' or 'interleaved'" %
             (op, layout))
    g2, shp = _rows(call, gate, "gate")
    p = L.sf_swiglu_params()
    L.sf_swiglu_params_init(ctypes.byref(p))
    p.layout = _LAYOUTS[layout]
    p.gate = call.tensor(g2, "gate")
    n = shp[-1]
    if up is not None:
        p.up = call.tensor(up.reshape(g2.shape), "up")
    else:
        n //= 2
    out = call.empty((g2.shape[0], n), like=gate)
    p.out = call.tensor(out, "out")
    call.run(L.sf_swiglu, p, backend)
    return out.reshape(shp[:-1] + (n,))


def gemm_swiglu(x, w_gate, w_up, backend="auto"):
    """silu(x @ w_gate.T) * (x @ w_up.T) in one call, the (..., 2I) product
    never written: x (..., K), w_gate and w_up (I, K) (torch.nn.Linear
    weights; the halves of a concatenated (2I, K) gate_up projection are
    views), all of x's dtype with unit stride along K.  Returns (..., I) in
    x's dtype.  Sums in float32 on every backend but the reference."""
    op = "gemm_swiglu"
    call = Call(op, x, "x")
    x2, shp = _rows(call, x, "x")
    p = L.sf_gemm_swiglu_params()
    L.sf_gemm_swiglu_params_init(ctypes.byref(p))
    p.x = call.tensor(x2, "x")
    if len(tuple(w_gate.shape)) != 2:
        fail(L.SF_ERR_SHAPE, "%s: w_gate has shape %s; expected (I, K)" % (op, tuple(w_gate.shape)))
    p.w_gate = call.tensor(w_gate, "w_gate")
    p.w_up = call.tensor(w_up, "w_up")
    n = tuple(w_gate.shape)[0]
    out = call.empty((x2.shape[0], n), like=x)
    p.y = call.tensor(out, "y")
    call.run(L.sf_gemm_swiglu, p, backend)
    return out.reshape(shp[:-1] + (n,))


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0,
                     cu_seqlens=None, max_seqlen=None, backend="auto"):
    """flash_attn.layers.rotary.apply_rotary_emb: x (batch, seqlen, nheads,
    headdim), or (total, nheads, headdim) with cu_seqlens (batch + 1); cos
    and sin (seqlen_ro, rotary_dim / 2), used as float32; the first
    rotary_dim channels rotated (NeoX halves, or GPT-J pairs when
    interleaved), the rest passed through.  Token s of sequence b is at
    position s + seqlen_offsets (an int, or one per sequence).  Returns the
    rotated array (x itself when inplace).  Positions are built on the host."""
    op = "apply_rotary_emb"
    call = Call(op, x, "x")
    shp = tuple(x.shape)
    offs = np.asarray(seqlen_offsets.cpu() if hasattr(seqlen_offsets, "cpu") else seqlen_offsets,
                      dtype=np.int64)
    if cu_seqlens is None:
        if len(shp) != 4:
            fail(L.SF_ERR_SHAPE, "%s: x has shape %s; expected (batch, seqlen, nheads, headdim)" %
                 (op, shp))
        b, s = shp[0], shp[1]
        pos = np.arange(s, dtype=np.int64)[None, :] + (offs.reshape(-1, 1) if offs.ndim else offs)
        pos = np.broadcast_to(pos, (b, s)).reshape(-1)
        x3 = x.reshape(b * s, shp[2], shp[3])
    else:
        if len(shp) != 3:
            fail(L.SF_ERR_SHAPE, "%s: with cu_seqlens x has shape %s; expected (total, nheads, "
                                 "headdim)" % (op, shp))
        cu = np.asarray(cu_seqlens.cpu() if hasattr(cu_seqlens, "cpu") else cu_seqlens,
                        dtype=np.int64)
        pos = np.empty(shp[0], dtype=np.int64)
        for i in range(len(cu) - 1):
            o = int(offs[i]) if offs.ndim else int(offs)
            pos[cu[i]:cu[i + 1]] = np.arange(cu[i + 1] - cu[i]) + o
        x3 = x
    ro = tuple(cos.shape)
    p = L.sf_rope_params()
    L.sf_rope_params_init(ctypes.byref(p))
    p.q = call.tensor(x3, "x")
    p.cos = call.tensor(call.as_f32(cos, "cos"), "cos")
    p.sin = call.tensor(call.as_f32(sin, "sin"), "sin")
    pos = np.ascontiguousarray(pos)
    if call.device >= 0:  # to x's device, in x's kind (one small copy)
        pos = call._as_array(pos.tolist(), "positions")
    p.positions = call.tensor(call._as_array(pos, "positions"), "positions")
    p.rotary_dim = 2 * ro[-1] if len(ro) == 2 else 0
    p.style = L.SF_ROPE_GPTJ if interleaved else L.SF_ROPE_NEOX
    out = None
    if inplace:
        if hasattr(x3, "base") and x3 is not x and not np.shares_memory(x3, x):
            fail(L.SF_ERR_STRIDE, "%s: inplace needs x viewable as (tokens, nheads, headdim)" % op)
    else:
        out = call.empty(x3.shape, like=x)
        p.q_out = call.tensor(out, "out")
    call.run(L.sf_rope, p, backend)
    return x if inplace else out.reshape(shp)
