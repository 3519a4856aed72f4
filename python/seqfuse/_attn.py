"""Attention: flash_attn_func, flash_attn_varlen_func and flash_attn_with_kvcache
(sf_attn_fwd, sf_kv_append, sf_attn_paged)."""
import ctypes
import math

from . import _lib as L
import numpy as np

from ._core import Call, as_flag, as_int, fail, kind_of
from ._lib import SF_ERR_INVALID_ARG, SF_ERR_NULL_POINTER, SF_ERR_SHAPE, SF_ERR_UNSUPPORTED
from ._common import _array_shape, _shape, _stride
from . import _attn_grad


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


def _attn_run(call, fn, p, backend, out_shape, like, lse_shape):
    """Allocates out (like q) and, when lse_shape is given, the float32 lse,
    runs fn on p and returns (out, lse or None)."""
    out = call.empty(out_shape, like=like)
    p.out = call.tensor(out, "out")
    lse = None
    if lse_shape is not None:
        lse = call.empty(lse_shape)
        p.lse = call.tensor(lse, "lse")
    call.run(fn, p, backend)
    return out, lse


def _attn_result(out, lse, return_lse, return_attn_probs):
    if return_attn_probs:  # flash_attn's (out, softmax_lse, S_dmask): no probabilities kept
        return out, lse, None
    return (out, lse) if return_lse else out


def _flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
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
    cap), as flash_attn does.  deterministic goes to the backward (the
    forward always is).  Returns out (b, Lq, H,
    d); with return_attn_probs (out, lse, None) as flash_attn does, with
    return_lse (out, lse); lse (b, H, Lq) float32.

    Differentiable on torch tensors that require grad: sf_attn_bwd in the
    backward, an opaque op pair under torch.compile (_attn_grad.py).
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
    out, lse = _attn_run(call, L.sf_attn_fwd, p, backend, qs, q, (qs[0], qs[2], qs[1]) if want_lse else None)
    return _attn_result(out, lse, return_lse, return_attn_probs)


def _flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
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
    Differentiable on torch tensors, as flash_attn_func.
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
    out, lse = _attn_run(call, L.sf_attn_fwd, p, backend, qs, q, (qs[1], qs[0]) if want_lse else None)
    return _attn_result(out, lse, return_lse, return_attn_probs)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                    return_lse=False, backend="auto"):
    if _attn_grad.wants_autograd(q, k, v):
        out, lse = _attn_grad.flash_attn_autograd(q, k, v, None, None, dropout_p, softmax_scale, causal,
                                                  window_size, softcap, alibi_slopes, deterministic,
                                                  backend)
        return _attn_result(out, lse, return_lse, return_attn_probs)
    return _flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                            deterministic, return_attn_probs, return_lse=return_lse, backend=backend)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                           max_seqlen_k=None, dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, *, return_lse=False,
                           backend="auto"):
    if block_table is None and cu_seqlens_q is not None and cu_seqlens_k is not None \
            and _attn_grad.wants_autograd(q, k, v):
        out, lse = _attn_grad.flash_attn_autograd(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p,
                                                  softmax_scale, causal, window_size, softcap,
                                                  alibi_slopes, deterministic, backend)
        return _attn_result(out, lse, return_lse, return_attn_probs)
    return _flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                   dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                   deterministic, return_attn_probs, block_table, return_lse=return_lse,
                                   backend=backend)


flash_attn_func.__doc__ = _flash_attn_func.__doc__
flash_attn_varlen_func.__doc__ = _flash_attn_varlen_func.__doc__


def _flash_fwd_plain(q, k, v, cu_q, cu_k, softmax_scale, causal, window_size, softcap, alibi_slopes,
                     backend):
    """(out, lse) of the forward alone (the differentiable ops' forward)."""
    kw = dict(softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
              alibi_slopes=alibi_slopes, return_lse=True, backend=backend)
    if cu_q is None:
        return _flash_attn_func(q, k, v, **kw)
    return _flash_attn_varlen_func(q, k, v, cu_q, cu_k, **kw)


