"""seqfuse.embed and seqfuse.sample: embed against numpy indexing, sample
against a numpy sampler written here from seqfuse.h's rules (the penalty,
greedy, temperature, top-k, top-p, min-p, the splitmix64 draw), the RNG and
seen updates, errors; with torch CUDA tensors the CUDA backend against the
CPU one (skipped without a GPU)."""
import numpy as np
import pytest

from sf_testutil import DTYPES, np_dtype, f64  # noqa: F401
import seqfuse
from seqfuse import SeqfuseError

M64 = (1 << 64) - 1


def splitmix(state):
    """(new state, draw) of splitmix64, in Python ints."""
    s = (state + 0x9e3779b97f4a7c15) & M64
    z = s
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return s, z ^ (z >> 31)


def np_sample(row, seen_row, T, top_k, top_p, min_p, pen, state):
    """(token, new state) by the rules of seqfuse.h, in numpy (f32 value
    processing as the library, float64 probabilities)."""
    v = row.astype(np.float32).copy()
    if seen_row is not None and pen != 1.0 and pen > 0:
        m = seen_row != 0
        v[m] = np.where(v[m] > 0, v[m] / np.float32(pen), v[m] * np.float32(pen))
    ok = ~np.isnan(v)
    if not T > 0:
        if not ok.any():
            return 0, state
        vv = np.where(ok, v, -np.inf)
        return int(np.flatnonzero(vv == vv[ok].max())[0]), state
    state, r = splitmix(state)
    u = (r >> 11) * 2.0 ** -53
    v = v / np.float32(T)
    ids = np.flatnonzero(ok)
    order = ids[np.lexsort((ids, -v[ids].astype(np.float64)))]
    if 0 < top_k < len(order):
        order = order[:top_k]
    w = np.exp(v[order].astype(np.float64) - float(v[order[0]]))
    n = len(order)
    if 0 < top_p < 1:
        c = np.cumsum(w / w.sum())
        hit = np.flatnonzero(c >= top_p)
        n = int(hit[0]) + 1 if len(hit) else n
    if min_p > 0:
        n = max(1, min(n, int((w[:n] >= min_p).sum())))
    acc = np.cumsum(w[:n])
    j = int(np.searchsorted(acc, u * acc[-1], side="right"))
    return int(order[min(j, n - 1)]), state


def rnd(shape, seed):
    return np.random.default_rng(seed).uniform(-6, 6, shape).astype(np.float32)


@pytest.mark.parametrize("td", DTYPES)
@pytest.mark.parametrize("od", DTYPES)
def test_embed(td, od):
    table = rnd((50, 24), 1).astype(np_dtype(td))
    ids = np.array([[3, 49, 0], [7, 7, 12]], np.int64)
    out = seqfuse.embed(table, ids, out_dtype=np_dtype(od))
    assert out.shape == (2, 3, 24) and out.dtype == np_dtype(od)
    want = table.astype(np.float32)[ids].astype(np_dtype(od))
    assert np.array_equal(f64(out), f64(want))
    with pytest.raises(SeqfuseError, match="ids"):
        seqfuse.embed(table, np.array([1, 50]))
    with pytest.raises(SeqfuseError, match="ids"):
        seqfuse.embed(table, np.array([-1]))


SETTINGS = [dict(temperature=0.0), dict(temperature=0.0, repetition_penalty=1.4),
            dict(temperature=1.0), dict(temperature=0.7, top_k=5), dict(temperature=1.0, top_p=0.8),
            dict(temperature=1.2, min_p=0.2), dict(temperature=0.9, top_k=50, top_p=0.95, min_p=0.05,
                                                   repetition_penalty=1.2)]


@pytest.mark.parametrize("cfg", SETTINGS, ids=lambda c: ",".join("%s=%g" % kv for kv in c.items()))
@pytest.mark.parametrize("V", [1, 7, 3000])
@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_sample_matches_numpy(cfg, V, backend):
    n, S = 12, 15
    rng0 = np.random.default_rng(V).integers(-2 ** 63, 2 ** 63 - 1, S, dtype=np.int64)
    logits = rnd((n, V), V + 3)
    seen0 = (np.random.default_rng(5).random((S, V)) < 0.1).astype(np.uint8)
    slots = np.random.default_rng(6).permutation(S)[:n].astype(np.int32)
    seen, rng = seen0.copy(), rng0.copy()
    tok = seqfuse.sample(logits, seen=seen, slots=slots, rng=rng, backend=backend, **cfg)
    assert tok.dtype == np.int32 and tok.shape == (n,)
    g = dict(top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0)
    g.update(cfg)
    for i in range(n):
        sl = slots[i]
        t, st = np_sample(logits[i], seen0[sl], g["temperature"], g["top_k"], g["top_p"], g["min_p"],
                          g["repetition_penalty"], int(rng0[sl]) & M64)
        assert tok[i] == t, (i, tok[i], t)
        assert int(rng[sl]) & M64 == st
        assert seen[sl, t] == 1
    untouched = np.setdiff1d(np.arange(S), slots)
    assert np.array_equal(rng[untouched], rng0[untouched])


