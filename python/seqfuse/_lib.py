"""ctypes declarations of include/seqfuse.h, and the search for libseqfuse.

Everything here mirrors the C header field by field; when the header
changes, this file changes with it (tests/python/test_binding.py checks the
struct sizes and the offsets of the last fields through the *_params_init
functions).
"""
import ctypes
import ctypes.util
import os
import sys

# ------------------------------------------------------------------ enums
SF_OK = 0
SF_ERR_INVALID_ARG = 1
SF_ERR_NULL_POINTER = 2
SF_ERR_SHAPE = 3
SF_ERR_DTYPE = 4
SF_ERR_DEVICE = 5
SF_ERR_STRIDE = 6
SF_ERR_ALIGNMENT = 7
SF_ERR_TOO_LARGE = 8
SF_ERR_UNSUPPORTED = 9
SF_ERR_OUT_OF_MEMORY = 10
SF_ERR_CUDA = 11
SF_ERR_NO_DEVICE = 12
SF_ERR_INDEX = 13
SF_ERR_INTERNAL = 14

STATUS_NAMES = {
    0: "SF_OK", 1: "SF_ERR_INVALID_ARG", 2: "SF_ERR_NULL_POINTER", 3: "SF_ERR_SHAPE",
    4: "SF_ERR_DTYPE", 5: "SF_ERR_DEVICE", 6: "SF_ERR_STRIDE", 7: "SF_ERR_ALIGNMENT",
    8: "SF_ERR_TOO_LARGE", 9: "SF_ERR_UNSUPPORTED", 10: "SF_ERR_OUT_OF_MEMORY",
    11: "SF_ERR_CUDA", 12: "SF_ERR_NO_DEVICE", 13: "SF_ERR_INDEX", 14: "SF_ERR_INTERNAL",
}

SF_F32 = 0
SF_F16 = 1
SF_BF16 = 2
SF_I32 = 3
SF_I64 = 4
SF_U8 = 5
SF_I8 = 6
SF_F8E4M3 = 7

SF_DEVICE_CPU = -1
SF_MAX_RANK = 6

SF_BACKEND_AUTO = 0
SF_BACKEND_REF = 1
SF_BACKEND_CPU = 2
SF_BACKEND_CUDA = 3

BACKENDS = {"auto": SF_BACKEND_AUTO, "ref": SF_BACKEND_REF, "cpu": SF_BACKEND_CPU,
            "cuda": SF_BACKEND_CUDA}

# ------------------------------------------------------------------ structs
# C enums are ints on every ABI we target, so they are c_int here.


class sf_tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("device", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("shape", ctypes.c_int64 * SF_MAX_RANK),
        ("stride", ctypes.c_int64 * SF_MAX_RANK),
    ]


class sf_ssd_fwd_params(ctypes.Structure):
    _fields_ = [
        ("x", sf_tensor), ("dt", sf_tensor), ("A", sf_tensor), ("B", sf_tensor),
        ("C", sf_tensor),
        ("D", sf_tensor), ("z", sf_tensor), ("dt_bias", sf_tensor),
        ("initial_states", sf_tensor),
        ("seq_idx", sf_tensor),
        ("cu_seqlens", sf_tensor),
        ("out", sf_tensor),
        ("final_states", sf_tensor),
        ("chunk_size", ctypes.c_int),
        ("dt_softplus", ctypes.c_int),
        ("dt_min", ctypes.c_float),
        ("dt_max", ctypes.c_float),
        ("backend", ctypes.c_int),
    ]


class sf_ssd_step_params(ctypes.Structure):
    _fields_ = [
        ("state", sf_tensor),
        ("x", sf_tensor), ("dt", sf_tensor), ("A", sf_tensor), ("B", sf_tensor),
        ("C", sf_tensor),
        ("D", sf_tensor), ("z", sf_tensor), ("dt_bias", sf_tensor),
        ("state_idx", sf_tensor),
        ("out", sf_tensor),
        ("dt_softplus", ctypes.c_int),
        ("dt_min", ctypes.c_float),
        ("dt_max", ctypes.c_float),
        ("backend", ctypes.c_int),
    ]


class sf_attn_fwd_params(ctypes.Structure):
    _fields_ = [
        ("q", sf_tensor), ("k", sf_tensor), ("v", sf_tensor),
        ("out", sf_tensor),
        ("lse", sf_tensor),
        ("cu_seqlens_q", sf_tensor), ("cu_seqlens_k", sf_tensor),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("window_left", ctypes.c_int),
        ("window_right", ctypes.c_int),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", sf_tensor),
        ("backend", ctypes.c_int),
    ]


