"""Differentiable attention: flash_attn_func / flash_attn_varlen_func on torch
tensors that need gradients run our forward (sf_attn_fwd, keeping out and lse)
and, in the backward, sf_attn_bwd.

With torch.library.custom_op (torch >= 2.4) the pair is registered as the
opaque ops seqfuse::flash_attn_fwd / seqfuse::flash_attn_bwd with fake
(shape-only) implementations and an autograd formula, so torch.compile keeps
them as single nodes in its graph; older torch gets a torch.autograd.Function
around the same two calls.
"""
import ctypes

from . import _lib as L
from ._core import Call, as_flag, fail, kind_of
from ._lib import SF_ERR_UNSUPPORTED


class sf_attn_bwd_params(ctypes.Structure):
    _fields_ = [
        ("fwd", L.sf_attn_fwd_params),
        ("dout", L.sf_tensor),
        ("dq", L.sf_tensor), ("dk", L.sf_tensor), ("dv", L.sf_tensor),
        ("deterministic", ctypes.c_int),
        ("backend", ctypes.c_int),
    ]


sf_attn_bwd_params_init = L._decl("sf_attn_bwd_params_init", None, ctypes.POINTER(sf_attn_bwd_params))
sf_attn_bwd = L._decl("sf_attn_bwd", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(sf_attn_bwd_params))


def _scale_arg(scale):
    """The ops carry softmax_scale as a float; 0.0 stands for None (1/sqrt(d))."""
    return None if scale == 0.0 else scale


def attn_bwd(dout, q, k, v, out, lse, cu_seqlens_q=None, cu_seqlens_k=None, softmax_scale=None,
             causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
             backend="auto"):
    """dq, dk, dv of flash_attn_func (cu_seqlens None) or flash_attn_varlen_func
    for the output gradient dout, from the forward's out and lse (sf_attn_bwd).
    Any array kind the binding takes; gradients in q's dtype."""
    from ._attn import _attn_common
    op = "attn_bwd"
    call = Call(op, q, "q")
    p = sf_attn_bwd_params()
    sf_attn_bwd_params_init(ctypes.byref(p))
    f = p.fwd
    f.q = call.tensor(q, "q")
    f.k = call.tensor(k, "k")
    f.v = call.tensor(v, "v")
    f.out = call.tensor(out, "out")
    f.lse = call.tensor(lse, "lse")
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        fail(L.SF_ERR_NULL_POINTER, "%s: cu_seqlens_q and cu_seqlens_k go together" % op)
    if cu_seqlens_q is not None:
        f.cu_seqlens_q = call.tensor(call.as_i32(cu_seqlens_q, "cu_seqlens_q"), "cu_seqlens_q")
        f.cu_seqlens_k = call.tensor(call.as_i32(cu_seqlens_k, "cu_seqlens_k"), "cu_seqlens_k")
    _attn_common(call, f, 0.0, softmax_scale, causal, window_size, softcap, alibi_slopes)
    p.deterministic = as_flag(op, "deterministic", deterministic)
    p.dout = call.tensor(dout, "dout")
    dq = call.empty(tuple(q.shape), like=q)
    dk = call.empty(tuple(k.shape), like=k)
    dv = call.empty(tuple(v.shape), like=v)
    p.dq = call.tensor(dq, "dq")
    p.dk = call.tensor(dk, "dk")
    p.dv = call.tensor(dv, "dv")
    call.run(sf_attn_bwd, p, backend)
    return dq, dk, dv


def _fwd_impl(q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap, alibi, backend):
    from ._attn import _flash_fwd_plain
    return _flash_fwd_plain(q, k, v, cu_q, cu_k, _scale_arg(scale), causal, (wl, wr), softcap, alibi,
                            backend)


def _lse_shape(q, cu_q):
    return (q.shape[1], q.shape[0]) if cu_q is not None else (q.shape[0], q.shape[2], q.shape[1])


_ops = []  # [(fwd callable, is_custom_op)] once built


