"""torch.autograd for mamba_chunk_scan_combined: forward by sf_ssd_fwd, backward
by sf_ssd_bwd.  The forward saves only its inputs; the backward recomputes the
chunk states (see sf_ssd_bwd in seqfuse.h)."""
import torch

from ._mamba import mamba_chunk_scan_combined, mamba_chunk_scan_combined_bwd

_GRAD_INPUTS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")


class _ChunkScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, chunk_size,
                dt_softplus, dt_limit, return_final_states, return_varlen_states, backend):
        kw = dict(D=D, z=z, dt_bias=dt_bias, initial_states=initial_states, seq_idx=seq_idx,
                  cu_seqlens=cu_seqlens, dt_softplus=dt_softplus, dt_limit=dt_limit)
        with torch.no_grad():
            res = mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size,
                                            return_final_states=return_final_states,
                                            return_varlen_states=return_varlen_states,
                                            backend=backend, **kw)
        ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens)
        ctx.cfg = (chunk_size, dt_softplus, dt_limit, return_final_states, return_varlen_states, backend)
        if not isinstance(res, tuple):
            return res
        # final/varlen states are outputs of their own: not views of each other
        return res

    @staticmethod
    def backward(ctx, dout, *dstates):
        x, dt, A, B, C, D, z, dt_bias, init, seq_idx, cu_seqlens = ctx.saved_tensors
        chunk_size, dt_softplus, dt_limit, ret_final, ret_varlen, backend = ctx.cfg
        if dout is None:
            dout = torch.zeros_like(x)
        dout = dout.contiguous()
        # the gradient of the states outputs, as one (nstates, H, P, N) f32
        dfinal = None
        if ret_varlen:
            dvar = dstates[-1]
            dlast = dstates[0] if ret_final else None
            if dvar is not None or dlast is not None:
                nst = cu_seqlens.shape[0] - 1
                dfinal = torch.zeros((nst,) + tuple(x.shape[2:]) + (B.shape[-1],), dtype=torch.float32,
                                     device=x.device) if dvar is None else dvar.float().clone()
                if dlast is not None and nst > 0:
                    dfinal[nst - 1] += dlast[0].float()
        elif ret_final and dstates and dstates[0] is not None:
            dfinal = dstates[0].float().contiguous()
        g = mamba_chunk_scan_combined_bwd(
            dout, x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, initial_states=init,
            seq_idx=seq_idx, cu_seqlens=cu_seqlens, dt_softplus=dt_softplus, dt_limit=dt_limit,
            dfinal_states=dfinal, backend=backend)
        ins = (x, dt, A, B, C, D, z, dt_bias, init)
        out = []
        for name, t in zip(_GRAD_INPUTS, ins):
            gt = g.get("d" + name)
            if t is None or gt is None or not ctx.needs_input_grad[len(out)]:
                out.append(None)
            else:
                out.append(gt.to(t.dtype))
        return tuple(out) + (None,) * 8


def chunk_scan_autograd(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens,
                        dt_softplus, dt_limit, return_final_states, return_varlen_states, backend):
    return _ChunkScan.apply(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, chunk_size,
                            dt_softplus, dt_limit, return_final_states, return_varlen_states, backend)
