"""mamba_ssm.ops.triton.selective_state_update, served by seqfuse.

selective_state_update: mamba_ssm's signature, mapped onto
seqfuse.selective_state_update.  The Mamba-1 forms (state (b, dim, N), x (b, dim),
A (dim, N), B / C (b, N), ...) get a heads axis of one, exactly as mamba_ssm's own
wrapper does before its kernel, and the output loses it again; every tensor is passed
on with its dtype and strides (16-bit state with f32 B / C, stride-0 broadcasts of A,
dt, dt_bias, D).  What seqfuse cannot do it refuses itself with SF_ERR_UNSUPPORTED
(a per-channel A: one value per (head, P, N) element, as in the untied and Mamba-1 cases).

selective_state_update_ref: mamba_ssm's own reference, loaded from the peer's file by
path at import (bench/peers/peer_refs.py); never a copy of it.
"""
import seqfuse

from peer_refs import peer_function

selective_state_update_ref = peer_function(
    "mamba/mamba_ssm/ops/triton/selective_state_update.py", "selective_state_update_ref")


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None):
    """state (nslots, H, P, N) or (nslots, dim, N), updated in place; returns out shaped like x."""
    has_heads = state.dim() > 3
    if not has_heads:  # Mamba-1 layout: one head of P = dim channels, as mamba_ssm's wrapper does
        state, x, dt, B, C = (t.unsqueeze(1) for t in (state, x, dt, B, C))
        A = A.unsqueeze(0)
        D = D.unsqueeze(0) if D is not None else None
        z = z.unsqueeze(1) if z is not None else None
        dt_bias = dt_bias.unsqueeze(0) if dt_bias is not None else None
    out = seqfuse.selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                         dt_softplus=dt_softplus,
                                         state_batch_indices=state_batch_indices)
    return out if has_heads else out.squeeze(1)
