/*
 * seqfuse.h - the whole public API of seqfuse, and its documentation.
 *
 * seqfuse is a library of IO-aware fused kernels for sequence models:
 * the Mamba-2 chunked scan (SSD), its one-token decode step, and
 * FlashAttention-style softmax attention.  Every op has three backends:
 *
 *   SF_BACKEND_REF   plain loops in double precision, the test oracle;
 *   SF_BACKEND_CPU   tiled, fused and threaded (OpenMP) CPU code;
 *   SF_BACKEND_CUDA  CUDA kernels (present when the library was built with
 *                    CUDA; an op without a CUDA kernel says so).
 *
 * Conventions
 *  - Every entry point returns an sf_status.  On failure the context keeps
 *    a sentence describing what was wrong (sf_ctx_last_error); the library
 *    never exits, aborts or prints on user input.
 *  - Tensors are described by sf_tensor: data pointer, dtype, device, rank,
 *    shape and strides, both counted in elements (not bytes).  Offsets are
 *    computed in 64 bits; every single dimension must fit in int32
 *    (SF_ERR_TOO_LARGE otherwise).
 *  - An optional tensor is absent when its data pointer is NULL (a
 *    zero-initialised sf_tensor is absent).
 *  - Ops run on the context's device.  CPU ops return when the result is
 *    ready.  CUDA ops are asynchronous on the context's stream, like any
 *    CUDA library call; they never synchronise the device.
 *  - Workspace comes from the context's arena.  It grows on the first call
 *    that needs more (an allocation, which on a GPU also synchronises the
 *    device); sf_ctx_reserve_workspace sizes it ahead so later calls
 *    allocate nothing.  The arena is reused by every call on the context:
 *    calls on one context must not run concurrently on different streams
 *    (nor may they share attention's tile counter, another per-context
 *    device buffer).
 *  - CUDA graphs: a call captured on the context's stream allocates and
 *    synchronises nothing, provided the arena is already big enough (run
 *    the call once first, or sf_ctx_reserve_workspace); otherwise it fails
 *    with SF_ERR_OUT_OF_MEMORY (the arena cannot grow there; the message says
 *    so) instead of breaking the capture.  A block a
 *    captured call used stays allocated until the context is destroyed,
 *    even if the arena grows later, so the graph stays valid; replays must
 *    not run concurrently with other calls on the context.
 *  - Index tensors in device memory (cu_seqlens, seq_idx, state_idx) cannot
 *    be checked without a synchronisation, so CUDA contexts do not check
 *    them: the kernels clamp them to the tensors' bounds (never an access
 *    outside them), and invalid ones give unspecified outputs.
 *  - Outputs must not alias inputs unless a function says otherwise.
 *
 * Thread safety: a context is used by one thread at a time; distinct
 * contexts are independent.
 */
#ifndef SEQFUSE_H
#define SEQFUSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SF_VERSION_MAJOR 0
#define SF_VERSION_MINOR 1
#define SF_VERSION_PATCH 0

#if defined(_WIN32) && defined(SF_BUILDING_DLL)
#define SF_API __declspec(dllexport)
#elif defined(__GNUC__)
#define SF_API __attribute__((visibility("default")))
#else
#define SF_API
#endif

/* ------------------------------------------------------------------ */
/* Status codes                                                        */
/* ------------------------------------------------------------------ */

typedef enum sf_status {
    SF_OK = 0,
    SF_ERR_INVALID_ARG = 1,   /* a scalar argument out of range, bad flag  */
    SF_ERR_NULL_POINTER = 2,  /* a required pointer or tensor is NULL      */
    SF_ERR_SHAPE = 3,         /* rank or extents do not match the contract */
    SF_ERR_DTYPE = 4,         /* dtype not accepted, or dtypes disagree    */
    SF_ERR_DEVICE = 5,        /* tensor on another device than the context */
    SF_ERR_STRIDE = 6,        /* a kernel needs a unit innermost stride    */
    SF_ERR_ALIGNMENT = 7,     /* a pointer not aligned to its element size */
    SF_ERR_TOO_LARGE = 8,     /* a dimension past int32, or bytes past int64 */
    SF_ERR_UNSUPPORTED = 9,   /* valid input the chosen backend cannot serve */
    SF_ERR_OUT_OF_MEMORY = 10,/* host or device allocation failed          */
    SF_ERR_CUDA = 11,         /* a CUDA runtime error (detail has file:line) */
    SF_ERR_NO_DEVICE = 12,    /* no CUDA device, or a build without CUDA    */
    SF_ERR_INDEX = 13,        /* an index tensor entry out of range         */
    SF_ERR_INTERNAL = 14      /* a bug in seqfuse; please report it         */
} sf_status;

/* A static English name for a status ("SF_ERR_SHAPE: shape mismatch"). */
SF_API const char *sf_status_string(sf_status s);

/* ------------------------------------------------------------------ */
/* Tensors                                                             */
/* ------------------------------------------------------------------ */

typedef enum sf_dtype {
    SF_F32 = 0,
    SF_F16 = 1,
    SF_BF16 = 2,
    SF_I32 = 3,
    SF_I64 = 4,
    SF_U8 = 5,     /* bytes: the packed codes of quantised weights (sf_qweight) */
    SF_I8 = 6,     /* signed bytes: int8 codes (sf_qweight, SF_QW_INT8)        */
    SF_F8E4M3 = 7  /* OCP fp8 e4m3fn: max 448, no inf, NaN 0x7f / 0xff: paged
                    * KV cache pools only (with scales, see sf_kv_append)    */
} sf_dtype;

/* Size in bytes of one element; 0 for an unknown dtype. */
SF_API size_t sf_dtype_size(sf_dtype dt);
/* "f32", "f16", "bf16", "i32", "i64", "u8", "i8", "f8e4m3"; "?" for an
 * unknown dtype. */
SF_API const char *sf_dtype_name(sf_dtype dt);

/* Device ids: SF_DEVICE_CPU, or N >= 0 for CUDA device N. */
#define SF_DEVICE_CPU (-1)

#define SF_MAX_RANK 6

typedef struct sf_tensor {
    void *data;                     /* NULL: the tensor is absent        */
    sf_dtype dtype;
    int device;                     /* SF_DEVICE_CPU or a CUDA ordinal   */
    int rank;                       /* 0 .. SF_MAX_RANK                  */
    int64_t shape[SF_MAX_RANK];
    int64_t stride[SF_MAX_RANK];    /* in elements; may be any value >= 0 */
} sf_tensor;

/* A contiguous (row-major) descriptor of `rank` dims over `data`. */
SF_API sf_tensor sf_tensor_contiguous(void *data, sf_dtype dtype, int device,
                                      int rank, const int64_t *shape);
/* Number of elements (product of the shape); 0 for an absent tensor, -1
 * for an invalid rank, a negative extent or a product past the int64 range
 * (sf_tensor_contiguous gives such shapes rank -1). */
SF_API int64_t sf_tensor_numel(const sf_tensor *t);

/* ------------------------------------------------------------------ */
/* Backends and context                                                */
/* ------------------------------------------------------------------ */

typedef enum sf_backend {
    SF_BACKEND_AUTO = 0,   /* the best backend that supports the inputs   */
    SF_BACKEND_REF = 1,
    SF_BACKEND_CPU = 2,
    SF_BACKEND_CUDA = 3
} sf_backend;

SF_API const char *sf_backend_name(sf_backend b);

typedef struct sf_ctx sf_ctx;

/* Creates a context for `device` (SF_DEVICE_CPU or a CUDA ordinal).
 * A CUDA ordinal on a machine without that device, or in a build without
 * CUDA, gives SF_ERR_NO_DEVICE (and *out stays NULL).  The CPU thread count
 * starts at the OpenMP default; the backend at SF_BACKEND_AUTO; the CUDA
 * stream at the legacy default stream (NULL). */
SF_API sf_status sf_ctx_create(sf_ctx **out, int device);
/* Frees the context and its workspace.  NULL is a no-op. */
SF_API void sf_ctx_destroy(sf_ctx *ctx);

SF_API int sf_ctx_device(const sf_ctx *ctx);
/* Threads used by the CPU backend: 1 to SF_MAX_THREADS (SF_ERR_INVALID_ARG
 * otherwise). */
#define SF_MAX_THREADS 1024
SF_API sf_status sf_ctx_set_threads(sf_ctx *ctx, int nthreads);
SF_API int sf_ctx_threads(const sf_ctx *ctx);
/* The backend used when a call's params say SF_BACKEND_AUTO. */
SF_API sf_status sf_ctx_set_backend(sf_ctx *ctx, sf_backend backend);
/* The cudaStream_t the CUDA backend launches on (NULL = default stream).
 * SF_ERR_DEVICE on a CPU context.  As for the arena (above), work queued on
 * the old stream must be done, or ordered before the new stream's, when the
 * next call runs: calls share per-context device state (the workspace,
 * attention's tile counter). */
SF_API sf_status sf_ctx_set_stream(sf_ctx *ctx, void *cuda_stream);
SF_API void *sf_ctx_stream(const sf_ctx *ctx);
/* Grows the workspace arena to at least `bytes` now, so that later calls
 * needing no more than that allocate nothing. */
SF_API sf_status sf_ctx_reserve_workspace(sf_ctx *ctx, size_t bytes);
/* Current arena size, and the most workspace any call has used so far. */
SF_API size_t sf_ctx_workspace_size(const sf_ctx *ctx);
SF_API size_t sf_ctx_workspace_peak(const sf_ctx *ctx);
SF_API void sf_ctx_reset_workspace_peak(sf_ctx *ctx);
/* The detail text of the last failure on this context ("" if none).  The
 * pointer stays valid until the next call on the context. */
SF_API const char *sf_ctx_last_error(const sf_ctx *ctx);
/* The backend that served the last successful op call. */
SF_API sf_backend sf_ctx_last_backend(const sf_ctx *ctx);

/* Memory on the context's device (host memory for a CPU context): for
 * tools and tests that hold no CUDA code of their own.  sf_malloc'd memory
 * is 256-byte aligned; sf_free(NULL) is a no-op.  sf_memcpy copies `bytes`
 * between any two of host memory and the context's device memory (the
 * direction is inferred), synchronously.  sf_ctx_synchronize waits for
 * the context's stream. */
SF_API sf_status sf_malloc(sf_ctx *ctx, void **p, size_t bytes);
SF_API sf_status sf_free(sf_ctx *ctx, void *p);
SF_API sf_status sf_memcpy(sf_ctx *ctx, void *dst, const void *src, size_t bytes);
SF_API sf_status sf_ctx_synchronize(sf_ctx *ctx);

/* Pinned host memory and asynchronous copies, for inputs that change
 * between replays of a captured graph.  sf_malloc_host gives page-locked
 * memory on a CUDA context (plain memory on a CPU context); sf_memcpy_async
 * copies on the context's stream without waiting (synchronously on a CPU
 * context) and may be captured into a graph when the host side came from
 * sf_malloc_host.  The host buffer must stay untouched until the stream
 * has passed the copy. */
