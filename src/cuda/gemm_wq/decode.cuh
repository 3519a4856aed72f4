/* decode.cuh - the streaming decode kernel of sf_gemm_wq (M <= 16 rows of x).
 *
 * A decode step reads every byte of the codes once and does little else, so
 * the kernel is built around keeping many 16-byte loads of W in flight:
 *   - no shared-memory staging of W and no barrier in the main loop: a lane
 *     loads 16 contiguous bytes of one row of W (32 int4 or 16 int8 codes,
 *     its "slab") straight into registers, U chunks ahead, and uses them as
 *     mma.sync m16n8k16 A fragments (W rows = the 16 output features, x rows
 *     the 8 columns of an n8 tile).  A chunk is 64 bytes of each of 16 rows:
 *     the 4 lanes of a quad hold its 4 slabs, lane c providing the mma's k
 *     pairs 2c, 2c+1 and 2c+8, 2c+9 of each step from its own slab.  The
 *     order of k inside an mma is free as long as x follows it, so x is
 *     stored in shared memory once per block already in that order (each
 *     lane reads one 16-byte word per 8 elements, conflict free);
 *   - the codes become exact integers (dequant.cuh) and each chunk's f32
 *     product is scaled by its group's scale (and min times the chunk's sum
 *     of x) in f32: the numerics are those of the tiled kernel (gemm_wq.cu);
 *   - K is split across the blocks of a thread-block cluster (up to 8) so
 *     that narrow W (N = 4096) still fills the GPU; the blocks' partial sums
 *     meet through distributed shared memory, each block reducing a slice of
 *     the outputs in a fixed order (deterministic, no workspace).  Before
 *     sm_90 (no clusters) one block takes all of K.
 * A chunk holds whole groups (group_size a multiple of 4 slabs: 128 for
 * int4, 64 or 128 for int8); other groups go to the tiled kernels.
 * Template options the library's row leaves off (bench/harness/gemv_wq.cu
 * times them): LT reads codes stored tile by tile (each 16-row tile's chunk,
 * 64 bytes of each of its rows, one contiguous kilobyte; w_ts bytes a tile)
 * instead of row by row; BULK (with LT, sm_90) has lane 0 of each warp copy
 * its tile's chunks by the bulk copy engine into a ring of U kilobytes in
 * shared memory, completing on one mbarrier a slot, instead of U chunks in
 * registers; XC keeps x in shared memory for its M rows only (lanes of rows
 * past M read zeros) instead of the whole n8 / n16 tile.
 */
#ifndef SF_GEMM_WQ_DECODE_CUH
#define SF_GEMM_WQ_DECODE_CUH

#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "gemm_wq/dequant.cuh"
#include <cooperative_groups.h>
#include <stdint.h>

struct WqdArgs {
    const void *x;
    int64_t x_rs;
    const uint8_t *w;
    int64_t w_rb;          /* bytes per row of codes */
    int64_t w_ts;          /* LT: bytes per 16-row tile of codes */
    const uint16_t *scales, *mins;
    const void *bias;
    int64_t bias_s;
    int bias_f32;
    void *y;
    int64_t y_rs;
    int M, N, K;
    int group;
    int cps;               /* chunks per block of the cluster (K split) */
};

static __device__ __forceinline__ uint4 wqd_ld_stream(const void *p) {
    uint4 v;
#ifdef WQD_L2_256
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
#else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
#endif
    return v;
}

template <typename T, bool INT4, bool MIN, int MT, int NT, int WARPS, int U, bool LT = false, bool BULK = false,
          bool XC = false>
struct WqdTile {
    static constexpr int E = INT4 ? 32 : 16; /* elements of a lane's 16-byte slab */
    static constexpr int CK = 4 * E;         /* elements of K per chunk           */
    static constexpr int W8 = E / 8;         /* 8-element words of x per slab     */
    static constexpr int BR = WARPS * MT * 16;
    static constexpr int NTHR = WARPS * 32;
    /* shared memory: x [cps][W8][NT][32] uint4, then the chunks' sums of x
     * [cps][16] f32 (mins only), then the partial sums [16][BR] f32 */
    /* XC: x for its M rows only ([cps][W8][rows][4] uint4; lanes of rows
     * past M read zeros) instead of the whole n8 / n16 tile */
    static __host__ __device__ constexpr int rows(int M) { return XC ? M : NT * 8; }
    static __host__ __device__ constexpr size_t x_bytes(int cps, int M) { return (size_t)cps * W8 * rows(M) * 4 * 16; }
    static __host__ __device__ constexpr size_t sx_bytes(int cps) { return MIN ? (size_t)cps * 16 * 4 : 0; }
    /* BULK: each warp's ring of U 1 KB chunks, then its U mbarriers */
    static constexpr size_t ring_bytes = BULK ? (size_t)WARPS * U * (1024 + 8) : 0;
    static __host__ __device__ constexpr size_t smem(int cps, int M) {
        return x_bytes(cps, M) + sx_bytes(cps) + (size_t)16 * BR * 4 + ring_bytes;
    }
};

