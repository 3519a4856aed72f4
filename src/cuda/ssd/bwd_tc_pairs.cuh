/* bwd_tc_pairs.cuh - the block-pair stage of the SSD backward's tc
 * configuration (bwd_tc_chunk.cuh has the notation).  One CTA per (batch,
 * head group of a.hk heads, chunk, causal block pair (bi, bj)):
 *     CB = C_i B_j^T once (the group's B and C: the same for every head),
 *     for each head: GX = gy_i x_j^T, W = GX e dt_j, the row and column
 *     sums of Z = W CB (the pair's d(cum) terms, tzr / tzc), and W summed
 *     over the heads in f32,
 * then that sum once in 16-bit (tws): the rows / cols kernels take
 * dC_i = sum_j W B_j and dB_j = sum_i W^T C_i per head group instead of
 * per head (the products are linear in W and B, C are the group's).  CB
 * goes out in f32 (tcb, by the group's first head group) for the rows /
 * cols kernels' M = CB e.  gy_i comes in 16-bit (tgy) from the chunk-state
 * kernel. */
#ifndef SF_SSD_BWD_TC_PAIRS_CUH
#define SF_SSD_BWD_TC_PAIRS_CUH

#include "ssd/bwd_tc_blk.cuh"

/* Shared memory of the pairs kernel, in bytes: C_i and B_j (64 x N
 * 16-bit), then two stages (a head's tiles while the previous head's
 * products run) of x_j, gy_i (64 x P 16-bit) and the cum / dt rows of i
 * and j; f32 row / column partials of Z. */
struct tc_pairs_smem {
    size_t oC, oB, oS, stage, sX, sG, sv, ozr, ozc, total; /* s*: within a stage */
};
static __host__ __device__ inline tc_pairs_smem tc_pairs_layout(int P, int N) {
    tc_pairs_smem s;
    const size_t ldN = (size_t)N + 8, ldP = (size_t)P + 8, t = 2;
    size_t o = 0;
    s.oC = o; o += TC_BT * ldN * t;
    s.oB = o; o += TC_BT * ldN * t;
    s.sX = 0;
    s.sG = s.sX + TC_BT * ldP * t;
    s.sv = s.sG + TC_BT * ldP * t; /* cum_i, dt_i, cum_j, dt_j */
    s.stage = s.sv + 4 * TC_BT * 4;
    s.oS = o; o += 2 * s.stage;
    s.ozr = o; o += TC_BT * 4 * 4; /* 64 rows x 4 column tiles */
    s.ozc = o; o += 4 * TC_BT * 4; /* 4 row tiles x 64 columns */
    s.total = o;
    return s;
}

/* A head's tiles into stage st by cp.async (one commit group): x_j, gy_i,
 * the cum / dt rows of blocks i and j. */
template <typename T>
static __device__ __forceinline__ void tc_pairs_stage(const ssd_bwd_args &a, int P, const tc_blk &b, int bi, int bj,
                                                      unsigned char *st, const tc_pairs_smem &L) {
    tc_stage_xg<T>(a, P, b, bj, (T *)(st + L.sX), TcXG::x);
    tc_stage_xg<T>(a, P, b, bi, (T *)(st + L.sG), TcXG::gy_ws);
    float *v = (float *)(st + L.sv);
    tc_load_cd(a, b, bi, v);
    tc_load_cd(a, b, bj, v + 2 * TC_BT);
    sf_cp_async_commit();
}

/* The warp's two 16 x 16 tiles of a 64 x 64 output (tiles w and w + 8 of
 * the row-major 4 x 4, at rows m0[j], columns n0[j]): the same elements for
 * CB, GX and the W sum, so all three stay in registers.  acc = A B^T over
 * K, A and B 64 x K 16-bit tiles (leading dimension ld). */