SF_API sf_status sf_malloc_host(sf_ctx *ctx, void **p, size_t bytes);
SF_API sf_status sf_free_host(sf_ctx *ctx, void *p);
SF_API sf_status sf_memcpy_async(sf_ctx *ctx, void *dst, const void *src, size_t bytes);

/* CUDA graphs of a sequence of calls on one context.  sf_graph_begin starts
 * capturing the context's stream: the calls that follow are recorded, not
 * run, until sf_graph_end instantiates them into *g (on failure of any
 * captured call the capture is abandoned by sf_graph_end with that call's
 * status).  sf_graph_launch replays *g on the context's stream, reading
 * the same device buffers it was captured with (change their contents, not
 * the pointers).  CPU contexts: SF_ERR_UNSUPPORTED; so is a context on
 * the legacy default stream (it cannot be captured: give the context a
 * stream with sf_ctx_set_stream).  sf_graph_destroy(NULL) is a no-op. */
typedef struct sf_graph sf_graph;
SF_API sf_status sf_graph_begin(sf_ctx *ctx);
SF_API sf_status sf_graph_end(sf_ctx *ctx, sf_graph **g);
SF_API sf_status sf_graph_launch(sf_ctx *ctx, sf_graph *g);
SF_API void sf_graph_destroy(sf_graph *g);

/* Build features and devices. */
SF_API int sf_has_cuda_build(void);         /* 1 if compiled with CUDA    */
SF_API int sf_has_openmp(void);              /* 1 if compiled with OpenMP  */
SF_API int sf_cuda_device_count(void);       /* 0 without CUDA or devices  */
/* Writes the CUDA device's name (and "sm_XY") into buf; SF_ERR_NO_DEVICE
 * if there is no such device. */
SF_API sf_status sf_cuda_device_name(int device, char *buf, size_t len);
SF_API const char *sf_version_string(void);

/* ------------------------------------------------------------------ */
/* Mamba-2 SSD forward (chunked scan), mamba_chunk_scan_combined       */
/* ------------------------------------------------------------------ */
/*
 * Per batch b, head h (H heads of P channels, N state size, G groups, head
 * h reading group h / (H/G)), with dt processed as
 *     dt = dt_softplus ? softplus(dt + dt_bias) : dt + dt_bias
 *     dt = min(max(dt, dt_min), dt_max)
 * the recurrence is
 *     h_t = exp(dt_t A_h) h_{t-1} + dt_t x_t B_t^T       (P x N, f32)
 *     y_t = h_t C_t + D_h x_t,  then y_t *= silu(z_t) when z is given.
 *
 * Tensors (b = batch, L = seqlen):
 *   x      (b, L, H, P)   f32/f16/bf16            required, unit inner stride
 *   dt     (b, L, H)      x's dtype or f32         required
 *   A      (H)            f32                      required (A < 0 expected)
 *   B, C   (b, L, G, N)   each x's dtype or f32    required, unit inner stride
 *   D      (H) or (H, P)  f32                      optional
 *   z      (b, L, H, P)   same dtype as x          optional, unit inner stride
 *   dt_bias (H)           f32                      optional
 *   initial_states (b, H, P, N), or (nseq, H, P, N) with cu_seqlens;   f32,
 *                                                  optional (zeros if absent)
 *   seq_idx (b, L)        i32, non-decreasing along each row; the state
 *                         is reset to zero wherever it changes (a new
 *                         sequence), and only a row's first sequence starts
 *                         from initial_states[b].  optional.  Checked on the
 *                         host for CPU contexts (SF_ERR_INDEX); on a GPU a
 *                         decreasing seq_idx gives unspecified outputs.
 *   cu_seqlens (nseq+1)   i32 or i64, cu[0] = 0, non-decreasing,
 *                         cu[nseq] = L; needs b == 1.  optional.  Each
 *                         sequence starts from its own initial state (or
 *                         zero) and ends in its own final state.
 *   out    (b, L, H, P)   same dtype as x          required, unit inner stride
 *   final_states (b, H, P, N) or (nseq, H, P, N)   f32, optional output.
 *                         With seq_idx it holds the state after each row's
 *                         last token (of the last sequence in the row).
 * seq_idx and cu_seqlens are exclusive.  chunk_size is 64, 128 or 256 (the
 * result does not depend on it beyond rounding; the GPU kernels tile by it).
 * dt, B and C may each be f32 when x is f16 or bf16 (mamba_ssm's mixed
 * inputs); any other dtype is SF_ERR_DTYPE naming the tensor.  The
 * reference and the CPU backend read every tensor in its own dtype.
 * CUDA backend: N <= 256 (SF_ERR_UNSUPPORTED beyond); the states entering
 * each chunk are kept in the input dtype between its kernels (as mamba_ssm
 * does), final_states in f32.  An f32 dt is read as f32.  An f32 B or C
 * with 16-bit x is rounded to x's dtype (to nearest even) into workspace
 * first, since the tensor-core products take x's dtype (mamba_ssm rounds B
 * the same way): results as if B, C were given in x's dtype.
 * Arithmetic is f32 (f64 for the reference); matrix products of f16/bf16
 * inputs take those inputs with f32 accumulation.  Exponents are clamped
 * to <= 0 (the decay exp(dt A) never exceeds 1).
 * A, D and dt_bias must be finite: checked on the host for CPU contexts
 * (SF_ERR_INVALID_ARG naming the entry); on a GPU they are not read back,
 * and a non-finite entry gives unspecified outputs.  A NaN or inf in x, dt,
 * B, C or z propagates to the outputs of that token and later ones of its
 * sequence, never to earlier tokens.
 */
typedef struct sf_ssd_fwd_params {
    sf_tensor x, dt, A, B, C;
    sf_tensor D, z, dt_bias;
    sf_tensor initial_states;
    sf_tensor seq_idx;
    sf_tensor cu_seqlens;
    sf_tensor out;
    sf_tensor final_states;
    int chunk_size;
    int dt_softplus;
    float dt_min;        /* lower clamp of processed dt, always applied
                            (the default 0 turns a negative dt into 0, as
                            mamba_ssm's dt_limit=(0, inf) does)           */
    float dt_max;        /* upper clamp; INFINITY = none                  */
    sf_backend backend;  /* SF_BACKEND_AUTO defers to the context         */
} sf_ssd_fwd_params;

/* Fills defaults: every tensor absent, chunk_size 256, dt_min 0,
 * dt_max INFINITY, backend AUTO. */
SF_API void sf_ssd_fwd_params_init(sf_ssd_fwd_params *p);
SF_API sf_status sf_ssd_fwd(sf_ctx *ctx, const sf_ssd_fwd_params *p);

/* ------------------------------------------------------------------ */
/* Mamba-2 SSD backward, mamba_chunk_scan_combined's backward          */
/* ------------------------------------------------------------------ */
/*
 * Gradients of sf_ssd_fwd with respect to every input, given the forward's
 * description in fwd (its inputs, checked as sf_ssd_fwd checks them;
 * fwd.out, fwd.final_states and fwd.backend are ignored), dout (like out)
 * and optionally dfinal_states (like final_states, f32).  Outputs (absent =
 * not wanted):
 *   dx (like x), ddt (like dt, the gradient with respect to the raw dt
 *   before bias, softplus and clamp; 0 where the clamp is active), dB and
 *   dC (like B and C, summed over the heads of each group), dz (like z),
 *   dA (H) f32, dD (like D) f32, ddt_bias (H) f32, dinitial_states (like
 *   initial_states) f32.
 * The gradient of an optional input needs that input (dz: z, dD: D,
 * ddt_bias: dt_bias, dinitial_states: initial_states), else
 * SF_ERR_INVALID_ARG naming it.  No output may share memory with an input
 * (dout and dfinal_states included) or another output.  Through the
 * exponent clamp (dt A <= 0) the decay has no gradient where dt A >= 0.
 * The forward saves nothing: the states are recomputed from the inputs (the
 * state entering every chunk of chunk_size tokens, then each chunk's
 * per-token states); workspace from the context's arena: on the CPU
 * (L / chunk_size + chunk_size + 1) P N floats a thread; on a GPU, by
 * configuration, up to that much for each of a few CTAs an SM, plus two
 * P N f32 maps per (sequence, head, chunk); both add b L H N floats twice
 * when a group has several heads and dB or dC is asked.
 * Reductions (dA, dD, ddt_bias over tokens, dB and dC over a group's heads)
 * accumulate in f32 (f64 in the reference) in a fixed order on every
 * backend, without atomics: every output is bit-identical from run to run
 * (deterministic, 0 or 1, is accepted and changes nothing today).
 * CUDA backend: N <= 256 and the P x N f32 adjoint in shared memory
 * (SF_ERR_UNSUPPORTED beyond), f32 arithmetic on CUDA cores; initial_states
 * and the varlen forms as in sf_ssd_fwd.
 */
typedef struct sf_ssd_bwd_params {
    sf_ssd_fwd_params fwd;     /* fwd.backend is ignored          */
    sf_tensor dout;
    sf_tensor dfinal_states;
    sf_tensor dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states;
    int deterministic;
    sf_backend backend;
} sf_ssd_bwd_params;

SF_API void sf_ssd_bwd_params_init(sf_ssd_bwd_params *p);
SF_API sf_status sf_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_params *p);

/* ------------------------------------------------------------------ */
/* Mamba-2 decode step, selective_state_update                         */
/* ------------------------------------------------------------------ */
/*
 * One token per sequence, batch of b sequences:
 *     dt = processed as above (bias, softplus, clamp to [dt_min, dt_max]);
 *     dA = exp(min(dt A_h, 0))
 *     state[s, h] = dA state[s, h] + dt x[i, h] B[i, g]^T     (in place)
 *     out[i, h]   = state[s, h] C[i, g] + D_h x[i, h], times silu(z) if z
 * where s = state_idx[i] when given, else s = i.
 *   state      (nslots, H, P, N)  f32, f16 or bf16 (whatever x's dtype),
 *              read and written in place, unit inner stride.  Each
 *              element is updated in f32 and stored rounded to the
 *              state's dtype (to nearest even); out uses the unrounded
 *              f32 value.
 *   x          (b, H, P)    f32/f16/bf16, unit inner stride
 *   dt         (b, H)       x's dtype or f32
 *   A          (H)          f32
 *   B, C       (b, G, N)    each x's dtype or f32, unit inner stride (read
 *                           in their own dtype on every backend)
 *   D (H) or (H, P) f32, z (b, H, P) x's dtype, dt_bias (H) f32: optional
 *   state_idx  (b) i32 optional: each in [0, nslots) (SF_ERR_INDEX
 *              otherwise on the CPU backends; the CUDA kernel skips an
 *              entry out of range and writes zeros to its output), and no
 *              two equal.  A negative entry means "padding": the sequence
 *              is skipped and its output set to zero.
 *   out        (b, H, P)    same dtype as x
 */
