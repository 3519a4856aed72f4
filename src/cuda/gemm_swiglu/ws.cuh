/* ws.cuh - sf_gemm_swiglu for many rows of x (M >= 64): a persistent,
 * warp-specialised wgmma GEMM whose tile of B holds BN rows of w_gate and
 * the same BN rows of w_up, so one m64n(2 BN)k16 wgmma gives each consumer
 * warpgroup the gate and up values of 64 rows x BN outputs in its own
 * registers, and the epilogue writes silu(g) * u: the (M, 2I) product never
 * reaches memory.
 *
 * CTA = 3 warpgroups, one tile (128 rows of x, BN outputs) at a time:
 *   WG0      producer (setmaxnreg.dec): one thread issues the TMA loads of
 *            each K step (x 128 x 64, w_gate BN x 64, w_up BN x 64, all
 *            128-byte swizzled) into an NST-stage ring of full / empty
 *            mbarriers, running ahead into the next tile while the
 *            consumers finish this one.
 *   WG1, 2   consumers (setmaxnreg.inc): 64 rows each; per K step four
 *            wgmma k16 steps, one group in flight; a stage is handed back
 *            when the group that read it has completed.  Epilogue from the
 *            accumulators straight to global memory (pairs of outputs).
 * Tiles are visited in groups of GM row tiles (all output columns of a
 * group before the next), so the x rows and the weight rows of the ~132
 * tiles in flight stay in L2. */
#ifndef SF_GEMM_SWIGLU_WS_CUH
#define SF_GEMM_SWIGLU_WS_CUH

#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "gemm_swiglu/args.h"

#include <cuda.h>

namespace sf_gs {

template <int BN_, int NST_> struct WsTraits {
    static constexpr int BM = 128, BN = BN_, NB = 2 * BN_, NST = NST_;
    static constexpr int ABYTES = BM * 128, BBYTES = NB * 128, STAGE = ABYTES + BBYTES;
    static constexpr int BAR_OFF = NST * STAGE;
    /* stages, full and empty mbarriers, 1 KiB to align the base */
    static constexpr size_t SMEM = (size_t)BAR_OFF + 2 * NST * 8 + 1024;
    /* 64K registers: 128 producer threads at 40, 256 consumers at 232 */
    static constexpr int REG_P = 40, REG_C = 232;
    static_assert(BN == 64 || BN == 128, "64 or 128 outputs per tile (wgmma n 128 or 256)");
    static_assert(SMEM <= 227 * 1024, "over the opt-in shared memory of sm_90");
};

/* Tile t of the grouped order: GM row tiles by every column tile, then
 * the next GM row tiles. */
template <int GM>
__device__ __forceinline__ void ws_tile(int t, int ntm, int ntn, int &mt, int &nt) {
    const int per = GM * ntn, grp = t / per, r = t - grp * per, m_first = grp * GM;
    const int gsz = min(GM, ntm - m_first);
    mt = m_first + r % gsz;
    nt = r / gsz;
}

template <typename T> struct GsOut;
template <> struct GsOut<__nv_bfloat16> {
    static __device__ __forceinline__ uint16_t one(float v) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
};
template <> struct GsOut<__half> {
    static __device__ __forceinline__ uint16_t one(float v) { return __half_as_ushort(__float2half_rn(v)); }
};

/* Outputs (row, col) and (row, col + 1) = silu(g) * u; col + 1 may be past I. */
template <typename T>
__device__ __forceinline__ void gs_store2(const GsArgs &a, int row, int col, float g0, float u0, float g1,
                                          float u1) {
    const float v0 = sf_silu_sfu(g0) * u0, v1 = sf_silu_sfu(g1) * u1;
    uint16_t *y = (uint16_t *)a.y + (int64_t)row * a.y_rs + col;
    if (col + 1 < a.I && a.y_pair) {
        *(uint32_t *)y = sf_mma16<T>::pack(v0, v1);
    } else {
        if (col < a.I) y[0] = GsOut<T>::one(v0);
        if (col + 1 < a.I) y[1] = GsOut<T>::one(v1);
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <typename T, int N> struct GsMma;
template <> struct GsMma<__nv_bfloat16, 128> {
    static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b) { sf_wg::wgmma_ss_bf16_n128(d, a, b, 1); }
};
template <> struct GsMma<__nv_bfloat16, 256> {
    static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b) { sf_wg::wgmma_ss_bf16_n256(d, a, b, 1); }
};
template <> struct GsMma<__half, 128> {
    static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b) { sf_wg::wgmma_ss_f16_n128(d, a, b, 1); }
};
template <> struct GsMma<__half, 256> {
    static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b) { sf_wg::wgmma_ss_f16_n256(d, a, b, 1); }
};