class sf_attn_paged_params(ctypes.Structure):
    _fields_ = [
        ("q", sf_tensor),
        ("k_cache", sf_tensor), ("v_cache", sf_tensor),
        ("block_table", sf_tensor),
        ("seqlens", sf_tensor),
        ("out", sf_tensor),
        ("lse", sf_tensor),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("window_left", ctypes.c_int),
        ("window_right", ctypes.c_int),
        ("softcap", ctypes.c_float),
        ("backend", ctypes.c_int),
        ("k_scale", sf_tensor), ("v_scale", sf_tensor),  # FP8 pools only
        ("alibi_slopes", sf_tensor),
    ]


class sf_conv1d_params(ctypes.Structure):
    _fields_ = [
        ("x", sf_tensor), ("weight", sf_tensor), ("bias", sf_tensor),
        ("initial_state", sf_tensor), ("final_state", sf_tensor),
        ("cu_seqlens", sf_tensor),
        ("out", sf_tensor),
        ("silu", ctypes.c_int),
        ("backend", ctypes.c_int),
    ]


class sf_conv1d_update_params(ctypes.Structure):
    _fields_ = [
        ("conv_state", sf_tensor),
        ("x", sf_tensor), ("weight", sf_tensor), ("bias", sf_tensor),
        ("state_idx", sf_tensor),
        ("out", sf_tensor),
        ("silu", ctypes.c_int),
        ("backend", ctypes.c_int),
    ]


class sf_rmsnorm_gated_params(ctypes.Structure):
    _fields_ = [
        ("x", sf_tensor), ("z", sf_tensor), ("weight", sf_tensor),
        ("out", sf_tensor),
        ("group_size", ctypes.c_int),
        ("norm_before_gate", ctypes.c_int),
        ("eps", ctypes.c_float),
        ("backend", ctypes.c_int),
    ]


class sf_norm_params(ctypes.Structure):
    _fields_ = [
        ("x", sf_tensor), ("residual", sf_tensor),
        ("weight", sf_tensor), ("bias", sf_tensor),
        ("out", sf_tensor), ("residual_out", sf_tensor),
        ("eps", ctypes.c_float),
        ("backend", ctypes.c_int),
    ]


SF_SWIGLU_SEPARATE, SF_SWIGLU_CONCAT, SF_SWIGLU_INTERLEAVED = 0, 1, 2


class sf_swiglu_params(ctypes.Structure):
    _fields_ = [
        ("gate", sf_tensor), ("up", sf_tensor), ("out", sf_tensor),
        ("layout", ctypes.c_int),
        ("backend", ctypes.c_int),
    ]


class sf_gemm_swiglu_params(ctypes.Structure):
    _fields_ = [
        ("x", sf_tensor), ("w_gate", sf_tensor), ("w_up", sf_tensor), ("y", sf_tensor),
        ("backend", ctypes.c_int),
    ]


SF_ROPE_NEOX, SF_ROPE_GPTJ = 0, 1
SF_ROPE_SCALING_NONE, SF_ROPE_LLAMA3 = 0, 1


class sf_rope_params(ctypes.Structure):
    _fields_ = [
        ("q", sf_tensor), ("k", sf_tensor),
        ("q_out", sf_tensor), ("k_out", sf_tensor),
        ("positions", sf_tensor),
        ("cos", sf_tensor), ("sin", sf_tensor),
        ("rotary_dim", ctypes.c_int),
        ("style", ctypes.c_int),
        ("theta", ctypes.c_float),
        ("scaling", ctypes.c_int),
        ("factor", ctypes.c_float),
        ("low_freq_factor", ctypes.c_float), ("high_freq_factor", ctypes.c_float),
        ("original_max_position", ctypes.c_int),
        ("backend", ctypes.c_int),
    ]


class sf_kv_append_params(ctypes.Structure):
    _fields_ = [
        ("k_cache", sf_tensor), ("v_cache", sf_tensor),
        ("k", sf_tensor), ("v", sf_tensor),
        ("block_table", sf_tensor),
        ("cache_seqlens", sf_tensor),
        ("backend", ctypes.c_int),
        ("rope", ctypes.POINTER(sf_rope_params)),  # NULL: K copied as it is
        ("k_scale", sf_tensor), ("v_scale", sf_tensor),  # FP8 pools only
    ]