typedef struct sf_ssd_step_params {
    sf_tensor state;
    sf_tensor x, dt, A, B, C;
    sf_tensor D, z, dt_bias;
    sf_tensor state_idx;
    sf_tensor out;
    int dt_softplus;
    float dt_min, dt_max;
    sf_backend backend;
} sf_ssd_step_params;

SF_API void sf_ssd_step_params_init(sf_ssd_step_params *p);
SF_API sf_status sf_ssd_step(sf_ctx *ctx, const sf_ssd_step_params *p);

/* ------------------------------------------------------------------ */
/* Causal depthwise conv1d (the convolution before SSD in a Mamba layer) */
/* ------------------------------------------------------------------ */
/*
 * Channels-last, per channel c of `dim`, kernel width W in 2..4:
 *   out[b, t, c] = act(bias[c] + sum_{k<W} weight[c, k] * x[b, t - (W-1) + k, c])
 * where x before a sequence's first token is taken from initial_state
 * (the W-1 previous inputs, oldest first) or is zero; act = SiLU when silu.
 *   x       (b, L, dim)   f32/f16/bf16, unit inner stride
 *   weight  (dim, W)      f32
 *   bias    (dim)         f32, optional
 *   initial_state (b, dim, W-1) or (nseq, dim, W-1) with cu_seqlens; f32, optional
 *   final_state   same shape, f32, optional output: the last W-1 inputs of
 *                 each sequence (with initial_state / zeros in front when
 *                 the sequence is shorter than W-1)
 *   cu_seqlens (nseq+1) i32/i64 optional, needs b == 1: no window crosses
 *                 a sequence boundary
 *   out     (b, L, dim)   same dtype as x
 */
typedef struct sf_conv1d_params {
    sf_tensor x, weight, bias;
    sf_tensor initial_state, final_state;
    sf_tensor cu_seqlens;
    sf_tensor out;
    int silu;
    sf_backend backend;
} sf_conv1d_params;

SF_API void sf_conv1d_params_init(sf_conv1d_params *p);
SF_API sf_status sf_conv1d_fwd(sf_ctx *ctx, const sf_conv1d_params *p);

/*
 * Decode update of a rolling conv state, one token per sequence:
 *   window = [conv_state[s] (W-1 values, oldest first), x[i]]
 *   out[i, c] = act(bias[c] + sum_k weight[c, k] window[k]);  conv_state[s]
 *   shifts left by one and takes x[i] (in place).
 *   conv_state (nslots, dim, W-1) f32, read and written in place
 *   x (b, dim) f32/f16/bf16; weight (dim, W) f32; bias (dim) f32 optional
 *   state_idx (b) i32 optional (as in sf_ssd_step: negative = padding)
 *   out (b, dim) same dtype as x
 */
typedef struct sf_conv1d_update_params {
    sf_tensor conv_state;
    sf_tensor x, weight, bias;
    sf_tensor state_idx;
    sf_tensor out;
    int silu;
    sf_backend backend;
} sf_conv1d_update_params;

SF_API void sf_conv1d_update_params_init(sf_conv1d_update_params *p);
SF_API sf_status sf_conv1d_update(sf_ctx *ctx, const sf_conv1d_update_params *p);

/* ------------------------------------------------------------------ */
/* Gated RMSNorm (Mamba-2's output norm)                                */
/* ------------------------------------------------------------------ */
/*
 * Rows of x (rows, D), normalised per group of group_size channels
 * (group_size divides D; 0 means D):
 *   norm_before_gate = 0:  h = x * silu(z);  out = h * rsqrt(mean_g(h^2) + eps) * weight
 *   norm_before_gate = 1:  out = x * rsqrt(mean_g(x^2) + eps) * weight * silu(z)
 * Without z it is a plain (grouped) RMSNorm.
 *   x (rows, D) f32/f16/bf16, unit inner stride; z like x, optional;
 *   weight (D) f32; out like x.  eps > 0 (1e-5 typical).
 */
typedef struct sf_rmsnorm_gated_params {
    sf_tensor x, z, weight;
    sf_tensor out;
    int group_size;
    int norm_before_gate;
    float eps;
    sf_backend backend;
} sf_rmsnorm_gated_params;

SF_API void sf_rmsnorm_gated_params_init(sf_rmsnorm_gated_params *p);
SF_API sf_status sf_rmsnorm_gated(sf_ctx *ctx, const sf_rmsnorm_gated_params *p);

/* ------------------------------------------------------------------ */
/* Fused layer ops: residual add + norm, SwiGLU, rotary embedding      */
/* ------------------------------------------------------------------ */
/*
 * Residual add + RMSNorm / LayerNorm, one pass over each row (the last
 * dimension, D >= 1, any length):
 *   h = x + residual                     (h = x when residual is absent)
 *   rmsnorm:   y = h * rsqrt(mean(h^2) + eps) * weight (+ bias)
 *   layernorm: y = (h - mean(h)) * rsqrt(mean((h - mean(h))^2) + eps) * weight (+ bias)
 * The statistics and the normalisation are f32 (f64 on the reference), from
 * the unrounded f32 h; the variance is the biased one (divided by D).
 *   x            (rows, D)  f32/f16/bf16, unit inner stride, any row stride
 *   residual     (rows, D)  x's dtype or f32, unit inner stride; optional
 *   weight       (D)        f32 or x's dtype, any stride; required
 *   bias         (D)        f32 or x's dtype, any stride; optional (both norms)
 *   out          (rows, D)  x's dtype, unit inner stride: y
 *   residual_out (rows, D)  x's dtype or f32, unit inner stride; optional: h,
 *                rounded to its dtype (f32 keeps a full-precision residual
 *                stream, flash-attention's residual_in_fp32).  It may be the
 *                residual itself (in place): the same data pointer, dtype,
 *                shape and strides.  Any other overlap of an output with an
 *                input or another output is SF_ERR_INVALID_ARG.
 * eps: positive and finite (SF_ERR_INVALID_ARG otherwise).  rows = 0 is a
 * no-op; D = 0 is SF_ERR_SHAPE.
 * sf_rmsnorm and sf_layernorm are the same operations under the names
 * without a residual: they share the params and the implementation, and
 * refuse a residual or a residual_out (SF_ERR_INVALID_ARG), so the name
 * says what a call does.
 * CUDA backend: one launch, no workspace, no synchronisation (CUDA-graph
 * capturable); the same f32 numerics (rsqrtf: within f32 rounding).
 */
typedef struct sf_norm_params {
    sf_tensor x, residual;
    sf_tensor weight, bias;
    sf_tensor out, residual_out;
    float eps;           /* default 1e-5 */
    sf_backend backend;
} sf_norm_params;

/* Fills defaults: every tensor absent, eps 1e-5, backend AUTO. */
SF_API void sf_norm_params_init(sf_norm_params *p);
SF_API sf_status sf_add_rmsnorm(sf_ctx *ctx, const sf_norm_params *p);
SF_API sf_status sf_add_layernorm(sf_ctx *ctx, const sf_norm_params *p);
SF_API sf_status sf_rmsnorm(sf_ctx *ctx, const sf_norm_params *p);
SF_API sf_status sf_layernorm(sf_ctx *ctx, const sf_norm_params *p);

/*
 * SwiGLU: out[r, j] = silu(gate[r, j]) * up[r, j],  silu(v) = v / (1 + exp(-v)),
 * computed in f32 (f64 on the reference), for j < n, from
 *   SF_SWIGLU_SEPARATE:    gate (rows, n) and up (rows, n), two tensors;
 *   SF_SWIGLU_CONCAT:      gate (rows, 2n) holds [gate | up]: gate[r, j] and
 *                          up = gate[r, n + j] (Llama's fused gate_up_proj);
 *                          up must be absent;
 *   SF_SWIGLU_INTERLEAVED: gate (rows, 2n) holds pairs: gate[r, 2j] and
 *                          up = gate[r, 2j + 1]; up must be absent.
 *   gate, up  f32/f16/bf16 (up: gate's dtype), unit inner stride
 *   out       (rows, n), gate's dtype, unit inner stride, no overlap with the
 *             inputs
 * n >= 1; another layout value is SF_ERR_INVALID_ARG.
 * CUDA backend: one launch, no workspace (CUDA-graph capturable); silu
 * with a fast exp and an approximate reciprocal (a few f32 ulp).
 */
typedef enum sf_swiglu_layout {
    SF_SWIGLU_SEPARATE = 0,
    SF_SWIGLU_CONCAT = 1,
    SF_SWIGLU_INTERLEAVED = 2
} sf_swiglu_layout;

typedef struct sf_swiglu_params {
    sf_tensor gate, up;
    sf_tensor out;
    sf_swiglu_layout layout;
    sf_backend backend;
} sf_swiglu_params;

/* Fills defaults: every tensor absent, layout SEPARATE, backend AUTO. */
SF_API void sf_swiglu_params_init(sf_swiglu_params *p);
SF_API sf_status sf_swiglu(sf_ctx *ctx, const sf_swiglu_params *p);

/*
 * The gate/up projection of a SwiGLU MLP with the activation fused in:
 *   y[m, i] = silu(g[m, i]) * u[m, i],  g = x w_gate^T,  u = x w_up^T,
 *   g[m, i] = sum_k x[m, k] * w_gate[i, k] (u likewise), silu as sf_swiglu,
 * so the (M, 2I) product is never written to memory.
 *   x       (M, K)  f32/f16/bf16 (f16/bf16 on the CUDA backend), unit inner
 *                   stride, any row stride; M >= 0 (M = 0 is a no-op)
 *   w_gate  (I, K)  x's dtype, unit inner stride, any row stride (rows of
 *   w_up    (I, K)  torch.nn.Linear.weight); a concatenated (2I, K)
 *                   [gate; up] projection is two views of it
 *   y       (M, I)  x's dtype, unit inner stride, any row stride; it may not
 *                   overlap any input (SF_ERR_INVALID_ARG)
 * I >= 1, K >= 1.  Errors name the tensor: absent SF_ERR_NULL_POINTER,
 * extents that disagree (or I, K of 0) SF_ERR_SHAPE, dtypes that differ
 * SF_ERR_DTYPE, an inner stride other than 1 or rows of y on one address
 * SF_ERR_STRIDE, y over an input SF_ERR_INVALID_ARG, f32 on the CUDA
 * backend SF_ERR_UNSUPPORTED.  Numerics: g and u are summed in f32
 * (double on the reference) and never rounded to the input dtype; y is
 * rounded once.  The CUDA backend multiplies on the tensor cores (f32
 * accumulation) and takes silu with the SFU's exp and reciprocal (a few
 * f32 ulp).
 * CUDA backend (src/cuda/gemm_swiglu/configs.h, autotuned per shape
 * bucket; SF_AUTOTUNE_FORCE=gemm_swiglu:NAME pins one): from M = 17 a
 * persistent, warp-specialised TMA + wgmma kernel whose tiles hold matching
 * rows of w_gate and w_up, so silu(g) * u is formed in registers (from M =
 * 1024 in clusters of two CTAs sharing each weight tile); it needs x and
 * both weights 16-byte aligned with row strides a multiple of 8 elements.
 * M <= 16 (decode) streams the weights once per 16 rows of x (bound by
 * their 4 I K bytes); that kernel also serves any shape and alignment.
 * No workspace, no synchronisation (the first call of a shape bucket times
 * the candidates, unless the choice is cached or the stream is being
 * captured): graph capturable.
 */
