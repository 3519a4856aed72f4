"""mamba_ssm.ops.triton.layernorm_gated, served by seqfuse.

rmsnorm_fn / layernorm_fn(is_rms_norm=True): seqfuse.rmsnorm_fn (the gated, grouped
RMSNorm) with the arguments as given; a bias is passed on and refused by seqfuse
(SF_ERR_UNSUPPORTED).  layernorm_fn(is_rms_norm=False), the mean-subtracting layer norm,
has no seqfuse op: refused with SF_ERR_UNSUPPORTED here.

Backward: seqfuse's norm is forward-only.  The output comes out of an autograd.Function
whose backward recomputes the norm in float32 with PyTorch and differentiates that — the
gradients are PyTorch's, the forward is ours; the peer's test counts as a forward check.

rms_norm_ref: mamba_ssm's own reference, loaded from the peer's file by path at import
(bench/peers/peer_refs.py); never a copy of it.
"""
import torch
import torch.nn.functional as F

import seqfuse
from seqfuse import SF_ERR_UNSUPPORTED, SeqfuseError

from peer_refs import peer_function

rms_norm_ref = peer_function("mamba/mamba_ssm/ops/triton/layernorm_gated.py", "rms_norm_ref")


def _rmsnorm_f32(x, weight, z, eps, group_size, norm_before_gate):
    """The gated RMSNorm in float32 (x, z (..., D), weight (D,)); for the backward only."""
    D = x.shape[-1]
    g = D if group_size is None else group_size
    if z is not None and not norm_before_gate:
        x = x * F.silu(z)
    xg = x.reshape(*x.shape[:-1], D // g, g)
    out = (xg * torch.rsqrt(xg.square().mean(dim=-1, keepdim=True) + eps)).reshape(x.shape) * weight
    if z is not None and norm_before_gate:
        out = out * F.silu(z)
    return out


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, z, eps, group_size, norm_before_gate):
        out = seqfuse.rmsnorm_fn(x, weight, bias, z=z, eps=eps, group_size=group_size,
                                 norm_before_gate=norm_before_gate)
        ctx.save_for_backward(x, weight, z)
        ctx.args = (eps, group_size, norm_before_gate)
        return out

    @staticmethod
    def backward(ctx, dout):
        x, weight, z = ctx.saved_tensors
        eps, group_size, nbg = ctx.args
        with torch.enable_grad():
            ts = (x, weight) + ((z,) if z is not None else ())
            ins = [t.detach().float().requires_grad_() for t in ts]
            out = _rmsnorm_f32(ins[0], ins[1], ins[2] if z is not None else None, eps, group_size,
                               nbg)
            gs = torch.autograd.grad(out, ins, dout.float())
        dx, dw = gs[0].to(x.dtype), gs[1].to(weight.dtype)
        dz = gs[2].to(z.dtype) if z is not None else None
        return dx, dw, None, dz, None, None, None


def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    return _RMSNorm.apply(x, weight, bias, z, eps, group_size, norm_before_gate)


def layernorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True,
                 is_rms_norm=False):
    if not is_rms_norm:
        raise SeqfuseError(SF_ERR_UNSUPPORTED, "layernorm_fn: the mean-subtracting layer norm "
                                               "(is_rms_norm=False) is not a seqfuse op; "
                                               "RMSNorm only")
    return rmsnorm_fn(x, weight, bias, z=z, eps=eps, group_size=group_size,
                      norm_before_gate=norm_before_gate)
