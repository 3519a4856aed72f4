/* sample.cu - CUDA sf_sample: one thread block per row of logits.
 *
 * Greedy (the hot path of a benchmark's decode step): one pass, each thread
 * keeping the largest 64-bit order key of its elements (sf_smp_key: the
 * value's order-preserving image, then the complement of the id, so the
 * maximum is the largest value with the lowest id), then a block maximum;
 * on sm_90 a row is split over a cluster of blocks whose maxima meet in
 * distributed shared memory.
 *
 * Sampling never sorts the vocabulary and keeps nothing per element (the
 * call has no workspace): the cuts of the reference (top-k, the top-p
 * prefix, the min-p count, the draw) are each the first position of the
 * candidate order where a prefix count or mass passes a target, found as
 * in src/cpu/sample_cpu.c:
 *   pass 1   the row's largest value and its candidate count (and the draw
 *            from the slot's RNG state);
 *   pass 2   a histogram in shared memory: SF_SMP_BINS bins of 1/32 in
 *            v - max, with counts and the fixed-point masses of
 *            sf_smp_mass (integers: every pass and every thread order adds
 *            to the same sums, so tokens are deterministic), and the min-p
 *            count;
 *   search   a block scan of the bins finds the bin of the position; while
 *            it holds more than CAP elements, passes split it by 11 bits of
 *            the order key; one last pass gathers its <= CAP elements into
 *            shared memory, a bitonic sort orders them, a block scan finds
 *            the position.
 * A top-p call is four passes over the row when the bins stay under CAP
 * (the usual case: a bin is 3 % of a weight). */
#include "autotune.h"
#include "common/cuda_common.h"
#include "common/launch.cuh"
#include "sample_ops.h"

#include <cooperative_groups.h>
#include <string.h>

#define NT 1024        /* threads per row                         */
#define CAP 2048       /* elements a search sorts in shared memory */
#define SUB 2048       /* sub-bins of a refinement level (11 bits) */
#define SMEM_BYTES (SF_SMP_BINS * 12 + CAP * 16)

enum { BY_RANK, BY_MASS_GT, BY_MASS_GE };

struct sample_args {
    const void *logits;
    const int32_t *slots;
    uint8_t *seen;
    int64_t *rng;
    int32_t *tokens;
    int64_t ls, sls, ses, rs, ts; /* strides (elements) */
    int64_t V, S;
    int penalize, greedy;
    float penalty, temperature, top_p, min_p;
    int64_t top_k;
};

/* The processed values of one row, visited by the block's threads. */
template <typename T> struct row_src {
    const T *x;
    const uint8_t *mark;
    int64_t V;
    bool vec;
    const sample_args *a;

    /* f(j, v) for every candidate (non-NaN processed value) this thread
     * owns: 16-byte vectors of logits (and the matching seen bytes), four
     * in flight per thread, when the row is aligned; else elements. */
    template <typename F> __device__ __forceinline__ void each(F &&f) const {
        constexpr int P = 16 / (int)sizeof(T);
        if (vec) {
            const int64_t nv = V / P;
            for (int64_t q0 = threadIdx.x; q0 < nv; q0 += 4 * NT) {
                uint4 raw[4];
#pragma unroll
                for (int u = 0; u < 4; u++)
                    if (q0 + u * NT < nv) raw[u] = __ldg((const uint4 *)x + q0 + u * NT);
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const int64_t q = q0 + u * NT;
                    if (q >= nv) break;
                    const T *e = (const T *)&raw[u];
#pragma unroll
                    for (int k = 0; k < P; k++) {
                        const int64_t j = q * P + k;
                        const int m = mark ? mark[j] : 0;
                        const float v = sf_smp_value(sf_elem<T>::to_f(e[k]), m, a->penalize, a->penalty, a->greedy,
                                                     a->temperature);
                        if (!isnan(v)) f(j, v);
                    }
                }
            }
        } else {
            for (int64_t j = threadIdx.x; j < V; j += NT) {
                const int m = mark ? mark[j] : 0;
                const float v =
                    sf_smp_value(sf_elem<T>::to_f(x[j]), m, a->penalize, a->penalty, a->greedy, a->temperature);
                if (!isnan(v)) f(j, v);
            }
        }
    }
};

template <typename T> __device__ __forceinline__ row_src<T> make_row(const sample_args &a, int64_t i, int64_t slot) {
    row_src<T> r;
    r.x = (const T *)a.logits + i * a.ls;
    r.mark = a.penalize ? a.seen + slot * a.ses : nullptr;
    r.V = a.V;
    r.a = &a;
    r.vec = ((uintptr_t)r.x % 16) == 0 && a.V % (16 / (int)sizeof(T)) == 0;
    return r;
}

