/* append.cuh - sf_kv_append on the GPU: each new token's K and V rows
 * copied into their page slots through the block table.  One thread moves
 * one 16-byte chunk of a row (or one element where rows are not 16-byte
 * aligned); a row whose position or page is out of range is skipped and
 * recorded in the context's error word.
 *
 * With rope, kv_append_rope: one warp a (token, kv head) row, lanes over
 * the R/2 pairs of K (NeoX: pair i is (i, i + R/2), so a warp reads 32
 * consecutive channels of each half; GPT-J: (2i, 2i + 1)), each rotated in
 * f32 by fused/rope.cuh's angle (frequencies f_i / 2 pi made on the host
 * in double, the product pos * turns reduced in double, sincospif in f32)
 * or by the cos/sin tables; pass-through channels and V copied by element.
 * d <= 256 keeps it to at most 4 pairs a lane.  A position past the tables
 * is an error like a bad page: the row is skipped, the sequence recorded,
 * nothing outside the tables read.  The plain kernel above serves every
 * call without rope, unchanged.
 *
 * FP8 pools: kv_append_fp8, one warp a row as with rope: the row (rotated
 * or not) staged in f32 in shared memory, its amax reduced over the warp
 * for the per-(token, head) scale, then each element quantised by fp8.h's
 * encoder (x / scale with IEEE division), so the codes and scales equal
 * the host backends' bit for bit without rope.
 */
#ifndef SF_PAGED_APPEND_CUH
#define SF_PAGED_APPEND_CUH

#include "fused/rope.cuh"
#include "fused_ops.h"
#include "paged/decode.cuh"

