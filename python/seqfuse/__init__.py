"""seqfuse: fused Mamba-2 (SSD), causal conv1d, gated RMSNorm and attention
kernels, Python binding.

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
from ._core import (SeqfuseError, Call, as_flag, as_int, fail, get_ctx, last_ctx, set_num_threads,
                    get_num_threads)
from ._lib import (SF_OK, SF_ERR_INVALID_ARG, SF_ERR_NULL_POINTER, SF_ERR_SHAPE, SF_ERR_DTYPE,
                   SF_ERR_DEVICE, SF_ERR_STRIDE, SF_ERR_ALIGNMENT, SF_ERR_TOO_LARGE,
                   SF_ERR_UNSUPPORTED, SF_ERR_OUT_OF_MEMORY, SF_ERR_CUDA, SF_ERR_NO_DEVICE,
                   SF_ERR_INDEX, SF_ERR_INTERNAL)

__all__ = [
    "SeqfuseError", "mamba_chunk_scan_combined", "selective_state_update", "flash_attn_func",
    "flash_attn_varlen_func", "flash_attn_with_kvcache", "causal_conv1d_fn", "causal_conv1d_update", "rmsnorm_fn",
    "version", "has_cuda", "has_cuda_build", "has_openmp",
    "cuda_device_count", "cuda_device_name", "set_num_threads", "get_num_threads",
    "last_backend", "library_path", "rms_norm", "add_rms_norm", "layer_norm", "swiglu",
    "apply_rotary_emb",
]

from ._fused import rms_norm, add_rms_norm, layer_norm, swiglu, apply_rotary_emb  # noqa: E402

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


def _array_shape(call, obj, name):
    """The shape of an array argument; anything that is not an array (a
    list, a string, a number) is SeqfuseError, as the library would say."""
    if hasattr(obj, "shape"):
        return tuple(obj.shape)
    if hasattr(obj, "__cuda_array_interface__"):
        return tuple(obj.__cuda_array_interface__["shape"])
    fail(SF_ERR_INVALID_ARG, "%s: %s is a %s; pass a numpy array, a torch tensor or an object with "
                             "__cuda_array_interface__" % (call.op, name, type(obj).__name__))


def _as_float(op, name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
        fail(SF_ERR_INVALID_ARG, "%s: %s must be a number, got %r" % (op, name, v))
    try:
        return float(v)
    except (TypeError, ValueError):
        fail(SF_ERR_INVALID_ARG, "%s: %s must be a number, got %r" % (op, name, v))


def _shape(call, obj, name, rank, what):
    """Shape of an array, for allocating outputs before the library has
    validated anything: only the rank is checked here."""
    shp = _array_shape(call, obj, name)
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

def _set_ssd_inputs(call, p, x, dt, A, B, C, D, z, dt_bias):
    """The inputs sf_ssd_fwd_params and sf_ssd_step_params share."""
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


def kind_is_numpy(obj):
    import numpy as np
    return isinstance(obj, np.ndarray)


# ------------------------------------------------------------------ attention

def _attn_common(call, p, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes):
    if not isinstance(dropout_p, (int, float)) or isinstance(dropout_p, bool) or dropout_p != 0:
        fail(SF_ERR_UNSUPPORTED, "%s: dropout_p %r; seqfuse attention is inference-only "
                                 "(dropout_p must be 0)" % (call.op, dropout_p))
    if softcap is None or isinstance(softcap, bool) or not isinstance(softcap, (int, float)) \
            or not math.isfinite(softcap) or softcap < 0:
        fail(SF_ERR_INVALID_ARG, "%s: softcap %r; give 0 (off) or a finite positive cap"
             % (call.op, softcap))
    p.softcap = float(softcap)
    if alibi_slopes is not None:
        p.alibi_slopes = call.tensor(call.as_f32(alibi_slopes, "alibi_slopes"), "alibi_slopes")
    if softmax_scale is None:
        p.softmax_scale = 0.0  # the library's "1/sqrt(head_dim)"
    else:
        try:
            s = float(softmax_scale)
        except (TypeError, ValueError):
            s = float("nan")
        if s == 0.0 or not math.isfinite(s):
            fail(SF_ERR_INVALID_ARG, "%s: softmax_scale %r; give a finite nonzero scale or None"
                 % (call.op, softmax_scale))
        p.softmax_scale = s
    p.causal = as_flag(call.op, "causal", causal)
    if isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__") or len(window_size) != 2:
        fail(SF_ERR_INVALID_ARG, "%s: window_size must be a pair (left, right), got %r" %
             (call.op, window_size))
    p.window_left = as_int(call.op, "window_size[0]", window_size[0])
    p.window_right = as_int(call.op, "window_size[1]", window_size[1])


def _attn_result(out, lse, return_lse, return_attn_probs):
    if return_attn_probs:  # flash_attn's (out, softmax_lse, S_dmask): no probabilities kept
        return out, lse, None
    return (out, lse) if return_lse else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                    return_lse=False, backend="auto"):
    """softmax(q k^T * scale + mask) v, with flash_attn's flash_attn_func signature.

    q (b, Lq, H, d), k/v (b, Lk, Hkv, d) with Hkv dividing H; float32,
    float16 or bfloat16; d <= 256.  causal and window_size are bottom-right
    aligned when Lq != Lk (flash-attn 2.1+).  softmax_scale None means
    1/sqrt(d) (0 is refused: the C API reads 0 as "default").  dropout_p must
    be 0 (inference only).  softcap > 0 caps the scaled scores at
    softcap * tanh(s / softcap); alibi_slopes (H,) or (b, H) float32 adds
    -slope * |i + Lk - Lq - j| to the score of query i and key j (after the
    cap), as flash_attn does.  deterministic is accepted (the forward always
    is).  Returns out (b, Lq, H,
    d); with return_attn_probs (out, lse, None) as flash_attn does, with
    return_lse (out, lse); lse (b, H, Lq) float32.
    """
    op = "flash_attn_func"
    call = Call(op, q, "q")
    qs = _shape(call, q, "q", 4, "(batch, seqlen_q, nheads, head_dim)")
    p = L.sf_attn_fwd_params()
    L.sf_attn_fwd_params_init(ctypes.byref(p))
    p.q = call.tensor(q, "q")
    p.k = call.tensor(k, "k")
    p.v = call.tensor(v, "v")
    _attn_common(call, p, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    as_flag(op, "deterministic", deterministic)
    want_lse = as_flag(op, "return_lse", return_lse) or as_flag(op, "return_attn_probs", return_attn_probs)
    out = call.empty(qs, like=q)
    p.out = call.tensor(out, "out")
    lse = None
    if want_lse:
        lse = call.empty((qs[0], qs[2], qs[1]))
        p.lse = call.tensor(lse, "lse")
    call.run(L.sf_attn_fwd, p, backend)
    return _attn_result(out, lse, return_lse, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                           max_seqlen_k=None, dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, *, return_lse=False,
                           backend="auto"):
    """Attention over packed sequences, with flash_attn's flash_attn_varlen_func signature.

    q (total_q, H, d), k/v (total_k, Hkv, d); cu_seqlens_q/_k (b+1,) int
    (converted to int32).  max_seqlen_q/_k are accepted for compatibility
    and not needed (the library derives them).  block_table (paged K/V) is not
    supported here.  Returns out (total_q, H, d); with return_attn_probs
    (out, lse, None), with return_lse (out, lse); lse (H, total_q) float32.
    """
    op = "flash_attn_varlen_func"
    call = Call(op, q, "q")
    qs = _shape(call, q, "q", 3, "(total_q, nheads, head_dim)")
    if block_table is not None:
        fail(SF_ERR_UNSUPPORTED, "%s: block_table (paged K/V) is not supported here" % op)
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if m is not None:
            as_int(op, name, m, 0)
    p = L.sf_attn_fwd_params()
    L.sf_attn_fwd_params_init(ctypes.byref(p))
    p.q = call.tensor(q, "q")
    p.k = call.tensor(k, "k")
    p.v = call.tensor(v, "v")
    if cu_seqlens_q is None or cu_seqlens_k is None:
        fail(SF_ERR_NULL_POINTER, "%s: cu_seqlens_q and cu_seqlens_k are both required" % op)
    p.cu_seqlens_q = call.tensor(call.as_i32(cu_seqlens_q, "cu_seqlens_q"), "cu_seqlens_q")
    p.cu_seqlens_k = call.tensor(call.as_i32(cu_seqlens_k, "cu_seqlens_k"), "cu_seqlens_k")
    _attn_common(call, p, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    as_flag(op, "deterministic", deterministic)
    want_lse = as_flag(op, "return_lse", return_lse) or as_flag(op, "return_attn_probs", return_attn_probs)
    out = call.empty(qs, like=q)
    p.out = call.tensor(out, "out")
    lse = None
    if want_lse:
        lse = call.empty((qs[1], qs[0]))
        p.lse = call.tensor(lse, "lse")
    call.run(L.sf_attn_fwd, p, backend)
    return _attn_result(out, lse, return_lse, return_attn_probs)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            backend="auto"):
    """Attention over a KV cache, with flash_attn's flash_attn_with_kvcache signature.

    q (b, Lq, H, d).  With block_table (b, max_blocks) int: a paged cache,
    k_cache/v_cache (num_blocks, page_size, Hkv, d), page_size a power of two
    from 1 to 256.  Without it: k_cache/v_cache (b, seqlen_cache, Hkv, d),
    served as one page per sequence, so seqlen_cache must be a power of two
    up to 256 (else SF_ERR_UNSUPPORTED; use a block table for other sizes).
    cache_seqlens: int (every sequence) or (b,) int tensor of tokens already
    cached; None means full (max_blocks * page_size, or seqlen_cache).
    k, v (b, Lnew, Hkv, d), when given, are first written into the cache in
    place at positions cache_seqlens .. cache_seqlens + Lnew - 1 (sf_kv_append;
    cache_seqlens itself is not updated), then q attends to
    cache_seqlens + Lnew keys per sequence (sf_attn_paged); causal and
    window_size are bottom-right aligned as in flash_attn.  num_splits is
    accepted and ignored (the library chooses the split).  rotary_cos/_sin,
    cache_batch_idx, cache_leftpad and alibi_slopes are not supported
    (SF_ERR_UNSUPPORTED unless None).  Returns out (b, Lq, H, d), or
    (out, lse) with return_softmax_lse; lse (b, H, Lq) float32.  Arrays stay
    where they are: numpy on the CPU, torch tensors on their device.
    """
    op = "flash_attn_with_kvcache"
    call = Call(op, q, "q")
    qs = _shape(call, q, "q", 4, "(batch, seqlen_q, nheads, head_dim)")
    for name, val in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin),
                      ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad),
                      ("alibi_slopes", alibi_slopes)):
        if val is not None:
            fail(SF_ERR_UNSUPPORTED, "%s: %s is not supported (give None)" % (op, name))
    as_int(op, "num_splits", num_splits, 0)
    as_flag(op, "rotary_interleaved", rotary_interleaved)
    if (k is None) != (v is None):
        fail(SF_ERR_NULL_POINTER, "%s: give both k and v, or neither" % op)
    b = qs[0]
    kcs = _shape(call, k_cache, "k_cache", 4, "(num_blocks, page_size, nheads_kv, head_dim)"
                 if block_table is not None else "(batch, seqlen_cache, nheads_kv, head_dim)")
    if block_table is None:
        lc = kcs[1]
        if kcs[0] != b:
            fail(SF_ERR_SHAPE, "%s: k_cache has batch %d but q has %d" % (op, kcs[0], b))
        if lc < 1 or lc > 256 or lc & (lc - 1):
            fail(SF_ERR_UNSUPPORTED,
                 "%s: without block_table the cache is served as one page per sequence, so "
                 "seqlen_cache (k_cache.shape[1] = %d) must be a power of two from 1 to 256; "
                 "pass a paged cache with block_table for other sizes" % (op, lc))
        bt = call.as_i32([[i] for i in range(b)], "block_table")
        cap = lc
    else:
        bt = call.as_i32(block_table, "block_table")
        bts = _shape(call, bt, "block_table", 2, "(batch, max_blocks_per_seq)")
        cap = bts[1] * kcs[1]
    if cache_seqlens is None:
        cs = call.as_i32([cap] * b, "cache_seqlens")
    elif hasattr(cache_seqlens, "__index__") and not hasattr(cache_seqlens, "shape"):
        cs = call.as_i32([as_int(op, "cache_seqlens", cache_seqlens)] * b, "cache_seqlens")
    else:
        cs = call.as_i32(cache_seqlens, "cache_seqlens")
    seqlens = cs
    if k is not None:
        ks = _shape(call, k, "k", 4, "(batch, seqlen_new, nheads_kv, head_dim)")
        a = L.sf_kv_append_params()
        L.sf_kv_append_params_init(ctypes.byref(a))
        a.k_cache = call.tensor(k_cache, "k_cache")
        a.v_cache = call.tensor(v_cache, "v_cache")
        a.k = call.tensor(k, "k")
        a.v = call.tensor(v, "v")
        a.block_table = call.tensor(bt, "block_table")
        a.cache_seqlens = call.tensor(cs, "cache_seqlens")
        call.run(L.sf_kv_append, a, backend)
        if ks[1]:  # computed where cache_seqlens lives (no device round trip)
            seqlens = call.as_i32(cs + ks[1], "seqlens")
    p = L.sf_attn_paged_params()
    L.sf_attn_paged_params_init(ctypes.byref(p))
    p.q = call.tensor(q, "q")
    p.k_cache = call.tensor(k_cache, "k_cache")
    p.v_cache = call.tensor(v_cache, "v_cache")
    p.block_table = call.tensor(bt, "block_table")
    p.seqlens = call.tensor(seqlens, "seqlens")
    _attn_common(call, p, 0.0, softmax_scale, causal, window_size, softcap, None)
    want_lse = as_flag(op, "return_softmax_lse", return_softmax_lse)
    out = call.empty(qs, like=q)
    p.out = call.tensor(out, "out")
    lse = None
    if want_lse:
        lse = call.empty((qs[0], qs[2], qs[1]))
        p.lse = call.tensor(lse, "lse")
    call.run(L.sf_attn_paged, p, backend)
    return (out, lse) if want_lse else out


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


# ------------------------------------------------------------------ paged cache object

class _CudaView:
    """A __cuda_array_interface__ over library memory, owning a reference to
    the cache so torch's tensor keeps the memory alive."""

    def __init__(self, owner, ptr, shape, typestr):
        self._owner = owner
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "version": 3, "strides": None}


