"""Argument helpers shared by the binding's op modules."""
from ._core import fail
from ._lib import SF_ERR_INVALID_ARG, SF_ERR_SHAPE, SF_ERR_UNSUPPORTED


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




def kind_is_numpy(obj):
    import numpy as np
    return isinstance(obj, np.ndarray)
