"""flash_attn.flash_attn_interface, served by seqfuse (a stand-in for running
flash-attention's own tests against the seqfuse binding; not flash-attention).

Every function keeps flash-attention's signature and return convention and
calls seqfuse.flash_attn_func / flash_attn_varlen_func with the arguments as
given (dropout, softcap, ALiBi, window, deterministic, return_attn_probs):
whatever seqfuse does not support it refuses itself with SeqfuseError
SF_ERR_UNSUPPORTED.  The packed variants pass q / k / v as views of the packed
tensor (qkv[:, :, 0], ...), as flash-attention does.

Backward: seqfuse's own (sf_attn_bwd): seqfuse.flash_attn_func and
flash_attn_varlen_func are differentiable on torch tensors, so the peers'
gradient asserts check our backward too.  return_attn_probs gives (out,
softmax_lse, None): seqfuse keeps no probabilities (the tests read them only
with dropout, which is refused).
"""
import torch

import seqfuse
from seqfuse import SF_ERR_UNSUPPORTED, SeqfuseError

USE_TRITON_ROCM = False  # read by the tests at import time: this is the CUDA path


def _refuse(what):
    raise SeqfuseError(SF_ERR_UNSUPPORTED,
                       f"flash_attn stand-in: {what} is not provided by seqfuse")


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    """flash-attention's kernel tile width, read by its tests only to decode
    dropout masks (S_dmask); seqfuse has neither."""
    _refuse("_get_block_size_n (the layout of dropout masks)")


def _window(window_size):
    return tuple(int(w.item()) if isinstance(w, torch.Tensor) else int(w) for w in window_size)


def _run(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, softmax_scale, causal, window_size, softcap,
         alibi_slopes, deterministic, return_attn_probs):
    kw = dict(dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
              window_size=_window(window_size), softcap=softcap, alibi_slopes=alibi_slopes,
              deterministic=deterministic, return_attn_probs=return_attn_probs)
    if cu_q is None:
        return seqfuse.flash_attn_func(q, k, v, **kw)
    return seqfuse.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, **kw)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (b, Lq, H, d), k / v (b, Lk, Hkv, d) -> out (b, Lq, H, d) [, lse (b, H, Lq), None]."""
    return _run(q, k, v, None, None, None, None, dropout_p, softmax_scale, causal, window_size,
                softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """kv (b, Lk, 2, Hkv, d)."""
    return _run(q, kv[:, :, 0], kv[:, :, 1], None, None, None, None, dropout_p, softmax_scale,
                causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """qkv (b, L, 3, H, d)."""
    return _run(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], None, None, None, None, dropout_p,
                softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """q (total_q, H, d), k / v (total_k, Hkv, d), cu_seqlens (b+1,) int32
    -> out (total_q, H, d) [, lse (H, total_q), None].  block_table: refused."""
    if block_table is not None:
        _refuse("block_table (paged K/V in flash_attn_varlen_func)")
    return _run(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p=0.0, softmax_scale=None, causal=False,
                                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                    deterministic=False, return_attn_probs=False):
    """kv (total_k, 2, Hkv, d)."""
    return _run(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv (total, 3, H, d), one cu_seqlens for queries and keys."""
    return _run(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_attn_probs)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """The decode entry point: seqfuse.flash_attn_with_kvcache has this signature
    (k/v appended in place first, paged through block_table; rotary, batch
    indices, left padding and ALiBi as flash_attn's).  Forward only."""
    return seqfuse.flash_attn_with_kvcache(
        q, k_cache, v_cache, k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
        block_table=block_table, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
        softcap=softcap, rotary_interleaved=rotary_interleaved, alibi_slopes=alibi_slopes,
        num_splits=num_splits, return_softmax_lse=return_softmax_lse)