template <typename T, bool INT4, bool MIN, int MT, int NT, int WARPS, int U, bool LT = false, bool BULK = false,
          bool XC = false>
__global__ void __launch_bounds__(WARPS * 32) gemm_wq_decode_kernel(const WqdArgs a) {
    using Tl = WqdTile<T, INT4, MIN, MT, NT, WARPS, U, LT, BULK, XC>;
    static_assert(!BULK || (LT && MT == 1 && U <= 32), "the bulk ring holds one tile of tiled codes a warp");
    constexpr int CS = LT ? 1024 : 64; /* bytes from a row's chunk to its next */
    constexpr int E = Tl::E, CK = Tl::CK, W8 = Tl::W8, BR = Tl::BR, NTHR = Tl::NTHR;
    extern __shared__ __align__(16) unsigned char smem[];
    const int M = a.M, N = a.N, K = a.K;
    const int RS = Tl::rows(M);
    uint4 *xf = (uint4 *)smem;
    float *sxs = (float *)(smem + Tl::x_bytes(a.cps, M));
    float *part = (float *)(smem + Tl::x_bytes(a.cps, M) + Tl::sx_bytes(a.cps));
    unsigned char *ring = smem + Tl::x_bytes(a.cps, M) + Tl::sx_bytes(a.cps) + (size_t)16 * BR * 4;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int nchk = (int)(((int64_t)K + CK - 1) / CK);
    const int kc0 = (int)blockIdx.y * a.cps;
    const int nch = max(0, min(nchk, kc0 + a.cps) - kc0);
    const int n0 = blockIdx.x * BR;
    const int rw = n0 + warp * MT * 16 + (lane >> 2); /* row of h = 0, tile 0 */
    const int c = lane & 3;

    /* W, scales (and mins) of chunk ch into buffer slot u, without
     * predicates: rows past N read row N - 1 (their sums are never stored)
     * and chunks past this block's range its last chunk (never used).  The
     * per-row pointers are formed once; a group holds 1 or 2 chunks, so its
     * row of scales is a shift away (no division). */
    const uint8_t *wrow[MT][2];
    const uint16_t *srow[MT][2], *mrow[MT][2];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t n = min(rw + i * 16 + 8 * h, N - 1);
            wrow[i][h] = (LT ? a.w + (n >> 4) * a.w_ts + (n & 15) * 64 : a.w + n * a.w_rb) + (int64_t)kc0 * CS + c * 16;
            srow[i][h] = a.scales + n;
            mrow[i][h] = MIN ? a.mins + n : a.scales;
        }
    const int gsh = a.group / CK == 2 ? 1 : 0; /* log2(chunks per group) */
    uint4 wb[BULK ? 1 : U][MT][2];
    uint16_t sb[U][MT][2], mb[U][MT][2];
    /* BULK (tiled codes: a tile's chunk is one contiguous kilobyte): lane 0
     * of each warp has chunk ch copied into slot u of the warp's ring by the
     * bulk copy engine; completion is phase (ch / U) of the slot's mbarrier */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const uint32_t rs = (uint32_t)__cvta_generic_to_shared(ring) + (uint32_t)warp * U * 1024;
    const uint8_t *tb = a.w + (int64_t)(min(n0 + warp * 16, N - 1) >> 4) * a.w_ts + (int64_t)kc0 * CS;
    const uint32_t rb = (uint32_t)__cvta_generic_to_shared(ring) + (uint32_t)(WARPS * U * 1024 + warp * U * 8);
    if (BULK) {
        if (lane < U) sf_wg::mbar_init(rb + 8 * lane, 1);
        sf_wg::mbar_init_fence();
        __syncwarp();
    }
