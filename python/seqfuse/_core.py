"""Errors, contexts, and the translation of array objects into sf_tensor.

Arrays come in four kinds:
  numpy   host memory; outputs are np.empty
  torch   host or CUDA memory; outputs are torch.empty on the same device;
          calls run on torch.cuda.current_stream(device)
  cupy    CUDA memory; outputs are cupy.empty; calls run on cupy's current stream
  cai     any other object with __cuda_array_interface__; outputs through
          torch (or cupy) when importable; calls run on the interface's stream
torch and cupy are imported only when such an object is seen.
"""
import ctypes
import threading

import numpy as np

from . import _lib as L


# ------------------------------------------------------------------ errors

class SeqfuseError(RuntimeError):
    """A seqfuse call failed.

    .status is the sf_status code (an int; the SF_ERR_* constants of this
    package), .status_name its name ("SF_ERR_SHAPE"), .detail the library's
    sentence about what was wrong (sf_ctx_last_error) or the binding's own.
    """

    def __init__(self, status, detail=""):
        self.status = int(status)
        self.status_name = L.STATUS_NAMES.get(self.status, "SF_ERR_%d" % self.status)
        self.detail = detail
        text = L.sf_status_string(self.status)
        text = text.decode() if text else self.status_name
        super().__init__(text + (": " + detail if detail else ""))


def fail(status, detail):
    raise SeqfuseError(status, detail)


def as_int(op, name, v, lo=-(2 ** 31), hi=2 ** 31 - 1):
    """v as a Python int in [lo, hi] (the C side's int32 unless narrower), or
    SeqfuseError: ctypes would wrap a wider value silently, and a float where an
    int is meant (64.7, or 64.0) is refused rather than truncated."""
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        fail(L.SF_ERR_INVALID_ARG, "%s: %s must be an int, got %r" % (op, name, v))
    i = v.__index__()
    if not lo <= i <= hi:
        fail(L.SF_ERR_INVALID_ARG, "%s: %s %d is out of range [%d, %d]" % (op, name, i, lo, hi))
    return i


def as_flag(op, name, v):
    """A boolean argument as 0 / 1: True, False, 0, 1 (and numpy's booleans);
    anything else (causal=7, a string) is SeqfuseError."""
    if isinstance(v, bool) or type(v).__name__ in ("bool_", "bool"):  # numpy 1.x / 2.x booleans
        return 1 if v else 0
    if hasattr(v, "__index__") and v.__index__() in (0, 1):
        return v.__index__()
    fail(L.SF_ERR_INVALID_ARG, "%s: %s must be True or False, got %r" % (op, name, v))


# ------------------------------------------------------------------ contexts
# A context is used by one thread at a time (seqfuse.h), and ctypes drops the
# GIL during the call, so contexts are per thread.  They are also per CUDA
# stream: the workspace arena of a context is reused by every call on it,
# which is only safe while those calls are ordered on one stream.

_tls = threading.local()
_num_threads = [None]  # set_num_threads(); None = the library's default


class _Ctx:
    __slots__ = ("handle", "device", "threads")

    def __init__(self, device):
        h = ctypes.c_void_p()
        st = L.sf_ctx_create(ctypes.byref(h), device)
        if st != L.SF_OK:
            where = "the CPU" if device < 0 else "CUDA device %d" % device
            fail(st, "cannot create a seqfuse context on %s (library built with CUDA: %s, "
                     "CUDA devices seen: %d)" % (where, "yes" if L.sf_has_cuda_build() else "no",
                                                 L.sf_cuda_device_count()))
        self.handle = h.value
        self.device = device
        self.threads = None

    def __del__(self):
        h, self.handle = getattr(self, "handle", None), None
        if h:
            try:
                L.sf_ctx_destroy(h)
            except Exception:  # interpreter shutdown: the library may be gone
                pass


def get_ctx(device, stream=0, capturing=False):
    cache = getattr(_tls, "ctxs", None)
    if cache is None:
        cache = _tls.ctxs = {}
    key = (device, stream or 0)
    if capturing:
        return _ctx_for_capture(cache, device, key)
    c = cache.get(key)
    if c is None:
        c = cache[key] = _Ctx(device)
    return c