typedef struct sf_gemm_swiglu_params {
    sf_tensor x;
    sf_tensor w_gate, w_up;
    sf_tensor y;
    sf_backend backend;
} sf_gemm_swiglu_params;

/* Fills defaults: every tensor absent, backend AUTO. */
SF_API void sf_gemm_swiglu_params_init(sf_gemm_swiglu_params *p);
SF_API sf_status sf_gemm_swiglu(sf_ctx *ctx, const sf_gemm_swiglu_params *p);

/*
 * Rotary position embedding of q (T, H, d) and k (T, Hkv, d), T tokens,
 * each head rotated alike.  The first rotary_dim (R, even, 2 <= R <= d; 0
 * means d) channels of a head are rotated in R/2 pairs, the rest pass
 * through unchanged:
 *   SF_ROPE_NEOX: pair i is (i, i + R/2)    (rotate halves; GPT-NeoX, Llama)
 *   SF_ROPE_GPTJ: pair i is (2i, 2i + 1)    (interleaved; GPT-J)
 * and with the angle a = pos * f_i of the token's position pos:
 *   x1' = x1 cos(a) - x2 sin(a),   x2' = x2 cos(a) + x1 sin(a).
 * Frequencies: f_i = theta^(-2i/R) (theta > 0, 10000 by default), scaled
 * when scaling = SF_ROPE_LLAMA3 (Llama 3.1's "llama3" rope_type), with
 * wavelength w_i = 2 pi / f_i, L = original_max_position, lo = L /
 * low_freq_factor, hi = L / high_freq_factor:
 *   w_i < hi:            f_i unchanged          (high frequencies)
 *   w_i > lo:            f_i / factor           (low frequencies)
 *   otherwise:           s = (L / w_i - low_freq_factor) /
 *                            (high_freq_factor - low_freq_factor),
 *                        f_i = (1 - s) f_i / factor + s f_i
 * (factor > 0, 0 < low_freq_factor < high_freq_factor, L >= 1, all finite).
 * Alternatively cos and sin tables are given, both (npos, R/2) f32 with any
 * strides: then cos(a) = cos[pos, i], sin(a) = sin[pos, i], and theta and the
 * scaling are not used (flash-attention's apply_rotary_emb).
 *   q          (T, H, d)   f32/f16/bf16, unit inner stride; required
 *   k          (T, Hkv, d) q's dtype, unit inner stride; optional
 *   q_out      like q, optional: absent rotates q in place; given, q is read
 *              only and q_out gets every channel (pass-through ones copied)
 *   k_out      like k, optional, the same for k (given only with k)
 *   positions  (T) i32/i64, optional: the position of each token (any
 *              order); absent, token t is at position t.  Checked on the
 *              host: >= 0, and < npos with tables (SF_ERR_INDEX).
 *   cos, sin   (npos, R/2) f32, optional, both or neither
 * No output (q_out, k_out, or q and k when in place) may overlap another
 * tensor of the call.
 * Accuracy: the host backends compute a and its cos and sin in double and
 * rotate in f32 (f64 on the reference), so the angles carry no error that
 * grows with the position (an f32 product pos * f_i would be off by up to
 * pos * 6e-8 radians).
 * CUDA backend: q and k in one launch, no workspace (CUDA-graph
 * capturable).  The frequencies are made on the host in double as above;
 * the angle pos * f_i is reduced to a fraction of a turn in double and its
 * cos and sin taken in f32 (angle error under 2e-7 rad at any position).
 * Positions live on the device and are not checked: one outside the
 * cos/sin tables is clamped into them (a wrong angle, never a read past
 * the tables).
 */
typedef enum sf_rope_style { SF_ROPE_NEOX = 0, SF_ROPE_GPTJ = 1 } sf_rope_style;
typedef enum sf_rope_scaling { SF_ROPE_SCALING_NONE = 0, SF_ROPE_LLAMA3 = 1 } sf_rope_scaling;

typedef struct sf_rope_params {
    sf_tensor q, k;
    sf_tensor q_out, k_out;
    sf_tensor positions;
    sf_tensor cos, sin;
    int rotary_dim;            /* R; 0 means d                           */
    sf_rope_style style;
    float theta;               /* base, 10000 by default                 */
    sf_rope_scaling scaling;
    float factor;              /* llama3: 8, 1, 4, 8192 in Llama 3.1     */
    float low_freq_factor, high_freq_factor;
    int original_max_position;
    sf_backend backend;
} sf_rope_params;

/* Fills defaults: every tensor absent, rotary_dim 0 (= d), NEOX, theta
 * 10000, no scaling (with Llama 3.1's values factor 8, low 1, high 4,
 * original_max_position 8192 filled in), backend AUTO. */
SF_API void sf_rope_params_init(sf_rope_params *p);
SF_API sf_status sf_rope(sf_ctx *ctx, const sf_rope_params *p);

/* ------------------------------------------------------------------ */
/* Weight-only quantised matrix product                                */
/* ------------------------------------------------------------------ */
/*
 * A weight matrix W (N x K: N output features, K input features, the layout
 * of torch.nn.Linear.weight) stored as integer codes with one scale (and
 * optionally one min) per group of `group_size` consecutive elements along
 * K of one row.  Group j of row n covers W[n, j*g .. j*g + g - 1].
 *
 *   format      code per element                      value
 *   SF_QW_INT4  u in [0, 15], two per byte            w = s * (u - 8)      no mins (GGUF Q4_0)
 *                                                     w = s * u + m        mins    (GGUF Q4_1)
 *   SF_QW_INT8  one byte: q = signed (two's           w = s * q            no mins (GGUF Q8_0)
 *               complement) without mins, u =
 *               unsigned [0, 255] with mins           w = s * u + m        mins
 *
 * with s = scales[j, n] and m = mins[j, n].  A zero point z (GPTQ / AWQ,
 * w = s * (u - z)) is the min m = -s * z.
 *
 * Tensors (all contiguous row-major, on the context's device):
 *   data    (N, K/2) int4: byte i of row n holds element 2i in its low
 *           nibble (bits 0-3) and element 2i+1 in its high nibble;
 *           (N, K) int8: byte i is element i.
 *           dtype SF_U8; SF_I8 is also accepted for int8 without mins.
 *   scales  (K/group_size, N)  f16 or bf16 (f32 on the host backends);
 *           group-major, as GPTQ and AWQ store them.
 *   mins    (K/group_size, N)  scales' dtype, optional (absent: symmetric).
 * group_size is 32, 64 or 128 and divides K (K >= 1; N >= 1).  The CUDA
 * backend also needs data 16-byte aligned (sf_malloc'd memory is).
 *
 * Layout of data: SF_QW_ROWS (above, the default) or SF_QW_TILED, the
 * CUDA backend's streaming order, made from the rows by sf_tile_qweight:
 * the rows padded to Np = N rounded up to 128 and their B = K/2 (int4) or
 * K (int8) bytes to Bp = B rounded up to 64, then byte b of row n stored at
 *   (((n / 128) * (Bp / 64) + b / 64) * 8 + (n / 16) % 8) * 1024
 *     + (n % 16) * 64 + b % 64
 * (a kilobyte holds 64 bytes of each row of a 16-row tile; the kilobytes of
 * a 128-row band's 8 tiles lie side by side, band after band), and within
 * each 8 consecutive elements e0..e7 of a row (one 32-bit word of int4
 * codes, 8 bytes of int8) the codes in the order e0 e2 e4 e6 e1 e3 e5 e7
 * (int4: nibble i of the word, low nibble first).  data is then (Np, Bp),
 * padding zero; scales and mins are as above.  The CUDA backend's decode
 * kernel streams it faster (a block's codes one contiguous run, x used as
 * stored: 3-37% at M 1-16 on an H100, bench/RESULTS.md); the CPU backend
 * takes rows only (SF_ERR_UNSUPPORTED), the reference and
 * sf_dequantize_weights both.
 */
typedef enum sf_qw_format { SF_QW_INT4 = 0, SF_QW_INT8 = 1 } sf_qw_format;
typedef enum sf_qw_layout { SF_QW_ROWS = 0, SF_QW_TILED = 1 } sf_qw_layout;

typedef struct sf_qweight {
    sf_qw_format format;
    int64_t n, k;              /* W is n x k                                */
    int group_size;            /* 32, 64 or 128                             */
    sf_tensor data;            /* packed codes                              */
    sf_tensor scales;          /* (k / group_size, n)                       */
    sf_tensor mins;            /* (k / group_size, n), optional             */
    sf_qw_layout layout;       /* of data: SF_QW_ROWS (0) or SF_QW_TILED    */
} sf_qweight;

/*
 * y = x W^T (+ bias):  y[i, n] = sum_k x[i, k] * w[n, k] (+ bias[n]), with
 * w the dequantised weights above, expanded inside the product (the CUDA
 * backend's many-row path excepted, below).
 *   x     (M, K)  f16 or bf16 (f32 on the host backends), unit inner stride,
 *                 any row stride; M >= 0 (M = 0 is a no-op)
 *   w     an sf_qweight with w.k = K and N = w.n; scales and mins f16, bf16
 *         or f32 on the host backends, in x's dtype on the CUDA backend
 *         (SF_ERR_UNSUPPORTED otherwise)
 *   bias  (N)     f32 or x's dtype, any stride; optional
 *   y     (M, N)  x's dtype, unit inner stride, any row stride; it may not
 *                 overlap any input (SF_ERR_INVALID_ARG).
 * Numerics: the reference sums in double over the exactly dequantised
 * weights.  The CPU backend sums in f32: code times x per group, then the group's scale (and
 * min times the group's sum of x); from 8 rows of x with AVX-512, over weights dequantised
 * to f32 (w = s v + m rounded once).  The CUDA backend multiplies the
 * integer codes (exact in f16/bf16) with x on the tensor cores with f32
 * accumulation, one group at a time, and applies the group's scale (and min
 * times the group's sum of x) in f32: the only differences from the
 * reference come from the order of the f32 sums and y's final rounding.
 * Except for more than 16 rows without a bias (the configuration "slab"),
 * where the product is compute-bound: there W is dequantised to x's dtype
 * (w = s * v + m in f32, rounded once) a slab of rows at a time into a
 * workspace buffer (16 MiB, or 2048 rows where that is more), and each
 * slab multiplied by cuBLAS (tensor cores, f32 accumulation).
 * CUDA backend: f16 / bf16 x with scales (and mins) in x's dtype, w.data
 * 16-byte aligned (SF_ERR_ALIGNMENT), x 16-byte aligned with a row stride
 * that is a multiple of 8 elements (SF_ERR_UNSUPPORTED otherwise).  M <= 16
 * reads the weights once (bandwidth-bound on the bytes of `data`): int4
 * with group_size 128 and int8 with 64 or 128 through a streaming kernel
 * whose K split over a thread-block cluster is summed in a fixed order
 * (deterministic), and so int4 groups of 32 / 64 and int8 groups of 32 at
 * M <= 2 / 4 / 4 when K is a multiple of 128 (int4) / 64 (int8); other
 * shapes through decode tiles; larger M taller
 * tensor-core tiles (src/cuda/gemm_wq/configs.h; SF_AUTOTUNE_FORCE=
 * gemm_wq:NAME pins one).  No synchronisation: graph capturable; no
 * workspace except on the slab path (cuBLAS's 8 MiB and the slab; its
 * first call on a context makes the cuBLAS handle and cannot be captured).
 */
