/* params.h - what every attention forward kernel takes (FwdParams: by
 * value, strides in elements) and the device helpers they share: cu_seqlens
 * loads, the visible key range of a row (the mask), and the epilogue's row
 * statistics (1 / l and the lse).
 */
#ifndef SF_ATTN_PARAMS_H
#define SF_ATTN_PARAMS_H

#include "common/cuda_common.h"
#include "common/ptx.cuh"

#include <stdint.h>

namespace sf_attn {

/* Everything the kernel needs, passed by value.  Strides in elements. */
struct FwdParams {
    const void *q, *k, *v;
    void *o;
    float *lse;
    int64_t q_sb, q_sr, q_sh;   /* batch (0 for varlen), row, head strides */
    int64_t k_sb, k_sr, k_sh;
    int64_t v_sb, v_sr, v_sh;
    int64_t o_sb, o_sr, o_sh;
    int64_t l_sb, l_sh, l_sr;
    const void *cu_q, *cu_k;    /* device arrays (varlen)                  */
    int64_t cu_q_s, cu_k_s;     /* their element strides                   */
    int cu_i64;                 /* 1: cu_seqlens are int64                 */
    int varlen;
    int batch, nheads, heads_per_kv, d;
    int lq, lk;                 /* dense lengths                           */
    int n_mtiles;               /* dense: Q tiles per sequence             */
    int wl, wr;                 /* -1: unbounded                           */
    float scale_log2;           /* softmax scale * log2(e)                 */
    int aligned;                /* every row start 16-byte aligned         */
    /* score modifiers (sf_attn_fwd_params), served by attn_fwd_mma only */
    float softcap_log2;         /* softcap * log2(e); 0: off               */
    const float *alibi;         /* ALiBi slopes, NULL: off                 */
    int64_t alibi_sb, alibi_sh; /* slope of (b, h): alibi[b sb + h sh]     */
};

/* Whether a score modifier is on (only attn_fwd_mma serves them). */
inline bool has_score_mod(const FwdParams &p) { return p.softcap_log2 > 0.f || p.alibi != nullptr; }

/* Softcap and ALiBi of one row's scores, in log2 units (the scale already
 * applied): s = c tanh(s / c), c = softcap log2(e); then s -= slope
 * log2(e) |row + shift - j| with shift = lk - lq (bottom-right aligned). */
struct ScoreMod {
    float cap2;     /* softcap * log2(e), 0: off */
    float slope2;   /* slope * log2(e), 0 without ALiBi */
    int64_t shift;  /* lk - lq */

    __device__ __forceinline__ float apply(float s, int64_t row, int j) const {
        if (cap2 > 0.f) s = cap2 * tanhf(s / cap2);
        const int64_t dist = row + shift - j;
        return s - slope2 * (float)(dist < 0 ? -dist : dist);
    }
};

__device__ __forceinline__ ScoreMod score_mod_of(const FwdParams &p, int b, int h, int lq, int lk) {
    ScoreMod m;
    m.cap2 = p.softcap_log2;
    m.slope2 = p.alibi ? p.alibi[(int64_t)b * p.alibi_sb + (int64_t)h * p.alibi_sh] * 1.4426950408889634f : 0.f;
    m.shift = (int64_t)lk - lq;
    return m;
}

/* 1 / l for the epilogue's normalisation, 0 for a row that saw no key (l 0).
 * rcp.approx (1 ulp; l >= 1 whenever it is positive, the row's max term
 * being 2^0, or up to 2^8 with lazy rescaling) rather than the IEEE
 * division, whose slow-path subroutine (a CALL in SASS) shaped the whole
 * persistent kernel's code (d 64 causal L 512: 2% faster without it). */
__device__ __forceinline__ float inv_row_sum(float l) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(l));
    return l > 0.f ? y : 0.f;
}

__device__ __forceinline__ int64_t ld_cu(const void *p, int64_t i, int is64) {
    return is64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

/* Visible key range [lo, hi) of query row i (sequence-relative), clamped to
 * [0, lk]; empty when lo >= hi.  Bottom-right aligned, as sf_attn_key_range. */
__device__ __forceinline__ void key_range(int i, int lq, int lk, int wl, int wr, int &lo,
                                          int &hi) {
    int64_t pos = (int64_t)i + lk - lq;
    int64_t a = wl < 0 ? 0 : pos - wl;
    int64_t b = wr < 0 ? (int64_t)lk : pos + wr + 1;
    a = a < 0 ? 0 : (a > lk ? lk : a);
    b = b < 0 ? 0 : (b > lk ? lk : b);
    lo = (int)a;
    hi = (int)b;
}

/* The epilogue's statistics of a thread's two rows (r0 and r0 + 8 of its
 * warp's 16; the four threads of a quad share a row): l summed over the
 * quad, inv = 1 / l, and for rows below `rows` the lse in natural log,
 * m ln 2 + log l (m in log2 units; -inf for a row that saw no key), stored
 * by the quad's first thread at sequence row row0 + r when p.lse is given. */
__device__ __forceinline__ void finish_rows(const FwdParams &p, const float *lrow, const float *mrow, float (&inv)[2],
                                            int b, int h, int64_t row0, int r0, int rows, int tq) {
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float l = lrow[rr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[rr] = inv_row_sum(l);
        if (p.lse && tq == 0) {
            const int r = r0 + rr * 8;
            if (r < rows) {
                const float v = l > 0.f ? mrow[rr] * 0.69314718055994531f + logf(l) : -INFINITY;
                p.lse[(int64_t)b * p.l_sb + (int64_t)h * p.l_sh + (row0 + r) * p.l_sr] = v;
            }
        }
    }
}

} /* namespace sf_attn */

#endif