/* The row's slot: slots[i] clamped into [0, S) (device index rule), or i. */
__device__ __forceinline__ int64_t row_slot(const sample_args &a, int64_t i) {
    int64_t s = a.slots ? (int64_t)a.slots[i * a.sls] : i;
    return s < 0 ? 0 : s >= a.S ? a.S - 1 : s;
}

/* ---- block reductions and scans (NT threads) ---- */

struct red_smem {
    unsigned long long u[32], w[32];
    float f[32];
};

__device__ __forceinline__ unsigned long long block_max_u64(unsigned long long v, red_smem &r) {
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long t = __shfl_xor_sync(0xffffffffu, v, o);
        v = t > v ? t : v;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) r.u[threadIdx.x >> 5] = v;
    __syncthreads();
    v = r.u[0];
    for (int k = 1; k < NT / 32; k++) v = r.u[k] > v ? r.u[k] : v;
    return v;
}

__device__ __forceinline__ unsigned long long block_min_u64(unsigned long long v, red_smem &r) {
    return ~block_max_u64(~v, r);
}

__device__ __forceinline__ unsigned long long block_sum_u64(unsigned long long v, red_smem &r) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) r.u[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0;
    for (int k = 0; k < NT / 32; k++) v += r.u[k];
    return v;
}

__device__ __forceinline__ float block_max_f(float v, red_smem &r) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) r.f[threadIdx.x >> 5] = v;
    __syncthreads();
    v = r.f[0];
    for (int k = 1; k < NT / 32; k++) v = fmaxf(v, r.f[k]);
    return v;
}

/* Exclusive prefix sums of (c, m) over the block's threads, in thread order. */
__device__ __forceinline__ void block_scan2(unsigned long long c, unsigned long long m, unsigned long long &ce,
                                            unsigned long long &me, red_smem &r) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    unsigned long long ci = c, mi = m;
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long tc = __shfl_up_sync(0xffffffffu, ci, o), tm = __shfl_up_sync(0xffffffffu, mi, o);
        if (lane >= o) ci += tc, mi += tm;
    }
    __syncthreads();
    if (lane == 31) r.u[w] = ci, r.w[w] = mi;
    __syncthreads();
    unsigned long long bc = 0, bm = 0;
    for (int k = 0; k < w; k++) bc += r.u[k], bm += r.w[k];
    ce = bc + ci - c, me = bm + mi - m;
}

struct cross_res {
    int idx;                   /* the item holding the position, -1: none */
    unsigned long long cb, mb; /* count and mass before it                */
};

__device__ __forceinline__ bool crosses(int kind, unsigned long long c, unsigned long long m, int64_t rank,
                                        double mass) {
    if (kind == BY_RANK) return (int64_t)c > rank;
    return kind == BY_MASS_GT ? (double)m > mass : (double)m >= mass;
}

/* The item (of n <= 2 NT, in candidate order; get(i, c, m) gives its count
 * and mass) where the prefix, starting from (c0, m0), passes the target.
 * The prefix is monotone, so exactly one item sees it pass. */
template <typename G>
__device__ __forceinline__ void find_cross(int n, G get, unsigned long long c0, unsigned long long m0, int kind,
                                           int64_t rank, double mass, cross_res &out, red_smem &r) {
    const int i0 = 2 * threadIdx.x, i1 = i0 + 1;
    unsigned long long ca = 0, ma = 0, cb = 0, mb = 0;
    if (i0 < n) get(i0, ca, ma);
    if (i1 < n) get(i1, cb, mb);
    unsigned long long ce, me;
    block_scan2(ca + cb, ma + mb, ce, me, r);
    if (threadIdx.x == 0) out.idx = -1;
    __syncthreads();
    unsigned long long c = c0 + ce, m = m0 + me;
    if (i0 < n && !crosses(kind, c, m, rank, mass) && crosses(kind, c + ca, m + ma, rank, mass))
        out.idx = i0, out.cb = c, out.mb = m;
    c += ca, m += ma;
    if (i1 < n && !crosses(kind, c, m, rank, mass) && crosses(kind, c + cb, m + mb, rank, mass))
        out.idx = i1, out.cb = c, out.mb = m;
    __syncthreads();
}

/* ---- greedy ---- */

