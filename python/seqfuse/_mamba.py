"""Mamba-2: mamba_chunk_scan_combined and selective_state_update (sf_ssd_fwd,
sf_ssd_step)."""
import ctypes

from . import _lib as L
from ._core import Call, as_flag, as_int, fail
from ._lib import SF_ERR_INVALID_ARG, SF_ERR_SHAPE
from ._common import _shape, _untie, _dt_limit, kind_is_numpy


# ------------------------------------------------------------------ Mamba-2

def _unit_inner(call, t):
    """t, or a contiguous copy of it when its last dim is strided (the kernels
    read rows of unit stride).  mamba_ssm takes such views too, e.g. x and
    z as column slices of a transposed conv1d output in its Mamba2 layer,
    and copies those it cannot read in place."""
    if t is None or len(getattr(t, "shape", ())) == 0 or t.shape[-1] == 1:
        return t
    if call.kind == "torch":
        return t if t.stride(-1) == 1 else t.contiguous()
    return t if t.strides[-1] == t.itemsize else __import__(call.kind).ascontiguousarray(t)


def _set_ssd_inputs(call, p, x, dt, A, B, C, D, z, dt_bias):
    """The inputs sf_ssd_fwd_params and sf_ssd_step_params share; tensors
    whose last dim is strided are passed as contiguous copies."""
    x, dt, B, C, D, z = (_unit_inner(call, t) for t in (x, dt, B, C, D, z))
    p.x = call.tensor(x, "x")
    p.dt = call.tensor(dt, "dt")
    p.A = call.tensor(call.as_f32(A, "A"), "A")
    p.B = call.tensor(B, "B")
    p.C = call.tensor(C, "C")
    p.D = call.tensor(call.as_f32(D, "D"), "D")
    p.z = call.tensor(z, "z")
    p.dt_bias = call.tensor(call.as_f32(dt_bias, "dt_bias"), "dt_bias")


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                              initial_states=None, seq_idx=None, cu_seqlens=None,
                              dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False,
                              backend="auto"):
    """Mamba-2 chunked scan (SSD forward), like mamba_ssm's function.

    x (b, L, H, P), dt (b, L, H), A (H), B/C (b, L, G, N), D (H) or (H, P),
    z like x, dt_bias (H).  dt, B and C are each x's dtype or float32 (as
    mamba_ssm accepts; passed through as they are); A, D, dt_bias are used as
    float32 (converted if given in another float dtype).  chunk_size 64, 128
    or 256.
    seq_idx (b, L) int (converted to int32): the state restarts where it
    changes.  cu_seqlens (nseq+1,) with b == 1: sequences packed along L,
    each starting from initial_states[i] (shape (nseq, H, P, N)) or zeros.

    Returns out, or (out, final_states) when return_final_states:
      final_states is (b, H, P, N) float32, the state after each row's last
      token; with cu_seqlens it is PER SEQUENCE, (nseq, H, P, N).
    return_varlen_states=True (needs cu_seqlens), as in mamba_ssm, returns
    (out, varlen_states), or (out, final_states, varlen_states) together with
    return_final_states; varlen_states is (nseq, H, P, N) and final_states
    is then (1, H, P, N), the state at the end of the packed row.
    Given both seq_idx and cu_seqlens (as mamba_ssm callers do), cu_seqlens
    defines the sequences; for host arrays seq_idx is checked to change
    exactly at the cu_seqlens boundaries.
    Differentiable under torch autograd (sf_ssd_bwd) when grad mode is on and
    any of x, dt, A, B, C, D, z, dt_bias, initial_states requires grad.
    """
    if _wants_grad(x, dt, A, B, C, D, z, dt_bias, initial_states):
        from ._mamba_autograd import chunk_scan_autograd
        return chunk_scan_autograd(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx,
                                   cu_seqlens, dt_softplus, dt_limit, return_final_states,
                                   return_varlen_states, backend)
    op = "mamba_chunk_scan_combined"
    call = Call(op, x, "x")
    xs = _shape(call, x, "x", 4, "(batch, seqlen, nheads, headdim)")
    Bs = _shape(call, B, "B", 4, "(batch, seqlen, ngroups, dstate)")
    b, Ln, H, P = xs
    N = Bs[3]
    if return_varlen_states and cu_seqlens is None:
        fail(SF_ERR_INVALID_ARG, "%s: return_varlen_states needs cu_seqlens" % op)

    p = L.sf_ssd_fwd_params()
    L.sf_ssd_fwd_params_init(ctypes.byref(p))
    _set_ssd_inputs(call, p, x, dt, A, B, C, D, z, dt_bias)
    p.initial_states = call.tensor(initial_states, "initial_states")
    nstates = b
    if cu_seqlens is not None:
        cu = call.as_index(cu_seqlens, "cu_seqlens")
        nstates = int(cu.shape[0]) - 1 if len(cu.shape) == 1 else b
        if seq_idx is not None:
            _check_seq_idx_matches(call, call.as_i32(seq_idx, "seq_idx"), cu, Ln)
        p.cu_seqlens = call.tensor(cu, "cu_seqlens")
    elif seq_idx is not None:
        p.seq_idx = call.tensor(call.as_i32(seq_idx, "seq_idx"), "seq_idx")
    out = call.empty(xs, like=x)
    p.out = call.tensor(out, "out")
    states = None
    if return_final_states or return_varlen_states:
        states = call.empty((max(nstates, 0), H, P, N))
        p.final_states = call.tensor(states, "final_states")
    p.chunk_size = as_int(op, "chunk_size", chunk_size)
    p.dt_softplus = as_flag(op, "dt_softplus", dt_softplus)
    p.dt_min, p.dt_max = _dt_limit(call, dt_limit)
    call.run(L.sf_ssd_fwd, p, backend)

    if return_varlen_states:
        if return_final_states:
            last = states[max(nstates - 1, 0):nstates]
            return out, (last.clone() if hasattr(last, "clone") else last.copy()), states
        return out, states
    if return_final_states:
        return out, states
    return out