# Contexts a captured CUDA graph may still use: never destroyed (their
# workspace is where the graph's kernels write).
_captured = []


def _ctx_for_capture(cache, device, key):
    """The context for a call on a stream being captured into a CUDA graph
    (torch.cuda.graph captures on a stream of its own).  Nothing may be
    allocated inside a capture, so the call takes this thread's context of
    the device with the largest workspace (normally the warm-up's, run
    before the capture).  That context moves to the capture stream; the
    stream it leaves gets a fresh context on its next call, so replays and
    eager calls never share a workspace.  The capture stream's previous
    context, if it is set aside, is kept alive for the graphs captured with
    it."""
    mine = [k for k in cache if k[0] == device]
    if not mine:
        fail(L.SF_ERR_INVALID_ARG, "seqfuse: no context exists on CUDA device %d to capture this call into a "
                                   "CUDA graph with (creating one allocates, which breaks the capture): run "
                                   "the call once before capturing" % device)
    best = max(mine, key=lambda k: L.sf_ctx_workspace_size(cache[k].handle))
    cur = cache.get(key)
    if cur is not None and (best == key or L.sf_ctx_workspace_size(cur.handle) >=
                            L.sf_ctx_workspace_size(cache[best].handle)):
        return cur
    if cur is not None:
        _captured.append(cache.pop(key))
    c = cache.pop(best)
    cache[key] = c
    if c not in _captured:
        _captured.append(c)
    return c


def last_ctx():
    return getattr(_tls, "last", None)


# ------------------------------------------------------------------ dtypes

_NP_CODES = {np.dtype(np.float32): L.SF_F32, np.dtype(np.float16): L.SF_F16,
             np.dtype(np.int32): L.SF_I32, np.dtype(np.int64): L.SF_I64,
             np.dtype(np.uint8): L.SF_U8, np.dtype(np.int8): L.SF_I8}
_CAI_CODES = {"<f4": L.SF_F32, "<f2": L.SF_F16, "<i4": L.SF_I32, "<i8": L.SF_I64,
              "|u1": L.SF_U8, "|i1": L.SF_I8}
_ACCEPTED = ("float32, float16 or bfloat16 (int32/int64 for index tensors, uint8/int8 for quantised codes, "
             "float8_e4m3fn for paged KV cache pools)")


def _np_code(dt):
    c = _NP_CODES.get(dt)
    if c is not None:
        return c
    if (dt.name == "bfloat16" and dt.itemsize == 2) or (dt.name == "float8_e4m3fn" and dt.itemsize == 1):
        try:
            import ml_dtypes
        except ImportError:
            return None
        if dt == np.dtype(ml_dtypes.bfloat16):
            return L.SF_BF16
        if dt == np.dtype(ml_dtypes.float8_e4m3fn):  # paged KV cache pools
            return L.SF_F8E4M3
    return None


def _torch_codes(torch):
    codes = {torch.float32: L.SF_F32, torch.float16: L.SF_F16, torch.bfloat16: L.SF_BF16,
             torch.int32: L.SF_I32, torch.int64: L.SF_I64, torch.uint8: L.SF_U8, torch.int8: L.SF_I8}
    f8 = getattr(torch, "float8_e4m3fn", None)  # paged KV cache pools
    if f8 is not None:
        codes[f8] = L.SF_F8E4M3
    return codes


def kind_of(obj):
    if isinstance(obj, np.ndarray):
        return "numpy"
    mod = type(obj).__module__.split(".")[0]
    if mod == "torch" and hasattr(obj, "data_ptr"):
        return "torch"
    if hasattr(obj, "__cuda_array_interface__"):
        return "cupy" if mod == "cupy" else "cai"
    return None


def _cai_device(obj):
    dev = getattr(obj, "device", None)
    for attr in ("id", "index"):  # cupy: device.id; torch-like: device.index
        v = getattr(dev, attr, None)
        if isinstance(v, int):
            return v
    # The interface has no device field; assume the current device.
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_device()
    return 0


