/* attn_cpu.c - FlashAttention forward on the CPU: tiled, online softmax,
 * O(N) memory, OpenMP over (batch, head, query tile of BR = 128 rows),
 * heaviest (latest) tiles first, dynamic schedule.
 *
 * One task keeps, in a per-thread slab of the workspace:
 *   Qt  (d x 128)    the query tile transposed, pre-scaled by scale*log2(e)
 *                    so the softmax runs on exp2;
 *   St  (64 x 144)   scores of one key tile TRANSPOSED: row j = key j,
 *                    column i = query i.  S^T = K Q^T lets the micro-kernel
 *                    broadcast K straight from the tensor (f32 K is never
 *                    copied) against vector loads of Q^T rows, and the
 *                    online softmax then runs down the columns: every max
 *                    and sum is a vertical vector op, no horizontal
 *                    reductions;
 *   Vp  (64 x Dp)    the key tile's V, converted to f32 and padded to 16
 *                    (always packed: in place, rows H*d apart alias in L1;
 *                    measured 5-10% slower);
 *   O   (132 x Dp)   the f32 output accumulator, rescaled by alpha inside
 *                    the P V kernel.
 * Key tiles outside the causal/window band are never visited; in tiles the
 * band cuts, S^T blocks and P V rows that no query sees are skipped and the
 * rest is masked element-wise.  f16/bf16 are converted tile by tile.
 *
 * The task is written once with GCC vector extensions in attn_cpu_tile.h
 * and instantiated per ISA with its own vector width and register blocking
 * (S^T block keys x queries, P V block queries x dims):
 *   AVX-512 (16 floats): 6 x 64 and 6 x 64, 24 zmm accumulators, FMAs
 *                        with embedded broadcasts;
 *   AVX2+FMA (8 floats): 6 x 16 and 6 x 16, 12 ymm accumulators;
 *   generic  (4 floats): 4 x 8 and 4 x 8 (SSE2 baseline, or whatever the
 *                        build targets; also non-x86).
 * Dispatch by __builtin_cpu_supports once per call; SF_CPU_ISA=avx2 or
 * generic in the environment caps it (for tests and benchmarks).
 *
 * Measured on the 2-core dev VM (Xeon, AVX-512, ~2.3 GHz), f32 b 1 H 8
 * L 2048 d 64, 64-byte aligned tensors, GFLOP/s counting 4 b H L^2 d (/2
 * causal): 1 thread causal 108, full 118; 2 threads causal 170-190, i.e.
 * 65-78% of OpenBLAS sgemm (SkylakeX kernels) in the same run.  AVX2 path
 * on the same CPU: 55, generic (SSE2): 20.  Tried: BR 64 (-8% non-causal,
 * K/V read twice as often from L3), BC 32/48/96/128 (within noise), V in
 * place (-5-10%), prefetch of the next key tile into L1 (-3%) or none
 * (-5%).
 */
#include "internal.h"

#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if !defined(__GNUC__)
#error "attn_cpu.c needs GCC or Clang vector extensions"
#endif

#define BR 128   /* queries per task                                       */
#define BC 64    /* keys per tile                                          */
#define QLD 128  /* row stride of Qt                                       */
#define SLD 144  /* row stride of St: 132 padded query columns, rounded up */
#define OROWS 132 /* O rows: BR rounded up to the PV block (6)             */

#define SF_AI static inline __attribute__((always_inline))
#define SF_UNROLL _Pragma("GCC unroll 16")

/* GCC keeps fp-contract off under -std=c11; the kernels need their a*b+c
 * fused (half the instructions).  Clang contracts within an expression by
 * default and has no optimize attribute. */
#if defined(__clang__)
#define SF_FMA_ATTR
#else
#define SF_FMA_ATTR __attribute__((optimize("fp-contract=fast")))
#endif

#if (defined(__x86_64__) || defined(__i386__))
#define SF_X86 1
#else
#define SF_X86 0
#endif

