"""Layer ops: causal_conv1d_fn, causal_conv1d_update (sf_conv1d_*) and
mamba_ssm's gated rmsnorm_fn."""
import ctypes

from . import _lib as L
from ._core import Call, as_flag, as_int, fail
from ._lib import SF_ERR_INVALID_ARG, SF_ERR_SHAPE, SF_ERR_DTYPE, SF_ERR_STRIDE, SF_ERR_UNSUPPORTED
from ._common import _array_shape, _as_float, _shape, kind_is_numpy


# ------------------------------------------------------------------ layer ops
# causal_conv1d (Dao-AILab causal-conv1d) and mamba_ssm's gated RMSNorm.
# The C API is channels-last (b, L, dim) with f32 weights and states; the
# helpers below describe the peers' layouts to it as views where possible.

class _CaiView:
    """A permuted or reshaped view of a __cuda_array_interface__ object
    (which has no view methods of its own): the same memory, other shape and
    byte strides.  Keeps the object alive."""

    def __init__(self, base, shape, strides):
        cai = dict(base.__cuda_array_interface__)
        cai["shape"] = tuple(int(n) for n in shape)
        cai["strides"] = tuple(int(s) for s in strides)
        self.__cuda_array_interface__ = cai
        self.base = base
        self.device = getattr(base, "device", None)

    @property
    def shape(self):
        return self.__cuda_array_interface__["shape"]


def _kind(obj):
    from ._core import kind_of
    return kind_of(obj)


def _itemsize(obj):
    if _kind(obj) == "torch":
        return obj.element_size()
    if hasattr(obj, "dtype") and hasattr(obj.dtype, "itemsize"):
        return obj.dtype.itemsize
    return L.sf_dtype_size({"<f4": L.SF_F32, "<f2": L.SF_F16, "<i4": L.SF_I32,
                            "<i8": L.SF_I64}.get(obj.__cuda_array_interface__["typestr"], 0)) or 1


