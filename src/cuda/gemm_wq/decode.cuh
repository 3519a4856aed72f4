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
 * Template options (the library runs none on SF_QW_ROWS codes, LG 8 on
 * SF_QW_TILED ones, and LG 8 with XG in configuration 'streamxg'):
 *   LG  codes stored tile by tile: each 16-row tile's chunk (64 bytes of
 *       each of its rows) one contiguous kilobyte; LG tiles a group, the
 *       group's chunk c its LG kilobytes side by side (LG 1: a tile's chunks
 *       contiguous), w_ts bytes a group (tiles padded to a whole group); and
 *       each 8 elements' codes in the order e0 e2 e4 e6 e1 e3 e5 e7, so that
 *       the pairs of dequant.cuh come out as (e0, e1), (e2, e3), ... and x
 *       is used in its own order (LG 8 is seqfuse.h's SF_QW_TILED);
 *   XG  (tiled codes) x's B fragments read from global memory (L1 cached)
 *       in the loop, no x in shared memory: a block starts streaming codes
 *       without first staging its whole K range of x;
 *   MB  the launch bound's least blocks an SM (0: none), a register cap;
 *   GP  groups a chunk (2 or 4: int4 groups of 64 / 32, int8 groups of 32;
 *       GGUF's blocks are 32), one m16 tile of x rows (NT 1), M <= 8 / GP,
 *       K whole chunks.
 *       A lane's slab holds one group (int4 g32) or half of one, so an mma
 *       step adds products of GP groups; to keep each group's sum apart for
 *       its scale, column n of the mma's B is (x row n / GP, group n % GP),
 *       x's values only in the k rows of that group and zeros elsewhere:
 *       C[r][n] is then row r's partial of that group and x row, scaled in
 *       f32 like the chunk's in the row (the same mma count: at M = 1 the
 *       columns were zero anyway).
 */
#ifndef SF_GEMM_WQ_DECODE_CUH
#define SF_GEMM_WQ_DECODE_CUH

#include "common/ptx.cuh"
#include "gemm_wq/dequant.cuh"
#include <cooperative_groups.h>
#include <stdint.h>

struct WqdArgs {
    const void *x;
    int64_t x_rs;
    const uint8_t *w;
    int64_t w_rb;          /* bytes per row of codes */
    int64_t w_ts;          /* LG: bytes per group of 16-row tiles of codes */
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

/* XG: 8 elements of x's row m at k straight from global memory (L1
 * cached: a block's warps read the same x), zeros past M or K */
template <typename T>
static __device__ __forceinline__ uint4 wqd_x_word(const WqdArgs &a, int m, int64_t k) {
    if (m >= a.M || k >= a.K) return make_uint4(0, 0, 0, 0);
    return __ldg((const uint4 *)((const T *)a.x + (int64_t)m * a.x_rs + k));
}

template <typename T, bool INT4, bool MIN, int MT, int NT, int WARPS, int U, int LG = 0, bool XG = false>
struct WqdTile {
    static constexpr int E = INT4 ? 32 : 16; /* elements of a lane's 16-byte slab */
    static constexpr int CK = 4 * E;         /* elements of K per chunk           */
    static constexpr int W8 = E / 8;         /* 8-element words of x per slab     */
    static constexpr int BR = WARPS * MT * 16;
    static constexpr int NTHR = WARPS * 32;
    /* shared memory: x [cps][W8][NT][32] uint4, then the chunks' sums of x
     * [cps][16] f32 (mins only), then the partial sums [16][BR] f32 */
    static __host__ __device__ constexpr size_t x_bytes(int cps) { return XG ? 0 : (size_t)cps * W8 * NT * 32 * 16; }
    static __host__ __device__ constexpr size_t sx_bytes(int cps) { return MIN ? (size_t)cps * 16 * 4 : 0; }
    static __host__ __device__ constexpr size_t smem(int cps) {
        return x_bytes(cps) + sx_bytes(cps) + (size_t)16 * BR * 4;
    }
};

/* GP > 1: B slot (tile nt, lane ln) carries x row wqd_xrow, and only where
 * wqd_xlive: its column's group is the one of the k rows it holds (those of
 * lane ln & 3's slab). */
template <int GP> static __device__ __forceinline__ int wqd_xrow(int nt, int ln) {
    return GP > 1 ? (ln >> 2) / GP : nt * 8 + (ln >> 2);
}
template <int GP> static __device__ __forceinline__ bool wqd_xlive(int ln) {
    return GP == 1 || (ln >> 2) % GP == (ln & 3) / (4 / GP);
}

template <typename T, bool INT4, bool MIN, int MT, int NT, int WARPS, int U, int LG = 0, bool XG = false, int MB = 0,
          int GP = 1>
__global__ void __launch_bounds__(WARPS * 32, MB) gemm_wq_decode_kernel(const WqdArgs a) {
    using Tl = WqdTile<T, INT4, MIN, MT, NT, WARPS, U, LG, XG>;
    static_assert(!XG || LG > 0, "XG: tiled codes, x in its own order");
    static_assert(GP == 1 || (NT == 1 && (GP == 2 || GP == 4)), "GP: 2 or 4 groups a chunk, one tile of x rows");
    constexpr int CS = LG ? LG * 1024 : 64; /* bytes from a row's chunk to its next */
    constexpr int GS = GP > 1 ? 2 : 1;      /* scales a row a chunk a lane: its two columns' groups */
    constexpr int E = Tl::E, CK = Tl::CK, W8 = Tl::W8, BR = Tl::BR, NTHR = Tl::NTHR;
    extern __shared__ __align__(16) unsigned char smem[];
    uint4 *xf = (uint4 *)smem;
    float *sxs = (float *)(smem + Tl::x_bytes(a.cps));
    float *part = (float *)(smem + Tl::x_bytes(a.cps) + Tl::sx_bytes(a.cps));

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int M = a.M, N = a.N, K = a.K;
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
            constexpr int LG1 = LG ? LG : 1; /* no division by zero in the unused arm */
            wrow[i][h] = (LG ? a.w + ((n >> 4) / LG1) * a.w_ts + ((n >> 4) % LG1) * 1024 + (n & 15) * 64 : a.w + n * a.w_rb) +
                         (int64_t)kc0 * CS + c * 16;
            srow[i][h] = a.scales + n;
            mrow[i][h] = MIN ? a.mins + n : a.scales;
        }
    const int gsh = a.group / CK == 2 ? 1 : 0; /* log2(chunks per group) */
    const int g0 = (2 * c) % GP;               /* GP > 1: the group of this lane's first C column */
    uint4 wb[U][MT][2];
    uint16_t sb[U][MT][2][GS], mb[U][MT][2][GS];
    auto issue = [&](int u, int ch) {
        ch = min(ch, nch - 1);
        const int64_t jo = GP > 1 ? ((int64_t)(kc0 + ch) * GP + g0) * N : (int64_t)((kc0 + ch) >> gsh) * N;
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                wb[u][i][h] = wqd_ld_stream(wrow[i][h] + (int64_t)ch * CS);
#pragma unroll
                for (int j = 0; j < GS; j++) {
                    sb[u][i][h][j] = __ldg(srow[i][h] + jo + j * N);
                    if (MIN) mb[u][i][h][j] = __ldg(mrow[i][h] + jo + j * N);
                }
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
    for (int e = tid; !XG && e < nch * W8 * NT * 32; e += NTHR) {
        const int ln = e % 32, nt = (e / 32) % NT, w = (e / (32 * NT)) % W8, ch = e / (32 * NT * W8);
        const int m = wqd_xrow<GP>(nt, ln);
        const int64_t k = (int64_t)(kc0 + ch) * CK + (ln & 3) * E + 8 * w;
        const bool ok = m < M && k < K && wqd_xlive<GP>(ln);
        sf_cp_async16_zfill(xf + e, ok ? xg + (int64_t)m * a.x_rs + k : xg, ok ? 16 : 0);
    }
    sf_cp_async_commit();
    sf_cp_async_wait<0>();
    __syncthreads();
    for (int e = tid; (MIN || !XG) && e < nch * NT * 32; e += NTHR) { /* whole warps: the shuffles below */
        const int ln = e % 32, nt = (e / 32) % NT, ch = e / (32 * NT);
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < W8; w++) {
            uint4 &q = xf[((ch * W8 + w) * NT + nt) * 32 + ln];
            const uint4 v = !XG                    ? q
                            : wqd_xlive<GP>(ln) ? wqd_x_word<T>(a, wqd_xrow<GP>(nt, ln), (int64_t)(kc0 + ch) * CK + (ln & 3) * E + 8 * w)
                                                : make_uint4(0, 0, 0, 0);
            if (MIN) {
                const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int j = 0; j < 4; j++)
                    sum += wq_bits<T>::tof((uint16_t)(u[j] & 0xffff)) + wq_bits<T>::tof((uint16_t)(u[j] >> 16));
            }
            if (!XG && LG == 0) { /* the row layout's pairs (e_j, e_j+4) */
                uint32_t p[4];
                wq_x_pairs(v, p);
                q = make_uint4(p[0], p[1], p[2], p[3]);
            }
        }
        if (MIN) {
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            if ((ln & 3) == 0) sxs[ch * 16 + nt * 8 + (ln >> 2)] = sum;
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
            const uint4(&cw)[MT][2] = wb[u]; /* refilled once this chunk is done */
            float s[MT][2][GS], mn[MT][2][GS]; /* GP > 1: [.][.][j] for C column 2c + j */
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int j = 0; j < GS; j++) {
                        s[i][h][j] = wq_bits<T>::tof(sb[u][i][h][j]);
                        mn[i][h][j] = MIN ? wq_bits<T>::tof(mb[u][i][h][j]) : 0.0f;
                    }

            uint32_t bx[NT][E / 2];
#pragma unroll
            for (int w = 0; w < W8; w++)
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const uint4 q = !XG ? xf[((ch * W8 + w) * NT + t) * 32 + lane]
                                    : wqd_xlive<GP>(lane)
                                        ? wqd_x_word<T>(a, wqd_xrow<GP>(t, lane), (int64_t)(kc0 + ch) * CK + c * E + 8 * w)
                                        : make_uint4(0, 0, 0, 0);
                    bx[t][4 * w + 0] = q.x, bx[t][4 * w + 1] = q.y, bx[t][4 * w + 2] = q.z, bx[t][4 * w + 3] = q.w;
                }
            float sx[NT][2];
#pragma unroll
            for (int t = 0; t < NT; t++) {
                sx[t][0] = MIN ? sxs[ch * 16 + t * 8 + 2 * c] : 0.0f;
                sx[t][1] = MIN ? sxs[ch * 16 + t * 8 + 2 * c + 1] : 0.0f;
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
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int e = 0; e < 4; e++) { /* C[row h][column 2c + j] */
                        const int h = e >> 1, j = GS > 1 ? e & 1 : 0;
                        acc[i][t][e] = fmaf(s[i][h][j], tmp[t][e], acc[i][t][e]);
                        if (MIN) acc[i][t][e] = fmaf(mn[i][h][j], sx[t][e & 1], acc[i][t][e]);
                    }
            }
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
            if (GP == 1) {
                part[m * BR + r] = acc[i][t][0];
                part[(m + 1) * BR + r] = acc[i][t][1];
                part[m * BR + r + 8] = acc[i][t][2];
                part[(m + 1) * BR + r + 8] = acc[i][t][3];
            } else { /* columns 2c, 2c + 1 are groups of x row 2c / GP: their sum, over the quad at GP 4 */
                float v0 = acc[i][t][0] + acc[i][t][1], v1 = acc[i][t][2] + acc[i][t][3];
                if (GP == 4) {
                    v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
                    v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
                }
                if (GP == 2 || (c & 1) == 0) {
                    const int mx = 2 * c / GP;
                    part[mx * BR + r] = v0;
                    part[mx * BR + r + 8] = v1;
                }
            }
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