/* Where a tensor's rows live: element (seq row r, head h, dim c) is at
 * base + r * ts + h * hs + c, base = b * bs (dense) or seq_start * ts
 * (varlen, r then counted from the sequence start). */
typedef struct tstrides {
    int64_t bs, ts, hs;
} tstrides;

typedef struct attn_plan {
    const sf_attn_problem *pr;
    sf_dtype dt;
    int d, dp;             /* head dim, padded to 16 for packed V / O   */
    int kdirect;           /* read K in place (f32)                     */
    int64_t group;         /* query heads per kv head                   */
    int64_t esz;           /* bytes per element of q/k/v/out            */
    int row_bytes;         /* bytes of one head row (d elements)        */
    float scale2;          /* scale * log2(e)                           */
    int score_mod;         /* softcap or ALiBi: score_mod() per tile    */
    const void *q, *k, *v;
    void *o;
    float *lse;
    tstrides sq, sk, sv, so;
    int64_t lse_b, lse_h, lse_t; /* dense (b, H, Lq) or varlen (H, T)   */
    /* per-thread slab layout, in floats */
    size_t off_qt, off_st, off_o, off_kp, off_vp, off_m, off_l, off_al, off_tmp, per_thread;
} attn_plan;

SF_AI int64_t seq_base(const tstrides *s, int varlen, int64_t b, int64_t start) {
    return varlen ? start * s->ts : b * s->bs;
}

/* Vector helpers for the tile code, on its current VF / VI types.  They
 * are macros (or take vectors by pointer) because a 64-byte vector passed
 * by value outside an AVX-512 function draws -Wpsabi ABI warnings from GCC
 * and Clang even when every call is inlined.  Loads and stores go through
 * the may_alias, 4-byte-aligned VF type rather than memcpy: GCC expands a
 * 32-byte memcpy in the AVX2 instance as two 16-byte moves through the
 * stack (a store-forwarding stall per vector; measured 2x slower). */
#define VLD(p) (*(const VF *)(const void *)(p))
#define VST(p, v) (*(VF *)(void *)(p) = (v))
#define VSET(x) ((VF){0} + (x))
#define VSEL(m, a, b) ((VF)(((VI)(a) & (m)) | ((VI)(b) & ~(m))))
#define VMAX(a, b)                   \
    __extension__({                  \
        const VF a_ = (a), b_ = (b); \
        VSEL(a_ > b_, a_, b_);       \
    })

typedef void (*task_fn)(const attn_plan *, float *, int64_t, int64_t, int64_t);

/* Softcap and ALiBi on the S^T tile (key rows j < bc, query columns i <
 * nq), in the tile's log2 units: s = c tanh(s / c) with c = softcap log2(e),
 * then s -= slope log2(e) |i + lk - lq - j|.  Before the mask, which then
 * overwrites whatever the modifiers made of keys a row does not see.
 * Scalar: the modifiers are not on the CPU's fast path. */
static void score_mod(const attn_plan *pl, float *St, int64_t b, int64_t h, int64_t i0,
                      int64_t kt, int nq, int bc, int64_t lq, int64_t lk) {
    const sf_attn_problem *pr = pl->pr;
    const float c = pr->softcap * 1.4426950408889634f;
    const float slope = pr->alibi ? pr->alibi[b * pr->alibi_sb + h * pr->alibi_sh] * 1.4426950408889634f
                                  : 0.0f;
    for (int j = 0; j < bc; j++) {
        float *row = St + (int64_t)j * SLD;
        for (int i = 0; i < nq; i++) {
            float v = row[i];
            if (c > 0.0f) v = c * tanhf(v / c);
            if (pr->alibi) {
                const int64_t dist = i0 + i + lk - lq - (kt + j);
                v -= slope * (float)(dist < 0 ? -dist : dist);
            }
            row[i] = v;
        }
    }
}

