/* internal.h - what the backends share: the context, error recording,
 * workspace, element access and the validated problem of each op.
 * Not installed; include only from src/. */
#ifndef SF_INTERNAL_H
#define SF_INTERNAL_H

#include "seqfuse.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SF_ERRMSG_LEN 512

/* A growable block of memory on the context's device (host memory for a
 * CPU context, device memory for a CUDA one). */
typedef struct sf_arena {
    void *base;
    size_t size;
    size_t peak;
    int captured;        /* base was handed to a call being captured into a
                            CUDA graph: the graph keeps its address, so a
                            later growth retires it instead of freeing it  */
    void **retired;      /* such blocks, freed with the context            */
    int nretired;
} sf_arena;

struct sf_ctx {
    int device;
    int nthreads;
    sf_backend backend;
    sf_backend last_backend;
    void *stream;        /* cudaStream_t */
    sf_arena ws;         /* device-side workspace (host for CPU contexts)   */
    sf_arena host;       /* host scratch (segment lists, staging)           */
    void *cuda_state;    /* owned by src/cuda (device properties, handles)  */
    struct sf_tune_table *tune; /* autotuner choices (src/core/autotune.c) */
    long fail_alloc_in;  /* fault injection (tests): the n-th allocation fails */
    /* CUDA graph capture (src/core/graph.c): graph_active 1 between sf_graph_begin
     * and sf_graph_end, 2 once a captured call's failure stands; sf_fail records
     * the failure (status and sentence), which sf_graph_end reports */
    int graph_active;
    sf_status graph_status;
    char graph_err[SF_ERRMSG_LEN];
    char err[SF_ERRMSG_LEN];
};

/* Records a printf-style detail on the context and returns `s`. */
sf_status sf_fail(sf_ctx *ctx, sf_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The context's workspace, grown to at least `bytes` (0 is fine: returns
 * the current base or NULL).  Records the peak.  NULL with an error set on
 * the context when the allocation fails. */
void *sf_ws_get(sf_ctx *ctx, size_t bytes);
/* Fault injection for tests (not exported): the n-th allocation the
 * context makes from now on fails as if memory were exhausted; 0 = off. */
void sf_ctx_debug_fail_alloc(sf_ctx *ctx, long n);
/* Counts down the injected failure: 1 when this allocation must fail. */
static inline int sf_alloc_should_fail(sf_ctx *ctx) {
    return ctx->fail_alloc_in > 0 && --ctx->fail_alloc_in == 0;
}

/* Host scratch, same contract; always host memory.  The op front ends keep
 * the problem's host tables (the SSD segment list) here: backends must not
 * call it. */
void *sf_host_scratch(sf_ctx *ctx, size_t bytes);

/* ------------------------------------------------------------------ */
/* f16 / bf16 conversion (round to nearest even), element access        */
/* ------------------------------------------------------------------ */

static inline float sf_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t sf_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) /* rounds past the largest half */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) { /* subnormal half or zero */
        if (absx < 0x33000000u) return (uint16_t)sign;
        uint32_t e = absx >> 23;
        uint32_t man = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14 .. 24 */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u); /* round to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float sf_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t sf_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* Element `off` (in elements) of a float tensor's data, as float. */
static inline float sf_ldf(const void *data, sf_dtype dt, int64_t off) {
    switch (dt) {
    case SF_F32: return ((const float *)data)[off];
    case SF_F16: return sf_f16_to_f32(((const uint16_t *)data)[off]);
    case SF_BF16: return sf_bf16_to_f32(((const uint16_t *)data)[off]);
    case SF_I32: return (float)((const int32_t *)data)[off];
    case SF_I64: return (float)((const int64_t *)data)[off];
    case SF_U8: return (float)((const uint8_t *)data)[off];
    case SF_I8: return (float)((const int8_t *)data)[off];
    case SF_F8E4M3: return sf_e4m3_to_f32(((const uint8_t *)data)[off]); /* the code, unscaled */
    }
    return NAN;
}