static_assert(SSD_BWD_WARPS == 8, "a 64 x 64 output is two 16 x 16 tiles a warp");
template <typename T>
static __device__ __forceinline__ void tc_mma64(float (*acc)[2][4], const T *sA, const T *sB, int ld, int K,
                                                const int *m0, const int *n0) {
    using F = ssd_mma<T>;
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][0][e] = acc[j][1][e] = 0.0f;
#pragma unroll 4
    for (int k0 = 0; k0 < K; k0 += 16)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            uint32_t fa[4], fb[4];
            F::load_a(fa, sA, ld, m0[j], k0);
            F::load_b2(fb, sB, ld, n0[j], k0);
            F::mma(acc[j][0], fa, fb);
            F::mma(acc[j][1], fa, fb + 2);
        }
}

template <typename T, int PT, int NT>
__global__ void __launch_bounds__(SSD_BWD_THREADS, 2) ssd_tc_pairs_kernel(const ssd_bwd_args a) {
    extern __shared__ __align__(16) unsigned char smraw[];
    const int P = PT ? PT : a.P, N = NT ? NT : a.N, ldP = P + 8, ldN = N + 8;
    const int pp = (int)(blockIdx.x % (unsigned)a.npair);
    int bi, bj;
    tc_pair_of(pp, bi, bj);
    const tc_cta cta{(int64_t)(blockIdx.x / (unsigned)a.npair), bi};
    const tc_blk b0 = tc_blk_of(a, tc_item(a, cta, 0));
    if (tc_valid(b0, bi) == 0) return; /* the same for every head (no varlen) */
    const tc_pairs_smem L = tc_pairs_layout(P, N);
    T *sC = (T *)(smraw + L.oC), *sB = (T *)(smraw + L.oB);
    float *zr = (float *)(smraw + L.ozr), *zc = (float *)(smraw + L.ozc);
    const int lane = threadIdx.x & 31, w = tc_warp(), g = lane >> 2, tq = lane & 3;
    int m0[2], n0[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int tile = w + j * SSD_BWD_WARPS;
        m0[j] = (tile >> 2) << 4;
        n0[j] = (tile & 3) << 4;
    }
    float cb[2][2][4], ws[2][2][4];
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) ws[j][0][e] = ws[j][1][e] = 0.0f;

    tc_stage_bc<T>(a, N, b0, bi, sC, a.C, a.Cs);
    tc_stage_bc<T>(a, N, b0, bj, sB, a.B, a.Bs);
    tc_pairs_stage<T>(a, P, b0, bi, bj, smraw + L.oS, L); /* with C_i, B_j: one group */
    sf_cp_async_wait<0>();
    __syncthreads();
    tc_mma64<T>(cb, sC, sB, ldN, N, m0, n0);
    if (b0.k.h % a.hpg == 0) { /* the group's first head group writes CB */
        float *dst = (float *)tc_cb_tiles(a, b0) + pp * (int64_t)(TC_BT * TC_BT);
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int r = m0[j] + g + 8 * hf, c = n0[j] + 8 * nt + 2 * tq;
                    *reinterpret_cast<float2 *>(dst + r * TC_BT + c) =
                        make_float2(cb[j][nt][2 * hf], cb[j][nt][2 * hf + 1]);
                }
    }

    tc_blk b = b0;
    for (int hj = 0; hj < a.hk; hj++) {
        if (hj > 0) b = tc_blk_next(a, b);
        unsigned char *st = smraw + L.oS + (hj & 1) * L.stage;
        const T *sX = (const T *)(st + L.sX), *sG = (const T *)(st + L.sG);
        const float *vI = (const float *)(st + L.sv), *vJ = vI + 2 * TC_BT;
        if (hj + 1 < a.hk) { /* the next head's tiles load while this one's products run */
            tc_pairs_stage<T>(a, P, tc_blk_next(a, b), bi, bj,
                              smraw + L.oS + ((hj + 1) & 1) * L.stage, L);
            sf_cp_async_wait<1>();
        } else {
            sf_cp_async_wait<0>();
        }
        __syncthreads();
        float gx[2][2][4];
        tc_mma64<T>(gx, sG, sX, ldP, P, m0, n0);
        /* e(i, j) dt_j of the warp's elements; off the diagonal block (bj <
         * bi) e = exp(cum_i - ref) exp(ref - cum_j), both <= 1 with ref the
         * cum at block j's end: 8 exps a thread instead of 16 */
        float dec[2][2][2][2]; /* [j][nt][hf][u] */
        const auto each = [&](auto f) { /* f(j, nt, hf, u) over the thread's 16 elements */
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
#pragma unroll
                    for (int hf = 0; hf < 2; hf++)
#pragma unroll
                        for (int u = 0; u < 2; u++) f(j, nt, hf, u);
        };
        if (bj < bi) {
            const float ref = vJ[TC_BT - 1];
            float ur[2][2], vd[2][2];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                ur[q >> 1][q & 1] = __expf(vI[m0[q >> 1] + g + 8 * (q & 1)] - ref);
                const int c = n0[0] + 8 * (q >> 1) + 2 * tq + (q & 1); /* n0[1] == n0[0] */
                vd[q >> 1][q & 1] = __expf(ref - vJ[c]) * vJ[TC_BT + c];
            }
            each([&](int j, int nt, int hf, int u) { dec[j][nt][hf][u] = ur[j][hf] * vd[nt][u]; });
        } else {
            each([&](int j, int nt, int hf, int u) {
                const int r = m0[j] + g + 8 * hf, c = n0[j] + 8 * nt + 2 * tq + u;
                dec[j][nt][hf][u] = c <= r ? __expf(vI[r] - vJ[c]) * vJ[TC_BT + c] : 0.0f;
            });
        }
        /* W = GX e dt_j into the sum; Z = W CB's row and column sums of the
         * warp's tiles (each slot written by one lane) */
