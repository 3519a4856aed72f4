"""The ends of a decode step (seqfuse.h, "Embedding lookup and token
sampling"): embed(table, ids) and sample(logits, ...).  numpy arrays run on
the CPU backend, torch tensors on their device (CUDA tensors on the CUDA
backend, on the current stream)."""
import ctypes

import numpy as np

from . import _lib as L
from ._core import Call, as_int, fail
from ._engine import _Sampling, _samp_init

_P = ctypes.POINTER
_T = _P(L.sf_tensor)
_embed = L._decl("sf_embed", ctypes.c_int, ctypes.c_void_p, _T, _T, _T)
_sample = L._decl("sf_sample", ctypes.c_int, ctypes.c_void_p, _T, _P(_Sampling), _T, _T, _T, _T)


class _Backend(ctypes.Structure):
    """Call.run sets the backend on a params struct; these ops take none, so
    the choice goes on the context for the call's duration."""
    _fields_ = [("backend", ctypes.c_int)]


def _runner(fn, *args):
    def run(handle, pref):
        L.sf_ctx_set_backend(handle, pref._obj.backend)
        try:
            return fn(handle, *args)
        finally:
            L.sf_ctx_set_backend(handle, L.SF_BACKEND_AUTO)
    return run


def _empty(call, shape, dtype):
    """An output of the call's kind: dtype is a numpy dtype name."""
    if call.kind == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype), device=call.primary.device)
    if call.kind == "numpy":
        return np.empty(shape, dtype=dtype)
    fail(L.SF_ERR_UNSUPPORTED, "%s: pass numpy arrays or torch tensors" % call.op)


def embed(table, ids, out_dtype=None, backend="auto"):
    """out[..., :] = table[ids[...], :]: table (V, D) float32/float16/
    bfloat16 with unit stride along D, ids of any shape (integers, used as
    int32); out ids.shape + (D,) in out_dtype (default: table's).  An id
    outside [0, V) is SeqfuseError (SF_ERR_INDEX) on the CPU; on a GPU its
    row is zeros."""
    call = Call("embed", table, "table")
    idx = call.as_i32(ids, "ids")
    shp = tuple(idx.shape)
    flat = idx.reshape(-1)
    if call.kind == "torch":
        dt = str(out_dtype if out_dtype is not None else table.dtype).replace("torch.", "")
    else:
        dt = np.dtype(out_dtype if out_dtype is not None else table.dtype).name
    out = _empty(call, (flat.shape[0], table.shape[-1]), dt)
    tt, ti, to = call.tensor(table, "table"), call.tensor(flat, "ids"), call.tensor(out, "out")
    call.run(_runner(_embed, ctypes.byref(tt), ctypes.byref(ti), ctypes.byref(to)), _Backend(), backend)
    return out.reshape(shp + (table.shape[-1],))


def sample(logits, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0, seen=None,
           slots=None, rng=None, backend="auto"):
    """One token per row of logits ((n, V) or (V,), float32/float16/
    bfloat16), with the rules of the engine's sampler (seqfuse.h sf_sample):
    repetition penalty over the tokens marked in seen ((S, V) uint8, updated
    in place: each row's token is marked), greedy when temperature is 0,
    else temperature, top-k, top-p, min-p and one splitmix64 draw from
    rng[slot] ((S,) int64, advanced in place by one draw per row; may be
    None when greedy).  slots (n,) maps rows to slots (default: row i uses
    slot i).  Returns int32 tokens of shape (n,) (or () for 1-D logits)."""
    call = Call("sample", logits, "logits")
    one = len(logits.shape) == 1
    lg = logits.reshape(1, -1) if one else logits
    n = lg.shape[0]
    s = _Sampling()
    _samp_init(ctypes.byref(s))
    s.temperature = float(temperature)
    s.top_k = as_int("sample", "top_k", top_k)
    s.top_p, s.min_p, s.repetition_penalty = float(top_p), float(min_p), float(repetition_penalty)
    if rng is None:
        if s.temperature > 0:
            fail(L.SF_ERR_NULL_POINTER, "sample: rng (an int64 array of splitmix64 states, one a slot, "
                                        "advanced in place) is needed when temperature > 0")
        rng = _empty(call, (n if seen is None else seen.shape[0],), "int64")
    sl = call.as_i32(slots, "slots") if slots is not None else None
    tok = _empty(call, (n,), "int32")
    tl, tsl, tse = call.tensor(lg, "logits"), call.tensor(sl, "slots"), call.tensor(seen, "seen")
    tr, tt = call.tensor(rng, "rng"), call.tensor(tok, "tokens")
    call.run(_runner(_sample, ctypes.byref(tl), ctypes.byref(s), ctypes.byref(tsl), ctypes.byref(tse),
                     ctypes.byref(tr), ctypes.byref(tt)), _Backend(), backend)
    return tok.reshape(()) if one else tok
