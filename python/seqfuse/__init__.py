"""seqfuse: fused Mamba-2 (SSD) and attention kernels, Python binding.

A ctypes binding of libseqfuse (no compiled extension).  The library is
looked for at $SEQFUSE_LIB, then in this package's folder, then in build*/
folders of the source tree, then by ctypes.util.find_library("seqfuse").

Functions take numpy arrays (host memory, run on the CPU backends), torch
tensors (CPU or CUDA) or other objects with __cuda_array_interface__, and
return outputs of the same kind on the same device.  On a GPU the call is
asynchronous on torch's current stream (cupy: cupy's current stream), like
any torch op.  Forward only: outputs carry no autograd history.

Every failure raises SeqfuseError (a RuntimeError) with .status (the
SF_ERR_* code), .status_name and .detail.
"""
import ctypes
import math

from . import _lib as L
from ._core import (SeqfuseError, Call, fail, get_ctx, last_ctx, set_num_threads,
                    get_num_threads)
from ._lib import (SF_OK, SF_ERR_INVALID_ARG, SF_ERR_NULL_POINTER, SF_ERR_SHAPE, SF_ERR_DTYPE,
                   SF_ERR_DEVICE, SF_ERR_STRIDE, SF_ERR_ALIGNMENT, SF_ERR_TOO_LARGE,
                   SF_ERR_UNSUPPORTED, SF_ERR_OUT_OF_MEMORY, SF_ERR_CUDA, SF_ERR_NO_DEVICE,
                   SF_ERR_INDEX, SF_ERR_INTERNAL)

__all__ = [
    "SeqfuseError", "mamba_chunk_scan_combined", "selective_state_update", "flash_attn_func",
    "flash_attn_varlen_func", "version", "has_cuda", "has_cuda_build", "has_openmp",
    "cuda_device_count", "cuda_device_name", "set_num_threads", "get_num_threads",
    "last_backend", "library_path",
]

library_path = L.lib_path
__version__ = L.sf_version_string().decode()


# ------------------------------------------------------------------ helpers

def version():
    """The library's version string ("0.1.0")."""
    return L.sf_version_string().decode()


def has_cuda_build():
    """True when the loaded library was compiled with the CUDA backend."""
    return bool(L.sf_has_cuda_build())


def has_cuda():
    """True when the library has the CUDA backend and sees at least one GPU."""
    return bool(L.sf_has_cuda_build()) and L.sf_cuda_device_count() > 0


def has_openmp():
    return bool(L.sf_has_openmp())


def cuda_device_count():
    """CUDA devices the library sees (0 in a build without CUDA)."""
    return int(L.sf_cuda_device_count())


def cuda_device_name(device=0):
    buf = ctypes.create_string_buffer(256)
    st = L.sf_cuda_device_name(int(device), buf, len(buf))
    if st != SF_OK:
        fail(st, "cuda_device_name: no CUDA device %d (%d seen)" % (device, cuda_device_count()))
    return buf.value.decode(errors="replace")


def last_backend():
    """Name of the backend ("ref", "cpu", "cuda") that served this thread's
    last successful op call, or None before any call."""
    c = last_ctx()
    if c is None:
        return None
    return L.sf_backend_name(L.sf_ctx_last_backend(c.handle)).decode()


def _shape(call, obj, name, rank, what):
    """Shape of an array, for allocating outputs before the library has
    validated anything: only the rank is checked here."""
    shp = tuple(obj.shape) if hasattr(obj, "shape") else tuple(
        obj.__cuda_array_interface__["shape"])
    if len(shp) != rank:
        fail(SF_ERR_SHAPE, "%s: %s has shape %s; expected rank %d %s" %
             (call.op, name, shp, rank, what))
    return shp


def _stride(obj, i):
    if hasattr(obj, "stride") and callable(obj.stride):  # torch: elements
        return obj.stride(i)
    if hasattr(obj, "strides") and obj.strides is not None:
        return obj.strides[i]
    s = obj.__cuda_array_interface__.get("strides")
    return None if s is None else s[i]


