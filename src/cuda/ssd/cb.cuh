/* cb.cuh - S = C B^T once per (b, group, chunk) as 64 x 64 f32 tiles on and
 * below the diagonal (sm_90a wgmma), read by every head's output block of
 * ssd_out_wg instead of a product per head (configurations wgq, fuq).
 */
#ifndef SF_SSD_CB_CUH
#define SF_SSD_CB_CUH

#include "ssd/wg_common.cuh"

/* S_mk = C_m B_k^T over the state dimension: the 64 x 64 tile (m, k) of a
 * chunk for the output kernel, row block m (descriptor dCm) against B rows
 * of block k, from the swizzled C / B tiles at sC (B at sC + Q * 256). */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <typename T, int Q>
static __device__ __forceinline__ void ssd_cb_tile(float (&S)[8][4], uint64_t dCm, uint32_t sC, int k) {
    using namespace sf_wg;
    const uint64_t dBk = wg_desc(sC + (Q * 256) + k * 8192, 16, 1024);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        Wg<T, 64>::ss(&S[0][0], wg_desc_add(dCm, (kk >> 2) * (Q * 128) + (kk & 3) * 32),
                      wg_desc_add(dBk, (kk >> 2) * (Q * 128) + (kk & 3) * 32), kk > 0);
    wg_commit();
}
#endif

/* The tiles of C B^T on and below the diagonal, once per (b, group, chunk)
 * for every head of the group (configurations wgq, fuq): tile (m, k) at
 * cb + ((b G + grp) nchunks + c) NTILE 4096 + (m (m + 1) / 2 + k) 4096 in
 * accumulator-fragment order, float4 (nt 128 + thread of the warpgroup), so
 * the output kernel's warpgroup reads its S fragments as they were computed
 * here (the same products: the same values as ssd_out_wg's own).  Grid
 * (flattened): chunk fastest, then group, batch row; block 256 = two
 * warpgroups, row blocks split as in ssd_out_wg.  The forward's first
 * kernel (a plain launch: the previous forward's output kernel is done with
 * the tiles); it lets the cumsum, which does not read its output, start at
 * once. */
template <typename T, int Q>
__global__ void __launch_bounds__(256, 1) ssd_cb_wg(const ssd_fwd_args a, float *cb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    typedef SsdWg<Q> L;
    constexpr int NRB = Q / 64, NR = NRB == 4 ? 2 : 1;
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sC = (sf_smem_u32(ssd_smem) + 1023u) & ~1023u;
    const int G = a.H / a.hpg;
    int64_t id = blockIdx.x;
    const int c = (int)(id % a.nc);
    id /= a.nc;
    const int grp = (int)(id % G), b = (int)(id / G);
    const int64_t t0 = (int64_t)c * Q;
    const int Lc = (int)min((int64_t)Q, a.L - t0);
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), lt = tid & 127;
    ssd_griddep_launch();
    load_tile_sw_rs<Q, 128, 256>(sC, (const T *)a.C + (int64_t)b * a.Cs[0] + t0 * a.Cs[1] + (int64_t)grp * a.Cs[2],
                                 a.Cs[1], Lc, a.N / 8, tid);
    load_tile_sw_rs<Q, 128, 256>(sC + Q * 256,
                                 (const T *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] + (int64_t)grp * a.Bs[2],
                                 a.Bs[1], Lc, a.N / 8, tid);
    sf_cp_async_commit();
    sf_cp_async_wait<0>();
    fence_async_smem();
    __syncthreads();
    float *dst = cb + (((int64_t)b * G + grp) * a.nc + c) * (L::NTILE * 4096) + 4 * lt;
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const int m = r == 0 ? wg : NRB - 1 - wg;
        if (64 * m >= Lc) continue;
        const uint64_t dCm = wg_desc(sC + m * 8192, 16, 1024);
        for (int k = 0; k <= m; k++) {
            float S[8][4];
            ssd_cb_tile<T, Q>(S, dCm, sC, k);
            wg_wait<0>();
            reg_fence(S);
            float *d = dst + (m * (m + 1) / 2 + k) * 4096;
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
                *reinterpret_cast<float4 *>(d + nt * 512) = make_float4(S[nt][0], S[nt][1], S[nt][2], S[nt][3]);
        }
    }
#else
    (void)a;
    (void)cb;
#endif
}

#endif
