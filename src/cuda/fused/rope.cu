/* rope.cu - CUDA rotary position embedding (sf_rope): q and k in one
 * launch, NeoX halves or GPT-J pairs, a partial rotary dim, positions or
 * t, theta (with the llama3 scaling) or cos/sin tables, in place or out of
 * place.
 *
 * Memory-bound: each element of q and k is read and written once (the
 * pass-through channels only when out of place: in place they stay).  A
 * block of 128 threads takes tb consecutive tokens:
 *  1. the (cos, sin) of each (token, pair) into shared memory, once for
 *     every head of q and k: from the tables, or from the frequency of the
 *     pair (a table of f_i / 2 pi in the argument block, made on the host
 *     in double like the CPU backend's, for the first 128 pairs; past
 *     R = 256 the kernel computes them, rope.cuh) and the angle reduced in
 *     double, sincospif in f32 (rope.cuh: 2e-7 rad whatever the position);
 *  2. every (token, head) of q and then k: threadIdx.y over them,
 *     threadIdx.x over the head's slots.  A slot is a vector of V = 16
 *     bytes: NeoX pairs slot s's V channels of the first half with the V
 *     at + R/2 (two loads, two stores), GPT-J rotates the V/2 pairs inside
 *     one vector; slots past the rotated ones copy pass-through channels.
 * 16384 x (32 + 8) heads x 128 bf16 is 320 MB of traffic and 1M sincos.
 * Views whose rows, rotated halves or head dim are not whole 16-byte
 * vectors take V = 1 (NeoX) or 2 (GPT-J, one pair) with element accesses.
 * A position outside the cos/sin tables is clamped into them on the GPU
 * (the host check of the front end cannot read device memory): a bad
 * position gives a wrong angle, never a read outside the tables.
 * No workspace, no synchronisation (CUDA-graph capturable). */
#include "fused/rope.cuh"
#include "fused/vec.cuh"
#include "fused_ops.h"

#define ROPE_NT 128     /* threads per block */
#define ROPE_TURNS 128  /* frequencies carried in the argument block */

struct rope_args {
    const void *src[2]; /* q, k */
    void *dst[2];       /* q_out / k_out, or q / k in place */
    int64_t ss[2][2], ds[2][2]; /* (token, head) strides of src and dst */
    int nh[2];          /* H, Hkv (0 without k) */
    int copy[2];        /* out of place: the pass-through channels are copied */
    const void *pos;
    int64_t pst;
    int has_pos, pos64;
    const float *cosp, *sinp;
    int64_t cst[2], sst[2], npos;
    int has_tab;
    int64_t T;
    int d, R, half, nrot, npass, tb;
    sf_rope_freq_args fa;
    double turns[ROPE_TURNS];
};

static __device__ __forceinline__ int64_t rope_position(const rope_args &a, int64_t t) {
    int64_t p = t;
    if (a.has_pos) p = a.pos64 ? ((const int64_t *)a.pos)[t * a.pst] : (int64_t)((const int *)a.pos)[t * a.pst];
    if (a.has_tab) p = p < 0 ? 0 : p >= a.npos ? a.npos - 1 : p;
    return p;
}

/* (cos, sin) of pair i at position pos */
static __device__ __forceinline__ float2 rope_cs_of(const rope_args &a, int64_t pos, int i) {
    if (a.has_tab) return make_float2(a.cosp[pos * a.cst[0] + i * a.cst[1]], a.sinp[pos * a.sst[0] + i * a.sst[1]]);
    return sf_rope_cs(pos, i < ROPE_TURNS ? a.turns[i] : sf_rope_turns_dev(a.fa, i));
}

/* The SU slots of one head that thread x of sx takes: slot s = x + u sx.
 * Rotated slots (s < nrot) load V channels (GPT-J) or V of each half
 * (NeoX); pass-through slots (nrot <= s < ns) V channels from R on.  All
 * loads are issued before the first store (in place, dst is src). */