namespace sf_paged {

struct AppendParams {
    void *kc, *vc;
    const void *k, *v;
    int64_t k_sp, k_sr, k_sh;   /* k_cache: page, row, head strides */
    int64_t v_sp, v_sr, v_sh;
    int64_t nk_sb, nk_sr, nk_sh; /* new k: batch, token, head strides */
    int64_t nv_sb, nv_sr, nv_sh;
    const int32_t *bt;
    int64_t bt_sb, bt_sp;
    const int32_t *lens;        /* cache_seqlens */
    int64_t lens_s;
    int batch, lnew, nkv, page_shift, max_pages, num_pages;
    int units;                  /* copy units a row: d/8 chunks or d elements */
    unsigned int *err;
};

/* U: the copy unit (uint4 for 16-byte chunks, else the element type);
 * EPU: elements per unit. */
template <typename E, typename U, int EPU>
__global__ void __launch_bounds__(256) kv_append(const AppendParams p) {
    const int64_t total = (int64_t)p.batch * p.lnew * p.nkv * p.units;
    for (int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; id < total;
         id += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = id;
        const int c = (int)(r % p.units);
        r /= p.units;
        const int h = (int)(r % p.nkv);
        r /= p.nkv;
        const int j = (int)(r % p.lnew);
        const int b = (int)(r / p.lnew);
        const int64_t pos = (int64_t)p.lens[(int64_t)b * p.lens_s] + j;
        const int64_t cap = (int64_t)p.max_pages << p.page_shift;
        if (pos < j || pos >= cap) { /* a negative length, or past the table */
            if (c == 0 && h == 0) record_error(p.err, b);
            continue;
        }
        const int64_t pg = p.bt[(int64_t)b * p.bt_sb + (pos >> p.page_shift) * p.bt_sp];
        if (pg < 0 || pg >= p.num_pages) {
            if (c == 0 && h == 0) record_error(p.err, b);
            continue;
        }
        const int64_t row = pos & (((int64_t)1 << p.page_shift) - 1);
        const int64_t e = (int64_t)c * EPU;
        const E *ks = reinterpret_cast<const E *>(p.k) + (int64_t)b * p.nk_sb + (int64_t)j * p.nk_sr + (int64_t)h * p.nk_sh + e;
        const E *vs = reinterpret_cast<const E *>(p.v) + (int64_t)b * p.nv_sb + (int64_t)j * p.nv_sr + (int64_t)h * p.nv_sh + e;
        E *kd = reinterpret_cast<E *>(p.kc) + pg * p.k_sp + row * p.k_sr + (int64_t)h * p.k_sh + e;
        E *vd = reinterpret_cast<E *>(p.vc) + pg * p.v_sp + row * p.v_sr + (int64_t)h * p.v_sh + e;
        *reinterpret_cast<U *>(kd) = *reinterpret_cast<const U *>(ks);
        *reinterpret_cast<U *>(vd) = *reinterpret_cast<const U *>(vs);
    }
}

/* K's rotation in the argument block: tables, or the frequencies. */
#define SF_APPEND_TURNS 128 /* pairs of the largest head dim, 256 */
struct AppendRope {
    const float *cosp, *sinp;
    int64_t cs0, cs1, ss0, ss1; /* cos, sin strides: position, pair */
    int64_t npos;               /* rows of the tables */
    int R, half, d;
    sf_rope_freq_args fa;       /* pairs past SF_APPEND_TURNS (none while d <= 256) */
    double turns[SF_APPEND_TURNS]; /* f_i / 2 pi, in double from the host */
};

template <typename T, bool GPTJ, bool TAB>
__global__ void __launch_bounds__(256) kv_append_rope(const AppendParams p, const AppendRope r) {
    const int lane = (int)(threadIdx.x & 31u);
    const int64_t rows = (int64_t)p.batch * p.lnew * p.nkv;
    const int64_t cap = (int64_t)p.max_pages << p.page_shift;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < rows; w += step) {
        const int h = (int)(w % p.nkv);
        const int64_t t = w / p.nkv;
        const int j = (int)(t % p.lnew), b = (int)(t / p.lnew);
        const int64_t pos = (int64_t)p.lens[(int64_t)b * p.lens_s] + j;
        /* a negative length, past the block table, or past the tables */
        if (pos < j || pos >= cap || (TAB && pos >= r.npos)) {
            if (lane == 0 && h == 0) record_error(p.err, b);
            continue;
        }
        const int64_t pg = p.bt[(int64_t)b * p.bt_sb + (pos >> p.page_shift) * p.bt_sp];
        if (pg < 0 || pg >= p.num_pages) {
            if (lane == 0 && h == 0) record_error(p.err, b);
            continue;
        }
        const int64_t row = pos & (((int64_t)1 << p.page_shift) - 1);
        const T *ks = reinterpret_cast<const T *>(p.k) + (int64_t)b * p.nk_sb + (int64_t)j * p.nk_sr + (int64_t)h * p.nk_sh;
        const T *vs = reinterpret_cast<const T *>(p.v) + (int64_t)b * p.nv_sb + (int64_t)j * p.nv_sr + (int64_t)h * p.nv_sh;
        T *kd = reinterpret_cast<T *>(p.kc) + pg * p.k_sp + row * p.k_sr + (int64_t)h * p.k_sh;
        T *vd = reinterpret_cast<T *>(p.vc) + pg * p.v_sp + row * p.v_sr + (int64_t)h * p.v_sh;
        for (int i = lane; i < r.half; i += 32) {
            const int c1 = GPTJ ? 2 * i : i, c2 = GPTJ ? 2 * i + 1 : i + r.half;
            float x1 = sf_elem<T>::to_f(ks[c1]), x2 = sf_elem<T>::to_f(ks[c2]);
            float2 cs;
            if constexpr (TAB)
                cs = make_float2(r.cosp[pos * r.cs0 + i * r.cs1], r.sinp[pos * r.ss0 + i * r.ss1]);
            else
                cs = sf_rope_cs(pos, i < SF_APPEND_TURNS ? r.turns[i] : sf_rope_turns_dev(r.fa, i));
            sf_rope_rotate(x1, x2, cs);
            kd[c1] = sf_elem<T>::from_f(x1);
            kd[c2] = sf_elem<T>::from_f(x2);
        }
        for (int c = r.R + lane; c < r.d; c += 32) kd[c] = ks[c];
        for (int c = lane; c < r.d; c += 32) vd[c] = vs[c];
    }
}