static inline void sf_stf(void *data, sf_dtype dt, int64_t off, float v) {
    switch (dt) {
    case SF_F32: ((float *)data)[off] = v; break;
    case SF_F16: ((uint16_t *)data)[off] = sf_f32_to_f16(v); break;
    case SF_BF16: ((uint16_t *)data)[off] = sf_f32_to_bf16(v); break;
    default: break;
    }
}

/* Integer element of an i32 or i64 tensor. */
static inline int64_t sf_ldi(const void *data, sf_dtype dt, int64_t off) {
    return dt == SF_I64 ? ((const int64_t *)data)[off] : ((const int32_t *)data)[off];
}

/* Offset of an index tuple (up to 4 dims used here). */
static inline int64_t sf_off2(const sf_tensor *t, int64_t i0, int64_t i1) {
    return i0 * t->stride[0] + i1 * t->stride[1];
}
static inline int64_t sf_off3(const sf_tensor *t, int64_t i0, int64_t i1, int64_t i2) {
    return i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2];
}
static inline int64_t sf_off4(const sf_tensor *t, int64_t i0, int64_t i1, int64_t i2,
                              int64_t i3) {
    return i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3 * t->stride[3];
}

static inline float sf_softplus(float x) {
    /* the threshold of torch.nn.functional.softplus (beta 1, threshold 20) */
    return x > 20.0f ? x : log1pf(expf(x));
}

static inline float sf_silu(float x) { return x / (1.0f + expf(-x)); }

/* The processed dt of sf_ssd_fwd / sf_ssd_step: + bias, softplus (when
 * asked, torch's threshold: x > 20 passes through), clamped to [dmin,
 * dmax].  The clamp is always applied, as mamba_ssm's chunk_cumsum does
 * (with the default limits it only maps a negative dt to 0); comparisons
 * rather than fmin/fmax, so a NaN input stays NaN and shows up in tests.
 * f32 for the fast backends, double for the references. */
static inline float sf_dt_process(float d, float bias, int softplus, float dmin, float dmax) {
    d += bias;
    if (softplus) d = sf_softplus(d);
    if (d < dmin) d = dmin;
    if (d > dmax) d = dmax;
    return d;
}

static inline double sf_dt_process_d(double d, double bias, int softplus, double dmin,
                                     double dmax) {
    d += bias;
    if (softplus) d = d > 20.0 ? d : log1p(exp(d));
    if (d < dmin) d = dmin;
    if (d > dmax) d = dmax;
    return d;
}

/* ------------------------------------------------------------------ */
/* Validated problems: built by src/core, read by every backend         */
/* ------------------------------------------------------------------ */

/* A run of tokens of one batch row through which the SSD state flows. */
typedef struct sf_ssd_segment {
    int64_t b;          /* batch row                                    */
    int64_t start, end; /* token range [start, end) within the row      */
    int64_t init;       /* row of initial_states to start from, -1: zero */
    int64_t final;      /* row of final_states to write, -1: none       */
} sf_ssd_segment;

typedef struct sf_ssd_problem {
    const sf_ssd_fwd_params *p;
    int64_t batch, seqlen, nheads, headdim, ngroups, dstate;
    int64_t heads_per_group;       /* H / G                           */
    int has_D, D_per_channel;      /* D given; D shaped (H, P)         */
    int has_z, has_dt_bias, has_init, has_final;
    int varlen;                    /* 0 none, 1 seq_idx, 2 cu_seqlens  */
    int64_t nseq;                  /* sequences (cu_seqlens) or batch   */
    int chunk;
    /* 1: only the final states (the context-parallel driver's first pass:
     * the output is neither read nor written); CUDA only, see
     * sf_ssd_states_only */
    int states_only;
    /* Host-side segment list; filled only for host (CPU) tensors. */
    const sf_ssd_segment *seg;
    int64_t nseg;
} sf_ssd_problem;

typedef struct sf_ssd_step_problem {
    const sf_ssd_step_params *p;
    int64_t batch, nheads, headdim, ngroups, dstate, nslots;
    int64_t heads_per_group;
    int has_D, D_per_channel, has_z, has_dt_bias, has_idx;
} sf_ssd_step_problem;