def _build_ops():
    import torch
    from typing import Optional, Tuple
    Tensor = torch.Tensor

    def setup_context(ctx, inputs, output):
        q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap, alibi, det, backend = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, alibi)
        ctx.args = (scale, causal, wl, wr, softcap, det, backend)

    if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
        @torch.library.custom_op("seqfuse::flash_attn_fwd", mutates_args=())
        def fwd_op(q: Tensor, k: Tensor, v: Tensor, cu_q: Optional[Tensor], cu_k: Optional[Tensor],
                   scale: float, causal: bool, wl: int, wr: int, softcap: float,
                   alibi: Optional[Tensor], deterministic: bool, backend: str) -> Tuple[Tensor, Tensor]:
            return _fwd_impl(q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap, alibi, backend)

        @fwd_op.register_fake
        def _(q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap, alibi, deterministic, backend):
            return torch.empty_like(q), q.new_empty(_lse_shape(q, cu_q), dtype=torch.float32)

        @torch.library.custom_op("seqfuse::flash_attn_bwd", mutates_args=())
        def bwd_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                   cu_q: Optional[Tensor], cu_k: Optional[Tensor], scale: float, causal: bool, wl: int,
                   wr: int, softcap: float, alibi: Optional[Tensor],
                   deterministic: bool, backend: str) -> Tuple[Tensor, Tensor, Tensor]:
            return attn_bwd(dout, q, k, v, out, lse, cu_q, cu_k, _scale_arg(scale), causal, (wl, wr),
                            softcap, alibi, deterministic, backend)

        @bwd_op.register_fake
        def _(dout, q, k, v, out, lse, cu_q, cu_k, scale, causal, wl, wr, softcap, alibi, deterministic,
              backend):
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

        def backward(ctx, dout, _dlse):
            q, k, v, out, lse, cu_q, cu_k, alibi = ctx.saved_tensors
            scale, causal, wl, wr, softcap, det, backend = ctx.args
            dq, dk, dv = bwd_op(dout.contiguous(), q, k, v, out, lse, cu_q, cu_k, scale, causal, wl, wr,
                                softcap, alibi, det, backend)
            return (dq, dk, dv) + (None,) * 10

        fwd_op.register_autograd(backward, setup_context=setup_context)
        _ops.append(fwd_op)
        return

    class Attn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap, alibi, det, backend):
            out, lse = _fwd_impl(q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap, alibi, backend)
            setup_context(ctx, (q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap, alibi, det, backend),
                          (out, lse))
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, _dlse):
            q, k, v, out, lse, cu_q, cu_k, alibi = ctx.saved_tensors
            scale, causal, wl, wr, softcap, det, backend = ctx.args
            dq, dk, dv = attn_bwd(dout.contiguous(), q, k, v, out, lse, cu_q, cu_k, _scale_arg(scale),
                                  causal, (wl, wr), softcap, alibi, det, backend)
            return (dq, dk, dv) + (None,) * 10

    _ops.append(Attn.apply)


def wants_autograd(q, k, v):
    """True for torch tensors when autograd records (a tensor requires grad)
    or torch.compile is tracing: then the forward goes through the op pair."""
    if kind_of(q) != "torch":
        return False
    import torch
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)()
    return compiling or (torch.is_grad_enabled() and any(
        getattr(t, "requires_grad", False) for t in (q, k, v)))


def flash_attn_autograd(q, k, v, cu_q, cu_k, dropout_p, softmax_scale, causal, window_size, softcap,
                        alibi_slopes, deterministic, backend="auto"):
    """(out, lse) through the differentiable op pair."""
    if not isinstance(dropout_p, (int, float)) or isinstance(dropout_p, bool) or dropout_p != 0:
        fail(SF_ERR_UNSUPPORTED, "flash_attn_func: dropout_p %r; seqfuse attention has no dropout "
                                 "(dropout_p must be 0)" % (dropout_p,))
    if not _ops:
        _build_ops()
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    if softmax_scale is not None and scale == 0.0:
        fail(L.SF_ERR_INVALID_ARG, "flash_attn_func: softmax_scale 0; give a finite nonzero scale or None")
    wl, wr = (int(w) for w in window_size)
    import torch
    if cu_q is not None:  # the ops take tensors: lists become int32 tensors beside q
        cu_q = torch.as_tensor(cu_q, device=q.device).to(torch.int32)
        cu_k = torch.as_tensor(cu_k, device=q.device).to(torch.int32)
    if alibi_slopes is not None and not isinstance(alibi_slopes, torch.Tensor):
        alibi_slopes = torch.as_tensor(alibi_slopes, dtype=torch.float32, device=q.device)
    return _ops[0](q, k, v, cu_q, cu_k, scale, bool(causal), wl, wr, float(softcap), alibi_slopes,
                   bool(deterministic), str(backend))