def test_sample_one_row_and_errors():
    x = np.array([0.5, 2.0, 2.0, -1.0], np.float32)
    assert int(seqfuse.sample(x)) == 1  # greedy: the lower id among equals
    assert seqfuse.sample(x).shape == ()
    with pytest.raises(SeqfuseError, match="rng"):
        seqfuse.sample(x, temperature=1.0)
    r = np.zeros(1, np.int64)
    with pytest.raises(SeqfuseError, match="slots"):
        seqfuse.sample(np.zeros((2, 4), np.float32), temperature=1.0, rng=r, slots=np.array([0, 3]))
    with pytest.raises(SeqfuseError, match="rng"):
        seqfuse.sample(np.zeros((2, 4), np.float32), temperature=1.0, rng=np.zeros(2, np.int32))


try:
    import torch
except ImportError:
    torch = None

HAS_GPU = torch is not None and torch.cuda.is_available() and seqfuse.has_cuda()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs torch with CUDA and a CUDA build of seqfuse")


@needs_gpu
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_torch_cuda_embed(dt):
    table = torch.randn(1000, 96).to(getattr(torch, dt))
    ids = torch.tensor([5, 999, 0, 5], dtype=torch.int32)
    out = seqfuse.embed(table.cuda(), ids.cuda())
    assert out.is_cuda and torch.equal(out.cpu(), table[ids.long()])
    out = seqfuse.embed(table.cuda(), ids.cuda(), out_dtype=torch.float32)
    assert torch.equal(out.cpu(), table[ids.long()].float())


@needs_gpu
@pytest.mark.parametrize("cfg", SETTINGS, ids=lambda c: ",".join("%s=%g" % kv for kv in c.items()))
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_torch_cuda_sample(cfg, dt):
    n, S, V = 32, 40, 50000
    g = torch.Generator().manual_seed(3)
    logits = (torch.rand(n, V, generator=g) * 12 - 6).to(getattr(torch, dt))
    seen = (torch.rand(S, V, generator=g) < 0.05).to(torch.uint8)
    rng = torch.randint(-2 ** 62, 2 ** 62, (S,), generator=g, dtype=torch.int64)
    slots = torch.randperm(S, generator=g)[:n].to(torch.int32)
    sc, rc = seen.clone(), rng.clone()
    tc = seqfuse.sample(logits, seen=sc, slots=slots, rng=rc, **cfg)  # torch CPU tensors: the CPU backend
    sg, rg = seen.cuda(), rng.cuda()
    tg = seqfuse.sample(logits.cuda(), seen=sg, slots=slots.cuda(), rng=rg, **cfg)
    assert tg.is_cuda and torch.equal(rg.cpu(), rc)
    diff = int((tg.cpu() != tc).sum())
    assert diff <= 1, "%d of %d rows differ between CUDA and CPU" % (diff, n)
    if diff == 0:
        assert torch.equal(sg.cpu(), sc)


@needs_gpu
def test_torch_cuda_sample_graph_capture():
    """sample captured in a CUDA graph (no allocation or sync inside the
    call): each replay advances the RNG states once and marks seen."""
    n, V = 4, 1000
    logits = torch.randn(n, V, device="cuda")
    seen = torch.zeros(n, V, dtype=torch.uint8, device="cuda")
    rng = torch.arange(n, dtype=torch.int64, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        seqfuse.sample(logits, temperature=1.0, top_p=0.9, seen=seen, rng=rng)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        tok = seqfuse.sample(logits, temperature=1.0, top_p=0.9, seen=seen, rng=rng)
    before = rng.clone()
    g.replay()
    torch.cuda.synchronize()
    want = [(int(x) + 0x9e3779b97f4a7c15) & M64 for x in before.cpu().tolist()]
    assert [int(x) & M64 for x in rng.cpu().tolist()] == want
    assert all(seen[i, int(tok[i])] == 1 for i in range(n))