#pragma unroll
        for (int j = 0; j < 2; j++) {
            float zrow[2] = {0.0f, 0.0f}, zcol[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++)
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        const float wv = gx[j][nt][2 * hf + u] * dec[j][nt][hf][u];
                        ws[j][nt][2 * hf + u] += wv;
                        const float z = wv * cb[j][nt][2 * hf + u];
                        zrow[hf] += z;
                        zcol[nt][u] += z;
                    }
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const float s = tc_quad_sum(zrow[hf]);
                if (tq == 0) zr[(m0[j] + g + 8 * hf) * 4 + (n0[j] >> 4)] = s;
            }
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const float s = tc_col_sum(zcol[nt][u]);
                    if (g == 0) zc[(m0[j] >> 4) * TC_BT + n0[j] + 8 * nt + 2 * tq + u] = s;
                }
        }
        __syncthreads();
        const int64_t zo = (b.item * a.npair + pp) * TC_BT;
        for (int i = threadIdx.x; i < 2 * TC_BT; i += SSD_BWD_THREADS) {
            if (i < TC_BT) {
                a.tzr[zo + i] = zr[i * 4] + zr[i * 4 + 1] + zr[i * 4 + 2] + zr[i * 4 + 3];
            } else {
                const int c = i - TC_BT;
                a.tzc[zo + c] = zc[c] + zc[TC_BT + c] + zc[2 * TC_BT + c] + zc[3 * TC_BT + c];
            }
        }
        __syncthreads(); /* this stage, zr and zc are free for the heads after */
    }

    /* the heads' W sum, rounded once */
    T *dst = (T *)a.tws + (cta.gi * a.npair + pp) * (int64_t)(TC_BT * TC_BT);
    T tag{};
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int r = m0[j] + g + 8 * hf, c = n0[j] + 8 * nt + 2 * tq;
                *reinterpret_cast<uint32_t *>(dst + r * TC_BT + c) = ssd_pack(tag, ws[j][nt][2 * hf], ws[j][nt][2 * hf + 1]);
            }
}

#endif