#endif
    auto issue = [&](int u, int ch) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        if (BULK && lane == 0 && ch < nch) {
            sf_wg::mbar_expect_tx(rb + 8 * u, 1024);
            sf_wg::bulk_copy_g2s(rs + u * 1024, tb + (int64_t)ch * CS, 1024, rb + 8 * u);
        }
#endif
        ch = min(ch, nch - 1);
        const int64_t jo = (int64_t)((kc0 + ch) >> gsh) * N;
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if (!BULK) wb[BULK ? 0 : u][i][h] = wqd_ld_stream(wrow[i][h] + (int64_t)ch * CS);
                sb[u][i][h] = __ldg(srow[i][h] + jo);
                if (MIN) mb[u][i][h] = __ldg(mrow[i][h] + jo);
            }
    };
    if (nch > 0)
#pragma unroll
        for (int u = 0; u < U; u++) issue(u, u);

    /* x of this block's K range into its fragment slots (zeros past M and
     * K) by cp.async, all in flight at once; then each slot permuted in
     * place into the pairs of dequant.cuh, with the chunks' sums of x for
     * the mins (a quad holds one row's chunk: summed in a fixed order) */
    const T *xg = (const T *)a.x;
    for (int e = tid; e < nch * W8 * RS * 4; e += NTHR) {
        const int cq = e % 4, m = (e / 4) % RS, w = (e / (4 * RS)) % W8, ch = e / (4 * RS * W8);
        const int64_t k = (int64_t)(kc0 + ch) * CK + cq * E + 8 * w;
        const bool ok = m < M && k < K;
        sf_cp_async16_zfill(xf + e, ok ? xg + (int64_t)m * a.x_rs + k : xg, ok ? 16 : 0);
    }
    sf_cp_async_commit();
    sf_cp_async_wait<0>();
    __syncthreads();
    /* whole warps (the shuffles below): the count rounded up to 32 */
    for (int e = tid; e < (nch * RS * 4 + 31) / 32 * 32; e += NTHR) {
        const bool live = e < nch * RS * 4;
        const int cq = e % 4, m = (e / 4) % RS, ch = e / (4 * RS);
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < W8; w++) {
            if (!live) break;
            uint4 &q = xf[((ch * W8 + w) * RS + m) * 4 + cq];
            const uint4 v = q;
            if (MIN) {
                const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int j = 0; j < 4; j++)
                    sum += wq_bits<T>::tof((uint16_t)(u[j] & 0xffff)) + wq_bits<T>::tof((uint16_t)(u[j] >> 16));
            }
            uint32_t p[4];
            wq_x_pairs(v, p);
            q = make_uint4(p[0], p[1], p[2], p[3]);
        }
        if (MIN) {
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            if (live && cq == 0) sxs[ch * 16 + m] = sum;
        }
    }
    __syncthreads();

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][t][e] = 0.0f;

    for (int ch0 = 0; ch0 < nch; ch0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int ch = ch0 + u;
            if (ch >= nch) break;
            uint4 cw[MT][2]; /* refilled once this chunk is done */
            if (BULK) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
                sf_wg::mbar_wait(rb + 8 * u, (uint32_t)(ch / U) & 1u);
#endif
#pragma unroll
                for (int h = 0; h < 2; h++)
                    cw[0][h] = *(const uint4 *)(ring + (size_t)warp * U * 1024 + u * 1024 + ((lane >> 2) + 8 * h) * 64 + c * 16);
            } else {
#pragma unroll
                for (int i = 0; i < MT; i++)
#pragma unroll
                    for (int h = 0; h < 2; h++) cw[i][h] = wb[BULK ? 0 : u][i][h];
            }
            float s[MT][2], mn[MT][2];
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    s[i][h] = wq_bits<T>::tof(sb[u][i][h]);
                    mn[i][h] = MIN ? wq_bits<T>::tof(mb[u][i][h]) : 0.0f;
                }

            uint32_t bx[NT][E / 2];