def _kvcache_rope(call, cos, sin, interleaved):
    """sf_rope_params of flash_attn's rotary_cos/_sin tables (float32)."""
    r = L.sf_rope_params()
    L.sf_rope_params_init(ctypes.byref(r))
    c = call.as_f32(cos, "rotary_cos")
    sn = call.as_f32(sin, "rotary_sin")
    r.cos = call.tensor(c, "rotary_cos")
    r.sin = call.tensor(sn, "rotary_sin")
    ro = tuple(c.shape)
    r.rotary_dim = 2 * ro[1] if len(ro) == 2 else 0  # a bad rank: the library names it
    r.style = L.SF_ROPE_GPTJ if interleaved else L.SF_ROPE_NEOX
    call.keep.append(r)
    return r


def _kvcache_rope_q(call, q, qs, cs, rot, per_token, backend):
    """q rotated into a new array: query i of sequence b at cache_seqlens[b]
    + i (per_token), else every query of b at cache_seqlens[b].  The
    positions are made beside cache_seqlens, in its kind and on its device."""
    b, lq = qs[0], qs[1]
    k = kind_of(cs)
    if k == "torch":  # on the host or a GPU: device ops only, no synchronisation
        import torch
        pos = cs.to(torch.int64).reshape(b, 1)
        if per_token:
            pos = pos + torch.arange(lq, dtype=torch.int64, device=pos.device)
        pos = pos.expand(b, lq).reshape(-1).contiguous()
    elif k in ("numpy", "cupy"):  # cupy mirrors numpy, on cs's device
        if k == "numpy":
            xp = np
        else:
            import cupy as xp
        pos = cs.astype(xp.int64).reshape(b, 1)
        if per_token:
            pos = pos + xp.arange(lq, dtype=xp.int64)
        pos = xp.ascontiguousarray(xp.broadcast_to(pos, (b, lq)).reshape(-1))
    else:
        fail(SF_ERR_UNSUPPORTED, "%s: rotary_cos/rotary_sin need cache_seqlens as a numpy, torch "
                                 "or cupy array (the query positions are made beside it)" % call.op)
    call.keep.append(pos)
    q3 = q.reshape(b * lq, qs[2], qs[3])
    out = call.empty((b * lq, qs[2], qs[3]), like=q)
    r = L.sf_rope_params()
    L.sf_rope_params_init(ctypes.byref(r))
    r.q = call.tensor(q3, "q")
    r.q_out = call.tensor(out, "q_out")
    r.positions = call.tensor(pos, "positions")
    r.cos, r.sin = rot.cos, rot.sin
    r.rotary_dim, r.style = rot.rotary_dim, rot.style
    call.run(L.sf_rope, r, backend)
    return out.reshape(qs)


def _i64(a):
    """An integer array of any supported kind as int64 (no overflow in the
    table arithmetic below)."""
    if kind_of(a) == "torch":
        import torch
        return a.to(torch.int64)
    return a.astype("int64")


def _ramp(call, like, n):
    """[[0, 1, .., n - 1]] int64 beside `like` (its kind and device)."""
    k = kind_of(like)
    if k == "torch":
        import torch
        return torch.arange(n, dtype=torch.int64, device=like.device).reshape(1, n)
    if k == "cupy":
        import cupy
        with cupy.cuda.Device(call.device):
            return cupy.arange(n, dtype="int64").reshape(1, n)
    if k == "numpy":
        return np.arange(n, dtype=np.int64).reshape(1, n)
    return _i64(call.as_i32([list(range(n))], "block_table"))  # made on the call's device