/* The argument block of a validated rotation (host). */
static inline void append_rope_args(const sf_rope_spec *s, int64_t d, AppendRope *r) {
    memset(r, 0, sizeof *r);
    const sf_rope_params *rp = s->p;
    r->R = (int)s->R, r->half = (int)(s->R / 2), r->d = (int)d;
    if (s->has_tab) {
        r->cosp = (const float *)rp->cos.data, r->sinp = (const float *)rp->sin.data;
        r->cs0 = rp->cos.stride[0], r->cs1 = rp->cos.stride[1];
        r->ss0 = rp->sin.stride[0], r->ss1 = rp->sin.stride[1];
        r->npos = s->npos;
        return;
    }
    r->fa.theta = (double)rp->theta;
    r->fa.R = (int)s->R;
    r->fa.llama3 = rp->scaling == SF_ROPE_LLAMA3;
    r->fa.factor = (double)rp->factor;
    r->fa.low_freq_factor = (double)rp->low_freq_factor;
    r->fa.high_freq_factor = (double)rp->high_freq_factor;
    r->fa.original_max_position = (double)rp->original_max_position;
    for (int64_t i = 0; i < s->R / 2 && i < SF_APPEND_TURNS; i++)
        r->turns[i] = sf_rope_freq(rp, s->R, i) * (0.5 / 3.14159265358979323846);
}

/* FP8 pools: the scales.  Per-head: k_head[h * kh_s] (read); else written
 * at k_tok[page * sp + row * sr + h * sh]. */
struct AppendScales {
    const float *k_head, *v_head;
    int64_t kh_s, vh_s;
    float *k_tok, *v_tok;
    int64_t k_sp, k_sr, k_sh, v_sp, v_sr, v_sh;
};

/* One row of d f32 values (in the warp's smem `row`, each lane's own
 * elements) quantised into dst with scale s, or with amax / 448 stored at
 * *ws (per token and head); the host's definition (paged_ref.c): x / s
 * rounded by fp8.h's encoder, code 0 everywhere for scale 0. */
__device__ __forceinline__ void quant_row(const float *row, int d, float amax, int lane, uint8_t *dst,
                                          float s, float *ws) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (ws) {
        s = __fdiv_rn(amax, 448.0f);
        if (lane == 0) *ws = s;
    }
    for (int c = lane; c < d; c += 32) dst[c] = s == 0.f ? (uint8_t)0 : sf_f32_to_e4m3(__fdiv_rn(row[c], s));
}

/* Append into FP8 pools: one warp a (token, kv head) row; K (rotated when
 * ROPE: 1 NeoX, 2 GPT-J, as kv_append_rope) and V staged in f32 in shared
 * memory, their amax reduced over the warp, then quantised.  Rows out of
 * range are skipped and recorded as in the other kernels. */
template <typename T, int ROPE, bool TAB>
__global__ void __launch_bounds__(256) kv_append_fp8(const AppendParams p, const AppendRope r,
                                                     const AppendScales sc) {
    __shared__ float stage[8][256];
    const int lane = (int)(threadIdx.x & 31u);
    float *buf = stage[threadIdx.x >> 5];
    const int64_t rows = (int64_t)p.batch * p.lnew * p.nkv;
    const int64_t cap = (int64_t)p.max_pages << p.page_shift;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const int d = r.d;
    for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < rows; w += step) {
        const int h = (int)(w % p.nkv);
        const int64_t t = w / p.nkv;
        const int j = (int)(t % p.lnew), b = (int)(t / p.lnew);
        const int64_t pos = (int64_t)p.lens[(int64_t)b * p.lens_s] + j;
        if (pos < j || pos >= cap || (TAB && pos >= r.npos)) {
            if (lane == 0 && h == 0) record_error(p.err, b);
            continue;
        }
        const int64_t pg = p.bt[(int64_t)b * p.bt_sb + (pos >> p.page_shift) * p.bt_sp];
        if (pg < 0 || pg >= p.num_pages) {
            if (lane == 0 && h == 0) record_error(p.err, b);
            continue;
        }
        const int64_t row = pos & (((int64_t)1 << p.page_shift) - 1);
        const T *ks = reinterpret_cast<const T *>(p.k) + (int64_t)b * p.nk_sb + (int64_t)j * p.nk_sr + (int64_t)h * p.nk_sh;
        const T *vs = reinterpret_cast<const T *>(p.v) + (int64_t)b * p.nv_sb + (int64_t)j * p.nv_sr + (int64_t)h * p.nv_sh;
        uint8_t *kd = reinterpret_cast<uint8_t *>(p.kc) + pg * p.k_sp + row * p.k_sr + (int64_t)h * p.k_sh;
        uint8_t *vd = reinterpret_cast<uint8_t *>(p.vc) + pg * p.v_sp + row * p.v_sr + (int64_t)h * p.v_sh;
        const bool per_head = sc.k_head != nullptr;
        float amax = 0.f;
        int c0 = 0; /* the first channel copied as it is */
        if constexpr (ROPE != 0) {
            for (int i = lane; i < r.half; i += 32) {
                const int c1 = ROPE == 2 ? 2 * i : i, c2 = ROPE == 2 ? 2 * i + 1 : i + r.half;
                float x1 = sf_elem<T>::to_f(ks[c1]), x2 = sf_elem<T>::to_f(ks[c2]);
                float2 cs;
                if constexpr (TAB)
                    cs = make_float2(r.cosp[pos * r.cs0 + i * r.cs1], r.sinp[pos * r.ss0 + i * r.ss1]);
                else
                    cs = sf_rope_cs(pos, i < SF_APPEND_TURNS ? r.turns[i] : sf_rope_turns_dev(r.fa, i));
                sf_rope_rotate(x1, x2, cs);
                buf[c1] = x1;
                buf[c2] = x2;
                amax = fmaxf(amax, fmaxf(fabsf(x1), fabsf(x2)));
            }
            c0 = r.R;
        }
        for (int c = c0 + lane; c < d; c += 32) {
            const float x = sf_elem<T>::to_f(ks[c]);
            buf[c] = x;
            amax = fmaxf(amax, fabsf(x));
        }
        __syncwarp();
        quant_row(buf, d, amax, lane, kd, per_head ? sc.k_head[h * sc.kh_s] : 0.f,
                  per_head ? nullptr : sc.k_tok + pg * sc.k_sp + row * sc.k_sr + h * sc.k_sh);
        __syncwarp(); /* buf is V's next */
        amax = 0.f;
        for (int c = lane; c < d; c += 32) {
            const float x = sf_elem<T>::to_f(vs[c]);
            buf[c] = x;
            amax = fmaxf(amax, fabsf(x));
        }
        __syncwarp();
        quant_row(buf, d, amax, lane, vd, per_head ? sc.v_head[h * sc.vh_s] : 0.f,
                  per_head ? nullptr : sc.v_tok + pg * sc.v_sp + row * sc.v_sr + h * sc.v_sh);
        __syncwarp();
    }
}

