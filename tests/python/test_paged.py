"""flash_attn_with_kvcache (the paged KV cache) against a float64 numpy
reference written here: keys gathered through the block table, a
materialised masked softmax; rotary_cos/_sin against flash_attn's rotary
semantics written here in numpy.  numpy on the CPU; the torch CUDA tests
skip without a GPU and a CUDA build.

Run: SEQFUSE_LIB=build/libseqfuse.so python -m pytest -q tests/python
"""
import numpy as np
import pytest

from sf_testutil import BACKENDS, DTYPES, TOL, _raises, f64, rel_err, rnd  # noqa: E402 (sets the path)

import seqfuse  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

HAS_GPU = (torch is not None and torch.cuda.is_available() and seqfuse.has_cuda())


def ref_attn(q, kc, vc, bt, lens, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    """out (b, Lq, H, d), lse (b, H, Lq) in float64."""
    q, kc, vc = f64(q), f64(kc), f64(vc)
    b, lq, H, d = q.shape
    ps, hkv = kc.shape[1], kc.shape[2]
    g = H // hkv
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    out = np.zeros((b, lq, H, d))
    lse = np.full((b, H, lq), -np.inf)
    for s in range(b):
        n = int(lens[s])
        pos = np.arange(n)
        K = kc[bt[s][pos // ps], pos % ps] if n else np.zeros((0, hkv, d))
        V = vc[bt[s][pos // ps], pos % ps] if n else np.zeros((0, hkv, d))
        for h in range(H):
            for i in range(lq):
                p = i + n - lq
                lo = 0 if window[0] < 0 else max(p - window[0], 0)
                hi = n if (window[1] < 0 and not causal) else min(p + (0 if causal else window[1]) + 1, n)
                if lo >= hi:
                    continue
                sc = K[lo:hi, h // g] @ q[s, i, h] * scale
                if softcap > 0:
                    sc = softcap * np.tanh(sc / softcap)
                m = sc.max()
                e = np.exp(sc - m)
                out[s, i, h] = e @ V[lo:hi, h // g] / e.sum()
                lse[s, h, i] = m + np.log(e.sum())
    return out, lse


def paged_setup(rng, dtype, b, hkv, d, ps, cached, lnew, spare=3):
    need = [-(-(c + lnew) // ps) for c in cached]
    mp = max(need) + 1
    npg = sum(need) + spare
    perm = rng.permutation(npg).astype(np.int32)
    bt = np.full((b, mp), -1, np.int32)
    k = 0
    for s in range(b):
        bt[s, :need[s]] = perm[k:k + need[s]]
        k += need[s]
    kc = rnd(rng, (npg, ps, hkv, d), dtype)
    vc = rnd(rng, (npg, ps, hkv, d), dtype)
    return kc, vc, bt


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ps,hq,hkv,lq,causal", [(16, 8, 2, 1, True), (1, 4, 4, 4, False),
                                                 (64, 8, 1, 16, True), (256, 4, 1, 4, True)])
def test_append_then_attend(dtype, backend, ps, hq, hkv, lq, causal):
    rng = np.random.default_rng(ps * 7 + lq)
    b, d = 3, 64
    cached = np.array([5, 0, 70], np.int32)
    kc, vc, bt = paged_setup(rng, dtype, b, hkv, d, ps, cached, lq)
    q = rnd(rng, (b, lq, hq, d), dtype)
    kn = rnd(rng, (b, lq, hkv, d), dtype)
    vn = rnd(rng, (b, lq, hkv, d), dtype)
    kc0, vc0 = kc.copy(), vc.copy()
    out, lse = seqfuse.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=cached,
                                               block_table=bt, causal=causal,
                                               return_softmax_lse=True, backend=backend)
    # the cache now holds the new tokens where the table says, nothing else changed
    want_kc, want_vc = kc0.copy(), vc0.copy()
    for s in range(b):
        for j in range(lq):
            pos = cached[s] + j
            want_kc[bt[s, pos // ps], pos % ps] = kn[s, j]
            want_vc[bt[s, pos // ps], pos % ps] = vn[s, j]
    assert np.array_equal(kc.view(np.uint8), want_kc.view(np.uint8))
    assert np.array_equal(vc.view(np.uint8), want_vc.view(np.uint8))
    ro, rl = ref_attn(q, want_kc, want_vc, bt, cached + lq, causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert rel_err(out, ro) < TOL[dtype]
    assert np.all(np.isneginf(lse) == np.isneginf(rl))
    assert rel_err(lse, rl) < 1e-4


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_decode_window_softcap_scale(backend):
    rng = np.random.default_rng(5)
    b, hq, hkv, d, ps = 2, 4, 2, 32, 16
    lens = np.array([50, 0], np.int32)
    kc, vc, bt = paged_setup(rng, "float32", b, hkv, d, ps, lens, 0)
    q = rnd(rng, (b, 2, hq, d))
    out, lse = seqfuse.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=bt,
                                               causal=True, window_size=(7, 0), softcap=1.5,
                                               softmax_scale=0.3, return_softmax_lse=True,
                                               num_splits=4, backend=backend)
    ro, rl = ref_attn(q, kc, vc, bt, lens, causal=True, window=(7, 0), softcap=1.5, scale=0.3)
    assert rel_err(out, ro) < 1e-5
    assert np.all(out[1] == 0) and np.all(np.isneginf(lse[1]))
    assert rel_err(lse[0], rl[0]) < 1e-5


def test_contiguous_cache_int_seqlens():
    """No block table: (b, seqlen_cache, Hkv, d) with seqlen_cache a power of two."""
    rng = np.random.default_rng(9)
    b, hq, hkv, d, lc = 3, 4, 2, 16, 64
    kc = rnd(rng, (b, lc, hkv, d))
    vc = rnd(rng, (b, lc, hkv, d))
    q = rnd(rng, (b, 1, hq, d))
    kn = rnd(rng, (b, 1, hkv, d))
    vn = rnd(rng, (b, 1, hkv, d))
    out = seqfuse.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=10, causal=True)
    assert np.array_equal(kc[:, 10], kn[:, 0]) and np.array_equal(vc[:, 10], vn[:, 0])
    ident = np.arange(b, dtype=np.int32).reshape(b, 1)
    ro, _ = ref_attn(q, kc, vc, ident, np.full(b, 11), causal=True)
    assert rel_err(out, ro) < 1e-5
    # cache_seqlens None: the whole cache
    out = seqfuse.flash_attn_with_kvcache(q, kc, vc)
    ro, _ = ref_attn(q, kc, vc, ident, np.full(b, lc))
    assert rel_err(out, ro) < 1e-5


@pytest.mark.parametrize("lc,gap", [(100, 0), (339, 0), (1000, 0), (100, 12), (768, 256)])
def test_contiguous_cache_any_length(lc, gap):
    """No block table, seqlen_cache not a power of two up to 256 (pages of
    the largest power of two dividing it), rows contiguous or `gap` tokens
    apart, with cache_batch_idx and an append: the same cache as pages of
    one token through an explicit table."""
    rng = np.random.default_rng(lc + gap)
    b, hq, hkv, d, bc = 3, 8, 2, 24, 4
    kb, vb = rnd(rng, (bc, lc + gap, hkv, d)), rnd(rng, (bc, lc + gap, hkv, d))
    kc, vc = kb[:, :lc], vb[:, :lc]
    gap_k, gap_v = kb[:, lc:].copy(), vb[:, lc:].copy()
    q = rnd(rng, (b, 2, hq, d))
    kn, vn = rnd(rng, (b, 2, hkv, d)), rnd(rng, (b, 2, hkv, d))
    idx = np.array([3, 0, 2], np.int32)
    lens = np.array([lc - 2, 7, 0], np.int32)
    # the expected cache: the new rows at lens .. lens + 1 of rows idx
    want_k, want_v = kc.copy(), vc.copy()
    for i in range(b):
        want_k[idx[i], lens[i]:lens[i] + 2] = kn[i]
        want_v[idx[i], lens[i]:lens[i] + 2] = vn[i]
    out, lse = seqfuse.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens,
                                               cache_batch_idx=idx, causal=True, return_softmax_lse=True)
    assert np.array_equal(kc, want_k) and np.array_equal(vc, want_v)
    assert np.array_equal(kb[:, lc:], gap_k) and np.array_equal(vb[:, lc:], gap_v)  # not the cache's
    bt = (idx[:, None].astype(np.int64) * lc + np.arange(lc)[None, :]).astype(np.int32)
    ro, rl = ref_attn(q, want_k.reshape(bc * lc, 1, hkv, d), want_v.reshape(bc * lc, 1, hkv, d), bt,
                      lens + 2, causal=True)
    assert rel_err(out, ro) < 1e-5
    assert np.allclose(lse, rl, atol=1e-5)
    # a row outside the cache
    _raises(seqfuse.SF_ERR_INDEX, seqfuse.flash_attn_with_kvcache, q, kc, vc, cache_seqlens=lens,
            cache_batch_idx=np.array([4, 0, -1], np.int32))


@pytest.mark.parametrize("rotary", [False, True])
def test_cache_leftpad(rotary):
    """cache_leftpad: sequence i attends to tokens leftpad[i] .. cache_seqlens[i]
    + Lnew - 1 of its row (causal from there), while the append and the
    rotary positions stay the row's; against the float64 reference over
    those tokens gathered.  A leftpad past the row is an error."""
    rng = np.random.default_rng(11 + rotary)
    b, hq, hkv, d, lc, bc, lq = 3, 4, 2, 32, 96, 4, 2
    kc, vc = rnd(rng, (bc, lc, hkv, d)), rnd(rng, (bc, lc, hkv, d))
    q, kn, vn = rnd(rng, (b, lq, hq, d)), rnd(rng, (b, lq, hkv, d)), rnd(rng, (b, lq, hkv, d))
    idx = np.array([2, 0, 3], np.int32)
    cs = np.array([40, 0, 93], np.int32)
    lp = np.array([13, 0, 90], np.int32)
    kw = {}
    kpos = cs[:, None].astype(np.int64) + np.arange(lq)[None, :]
    kin, qin = f64(kn), f64(q)
    if rotary:
        ang = rng.uniform(0.0, 2 * np.pi, (lc, 8))
        cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
        kw = {"rotary_cos": cos, "rotary_sin": sin, "rotary_interleaved": False}
        kin, qin = np_rotary(kn, cos, sin, kpos, False), np_rotary(q, cos, sin, kpos, False)
    want_k, want_v = f64(kc), f64(vc)
    for i in range(b):
        want_k[idx[i], cs[i]:cs[i] + lq] = kin[i]
        want_v[idx[i], cs[i]:cs[i] + lq] = vn[i]
    out = seqfuse.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=cs, cache_batch_idx=idx,
                                          cache_leftpad=lp, causal=True, **kw)
    assert rel_err(kc, want_k) < 1e-6 and np.array_equal(vc, want_v.astype(np.float32))
    bt = (idx[:, None].astype(np.int64) * lc + lp[:, None] + np.arange(lc)[None, :]).astype(np.int32)
    ro, _ = ref_attn(qin, want_k.reshape(bc * lc, 1, hkv, d), want_v.reshape(bc * lc, 1, hkv, d),
                     np.minimum(bt, bc * lc - 1), cs + lq - lp, causal=True)
    assert rel_err(out, ro) < 1e-5
    # keys from a leftpad past the row, or before it: SF_ERR_INDEX
    for bad in ([13, 0, 97], [-1, 0, 90]):
        _raises(seqfuse.SF_ERR_INDEX, seqfuse.flash_attn_with_kvcache, q, kc, vc, cache_seqlens=cs + lq,
                cache_batch_idx=idx, cache_leftpad=np.array(bad, np.int32))
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.flash_attn_with_kvcache, q, kc, vc, cache_seqlens=cs,
            cache_leftpad=np.array([1, 2], np.int32))


def test_cache_batch_idx():
    """Sequence i reads (and with k/v appends to) row cache_batch_idx[i] of a
    contiguous cache: the same as the rows gathered into a cache of its own."""
    rng = np.random.default_rng(6)
    b, hq, hkv, d, lc = 3, 4, 2, 32, 64
    q = rnd(rng, (b, 2, hq, d))
    kc, vc = rnd(rng, (5, lc, hkv, d)), rnd(rng, (5, lc, hkv, d))
    kn, vn = rnd(rng, (b, 2, hkv, d)), rnd(rng, (b, 2, hkv, d))
    idx = np.array([4, 0, 2], np.int32)
    lens = np.array([10, 62, 0], np.int32)
    kg, vg = kc[idx].copy(), vc[idx].copy()
    untouched = [1, 3]
    k_before = kc[untouched].copy()
    out = seqfuse.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, cache_batch_idx=idx,
                                          causal=True)
    ref = seqfuse.flash_attn_with_kvcache(q, kg, vg, k=kn, v=vn, cache_seqlens=lens, causal=True)
    assert np.array_equal(out, ref)
    assert np.array_equal(kc[idx], kg) and np.array_equal(vc[idx], vg)
    assert np.array_equal(kc[untouched], k_before)
    _raises(seqfuse.SF_ERR_INDEX, seqfuse.flash_attn_with_kvcache, q, kc, vc, cache_seqlens=lens,
            cache_batch_idx=np.array([4, 5, 0], np.int32))
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.flash_attn_with_kvcache, q, kc, vc, cache_seqlens=lens,
            cache_batch_idx=np.array([4, 0], np.int32))


def test_errors():
    rng = np.random.default_rng(1)
    q = rnd(rng, (2, 1, 4, 16))
    # seqlen_cache 100 goes in pages of 4: v_cache's rows 150 tokens apart
    # are not whole pages apart
    kc = rnd(rng, (2, 100, 2, 16))
    e = _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.flash_attn_with_kvcache, q, kc,
                rnd(rng, (2, 150, 2, 16))[:, :100])
    assert "v_cache" in str(e)
    kc, vc, bt = paged_setup(rng, "float32", 2, 2, 16, 16, [3, 4], 0)
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.flash_attn_with_kvcache, q, kc, vc,
            cache_seqlens=[3, 4], block_table=bt, cache_batch_idx=[0, 1])
    _raises(seqfuse.SF_ERR_UNSUPPORTED, seqfuse.flash_attn_with_kvcache, q, kc, vc,
            cache_seqlens=[3, 4], block_table=bt, cache_leftpad=[0, 0])
    # alibi_slopes is served (test_paged_fp8.py): (H) or (b, H) only
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.flash_attn_with_kvcache, q, kc, vc,
            cache_seqlens=[3, 4], block_table=bt, alibi_slopes=np.ones(3, np.float32))
    # rotary: both tables, and only while appending (flash_attn rotates new keys)
    tab = np.ones((8, 8), np.float32)
    kn, vn = rnd(rng, (2, 1, 2, 16)), rnd(rng, (2, 1, 2, 16))
    for kw in ({"rotary_cos": tab}, {"rotary_sin": tab}, {"rotary_cos": tab, "rotary_sin": tab}):
        _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.flash_attn_with_kvcache, q, kc, vc,
                cache_seqlens=[3, 4], block_table=bt, **kw)
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.flash_attn_with_kvcache, q, kc, vc, k=kn, v=vn,
            rotary_cos=tab, cache_seqlens=[3, 4], block_table=bt)
    # a table of 4 rows cannot rotate position 4 (checked on the host)
    e = _raises(seqfuse.SF_ERR_INDEX, seqfuse.flash_attn_with_kvcache, q, kc, vc, k=kn, v=vn,
                rotary_cos=tab[:4], rotary_sin=tab[:4], cache_seqlens=[3, 4], block_table=bt)
    assert "rope.cos" in str(e)
    # rotary_dim 2 * 9 past the head dim 16
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.flash_attn_with_kvcache, q, kc, vc, k=kn, v=vn,
            rotary_cos=np.ones((8, 9), np.float32), rotary_sin=np.ones((8, 9), np.float32),
            cache_seqlens=[3, 4], block_table=bt)
    e = _raises(seqfuse.SF_ERR_INDEX, seqfuse.flash_attn_with_kvcache, q, kc, vc,
                cache_seqlens=[3, 4 * 16], block_table=bt)
    assert "seqlens[1]" in str(e)
    bad = bt.copy()
    bad[0, 0] = kc.shape[0]
    _raises(seqfuse.SF_ERR_INDEX, seqfuse.flash_attn_with_kvcache, q, kc, vc,
            cache_seqlens=[3, 4], block_table=bad)
    _raises(seqfuse.SF_ERR_NULL_POINTER, seqfuse.flash_attn_with_kvcache, q, kc, vc,
            k=rnd(rng, (2, 1, 2, 16)), cache_seqlens=[3, 4], block_table=bt)
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.flash_attn_with_kvcache, q, kc[:, :3], vc[:, :3],
            cache_seqlens=[1, 1], block_table=bt)