def _estrides(obj):
    """Strides in elements, for any of the array kinds."""
    if _kind(obj) == "torch":
        return tuple(obj.stride())
    isz = _itemsize(obj)
    if hasattr(obj, "strides") and obj.strides is not None and _kind(obj) != "cai":
        return tuple(s // isz for s in obj.strides)
    cai = obj.__cuda_array_interface__
    bs = cai.get("strides")
    if bs is None:
        acc, out = 1, []
        for n in reversed(cai["shape"]):
            out.append(acc)
            acc *= n
        return tuple(reversed(out))
    return tuple(s // isz for s in bs)


def _permute(obj, axes):
    k = _kind(obj)
    if k == "torch":
        return obj.permute(*axes)
    if k in ("numpy", "cupy"):
        return obj.transpose(axes)
    shp = obj.__cuda_array_interface__["shape"]
    isz = _itemsize(obj)
    st = _estrides(obj)
    return _CaiView(obj, [shp[a] for a in axes], [st[a] * isz for a in axes])


def _copy_into(call, dst, src, name):
    """dst[...] = src with a dtype cast (dst, src of the call's kind)."""
    k = _kind(dst)
    if tuple(dst.shape) != tuple(src.shape):
        fail(SF_ERR_SHAPE, "%s: %s has shape %s, expected %s" %
             (call.op, name, tuple(dst.shape), tuple(src.shape)))
    if k == "torch":
        dst.copy_(src)
    elif k == "numpy":
        import numpy as np
        np.copyto(dst, src.astype(dst.dtype), casting="unsafe")
    elif k == "cupy":
        dst[...] = src
    else:
        fail(SF_ERR_UNSUPPORTED, "%s: %s is a bare __cuda_array_interface__ object of a dtype "
                                 "other than float32; seqfuse cannot cast into it (pass float32, "
                                 "or a torch / cupy array)" % (call.op, name))


def _is_f32(obj):
    k = _kind(obj)
    if k == "torch":
        import torch
        return obj.dtype == torch.float32
    if k == "cai":
        return obj.__cuda_array_interface__["typestr"] == "<f4"
    return obj.dtype.kind == "f" and obj.dtype.itemsize == 4


def _cast_like(t, like):
    """t (float32) cast to like's dtype; t itself when like is float32 or a
    bare __cuda_array_interface__ object."""
    if _is_f32(like) or _kind(like) == "cai":
        return t
    if _kind(t) == "torch":
        return t.to(like.dtype)
    return t.astype(like.dtype)


def _silu_flag(call, activation):
    if activation is None:
        return 0
    if activation in ("silu", "swish"):
        return 1
    fail(SF_ERR_INVALID_ARG, "%s: activation %r; use None, 'silu' or 'swish'" %
         (call.op, activation))


def _writable(call, obj, name):
    if kind_is_numpy(obj) and not obj.flags.writeable:
        fail(SF_ERR_INVALID_ARG, "%s: %s is read-only; it is written in place" % (call.op, name))


def causal_conv1d_fn(x, weight, bias=None, initial_states=None, return_final_states=False,
                     final_states_out=None, activation=None, cu_seqlens=None, backend="auto", *,
                     seq_idx=None):
    """Causal depthwise conv1d, like causal_conv1d.causal_conv1d_fn.

    x (batch, dim, seqlen), float32/float16/bfloat16; weight (dim, width)
    with width 2, 3 or 4; bias (dim,); activation None, "silu" or "swish"
    (both SiLU).  initial_states (batch, dim, width-1): the width-1 inputs
    before the first token, oldest first.  Returns out (batch, dim, seqlen)
    in x's dtype, or (out, final_states) when return_final_states, with
    final_states (batch, dim, width-1) the last width-1 inputs (initial
    states / zeros in front for sequences shorter than width-1).

    Mapping onto sf_conv1d_fwd (channels-last (b, L, dim), unit inner
    stride):
      - x whose dim axis has stride 1 (a "channels-last" view, e.g.
        x_bld.transpose(1, 2)) is described to C as (b, L, dim) with its own
        strides: no copy, and out is returned channels-last too (a
        (batch, dim, seqlen) view of a (batch, seqlen, dim) buffer).
      - any other x (e.g. contiguous (batch, dim, seqlen)) is COPIED to
        channels-last first, and out is copied back to a contiguous
        (batch, dim, seqlen) array, as causal_conv1d returns for such x:
        correct, but two extra passes over memory.  Bare
        __cuda_array_interface__ objects are not copied (SF_ERR_STRIDE).
      - weight, bias and initial_states are used as float32 (converted when
        given in another float dtype; the C API takes f32).
      - final_states are computed in float32 and returned in x's dtype, as
        causal_conv1d does.  final_states_out (only with
        return_final_states, as in causal_conv1d) is written in place:
        directly when float32, otherwise through a float32 copy.
      - cu_seqlens (nseq+1,) int, batch 1: sequences packed along seqlen;
        no window crosses a boundary; initial_states / final_states are then
        per sequence, (nseq, dim, width-1).  (Not in causal_conv1d; its
        seq_idx is not supported: pass cu_seqlens instead.)
    Width 5 or more, or 1: SeqfuseError SF_ERR_UNSUPPORTED.
    Note: causal_conv1d's 4th positional parameter is seq_idx; here it is
    initial_states (seq_idx is keyword-only and must be None), so pass the
    optional arguments by keyword when swapping one for the other.
    """
    op = "causal_conv1d_fn"
    call = Call(op, x, "x")
    silu = _silu_flag(call, activation)
    if seq_idx is not None:
        fail(SF_ERR_UNSUPPORTED, "%s: seq_idx is not supported; describe packed sequences with "
                                 "cu_seqlens (nseq+1,) instead" % op)
    b, dim, Ln = _shape(call, x, "x", 3, "(batch, dim, seqlen)")
    W = _shape(call, weight, "weight", 2, "(dim, width)")[1]
    copied = False
    if dim > 1 and _estrides(x)[1] != 1:
        k = call.kind
        if k == "torch":
            x = x.transpose(1, 2).contiguous().transpose(1, 2)
        elif k in ("numpy", "cupy"):
            mod = __import__(k)
            x = mod.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)
        else:
            fail(SF_ERR_STRIDE, "%s: x (batch, dim, seqlen) has stride %d along dim; seqfuse "
                                "needs a channels-last view (stride 1 along dim) and does not "
                                "copy bare __cuda_array_interface__ objects" %
                 (op, _estrides(x)[1]))
        copied = True

    p = L.sf_conv1d_params()
    L.sf_conv1d_params_init(ctypes.byref(p))
    p.x = call.tensor(_permute(x, (0, 2, 1)), "x")
    p.weight = call.tensor(call.as_f32(weight, "weight"), "weight")
    p.bias = call.tensor(call.as_f32(bias, "bias"), "bias")
    p.initial_state = call.tensor(call.as_f32(initial_states, "initial_states"),
                                  "initial_states")
    nseq = b
    if cu_seqlens is not None:
        cu = call.as_index(cu_seqlens, "cu_seqlens")
        nseq = max(int(cu.shape[0]) - 1, 0) if len(cu.shape) == 1 else b
        p.cu_seqlens = call.tensor(cu, "cu_seqlens")
    out_l = call.empty((b, Ln, dim), like=x)
    p.out = call.tensor(out_l, "out")
    fin = None
    direct = False
    if return_final_states and final_states_out is not None:
        want = (nseq, dim, max(W - 1, 0))
        if tuple(final_states_out.shape) != want:
            fail(SF_ERR_SHAPE, "%s: final_states_out has shape %s, expected %s" %
                 (op, tuple(final_states_out.shape), want))
    if return_final_states:
        direct = (final_states_out is not None and _kind(final_states_out) == call.kind
                  and _is_f32(final_states_out))
        if direct:
            _writable(call, final_states_out, "final_states_out")
            fin = final_states_out
        else:
            fin = call.empty((nseq, dim, max(W - 1, 0)))
        p.final_state = call.tensor(fin, "final_states")
    p.silu = silu
    call.run(L.sf_conv1d_fwd, p, backend)

    out = _permute(out_l, (0, 2, 1))
    if copied:  # back to x's original (contiguous) layout
        out = out.contiguous() if call.kind == "torch" else __import__(
            call.kind).ascontiguousarray(out)
    if not return_final_states:
        return out
    if final_states_out is not None:
        if not direct:
            _writable(call, final_states_out, "final_states_out")
            _copy_into(call, final_states_out, fin, "final_states_out")
        return out, final_states_out
    return out, _cast_like(fin, x)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None,
                         conv_state_indices=None, backend="auto", *, cache_seqlens=None):
    """Decode step of the causal conv1d, like causal_conv1d.causal_conv1d_update.

    x (batch, dim), or (batch, dim, seqlen) for a few tokens at once (run as
    seqlen single-token steps); conv_state (nslots, dim, width-1), the last
    width-1 inputs of each sequence, oldest first, updated IN PLACE (shifted
    left, the new input appended); weight (dim, width), width 2..4;
    bias (dim,); activation None / "silu" / "swish".
    conv_state_indices (batch,) int (converted to int32): the conv_state
    slot of each sequence (continuous batching); a negative entry (-1, vLLM's
    PAD_SLOT_ID) is padding: skipped, its output zero.  Without indices
    nslots must equal batch.  Returns out shaped like x, in x's dtype.

    Mapping onto sf_conv1d_update: the C state is float32.  A float32
    conv_state is updated directly; a float16/bfloat16 one (causal_conv1d
    keeps it in x's dtype) goes through a float32 copy of the whole state
    that is written back (exact for the untouched slots).  weight and bias
    are used as float32.  conv_state must have exactly width-1 columns
    (causal_conv1d also allows longer states: SF_ERR_SHAPE here), and
    cache_seqlens (circular buffers) is not supported.
    """
    op = "causal_conv1d_update"
    call = Call(op, x, "x")
    silu = _silu_flag(call, activation)
    if cache_seqlens is not None:
        fail(SF_ERR_UNSUPPORTED, "%s: cache_seqlens (a circular conv_state) is not supported; "
                                 "seqfuse shifts conv_state (nslots, dim, width-1)" % op)
    xs = tuple(x.shape) if hasattr(x, "shape") else tuple(x.__cuda_array_interface__["shape"])
    if len(xs) not in (2, 3):
        fail(SF_ERR_SHAPE, "%s: x has shape %s; expected (batch, dim) or (batch, dim, seqlen)" %
             (op, xs))
    _writable(call, conv_state, "conv_state")
    state = conv_state
    sk = _kind(conv_state)
    if sk is not None and not _is_f32(conv_state):
        if sk != call.kind or sk == "cai":
            fail(SF_ERR_DTYPE, "%s: conv_state must be float32, or a float16/bfloat16 array of "
                               "x's kind (then updated through a float32 copy)" % op)
        state = conv_state.float() if sk == "torch" else conv_state.astype("float32")

    p = L.sf_conv1d_update_params()
    L.sf_conv1d_update_params_init(ctypes.byref(p))
    p.conv_state = call.tensor(state, "conv_state")
    p.weight = call.tensor(call.as_f32(weight, "weight"), "weight")
    p.bias = call.tensor(call.as_f32(bias, "bias"), "bias")
    p.state_idx = call.tensor(call.as_i32(conv_state_indices, "conv_state_indices"),
                              "conv_state_indices")
    p.silu = silu
    out = call.empty(xs, like=x)
    if len(xs) == 2:
        p.x = call.tensor(x, "x")
        p.out = call.tensor(out, "out")
        call.run(L.sf_conv1d_update, p, backend)
    else:
        if call.kind == "cai":
            fail(SF_ERR_UNSUPPORTED, "%s: x (batch, dim, seqlen) needs a numpy, torch or cupy "
                                     "array (bare __cuda_array_interface__: pass (batch, dim))" %
                 op)
        for t in range(xs[2]):  # each token a view (batch, dim) with stride seqlen
            p.x = call.tensor(x[:, :, t], "x")
            p.out = call.tensor(out[:, :, t], "out")
            call.run(L.sf_conv1d_update, p, backend)
    if state is not conv_state:
        _copy_into(call, conv_state, state, "conv_state")
    return out


