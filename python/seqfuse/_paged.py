"""KVCache: the paged KV cache owned by the library (sf_kv_cache)."""
import ctypes

from . import _lib as L
from ._core import as_int, fail
from ._lib import SF_OK, SF_ERR_DTYPE


# ------------------------------------------------------------------ paged cache object

class _CudaView:
    """A __cuda_array_interface__ over library memory, owning a reference to
    the cache so torch's tensor keeps the memory alive."""

    def __init__(self, owner, ptr, shape, typestr):
        self._owner = owner
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "version": 3, "strides": None}


_KV_DTYPES = {"float32": L.SF_F32, "float16": L.SF_F16, "bfloat16": L.SF_BF16,
              "float8_e4m3fn": L.SF_F8E4M3}


class KVCache:
    """A paged KV cache owned by the library (sf_kv_cache): per layer a K and a
    V pool (num_pages, page_size, nheads_kv, head_dim), one free list of pages,
    and max_seqs sequence slots of at most max_pages_per_seq pages.

    device -1 keeps it in host memory (pools and tables are numpy arrays; f32,
    f16 or bf16 through ml_dtypes); a CUDA device keeps it on that GPU (torch
    tensors; f16 or bf16).  dtype "float8_e4m3fn" (either device; numpy
    through ml_dtypes) gives FP8 pools with a float32 scale pool per K and
    V pool, (num_pages, page_size, nheads_kv): scales(layer) views them, for
    the k_scale / v_scale arguments of flash_attn_with_kvcache.  Views stay
    valid while the KVCache lives (each holds a reference to it).

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
            fail(SF_ERR_DTYPE, "%s: dtype %r; float32, float16, bfloat16 or float8_e4m3fn" % (op, dtype))
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
        mp = max_pages_per_seq
        if mp is None:  # the pages shared out evenly
            mp = -(-int(num_pages) // max(1, int(max_seqs)))
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
            item = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "float8_e4m3fn": 1}[dtype]
            buf = (ctypes.c_char * (n * item)).from_address(t.data)
            buf._owner = self  # the numpy view's base keeps the cache alive
            a = np.frombuffer(buf, dtype=np.uint8)
            if dtype in ("bfloat16", "float8_e4m3fn"):
                import ml_dtypes
                return a.view(getattr(ml_dtypes, dtype)).reshape(shape)
            return a.view(np.dtype(dtype)).reshape(shape)
        import torch
        typestr = {"float32": "<f4", "float16": "<f2", "bfloat16": "<i2", "int32": "<i4",
                   "float8_e4m3fn": "|u1"}[dtype]
        x = torch.as_tensor(_CudaView(self, t.data, shape, typestr), device="cuda:%d" % self.device)
        if dtype == "bfloat16":
            return x.view(torch.bfloat16)
        return x.view(torch.float8_e4m3fn) if dtype == "float8_e4m3fn" else x

    def pools(self, layer=0):
        """(k_cache, v_cache) of `layer`: views of the library's pools."""
        k, v = L.sf_tensor(), L.sf_tensor()
        self._check(L.sf_kv_cache_pools(self._h, as_int("KVCache.pools", "layer", layer), ctypes.byref(k),
                                        ctypes.byref(v)))
        return self._view(k, self._dtype), self._view(v, self._dtype)

    def scales(self, layer=0):
        """FP8 caches: (k_scale, v_scale) of `layer`, float32 (num_pages,
        page_size, nheads_kv) views of the library's scale pools (zero at
        creation; the append writes a written row's scale)."""
        k, v = L.sf_tensor(), L.sf_tensor()
        self._check(L.sf_kv_cache_scales(self._h, as_int("KVCache.scales", "layer", layer), ctypes.byref(k),
                                         ctypes.byref(v)))
        return self._view(k, "float32"), self._view(v, "float32")

    def resize(self, seq, length):
        """Slot `seq` holds `length` tokens from now on (pages taken or given back)."""
        op = "KVCache.resize"
        n = as_int(op, "length", length, 0, 2 ** 62)
        self._check(L.sf_kv_cache_resize(self._h, as_int(op, "seq", seq), n))

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