# ------------------------------------------------------------------ loading

def _lib_names():
    if sys.platform == "darwin":
        return ["libseqfuse.dylib"]
    if sys.platform == "win32":
        return ["seqfuse.dll", "libseqfuse.dll"]
    return ["libseqfuse.so"]


def _candidates():
    """(where, path) pairs in search order, after SEQFUSE_LIB."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    for n in _lib_names():
        out.append(("package folder", os.path.join(here, n)))
    # The build folder beside python/ (../build/libseqfuse.so), the one the
    # README's commands make.  Never another build*/ folder: those are the
    # test command's sanitizer and single-thread builds, and an ASan library
    # loaded into a plain interpreter aborts it.
    repo = os.path.dirname(os.path.dirname(here))
    out += [("build folder", os.path.join(repo, "build", n)) for n in _lib_names()]
    return out


def _load():
    tried = []
    env = os.environ.get("SEQFUSE_LIB")
    if env:
        # An explicit path is a request: failing to load it is an error,
        # not a reason to pick some other copy silently.
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise ImportError(
                "seqfuse: SEQFUSE_LIB=%r could not be loaded: %s" % (env, e)) from None
    for where, path in _candidates():
        if os.path.exists(path):
            try:
                return ctypes.CDLL(path), path
            except OSError as e:
                tried.append("%s %s (%s)" % (where, path, e))
        else:
            tried.append("%s %s (absent)" % (where, path))
    name = ctypes.util.find_library("seqfuse")
    if name:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            tried.append("system library %s (%s)" % (name, e))
    else:
        tried.append('ctypes.util.find_library("seqfuse") (nothing found)')
    raise ImportError(
        "seqfuse: cannot find the libseqfuse shared library. Build it "
        "(cmake -S . -B build && cmake --build build --target seqfuse) and/or set "
        "SEQFUSE_LIB=/path/to/libseqfuse.so. Looked at:\n  " + "\n  ".join(tried))


lib, lib_path = _load()

_P = ctypes.POINTER
_c = ctypes


def _decl(name, restype, *argtypes):
    try:
        f = getattr(lib, name)
    except AttributeError:
        raise ImportError("seqfuse: %s lacks the symbol %s; the library and the binding "
                          "are from different versions" % (lib_path, name)) from None
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


sf_status_string = _decl("sf_status_string", _c.c_char_p, _c.c_int)
sf_dtype_size = _decl("sf_dtype_size", _c.c_size_t, _c.c_int)
sf_dtype_name = _decl("sf_dtype_name", _c.c_char_p, _c.c_int)
sf_tensor_contiguous = _decl("sf_tensor_contiguous", sf_tensor, _c.c_void_p, _c.c_int, _c.c_int,
                             _c.c_int, _P(_c.c_int64))
sf_tensor_numel = _decl("sf_tensor_numel", _c.c_int64, _P(sf_tensor))
sf_backend_name = _decl("sf_backend_name", _c.c_char_p, _c.c_int)

sf_ctx_create = _decl("sf_ctx_create", _c.c_int, _P(_c.c_void_p), _c.c_int)
sf_ctx_destroy = _decl("sf_ctx_destroy", None, _c.c_void_p)
sf_ctx_device = _decl("sf_ctx_device", _c.c_int, _c.c_void_p)
sf_ctx_set_threads = _decl("sf_ctx_set_threads", _c.c_int, _c.c_void_p, _c.c_int)
sf_ctx_threads = _decl("sf_ctx_threads", _c.c_int, _c.c_void_p)
sf_ctx_set_backend = _decl("sf_ctx_set_backend", _c.c_int, _c.c_void_p, _c.c_int)
sf_ctx_set_stream = _decl("sf_ctx_set_stream", _c.c_int, _c.c_void_p, _c.c_void_p)
sf_ctx_stream = _decl("sf_ctx_stream", _c.c_void_p, _c.c_void_p)
sf_ctx_reserve_workspace = _decl("sf_ctx_reserve_workspace", _c.c_int, _c.c_void_p, _c.c_size_t)
sf_ctx_workspace_size = _decl("sf_ctx_workspace_size", _c.c_size_t, _c.c_void_p)
sf_ctx_workspace_peak = _decl("sf_ctx_workspace_peak", _c.c_size_t, _c.c_void_p)
sf_ctx_reset_workspace_peak = _decl("sf_ctx_reset_workspace_peak", None, _c.c_void_p)
sf_ctx_last_error = _decl("sf_ctx_last_error", _c.c_char_p, _c.c_void_p)
sf_ctx_last_backend = _decl("sf_ctx_last_backend", _c.c_int, _c.c_void_p)

sf_has_cuda_build = _decl("sf_has_cuda_build", _c.c_int)
sf_has_openmp = _decl("sf_has_openmp", _c.c_int)
sf_cuda_device_count = _decl("sf_cuda_device_count", _c.c_int)
sf_cuda_device_name = _decl("sf_cuda_device_name", _c.c_int, _c.c_int, _c.c_char_p, _c.c_size_t)
sf_version_string = _decl("sf_version_string", _c.c_char_p)

sf_ssd_fwd_params_init = _decl("sf_ssd_fwd_params_init", None, _P(sf_ssd_fwd_params))
sf_ssd_fwd = _decl("sf_ssd_fwd", _c.c_int, _c.c_void_p, _P(sf_ssd_fwd_params))
# Mamba-2 SSD backward (sf_ssd_bwd)
class sf_ssd_bwd_params(ctypes.Structure):
    _fields_ = [
        ("fwd", sf_ssd_fwd_params),
        ("dout", sf_tensor), ("dfinal_states", sf_tensor),
        ("dx", sf_tensor), ("ddt", sf_tensor), ("dA", sf_tensor), ("dB", sf_tensor),
        ("dC", sf_tensor), ("dD", sf_tensor), ("dz", sf_tensor), ("ddt_bias", sf_tensor),
        ("dinitial_states", sf_tensor),
        ("deterministic", ctypes.c_int),
        ("backend", ctypes.c_int),
    ]


sf_ssd_bwd_params_init = _decl("sf_ssd_bwd_params_init", None, _P(sf_ssd_bwd_params))
sf_ssd_bwd = _decl("sf_ssd_bwd", _c.c_int, _c.c_void_p, _P(sf_ssd_bwd_params))
sf_ssd_step_params_init = _decl("sf_ssd_step_params_init", None, _P(sf_ssd_step_params))
sf_ssd_step = _decl("sf_ssd_step", _c.c_int, _c.c_void_p, _P(sf_ssd_step_params))
sf_attn_fwd_params_init = _decl("sf_attn_fwd_params_init", None, _P(sf_attn_fwd_params))
sf_attn_fwd = _decl("sf_attn_fwd", _c.c_int, _c.c_void_p, _P(sf_attn_fwd_params))
sf_kv_append_params_init = _decl("sf_kv_append_params_init", None, _P(sf_kv_append_params))
sf_kv_append = _decl("sf_kv_append", _c.c_int, _c.c_void_p, _P(sf_kv_append_params))
class sf_kv_cache_desc(ctypes.Structure):
    _fields_ = [
        ("num_pages", ctypes.c_int64),
        ("page_size", ctypes.c_int),
        ("nheads_kv", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("num_layers", ctypes.c_int),
        ("max_seqs", ctypes.c_int),
        ("max_pages_per_seq", ctypes.c_int),
    ]


sf_kv_cache_create = _decl("sf_kv_cache_create", _c.c_int, _c.c_void_p, _P(sf_kv_cache_desc), _P(_c.c_void_p))
sf_kv_cache_destroy = _decl("sf_kv_cache_destroy", None, _c.c_void_p)
sf_kv_cache_pools = _decl("sf_kv_cache_pools", _c.c_int, _c.c_void_p, _c.c_int, _P(sf_tensor), _P(sf_tensor))
sf_kv_cache_scales = _decl("sf_kv_cache_scales", _c.c_int, _c.c_void_p, _c.c_int, _P(sf_tensor), _P(sf_tensor))
sf_kv_cache_resize = _decl("sf_kv_cache_resize", _c.c_int, _c.c_void_p, _c.c_int, _c.c_int64)
sf_kv_cache_length = _decl("sf_kv_cache_length", _c.c_int64, _c.c_void_p, _c.c_int)
sf_kv_cache_free_pages = _decl("sf_kv_cache_free_pages", _c.c_int64, _c.c_void_p)
sf_kv_cache_tables = _decl("sf_kv_cache_tables", _c.c_int, _c.c_void_p, _P(sf_tensor), _P(sf_tensor))
sf_attn_paged_params_init = _decl("sf_attn_paged_params_init", None, _P(sf_attn_paged_params))
sf_attn_paged = _decl("sf_attn_paged", _c.c_int, _c.c_void_p, _P(sf_attn_paged_params))
sf_conv1d_params_init = _decl("sf_conv1d_params_init", None, _P(sf_conv1d_params))
sf_conv1d_fwd = _decl("sf_conv1d_fwd", _c.c_int, _c.c_void_p, _P(sf_conv1d_params))
sf_conv1d_update_params_init = _decl("sf_conv1d_update_params_init", None,
                                     _P(sf_conv1d_update_params))
sf_conv1d_update = _decl("sf_conv1d_update", _c.c_int, _c.c_void_p, _P(sf_conv1d_update_params))
sf_rmsnorm_gated_params_init = _decl("sf_rmsnorm_gated_params_init", None,
                                     _P(sf_rmsnorm_gated_params))
sf_rmsnorm_gated = _decl("sf_rmsnorm_gated", _c.c_int, _c.c_void_p, _P(sf_rmsnorm_gated_params))

sf_norm_params_init = _decl("sf_norm_params_init", None, _P(sf_norm_params))
sf_add_rmsnorm = _decl("sf_add_rmsnorm", _c.c_int, _c.c_void_p, _P(sf_norm_params))
sf_add_layernorm = _decl("sf_add_layernorm", _c.c_int, _c.c_void_p, _P(sf_norm_params))
sf_swiglu_params_init = _decl("sf_swiglu_params_init", None, _P(sf_swiglu_params))
sf_swiglu = _decl("sf_swiglu", _c.c_int, _c.c_void_p, _P(sf_swiglu_params))
sf_gemm_swiglu_params_init = _decl("sf_gemm_swiglu_params_init", None, _P(sf_gemm_swiglu_params))
sf_gemm_swiglu = _decl("sf_gemm_swiglu", _c.c_int, _c.c_void_p, _P(sf_gemm_swiglu_params))


# the dense matrix product (Linear layers): bench/gpu_engine.py times the engine's products alone
class sf_gemm_params(ctypes.Structure):
    _fields_ = [("x", sf_tensor), ("w", sf_tensor), ("bias", sf_tensor), ("y", sf_tensor),
                ("beta", ctypes.c_float), ("backend", ctypes.c_int)]


sf_gemm_params_init = _decl("sf_gemm_params_init", None, _P(sf_gemm_params))
sf_gemm = _decl("sf_gemm", _c.c_int, _c.c_void_p, _P(sf_gemm_params))
sf_rope_params_init = _decl("sf_rope_params_init", None, _P(sf_rope_params))
sf_rope = _decl("sf_rope", _c.c_int, _c.c_void_p, _P(sf_rope_params))


# ------------------------------------------------------------------ quantised weights

SF_QW_INT4, SF_QW_INT8 = 0, 1
SF_QW_ROWS, SF_QW_TILED = 0, 1
SF_GGUF_Q4_0, SF_GGUF_Q4_1, SF_GGUF_Q8_0 = 2, 3, 8


class sf_qweight(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_int),
        ("n", ctypes.c_int64), ("k", ctypes.c_int64),
        ("group_size", ctypes.c_int),
        ("data", sf_tensor), ("scales", sf_tensor), ("mins", sf_tensor),
        ("layout", ctypes.c_int),
    ]


class sf_gemm_wq_params(ctypes.Structure):
    _fields_ = [
        ("x", sf_tensor),
        ("w", sf_qweight),
        ("bias", sf_tensor),
        ("y", sf_tensor),
        ("backend", ctypes.c_int),
    ]


sf_gemm_wq_params_init = _decl("sf_gemm_wq_params_init", None, _P(sf_gemm_wq_params))
sf_gemm_wq = _decl("sf_gemm_wq", _c.c_int, _c.c_void_p, _P(sf_gemm_wq_params))
sf_quantize_weights = _decl("sf_quantize_weights", _c.c_int, _c.c_void_p, _P(sf_tensor), _P(sf_qweight))
sf_dequantize_weights = _decl("sf_dequantize_weights", _c.c_int, _c.c_void_p, _P(sf_qweight), _P(sf_tensor))
sf_tile_qweight = _decl("sf_tile_qweight", _c.c_int, _c.c_void_p, _P(sf_qweight), _P(sf_tensor))
sf_repack_gguf = _decl("sf_repack_gguf", _c.c_int, _c.c_void_p, _c.c_int, _c.c_void_p, _c.c_size_t,
                       _P(sf_qweight))