/* The instances (see the header comment for the blocking). */
#if SF_X86
#define SF_T_SFX avx512
#define SF_T_W 16
#define SF_T_ATTR __attribute__((target("avx512f,avx2,fma")))
#define SF_T_MRS 6
#define SF_T_NVS 4
#define SF_T_MRP 6
#define SF_T_NVP 4
#include "attn_cpu_tile.h"
#undef SF_T_SFX
#undef SF_T_W
#undef SF_T_ATTR
#undef SF_T_MRS
#undef SF_T_NVS
#undef SF_T_MRP
#undef SF_T_NVP

#define SF_T_SFX avx2
#define SF_T_W 8
#define SF_T_ATTR __attribute__((target("avx2,fma,tune=haswell")))
#define SF_T_MRS 6
#define SF_T_NVS 2
#define SF_T_MRP 6
#define SF_T_NVP 2
#include "attn_cpu_tile.h"
#undef SF_T_SFX
#undef SF_T_W
#undef SF_T_ATTR
#undef SF_T_MRS
#undef SF_T_NVS
#undef SF_T_MRP
#undef SF_T_NVP
#endif

#define SF_T_SFX generic
#define SF_T_W 4
#define SF_T_ATTR
#define SF_T_MRS 4
#define SF_T_NVS 2
#define SF_T_MRP 4
#define SF_T_NVP 2
#include "attn_cpu_tile.h"
#undef SF_T_SFX
#undef SF_T_W
#undef SF_T_ATTR
#undef SF_T_MRS
#undef SF_T_NVS
#undef SF_T_MRP
#undef SF_T_NVP