def np_rotary(x, cos, sin, pos, interleaved):
    """flash_attn's rotary on x (b, L, heads, d) in float64: token (s, i) at
    pos[s, i]; the first 2 * cos.shape[1] channels rotated (GPT-J pairs when
    interleaved, else NeoX halves), the rest as they are."""
    x = f64(x).copy()
    h = cos.shape[1]
    c = f64(cos)[pos][:, :, None, :]
    s = f64(sin)[pos][:, :, None, :]
    i1, i2 = (slice(0, 2 * h, 2), slice(1, 2 * h, 2)) if interleaved else (slice(0, h), slice(h, 2 * h))
    x1, x2 = x[..., i1].copy(), x[..., i2].copy()
    x[..., i1] = x1 * c - x2 * s
    x[..., i2] = x2 * c + x1 * s
    return x


def rotary_case(rng, dtype, b, hq, hkv, d, ps, lq, cached, rdim, seqlen_ro):
    kc, vc, bt = paged_setup(rng, dtype, b, hkv, d, ps, cached, lq)
    q = rnd(rng, (b, lq, hq, d), dtype)
    kn = rnd(rng, (b, lq, hkv, d), dtype)
    vn = rnd(rng, (b, lq, hkv, d), dtype)
    ang = rng.uniform(0.0, 2 * np.pi, (seqlen_ro, rdim // 2))
    return kc, vc, bt, q, kn, vn, np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rotary_expect(q, kc0, vc0, kn, vn, cos, sin, bt, cached, interleaved, per_token):
    """flash_attn's semantics: k rotated at cache_seqlens + j into the
    cache, q at cache_seqlens + i (causal or local) or all at cache_seqlens."""
    b, lq = q.shape[:2]
    ps = kc0.shape[1]
    kpos = cached[:, None].astype(np.int64) + np.arange(lq)[None, :]
    qpos = kpos if per_token else np.repeat(cached[:, None].astype(np.int64), lq, axis=1)
    krot = np_rotary(kn, cos, sin, kpos, interleaved)
    want_kc, want_vc = f64(kc0), f64(vc0)
    for s in range(b):
        for j in range(lq):
            pos = kpos[s, j]
            want_kc[bt[s, pos // ps], pos % ps] = krot[s, j]
            want_vc[bt[s, pos // ps], pos % ps] = f64(vn)[s, j]
    return np_rotary(q, cos, sin, qpos, interleaved), want_kc, want_vc


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("causal,window", [(True, (-1, -1)), (False, (-1, -1)), (False, (6, 2))])
def test_rotary(dtype, backend, interleaved, causal, window):
    rng = np.random.default_rng(11 + interleaved + 2 * causal)
    b, hq, hkv, d, ps, lq = 3, 4, 2, 64, 16, 3
    cached = np.array([5, 0, 30], np.int32)
    kc, vc, bt, q, kn, vn, cos, sin = rotary_case(rng, dtype, b, hq, hkv, d, ps, lq, cached, 32, 33)
    q0, kn0, kc0, vc0 = q.copy(), kn.copy(), kc.copy(), vc.copy()
    out = seqfuse.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, rotary_cos=cos, rotary_sin=sin,
                                          cache_seqlens=cached, block_table=bt, causal=causal,
                                          window_size=window, rotary_interleaved=interleaved,
                                          backend=backend)
    assert np.array_equal(q.view(np.uint8), q0.view(np.uint8))  # the caller's q is left alone
    assert np.array_equal(kn.view(np.uint8), kn0.view(np.uint8))
    per_token = causal or window != (-1, -1)
    qrot, want_kc, want_vc = rotary_expect(q, kc0, vc0, kn, vn, cos, sin, bt, cached, interleaved,
                                           per_token)
    assert rel_err(kc, want_kc) < TOL[dtype]
    assert np.array_equal(f64(vc), want_vc)
    ro, _ = ref_attn(qrot, want_kc, want_vc, bt, cached + lq, causal=causal, window=window)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert rel_err(out, ro) < 2 * TOL[dtype]


@pytest.mark.skipif(not HAS_GPU, reason="needs torch with CUDA and a CUDA build of seqfuse")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_torch_cuda_rotary(dtype, interleaved, causal):
    rng = np.random.default_rng(5)
    b, hq, hkv, d, ps, lq = 4, 8, 2, 128, 16, 2
    cached = np.array([0, 15, 16, 300], np.int32)
    kc, vc, bt, q, kn, vn, cos, sin = rotary_case(rng, "float32", b, hq, hkv, d, ps, lq, cached, 96, 400)
    tdt = getattr(torch, dtype)
    T = lambda a: torch.from_numpy(a).cuda().to(tdt)  # noqa: E731
    tq, tkc, tvc = T(q), T(kc), T(vc)
    tq0 = tq.clone()
    out = seqfuse.flash_attn_with_kvcache(
        tq, tkc, tvc, k=T(kn), v=T(vn), rotary_cos=torch.from_numpy(cos).cuda(),
        rotary_sin=torch.from_numpy(sin).cuda(), cache_seqlens=torch.from_numpy(cached).cuda(),
        block_table=torch.from_numpy(bt).cuda(), causal=causal, rotary_interleaved=interleaved)
    assert out.device.type == "cuda" and out.dtype == tdt
    torch.cuda.synchronize()
    assert torch.equal(tq, tq0)
    back = lambda t: t.float().cpu().numpy()  # noqa: E731
    qrot, want_kc, want_vc = rotary_expect(back(tq), back(T(kc)), back(T(vc)), back(T(kn)), back(T(vn)),
                                           cos, sin, bt, cached, interleaved, causal)
    assert rel_err(back(tkc), want_kc) < TOL[dtype]
    assert np.array_equal(back(tvc), want_vc)
    ro, _ = ref_attn(qrot, want_kc, want_vc, bt, cached + lq, causal=causal)
    assert rel_err(back(out), ro) < 3 * TOL[dtype]


@pytest.mark.skipif(not HAS_GPU, reason="needs torch with CUDA and a CUDA build of seqfuse")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("lc,d", [(339, 59), (1000, 128), (64, 80)])
def test_torch_cuda_contiguous(dtype, lc, d):
    """A contiguous cache of any seqlen_cache and head dims that are not
    whole 16-byte chunks (the CUDA kernel's element loads) on the GPU, with
    cache_batch_idx and an append, against the float64 reference."""
    rng = np.random.default_rng(lc + d)
    b, hq, hkv, bc, lq = 3, 8, 2, 4, 1
    kc, vc = rnd(rng, (bc, lc, hkv, d)), rnd(rng, (bc, lc, hkv, d))
    q, kn, vn = rnd(rng, (b, lq, hq, d)), rnd(rng, (b, lq, hkv, d)), rnd(rng, (b, lq, hkv, d))
    idx = np.array([3, 0, 2], np.int32)
    lens = np.array([lc - 1, 9, 0], np.int32)
    tdt = getattr(torch, dtype)
    T = lambda a: torch.from_numpy(a).cuda().to(tdt)  # noqa: E731
    tkc, tvc = T(kc), T(vc)
    out = seqfuse.flash_attn_with_kvcache(T(q), tkc, tvc, k=T(kn), v=T(vn),
                                          cache_seqlens=torch.from_numpy(lens).cuda(),
                                          cache_batch_idx=torch.from_numpy(idx).cuda(), causal=True)
    torch.cuda.synchronize()
    back = lambda t: t.float().cpu().numpy()  # noqa: E731
    want_k, want_v = back(T(kc)), back(T(vc))
    for i in range(b):
        want_k[idx[i], lens[i]] = back(T(kn))[i, 0]
        want_v[idx[i], lens[i]] = back(T(vn))[i, 0]
    assert np.array_equal(back(tkc), want_k) and np.array_equal(back(tvc), want_v)
    bt = (idx[:, None].astype(np.int64) * lc + np.arange(lc)[None, :]).astype(np.int32)
    ro, _ = ref_attn(back(T(q)), want_k.reshape(bc * lc, 1, hkv, d), want_v.reshape(bc * lc, 1, hkv, d), bt,
                     lens + 1, causal=True)
    assert rel_err(back(out), ro) < 3 * TOL[dtype]


@pytest.mark.skipif(not HAS_GPU, reason="needs torch with CUDA and a CUDA build of seqfuse")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_cuda(dtype):
    rng = np.random.default_rng(3)
    b, hq, hkv, d, ps, lq = 4, 8, 2, 128, 16, 1
    cached = np.array([0, 15, 16, 300], np.int32)
    kc, vc, bt = paged_setup(rng, "float32", b, hkv, d, ps, cached, lq)
    q = rnd(rng, (b, lq, hq, d))
    kn = rnd(rng, (b, lq, hkv, d))
    vn = rnd(rng, (b, lq, hkv, d))
    tdt = getattr(torch, dtype)
    T = lambda a: torch.from_numpy(a).cuda().to(tdt)  # noqa: E731
    tkc, tvc = T(kc), T(vc)
    out, lse = seqfuse.flash_attn_with_kvcache(
        T(q), tkc, tvc, k=T(kn), v=T(vn), cache_seqlens=torch.from_numpy(cached).cuda(),
        block_table=torch.from_numpy(bt).cuda(), causal=True, return_softmax_lse=True)
    assert out.device.type == "cuda" and out.dtype == tdt
    torch.cuda.synchronize()
    ckc, cvc = tkc.float().cpu().numpy(), tvc.float().cpu().numpy()
    for s in range(b):
        pos = cached[s]
        assert np.array_equal(ckc[bt[s, pos // ps], pos % ps], T(kn).float().cpu().numpy()[s, 0])
    qq = T(q).float().cpu().numpy()
    ro, rl = ref_attn(qq, ckc, cvc, bt, cached + lq, causal=True)
    assert rel_err(out.float().cpu().numpy(), ro) < TOL[dtype] * 3
    assert rel_err(lse.cpu().numpy(), rl) < 1e-3


@pytest.mark.skipif(not HAS_GPU, reason="needs torch with CUDA and a CUDA build of seqfuse")
def test_torch_cuda_graph_replay_with_new_lengths():
    """Decode captured once in a CUDA graph, replayed after the lengths and
    the block table changed in place: the splits follow the lengths on the
    device, so each replay equals a fresh call (and the reference)."""
    rng = np.random.default_rng(4)
    b, hq, hkv, d, ps = 3, 8, 2, 128, 16
    cap = np.array([900, 900, 900], np.int32)
    kc, vc, bt = paged_setup(rng, "float32", b, hkv, d, ps, cap, 0)
    T = lambda a: torch.from_numpy(a).cuda().to(torch.bfloat16)  # noqa: E731
    tkc, tvc, q = T(kc), T(vc), T(rnd(rng, (b, 1, hq, d)))
    lens = torch.tensor([1, 300, 900], dtype=torch.int32, device="cuda")
    tbt = torch.from_numpy(bt).cuda()
    run = lambda: seqfuse.flash_attn_with_kvcache(q, tkc, tvc, cache_seqlens=lens, block_table=tbt,  # noqa: E731
                                                  causal=True)
    run()  # the workspace grows outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = run()
    for new_lens, swap in (([700, 17, 0], False), ([256, 899, 513], True)):
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        if swap:  # sequences 0 and 1 trade tables
            tbt.copy_(tbt[[1, 0, 2]].clone())
        g.replay()
        torch.cuda.synchronize()
        fresh = run()
        torch.cuda.synchronize()
        assert torch.equal(out, fresh)
        ro, _ = ref_attn(q.float().cpu().numpy(), tkc.float().cpu().numpy(), tvc.float().cpu().numpy(),
                         tbt.cpu().numpy(), np.array(new_lens), causal=True)
        assert rel_err(out.float().cpu().numpy(), ro) < TOL["bfloat16"] * 3
