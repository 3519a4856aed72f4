"""FP8 e4m3 KV caches and ALiBi through flash_attn_with_kvcache and KVCache:
the appended codes and scales against an e4m3 encoder written here (a
nearest-value search over the finite codes, ties to the even mantissa,
saturating), attention against a float64 numpy attention over the
dequantised cache (code * scale), ALiBi against the same numpy attention.
numpy (ml_dtypes.float8_e4m3fn) on the CPU; torch float8_e4m3fn on a GPU
(skipped without one).

Run: SEQFUSE_LIB=build/libseqfuse.so python -m pytest -q tests/python
"""
import numpy as np
import pytest

from sf_testutil import _raises, f64, ml_dtypes, rel_err, rnd  # noqa: E402 (sets the path)

import seqfuse  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

HAS_GPU = (torch is not None and torch.cuda.is_available() and seqfuse.has_cuda())
needs_ml = pytest.mark.skipif(ml_dtypes is None, reason="needs ml_dtypes for float8_e4m3fn numpy arrays")


def e4m3_values():
    """The value of each of the 256 codes (NaN for 0x7f and 0xff)."""
    c = np.arange(256)
    e, m = (c >> 3) & 15, c & 7
    v = np.where(e == 0, m * 2.0 ** -9, (8.0 + m) * 2.0 ** (e - 10.0))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return np.where(c & 0x80, -v, v)


VALS = e4m3_values()


def e4m3_encode(x):
    """Codes of float32 x: nearest finite value, ties to an even code, |x| >= 448 to +-448, NaN 0x7f."""
    x = np.asarray(x, np.float32)
    a = np.abs(x.astype(np.float64)).ravel()
    pos = VALS[:0x7f]  # 0x00 .. 0x7e, increasing
    d = np.abs(a[:, None] - pos[None, :])
    best = d.min(axis=1, keepdims=True)
    ties = d == best
    even = ties & (np.arange(0x7f)[None, :] % 2 == 0)
    code = np.where(even.any(axis=1), even.argmax(axis=1), ties.argmax(axis=1))
    code = np.where(a >= 448.0, 0x7e, code)
    code = np.where(np.signbit(x.ravel()), code | 0x80, code)
    code = np.where(np.isnan(x.ravel()), 0x7f, code)
    return code.astype(np.uint8).reshape(x.shape)


