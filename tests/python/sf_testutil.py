"""Helpers shared by the binding's tests (test_binding.py, test_layer_ops.py):
the library import, dtypes and tolerances, relative errors, random data,
status assertions, a fake __cuda_array_interface__ object."""
import os
import sys

import numpy as np
import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO, "python"))

import seqfuse  # noqa: E402,F401  (importable check: fails early with the loader message)
from seqfuse import SeqfuseError, _lib  # noqa: E402

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

# Relative Frobenius error bounds: the result is rounded to the dtype once,
# plus f32 accumulation error.
TOL = {"float32": 1e-4, "float16": 3e-3, "bfloat16": 2e-2}


DTYPES = ["float32", "float16"] + (["bfloat16"] if ml_dtypes is not None else [])


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def f64(a):
    return None if a is None else np.asarray(a).astype(np.float64)


def rel_err(got, want):
    got = f64(got)
    want = f64(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.all(np.isfinite(got) | np.isinf(want)), "non-finite output"
    d = np.linalg.norm((got - want)[np.isfinite(want)])
    n = np.linalg.norm(want[np.isfinite(want)])
    return d / max(n, 1e-30)


def rnd(rng, shape, dtype="float32", scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np_dtype(dtype))


BACKENDS = ["ref", "cpu", "auto"]


def _raises(status, fn, *args, **kw):
    with pytest.raises(SeqfuseError) as e:
        fn(*args, **kw)
    err = e.value
    assert isinstance(err, RuntimeError)
    assert err.status == status, str(err)
    assert err.status_name == _lib.STATUS_NAMES[status]
    assert str(err).startswith(_lib.STATUS_NAMES[status] + ":"), str(err)
    return err


class _FakeCudaArray:
    """Stands in for a cupy/numba device array: only the interface."""

    def __init__(self, shape, typestr, strides, ptr):
        self.__cuda_array_interface__ = dict(shape=shape, typestr=typestr, strides=strides,
                                             data=(ptr, False), version=3)