typedef struct sf_gemm_wq_params {
    sf_tensor x;
    sf_qweight w;
    sf_tensor bias;
    sf_tensor y;
    sf_backend backend;
} sf_gemm_wq_params;

/* Fills defaults: every tensor absent, w.format SF_QW_INT4, w.group_size
 * 128, w.n = w.k = 0, backend AUTO. */
SF_API void sf_gemm_wq_params_init(sf_gemm_wq_params *p);
SF_API sf_status sf_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_params *p);

/*
 * Quantises w (N, K; f32, f16 or bf16, unit inner stride, any row stride)
 * into the tensors of *q, which say what to produce: q->format, group_size,
 * n = N, k = K, data and scales (and mins: present asks for the asymmetric
 * form) allocated by the caller in host memory with the shapes above.
 * Round to nearest, per group of g values v (read in their own dtype):
 *   symmetric int4:  s = max|v| / 7,   q = clamp(rne(v / s), -8, 7), u = q + 8
 *   symmetric int8:  s = max|v| / 127, q = clamp(rne(v / s), -127, 127)
 *   with mins:       m = min(v), s = (max(v) - m) / L (L = 15 int4, 255 int8),
 *                    u = clamp(rne((v - m) / s), 0, L)
 * where s and m are computed in double and stored in the scales' dtype, s
 * rounded up and m down (so that no code is clamped: every dequantised value
 * lies within s / 2 of its weight), and the stored values are the ones
 * divided by (v / s and (v - m) / s in double, rne = round half to even);
 * s = 0 (a group of zeros, or of equal values with mins) gives q = 0 (u = 8
 * for symmetric int4).  A weight that
 * is not finite, or a scale or min past the scales' dtype's range, is
 * SF_ERR_INVALID_ARG naming the row and group.  CPU contexts only (quantise
 * on the host, then copy with sf_memcpy); a CUDA context is
 * SF_ERR_UNSUPPORTED.
 */
SF_API sf_status sf_quantize_weights(sf_ctx *ctx, const sf_tensor *w, const sf_qweight *q);

/* The dequantised weights of *q into w (N, K; f32, f16 or bf16, unit inner
 * stride): each value computed in double from the definition above and
 * rounded once to w's dtype.  Host memory, CPU contexts only. */
SF_API sf_status sf_dequantize_weights(sf_ctx *ctx, const sf_qweight *q, const sf_tensor *w);

/* The codes of q (layout SF_QW_ROWS) rearranged into `tiled` (layout
 * SF_QW_TILED above: shape (Np, Bp), q.data's dtype, contiguous, host
 * memory, not overlapping q); q's scales and mins serve the tiled weight
 * unchanged.  CPU contexts only, like the conversions around it. */
SF_API sf_status sf_tile_qweight(sf_ctx *ctx, const sf_qweight *q, const sf_tensor *tiled);

/*
 * GGUF / ggml block types (their ggml_type ids) that sf_repack_gguf reads.
 * Each block covers 32 consecutive elements of one row, little-endian:
 *   Q4_0  18 bytes: f16 d, 16 bytes qs;  element j (j < 16) is the low
 *         nibble of qs[j], element j + 16 its high nibble; w = d * (u - 8)
 *   Q4_1  20 bytes: f16 d, f16 m, 16 bytes qs (nibbles as Q4_0); w = d * u + m
 *   Q8_0  34 bytes: f16 d, 32 int8 qs; w = d * qs[j]
 */
typedef enum sf_gguf_type { SF_GGUF_Q4_0 = 2, SF_GGUF_Q4_1 = 3, SF_GGUF_Q8_0 = 8 } sf_gguf_type;

/* Rewrites a GGUF tensor of n rows x k elements (k a multiple of 32; the
 * blocks row after row, as a GGUF file stores a 2-D weight of ne0 = k,
 * ne1 = n) of `bytes` bytes (exactly n * k / 32 blocks) into *q, whose
 * tensors the caller allocated in host memory: Q4_0 -> SF_QW_INT4 without
 * mins, Q4_1 -> SF_QW_INT4 with mins, Q8_0 -> SF_QW_INT8 without mins; group
 * 32; scales (and mins) f16 (copied bit for bit) or f32 (exact).  The
 * dequantised values of *q equal the GGUF definition's exactly.  CPU
 * contexts only. */
SF_API sf_status sf_repack_gguf(sf_ctx *ctx, sf_gguf_type type, const void *blocks, size_t bytes,
                                const sf_qweight *q);

/* ------------------------------------------------------------------ */
/* Attention forward, flash_attn_func / flash_attn_varlen_func         */
/* ------------------------------------------------------------------ */
/*
 * out = softmax(q k^T * scale + mask) v per head; kv head of query head h is
 * h / (H / Hkv).  Masks, for query row i of a sequence with Lq queries and
 * Lk keys (bottom-right aligned: row i sits at key position i + Lk - Lq):
 *   causal:          key j visible iff j <= i + Lk - Lq
 *   window (wl, wr): key j visible iff i + Lk - Lq - wl <= j <= i + Lk - Lq + wr
 *                    (a negative wl or wr means unbounded on that side;
 *                    causal sets wr = 0)
 * A row that sees no key gets out = 0 and lse = -INFINITY.
 * Score modifiers, applied in this order to s = scale * q.k of a visible
 * key (flash_attn's order; lse is taken over the modified scores):
 *   softcap > 0:     s = softcap * tanh(s / softcap)   (Gemma 2's capping)
 *   alibi_slopes:    s = s - slope * |i + Lk - Lq - j|  (ALiBi), slope of
 *                    head h from alibi_slopes (H) f32, or (b, H) f32 for a
 *                    slope per batch entry and head.  On the host,
 *                    non-finite slopes are SF_ERR_INVALID_ARG; on the GPU
 *                    they give NaN outputs.
 *
 * Dense layout:   q (b, Lq, H, d), k and v (b, Lk, Hkv, d), out like q,
 *                 lse (b, H, Lq) f32 optional.
 * Varlen layout:  cu_seqlens_q and cu_seqlens_k (b+1) i32 or i64, both given;
 *                 q (total_q, H, d), k/v (total_k, Hkv, d), out like q,
 *                 lse (H, total_q) f32 optional.  Sequences may be empty.
 * q, k, v, out: one dtype among f32/f16/bf16, unit inner stride; any other
 * strides.  Any head dim d from 1 to 256.  CUDA backend: f16 and bf16
 * only (f32 gives SF_ERR_UNSUPPORTED: use the CPU backend), cu_seqlens_q
 * and cu_seqlens_k of one dtype; the fastest kernels take d 64, 128, 192
 * or 256 with 16-byte aligned rows and no score modifier, the others run a
 * generic tensor-core kernel (d padded on chip).
 * softmax_scale 0 means 1/sqrt(d).
 */
typedef struct sf_attn_fwd_params {
    sf_tensor q, k, v;
    sf_tensor out;
    sf_tensor lse;
    sf_tensor cu_seqlens_q, cu_seqlens_k;
    float softmax_scale;
    int causal;
    int window_left, window_right;   /* -1: unbounded */
    float softcap;                   /* 0: off; > 0: tanh capping       */
    sf_tensor alibi_slopes;          /* optional (H) or (b, H) f32      */
    sf_backend backend;
} sf_attn_fwd_params;

SF_API void sf_attn_fwd_params_init(sf_attn_fwd_params *p);
SF_API sf_status sf_attn_fwd(sf_ctx *ctx, const sf_attn_fwd_params *p);

/* ------------------------------------------------------------------ */
/* Attention backward                                                   */
/* ------------------------------------------------------------------ */
/*
 * Gradients of sf_attn_fwd: given the forward's description in fwd (q, k,
 * v, out and lse as the forward wrote them -- out and lse are required
 * inputs here --, the masks, scale and modifiers) and dout (like out),
 * writes dq (like q), dk and dv (like k and v; for GQA/MQA summed over the
 * query heads of each KV group).  The probabilities are recomputed tile by
 * tile from lse (no Lq x Lk matrix in memory):
 *     P = exp(S - lse), dV = P^T dO, dP = dO V^T, D = rowsum(dO * O),
 *     dS = P * (dP - D), dQ = dS K scale, dK = dS^T Q scale
 * (softcap scales dS by 1 - tanh^2).  Rows that see no key contribute
 * nothing.  dq, dk, dv: the dtype of q, unit inner stride; they must not
 * alias any input.  deterministic != 0 makes the result bit-identical
 * from run to run (a fixed summation order of the dQ partials); the
 * default may sum them in any order.  Workspace from the context's arena
 * (f32 dQ accumulators and rowsum(dO * O)).
 */
typedef struct sf_attn_bwd_params {
    sf_attn_fwd_params fwd;    /* fwd.backend is ignored          */
    sf_tensor dout;
    sf_tensor dq, dk, dv;
    int deterministic;
    sf_backend backend;
} sf_attn_bwd_params;

SF_API void sf_attn_bwd_params_init(sf_attn_bwd_params *p);
SF_API sf_status sf_attn_bwd(sf_ctx *ctx, const sf_attn_bwd_params *p);

/* ------------------------------------------------------------------ */
/* Context parallelism: one sequence split across ranks (GPUs)          */
/* ------------------------------------------------------------------ */
/*
 * A sequence too long for one GPU is cut along L over R ranks, one
 * process (or context) per GPU.  The building blocks below are plain ops
 * (ref / cpu / cuda backends, validated like every op) that any transport
 * can stitch together; sf_ssd_fwd_cp and sf_attn_fwd_ring further down do
 * that over NCCL.  Every rank must pass the same shapes (but its own data).
 *
 * Mamba-2 (SSD).  Rank r holds a contiguous slice of every row, in rank
 * order (rank 0 the first tokens); slices may differ in length.  Because
 * the recurrence is linear in the state, the slice's output splits into
 * the output from a zero entering state plus a term in the entering state
 * h_in alone:
 *     y_t = y_t(zero state) + silu(z_t) exp(g_t) (h_in C_t)
 * where g_t = sum over the slice's tokens s <= t of min(dt_s A, 0).  The
 * entering state of rank r follows from the slices' own final states S_q
 * (from zero; rank 0's from initial_states) and total log-decays
 * ld_q = g_last(q) by the jump formula across slices:
 *     h_in(r) = sum_{q<r} exp(sum_{q<k<r} ld_k) S_q.
 * Per rank:  sf_ssd_cp_local -> exchange (S, ld) with every rank (an
 * all-gather) -> sf_ssd_cp_combine -> sf_ssd_cp_correct.  The result
 * equals one sf_ssd_fwd over the whole sequence to rounding (for f16/bf16
 * outputs: out is rounded twice, before and after the correction).
 * seq_idx and cu_seqlens are not supported in this mode
 * (SF_ERR_UNSUPPORTED).
 */

