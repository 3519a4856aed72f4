/* fwd_mma.cuh - FlashAttention-2 style forward kernel (mma.sync, sm_80+).
 *
 * Grid: x = (batch entry, Q tile) (dense) or a tile slot resolved through
 * cu_seqlens (varlen), y = query head.  One CTA owns BM query rows of one
 * head; BM/16 warps each own 16 rows.  The Q tile stays in shared memory
 * (and in registers for D <= 128); K and V tiles of BN keys stream through a
 * 2-stage cp.async double buffer.  S = Q K^T and O += P V run on
 * mma.sync.m16n8k16 (f16/bf16 in, f32 accumulate) fed by ldmatrix.
 *
 * Numerics: logits are scaled by scale*log2(e) once, so every exponential is
 * one ex2.approx; the online softmax keeps the running max m and per-thread
 * partial sums l in registers (reduced across the quad once, at the end).  A
 * row that has seen no visible key keeps m = -inf; its exponent base is
 * forced to 0 so no (-inf) - (-inf) = NaN is ever formed, and it ends with
 * out = 0, lse = -inf.
 *
 * Shared memory rows are padded by 16 bytes (row stride D+8 elements): the
 * 8 row addresses of one ldmatrix phase then fall in 8 distinct 4-bank
 * groups for every D that is a multiple of 8, so no swizzle is needed and
 * any head dim maps onto the padded buckets 64/96/128/192/256 (one that is
 * not a multiple of 8 is loaded element by element).  Columns d..D and rows
 * past a sequence's end are zero-filled (cp.async src-size 0, or zeros in
 * the element path): V rows must be finite because P = 0 there and 0*NaN =
 * NaN.
 *
 * The score modifiers (softcap, ALiBi) are a template flag, so the plain
 * kernels are compiled without them.
 */
#ifndef SF_ATTN_FWD_MMA_CUH
#define SF_ATTN_FWD_MMA_CUH

#include "attn/params.h"

#include <stdint.h>

