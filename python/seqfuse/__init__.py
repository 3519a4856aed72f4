"""seqfuse: fused Mamba-2 (SSD), causal conv1d, gated RMSNorm and attention
kernels, Python binding.

A ctypes binding of libseqfuse (no compiled extension).  The library is
looked for at $SEQFUSE_LIB, then in this package's folder, then in build*/
folders of the source tree, then by ctypes.util.find_library("seqfuse").

Functions take numpy arrays (host memory, run on the CPU backends), torch
tensors (CPU or CUDA) or other objects with __cuda_array_interface__, and
return outputs of the same kind on the same device.  On a GPU the call is
asynchronous on torch's current stream (cupy: cupy's current stream), like
any torch op.  Forward only: outputs carry no autograd history.

Every failure raises SeqfuseError (a RuntimeError) with .status (the
SF_ERR_* code), .status_name and .detail.
"""
import ctypes

from . import _lib as L
from ._core import SeqfuseError, fail, last_ctx, set_num_threads, get_num_threads
# the status codes, for `except SeqfuseError as e: if e.status == seqfuse.SF_ERR_...`
from ._lib import (SF_OK, SF_ERR_INVALID_ARG, SF_ERR_NULL_POINTER, SF_ERR_SHAPE, SF_ERR_DTYPE,
                   SF_ERR_DEVICE, SF_ERR_STRIDE, SF_ERR_ALIGNMENT, SF_ERR_TOO_LARGE,
                   SF_ERR_UNSUPPORTED, SF_ERR_OUT_OF_MEMORY, SF_ERR_CUDA, SF_ERR_NO_DEVICE,
                   SF_ERR_INDEX, SF_ERR_INTERNAL)

__all__ = [
    "SeqfuseError", "mamba_chunk_scan_combined", "selective_state_update", "flash_attn_func",
    "flash_attn_varlen_func", "flash_attn_with_kvcache", "causal_conv1d_fn", "causal_conv1d_update",
    "rmsnorm_fn",
    "version", "has_cuda", "has_cuda_build", "has_openmp",
    "cuda_device_count", "cuda_device_name", "set_num_threads", "get_num_threads",
    "last_backend", "library_path", "rms_norm", "add_rms_norm", "layer_norm", "swiglu",
    "apply_rotary_emb", "gemm_swiglu", "KVCache", "gemm_wq", "quantize_weights", "repack_gguf", "QWeight",
    "Engine", "embed", "sample",
]

from ._fused import rms_norm, add_rms_norm, layer_norm, swiglu, apply_rotary_emb  # noqa: E402
from ._fused import gemm_swiglu  # noqa: E402
from ._mamba import mamba_chunk_scan_combined, selective_state_update  # noqa: E402
from ._attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache  # noqa: E402
from ._layer import causal_conv1d_fn, causal_conv1d_update, rmsnorm_fn  # noqa: E402
from ._layer import _permute, _rows_view  # noqa: E402,F401 (the binding's tests call them)
from ._paged import KVCache  # noqa: E402
from ._gemm_wq import gemm_wq, quantize_weights, repack_gguf, QWeight  # noqa: E402
from ._engine import Engine  # noqa: E402
from ._sample import embed, sample  # noqa: E402

library_path = L.lib_path
__version__ = L.sf_version_string().decode()


# ------------------------------------------------------------------ helpers

def version():
    """The library's version string ("0.1.0")."""
    return L.sf_version_string().decode()


def has_cuda_build():
    """True when the loaded library was compiled with the CUDA backend."""
    return bool(L.sf_has_cuda_build())


def has_cuda():
    """True when the library has the CUDA backend and sees at least one GPU."""
    return bool(L.sf_has_cuda_build()) and L.sf_cuda_device_count() > 0


def has_openmp():
    return bool(L.sf_has_openmp())


def cuda_device_count():
    """CUDA devices the library sees (0 in a build without CUDA)."""
    return int(L.sf_cuda_device_count())


def cuda_device_name(device=0):
    buf = ctypes.create_string_buffer(256)
    st = L.sf_cuda_device_name(int(device), buf, len(buf))
    if st != SF_OK:
        fail(st, "cuda_device_name: no CUDA device %d (%d seen)" % (device, cuda_device_count()))
    return buf.value.decode(errors="replace")


def last_backend():
    """Name of the backend ("ref", "cpu", "cuda") that served this thread's
    last successful op call, or None before any call."""
    c = last_ctx()
    if c is None:
        return None
    return L.sf_backend_name(L.sf_ctx_last_backend(c.handle)).decode()