template <typename T, int V, bool VEC, bool GPTJ, bool CS, int SU>
static __device__ __forceinline__ void rope_head(const rope_args &a, const T *src, T *dst, int x, int sx,
                                                 int ns, const float2 *cs, int64_t pos) {
    fz_raw<T, V> r1[SU], r2[SU];
#pragma unroll
    for (int u = 0; u < SU; u++) {
        const int s = x + u * sx;
        if (s < a.nrot) {
            const int c0 = s * V; /* GPT-J: channel; NeoX: pair */
            fz_ld<T, V, VEC>(src + c0, V, r1[u]);
            if constexpr (!GPTJ) fz_ld<T, V, VEC>(src + a.half + c0, V, r2[u]);
        } else if (s < ns) {
            const int c0 = a.R + (s - a.nrot) * V;
            fz_ld<T, V, VEC>(src + c0, min(V, a.d - c0), r1[u]);
        }
    }
#pragma unroll
    for (int u = 0; u < SU; u++) {
        const int s = x + u * sx;
        if (s < a.nrot) {
            const int c0 = s * V;
            float f1[V];
            fz_to_f<T, V>(r1[u], f1);
            if constexpr (GPTJ) {
#pragma unroll
                for (int p = 0; p < V / 2; p++) {
                    const int i = c0 / 2 + p;
                    sf_rope_rotate(f1[2 * p], f1[2 * p + 1], CS ? cs[i] : rope_cs_of(a, pos, i));
                }
                fz_stf<T, V, VEC>(dst + c0, V, f1);
            } else {
                float f2[V];
                fz_to_f<T, V>(r2[u], f2);
#pragma unroll
                for (int v = 0; v < V; v++) sf_rope_rotate(f1[v], f2[v], CS ? cs[c0 + v] : rope_cs_of(a, pos, c0 + v));
                fz_stf<T, V, VEC>(dst + c0, V, f1);
                fz_stf<T, V, VEC>(dst + a.half + c0, V, f2);
            }
        } else if (s < ns) { /* pass-through channels, copied as they are */
            const int c0 = a.R + (s - a.nrot) * V;
            fz_st<T, V, VEC>(dst + c0, min(V, a.d - c0), r1[u]);
        }
    }
}

/* grid: groups of tb tokens, grid-stride; block (sx, sy) = (slot lanes of
 * a head, heads), 128 threads; CS: the (cos, sin) rows of the tb tokens in
 * dynamic shared memory (tb * R/2 float2), else each thread computes its
 * own (head dims past 12288). */
template <typename T, int V, bool VEC, bool GPTJ, bool CS, int SU>
__global__ void __launch_bounds__(ROPE_NT) rope_kernel(const rope_args a) {
    extern __shared__ float2 cs_sh[];
    const int sx = (int)blockDim.x, sy = (int)blockDim.y;
    const int tid = (int)(threadIdx.y * blockDim.x + threadIdx.x), nthr = sx * sy;
    const int nhq = a.nh[0], nht = a.nh[0] + a.nh[1];
    for (int64_t t0 = (int64_t)blockIdx.x * a.tb; t0 < a.T; t0 += (int64_t)gridDim.x * a.tb) {
        const int nt = (int)min((int64_t)a.tb, a.T - t0);
        if constexpr (CS) {
            __syncthreads(); /* the previous tokens' readers are done */
            for (int e = tid; e < nt * a.half; e += nthr) {
                const int k = e / a.half, i = e - k * a.half;
                cs_sh[e] = rope_cs_of(a, rope_position(a, t0 + k), i);
            }
            __syncthreads();
        }
        /* (token k, head h) pairs, threadIdx.y-strided */
        int k = (int)threadIdx.y / nht, h = (int)threadIdx.y % nht;
        while (k < nt) {
            const int w = h >= nhq;
            const int hh = w ? h - nhq : h;
            const int64_t t = t0 + k;
            const T *src = (const T *)a.src[w] + t * a.ss[w][0] + hh * a.ss[w][1];
            T *dst = (T *)a.dst[w] + t * a.ds[w][0] + hh * a.ds[w][1];
            const int ns = a.nrot + (a.copy[w] ? a.npass : 0);
            const float2 *cs = CS ? cs_sh + (int64_t)k * a.half : nullptr;
            const int64_t pos = CS ? 0 : rope_position(a, t);
            for (int x = (int)threadIdx.x; x < ns; x += sx * SU) /* once, up to 32 x SU slots */
                rope_head<T, V, VEC, GPTJ, CS, SU>(a, src, dst, x, sx, ns, cs, pos);
            h += sy;
            if (h >= nht) k += h / nht, h %= nht;
        }
    }
}

