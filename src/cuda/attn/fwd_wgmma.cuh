/* fwd_wgmma.cuh - Hopper (sm_90a) attention forward on wgmma.
 *
 * Grid as attn_fwd_mma.  A CTA of 2 warpgroups owns 128 query rows (64 per
 * warpgroup); K/V tiles of BN = 128 keys stream through a 2-stage cp.async
 * double buffer as in the FA2 kernel (no TMA, no warp specialisation: the
 * two warpgroups overlap each other's softmax with their wgmma).
 *   S = Q K^T : wgmma m64n128k16, A = Q and B = K from shared memory (both
 *               K-major, 128-byte swizzle);
 *   O += P V  : wgmma m64n{D}k16, A = P from registers (the S accumulator
 *               layout per warp is the m16n8 layout, so P converts in place
 *               exactly as in the FA2 kernel), B = V from shared memory,
 *               MN-major (transposed descriptor), same swizzled layout.
 * Shared tiles are stored as column blocks of 64 elements (128 bytes) x rows,
 * chunk c of row r at ((c ^ r) & 7): the canonical 128B-swizzle layout, each
 * block 1024-byte aligned.  Head dims 64 and 128 only (d zero-padded up to
 * them); the swizzled layout and the wgmma helpers live in common/wgmma.cuh.
 */
#ifndef SF_ATTN_FWD_WGMMA_CUH
#define SF_ATTN_FWD_WGMMA_CUH

#include "attn/fwd_mma.cuh"
#include "common/wgmma.cuh"