/* The local slice's scan and its summary.  p describes the slice as for
 * sf_ssd_fwd (rank 0 may give initial_states; the others should not) and
 * p->out receives the slice's output from that entering state (zero on
 * ranks > 0): uncorrected.  p->final_states is not written.
 *   state_out    (b, H, P, N) f32: the state after the slice's last token
 *   logdecay_out (b, H) f32: sum over the slice of min(dt A, 0), dt
 *                processed as in sf_ssd_fwd (bias, softplus, clamp)
 * Neither may alias an input or p->out. */
SF_API sf_status sf_ssd_cp_local(sf_ctx *ctx, const sf_ssd_fwd_params *p,
                                 sf_tensor state_out, sf_tensor logdecay_out);

/* The state entering rank `rank`'s slice, from every rank's summary:
 *   states_all   (R, b, H, P, N) f32, any strides (slot q = rank q's state_out)
 *   logdecay_all (R, b, H) f32 (slot q = rank q's logdecay_out)
 *   h_in         (b, H, P, N) f32 output; zeros for rank 0
 * 0 <= rank < R.  Runs on the context's backend (sf_ctx_set_backend). */
SF_API sf_status sf_ssd_cp_combine(sf_ctx *ctx, sf_tensor states_all, sf_tensor logdecay_all,
                                   int rank, sf_tensor h_in);

/* Adds the entering state's term to the output of sf_ssd_cp_local, in
 * place on p->out (same p as the local call):
 *   out_t += silu(z_t) (when z is given) exp(g_t) (h_in C_t)   per head
 * and, when p->final_states is given, writes the state after the slice:
 *   final = exp(logdecay_local) h_in + state_local
 * (the sequence's final state on the last rank).
 *   h_in (b, H, P, N) f32; state_local (b, H, P, N) f32 and
 *   logdecay_local (b, H) f32 are this rank's local summary, read only
 *   when p->final_states is given (may be absent otherwise).
 * x and B are not read (x still gives the shape). */
SF_API sf_status sf_ssd_cp_correct(sf_ctx *ctx, const sf_ssd_fwd_params *p, sf_tensor h_in,
                                   sf_tensor state_local, sf_tensor logdecay_local);

/* Attention: merges a partial result (attention over some of the keys)
 * into an accumulator by their log-sum-exp, in place:
 *   m = max(lse_acc, lse_part);  wa = exp(lse_acc - m), wp = exp(lse_part - m)
 *   out_acc = (wa out_acc + wp out_part) / (wa + wp);  lse_acc = m + log(wa + wp)
 * Dense layouts of sf_attn_fwd: out_acc and out_part (b, L, H, d), any of
 * f32/f16/bf16 each (an f32 accumulator over f16/bf16 parts avoids
 * rounding at every merge), unit inner stride; lse_acc and lse_part
 * (b, H, L) f32.  A row whose lse is -INFINITY is empty: its out is not
 * read (it may hold anything); two empty rows give out 0, lse -INFINITY.
 * Starting from an accumulator whose lse is all -INFINITY gives the part
 * itself.  Runs on the context's backend (sf_ctx_set_backend). */
SF_API sf_status sf_attn_merge(sf_ctx *ctx, sf_tensor out_acc, sf_tensor lse_acc,
                               sf_tensor out_part, sf_tensor lse_part);

/*
 * The NCCL communicator and the drivers.  Present in CUDA builds that
 * found NCCL at configure time; otherwise every function below returns
 * SF_ERR_UNSUPPORTED ("built without NCCL") and sf_comm_create leaves
 * *out NULL.  One process (or thread) per GPU: one rank calls
 * sf_comm_id_create, hands the id to every rank (a pipe, MPI, a file),
 * and every rank calls sf_comm_create with it; creation blocks until all
 * nranks have joined.  Collective calls (the drivers) must be made by
 * every rank, in the same order, with the same shapes; a rank that
 * returns an error before communicating leaves the others waiting, so
 * treat any failure as fatal for the communicator.  Errors of NCCL itself
 * are reported as SF_ERR_CUDA with NCCL's message.
 */
typedef struct sf_comm sf_comm;
typedef struct sf_comm_id {
    unsigned char bytes[128];  /* opaque (NCCL's unique id: an address) */
} sf_comm_id;

/* A fresh id for one communicator.  Touches no GPU, so a launcher may call
 * it before fork() (CUDA itself must not be initialised before a fork).
 * The calling process serves the rendezvous (a listening thread): it must
 * stay alive until every rank has returned from sf_comm_create. */
SF_API sf_status sf_comm_id_create(sf_comm_id *id);
/* Joins communicator `id` as `rank` of `nranks` (0 <= rank < nranks) on
 * the CUDA device of ctx (a CPU context: SF_ERR_DEVICE).  The
 * communicator is bound to that device; use it with contexts on it. */
SF_API sf_status sf_comm_create(sf_comm **out, sf_ctx *ctx, const sf_comm_id *id, int nranks,
                                int rank);
/* Waits for the communicator's pending work and frees it.  NULL is a no-op. */
SF_API void sf_comm_destroy(sf_comm *comm);
SF_API int sf_comm_rank(const sf_comm *comm);   /* -1 for NULL */
SF_API int sf_comm_size(const sf_comm *comm);   /* 0 for NULL  */

/* sf_ssd_fwd over a sequence split across the communicator's ranks.  p
 * describes this rank's slice (rank r holds the r-th contiguous slice of
 * every row; lengths may differ between ranks).  initial_states is read
 * on rank 0 only (ignored elsewhere); final_states, when given, receives
 * the state after this rank's slice: the sequence's final state on the
 * last rank.  Runs local -> one all-gather of (state, logdecay) -> combine
 * -> correct, asynchronously on the context's stream like any op; on CUDA,
 * where the chunked scan's state kernels take the shape (chunk 128 or 256,
 * dstate a multiple of 4), the local step computes the slice's final state
 * alone and the last step is sf_ssd_fwd from the entering state (one pass
 * over the output instead of two; out then rounded once).  The
 * communicator keeps its own exchange buffer (R (b H P N + b H) + b H P N
 * floats), grown on the first call that needs more (cudaMalloc): the
 * context's workspace is used by the inner ops, so it cannot hold data
 * that lives across them.  seq_idx / cu_seqlens: SF_ERR_UNSUPPORTED. */
SF_API sf_status sf_ssd_fwd_cp(sf_ctx *ctx, sf_comm *comm, const sf_ssd_fwd_params *p);

/* Ring attention over a sequence split across R ranks, causal or not.
 * Load-balanced layout: the sequence of each batch row is cut into 2R
 * chunks of Lc tokens and rank r holds chunks r and 2R-1-r, concatenated:
 * q, k, v, out are (b, 2 Lc, H or Hkv, d), lse (b, H, 2 Lc) f32 optional,
 * all with positions in that order.  Under a causal mask every rank then
 * does the same work: two Lc x Lc blocks of scores per step.
 * K/V blocks travel around the ring (rank r sends to r+1, receives from
 * r-1; NCCL send/recv on a stream of the communicator, overlapped with the
 * attention on the block held): at step s = 0 .. R-1 rank r holds the K/V
 * of rank (r - s) mod R.  Each step runs sf_attn_fwd on the chunk pairs
 * that are visible (key chunk before query chunk: full; the same chunk:
 * causal; after: skipped) and merges the partial results by lse
 * (sf_attn_merge's rule, through an f32 accumulator for f16/bf16 outputs,
 * so out is rounded once more than by a single sf_attn_fwd).
 * k and v may have any strides sf_attn_fwd accepts; when they are not
 * contiguous they are first packed into the communicator's buffer.
 * The communicator's buffer holds 2 K/V blocks in flight, one partial
 * result, and an f32 accumulator and lse when needed.  Dense layout only:
 * cu_seqlens, sliding windows and ALiBi (its distances would need each
 * chunk's offset) give SF_ERR_UNSUPPORTED; softcap is applied per chunk,
 * exactly.  Lq must equal Lk and be even (SF_ERR_SHAPE). */
SF_API sf_status sf_attn_fwd_ring(sf_ctx *ctx, sf_comm *comm, const sf_attn_fwd_params *p);

/* ------------------------------------------------------------------ */
/* Paged KV cache: append, and attention over it (decode, prefill)     */
/* ------------------------------------------------------------------ */
/*
 * One layer's cache is two pools of pages, k_cache and v_cache, each
 * (num_pages, page_size, Hkv, d), f16 or bf16 (one dtype; f32 too on
 * the host backends, SF_ERR_UNSUPPORTED from the CUDA backend), unit inner
 * stride, any other non-negative strides; page_size a power of two from 1
 * to 256 (SF_ERR_SHAPE otherwise); head dim 1 to 256.  q, k, v and out
 * have the cache's dtype.  block_table, seqlens and cache_seqlens may have
 * any strides.  Token t of sequence b lives in row t % page_size of page
 * block_table[b, t / page_size]:
 *   block_table  (b, max_pages) i32: a sequence's logical pages in order;
 *                entries past the pages its length needs are never read.
 * An entry of a page that is read or written must be in [0, num_pages),
 * and a length must fit in max_pages * page_size.  Host backends check
 * every entry before touching memory (SF_ERR_INDEX, naming the entry).  On
 * the GPU the kernels check as they go: a sequence with a bad entry or
 * length is neither read nor written past the check (attention writes 0
 * and lse -inf for it), and the context records the error; the next
 * sf_ctx_synchronize returns SF_ERR_INDEX with the sequence named, and
 * clears the record.  Nothing outside the pools is ever read or written.
 * Host checks cover the entries of every page a length spans (attention:
 * [0, seqlens[b]); append: the pages written).
 *
 * FP8 pools: k_cache and v_cache may be SF_F8E4M3 (both), unit inner
 * stride, with a scale per element group: an element's value is its e4m3
 * code times its scale.  The scales come as k_scale and v_scale, both f32,
 * one of two shapes (both the same), chosen by rank:
 *   per (token, kv head): (num_pages, page_size, Hkv), any non-negative
 *     strides, the scale of row (page, row, head) of the pool; written by
 *     sf_kv_append (scale = amax / 448 over the new row's d values, the
 *     row's largest magnitude mapping to 448; an all-zero row has scale 0),
 *     read by sf_attn_paged;
 *   per kv head: (Hkv), any stride, fixed by the caller (calibrated), read
 *     by both ops.
 * A scale tensor is required with FP8 pools and refused with f16/bf16/f32
 * ones (SF_ERR_INVALID_ARG naming it); wrong shapes or dtypes are
 * SF_ERR_SHAPE / SF_ERR_DTYPE naming k_scale or v_scale; they live on the
 * context's device, and must not overlap the pools or the other inputs.
 * Quantisation (sf_kv_append): x / scale in f32 (x the f32 value of the new
 * k or v element, K after its rotation), rounded to nearest, ties to even
 * mantissa, saturating to +-448 (an infinity too); NaN gives 0x7f; scale 0
 * gives code 0 for every element (x / 0 is not formed).  The host and GPU
 * backends produce the same codes and scales bit for bit (without rope;
 * with rope the rotation itself may differ in the last f32 bit).  Attention
 * dequantises as it goes (code * scale, f32), with q and out f16 or bf16
 * (f32 too on the host backends).  k and v of an append into FP8 pools
 * may be f32, f16 or bf16.  The CUDA attention over FP8 pools
 * needs a head dim that is a multiple of 16.
 */