__device__ __forceinline__ void gs_tma_load(uint32_t dst, const void *map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(0), "r"(0), "r"(bar)
                 : "memory");
}
#endif

/* tmx maps x (K, M) in 64 x 128 boxes, tmg / tmu the weights (K, I) in
 * 64 x BN boxes; rows and columns past the ends read as zeros. */
template <typename T, int BN, int NST, int GM>
__global__ void __launch_bounds__(384, 1)
    gs_ws_kernel(const GsArgs a, const __grid_constant__ CUtensorMap tmx, const __grid_constant__ CUtensorMap tmg,
                 const __grid_constant__ CUtensorMap tmu) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef WsTraits<BN, NST> Tr;
    constexpr int NJ = Tr::NB / 8; /* accumulator column groups: NJ / 2 gate, NJ / 2 up */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sbase = (sf_smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t bFull = sbase + Tr::BAR_OFF, bEmpty = bFull + 8 * NST;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const int ntm = (a.M + Tr::BM - 1) / Tr::BM, ntn = (a.I + BN - 1) / BN, ntiles = ntm * ntn;
    const int nk = (a.K + 63) / 64;

    if (tid == 0) {
        for (int s = 0; s < NST; s++) {
            sf_wg::mbar_init(bFull + 8 * s, 1);
            sf_wg::mbar_init(bEmpty + 8 * s, 8); /* lane 0 of each consumer warp */
        }
        sf_wg::mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Tr::REG_P));
        if (tid == 0) {
            uint32_t it = 0;
            for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
                int mt, nt;
                ws_tile<GM>(t, ntm, ntn, mt, nt);
                const int m0 = mt * Tr::BM, n0 = nt * BN;
                for (int kt = 0; kt < nk; kt++, it++) {
                    const uint32_t s = it % NST, ph = (it / NST) & 1u;
                    const uint32_t full = bFull + 8 * s, dA = sbase + s * Tr::STAGE, dB = dA + Tr::ABYTES;
                    sf_wg::mbar_wait_sleep(bEmpty + 8 * s, ph ^ 1u);
                    sf_wg::mbar_expect_tx(full, Tr::STAGE);
                    gs_tma_load(dA, &tmx, kt * 64, m0, full);
                    gs_tma_load(dB, &tmg, kt * 64, n0, full);
                    gs_tma_load(dB + BN * 128, &tmu, kt * 64, n0, full);
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Tr::REG_C));
        const int cw = wg - 1, wq = warp & 3, g = lane >> 2, tq = lane & 3;
        float acc[NJ][4];
        uint32_t it = 0;
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
            int mt, nt;
            ws_tile<GM>(t, ntm, ntn, mt, nt);
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
            uint32_t prev = 0;
            for (int kt = 0; kt < nk; kt++, it++) {
                const uint32_t s = it % NST, ph = (it / NST) & 1u;
                sf_wg::mbar_wait(bFull + 8 * s, ph);
                const uint32_t sA = sbase + s * Tr::STAGE;
                const uint64_t da = sf_wg::wg_desc(sA + cw * 64 * 128, 16, 1024);
                const uint64_t db = sf_wg::wg_desc(sA + Tr::ABYTES, 16, 1024);
                sf_wg::wg_fence();
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
                    GsMma<T, Tr::NB>::ss(&acc[0][0], sf_wg::wg_desc_add(da, kk * 32), sf_wg::wg_desc_add(db, kk * 32));
                sf_wg::wg_commit();
                if (kt > 0) {
                    sf_wg::wg_wait<1>(); /* the previous step's group: its stage is free */
                    if (lane == 0) sf_wg::mbar_arrive(bEmpty + 8 * prev);
                }
                prev = s;
            }
            sf_wg::wg_wait0();
            sf_wg::reg_fence(acc);
            if (lane == 0) sf_wg::mbar_arrive(bEmpty + 8 * prev);

            const int row = mt * Tr::BM + cw * 64 + wq * 16 + g, col0 = nt * BN + 2 * tq;
#pragma unroll
            for (int j = 0; j < NJ / 2; j++) {
                if (row < a.M)
                    gs_store2<T>(a, row, col0 + 8 * j, acc[j][0], acc[j + NJ / 2][0], acc[j][1], acc[j + NJ / 2][1]);
                if (row + 8 < a.M)
                    gs_store2<T>(a, row + 8, col0 + 8 * j, acc[j][2], acc[j + NJ / 2][2], acc[j][3],
                                 acc[j + NJ / 2][3]);
            }
        }
    }
#endif
}

} /* namespace sf_gs */

#endif