#pragma unroll
            for (int w = 0; w < W8; w++)
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const int m = t * 8 + (lane >> 2); /* rows past those stored are 0 */
                    const uint4 q = m < RS ? xf[((ch * W8 + w) * RS + m) * 4 + c] : make_uint4(0, 0, 0, 0);
                    bx[t][4 * w + 0] = q.x, bx[t][4 * w + 1] = q.y, bx[t][4 * w + 2] = q.z, bx[t][4 * w + 3] = q.w;
                }
            float sx[NT][2];
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int m = t * 8 + 2 * c; /* XC: sums of rows past M are not stored */
                sx[t][0] = MIN && (!XC || m < M) ? sxs[ch * 16 + m] : 0.0f;
                sx[t][1] = MIN && (!XC || m + 1 < M) ? sxs[ch * 16 + m + 1] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < MT; i++) {
                uint32_t pa[2][E / 2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t v[4] = {cw[i][h].x, cw[i][h].y, cw[i][h].z, cw[i][h].w};
                    if (INT4) {
#pragma unroll
                        for (int w = 0; w < 4; w++) wq_int4_pairs<T>(v[w], MIN ? 0 : 8, &pa[h][4 * w]);
                    } else {
#pragma unroll
                        for (int w = 0; w < 2; w++) wq_int8_pairs<T>(v[2 * w], v[2 * w + 1], !MIN, &pa[h][4 * w]);
                    }
                }
                /* two chains of mma steps, halving the dependent latency */
                float tmp[NT][4], tm2[NT][4];
#pragma unroll
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int e = 0; e < 4; e++) tmp[t][e] = tm2[t][e] = 0.0f;
#pragma unroll
                for (int st = 0; st < E / 4; st++) {
                    const uint32_t af[4] = {pa[0][2 * st], pa[1][2 * st], pa[0][2 * st + 1], pa[1][2 * st + 1]};
#pragma unroll
                    for (int t = 0; t < NT; t++)
                        sf_mma16<T>::run(st & 1 ? tm2[t] : tmp[t], af, bx[t][2 * st], bx[t][2 * st + 1]);
                }
#pragma unroll
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int e = 0; e < 4; e++) tmp[t][e] += tm2[t][e];
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    acc[i][t][0] = fmaf(s[i][0], tmp[t][0], acc[i][t][0]);
                    acc[i][t][1] = fmaf(s[i][0], tmp[t][1], acc[i][t][1]);
                    acc[i][t][2] = fmaf(s[i][1], tmp[t][2], acc[i][t][2]);
                    acc[i][t][3] = fmaf(s[i][1], tmp[t][3], acc[i][t][3]);
                    if (MIN) {
                        acc[i][t][0] = fmaf(mn[i][0], sx[t][0], acc[i][t][0]);
                        acc[i][t][1] = fmaf(mn[i][0], sx[t][1], acc[i][t][1]);
                        acc[i][t][2] = fmaf(mn[i][1], sx[t][0], acc[i][t][2]);
                        acc[i][t][3] = fmaf(mn[i][1], sx[t][1], acc[i][t][3]);
                    }
                }
            }
            if (BULK) __syncwarp(); /* every lane has read slot u */
            issue(u, ch + U);
        }
    }

    /* partial sums [m][row of the block], then each block of the cluster
     * reduces its slice of them over the cluster in rank order */
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int r = warp * MT * 16 + i * 16 + (lane >> 2), m = t * 8 + 2 * c;
            part[m * BR + r] = acc[i][t][0];
            part[(m + 1) * BR + r] = acc[i][t][1];
            part[m * BR + r + 8] = acc[i][t][2];
            part[(m + 1) * BR + r + 8] = acc[i][t][3];
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int S = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    auto peer = [&](int q) { return cluster.map_shared_rank(part, q); };
#else /* no clusters before sm_90: the host launches one block along K */
    __syncthreads();
    const int S = 1, rank = 0;
    auto peer = [&](int) { return part; };
#endif
    const int tot = M * BR, per = (tot + S - 1) / S;
    T *yg = (T *)a.y;
    for (int e = rank * per + tid; e < min(tot, (rank + 1) * per); e += NTHR) {
        const int m = e / BR, r = e % BR, n = n0 + r;
        if (n >= N) continue;
        float v = 0.0f;
        for (int q = 0; q < S; q++) v += peer(q)[m * BR + r];
        if (a.bias) {
            const int64_t off = (int64_t)n * a.bias_s;
            v += a.bias_f32 ? ((const float *)a.bias)[off] : wq_bits<T>::tof(((const uint16_t *)a.bias)[off]);
        }
        yg[(int64_t)m * a.y_rs + n] = wq_bits<T>::fromf(v);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cluster.sync(); /* peers may still read this block's partial sums */
#endif
}

#endif
