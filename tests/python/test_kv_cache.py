"""seqfuse.KVCache (sf_kv_cache) from Python: pools and tables as arrays of the
cache's memory, page bookkeeping, and a decode step through it equal to
flash_attn_func over the same keys stored contiguously."""
import gc

import numpy as np
import pytest

from sf_testutil import TOL, _raises, rel_err, rnd  # noqa: E402 (sets the path)

import seqfuse  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
HAS_GPU = (torch is not None and torch.cuda.is_available() and seqfuse.has_cuda())


def test_bookkeeping_and_views():
    c = seqfuse.KVCache(10, 4, 2, 8, "float32", num_layers=2, max_seqs=3, max_pages_per_seq=4)
    k, v = c.pools(1)
    assert k.shape == (10, 4, 2, 8) and k.dtype == np.float32 and v.shape == k.shape
    k[...] = 1.5  # writable views of the library's memory
    assert np.all(c.pools(1)[0] == 1.5)
    c.resize(0, 9)
    c.resize(1, 16)
    assert c.free_pages == 3 and c.length(0) == 9
    bt, lens = c.tables()
    assert bt.shape == (3, 4) and bt.dtype == np.int32 and list(lens) == [9, 16, 0]
    held = list(bt[0, :3]) + list(bt[1, :4])
    assert len(set(held)) == 7 and all(0 <= p < 10 for p in held) and bt[0, 3] == -1 and np.all(bt[2] == -1)
    _raises(seqfuse.SF_ERR_OUT_OF_MEMORY, c.resize, 2, 13)
    _raises(seqfuse.SF_ERR_INVALID_ARG, c.resize, 2, 17)
    _raises(seqfuse.SF_ERR_INDEX, c.resize, 3, 1)
    _raises(seqfuse.SF_ERR_INDEX, c.pools, 2)
    _raises(seqfuse.SF_ERR_DTYPE, seqfuse.KVCache, 4, 4, 1, 8, "int8")
    _raises(seqfuse.SF_ERR_INVALID_ARG, seqfuse.KVCache, 4, 3, 1, 8, "float32")
    c.resize(0, 0)
    assert c.free_pages == 6
    # a view keeps the cache alive after the last reference to the object goes
    k0 = c.pools(0)[0]
    del c, k, v
    gc.collect()
    k0[...] = 2.0
    assert np.all(k0 == 2.0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_decode_through_the_cache(dtype):
    rng = np.random.default_rng(9)
    b, H, hkv, d, ps = 2, 4, 2, 16, 4
    c = seqfuse.KVCache(16, ps, hkv, d, dtype, max_seqs=b, max_pages_per_seq=8)
    kc, vc = c.pools()
    lens = [7, 13]
    K = [rnd(rng, (n, hkv, d), dtype) for n in lens]
    V = [rnd(rng, (n, hkv, d), dtype) for n in lens]
    for s, n in enumerate(lens):
        c.resize(s, n)
    bt, seqlens = c.tables()
    for s, n in enumerate(lens):  # fill the pages by hand through the table
        for t in range(n):
            kc[bt[s, t // ps], t % ps] = K[s][t]
            vc[bt[s, t // ps], t % ps] = V[s][t]
    q = rnd(rng, (b, 1, H, d), dtype)
    out = seqfuse.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=bt, causal=True)
    for s, n in enumerate(lens):
        want = seqfuse.flash_attn_func(q[s:s + 1], K[s][None], V[s][None], causal=True, backend="ref")
        assert rel_err(out[s:s + 1], want) < TOL[dtype]


@pytest.mark.skipif(not HAS_GPU, reason="needs torch with CUDA and a CUDA build of seqfuse")
def test_cuda_cache_views():
    c = seqfuse.KVCache(32, 16, 2, 64, "bfloat16", num_layers=1, max_seqs=2, max_pages_per_seq=8, device=0)
    k, v = c.pools()
    assert k.is_cuda and k.dtype == torch.bfloat16 and k.shape == (32, 16, 2, 64)
    c.resize(1, 40)
    bt, lens = c.tables()
    assert bt.is_cuda and lens.tolist() == [0, 40] and (bt[1, :3] >= 0).all() and (bt[1, 3:] == -1).all()