def _wants_grad(*ts):
    """torch grad mode on and some input tensor requires grad."""
    for t in ts:
        if t is not None and getattr(t, "requires_grad", False):
            import torch
            return torch.is_grad_enabled()
    return False


def mamba_chunk_scan_combined_bwd(dout, x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                                  initial_states=None, seq_idx=None, cu_seqlens=None,
                                  dt_softplus=False, dt_limit=(0.0, float("inf")),
                                  dfinal_states=None, deterministic=False, backend="auto"):
    """Gradients of mamba_chunk_scan_combined (sf_ssd_bwd) given dout (like
    out) and optionally dfinal_states (like its final states: (b, H, P, N),
    or (nseq, H, P, N) with cu_seqlens; float32).  Returns a dict with dx,
    ddt (with respect to the raw dt), dA, dB, dC (summed over each group's
    heads) and, for the inputs given, dD, dz, ddt_bias, dinitial_states.
    dx, ddt, dB, dC, dz take their inputs' dtypes; dA, dD, ddt_bias and
    dinitial_states are float32."""
    op = "mamba_chunk_scan_combined_bwd"
    call = Call(op, x, "x")
    xs = _shape(call, x, "x", 4, "(batch, seqlen, nheads, headdim)")
    Ln = xs[1]
    q = L.sf_ssd_bwd_params()
    L.sf_ssd_bwd_params_init(ctypes.byref(q))
    p = q.fwd
    _set_ssd_inputs(call, p, x, dt, A, B, C, D, z, dt_bias)
    p.initial_states = call.tensor(initial_states, "initial_states")
    if cu_seqlens is not None:
        cu = call.as_index(cu_seqlens, "cu_seqlens")
        if seq_idx is not None:
            _check_seq_idx_matches(call, call.as_i32(seq_idx, "seq_idx"), cu, Ln)
        p.cu_seqlens = call.tensor(cu, "cu_seqlens")
    elif seq_idx is not None:
        p.seq_idx = call.tensor(call.as_i32(seq_idx, "seq_idx"), "seq_idx")
    p.chunk_size = as_int(op, "chunk_size", chunk_size)
    p.dt_softplus = as_flag(op, "dt_softplus", dt_softplus)
    p.dt_min, p.dt_max = _dt_limit(call, dt_limit)
    q.dout = call.tensor(dout, "dout")
    q.dfinal_states = call.tensor(dfinal_states, "dfinal_states")
    g = {"dx": call.empty(xs, like=x), "ddt": call.empty(tuple(dt.shape), like=dt),
         "dA": call.empty(tuple(A.shape[:1])),
         "dB": call.empty(tuple(B.shape), like=B), "dC": call.empty(tuple(C.shape), like=C)}
    if D is not None:
        g["dD"] = call.empty(tuple(D.shape))
    if z is not None:
        g["dz"] = call.empty(tuple(z.shape), like=z)
    if dt_bias is not None:
        g["ddt_bias"] = call.empty(tuple(dt_bias.shape))
    if initial_states is not None:
        g["dinitial_states"] = call.empty(tuple(initial_states.shape))
    for k, v in g.items():
        setattr(q, k, call.tensor(v, k))
    q.deterministic = as_flag(op, "deterministic", deterministic)
    call.run(L.sf_ssd_bwd, q, backend)
    return g


