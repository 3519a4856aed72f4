/* ws.cuh - sf_gemm_swiglu for many rows of x (M > 16): a persistent,
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
 * tiles in flight stay in L2.  CL 2: clusters of two CTAs on neighbouring
 * row tiles of one column tile; each producer loads its own x tile and one
 * half of the weight tile (rank 0 w_gate, rank 1 w_up), multicast into
 * both CTAs, so the weights cross from L2 once per pair; a stage is
 * released to a producer once the consumer warps of both CTAs are done
 * with it. */
#ifndef SF_GEMM_SWIGLU_WS_CUH
#define SF_GEMM_SWIGLU_WS_CUH

#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "gemm_swiglu/args.h"
#include "gemm_swiglu/out.cuh"

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

/* A stage handed back: lane 0 arrives on this CTA's empty barrier; with
 * clusters lane r on CTA r's. */
template <int CL> __device__ __forceinline__ void ws_release(uint32_t bar, int lane) {
    if constexpr (CL == 1) {
        if (lane == 0) sf_wg::mbar_arrive(bar);
    } else {
        if (lane < CL) sf_wg::mbar_arrive_cluster(bar, (uint32_t)lane);
    }
}

__device__ __forceinline__ void gs_tma_load(uint32_t dst, const void *map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(0), "r"(0), "r"(bar)
                 : "memory");
}
#endif

/* tmx maps x (K, M) in 64 x 128 boxes, tmg / tmu the weights (K, I) in
 * 64 x BN boxes; rows and columns past the ends read as zeros. */
template <typename T, int BN, int NST, int GM, int CL = 1>
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
    /* the schedule's unit: CL neighbouring row tiles of one column tile */
    const int ntm = (a.M + Tr::BM * CL - 1) / (Tr::BM * CL), ntn = (a.I + BN - 1) / BN, ntiles = ntm * ntn;
    const int nk = (a.K + 63) / 64;
    const int rank = CL > 1 ? (int)sf_wg::cluster_rank() : 0;
    const int t0 = blockIdx.x / CL, tstep = gridDim.x / CL;

    if (tid == 0) {
        for (int s = 0; s < NST; s++) {
            sf_wg::mbar_init(bFull + 8 * s, 1);
            sf_wg::mbar_init(bEmpty + 8 * s, 8 * CL); /* one lane of each consumer warp of the cluster */
        }
        sf_wg::mbar_init_fence();
    }
    /* CL 2: both CTAs' barriers set up before any arrival or copy reaches them */
    if constexpr (CL > 1)
        sf_wg::cluster_sync();
    else
        __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Tr::REG_P));
        /* the whole warp runs the loop (with clusters a lone lane 0 would
         * leave the warp diverged at the final cluster barrier); lane 0
         * issues */
        if (warp == 0) {
            uint32_t it = 0;
            for (int t = t0; t < ntiles; t += tstep) {
                int mt, nt;
                ws_tile<GM>(t, ntm, ntn, mt, nt);
                const int m0 = (mt * CL + rank) * Tr::BM, n0 = nt * BN;
                for (int kt = 0; kt < nk; kt++, it++) {
                    const uint32_t s = it % NST, ph = (it / NST) & 1u;
                    const uint32_t full = bFull + 8 * s, dA = sbase + s * Tr::STAGE, dB = dA + Tr::ABYTES;
                    sf_wg::mbar_wait_sleep(bEmpty + 8 * s, ph ^ 1u);
                    if (lane == 0) {
                        sf_wg::mbar_expect_tx(full, Tr::STAGE);
                        gs_tma_load(dA, &tmx, kt * 64, m0, full);
                        if constexpr (CL > 1) {
                            /* both halves land in both CTAs (same offsets) */
                            sf_wg::tma_load4_mc(dB + rank * (BN * 128), rank ? (const void *)&tmu : (const void *)&tmg,
                                                kt * 64, n0, 0, 0, full, (uint16_t)3);
                        } else {
                            gs_tma_load(dB, &tmg, kt * 64, n0, full);
                            gs_tma_load(dB + BN * 128, &tmu, kt * 64, n0, full);
                        }
                    }
                    __syncwarp();
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Tr::REG_C));
        const int cw = wg - 1, wq = warp & 3, g = lane >> 2, tq = lane & 3;
        float acc[NJ][4];
        uint32_t it = 0;
        for (int t = t0; t < ntiles; t += tstep) {
            int mt, nt;
            ws_tile<GM>(t, ntm, ntn, mt, nt);
            mt = mt * CL + rank;
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
                    ws_release<CL>(bEmpty + 8 * prev, lane);
                }
                prev = s;
            }
            sf_wg::wg_wait0();
            sf_wg::reg_fence(acc);
            ws_release<CL>(bEmpty + 8 * prev, lane);

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
    /* CL 2: no CTA ends while its partner may still arrive on its barriers */
    if constexpr (CL > 1) {
        __syncwarp();
        sf_wg::cluster_sync();
    }
#endif
}

} /* namespace sf_gs */

#endif