def _contig_pages(call, k_cache, v_cache, k_scale, v_scale, kcs, b, idx, leftpad):
    """A contiguous cache (batch_cache, seqlen_cache, Hkv, d) as pages when
    it is not one page a row: page size P the largest power of two (at most
    256) dividing seqlen_cache (1 with leftpad), page j of cache row r at
    r * m + j where m = the row stride / (P x the token stride), the same m
    for both caches (and per-token scales).  Returns (pages, table, table of
    the attention): pages = (P, the pool's page count), applied to the
    descriptors by _as_pages; table row i = the pages of row idx[i] (or i),
    -1 for a row outside the cache (the library reports it, SF_ERR_INDEX).
    With leftpad, sequence i's keys start at token leftpad[i] of its row:
    the attention's table starts there (-1 past the row or before it); the
    append's stays the row's (positions absolute, as flash_attn's)."""
    op = call.op
    bc, lc = kcs[0], kcs[1]
    P = 1
    while leftpad is None and P < 256 and lc % (2 * P) == 0:
        P *= 2
    npr = lc // P
    m = None
    for t, name in ((k_cache, "k_cache"), (v_cache, "v_cache"), (k_scale, "k_scale"), (v_scale, "v_scale")):
        if t is None or (name.endswith("scale") and len(_array_shape(call, t, name)) != 3):
            continue
        s0, s1 = _stride(t, 0), _stride(t, 1)
        if s1 is None or bc == 1:  # C-contiguous __cuda_array_interface__, or one row
            mt = npr
        elif s1 == 0 or s0 % (P * s1) != 0:
            mt = -1
        else:
            mt = s0 // (P * s1)
        if mt < npr or (m is not None and mt != m):
            fail(SF_ERR_UNSUPPORTED,
                 "%s: without block_table, a cache of seqlen_cache %d is served in pages of %d "
                 "tokens, which needs k_cache, v_cache (and per-token scales) laid out alike with "
                 "whole pages between rows (e.g. contiguous); %s is not" % (op, lc, P, name))
        m = mt
    pages = (bc - 1) * m + npr
    if pages > 2 ** 31 - 1:
        fail(SF_ERR_TOO_LARGE, "%s: the cache makes %d pages of %d tokens, past the int32 block "
                               "table; pass a paged cache with block_table" % (op, pages, P))
    if idx is None:
        row = _i64(call.as_i32([[i] for i in range(b)], "block_table"))
        ok = 1
    else:
        row = _i64(idx).reshape(b, 1)
        ok = ((row >= 0) & (row < bc)) * 1
    j = _ramp(call, row, npr)
    base = row * ok * m
    bt = (base + j) * ok + (ok - 1)
    bt_attn = bt
    if leftpad is not None:  # P = 1: key j of sequence i is token leftpad[i] + j of its row
        col = _i64(leftpad).reshape(b, 1) + j
        okc = ok * ((col >= 0) & (col < lc))
        bt_attn = (base + col * okc) * okc + (okc - 1)
    return (P, pages), call.as_i32(bt, "block_table"), call.as_i32(bt_attn, "block_table")