template <typename T> __global__ void __launch_bounds__(NT) greedy_kernel(const sample_args a) {
    __shared__ red_smem red;
    const int64_t i = blockIdx.x, slot = row_slot(a, i);
    const row_src<T> r = make_row<T>(a, i, slot);
    unsigned long long best = 0; /* 0: no candidate (a NaN key never enters) */
    r.each([&](int64_t j, float v) {
        const unsigned long long k = sf_smp_key(v, j);
        best = k > best ? k : best;
    });
    best = block_max_u64(best, red);
    if (threadIdx.x == 0) {
        const int32_t t = best ? (int32_t)(0xffffffffu - (uint32_t)best) : 0;
        a.tokens[i * a.ts] = t;
        if (a.seen) a.seen[slot * a.ses + t] = 1;
    }
}

/* Greedy over a cluster of GREEDY_CLUSTER blocks a row (sm_90): block r
 * of the cluster takes slice r of the row (whole 16-byte vectors) and
 * keeps its largest key in shared memory; after the cluster barrier rank
 * 0 reads the others' (distributed shared memory) and writes the token.
 * One block a row is bound by the per-element work of one SM (~20 us at
 * V 128k); eight split it. */
#define GREEDY_CLUSTER 8
template <typename T> __global__ void __launch_bounds__(NT) greedy_cluster_kernel(const sample_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    __shared__ red_smem red;
    __shared__ unsigned long long part;
    const int rank = (int)cl.block_rank();
    const int64_t i = blockIdx.x / GREEDY_CLUSTER, slot = row_slot(a, i);
    row_src<T> r = make_row<T>(a, i, slot);
    constexpr int P = 16 / (int)sizeof(T);
    const int64_t per = ((a.V + GREEDY_CLUSTER - 1) / GREEDY_CLUSTER + P - 1) / P * P;
    const int64_t lo = min(a.V, (int64_t)rank * per), hi = min(a.V, lo + per);
    r.x += lo, r.V = hi - lo;
    if (r.mark) r.mark += lo;
    r.vec = r.vec && r.V % P == 0; /* lo is a whole number of vectors */
    unsigned long long best = 0;
    r.each([&](int64_t j, float v) {
        const unsigned long long k = sf_smp_key(v, lo + j);
        best = k > best ? k : best;
    });
    best = block_max_u64(best, red);
    if (threadIdx.x == 0) part = best;
    cl.sync();
    if (rank == 0 && threadIdx.x == 0) {
        for (int q = 1; q < GREEDY_CLUSTER; q++) {
            const unsigned long long v = *cl.map_shared_rank(&part, q);
            best = v > best ? v : best;
        }
        const int32_t t = best ? (int32_t)(0xffffffffu - (uint32_t)best) : 0;
        a.tokens[i * a.ts] = t;
        if (a.seen) a.seen[slot * a.ses + t] = 1;
    }
    cl.sync(); /* the peers' maxima stay until rank 0 has read them */
#else
    (void)a;
#endif
}

/* ---- sampling ---- */

struct found {
    int ok;
    int64_t rank;
    int32_t id;
    unsigned long long incl; /* mass up to and including the element */
};

struct row_smem {
    red_smem red;
    cross_res x;
    unsigned int ngath;
};

/* The first position of the candidate order where the prefix count passes
 * `rank` (BY_RANK) or its mass passes `mass`; ok = 0 when none does.
 * Called by every thread of the block; the result is the same in all. */