def _untie(call, obj, name, keep_dims, what):
    """mamba_ssm passes per-head values broadcast over trailing dims with
    stride 0 (A as (H, P, N), dt as (b, H, P), dt_bias as (H, P)).  Take the
    leading `keep_dims` dims when the rest is such a broadcast; anything
    truly per-channel is beyond the C API."""
    if obj is None or not hasattr(obj, "shape") or len(obj.shape) <= keep_dims:
        return obj
    for i in range(keep_dims, len(obj.shape)):
        if obj.shape[i] > 1 and _stride(obj, i) != 0:
            fail(SF_ERR_UNSUPPORTED,
                 "%s: %s has shape %s with distinct values along dim %d; seqfuse takes %s "
                 "(a broadcast with stride 0 along the extra dims is accepted)" %
                 (call.op, name, tuple(obj.shape), i, what))
    return obj[(slice(None),) * keep_dims + (0,) * (len(obj.shape) - keep_dims)]


def _dt_limit(call, dt_limit):
    try:
        lo, hi = dt_limit
        return float(lo), float(hi)
    except (TypeError, ValueError):
        fail(SF_ERR_INVALID_ARG, "%s: dt_limit must be a pair (min, max), got %r" %
             (call.op, dt_limit))


# ------------------------------------------------------------------ Mamba-2

def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                              initial_states=None, seq_idx=None, cu_seqlens=None,
                              dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False,
                              backend="auto"):
    """Mamba-2 chunked scan (SSD forward), like mamba_ssm's function.

    x (b, L, H, P), dt (b, L, H) same dtype as x, A (H), B/C (b, L, G, N),
    D (H) or (H, P), z like x, dt_bias (H); A, D, dt_bias are used as float32
    (converted if given in another float dtype).  chunk_size 64, 128 or 256.
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
    """
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
    p.x = call.tensor(x, "x")
    p.dt = call.tensor(dt, "dt")
    p.A = call.tensor(call.as_f32(A, "A"), "A")
    p.B = call.tensor(B, "B")
    p.C = call.tensor(C, "C")
    p.D = call.tensor(call.as_f32(D, "D"), "D")
    p.z = call.tensor(z, "z")
    p.dt_bias = call.tensor(call.as_f32(dt_bias, "dt_bias"), "dt_bias")
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
    try:
        p.chunk_size = int(chunk_size)
    except (TypeError, ValueError, OverflowError):
        fail(SF_ERR_INVALID_ARG, "%s: chunk_size %r is not an int" % (op, chunk_size))
    p.dt_softplus = 1 if dt_softplus else 0
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

    state (nslots, H, P, N) float32, updated IN PLACE; x (b, H, P); dt (b, H)
    same dtype as x; A (H); B/C (b, G, N); D (H) or (H, P); z like x;
    dt_bias (H).  mamba_ssm's broadcast forms are accepted too: A (H, P, N),
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
    p.x = call.tensor(x, "x")
    p.dt = call.tensor(dt, "dt")
    p.A = call.tensor(call.as_f32(A, "A"), "A")
    p.B = call.tensor(B, "B")
    p.C = call.tensor(C, "C")
    p.D = call.tensor(call.as_f32(D, "D"), "D")
    p.z = call.tensor(z, "z")
    p.dt_bias = call.tensor(call.as_f32(dt_bias, "dt_bias"), "dt_bias")
    p.state_idx = call.tensor(call.as_i32(state_batch_indices, "state_batch_indices"),
                              "state_batch_indices")
    out = call.empty(xs, like=x)
    p.out = call.tensor(out, "out")
    p.dt_softplus = 1 if dt_softplus else 0
    p.dt_min, p.dt_max = _dt_limit(call, dt_limit)
    call.run(L.sf_ssd_step, p, backend)
    return out


def kind_is_numpy(obj):
    import numpy as np
    return isinstance(obj, np.ndarray)


# ------------------------------------------------------------------ attention