typedef struct sf_attn_problem {
    const sf_attn_fwd_params *p;
    int64_t batch, nheads, nheads_kv, headdim;
    int64_t max_lq, max_lk;        /* dense: Lq, Lk; varlen: maxima (host) */
    int varlen;
    int has_lse;
    float scale;
    int64_t wl, wr;                /* -1 unbounded; causal folded into wr = 0 */
    float softcap;                 /* 0: off                                  */
    const float *alibi;            /* slopes, NULL: off; slope of (b, h) at   */
    int64_t alibi_sb, alibi_sh;    /* alibi[b * alibi_sb + h * alibi_sh]      */
} sf_attn_problem;

/* The score modifiers after s = scale * q.k (sf_attn_fwd_params):
 * softcap, then the ALiBi bias of query row i and key j. */
static inline double sf_attn_score_mod(const sf_attn_problem *pr, double s, double slope,
                                       int64_t i, int64_t j, int64_t lq, int64_t lk) {
    if (pr->softcap > 0.0f) s = (double)pr->softcap * tanh(s / (double)pr->softcap);
    if (pr->alibi) {
        const int64_t dist = i + lk - lq - j;
        s -= slope * (double)(dist < 0 ? -dist : dist);
    }
    return s;
}

/* Query/key ranges of batch entry b: rows [*q0, *q0 + *lq) of q (varlen)
 * or of q[b] (dense, then *q0 = 0).  Host tensors only. */
static inline void sf_attn_seq(const sf_attn_problem *pr, int64_t b, int64_t *q0,
                               int64_t *lq, int64_t *k0, int64_t *lk) {
    if (pr->varlen) {
        const sf_tensor *cq = &pr->p->cu_seqlens_q, *ck = &pr->p->cu_seqlens_k;
        *q0 = sf_ldi(cq->data, cq->dtype, b * cq->stride[0]);
        *lq = sf_ldi(cq->data, cq->dtype, (b + 1) * cq->stride[0]) - *q0;
        *k0 = sf_ldi(ck->data, ck->dtype, b * ck->stride[0]);
        *lk = sf_ldi(ck->data, ck->dtype, (b + 1) * ck->stride[0]) - *k0;
    } else {
        *q0 = 0;
        *lq = pr->max_lq;
        *k0 = 0;
        *lk = pr->max_lk;
    }
}

/* Visible key range [*lo, *hi) of query row i (0-based) for a sequence of
 * lq queries and lk keys; empty when *lo >= *hi. */
static inline void sf_attn_key_range(const sf_attn_problem *pr, int64_t i, int64_t lq,
                                     int64_t lk, int64_t *lo, int64_t *hi) {
    int64_t pos = i + lk - lq;
    int64_t a = pr->wl < 0 ? 0 : pos - pr->wl;
    int64_t b = pr->wr < 0 ? lk : pos + pr->wr + 1;
    if (a < 0) a = 0;
    if (b > lk) b = lk;
    *lo = a;
    *hi = b;
}

/* A validated paged-cache call (sf_kv_append or sf_attn_paged; the other
 * pointer is NULL).  Attention: lq = Lq; append: lq = Lnew. */
/* A rotary definition validated by sf_rope_check (src/core/fused_ops.c):
 * sf_rope's, and sf_kv_append's rope.  p NULL: no rotation. */
typedef struct sf_rope_spec {
    const sf_rope_params *p;
    int64_t R;                     /* rotary dim: even, 2..d                  */
    int gptj, has_tab;
    int64_t npos;                  /* rows of cos and sin (tables)            */
} sf_rope_spec;

typedef struct sf_paged_problem {
    const sf_attn_paged_params *p;
    const sf_kv_append_params *a;
    sf_rope_spec rope;             /* append: K's rotation (rope.p NULL: none) */
    int64_t batch, nheads, nheads_kv, headdim, lq;
    int64_t num_pages, page_size, max_pages;
    int has_lse;
    float scale;                   /* attention: resolved softmax scale       */
    int64_t wl, wr;                /* -1 unbounded; causal folded into wr = 0 */
    float softcap;                 /* 0: off                                  */
    int fp8;                       /* pools SF_F8E4M3, scales in k/v_scale    */
    int scale_per_head;            /* fp8: scales (Hkv), else per (token, head) */
    const float *alibi;            /* attention: slopes, NULL: off; slope of  */
    int64_t alibi_sb, alibi_sh;    /* (b, h) at alibi[b * sb + h * sh]        */
} sf_paged_problem;