namespace sf_attn {

template <int D> struct WgTraits {
    /* d 256: 64-key tiles, so S (32 registers) and O (128) fit beside P */
    static constexpr int BM = 128, BN = D == 256 ? 64 : 128, NT = 256;
    static constexpr int QBYTES = BM * D * 2, KVBYTES = BN * D * 2;
    /* Q + 2 stages of K and V, plus 1 KiB to align the base to 1024 */
    static constexpr size_t SMEM = (size_t)QBYTES + 4 * KVBYTES + 1024;
    static_assert(D == 64 || D == 128 || D == 256, "wgmma path: head dim buckets 64, 128, 256");
};


#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using sf_wg::fence_async_smem;
using sf_wg::load_tile_sw;
using sf_wg::wg_commit;
using sf_wg::wg_desc;
using sf_wg::wg_fence;
using sf_wg::reg_fence;
using sf_wg::wg_wait;
using sf_wg::wg_wait0;
using sf_wg::Wg;
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* O (64 x D) += P (64 x 16 keys, registers) V (16 keys x D, MN-major at
 * sv, column blocks of 64 at stride lbo): one wgmma up to D 128, two n128
 * halves at D 256 (the second starts two column blocks further). */
template <typename T, int D>
__device__ __forceinline__ void pv_step(float (&o)[D / 8][4], const uint32_t *pa, uint32_t sv,
                                        uint32_t lbo, uint32_t sbo) {
    if constexpr (D <= 128) {
        Wg<T, D>::rs(&o[0][0], pa, wg_desc(sv, lbo, sbo));
    } else {
        Wg<T, 128>::rs(&o[0][0], pa, wg_desc(sv, lbo, sbo));
        Wg<T, 128>::rs(&o[16][0], pa, wg_desc(sv + 2 * lbo, lbo, sbo));
    }
}
#endif

/* attn_fwd_wgmma: one CTA (2 warpgroups) per (128 query rows, head). */
template <typename T, int D>
__global__ void __launch_bounds__(256, 1) attn_fwd_wgmma(const FwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef WgTraits<D> Tr;
    constexpr int BM = Tr::BM, BN = Tr::BN, NT = Tr::NT;
    constexpr int NS = BN / 8, NO = D / 8, LDS = Smem<D>::LDS;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sraw = sf_smem_u32(smem_raw);
    const uint32_t sbase = (sraw + 1023u) & ~1023u;
    const uint32_t sQ = sbase, sK = sQ + Tr::QBYTES, sV = sK + 2 * Tr::KVBYTES;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int h = blockIdx.y;
    TileInfo ti;
    if (!resolve_tile<BM>(p, lane, ti)) return;
    const int b = ti.b, lq = ti.lq, lk = ti.lk;
    const int64_t q0 = ti.q0, k0 = ti.k0;
    const int m0 = ti.mt * BM;
    if (m0 >= lq) return;
    const int mrows = min(BM, lq - m0);
    const int hk = h / p.heads_per_kv;
    const int d8 = p.d >> 3;
    const T *qg = reinterpret_cast<const T *>(p.q) + (int64_t)b * p.q_sb + (q0 + m0) * p.q_sr +
                  (int64_t)h * p.q_sh;
    const T *kg = reinterpret_cast<const T *>(p.k) + (int64_t)b * p.k_sb + k0 * p.k_sr +
                  (int64_t)hk * p.k_sh;
    const T *vg = reinterpret_cast<const T *>(p.v) + (int64_t)b * p.v_sb + k0 * p.v_sr +
                  (int64_t)hk * p.v_sh;

    int lo_first, hi_first, lo_last, hi_last;
    key_range(m0, lq, lk, p.wl, p.wr, lo_first, hi_first);
    key_range(m0 + mrows - 1, lq, lk, p.wl, p.wr, lo_last, hi_last);
    const int n_lo = lo_first, n_hi = hi_last;
    const int t_begin = n_lo / BN;
    const int t_end = n_hi > n_lo ? (n_hi + BN - 1) / BN : t_begin;
    const int full_lo = lo_last, full_hi = hi_first;

    const int g = lane >> 2, tq = lane & 3;
    const int r0 = m0 + warp * 16 + g;
    int rlo[2], rhi[2];
    key_range(r0, lq, lk, p.wl, p.wr, rlo[0], rhi[0]);
    key_range(r0 + 8, lq, lk, p.wl, p.wr, rlo[1], rhi[1]);

    float o[NO][4];
#pragma unroll
    for (int i = 0; i < NO; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY};
    float lrow[2] = {0.f, 0.f};
    /* V (MN-major): LBO = next 64-column block, SBO = next 8 key rows */
    const uint32_t vlbo = BN * 128, vsbo = 1024;

    if (t_end > t_begin) {
        load_tile_sw<BM, D, NT>(sQ, qg, p.q_sr, mrows, d8, tid);
        {
            const int n0 = (t_end - 1) * BN;
            load_tile_sw<BN, D, NT>(sK, kg + (int64_t)n0 * p.k_sr, p.k_sr, lk - n0, d8, tid);
        }
        sf_cp_async_commit();
        int it = 0;
        for (int t = t_end - 1; t >= t_begin; t--, it++) {
            const int st = it & 1;
            const int n0 = t * BN;
            const uint32_t sKs = sK + st * Tr::KVBYTES, sVs = sV + st * Tr::KVBYTES;
            load_tile_sw<BN, D, NT>(sVs, vg + (int64_t)n0 * p.v_sr, p.v_sr, lk - n0, d8, tid);
            sf_cp_async_commit();
            sf_cp_async_wait<1>();
            fence_async_smem();
            __syncthreads();

            /* S = Q K^T for this warpgroup's 64 rows x 128 keys */
            float s[NS][4];
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const uint32_t koff = (kk & 3) * 32; /* 16 elements within the 128B row */
                const uint64_t da = wg_desc(sQ + (kk >> 2) * (BM * 128) + wg * (64 * 128) + koff, 16, 1024);
                const uint64_t db = wg_desc(sKs + (kk >> 2) * (BN * 128) + koff, 16, 1024);
                Wg<T, BN>::ss(&s[0][0], da, db, kk > 0);
            }
            wg_commit();
            wg_wait0();

            if (t - 1 >= t_begin) {
                const int n1 = (t - 1) * BN;
                load_tile_sw<BN, D, NT>(sK + (st ^ 1) * Tr::KVBYTES, kg + (int64_t)n1 * p.k_sr,
                                        p.k_sr, lk - n1, d8, tid);
            }
            sf_cp_async_commit();

            const bool need_mask = !(n0 >= full_lo && n0 + BN <= full_hi);
            softmax_step<NS, NO, false>(s, o, mrow, lrow, n0, need_mask, rlo, rhi, tq, p.scale_log2, ScoreMod(), 0);

            uint32_t pa[BN / 16][4];
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                pa[kk][0] = sf_mma16<T>::pack(s[2 * kk][0], s[2 * kk][1]);
                pa[kk][1] = sf_mma16<T>::pack(s[2 * kk][2], s[2 * kk][3]);
                pa[kk][2] = sf_mma16<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                pa[kk][3] = sf_mma16<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            }

            sf_cp_async_wait<1>();
            fence_async_smem();
            __syncthreads();

            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) pv_step<T, D>(o, pa[kk], sVs + kk * 2048, vlbo, vsbo);
            wg_commit();
            wg_wait0();
        }
        sf_cp_async_wait<0>();
    }
    /* Stage O through the (now idle) K buffers (and V's at d 256: 66 KiB), padded rows as in the FA2
     * kernel's epilogue. */
    __syncthreads();
    T *stage = reinterpret_cast<T *>(smem_raw + (sK - sraw));
    write_out<T, D>(p, o, mrow, lrow, stage + (warp * 16) * LDS, b, h, q0, r0, lq,
                    min(16, mrows - warp * 16), lane);
#else
    (void)p;
#endif
}

} /* namespace sf_attn */

#endif