def _attn_common(call, p, softmax_scale, causal, window_size, dropout_p):
    if dropout_p:
        fail(SF_ERR_UNSUPPORTED, "%s: dropout_p %r; seqfuse attention is inference-only "
                                 "(dropout_p must be 0)" % (call.op, dropout_p))
    if softmax_scale is None:
        p.softmax_scale = 0.0  # the library's "1/sqrt(head_dim)"
    else:
        s = float(softmax_scale)
        if s == 0.0 or not math.isfinite(s):
            fail(SF_ERR_INVALID_ARG, "%s: softmax_scale %r; give a finite nonzero scale or None"
                 % (call.op, softmax_scale))
        p.softmax_scale = s
    p.causal = 1 if causal else 0
    try:
        wl, wr = window_size
        p.window_left, p.window_right = int(wl), int(wr)
    except (TypeError, ValueError):
        fail(SF_ERR_INVALID_ARG, "%s: window_size must be a pair (left, right), got %r" %
             (call.op, window_size))


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1),
                    return_lse=False, backend="auto", *, dropout_p=0.0):
    """softmax(q k^T * scale + mask) v, like flash_attn's flash_attn_func.

    q (b, Lq, H, d), k/v (b, Lk, Hkv, d) with Hkv dividing H; float32,
    float16 or bfloat16; d <= 256.  causal and window_size are bottom-right
    aligned when Lq != Lk (flash-attn 2.1+).  softmax_scale None means
    1/sqrt(d) (0 is refused: the C API reads 0 as "default").  Returns out (b, Lq, H, d), or (out, lse) with lse (b, H, Lq)
    float32 when return_lse.  Note: flash_attn's 4th positional parameter is
    dropout_p; here it is keyword-only (and must be 0).
    """
    op = "flash_attn_func"
    call = Call(op, q, "q")
    qs = _shape(call, q, "q", 4, "(batch, seqlen_q, nheads, head_dim)")
    p = L.sf_attn_fwd_params()
    L.sf_attn_fwd_params_init(ctypes.byref(p))
    p.q = call.tensor(q, "q")
    p.k = call.tensor(k, "k")
    p.v = call.tensor(v, "v")
    _attn_common(call, p, softmax_scale, causal, window_size, dropout_p)
    out = call.empty(qs, like=q)
    p.out = call.tensor(out, "out")
    lse = None
    if return_lse:
        lse = call.empty((qs[0], qs[2], qs[1]))
        p.lse = call.tensor(lse, "lse")
    call.run(L.sf_attn_fwd, p, backend)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                           max_seqlen_k=None, softmax_scale=None, causal=False,
                           window_size=(-1, -1), return_lse=False, backend="auto", *,
                           dropout_p=0.0):
    """Attention over packed sequences, like flash_attn_varlen_func.

    q (total_q, H, d), k/v (total_k, Hkv, d); cu_seqlens_q/_k (b+1,) int
    (converted to int32).  max_seqlen_q/_k are accepted for compatibility
    and not needed (the library derives them).  Returns out (total_q, H, d),
    or (out, lse) with lse (H, total_q) float32 when return_lse.
    """
    op = "flash_attn_varlen_func"
    call = Call(op, q, "q")
    qs = _shape(call, q, "q", 3, "(total_q, nheads, head_dim)")
    p = L.sf_attn_fwd_params()
    L.sf_attn_fwd_params_init(ctypes.byref(p))
    p.q = call.tensor(q, "q")
    p.k = call.tensor(k, "k")
    p.v = call.tensor(v, "v")
    if cu_seqlens_q is None or cu_seqlens_k is None:
        fail(SF_ERR_NULL_POINTER, "%s: cu_seqlens_q and cu_seqlens_k are both required" % op)
    p.cu_seqlens_q = call.tensor(call.as_i32(cu_seqlens_q, "cu_seqlens_q"), "cu_seqlens_q")
    p.cu_seqlens_k = call.tensor(call.as_i32(cu_seqlens_k, "cu_seqlens_k"), "cu_seqlens_k")
    _attn_common(call, p, softmax_scale, causal, window_size, dropout_p)
    out = call.empty(qs, like=q)
    p.out = call.tensor(out, "out")
    lse = None
    if return_lse:
        lse = call.empty((qs[1], qs[0]))
        p.lse = call.tensor(lse, "lse")
    call.run(L.sf_attn_fwd, p, backend)
    return (out, lse) if return_lse else out