template <typename T>
__device__ __noinline__ found search(const row_src<T> &r, float mx, const unsigned int *hc, const unsigned long long *hm,
                        unsigned char *scr, row_smem &sh, int kind, int64_t rank, double mass) {
    found f = {0, 0, 0, 0};
    find_cross(SF_SMP_BINS, [&](int i, unsigned long long &c, unsigned long long &m) { c = hc[i], m = hm[i]; }, 0ull,
               0ull, kind, rank, mass, sh.x, sh.red);
    const int b = sh.x.idx;
    if (b < 0) return f;
    unsigned long long c = sh.x.cb, m = sh.x.mb, cnt = hc[b];
    unsigned long long lo = 0, hi = ~0ull;
    if (cnt > CAP) { /* the bin's key range, then 11 bits a level */
        unsigned long long kmin = ~0ull, kmax = 0;
        r.each([&](int64_t j, float v) {
            if (sf_smp_bin(v, mx) != b) return;
            const unsigned long long k = sf_smp_key(v, j);
            kmin = k < kmin ? k : kmin, kmax = k > kmax ? k : kmax;
        });
        lo = block_min_u64(kmin, sh.red);
        hi = block_max_u64(kmax, sh.red);
    }
    unsigned int *sc = (unsigned int *)scr;
    unsigned long long *sm = (unsigned long long *)(scr + SUB * 4);
    while (cnt > CAP) {
        const int nb = 64 - __clzll((long long)(hi - lo)); /* width digits: 11 fewer a level */
        const int s = nb > 11 ? nb - 11 : 0;
        __syncthreads();
        for (int k = threadIdx.x; k < SUB; k += NT) sc[k] = 0, sm[k] = 0;
        __syncthreads();
        r.each([&](int64_t j, float v) {
            if (sf_smp_bin(v, mx) != b) return;
            const unsigned long long k = sf_smp_key(v, j);
            if (k < lo || k > hi) return;
            const int d = (int)((k - lo) >> s);
            atomicAdd(&sc[d], 1u);
            atomicAdd(&sm[d], (unsigned long long)sf_smp_mass(v, mx));
        });
        __syncthreads();
        /* sub-bins in candidate order: the largest keys first */
        find_cross(SUB, [&](int i, unsigned long long &cc, unsigned long long &mm) { cc = sc[SUB - 1 - i], mm = sm[SUB - 1 - i]; },
                   c, m, kind, rank, mass, sh.x, sh.red);
        if (sh.x.idx < 0) return f;
        const int d = SUB - 1 - sh.x.idx;
        c = sh.x.cb, m = sh.x.mb, cnt = sc[d];
        lo += (unsigned long long)d << s;
        const unsigned long long top = lo + ((1ull << s) - 1);
        hi = top < hi ? top : hi;
    }
    /* gather the range's elements, sort them (larger key first), walk */
    unsigned long long *key = (unsigned long long *)scr, *ms = key + CAP;
    __syncthreads();
    if (threadIdx.x == 0) sh.ngath = 0;
    __syncthreads();
    r.each([&](int64_t j, float v) {
        if (sf_smp_bin(v, mx) != b) return;
        const unsigned long long k = sf_smp_key(v, j);
        if (k < lo || k > hi) return;
        const unsigned int at = atomicAdd(&sh.ngath, 1u);
        if (at < CAP) key[at] = k, ms[at] = sf_smp_mass(v, mx);
    });
    __syncthreads();
    const int ne = (int)min((unsigned int)CAP, sh.ngath);
    int p2 = 1;
    while (p2 < ne) p2 <<= 1;
    for (int k = ne + threadIdx.x; k < p2; k += NT) key[k] = 0, ms[k] = 0;
    __syncthreads();
    for (int k = 2; k <= p2; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < p2; t += NT) {
                const int u = t ^ j;
                if (u > t) {
                    const bool desc = (t & k) == 0;
                    const unsigned long long x = key[t], y = key[u];
                    if (desc ? x < y : x > y) {
                        key[t] = y, key[u] = x;
                        const unsigned long long w = ms[t];
                        ms[t] = ms[u], ms[u] = w;
                    }
                }
            }
            __syncthreads();
        }
    find_cross(ne, [&](int i, unsigned long long &cc, unsigned long long &mm) { cc = 1, mm = ms[i]; }, c, m, kind,
               rank, mass, sh.x, sh.red);
    if (sh.x.idx < 0) return f;
    f.ok = 1;
    f.rank = (int64_t)sh.x.cb;
    f.id = (int32_t)(0xffffffffu - (uint32_t)key[sh.x.idx]);
    f.incl = sh.x.mb + ms[sh.x.idx];
    return f;
}