def _rows_view(call, obj, name, rows, D):
    """obj (..., D) as (rows, D): the last stride must be 1 (the C kernel
    reads rows contiguously); leading dims are merged as a view when their
    strides allow, else copied (numpy / torch / cupy reshape)."""
    shp = _array_shape(call, obj, name)
    st = _estrides(obj)
    if D > 1 and rows > 0 and st[-1] != 1:  # an empty array's strides are arbitrary
        fail(SF_ERR_STRIDE, "%s: %s needs a unit stride along its last dim (got %d); make it "
                            "contiguous" % (call.op, name, st[-1]))
    if len(shp) == 2:
        return obj
    k = _kind(obj)
    if rows == 0 and k != "cai":
        return obj.reshape(0, D)
    if k != "cai":
        return obj.reshape(rows, D)
    # A bare interface: merge the leading dims only when one stride steps them all.
    lead = [(n, s) for n, s in zip(shp[:-1], st[:-1]) if n != 1]
    for (n0, s0), (n1, s1) in zip(lead, lead[1:]):
        if s0 != s1 * n1:
            fail(SF_ERR_STRIDE, "%s: %s of shape %s cannot be viewed as (rows, %d) (its leading "
                                "dims are not evenly strided); make it contiguous" %
                 (call.op, name, shp, D))
    rs = lead[-1][1] if lead else D
    isz = _itemsize(obj)
    return _CaiView(obj, (rows, D), (rs * isz, (st[-1] if st else 1) * isz))