/* Writes new tokens' K and V into the cache: token j of sequence b (k and
 * v (b, Lnew, Hkv, d), the cache's dtype) goes to position
 * cache_seqlens[b] + j.  cache_seqlens (b) i32 >= 0 is read, not updated
 * (the caller advances it, as with flash_attn_with_kvcache).  k and v must
 * not overlap the pools.  No cache slot may be written twice in one call
 * (two sequences, or two logical pages of one, mapping a new token to the
 * same page and row): host backends refuse it (SF_ERR_INDEX naming both
 * sequences); on the GPU it is a race, and avoiding it is the caller's
 * duty (as with vLLM's reshape_and_cache).  b or Lnew 0: nothing to do.
 *
 * rope (optional): K is rotated on the way in, V never.  The rotation is
 * sf_rope's (rotary_dim, style, theta and scaling, or cos and sin tables;
 * validated as sf_rope validates them, messages naming "rope.<field>")
 * with the new token j of sequence b at position cache_seqlens[b] + j; k
 * itself is read only.  rope->q, k, q_out, k_out and positions must be
 * absent (SF_ERR_INVALID_ARG); rope->backend is not used.  cos and sin
 * must not overlap the pools.  With tables, every position written must
 * be a row of them: host backends check it (SF_ERR_INDEX naming the
 * sequence); on the GPU a row past the tables is neither read nor written
 * and the context records the error as for a bad block-table entry
 * (SF_ERR_INDEX at the next sf_ctx_synchronize).  Accuracy as sf_rope's
 * (angles in double on the host, reduced in double on the GPU).  The
 * CUDA rotating kernel takes one warp a (token, kv head) row; without
 * rope the plain copy runs unchanged.  No workspace (CUDA-graph
 * capturable). */
typedef struct sf_kv_append_params {
    sf_tensor k_cache, v_cache;      /* pools, written in place          */
    sf_tensor k, v;                  /* (b, Lnew, Hkv, d)                */
    sf_tensor block_table;           /* (b, max_pages) i32               */
    sf_tensor cache_seqlens;         /* (b) i32: tokens already cached   */
    sf_backend backend;
    const sf_rope_params *rope;      /* NULL: K copied as it is          */
    sf_tensor k_scale, v_scale;      /* FP8 pools only: (num_pages,
                                      * page_size, Hkv) f32 written, or
                                      * (Hkv) f32 read (see above)       */
} sf_kv_append_params;

SF_API void sf_kv_append_params_init(sf_kv_append_params *p);
SF_API sf_status sf_kv_append(sf_ctx *ctx, const sf_kv_append_params *p);

/* Attention of Lq new query tokens per sequence over its cached keys:
 *   q (b, Lq, H, d) with H a multiple of Hkv (query head h reads kv head
 *   h / (H / Hkv)); seqlens (b) i32 >= 0: keys of sequence b, the new
 *   tokens included (append them first); out like q; lse (b, H, Lq) f32
 *   optional.
 * Query row i of sequence b sits at key position seqlens[b] - Lq + i
 * (bottom-right aligned, as sf_attn_fwd); causal, window, softcap,
 * alibi_slopes and softmax_scale mean what they mean there (ALiBi: s = s -
 * slope * |seqlens[b] - Lq + i - j| after the softcap, slope of query head
 * h from alibi_slopes (H) or (b, H) f32, any strides; non-finite slopes
 * are SF_ERR_INVALID_ARG on the host, NaN outputs on the GPU).  A row that sees no key (length
 * 0, or a causal row before the first key) gets out 0 and lse -inf.
 * Lq = 1 is decode; Lq > 1 chunked prefill or speculative decoding.  The
 * GPU splits long contexts across thread blocks and merges the parts by
 * their lse; the split is chosen on the device from the lengths, so a
 * captured CUDA graph stays valid when lengths and tables change between
 * replays. */
typedef struct sf_attn_paged_params {
    sf_tensor q;                     /* (b, Lq, H, d)                    */
    sf_tensor k_cache, v_cache;      /* pools                            */
    sf_tensor block_table;           /* (b, max_pages) i32               */
    sf_tensor seqlens;               /* (b) i32: keys per sequence       */
    sf_tensor out;                   /* like q                           */
    sf_tensor lse;                   /* (b, H, Lq) f32, optional         */
    float softmax_scale;             /* 0: 1/sqrt(d)                     */
    int causal;
    int window_left, window_right;   /* -1: unbounded                    */
    float softcap;                   /* 0: off                           */
    sf_backend backend;
    sf_tensor k_scale, v_scale;      /* FP8 pools only (see above)       */
    sf_tensor alibi_slopes;          /* optional (H) or (b, H) f32       */
} sf_attn_paged_params;

SF_API void sf_attn_paged_params_init(sf_attn_paged_params *p);
SF_API sf_status sf_attn_paged(sf_ctx *ctx, const sf_attn_paged_params *p);

/* A paged cache owned by the library: per layer a K and a V pool in the
 * context's memory, one free list of page numbers shared by the layers
 * (page n of a sequence is page n in every layer's pools), and per
 * sequence slot its pages and length.  For callers that do not keep their
 * own tables (vLLM and FlashInfer do; the ops above take either).
 *   num_pages  pages in each pool; page_size a power of two 1..256 (0: 16)
 *   nheads_kv, head_dim, dtype (f16 / bf16; f32 on a CPU context;
 *     SF_F8E4M3: FP8 pools with per-(token, kv head) scale pools owned by
 *     the cache, see sf_kv_cache_scales)
 *   num_layers >= 1, max_seqs >= 1 sequence slots, max_pages_per_seq >= 1
 * Pools and tables are allocated once, at creation. */
typedef struct sf_kv_cache sf_kv_cache;

typedef struct sf_kv_cache_desc {
    int64_t num_pages;
    int page_size;
    int nheads_kv, head_dim;
    sf_dtype dtype;
    int num_layers;
    int max_seqs;
    int max_pages_per_seq;
} sf_kv_cache_desc;

SF_API sf_status sf_kv_cache_create(sf_ctx *ctx, const sf_kv_cache_desc *d, sf_kv_cache **out);
/* Frees the pools and tables (NULL is a no-op). */
SF_API void sf_kv_cache_destroy(sf_kv_cache *c);
/* Views of layer `layer`'s pools, (num_pages, page_size, Hkv, d). */
SF_API sf_status sf_kv_cache_pools(const sf_kv_cache *c, int layer, sf_tensor *k_cache, sf_tensor *v_cache);
/* FP8 caches: views of layer `layer`'s scale pools, (num_pages, page_size,
 * Hkv) f32, zero at creation, for k_scale and v_scale of sf_kv_append and
 * sf_attn_paged.  SF_ERR_INVALID_ARG for a cache of another dtype. */
SF_API sf_status sf_kv_cache_scales(const sf_kv_cache *c, int layer, sf_tensor *k_scale, sf_tensor *v_scale);
/* Sets slot `seq`'s length to `len` tokens, taking pages from the free list
 * or giving the ones it no longer needs back (the last ones first).
 * SF_ERR_OUT_OF_MEMORY when too few pages are free, SF_ERR_INVALID_ARG past
 * max_pages_per_seq: nothing changes then.  Host bookkeeping only: the
 * tables the kernels read change at the next sf_kv_cache_tables. */
SF_API sf_status sf_kv_cache_resize(sf_kv_cache *c, int seq, int64_t len);
/* The length of slot `seq` (-1 for a bad slot) and the free pages. */
SF_API int64_t sf_kv_cache_length(const sf_kv_cache *c, int seq);
SF_API int64_t sf_kv_cache_free_pages(const sf_kv_cache *c);
/* Copies the host tables to the context's memory (synchronously) and gives
 * views of them: block_table (max_seqs, max_pages_per_seq) i32, entries
 * past a slot's pages -1, and seqlens (max_seqs) i32, for sf_attn_paged
 * (and, with the lengths before a resize, sf_kv_append).  The buffers stay
 * at the same addresses for the cache's life (graph captures may hold
 * them). */
SF_API sf_status sf_kv_cache_tables(sf_kv_cache *c, sf_tensor *block_table, sf_tensor *seqlens);

/* ------------------------------------------------------------------ */
/* Dense matrix product (Linear layers)                                */
/* ------------------------------------------------------------------ */
/*
 * y = x W^T (+ bias) (+ beta y):
 *   y[i, n] = sum_k x[i, k] w[n, k] + bias[n] + beta * y_old[i, n]
 * with W in torch.nn.Linear's layout (out features x in features).
 *   x     (M, K)  f32/f16/bf16, unit inner stride, any row stride; M >= 0
 *                 (M = 0 is a no-op), K >= 1
 *   w     (N, K)  f32/f16/bf16 (any of them on the host backends, x's
 *                 dtype on the CUDA backend), unit inner stride, any row
 *                 stride; N >= 1
 *   bias  (N)     f32 or x's dtype, any stride; optional
 *   y     (M, N)  x's dtype, unit inner stride, any row stride; no overlap
 *                 with an input (SF_ERR_INVALID_ARG).  Read only when
 *                 beta != 0 (the residual add of a layer: beta = 1).
 * beta finite (SF_ERR_INVALID_ARG otherwise).
 * Numerics: products and sums in f32 (f64 on the reference) from the inputs
 * widened exactly to f32; y rounded once to its dtype.  The CPU backend
 * calls BLAS sgemm when the library was built with one (16-bit inputs
 * widened into the workspace a block of W rows at a time), else a blocked,
 * threaded f32 loop.  The CUDA backend calls cuBLAS (cublasGemmEx, f32
 * compute without TF32); its handle is made on the context's first
 * sf_gemm call (which must therefore not be captured into a graph) and
 * takes its workspace from the context's arena: later calls allocate and
 * synchronise nothing (CUDA-graph capturable).  On CUDA a bias takes an
 * f32 buffer of M x N from the workspace (the product, then one pass adding
 * the bias and beta y, y rounded once), and row strides must lie between
 * the row length and 2^31 (SF_ERR_UNSUPPORTED otherwise).
 */