template <typename T> __global__ void __launch_bounds__(NT) sample_kernel(const sample_args a) {
    extern __shared__ __align__(16) unsigned char dsm[];
    __shared__ row_smem sh;
    __shared__ double u_sh;
    unsigned int *hc = (unsigned int *)dsm;
    unsigned long long *hm = (unsigned long long *)(dsm + SF_SMP_BINS * 4);
    unsigned char *scr = dsm + SF_SMP_BINS * 12;
    const int64_t i = blockIdx.x, slot = row_slot(a, i);
    const row_src<T> r = make_row<T>(a, i, slot);

    /* pass 1: the largest value, the candidate count; the draw */
    float mx = -INFINITY;
    unsigned long long n = 0;
    r.each([&](int64_t, float v) { mx = fmaxf(mx, v), n++; });
    mx = block_max_f(mx, sh.red);
    const unsigned long long N = block_sum_u64(n, sh.red);
    if (threadIdx.x == 0) {
        uint64_t s = (uint64_t)a.rng[slot * a.rs];
        u_sh = sf_smp_uniform(sf_smp_next(&s));
        a.rng[slot * a.rs] = (int64_t)s;
    }
    for (int k = threadIdx.x; k < SF_SMP_BINS; k += NT) hc[k] = 0, hm[k] = 0;
    __syncthreads();
    const double u = u_sh;
    int32_t tok = 0;
    if (N > 0) {
        /* pass 2: the histogram, the row's mass, the min-p count */
        unsigned long long z = 0, mc = 0;
        const bool minp = a.min_p > 0.0f;
        r.each([&](int64_t, float v) {
            const unsigned long long w = sf_smp_mass(v, mx);
            const int b = sf_smp_bin(v, mx);
            atomicAdd(&hc[b], 1u);
            atomicAdd(&hm[b], w);
            z += w;
            if (minp && sf_smp_minp_keep(v, mx, a.min_p)) mc++;
        });
        const unsigned long long Z = block_sum_u64(z, sh.red);
        unsigned long long M = minp ? block_sum_u64(mc, sh.red) : 0;
        __syncthreads();
        const int64_t K = a.top_k > 0 && a.top_k < (int64_t)N ? a.top_k : (int64_t)N;
        unsigned long long tot = K == (int64_t)N ? Z : search(r, mx, hc, hm, scr, sh, BY_RANK, K - 1, 0.0).incl;
        int64_t keep = K;
        if (a.top_p < 1.0f) {
            const found f = search(r, mx, hc, hm, scr, sh, BY_MASS_GE, 0, (double)a.top_p * (double)tot);
            if (f.ok && f.rank + 1 < keep) keep = f.rank + 1, tot = f.incl;
        }
        if (minp) {
            if (M < 1) M = 1;
            if ((int64_t)M < keep) keep = (int64_t)M, tot = search(r, mx, hc, hm, scr, sh, BY_RANK, keep - 1, 0.0).incl;
        }
        found f = search(r, mx, hc, hm, scr, sh, BY_MASS_GT, 0, u * (double)tot);
        if (!f.ok || f.rank >= keep) f = search(r, mx, hc, hm, scr, sh, BY_RANK, keep - 1, 0.0);
        tok = f.id;
    }
    if (threadIdx.x == 0) {
        a.tokens[i * a.ts] = tok;
        if (a.seen) a.seen[slot * a.ses + tok] = 1;
    }
}

/* greedy rows in clusters (sm_90; SF_AUTOTUNE_FORCE=sample:onecta keeps a block a row) */
static bool greedy_clusters(sf_ctx *ctx, int64_t n) {
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    if (!cs || cs->sm_major < 9 || n * GREEDY_CLUSTER > 0x7fffffff) return false;
    char buf[32];
    const char *pin = sf_autotune_forced_name("sample", buf, sizeof buf);
    return !(pin && strcmp(pin, "onecta") == 0);
}

template <typename T> static sf_status launch(sf_ctx *ctx, const sample_args &a, int64_t n) {
    cudaStream_t st = sf_cuda_stream(ctx);
    if (a.greedy && greedy_clusters(ctx, n)) {
        SF_CUDA_CHECK(ctx, sf_launch_ex(greedy_cluster_kernel<T>, dim3((unsigned)(n * GREEDY_CLUSTER)), dim3(NT), 0, st,
                                        false, GREEDY_CLUSTER, a));
    } else if (a.greedy) {
        greedy_kernel<T><<<(unsigned)n, NT, 0, st>>>(a);
    } else {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)sample_kernel<T>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
        sample_kernel<T><<<(unsigned)n, NT, SMEM_BYTES, st>>>(a);
    }
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

extern "C" sf_status sf_cuda_sample(sf_ctx *ctx, const sf_sample_problem *pr) {
    sample_args a;
    memset(&a, 0, sizeof a);
    a.logits = pr->logits->data;
    a.ls = pr->logits->stride[0];
    a.slots = (const int32_t *)pr->slots->data;
    a.sls = pr->slots->data ? pr->slots->stride[0] : 0;
    a.seen = (uint8_t *)pr->seen->data;
    a.ses = pr->seen->data ? pr->seen->stride[0] : 0;
    a.rng = (int64_t *)pr->rng->data;
    a.rs = pr->rng->stride[0];
    a.tokens = (int32_t *)pr->tokens->data;
    a.ts = pr->tokens->stride[0];
    a.V = pr->V, a.S = pr->S;
    a.penalize = pr->penalize, a.greedy = pr->greedy;
    a.penalty = pr->penalty, a.temperature = pr->temperature;
    a.top_p = pr->top_p, a.min_p = pr->min_p, a.top_k = pr->top_k;
    switch (pr->logits->dtype) {
    case SF_F32: return launch<float>(ctx, a, pr->n);
    case SF_F16: return launch<__half>(ctx, a, pr->n);
    default: return launch<__nv_bfloat16>(ctx, a, pr->n);
    }
}
