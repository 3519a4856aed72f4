/* decode_cp.cuh - sf_gemm_swiglu for M <= 8 rows of x with the weights
 * staged in shared memory: each block owns 8 outputs (8 rows of w_gate and
 * the same 8 rows of w_up, 16 rows in all) and streams them through a ring
 * of S stages of KS elements by cp.async, so that each warp-wide copy reads
 * 512 contiguous bytes of one row (DRAM-friendly, no registers held by
 * loads in flight: S - 1 stages of 16 x KS x 2 bytes are in flight a block).
 * The 16 staged rows are the A operand of mma.sync m16n8k16 (ldmatrix from
 * a 16-byte-chunk XOR swizzle, conflict free), x the B operand (n8 = rows
 * of x, read as 32-bit pairs through L1: one n8 tile; a second for M 16
 * doubled the time), so the accumulator of a lane
 * holds the gate (row g) and up (row g + 8) sums of one output for two rows
 * of x: silu(g) * u is formed once the warps' partial sums over K meet in
 * shared memory.  Needs K a multiple of 8 and 16-byte aligned rows (the
 * caller checks: vec_ok). */
#ifndef SF_GEMM_SWIGLU_DECODE_CP_CUH
#define SF_GEMM_SWIGLU_DECODE_CP_CUH

#include "common/ptx.cuh"
#include "gemm_swiglu/args.h"
#include "gemm_swiglu/out.cuh"

namespace sf_gs {

template <int KS, int S> struct DcpTraits {
    static constexpr int RB = KS * 2;            /* bytes of a row in a stage   */
    static constexpr int SMEM = S * 16 * RB;     /* the ring                    */
};

/* MT: n8 tiles of x, 8 MT rows at most (the library launches MT 1) */
template <typename T, int WK, int KS, int S, int MT>
__global__ void __launch_bounds__(WK * 32) gs_dcp_kernel(const GsArgs a) {
    static_assert(KS % (16 * WK) == 0 && S >= 2, "each warp takes whole k16 steps of a stage");
    extern __shared__ __align__(128) uint8_t dcp_smem[];
    constexpr int RB = DcpTraits<KS, S>::RB, CPR = RB / 16, NCH = 16 * CPR;
    __shared__ float red[WK][MT][32][4];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, q = lane & 3;
    const int n0 = blockIdx.x * 8;
    const int K = a.K, nst = (K + KS - 1) / KS;

    /* stage st of the 16 rows into slot st % S (zeros past K and past I);
     * one commit per call, also when there is nothing left to copy */
    auto issue = [&](int st) {
        if (st < nst) {
            uint8_t *buf = dcp_smem + (st % S) * 16 * RB;
            const int kb = st * KS;
#pragma unroll
            for (int c = tid; c < NCH; c += WK * 32) {
                const int r = c / CPR, ch = c % CPR;
                const int n = n0 + (r & 7), nc = min(n, a.I - 1);
                const uint16_t *src = r < 8 ? (const uint16_t *)a.wg + (int64_t)nc * a.wg_rs
                                            : (const uint16_t *)a.wu + (int64_t)nc * a.wu_rs;
                const int k = kb + ch * 8;
                const int bytes = (n < a.I && k < K) ? 16 : 0;
                sf_cp_async16_zfill(buf + r * RB + ((ch ^ (r & 7)) * 16), src + (bytes ? k : 0), bytes);
            }
        }
        sf_cp_async_commit();
    };

    float c[MT][4];
#pragma unroll
    for (int t = 0; t < MT; t++) c[t][0] = c[t][1] = c[t][2] = c[t][3] = 0.0f;
#pragma unroll
    for (int s = 0; s < S - 1; s++) issue(s);
    const uint16_t *xr[MT];
    bool xok[MT];
#pragma unroll
    for (int t = 0; t < MT; t++) {
        const int m = t * 8 + g;
        xok[t] = m < a.M;
        xr[t] = (const uint16_t *)a.x + (int64_t)(xok[t] ? m : 0) * a.x_rs;
    }
    /* ldmatrix x4: lanes 0-7 / 8-15 / 16-23 / 24-31 address rows 0-7 / 8-15
     * of the step's first 8 k, then the same rows of its second 8 k */
    const int lr = (lane & 7) + ((lane >> 3) & 1) * 8, lch = lane >> 4;
    for (int st = 0; st < nst; st++) {
        sf_cp_async_wait<S - 2>();
        __syncthreads(); /* stage st landed for all; slot (st - 1) % S is free */
        issue(st + S - 1);
        const uint8_t *buf = dcp_smem + (st % S) * 16 * RB;
        const int kb = st * KS;
#pragma unroll
        for (int j = w; j < KS / 16; j += WK) {
            uint32_t af[4];
            const int chl = 2 * j + lch;
            sf_ldsm_x4(af, buf + lr * RB + ((chl ^ (lr & 7)) * 16));
            const int k = kb + 16 * j + 2 * q;
#pragma unroll
            for (int t = 0; t < MT; t++) {
                const uint32_t b0 = xok[t] && k < K ? __ldg((const unsigned int *)(xr[t] + k)) : 0u;
                const uint32_t b1 = xok[t] && k + 8 < K ? __ldg((const unsigned int *)(xr[t] + k + 8)) : 0u;
                sf_mma16<T>::run(c[t], af, b0, b1);
            }
        }
    }
    sf_cp_async_wait<0>();
    /* C fragment: rows g (gate) and g + 8 (up) of output n0 + g, columns 2q,
     * 2q + 1 = rows of x */
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) red[w][t][lane][e] = c[t][e];
    __syncthreads();
    if (w == 0) {
        const int n = n0 + g;
#pragma unroll
        for (int t = 0; t < MT; t++) {
            float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int v = 0; v < WK; v++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[e] += red[v][t][lane][e];
            const int m0 = t * 8 + 2 * q;
            if (n < a.I) {
                uint16_t *y = (uint16_t *)a.y + n;
                if (m0 < a.M) y[(int64_t)m0 * a.y_rs] = GsOut<T>::one(sf_silu_sfu(s[0]) * s[2]);
                if (m0 + 1 < a.M) y[(int64_t)(m0 + 1) * a.y_rs] = GsOut<T>::one(sf_silu_sfu(s[1]) * s[3]);
            }
        }
    }
}

} /* namespace sf_gs */

#endif