template <typename T, int V, bool VEC, bool GPTJ>
static sf_status rope_go(sf_ctx *ctx, rope_args &a, int64_t sm_count) {
    constexpr int SU = 2; /* slots per thread and head: 64 bytes of loads in flight (NeoX, 16-bit) */
    a.nrot = GPTJ ? a.R / V : a.half / V;
    a.npass = (a.d - a.R + V - 1) / V;
    const int ns = a.nrot + (a.copy[0] || a.copy[1] ? a.npass : 0);
    /* (cos, sin) rows in at most 48 KB of shared memory; past that (R/2 >
     * 6144 pairs) every thread computes its own */
    const size_t row = (size_t)a.half * sizeof(float2), cap = 48 * 1024;
    const bool cs = row <= cap;
    int sx = 1;
    while (sx < 32 && sx * SU < ns) sx <<= 1;
    const int sy = ROPE_NT / sx;
    /* tokens per block: about 4 slots per thread, while the grid keeps two
     * blocks per SM */
    const int64_t per_tok = (int64_t)(a.nh[0] + a.nh[1]) * ns;
    int64_t tb = (4 * ROPE_NT + per_tok - 1) / per_tok;
    if (tb > 16) tb = 16;
    while (tb > 1 && (a.T + tb - 1) / tb < 2 * sm_count) tb >>= 1;
    if (!cs) tb = 1;
    while (tb > 1 && (size_t)tb * row > cap) tb >>= 1;
    a.tb = (int)tb;
    int64_t blocks = (a.T + tb - 1) / tb;
    if (blocks > (INT64_C(1) << 24)) blocks = INT64_C(1) << 24; /* the kernel strides over the rest */
    const dim3 grid((unsigned)blocks), block(sx, sy);
    if (cs)
        rope_kernel<T, V, VEC, GPTJ, true, SU><<<grid, block, (size_t)tb * row, sf_cuda_stream(ctx)>>>(a);
    else
        rope_kernel<T, V, VEC, GPTJ, false, SU><<<grid, block, 0, sf_cuda_stream(ctx)>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

template <typename T>
static sf_status rope_dispatch(sf_ctx *ctx, rope_args &a, bool vec, bool gptj, int64_t sm) {
    constexpr int VV = 16 / (int)sizeof(T);
    if (gptj) return vec ? rope_go<T, VV, true, true>(ctx, a, sm) : rope_go<T, 2, false, true>(ctx, a, sm);
    return vec ? rope_go<T, VV, true, false>(ctx, a, sm) : rope_go<T, 1, false, false>(ctx, a, sm);
}

static bool rope_aligned(const sf_tensor *t, size_t es) {
    return fz_rows_aligned(t->data, t->stride[0], es) && fz_rows_aligned(t->data, t->stride[1], es);
}

extern "C" sf_status sf_cuda_rope(sf_ctx *ctx, const sf_rope_problem *pr) {
    const sf_rope_params *p = pr->p;
    const int64_t nh = pr->H + (pr->has_k ? pr->Hkv : 0);
    if (pr->T == 0 || nh == 0) return SF_OK;
    if (pr->d > INT32_MAX / 4 || nh > INT32_MAX / 4)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_rope: head dim %lld or %lld heads past the CUDA kernel's limit",
                       (long long)pr->d, (long long)nh);
    rope_args a;
    memset(&a, 0, sizeof a);
    const sf_tensor *src[2] = {&p->q, &p->k};
    const sf_tensor *dst[2] = {pr->q_inplace ? &p->q : &p->q_out, pr->k_inplace ? &p->k : &p->k_out};
    const int nsrc = pr->has_k ? 2 : 1;
    const size_t es = sf_dtype_size(p->q.dtype);
    const int64_t R = pr->R, half = R / 2;
    const int V = 16 / (int)es;
    bool vec = pr->d % V == 0 && (pr->gptj ? R % V == 0 : half % V == 0);
    for (int w = 0; w < nsrc; w++) {
        a.src[w] = src[w]->data;
        a.dst[w] = dst[w]->data;
        for (int i = 0; i < 2; i++) a.ss[w][i] = src[w]->stride[i], a.ds[w][i] = dst[w]->stride[i];
        a.nh[w] = (int)src[w]->shape[1];
        a.copy[w] = w == 0 ? !pr->q_inplace : !pr->k_inplace;
        vec = vec && rope_aligned(src[w], es) && rope_aligned(dst[w], es);
    }
    a.has_pos = pr->has_pos;
    if (pr->has_pos) {
        a.pos = p->positions.data;
        a.pst = p->positions.stride[0];
        a.pos64 = p->positions.dtype == SF_I64;
    }
    a.has_tab = pr->has_tab;
    if (pr->has_tab) {
        a.cosp = (const float *)p->cos.data, a.sinp = (const float *)p->sin.data;
        a.cst[0] = p->cos.stride[0], a.cst[1] = p->cos.stride[1];
        a.sst[0] = p->sin.stride[0], a.sst[1] = p->sin.stride[1];
        a.npos = p->cos.shape[0];
    } else {
        a.fa.theta = (double)p->theta;
        a.fa.R = (int)R;
        a.fa.llama3 = p->scaling == SF_ROPE_LLAMA3;
        a.fa.factor = (double)p->factor;
        a.fa.low_freq_factor = (double)p->low_freq_factor;
        a.fa.high_freq_factor = (double)p->high_freq_factor;
        a.fa.original_max_position = (double)p->original_max_position;
        for (int64_t i = 0; i < half && i < ROPE_TURNS; i++)
            a.turns[i] = sf_rope_freq(p, R, i) * (0.5 / 3.14159265358979323846);
    }
    a.T = pr->T;
    a.d = (int)pr->d, a.R = (int)R, a.half = (int)half;
    const sf_cuda_state *st = sf_cuda_st(ctx);
    const int64_t sm = st && st->sm_count > 0 ? st->sm_count : 132;
    switch (p->q.dtype) {
    case SF_F32: return rope_dispatch<float>(ctx, a, vec, pr->gptj, sm);
    case SF_F16: return rope_dispatch<__half>(ctx, a, vec, pr->gptj, sm);
    case SF_BF16: return rope_dispatch<__nv_bfloat16>(ctx, a, vec, pr->gptj, sm);
    default: return sf_fail(ctx, SF_ERR_DTYPE, "sf_rope: q must be f32, f16 or bf16");
    }
}