_KV_DTYPES = {"float32": L.SF_F32, "float16": L.SF_F16, "bfloat16": L.SF_BF16}


class KVCache:
    """A paged KV cache owned by the library (sf_kv_cache): per layer a K and a
    V pool (num_pages, page_size, nheads_kv, head_dim), one free list of pages,
    and max_seqs sequence slots of at most max_pages_per_seq pages.

    device -1 keeps it in host memory (pools and tables are numpy arrays; f32,
    f16 or bf16 through ml_dtypes); a CUDA device keeps it on that GPU (torch
    tensors; f16 or bf16).  Views stay valid while the KVCache lives (each
    holds a reference to it).

        cache = seqfuse.KVCache(1024, 16, 8, 128, "bfloat16", num_layers=32, max_seqs=64,
                                max_pages_per_seq=256, device=0)
        k_cache, v_cache = cache.pools(layer)
        cache.resize(seq, new_length)          # pages from / back to the free list
        block_table, seqlens = cache.tables()  # int32, copied to the cache's memory
    """

    def __init__(self, num_pages, page_size=16, nheads_kv=1, head_dim=128, dtype="bfloat16", num_layers=1,
                 max_seqs=1, max_pages_per_seq=None, device=-1):
        op = "KVCache"
        name = getattr(dtype, "name", None) or str(dtype).replace("torch.", "")
        if name not in _KV_DTYPES:
            fail(SF_ERR_DTYPE, "%s: dtype %r; float32, float16 or bfloat16" % (op, dtype))
        self.device = as_int(op, "device", device, -1)
        self._ctx = _core_ctx(self.device)
        d = L.sf_kv_cache_desc()
        d.num_pages = as_int(op, "num_pages", num_pages, 1, 2 ** 31 - 1)
        d.page_size = as_int(op, "page_size", page_size, 0, 256)
        d.nheads_kv = as_int(op, "nheads_kv", nheads_kv, 1)
        d.head_dim = as_int(op, "head_dim", head_dim, 1, 256)
        d.dtype = _KV_DTYPES[name]
        d.num_layers = as_int(op, "num_layers", num_layers, 1)
        d.max_seqs = as_int(op, "max_seqs", max_seqs, 1)
        mp = max_pages_per_seq if max_pages_per_seq is not None else -(-int(num_pages) // max(1, int(max_seqs)))
        d.max_pages_per_seq = as_int(op, "max_pages_per_seq", mp, 1)
        self._dtype = name
        self._desc = d
        h = ctypes.c_void_p()
        st = L.sf_kv_cache_create(self._ctx.handle, ctypes.byref(d), ctypes.byref(h))
        if st != SF_OK:
            fail(st, L.sf_ctx_last_error(self._ctx.handle).decode(errors="replace"))
        self._h = h.value

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            try:
                L.sf_kv_cache_destroy(h)
            except Exception:  # interpreter shutdown
                pass

    def _check(self, st):
        if st != SF_OK:
            fail(st, L.sf_ctx_last_error(self._ctx.handle).decode(errors="replace"))

    def _view(self, t, dtype):
        shape = tuple(t.shape[i] for i in range(t.rank))
        n = 1
        for e in shape:
            n *= e
        if self.device < 0:
            import numpy as np
            item = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4}[dtype]
            buf = (ctypes.c_char * (n * item)).from_address(t.data)
            buf._owner = self  # the numpy view's base keeps the cache alive
            a = np.frombuffer(buf, dtype=np.uint8)
            if dtype == "bfloat16":
                import ml_dtypes
                return a.view(ml_dtypes.bfloat16).reshape(shape)
            return a.view(np.dtype(dtype)).reshape(shape)
        import torch
        typestr = {"float32": "<f4", "float16": "<f2", "bfloat16": "<i2", "int32": "<i4"}[dtype]
        x = torch.as_tensor(_CudaView(self, t.data, shape, typestr), device="cuda:%d" % self.device)
        return x.view(torch.bfloat16) if dtype == "bfloat16" else x

    def pools(self, layer=0):
        """(k_cache, v_cache) of `layer`: views of the library's pools."""
        k, v = L.sf_tensor(), L.sf_tensor()
        self._check(L.sf_kv_cache_pools(self._h, as_int("KVCache.pools", "layer", layer), ctypes.byref(k),
                                        ctypes.byref(v)))
        return self._view(k, self._dtype), self._view(v, self._dtype)

    def resize(self, seq, length):
        """Slot `seq` holds `length` tokens from now on (pages taken or given back)."""
        op = "KVCache.resize"
        self._check(L.sf_kv_cache_resize(self._h, as_int(op, "seq", seq), as_int(op, "length", length, 0, 2 ** 62)))

    def length(self, seq):
        return int(L.sf_kv_cache_length(self._h, as_int("KVCache.length", "seq", seq)))

    @property
    def free_pages(self):
        return int(L.sf_kv_cache_free_pages(self._h))

    def tables(self):
        """(block_table (max_seqs, max_pages_per_seq), seqlens (max_seqs)) int32,
        copied to the cache's memory now; the same buffers every call."""
        bt, ln = L.sf_tensor(), L.sf_tensor()
        self._check(L.sf_kv_cache_tables(self._h, ctypes.byref(bt), ctypes.byref(ln)))
        return self._view(bt, "int32"), self._view(ln, "int32")


def _core_ctx(device):
    """A context of its own for a cache: its memory outlives any thread's or stream's context."""
    from ._core import _Ctx
    return _Ctx(device)