namespace sf_attn {

template <int D> struct Smem {
    static constexpr int LDS = D + 8; /* padded row stride, elements */
};

/* Copies rows [0, rows) x columns [0, d) of a tile into shared memory and
 * zero-fills the rest of the ROWS x D grid.  aligned (d a multiple of 8):
 * 16-byte chunks by cp.async; otherwise synchronous 2-byte loads (strides,
 * base or d not 16-byte aligned: slow but correct). */
template <typename T, int ROWS, int D, int NT>
__device__ __forceinline__ void load_tile(T *s, const T *g, int64_t row_stride, int rows, int d,
                                          int aligned, int tid) {
    constexpr int CH = D / 8;
    constexpr int LDS = Smem<D>::LDS;
    constexpr int TOTAL = ROWS * CH;
    constexpr int ITERS = (TOTAL + NT - 1) / NT;
    const int d8 = d >> 3;
    if (aligned) {
#pragma unroll
        for (int it = 0; it < ITERS; it++) {
            const int i = tid + it * NT;
            if (TOTAL % NT == 0 || i < TOTAL) {
                const int r = i / CH, c = i % CH;
                const bool ok = r < rows && c < d8;
                const T *src = ok ? g + (int64_t)r * row_stride + c * 8 : g;
                sf_cp_async16_zfill(s + r * LDS + c * 8, src, ok ? 16 : 0);
            }
        }
    } else {
        for (int i = tid; i < TOTAL; i += NT) {
            const int r = i / CH, c = i % CH;
            const int n = r < rows ? min(8, d - c * 8) : 0; /* elements of this chunk */
            const uint16_t *src = reinterpret_cast<const uint16_t *>(g) + (int64_t)r * row_stride + c * 8;
            uint32_t w[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                w[j] = (2 * j < n ? (uint32_t)src[2 * j] : 0u) | (2 * j + 1 < n ? (uint32_t)src[2 * j + 1] << 16 : 0u);
            *reinterpret_cast<uint4 *>(s + r * LDS + c * 8) = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
}

/* Where a CTA works: batch entry / sequence b, Q tile mt, the sequence's
 * row offsets and lengths. */
struct TileInfo {
    int b, mt;
    int64_t q0, k0;
    int lq, lk;
};

/* Resolves blockIdx.x to a tile; false when the CTA has nothing to do (a
 * varlen slot past the last tile).  Uniform across the CTA. */
template <int BM>
__device__ __forceinline__ bool resolve_tile(const FwdParams &p, int lane, TileInfo &ti) {
    int b, mt;
    int64_t q0 = 0, k0 = 0;
    int lq, lk;
    if (!p.varlen) {
        b = blockIdx.x / p.n_mtiles;
        /* heavy (late, causal) tiles first: they start earliest */
        mt = p.n_mtiles - 1 - (int)(blockIdx.x - (unsigned)b * p.n_mtiles);
        lq = p.lq;
        lk = p.lk;
    } else {
        /* Tile slot -> (sequence, tile): every warp scans the per-sequence
         * tile counts ceil(lq/BM) 32 at a time (same answer in each warp, so
         * no shared memory or barrier is needed before an early exit). */
        const int x = blockIdx.x;
        int base = 0;
        b = -1;
        mt = 0;
        for (int s0 = 0; s0 < p.batch; s0 += 32) {
            const int s = s0 + lane;
            int c = 0;
            if (s < p.batch) {
                int64_t a = ld_cu(p.cu_q, s * p.cu_q_s, p.cu_i64);
                int64_t e = ld_cu(p.cu_q, (int64_t)(s + 1) * p.cu_q_s, p.cu_i64);
                c = e > a ? (int)((e - a + BM - 1) / BM) : 0;
            }
            int inc = c;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                int y = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o) inc += y;
            }
            const int tot = __shfl_sync(0xffffffffu, inc, 31);
            if (x < base + tot) {
                unsigned m = __ballot_sync(0xffffffffu, x < base + inc);
                int L = __ffs(m) - 1;
                int excl = __shfl_sync(0xffffffffu, inc - c, L);
                b = s0 + L;
                mt = x - base - excl;
                break;
            }
            base += tot;
        }
        if (b < 0) return false;
        /* p.lq / p.lk hold the total token counts here: offsets are clamped
         * to them so inconsistent cu_seqlens never read or write outside. */
        int64_t qa = ld_cu(p.cu_q, (int64_t)b * p.cu_q_s, p.cu_i64);
        int64_t qe = ld_cu(p.cu_q, (int64_t)(b + 1) * p.cu_q_s, p.cu_i64);
        int64_t ka = ld_cu(p.cu_k, (int64_t)b * p.cu_k_s, p.cu_i64);
        int64_t ke = ld_cu(p.cu_k, (int64_t)(b + 1) * p.cu_k_s, p.cu_i64);
        qa = qa < 0 ? 0 : (qa > p.lq ? p.lq : qa);
        qe = qe < qa ? qa : (qe > p.lq ? p.lq : qe);
        ka = ka < 0 ? 0 : (ka > p.lk ? p.lk : ka);
        ke = ke < ka ? ka : (ke > p.lk ? p.lk : ke);
        q0 = qa;
        k0 = ka;
        lq = (int)(qe - qa);
        lk = (int)(ke - ka);
    }
    ti.b = b;
    ti.mt = mt;
    ti.q0 = q0;
    ti.k0 = k0;
    ti.lq = lq;
    ti.lk = lk;
    return true;
}

/* One online-softmax step on a 16 x (8*NS) score fragment (m16n8 layout,
 * rows g and g+8, sequence rows row0 and row0 + 8): scale to log2 units,
 * apply the score modifiers (MOD), mask (boundary tiles only), update the
 * running max / sum, turn s into P and rescale the O accumulator. */
template <int NS, int NO, bool MOD>
__device__ __forceinline__ void softmax_step(float (&s)[NS][4], float (&o)[NO][4], float *mrow,
                                             float *lrow, int n0, bool need_mask, const int *rlo,
                                             const int *rhi, int tq, float scale_log2,
                                             const ScoreMod &mod, int row0) {
#pragma unroll
    for (int i = 0; i < NS; i++) {
#pragma unroll
        for (int e = 0; e < 4; e++) s[i][e] *= scale_log2;
    }
    if (MOD) {
#pragma unroll
        for (int i = 0; i < NS; i++) {
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[i][e] = mod.apply(s[i][e], row0 + (e >> 1) * 8, n0 + i * 8 + 2 * tq + (e & 1));
        }
    }
    if (need_mask) {
#pragma unroll
        for (int i = 0; i < NS; i++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = n0 + i * 8 + 2 * tq + (e & 1);
                const int rr = e >> 1;
                if (j < rlo[rr] || j >= rhi[rr]) s[i][e] = -INFINITY;
            }
        }
    }
    float alpha[2];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float mx = mrow[rr];
#pragma unroll
        for (int i = 0; i < NS; i++) mx = fmaxf(mx, fmaxf(s[i][2 * rr], s[i][2 * rr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* base 0 while the row has seen nothing: exps stay 0, no NaN */
        const float base = mx == -INFINITY ? 0.f : mx;
        alpha[rr] = sf_ex2(mrow[rr] - base);
        mrow[rr] = mx;
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < NS; i++) {
            s[i][2 * rr] = sf_ex2(s[i][2 * rr] - base);
            s[i][2 * rr + 1] = sf_ex2(s[i][2 * rr + 1] - base);
            sum += s[i][2 * rr] + s[i][2 * rr + 1];
        }
        lrow[rr] = lrow[rr] * alpha[rr] + sum;
    }
#pragma unroll
    for (int i = 0; i < NO; i++) {
        o[i][0] *= alpha[0];
        o[i][1] *= alpha[0];
        o[i][2] *= alpha[1];
        o[i][3] *= alpha[1];
    }
}

/* Epilogue shared by the kernels: normalise this warp's 16 rows, write lse,
 * stage O through sO (16 rows x D+8, this warp's alone) for 16-byte
 * coalesced stores.  o holds the m16n8 accumulator layout: rows g, g+8. */
template <typename T, int D>
__device__ __forceinline__ void write_out(const FwdParams &p, float (&o)[D / 8][4], const float *mrow,
                                          const float *lrow, T *sO, int b, int h, int64_t q0, int r0,
                                          int lq, int wrows, int lane) {
    constexpr int NO = D / 8, LDS = Smem<D>::LDS;
    const int g = lane >> 2, tq = lane & 3, d8 = p.d >> 3;
    float inv[2];
    finish_rows(p, lrow, mrow, inv, b, h, q0, r0, lq, tq);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < NO; i++) {
        const int c = i * 8 + 2 * tq;
        *reinterpret_cast<uint32_t *>(sO + g * LDS + c) = sf_mma16<T>::pack(o[i][0] * inv[0], o[i][1] * inv[0]);
        *reinterpret_cast<uint32_t *>(sO + (g + 8) * LDS + c) =
            sf_mma16<T>::pack(o[i][2] * inv[1], o[i][3] * inv[1]);
    }
    __syncwarp();
    T *og = reinterpret_cast<T *>(p.o) + (int64_t)b * p.o_sb + (q0 + r0 - g) * p.o_sr +
            (int64_t)h * p.o_sh;
    if (p.aligned) {
        for (int i = lane; i < 16 * d8; i += 32) {
            const int r = i / d8, c = i - (i / d8) * d8;
            if (r < wrows)
                *reinterpret_cast<uint4 *>(og + (int64_t)r * p.o_sr + c * 8) =
                    *reinterpret_cast<const uint4 *>(sO + r * LDS + c * 8);
        }
    } else {
        for (int i = lane; i < 16 * p.d; i += 32) {
            const int r = i / p.d, c = i - (i / p.d) * p.d;
            if (r < wrows) og[(int64_t)r * p.o_sr + c] = sO[r * LDS + c];
        }
    }
}

template <int D, int BM, int BN> struct FwdTraits {
    static constexpr int NW = BM / 16;
    static constexpr int NT = NW * 32;
    static constexpr int LDS = Smem<D>::LDS;
    static constexpr bool Q_IN_REGS = D <= 128;
    static constexpr size_t SMEM = (size_t)(BM + 4 * BN) * LDS * 2;
    static_assert(D % 16 == 0 && BN % 16 == 0 && BM % 16 == 0, "tile shapes");
};

/* attn_fwd_mma: one CTA per (Q tile of BM rows, head); see file comment.
 * MOD: with the score modifiers (softcap, ALiBi). */
template <typename T, int D, int BM, int BN, int MINB, bool MOD>
__global__ void __launch_bounds__(BM * 2, MINB) attn_fwd_mma(const FwdParams p) {
    typedef FwdTraits<D, BM, BN> Tr;
    constexpr int NT = Tr::NT, LDS = Tr::LDS;
    constexpr int KD = D / 16;   /* k-steps of Q K^T                */
    constexpr int NS = BN / 8;   /* n-blocks of S                   */
    constexpr int NO = D / 8;    /* n-blocks of O                   */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sK = sQ + BM * LDS;
    T *sV = sK + 2 * BN * LDS;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int h = blockIdx.y;

    TileInfo ti;
    if (!resolve_tile<BM>(p, lane, ti)) return;
    const int b = ti.b, mt = ti.mt, lq = ti.lq, lk = ti.lk;
    const int64_t q0 = ti.q0, k0 = ti.k0;
    const int m0 = mt * BM;
    if (m0 >= lq) return;
    const int mrows = min(BM, lq - m0);
    const int hk = h / p.heads_per_kv;

    const T *qg = reinterpret_cast<const T *>(p.q) + (int64_t)b * p.q_sb + (q0 + m0) * p.q_sr +
                  (int64_t)h * p.q_sh;
    const T *kg = reinterpret_cast<const T *>(p.k) + (int64_t)b * p.k_sb + k0 * p.k_sr +
                  (int64_t)hk * p.k_sh;
    const T *vg = reinterpret_cast<const T *>(p.v) + (int64_t)b * p.v_sb + k0 * p.v_sr +
                  (int64_t)hk * p.v_sh;

    /* Key tiles this Q tile touches, and the ones that need no mask. */
    int lo_first, hi_first, lo_last, hi_last;
    key_range(m0, lq, lk, p.wl, p.wr, lo_first, hi_first);
    key_range(m0 + mrows - 1, lq, lk, p.wl, p.wr, lo_last, hi_last);
    const int n_lo = lo_first, n_hi = hi_last;           /* union of the rows' ranges */
    const int t_begin = n_lo / BN;
    const int t_end = n_hi > n_lo ? (n_hi + BN - 1) / BN : t_begin;
    const int full_lo = lo_last, full_hi = hi_first;     /* intersection */

    /* Per-thread rows (fragment rows g and g + 8 of this warp's 16). */
    const int g = lane >> 2, tq = lane & 3;
    const int r0 = m0 + warp * 16 + g; /* sequence-relative row */
    int rlo[2], rhi[2];
    key_range(r0, lq, lk, p.wl, p.wr, rlo[0], rhi[0]);
    key_range(r0 + 8, lq, lk, p.wl, p.wr, rlo[1], rhi[1]);

    ScoreMod mod = ScoreMod();
    if (MOD) mod = score_mod_of(p, b, h, lq, lk);

    float o[NO][4];
#pragma unroll
    for (int i = 0; i < NO; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY};
    float lrow[2] = {0.f, 0.f};

    if (t_end > t_begin) {
        /* Prologue: Q and the first K tile in one group. */
        load_tile<T, BM, D, NT>(sQ, qg, p.q_sr, mrows, p.d, p.aligned, tid);
        {
            const int n0 = (t_end - 1) * BN;
            load_tile<T, BN, D, NT>(sK, kg + (int64_t)n0 * p.k_sr, p.k_sr, lk - n0, p.d, p.aligned,
                                    tid);
        }
        sf_cp_async_commit();

        uint32_t qf[Tr::Q_IN_REGS ? KD : 1][4];
        const T *sQw = sQ + (warp * 16) * LDS;

        /* Key tiles from last to first: the masked diagonal tiles of a causal
         * problem come first, while the pipeline fills. */
        int it = 0;
        for (int t = t_end - 1; t >= t_begin; t--, it++) {
            const int st = it & 1;
            const int n0 = t * BN;
            T *sKs = sK + st * BN * LDS;
            T *sVs = sV + st * BN * LDS;
            load_tile<T, BN, D, NT>(sVs, vg + (int64_t)n0 * p.v_sr, p.v_sr, lk - n0, p.d, p.aligned,
                                    tid);
            sf_cp_async_commit();
            sf_cp_async_wait<1>(); /* Q and K[t] have landed */
            __syncthreads();

            if (Tr::Q_IN_REGS && it == 0) {
#pragma unroll
                for (int kk = 0; kk < (Tr::Q_IN_REGS ? KD : 1); kk++)
                    sf_ldsm_x4(qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3],
                            sQw + (lane & 15) * LDS + kk * 16 + (lane >> 4) * 8);
            }

            /* S = Q K^T for this warp's 16 rows x BN keys. */
            float s[NS][4];
#pragma unroll
            for (int i = 0; i < NS; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t a[4];
                if (Tr::Q_IN_REGS) {
                    a[0] = qf[Tr::Q_IN_REGS ? kk : 0][0];
                    a[1] = qf[Tr::Q_IN_REGS ? kk : 0][1];
                    a[2] = qf[Tr::Q_IN_REGS ? kk : 0][2];
                    a[3] = qf[Tr::Q_IN_REGS ? kk : 0][3];
                } else {
                    sf_ldsm_x4(a[0], a[1], a[2], a[3],
                            sQw + (lane & 15) * LDS + kk * 16 + (lane >> 4) * 8);
                }
#pragma unroll
                for (int j = 0; j < NS / 2; j++) {
                    uint32_t b0, b1, b2, b3;
                    sf_ldsm_x4(b0, b1, b2, b3,
                            sKs + (j * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk * 16 +
                                ((lane >> 3) & 1) * 8);
                    sf_mma16<T>::run(s[2 * j], a, b0, b1);
                    sf_mma16<T>::run(s[2 * j + 1], a, b2, b3);
                }
            }

            /* Prefetch the next K tile into the other stage: its last readers
             * (iteration it-1) all passed the barrier above. */
            if (t - 1 >= t_begin) {
                const int n1 = (t - 1) * BN;
                load_tile<T, BN, D, NT>(sK + (st ^ 1) * BN * LDS, kg + (int64_t)n1 * p.k_sr, p.k_sr,
                                        lk - n1, p.d, p.aligned, tid);
            }
            sf_cp_async_commit(); /* possibly empty: keeps the group count uniform */

            /* Scale to log2 units, mask boundary tiles, online softmax. */
            const bool need_mask = !(n0 >= full_lo && n0 + BN <= full_hi);
            softmax_step<NS, NO, MOD>(s, o, mrow, lrow, n0, need_mask, rlo, rhi, tq, p.scale_log2, mod, r0);

            /* P as the A operand of P V (accumulator layout = A layout). */
            uint32_t pa[BN / 16][4];
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                pa[kk][0] = sf_mma16<T>::pack(s[2 * kk][0], s[2 * kk][1]);
                pa[kk][1] = sf_mma16<T>::pack(s[2 * kk][2], s[2 * kk][3]);
                pa[kk][2] = sf_mma16<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                pa[kk][3] = sf_mma16<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            }

            sf_cp_async_wait<1>(); /* V[t] has landed (K[t-1] may still fly) */
            __syncthreads();

#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
#pragma unroll
                for (int j = 0; j < NO / 2; j++) {
                    uint32_t b0, b1, b2, b3;
                    sf_ldsm_x4_t(b0, b1, b2, b3,
                              sVs + (kk * 16 + (lane & 15)) * LDS + j * 16 + (lane >> 4) * 8);
                    sf_mma16<T>::run(o[2 * j], pa[kk], b0, b1);
                    sf_mma16<T>::run(o[2 * j + 1], pa[kk], b2, b3);
                }
            }
        }
        sf_cp_async_wait<0>();
    }

    write_out<T, D>(p, o, mrow, lrow, sQ + (warp * 16) * LDS, b, h, q0, r0, lq,
                    min(16, mrows - warp * 16), lane);
}

} /* namespace sf_attn */

#endif