def rmsnorm_fn(x, weight, bias=None, z=None, eps=1e-6, group_size=None, norm_before_gate=True,
               backend="auto"):
    """Gated (grouped) RMSNorm, like mamba_ssm.ops.triton.layernorm_gated.rmsnorm_fn.

    x (..., D) of any rank >= 1, float32/float16/bfloat16, with unit stride
    along D (SF_ERR_STRIDE otherwise; mamba_ssm would copy), leading dims
    merged into rows (a view when their strides allow, else a copy);
    z like x, optional; weight (D,) used as float32; eps > 0; group_size
    divides D (None: D, one group).  Per group of group_size channels:
      norm_before_gate=True:  out = x / rms(x) * weight * silu(z)
      norm_before_gate=False: h = x * silu(z);  out = h / rms(h) * weight
    with rms(v) = sqrt(mean(v^2) + eps); without z a plain RMSNorm.
    Returns out shaped like x, in x's dtype (contiguous).  bias must be None
    (SF_ERR_UNSUPPORTED otherwise): seqfuse's norm is an RMSNorm, which in
    mamba_ssm has no bias either.
    """
    op = "rmsnorm_fn"
    call = Call(op, x, "x")
    if bias is not None:
        fail(SF_ERR_UNSUPPORTED, "%s: bias must be None; seqfuse implements the RMSNorm "
                                 "(mamba_ssm's rmsnorm_fn takes no bias in practice; a "
                                 "layer norm with bias is not supported)" % op)
    xs = tuple(x.shape) if hasattr(x, "shape") else tuple(x.__cuda_array_interface__["shape"])
    if len(xs) < 1:
        fail(SF_ERR_SHAPE, "%s: x is a scalar; expected (..., D)" % op)
    D = xs[-1]
    rows = 1
    for n in xs[:-1]:
        rows *= n
    if z is not None:
        zs = _array_shape(call, z, "z")
        if zs != xs:
            fail(SF_ERR_SHAPE, "%s: z has shape %s, expected x's shape %s" % (op, zs, xs))

    p = L.sf_rmsnorm_gated_params()
    L.sf_rmsnorm_gated_params_init(ctypes.byref(p))
    p.x = call.tensor(_rows_view(call, x, "x", rows, D), "x")
    if z is not None:
        p.z = call.tensor(_rows_view(call, call._as_array(z, "z"), "z", rows, D), "z")
    p.weight = call.tensor(call.as_f32(weight, "weight"), "weight")
    out = call.empty((rows, D), like=x)
    p.out = call.tensor(out, "out")
    if group_size is None:
        p.group_size = 0
    else:
        p.group_size = as_int(op, "group_size", group_size, 1)
    p.norm_before_gate = as_flag(op, "norm_before_gate", norm_before_gate)
    p.eps = _as_float(op, "eps", eps)
    call.run(L.sf_rmsnorm_gated, p, backend)
    return out if len(xs) == 2 else out.reshape(xs)