/* FP8 pools: the scale of row (page, row, head) of a pool, from its
 * per-head or per-(token, head) scale tensor. */
static inline float sf_paged_scale(const sf_paged_problem *pr, const sf_tensor *s, int64_t page,
                                   int64_t row, int64_t h) {
    const float *d = (const float *)s->data;
    return pr->scale_per_head ? d[h * s->stride[0]] : d[sf_off3(s, page, row, h)];
}

/* Backend entry points.  Each receives a validated problem. */
sf_status sf_ref_ssd_fwd(sf_ctx *ctx, const sf_ssd_problem *pr);
sf_status sf_ref_ssd_step(sf_ctx *ctx, const sf_ssd_step_problem *pr);
sf_status sf_ref_attn_fwd(sf_ctx *ctx, const sf_attn_problem *pr);

sf_status sf_cpu_ssd_fwd(sf_ctx *ctx, const sf_ssd_problem *pr);
sf_status sf_cpu_ssd_step(sf_ctx *ctx, const sf_ssd_step_problem *pr);
sf_status sf_cpu_attn_fwd(sf_ctx *ctx, const sf_attn_problem *pr);
sf_status sf_ref_kv_append(sf_ctx *ctx, const sf_paged_problem *pr);
sf_status sf_ref_attn_paged(sf_ctx *ctx, const sf_paged_problem *pr);
sf_status sf_cpu_kv_append(sf_ctx *ctx, const sf_paged_problem *pr);
sf_status sf_cpu_attn_paged(sf_ctx *ctx, const sf_paged_problem *pr);

/* CUDA backend (src/cuda); in a build without CUDA these come from
 * src/core/nocuda.c and answer SF_ERR_UNSUPPORTED. */
sf_status sf_cuda_ssd_fwd(sf_ctx *ctx, const sf_ssd_problem *pr);
/* sf_ssd_fwd's checks, then only final_states (required) written, from the
 * chunk states and their scan: the output is not touched.  The CUDA
 * backend's split state path serves it (dense batch, chunk 128 or 256,
 * dstate a multiple of 4); SF_ERR_UNSUPPORTED otherwise, before any launch. */
sf_status sf_ssd_states_only(sf_ctx *ctx, const sf_ssd_fwd_params *p);
sf_status sf_cuda_ssd_step(sf_ctx *ctx, const sf_ssd_step_problem *pr);
sf_status sf_cuda_attn_fwd(sf_ctx *ctx, const sf_attn_problem *pr);
sf_status sf_cuda_kv_append(sf_ctx *ctx, const sf_paged_problem *pr);
sf_status sf_cuda_attn_paged(sf_ctx *ctx, const sf_paged_problem *pr);
/* Device plumbing used by src/core/ctx.c. */
int sf_cuda_count(void);
sf_status sf_cuda_ctx_init(sf_ctx *ctx);
void sf_cuda_ctx_free(sf_ctx *ctx);
sf_status sf_cuda_alloc(sf_ctx *ctx, void **p, size_t bytes);
void sf_cuda_free(sf_ctx *ctx, void *p);
/* Whether the context's stream is being captured into a CUDA graph (0
 * without CUDA).  Nothing may allocate, free or synchronise then. */
int sf_cuda_stream_capturing(sf_ctx *ctx);
sf_status sf_cuda_name(int device, char *buf, size_t len);
sf_status sf_cuda_memcpy(sf_ctx *ctx, void *dst, const void *src, size_t bytes);
sf_status sf_cuda_sync(sf_ctx *ctx);
/* Makes the context's device current for the calling thread. */
sf_status sf_cuda_activate(sf_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