def _as_pages(pages, p):
    """The pools' (and per-token scales') descriptors of a contiguous cache
    as (pages, P, ...) views (see _contig_pages)."""
    if pages is None:
        return
    P, n = pages
    pools = [p.k_cache, p.v_cache]
    if p.k_scale.data and p.k_scale.rank == 3:  # per-token scales; per-head ones stay
        pools += [p.k_scale, p.v_scale]
    for t in pools:  # ctypes fields: views of p's memory
        t.stride[0] = P * t.stride[1]
        t.shape[0] = n
        t.shape[1] = P


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            k_scale=None, v_scale=None, backend="auto"):
    """Attention over a KV cache, with flash_attn's flash_attn_with_kvcache signature.

    q (b, Lq, H, d).  With block_table (b, max_blocks) int: a paged cache,
    k_cache/v_cache (num_blocks, page_size, Hkv, d), page_size a power of two
    from 1 to 256.  Without it: k_cache/v_cache (b, seqlen_cache, Hkv, d),
    any seqlen_cache, served as pages of the largest power of two up to 256
    that divides it (a whole row a page when seqlen_cache is such a power;
    otherwise both caches laid out alike with whole pages between rows, as
    contiguous ones are, else SF_ERR_UNSUPPORTED).
    cache_seqlens: int (every sequence) or (b,) int tensor of tokens already
    cached; None means full (max_blocks * page_size, or seqlen_cache).
    k, v (b, Lnew, Hkv, d), when given, are first written into the cache in
    place at positions cache_seqlens .. cache_seqlens + Lnew - 1 (sf_kv_append;
    cache_seqlens itself is not updated), then q attends to
    cache_seqlens + Lnew keys per sequence (sf_attn_paged); causal and
    window_size are bottom-right aligned as in flash_attn.  num_splits is
    accepted and ignored (the library chooses the split).  cache_batch_idx
    (b,) int, without block_table: sequence i uses row cache_batch_idx[i] of
    the cache (rows checked against it; duplicates with k/v given leave one
    of the writes, as in flash_attn).  cache_leftpad (b,) int, without
    block_table: sequence i's keys are tokens cache_leftpad[i] ..
    cache_seqlens[i] + Lnew - 1 of its row (the ones before it are not
    attended; causal and window count from it; appends and rotary positions
    stay those of the row, as flash_attn's); such a cache goes in pages of
    one token.  rotary_cos, rotary_sin (seqlen_ro,
    rotary_dim / 2), both or neither, only with k and v (else
    SF_ERR_INVALID_ARG): k is rotated on its way into the cache at positions
    cache_seqlens + j (sf_kv_append's rope), and q, into a new array (the
    caller's q is left alone), at cache_seqlens + i when causal or with a
    window, else every query token at cache_seqlens (flash_attn's rule);
    rotary_interleaved: GPT-J pairs, else NeoX halves; the first rotary_dim
    channels rotated, the rest passed through.  Positions are built where
    cache_seqlens lives (no device-to-host copy).  alibi_slopes (H,) or
    (b, H) float32: the bias -slope * |i + seqlen_k - seqlen_q - j|, as
    flash_attn_func's.  FP8 caches: k_cache and v_cache float8_e4m3fn (torch,
    or ml_dtypes.float8_e4m3fn numpy arrays) with k_scale and v_scale
    float32, either (num_blocks, page_size, Hkv) (a scale per token and kv
    head, written by the append of k/v: amax / 448 of the row) or (Hkv,) (a
    fixed scale per kv head); q, k and v stay in float16/bfloat16 (float32
    on the CPU), k and v quantised on their way in (x / scale, round to
    nearest even, saturating to +-448).  Scales with a 16-bit cache are
    refused (SF_ERR_INVALID_ARG).  Returns out (b, Lq, H, d), or
    (out, lse) with return_softmax_lse; lse (b, H, Lq) float32.  Arrays stay
    where they are: numpy on the CPU, torch tensors on their device.
    """
    op = "flash_attn_with_kvcache"
    call = Call(op, q, "q")
    qs = _shape(call, q, "q", 4, "(batch, seqlen_q, nheads, head_dim)")
    if cache_leftpad is not None and block_table is not None:
        fail(SF_ERR_UNSUPPORTED, "%s: cache_leftpad is for a contiguous cache (as in flash_attn); "
                                 "with block_table, give each sequence the pages from its first key" % op)
    if (k_scale is None) != (v_scale is None):
        fail(SF_ERR_NULL_POINTER, "%s: give both k_scale and v_scale, or neither" % op)
    as_int(op, "num_splits", num_splits, 0)
    interleaved = as_flag(op, "rotary_interleaved", rotary_interleaved)
    if (k is None) != (v is None):
        fail(SF_ERR_NULL_POINTER, "%s: give both k and v, or neither" % op)
    if (rotary_cos is None) != (rotary_sin is None):
        fail(SF_ERR_INVALID_ARG, "%s: give rotary_cos and rotary_sin together, or neither" % op)
    if rotary_cos is not None and k is None:
        fail(SF_ERR_INVALID_ARG, "%s: rotary_cos/rotary_sin rotate the new k and q as they are "
                                 "appended; give k and v with them (as flash_attn does)" % op)
    b = qs[0]
    kcs = _shape(call, k_cache, "k_cache", 4, "(num_blocks, page_size, nheads_kv, head_dim)"
                 if block_table is not None else "(batch, seqlen_cache, nheads_kv, head_dim)")
    if block_table is not None and cache_batch_idx is not None:
        fail(SF_ERR_INVALID_ARG, "%s: cache_batch_idx selects rows of a contiguous cache; with "
                                 "block_table, give each sequence its pages instead" % op)
    pool_pages = None
    if block_table is None:
        lc = kcs[1]
        if cache_batch_idx is None and kcs[0] != b:
            fail(SF_ERR_SHAPE, "%s: k_cache has batch %d but q has %d" % (op, kcs[0], b))
        if lc < 1:
            fail(SF_ERR_SHAPE, "%s: k_cache has seqlen_cache %d; it must be >= 1" % (op, lc))
        idx = None
        if cache_batch_idx is not None:
            idx = call.as_i32(cache_batch_idx, "cache_batch_idx")
            if tuple(idx.shape) != (b,):
                fail(SF_ERR_SHAPE, "%s: cache_batch_idx has shape %s; it must be (batch,) = (%d,)" %
                     (op, tuple(idx.shape), b))
        lp = None
        if cache_leftpad is not None:
            lp = call.as_i32(cache_leftpad, "cache_leftpad")
            if tuple(lp.shape) != (b,):
                fail(SF_ERR_SHAPE, "%s: cache_leftpad has shape %s; it must be (batch,) = (%d,)" %
                     (op, tuple(lp.shape), b))
        if lp is None and lc <= 256 and lc & (lc - 1) == 0:
            # one page per sequence: row i of the cache (cache_batch_idx[i])
            # is sequence i's page; the library checks every entry against
            # the cache (SF_ERR_INDEX)
            bt = call.as_i32([[i] for i in range(b)], "block_table") if idx is None else idx.reshape(b, 1)
            bt_attn = bt
        else:
            pool_pages, bt, bt_attn = _contig_pages(call, k_cache, v_cache, k_scale, v_scale, kcs, b, idx, lp)
        cap = lc
    else:
        bt = bt_attn = call.as_i32(block_table, "block_table")
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
        if k_scale is not None:
            a.k_scale = call.tensor(k_scale, "k_scale")
            a.v_scale = call.tensor(v_scale, "v_scale")
        _as_pages(pool_pages, a)
        if rotary_cos is not None:
            rot = _kvcache_rope(call, rotary_cos, rotary_sin, interleaved)
            a.rope = ctypes.pointer(rot)
        call.run(L.sf_kv_append, a, backend)
        if ks[1]:  # computed where cache_seqlens lives (no device round trip)
            seqlens = call.as_i32(cs + ks[1], "seqlens")
        if rotary_cos is not None:
            local = tuple(window_size) != (-1, -1)
            q = _kvcache_rope_q(call, q, qs, cs, rot, bool(causal) or local, backend)
    p = L.sf_attn_paged_params()
    L.sf_attn_paged_params_init(ctypes.byref(p))
    p.q = call.tensor(q, "q")
    p.k_cache = call.tensor(k_cache, "k_cache")
    p.v_cache = call.tensor(v_cache, "v_cache")
    if cache_leftpad is not None:  # the keys from leftpad on
        seqlens = call.as_i32(_i64(seqlens) - _i64(lp), "seqlens")
    p.block_table = call.tensor(bt_attn, "block_table")
    p.seqlens = call.tensor(seqlens, "seqlens")
    if k_scale is not None:
        p.k_scale = call.tensor(k_scale, "k_scale")
        p.v_scale = call.tensor(v_scale, "v_scale")
    _as_pages(pool_pages, p)
    _attn_common(call, p, 0.0, softmax_scale, causal, window_size, softcap, alibi_slopes)
    want_lse = as_flag(op, "return_softmax_lse", return_softmax_lse)
    out, lse = _attn_run(call, L.sf_attn_paged, p, backend, qs, q, (qs[0], qs[2], qs[1]) if want_lse else None)
    return (out, lse) if want_lse else out