typedef struct sf_gemm_params {
    sf_tensor x, w, bias;
    sf_tensor y;
    float beta;          /* 0: y is written only                         */
    sf_backend backend;
} sf_gemm_params;

/* Fills defaults: every tensor absent, beta 0, backend AUTO. */
SF_API void sf_gemm_params_init(sf_gemm_params *p);
SF_API sf_status sf_gemm(sf_ctx *ctx, const sf_gemm_params *p);

/* ------------------------------------------------------------------ */
/* The engine: a checkpoint in, text out                               */
/* ------------------------------------------------------------------ */
/*
 * An engine holds one model (a Hugging Face directory with config.json and
 * safetensors, or a GGUF file; LlamaForCausalLM, Qwen2ForCausalLM,
 * Mamba2ForCausalLM and the hybrid BambaForCausalLM), its
 * tokenizer, a context on the chosen device, a paged KV cache (attention
 * layers) and one conv and one SSM state per sequence slot (Mamba layers).
 * sf_engine_generate runs prompts to completion: the prompts admitted
 * together are prefilled in one pass (variable lengths), then every live
 * sequence decodes one token a step; a sequence that finishes (EOS, a stop
 * string, its token budget, or the callback) leaves at once and frees its
 * pages, and a waiting prompt joins before the next step (at most max_seqs
 * live at once).  Buffers are allocated at creation and when a prefill
 * needs more rows than any before, never per token.
 * Errors: every function returns an sf_status; the sentence is in
 * sf_engine_last_error (or in err for sf_engine_create).  An engine is used
 * by one thread at a time.
 */
typedef struct sf_engine sf_engine;

typedef struct sf_engine_options {
    int device;              /* SF_DEVICE_CPU (default) or a CUDA ordinal     */
    int threads;             /* CPU threads; 0: the OpenMP default            */
    int dequantize;          /* 1: GGUF Q4_0/Q4_1/Q8_0 weights expanded to f32
                                at load; 0: kept quantised (sf_gemm_wq)      */
    int max_seqs;            /* sequences live at once; 0: 8                  */
    int max_seq_len;         /* tokens per sequence, prompt included; 0:
                                min(the model's max positions, 4096)          */
    int page_size;           /* KV page size (power of two); 0: 16            */
    sf_dtype dtype;          /* activations and KV cache: SF_F32 (default),
                                SF_BF16 or SF_F16; the residual stream, the
                                Mamba states and the logits stay f32          */
    int use_graphs;          /* CUDA devices: 1 (default) replays each decode
                                step as a CUDA graph, one per batch-size
                                bucket (1, 2, 4, ... max_seqs), captured after
                                its first run; 0: every op launched each step.
                                Ignored on the CPU                            */
} sf_engine_options;

/* Fills defaults: device SF_DEVICE_CPU, use_graphs 1, every other field 0
 * (the defaults above). */
SF_API void sf_engine_options_init(sf_engine_options *o);
/* Opens the checkpoint at `path` and builds the engine.  On failure *out
 * stays NULL and err (errlen bytes, may be NULL) gets the reason. */
SF_API sf_status sf_engine_create(const char *path, const sf_engine_options *o, sf_engine **out,
                                  char *err, size_t errlen);
SF_API void sf_engine_destroy(sf_engine *e);                /* NULL: no-op */
SF_API const char *sf_engine_last_error(const sf_engine *e); /* "" if none */

/* Model facts: vocabulary size, BOS / EOS ids (-1 when absent), hidden size,
 * layers, and a one-line description ("llama, 30 layers, hidden 576, ..."). */
SF_API int sf_engine_vocab_size(const sf_engine *e);
SF_API int sf_engine_bos(const sf_engine *e);
SF_API int sf_engine_eos(const sf_engine *e);
SF_API const char *sf_engine_describe(const sf_engine *e);
/* Bytes of weights, and of the KV cache, held on the engine's device. */
SF_API int64_t sf_engine_weight_bytes(const sf_engine *e);
SF_API int64_t sf_engine_kv_bytes(const sf_engine *e);

/* Text to token ids with the model's tokenizer.  chat != 0 wraps the text in
 * the model's chat template (one user turn, then the assistant's prompt)
 * and parses special tokens; otherwise special tokens written in the text
 * are plain text.  add_bos != 0 puts the model's BOS first (when it has
 * one).
 * Writes at most cap ids and returns the total count (call again with a
 * larger buffer when it is larger), or -1 on an error. */
SF_API int64_t sf_engine_tokenize(sf_engine *e, const char *text, int chat, int add_bos, int32_t *ids,
                                  int64_t cap);
/* The bytes of one token (*len set), NULL for a bad id or without a
 * tokenizer.  Valid while the engine lives. */
SF_API const char *sf_engine_token_piece(const sf_engine *e, int id, size_t *len);

/* Sampling, applied in this order to the logits of each step:
 * repetition penalty (on every token of the prompt and the output so far:
 * positive logits divided by it, negative ones multiplied; 1 = off), then
 * temperature 0 means greedy (argmax, the lowest id on ties); else the
 * logits are divided by the temperature, restricted to the top_k largest
 * (0 = all), softmaxed, restricted to the smallest set whose probability
 * reaches top_p (1 = all), and to the tokens with probability >= min_p
 * times the largest (0 = off), and one is drawn with a PRNG per sequence:
 * splitmix64 seeded with seed + the prompt's index (so results do not
 * depend on the batch), a uniform double in [0, 1) from its top 53 bits. */
typedef struct sf_sampling {
    float temperature;        /* default 0: greedy                           */
    int top_k;                /* 0: off                                       */
    float top_p;              /* 1: off                                       */
    float min_p;              /* 0: off                                       */
    float repetition_penalty; /* 1: off                                       */
    uint64_t seed;
    int max_new_tokens;       /* default 64; >= 1                             */
    int ignore_eos;           /* 1: EOS does not end a sequence               */
    const char *const *stop;  /* stop strings (nstop of them): a sequence ends
                                 when its output text contains one            */
    int nstop;
} sf_sampling;

SF_API void sf_sampling_init(sf_sampling *s);

/* ------------------------------------------------------------------ */
/* Embedding lookup and token sampling (the ends of a decode step)      */
/* ------------------------------------------------------------------ */
/*
 * out[i, :] = table[ids[i], :].  table (V, D) f32/f16/bf16 with unit inner
 * stride, ids (n) i32, out (n, D) f32/f16/bf16 (converted, rounded to
 * nearest even).  An id outside [0, V) is SF_ERR_INDEX on a CPU context; on
 * a GPU (ids are not read back) its row of out is zeros.  No workspace
 * (CUDA-graph capturable).
 */
SF_API sf_status sf_embed(sf_ctx *ctx, const sf_tensor *table, const sf_tensor *ids, const sf_tensor *out);

/*
 * One token per row of logits, with the rules of sf_engine_generate (the
 * fields temperature .. repetition_penalty of *s; the rest is ignored):
 * repetition penalty over the tokens marked in seen (a positive logit
 * divided by it, a negative one multiplied), then greedy when temperature
 * is 0 (the largest logit, the lowest id among equals), else logits /
 * temperature, top-k, top-p (the smallest most-likely prefix whose mass
 * reaches top_p), min-p (probability >= min_p times the largest) and one
 * draw u = (splitmix64(state) >> 11) * 2^-53 from the row's RNG state
 * over the kept candidates in descending order.  A setting out of its
 * range is off, as in the engine (temperature <= 0 or NaN: greedy; top_k
 * <= 0; top_p outside (0, 1); min_p <= 0; a penalty <= 0, NaN or without
 * seen).  NaN logits are never candidates (a row of NaN gives token 0);
 * a logit equal to the row's largest has weight 1, even when infinite.
 *   logits (n, V) f32/f16/bf16, unit inner stride
 *   slots  (n) i32 or absent: row i's slot in seen and rng (absent: i)
 *   seen   (S, V) u8 or absent (no penalty): nonzero marks a token of the
 *          slot's history; the call marks each row's sampled token
 *   rng    (S) i64: each slot's splitmix64 state, advanced by one draw per
 *          sampled row, also one without candidates (greedy rows draw
 *          nothing)
 *   tokens (n) i32 output
 * Slots must be distinct within a call.  The reference, CPU and CUDA
 * backends take the same draws: tokens differ only where two candidates'
 * probabilities are within rounding of a boundary (the CPU and CUDA
 * backends add f32 weights in fixed point: about 1e-6 of the row's mass;
 * their tokens do not depend on the thread count).  On a GPU, slots
 * outside [0, S) are clamped (header rule for device index tensors).
 * No workspace (CUDA-graph capturable).
 */
SF_API sf_status sf_sample(sf_ctx *ctx, const sf_tensor *logits, const sf_sampling *s, const sf_tensor *slots,
                           const sf_tensor *seen, const sf_tensor *rng, const sf_tensor *tokens);

/* Why a sequence ended. */
typedef enum sf_finish {
    SF_FINISH_LENGTH = 0,    /* max_new_tokens, or the sequence's max length  */
    SF_FINISH_EOS = 1,
    SF_FINISH_STOP = 2,      /* a stop string                                  */
    SF_FINISH_CALLBACK = 3   /* the callback asked                             */
} sf_finish;

/* Called once per generated token of prompt `seq` (its index in the call),
 * in generation order: the token, and the logits it was sampled from
 * (vocab floats, host memory, before the penalty and temperature; valid
 * during the call).  Nonzero ends that sequence (SF_FINISH_CALLBACK). */
typedef int (*sf_token_fn)(void *user, int seq, int32_t token, const float *logits, int vocab);

/* Per prompt: the input ids and where the output goes. */
typedef struct sf_generation {
    const int32_t *prompt;    /* ids, each in [0, vocab)                      */
    int64_t prompt_len;       /* >= 1                                          */
    int32_t *tokens;          /* output: room for max_new_tokens ids (may be
                                 NULL: then only the callback sees them)       */
    int64_t ntokens;          /* output: tokens generated                      */
    sf_finish finish;         /* output                                        */
} sf_generation;

/* Timings of the last sf_engine_generate call. */
typedef struct sf_engine_stats {
    int64_t prompt_tokens, generated_tokens;
    int64_t prefill_steps, decode_steps;
    double prefill_ms, decode_ms;   /* wall time in the model's forward passes
                                       and sampling, per phase                */
    int max_live;                   /* most sequences decoding together       */
} sf_engine_stats;

/* Generates for n prompts (see above).  A prompt longer than max_seq_len - 1
 * tokens is SF_ERR_INVALID_ARG (nothing run); cb may be NULL; stats may be
 * NULL. */
SF_API sf_status sf_engine_generate(sf_engine *e, sf_generation *gens, int n, const sf_sampling *s,
                                    sf_token_fn cb, void *user, sf_engine_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* SEQFUSE_H */