# ------------------------------------------------------------------ one call

class Call:
    """The arrays of one op call: converts them to sf_tensor, keeps every
    array (and every converted copy) alive until the call object dies,
    allocates outputs of the primary array's kind, runs the op."""

    def __init__(self, op, primary, pname):
        self.op = op
        self.keep = []
        k = kind_of(primary)
        if k is None:
            fail(L.SF_ERR_INVALID_ARG,
                 "%s: %s is a %s; pass a numpy array, a torch tensor or an object with "
                 "__cuda_array_interface__" % (op, pname, type(primary).__name__))
        self.kind = k
        self.primary = primary
        if k == "numpy":
            self.device = L.SF_DEVICE_CPU
        elif k == "torch":
            d = primary.device
            if d.type == "cpu":
                self.device = L.SF_DEVICE_CPU
            elif d.type == "cuda":
                self.device = d.index if d.index is not None else 0
            else:
                fail(L.SF_ERR_DEVICE, "%s: %s is on torch device %s; seqfuse runs on the CPU and "
                                      "on CUDA devices" % (op, pname, d))
        else:
            self.device = _cai_device(primary)

    # -- conversion of non-arrays (lists, scalars) into the call's kind
    def _as_array(self, obj, name):
        if kind_of(obj) is not None:
            return obj
        if self.kind == "numpy" or self.device < 0:
            if self.kind == "torch":
                import torch
                return torch.as_tensor(obj)
            return np.asarray(obj)
        if self.kind == "cupy":
            import cupy
            with cupy.cuda.Device(self.device):
                return cupy.asarray(obj)
        import torch
        return torch.as_tensor(obj, device="cuda:%d" % self.device)

    # -- dtype conversions for small side tensors
    def as_f32(self, obj, name):
        """A, D, dt_bias: the library takes f32; a float tensor of another
        precision is converted (these are per-head vectors: the copy is tiny)."""
        if obj is None:
            return None
        a = self._as_array(obj, name)
        k = kind_of(a)
        if k == "numpy":
            if a.dtype != np.float32 and (a.dtype.kind == "f" or a.dtype.name == "bfloat16"):
                a = a.astype(np.float32)
        elif k == "torch":
            import torch
            if a.dtype != torch.float32 and a.dtype.is_floating_point:
                a = a.float()
        elif k == "cupy":
            if a.dtype.kind == "f" and a.dtype.itemsize != 4:
                a = a.astype("float32")
        self.keep.append(a)
        return a

    def as_i32(self, obj, name):
        """Index tensors the header wants as i32: other integer dtypes are
        converted (copied), refusing values that do not fit."""
        if obj is None:
            return None
        a = self._as_array(obj, name)
        k = kind_of(a)
        lo, hi = -2 ** 31, 2 ** 31 - 1
        if k == "numpy":
            if a.dtype.kind in "iu" and a.dtype != np.int32:
                if a.size and (int(a.min()) < lo or int(a.max()) > hi):
                    fail(L.SF_ERR_TOO_LARGE, "%s: %s has values outside the int32 range" %
                         (self.op, name))
                a = a.astype(np.int32)
        elif k == "torch":
            import torch
            if a.dtype != torch.int32 and not a.dtype.is_floating_point and a.dtype != torch.bool:
                # Range check on the host only: on a GPU it would synchronise.
                if a.device.type == "cpu" and a.numel() and (int(a.min()) < lo or int(a.max()) > hi):
                    fail(L.SF_ERR_TOO_LARGE, "%s: %s has values outside the int32 range" %
                         (self.op, name))
                a = a.to(torch.int32)
        elif k == "cupy":
            if a.dtype.kind in "iu" and a.dtype.itemsize != 4:
                a = a.astype("int32")
        self.keep.append(a)
        return a

    def as_index(self, obj, name):
        """Index tensors the header takes as i32 or i64: lists become int32."""
        if obj is None:
            return None
        a = self._as_array(obj, name)
        k = kind_of(a)
        if k == "numpy" and a.dtype not in (np.int32, np.int64):
            return self.as_i32(a, name)
        self.keep.append(a)
        return a

    # -- descriptors
    def tensor(self, obj, name):
        """sf_tensor for obj (None -> absent)."""
        t = L.sf_tensor()
        if obj is None:
            return t
        obj = self._as_array(obj, name)
        self.keep.append(obj)
        k = kind_of(obj)
        if k == "numpy":
            code = _np_code(obj.dtype)
            if code is None:
                extra = ""
                if obj.dtype.byteorder == ">":
                    extra = " (big-endian; use a native byte order)"
                elif obj.dtype.name == "bfloat16":
                    extra = " (bfloat16 numpy arrays need ml_dtypes)"
                fail(L.SF_ERR_DTYPE, "%s: %s has numpy dtype %s%s; seqfuse takes %s" %
                     (self.op, name, obj.dtype, extra, _ACCEPTED))
            ptr = obj.__array_interface__["data"][0]
            dev = L.SF_DEVICE_CPU
            shape, bstrides, isz = obj.shape, obj.strides, obj.dtype.itemsize
        elif k == "torch":
            import torch
            code = _torch_codes(torch).get(obj.dtype)
            if code is None:
                fail(L.SF_ERR_DTYPE, "%s: %s has torch dtype %s; seqfuse takes %s" %
                     (self.op, name, obj.dtype, _ACCEPTED))
            d = obj.device
            if d.type == "cpu":
                dev = L.SF_DEVICE_CPU
            elif d.type == "cuda":
                dev = d.index if d.index is not None else 0
            else:
                fail(L.SF_ERR_DEVICE, "%s: %s is on torch device %s" % (self.op, name, d))
            ptr = obj.data_ptr()
            shape = tuple(obj.shape)
            return self._fill(t, name, ptr, code, dev, shape, tuple(obj.stride()))
        else:
            cai = obj.__cuda_array_interface__
            code = _CAI_CODES.get(cai["typestr"])
            if code is None:
                fail(L.SF_ERR_DTYPE, "%s: %s has type %s; seqfuse takes %s" %
                     (self.op, name, cai["typestr"], _ACCEPTED))
            ptr = cai["data"][0] or 0
            dev = _cai_device(obj)
            shape = tuple(cai["shape"])
            isz = L.sf_dtype_size(code)
            bstrides = cai.get("strides")
            if bstrides is None:  # C-contiguous
                acc, bs = isz, []
                for n in reversed(shape):
                    bs.append(acc)
                    acc *= n
                bstrides = tuple(reversed(bs))
        strides = tuple(s // isz for s in bstrides)
        for i, s in enumerate(bstrides):
            if s % isz != 0:
                fail(L.SF_ERR_STRIDE,
                     "%s: %s has a stride of %d bytes in dim %d, not a multiple of its %d-byte "
                     "elements; make a copy (np.ascontiguousarray)" % (self.op, name, s, i, isz))
        return self._fill(t, name, ptr, code, dev, tuple(shape), strides)

    def _fill(self, t, name, ptr, code, dev, shape, strides):
        if len(shape) > L.SF_MAX_RANK:
            fail(L.SF_ERR_SHAPE, "%s: %s has rank %d; seqfuse tensors have at most %d dims" %
                 (self.op, name, len(shape), L.SF_MAX_RANK))
        # A NULL pointer means "absent" to the library; a present empty
        # array must not look absent.
        t.data = ptr or None
        if 0 in shape:
            # numpy >= 2 gives empty arrays all-zero strides, which the
            # library's output-overlap check refuses; no element is ever
            # addressed, so describe them as C-contiguous.
            acc, cs = 1, []
            for n in reversed(shape):
                cs.append(acc)
                acc *= max(n, 1)
            strides = tuple(reversed(cs))
        t.dtype = code
        t.device = dev
        n = len(shape)
        t.rank = n
        t.shape[:n] = shape
        t.stride[:n] = strides
        return t

    # -- outputs
    def empty(self, shape, like=None):
        """An uninitialised output of the call's kind: dtype of `like`, or
        float32 when like is None."""
        k = self.kind
        if k == "numpy" or (k == "cai" and self.device < 0):
            dt = like.dtype if like is not None else np.float32
            return np.empty(shape, dtype=dt)
        if k == "torch":
            import torch
            dt = like.dtype if like is not None else torch.float32
            return torch.empty(shape, dtype=dt, device=self.primary.device)
        if k == "cupy":
            import cupy
            with cupy.cuda.Device(self.device):
                return cupy.empty(shape, dtype=like.dtype if like is not None else "float32")
        try:
            import torch
        except ImportError:
            try:
                import cupy
            except ImportError:
                fail(L.SF_ERR_UNSUPPORTED, "%s: outputs for __cuda_array_interface__ inputs are "
                                           "allocated with torch or cupy; neither is importable"
                     % self.op)
            with cupy.cuda.Device(self.device):
                dt = "float32" if like is None else np.dtype(
                    like.__cuda_array_interface__["typestr"])
                return cupy.empty(shape, dtype=dt)
        if like is None:
            dt = torch.float32
        else:
            dt = {"<f4": torch.float32, "<f2": torch.float16}[like.__cuda_array_interface__["typestr"]]
        return torch.empty(shape, dtype=dt, device="cuda:%d" % self.device)

    # -- the stream the call runs on
    def _stream(self):
        if self.device < 0:
            return 0
        if self.kind == "torch":
            import torch
            return torch.cuda.current_stream(self.device).cuda_stream
        if self.kind == "cupy":
            import cupy
            with cupy.cuda.Device(self.device):
                return cupy.cuda.get_current_stream().ptr
        s = self.primary.__cuda_array_interface__.get("stream")
        return s if isinstance(s, int) else 0

    def _capturing(self):
        if self.device < 0 or self.kind != "torch":
            return False
        import torch
        return torch.cuda.is_current_stream_capturing()

    def run(self, fn, params, backend):
        params.backend = backend_code(self.op, backend)
        stream = self._stream()
        ctx = get_ctx(self.device, stream, self._capturing())
        if self.device >= 0:
            st = L.sf_ctx_set_stream(ctx.handle, stream or None)
            if st != L.SF_OK:
                fail(st, L.sf_ctx_last_error(ctx.handle).decode(errors="replace"))
        else:
            n = _num_threads[0]
            if n is not None and ctx.threads != n:
                st = L.sf_ctx_set_threads(ctx.handle, n)
                if st != L.SF_OK:
                    fail(st, L.sf_ctx_last_error(ctx.handle).decode(errors="replace"))
                ctx.threads = n
        _tls.last = ctx
        st = fn(ctx.handle, ctypes.byref(params))
        if st != L.SF_OK:
            detail = L.sf_ctx_last_error(ctx.handle).decode(errors="replace")
            if params.backend == L.SF_BACKEND_CUDA and self.device < 0:
                detail += (" [seqfuse Python: the arrays are in host memory; pass CUDA tensors "
                           "(torch, cupy) to run on a GPU. This library: CUDA build %s, %d CUDA "
                           "device(s)]" % ("yes" if L.sf_has_cuda_build() else "no",
                                           L.sf_cuda_device_count()))
            fail(st, detail)


def backend_code(op, backend):
    if backend is None:
        return L.SF_BACKEND_AUTO
    code = L.BACKENDS.get(str(backend).lower()) if isinstance(backend, str) else None
    if code is None:
        fail(L.SF_ERR_INVALID_ARG, "%s: backend %r is unknown; use one of %s" %
             (op, backend, ", ".join(repr(b) for b in L.BACKENDS)))
    return code


def set_num_threads(n):
    n = int(n)
    if n < 1:
        fail(L.SF_ERR_INVALID_ARG, "set_num_threads: %d threads; must be >= 1" % n)
    _num_threads[0] = n


def get_num_threads():
    if _num_threads[0] is not None:
        return _num_threads[0]
    return L.sf_ctx_threads(get_ctx(L.SF_DEVICE_CPU).handle)