def _check_seq_idx_matches(call, si, cu, Ln):
    """Both seq_idx and cu_seqlens: the C API takes one; cu_seqlens is kept.
    On the host, refuse a seq_idx that would have cut the row elsewhere."""
    import numpy as np
    if call.device >= 0:
        return
    a = np.asarray(si.cpu() if hasattr(si, "cpu") else si)
    c = np.asarray(cu.cpu() if hasattr(cu, "cpu") else cu).astype(np.int64)
    if a.ndim != 2 or a.shape[0] != 1 or a.shape[1] != Ln:
        fail(SF_ERR_SHAPE, "%s: seq_idx has shape %s, expected (1, %d) with cu_seqlens" %
             (call.op, a.shape, Ln))
    cuts = set(int(t) for t in np.nonzero(a[0, 1:] != a[0, :-1])[0] + 1)
    bounds = set(int(v) for v in c[1:-1] if 0 < v < Ln)
    if cuts != bounds:
        fail(SF_ERR_INVALID_ARG, "%s: seq_idx and cu_seqlens disagree on where sequences start "
                                 "(seq_idx changes at %s, cu_seqlens at %s)" %
             (call.op, sorted(cuts)[:8], sorted(bounds)[:8]))


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None,
                           dt_limit=(0.0, float("inf")), backend="auto"):
    """One Mamba-2 decode step, like mamba_ssm's selective_state_update.

    state (nslots, H, P, N) float32, float16 or bfloat16 (whatever x's dtype),
    updated IN PLACE in float32 and stored rounded to its dtype; x (b, H, P);
    dt (b, H); A (H); B/C (b, G, N); D (H) or (H, P); z like x; dt_bias (H).
    dt, B and C are each x's dtype or float32 (mamba_ssm's own tests pass
    float32 B, C with a 16-bit x and state); they are passed through as they
    are.  mamba_ssm's broadcast forms are accepted too: A (H, P, N),
    dt (b, H, P), dt_bias (H, P) with stride 0 along the extra dims.
    state_batch_indices (b,) int (converted to int32): slot of each sequence;
    a negative entry is padding (skipped, output zero).  Returns out (b, H, P).
    """
    op = "selective_state_update"
    call = Call(op, x, "x")
    xs = _shape(call, x, "x", 3, "(batch, nheads, headdim)")
    if kind_is_numpy(state) and not state.flags.writeable:
        fail(SF_ERR_INVALID_ARG, "%s: state is read-only; it is updated in place" % op)
    A = _untie(call, A, "A", 1, "A (nheads,)")
    dt = _untie(call, dt, "dt", 2, "dt (batch, nheads)")
    dt_bias = _untie(call, dt_bias, "dt_bias", 1, "dt_bias (nheads,)")

    p = L.sf_ssd_step_params()
    L.sf_ssd_step_params_init(ctypes.byref(p))
    p.state = call.tensor(state, "state")
    _set_ssd_inputs(call, p, x, dt, A, B, C, D, z, dt_bias)
    p.state_idx = call.tensor(call.as_i32(state_batch_indices, "state_batch_indices"),
                              "state_batch_indices")
    out = call.empty(xs, like=x)
    p.out = call.tensor(out, "out")
    p.dt_softplus = as_flag(op, "dt_softplus", dt_softplus)
    p.dt_min, p.dt_max = _dt_limit(call, dt_limit)
    call.run(L.sf_ssd_step, p, backend)
    return out