def ref_attn(q, K, V, lens, causal=False, softcap=0.0, slopes=None):
    """q (b, Lq, H, d); K, V per sequence (n, Hkv, d) float64; slopes None, (H,) or (b, H)."""
    q = f64(q)
    b, lq, H, d = q.shape
    out = np.zeros((b, lq, H, d))
    for s in range(b):
        n = int(lens[s])
        g = H // K[s].shape[1] if n else 1
        for h in range(H):
            for i in range(lq):
                p = i + n - lq
                hi = min(p + 1, n) if causal else n
                if hi <= 0:
                    continue
                sc = K[s][:hi, h // g] @ q[s, i, h] / np.sqrt(d)
                if softcap > 0:
                    sc = softcap * np.tanh(sc / softcap)
                if slopes is not None:
                    sl = slopes[h] if slopes.ndim == 1 else slopes[s, h]
                    sc = sc - sl * np.abs(p - np.arange(hi))
                e = np.exp(sc - sc.max())
                out[s, i, h] = e @ V[s][:hi, h // g] / e.sum()
    return out


def setup(rng, b, hkv, d, ps, lens):
    need = [-(-int(n) // ps) for n in lens]
    mp = max(need) + 1
    npg = sum(need) + 3
    perm = rng.permutation(npg).astype(np.int32)
    bt = np.full((b, mp), -1, np.int32)
    k = 0
    for s in range(b):
        bt[s, :need[s]] = perm[k:k + need[s]]
        k += need[s]
    return npg, bt


@needs_ml
@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("ps,hq,hkv,lq,alibi", [(16, 8, 2, 1, None), (1, 4, 4, 4, "h"), (64, 8, 1, 16, "bh"),
                                                (256, 4, 1, 4, None)])
def test_fp8_append_then_attend(backend, per_head, ps, hq, hkv, lq, alibi):
    rng = np.random.default_rng(ps * 3 + lq + per_head)
    b, d = 3, 64
    cached = np.array([5, 0, 70], np.int32)
    lens = cached + lq
    npg, bt = setup(rng, b, hkv, d, ps, lens)
    f8 = ml_dtypes.float8_e4m3fn
    kc = np.full((npg, ps, hkv, d), 0x7f, np.uint8).view(f8)  # NaN: written slots must be overwritten
    vc = kc.copy()
    # the cached prefix as codes with scales, then the new tokens appended
    if per_head:
        ks = rng.uniform(0.004, 0.01, hkv).astype(np.float32)
        vs = rng.uniform(0.004, 0.01, hkv).astype(np.float32)
    else:
        ks = np.zeros((npg, ps, hkv), np.float32)
        vs = np.zeros((npg, ps, hkv), np.float32)
    for s in range(b):
        for t in range(cached[s]):
            pg, r = bt[s, t // ps], t % ps
            kc[pg, r] = rng.integers(0, 0x7e, (hkv, d)).astype(np.uint8).view(f8)
            vc[pg, r] = rng.integers(0x80, 0xfe, (hkv, d)).astype(np.uint8).view(f8)
            if not per_head:
                ks[pg, r] = rng.uniform(0.001, 0.01, hkv)
                vs[pg, r] = rng.uniform(0.001, 0.01, hkv)
    kn = rnd(rng, (b, lq, hkv, d)) * rng.uniform(0.1, 3, (b, lq, hkv, 1)).astype(np.float32)
    vn = rnd(rng, (b, lq, hkv, d)) * rng.uniform(0.1, 3, (b, lq, hkv, 1)).astype(np.float32)
    q = rnd(rng, (b, lq, hq, d))
    slopes = None if alibi is None else rng.uniform(0.05, 0.5, hq if alibi == "h" else (b, hq)).astype(np.float32)
    want_kc, want_vc = kc.view(np.uint8).copy(), vc.view(np.uint8).copy()
    want_ks, want_vs = ks.copy(), vs.copy()
    for s in range(b):
        for j in range(lq):
            pos = cached[s] + j
            pg, r = bt[s, pos // ps], pos % ps
            for h in range(hkv):
                for src, wc, wsc in ((kn, want_kc, want_ks), (vn, want_vc, want_vs)):
                    x = src[s, j, h]
                    sc = wsc[h] if per_head else np.float32(np.abs(x).max()) / np.float32(448)
                    if not per_head:
                        wsc[pg, r, h] = sc
                    wc[pg, r, h] = 0 if sc == 0 else e4m3_encode(x / np.float32(sc))
    out = seqfuse.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=cached, block_table=bt,
                                         causal=True, alibi_slopes=slopes, k_scale=ks, v_scale=vs, backend=backend)
    assert np.array_equal(kc.view(np.uint8), want_kc) and np.array_equal(vc.view(np.uint8), want_vc)
    if not per_head:
        assert np.array_equal(ks.view(np.uint32), want_ks.view(np.uint32))
        assert np.array_equal(vs.view(np.uint32), want_vs.view(np.uint32))
    # the dequantised cache, gathered per sequence
    K, V = [], []
    for s in range(b):
        pos = np.arange(lens[s])
        pg, r = bt[s][pos // ps], pos % ps
        kscale = ks[None, :, None] if per_head else ks[pg, r][:, :, None]
        vscale = vs[None, :, None] if per_head else vs[pg, r][:, :, None]
        K.append(VALS[want_kc[pg, r]] * kscale)
        V.append(VALS[want_vc[pg, r]] * vscale)
    ro = ref_attn(q, K, V, lens, causal=True, slopes=slopes)
    assert rel_err(out, ro) < 1e-5


@pytest.mark.parametrize("backend", ["ref", "cpu", "auto"])
@pytest.mark.parametrize("alibi", ["h", "bh"])
def test_alibi_16bit(backend, alibi):
    rng = np.random.default_rng(11)
    b, hq, hkv, d, ps, lq = 3, 8, 2, 32, 16, 4
    lens = np.array([40, 0, 9], np.int32)
    npg, bt = setup(rng, b, hkv, d, ps, lens)
    kc = rnd(rng, (npg, ps, hkv, d))
    vc = rnd(rng, (npg, ps, hkv, d))
    q = rnd(rng, (b, lq, hq, d))
    slopes = rng.uniform(0.05, 0.5, hq if alibi == "h" else (b, hq)).astype(np.float32)
    out = seqfuse.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=bt, causal=True,
                                         softcap=2.0, alibi_slopes=slopes, backend=backend)
    K = [f64(kc[bt[s][np.arange(lens[s]) // ps], np.arange(lens[s]) % ps]) for s in range(b)]
    V = [f64(vc[bt[s][np.arange(lens[s]) // ps], np.arange(lens[s]) % ps]) for s in range(b)]
    ro = ref_attn(q, K, V, lens, causal=True, softcap=2.0, slopes=slopes)
    assert rel_err(out, ro) < 1e-5


@needs_ml
def test_errors():
    rng = np.random.default_rng(2)
    kc = np.zeros((4, 16, 2, 32), np.uint8).view(ml_dtypes.float8_e4m3fn)
    vc = kc.copy()
    q = rnd(rng, (1, 1, 4, 32))
    bt = np.array([[0, 1]], np.int32)
    ks = np.ones((4, 16, 2), np.float32)
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.flash_attn_with_kvcache, q, kc, vc, cache_seqlens=3, block_table=bt)
    _raises(seqfuse.SF_ERR_NULL_POINTER, seqfuse.flash_attn_with_kvcache, q, kc, vc, cache_seqlens=3, block_table=bt,
            k_scale=ks)
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.flash_attn_with_kvcache, q, kc, vc, cache_seqlens=3, block_table=bt,
            k_scale=ks, v_scale=np.ones(3, np.float32))
    out = seqfuse.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=3, block_table=bt, k_scale=ks, v_scale=ks)
    assert np.all(out == 0)  # every code 0
    f32 = rnd(rng, (4, 16, 2, 32))
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.flash_attn_with_kvcache, q, f32, f32.copy(), cache_seqlens=3,
            block_table=bt, k_scale=ks, v_scale=ks)
    _raises(seqfuse.SF_ERR_SHAPE, seqfuse.flash_attn_with_kvcache, q, f32, f32.copy(), cache_seqlens=3,
            block_table=bt, alibi_slopes=np.ones(3, np.float32))


@needs_ml
def test_kv_cache_fp8():
    c = seqfuse.KVCache(12, 4, 2, 16, "float8_e4m3fn", num_layers=2, max_seqs=2, max_pages_per_seq=6)
    k, v = c.pools(1)
    ks, vs = c.scales(1)
    assert k.dtype == np.dtype(ml_dtypes.float8_e4m3fn) and k.shape == (12, 4, 2, 16)
    assert ks.dtype == np.float32 and ks.shape == (12, 4, 2) and np.all(ks == 0)
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.KVCache(4, 4, 1, 8, "float32").scales, 0)
    rng = np.random.default_rng(4)
    c.resize(1, 3)  # slot 1's pages first: slot 0 gets later ones
    c.resize(0, 3)
    bt, lens = c.tables()
    kn = rnd(rng, (2, 3, 2, 16))
    vn = rnd(rng, (2, 3, 2, 16))
    q = rnd(rng, (2, 3, 4, 16))
    cached = np.array([0, 0], np.int32)  # positions never written are never read
    out = seqfuse.flash_attn_with_kvcache(q, k, v, k=kn, v=vn, cache_seqlens=cached, block_table=bt,
                                         causal=True, k_scale=ks, v_scale=vs)
    # the new rows' scales are amax / 448
    for s in range(2):
        for j in range(3):
            pos = cached[s] + j
            assert np.array_equal(ks[bt[s, pos // 4], pos % 4], np.abs(kn[s, j]).max(axis=1) / np.float32(448))
    assert out.shape == q.shape and np.all(np.isfinite(out))


@pytest.mark.skipif(not HAS_GPU or not hasattr(torch, "float8_e4m3fn") if torch is not None else True,
                    reason="needs torch with CUDA and float8_e4m3fn, and a CUDA build of seqfuse")
@pytest.mark.parametrize("per_head", [False, True])
def test_torch_cuda_fp8(per_head):
    rng = np.random.default_rng(8)
    b, hq, hkv, d, ps, lq = 4, 8, 2, 128, 16, 1
    cached = np.array([0, 15, 16, 300], np.int32)
    lens = cached + lq
    npg, bt = setup(rng, b, hkv, d, ps, lens)
    dev = "cuda"
    kc = torch.zeros((npg, ps, hkv, d), dtype=torch.float8_e4m3fn, device=dev)
    vc = torch.zeros_like(kc)
    if per_head:
        ks = torch.full((hkv,), 0.01, device=dev)
        vs = torch.full((hkv,), 0.008, device=dev)
    else:
        ks = torch.zeros((npg, ps, hkv), device=dev)
        vs = torch.zeros_like(ks)
    # the prefix appended first, then one new token each, then attention
    T = lambda a: torch.from_numpy(a).to(dev).to(torch.bfloat16)  # noqa: E731
    kp, vp = rnd(rng, (b, 300, hkv, d)), rnd(rng, (b, 300, hkv, d))
    tb = torch.from_numpy(bt).to(dev)
    for s in range(b):
        if cached[s]:
            seqfuse.flash_attn_with_kvcache(T(rnd(rng, (1, 1, hq, d))), kc, vc, k=T(kp[s:s + 1, :cached[s]]),
                                            v=T(vp[s:s + 1, :cached[s]]), cache_seqlens=0, block_table=tb[s:s + 1],
                                            k_scale=ks, v_scale=vs)
    q, kn, vn = T(rnd(rng, (b, lq, hq, d))), T(rnd(rng, (b, lq, hkv, d))), T(rnd(rng, (b, lq, hkv, d)))
    out = seqfuse.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=torch.from_numpy(cached).to(dev),
                                         block_table=tb, causal=True, k_scale=ks, v_scale=vs)
    torch.cuda.synchronize()
    codes_k = kc.view(torch.uint8).cpu().numpy()
    codes_v = vc.view(torch.uint8).cpu().numpy()
    hks, hvs = ks.cpu().numpy(), vs.cpu().numpy()
    K, V = [], []
    for s in range(b):
        pos = np.arange(lens[s])
        pg, r = bt[s][pos // ps], pos % ps
        kscale = hks[None, :, None] if per_head else hks[pg, r][:, :, None]
        vscale = hvs[None, :, None] if per_head else hvs[pg, r][:, :, None]
        K.append(VALS[codes_k[pg, r]] * kscale)
        V.append(VALS[codes_v[pg, r]] * vscale)
    # the new token's codes: this file's encoder of the bf16 values
    for s in range(b):
        pos = cached[s]
        x = kn[s, 0].float().cpu().numpy()
        sc = hks if per_head else np.abs(x).max(axis=1) / np.float32(448)
        assert np.array_equal(codes_k[bt[s, pos // ps], pos % ps], e4m3_encode(x / sc[:, None].astype(np.float32)))
    ro = ref_attn(q.float().cpu().numpy(), K, V, lens, causal=True)
    assert rel_err(out.float().cpu().numpy(), ro) < 2e-2