template <typename T, int ROPE, bool TAB>
static sf_status launch_append_fp8_as(sf_ctx *ctx, const AppendParams &p, const AppendRope &r,
                                      const AppendScales &sc) {
    const int64_t rows = (int64_t)p.batch * p.lnew * p.nkv;
    const int64_t blocks = (rows + 7) / 8;
    const unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536);
    kv_append_fp8<T, ROPE, TAB><<<grid, 256, 0, sf_cuda_stream(ctx)>>>(p, r, sc);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* rope: 0 none, 1 NeoX, 2 GPT-J; r.d is the head dim in every case. */
template <typename T>
static sf_status launch_append_fp8(sf_ctx *ctx, const AppendParams &p, const AppendRope &r,
                                   const AppendScales &sc, int rope) {
    const bool tab = r.cosp != nullptr;
    if (rope == 0) return launch_append_fp8_as<T, 0, false>(ctx, p, r, sc);
    if (rope == 2) return tab ? launch_append_fp8_as<T, 2, true>(ctx, p, r, sc) : launch_append_fp8_as<T, 2, false>(ctx, p, r, sc);
    return tab ? launch_append_fp8_as<T, 1, true>(ctx, p, r, sc) : launch_append_fp8_as<T, 1, false>(ctx, p, r, sc);
}

/* 8 rows (warps) a block of 256 threads; the grid strides past 65536 blocks. */
template <typename T, bool GPTJ, bool TAB>
static sf_status launch_append_rope_as(sf_ctx *ctx, const AppendParams &p, const AppendRope &r) {
    const int64_t rows = (int64_t)p.batch * p.lnew * p.nkv;
    const int64_t blocks = (rows + 7) / 8;
    const unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536);
    kv_append_rope<T, GPTJ, TAB><<<grid, 256, 0, sf_cuda_stream(ctx)>>>(p, r);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

template <typename T>
static sf_status launch_append_rope(sf_ctx *ctx, const AppendParams &p, const AppendRope &r, bool gptj) {
    const bool tab = r.cosp != nullptr;
    if (gptj) return tab ? launch_append_rope_as<T, true, true>(ctx, p, r) : launch_append_rope_as<T, true, false>(ctx, p, r);
    return tab ? launch_append_rope_as<T, false, true>(ctx, p, r) : launch_append_rope_as<T, false, false>(ctx, p, r);
}

} /* namespace sf_paged */

#endif