static task_fn pick_task(void) {
    const char *cap = getenv("SF_CPU_ISA");
    int lim = 2; /* 2 avx512, 1 avx2, 0 generic */
    if (cap && strcmp(cap, "avx2") == 0) lim = 1;
    if (cap && strcmp(cap, "generic") == 0) lim = 0;
#if SF_X86
    if (lim >= 2 && __builtin_cpu_supports("avx512f")) return attn_task_avx512;
    if (lim >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return attn_task_avx2;
#else
    (void)lim;
#endif
    return attn_task_generic;
}

/* ------------------------------------------------------------------ */
/* Entry point                                                         */
/* ------------------------------------------------------------------ */

static tstrides strides_of(const sf_tensor *t, int varlen) {
    tstrides s;
    if (varlen) {
        s.bs = 0;
        s.ts = t->stride[0];
        s.hs = t->stride[1];
    } else {
        s.bs = t->stride[0];
        s.ts = t->stride[1];
        s.hs = t->stride[2];
    }
    return s;
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

sf_status sf_cpu_attn_fwd(sf_ctx *ctx, const sf_attn_problem *pr) {
    const sf_attn_fwd_params *p = pr->p;
    const int64_t B = pr->batch, H = pr->nheads;
    if (B <= 0 || H <= 0 || pr->headdim <= 0) return SF_OK;
    if (pr->headdim > 256)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "attention cpu: head dim %lld > 256",
                       (long long)pr->headdim);

    attn_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.pr = pr;
    pl.dt = p->q.dtype;
    pl.d = (int)pr->headdim;
    pl.dp = (pl.d + 15) / 16 * 16;
    pl.esz = (int64_t)sf_dtype_size(pl.dt);
    pl.row_bytes = (int)(pl.d * pl.esz);
    pl.kdirect = pl.dt == SF_F32;
    pl.group = pr->nheads_kv > 0 ? H / pr->nheads_kv : 1;
    pl.scale2 = pr->scale * 1.4426950408889634f;
    pl.score_mod = pr->softcap > 0.0f || pr->alibi != NULL;
    pl.q = p->q.data;
    pl.k = p->k.data;
    pl.v = p->v.data;
    pl.o = p->out.data;
    pl.lse = pr->has_lse ? (float *)p->lse.data : NULL;
    pl.sq = strides_of(&p->q, pr->varlen);
    pl.sk = strides_of(&p->k, pr->varlen);
    pl.sv = strides_of(&p->v, pr->varlen);
    pl.so = strides_of(&p->out, pr->varlen);
    if (pl.lse) {
        if (pr->varlen) {
            pl.lse_h = p->lse.stride[0];
            pl.lse_t = p->lse.stride[1];
        } else {
            pl.lse_b = p->lse.stride[0];
            pl.lse_h = p->lse.stride[1];
            pl.lse_t = p->lse.stride[2];
        }
    }

    /* Per-thread slab, every piece 64-byte aligned (in floats: 16). */
    size_t off = 0;
    const size_t dp = (size_t)pl.dp;
    pl.off_qt = off; off += round16((size_t)pl.d * QLD);
    pl.off_st = off; off += round16((size_t)BC * SLD);
    pl.off_o = off; off += round16((size_t)OROWS * dp);
    pl.off_kp = off; off += pl.kdirect ? 0 : round16((size_t)BC * dp);
    pl.off_vp = off; off += round16((size_t)BC * dp);
    pl.off_m = off; off += SLD;
    pl.off_l = off; off += SLD;
    pl.off_al = off; off += SLD;
    pl.off_tmp = off; off += round16(dp);
    pl.per_thread = off;

    int nth = ctx->nthreads > 0 ? ctx->nthreads : 1;
    /* Tasks: dense = B * H * ntiles; varlen numbers the query tiles of
     * all sequences through a prefix array (in the same workspace). */
    const size_t nprefix = pr->varlen ? (size_t)B + 1 : 0;
    const size_t bytes = 64 + (size_t)nth * pl.per_thread * sizeof(float) + nprefix * sizeof(int64_t);
    char *raw = (char *)sf_ws_get(ctx, bytes);
    if (!raw) return SF_ERR_OUT_OF_MEMORY; /* the arena set the detail */
    float *slabs = (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    int64_t *prefix = (int64_t *)(slabs + (size_t)nth * pl.per_thread);

    int64_t ntiles_all; /* dense: tiles per entry; varlen: all tiles */
    if (pr->varlen) {
        prefix[0] = 0;
        for (int64_t b = 0; b < B; b++) {
            int64_t q0, lq, k0, lk;
            sf_attn_seq(pr, b, &q0, &lq, &k0, &lk);
            prefix[b + 1] = prefix[b] + (lq + BR - 1) / BR;
        }
        ntiles_all = prefix[B];
    } else {
        ntiles_all = (pr->max_lq + BR - 1) / BR;
    }
    const int64_t ntasks = pr->varlen ? ntiles_all * H : ntiles_all * B * H;
    if (ntasks == 0) return SF_OK;
    if ((int64_t)nth > ntasks) nth = (int)ntasks;
    const task_fn fn = pick_task();

#ifdef _OPENMP
#pragma omp parallel num_threads(nth)
#endif
    {
#ifdef _OPENMP
        float *ws = slabs + (size_t)omp_get_thread_num() * pl.per_thread;
#else
        float *ws = slabs;
#endif
        /* Heaviest tiles first (the last query tiles see the most keys
         * under a causal mask), so the dynamic schedule ends balanced. */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t t = 0; t < ntasks; t++) {
            int64_t b, h, tile;
            if (pr->varlen) {
                const int64_t g = ntiles_all - 1 - t % ntiles_all; /* last first */
                h = t / ntiles_all;
                int64_t lo = 0, hi = B; /* prefix[lo] <= g < prefix[hi] */
                while (hi - lo > 1) {
                    const int64_t mid = (lo + hi) / 2;
                    if (prefix[mid] <= g) lo = mid; else hi = mid;
                }
                b = lo;
                tile = g - prefix[b];
            } else {
                const int64_t bh = t / ntiles_all;
                tile = ntiles_all - 1 - t % ntiles_all;
                b = bh / H;
                h = bh % H;
            }
            fn(&pl, ws, b, h, tile);
        }
    }
    return SF_OK;
}
