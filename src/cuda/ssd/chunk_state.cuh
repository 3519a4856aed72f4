/* chunk_state.cuh - every chunk's own state S_c = X_c^T diag(w) B_c, w_j =
 * exp2(g'_last - g'_j) dt_j, all chunks in parallel, in f32 for
 * ssd_state_scan (state_pass.cuh):
 *   ssd_chunk_state_mma (any GPU, configurations split / split32) mma.sync
 *   ssd_chunk_state_mc  (sm_90a, configuration wgq) wgmma, the two heads of
 *                       a pair in a cluster sharing B by TMA multicast
 */
#ifndef SF_SSD_CHUNK_STATE_CUH
#define SF_SSD_CHUNK_STATE_CUH

#include "ssd/wg_common.cuh"

/* ------------------------------------------------------------------ */
/* chunk states alone (the split path: then ssd_state_scan)             */
/* ------------------------------------------------------------------ */
/* S_c = X_c^T diag(w) B_c for every chunk at once, w_j = exp2(g'_last -
 * g'_j) dt_j, in f32 to `cst` (P x N per (b, h, c)); the scan over chunks
 * is ssd_state_scan's.  ssd_state_pass walks the chunks of a (b, h, state
 * slice) in order with the state on chip, so its parallelism is batch x
 * heads x slices (2.7B f32 b8 L4096: 1.50 ms, latency-bound); here every
 * chunk is a block of its own.  Dense batches only (a chunk's tokens are
 * one sequence).  Grid (flattened): state slice fastest (P / 32 x N / 64),
 * then head, chunk, batch row.  Block 128 = 2 x 2 warps of 16 (P) x 32 (N),
 * the same tiles and three-stage cp.async staging as ssd_state_pass. */
template <typename T>
__global__ void __launch_bounds__(128) ssd_chunk_state_mma(const ssd_fwd_args a, float *cst) {
    constexpr int PS = 32, NS = 64, KT = sizeof(T) == 2 ? 64 : 32, ST = 3;
    constexpr int LDX = PS + ssd_pad<T>::KMAJ, LDB = NS + ssd_pad<T>::KMAJ;
    __shared__ __align__(16) T sX[ST][KT * LDX];
    __shared__ __align__(16) T sB[ST][KT * LDB];
    __shared__ __align__(16) float sw[256];

    const int npsl = (a.P + PS - 1) / PS, nnsl = (a.N + NS - 1) / NS;
    int64_t id = blockIdx.x;
    const int sl = (int)(id % (npsl * nnsl));
    id /= npsl * nnsl;
    const int h = (int)(id % a.H);
    id /= a.H;
    const int c = (int)(id % a.nc);
    const int b = (int)(id / a.nc);
    const int p0 = (sl / nnsl) * PS, n0 = (sl % nnsl) * NS;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int wm = warp & 1, wn = warp >> 1;
    const int prow0 = p0 + wm * 16, ncol0 = n0 + wn * 32;
    const int64_t t0 = (int64_t)c * a.Q, bh = (int64_t)b * a.H + h;
    const int Lc = (int)min((int64_t)a.Q, a.L - t0);
    const T *xb = (const T *)a.x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
    const T *Bb = (const T *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] +
                  (int64_t)(h / a.hpg) * a.Bs[2] + n0;
    const int pv = min(PS, a.P - p0), nv = min(NS, a.N - n0);
    const int nit = (Lc + KT - 1) / KT;

    /* sub-tile `it` -> buffer it % ST; always one (maybe empty) group */
    auto issue = [&](int it) {
        if (it < nit) {
            const int k0 = it * KT, kv = min(KT, Lc - k0);
            ssd_stage_async<T, 128>(sX[it % ST], LDX, xb + (int64_t)k0 * a.xs[1], a.xs[1], KT, PS, kv,
                                    pv, a.vec_x);
            ssd_stage_async<T, 128>(sB[it % ST], LDB, Bb + (int64_t)k0 * a.Bs[1], a.Bs[1], KT, NS, kv,
                                    nv, a.vec_B);
        }
        sf_cp_async_commit();
    };
    for (int u = 0; u < ST - 1; u++) issue(u);
    const float *gwc = a.gw + (bh * a.nc + c) * a.Q, *dtc = a.dtw + (bh * a.nc + c) * a.Q;
    const float glast = gwc[Lc - 1];
    for (int i = tid; i < a.Q; i += 128)
        sw[i] = i < Lc ? exp2f(fminf(glast - gwc[i], 0.0f)) * dtc[i] : 0.0f;

    float S[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) S[nt][e] = 0.0f;
    for (int it = 0; it < nit; it++) {
        issue(it + ST - 1);
        sf_cp_async_wait<ST - 1>();
        __syncthreads(); /* sub-tile `it` (and sw) visible to all warps */
        const T *cX = sX[it % ST], *cB = sB[it % ST];
        const int k0 = it * KT, kv = min(KT, Lc - k0);
        ssd_state_subtile<T, KT, LDX, LDB>(S, cX, cB, sw + k0, kv, wm, wn);
        __syncthreads(); /* buffer it % ST free for sub-tile it + ST */
    }
    sf_cp_async_wait<0>();
    ssd_acc_store<4>(S, cst + (bh * a.nc + c) * (int64_t)a.P * a.N, a.N, 1, prow0, ncol0, a.P, a.N);
}

/* The chunk states on wgmma for pairs of heads that share B (configuration
 * wgq): a cluster of two CTAs, heads h and h + 1 of one (b, chunk, P tile),
 * each CTA loading one 64-column half of the B tile by TMA and multicasting
 * it to both, so B leaves L2 once per pair instead of once per head (one CTA
 * per head ran at 80% of L2 throughput, B being two thirds of what it read).
 * Block 128 = one warpgroup; warp w owns state rows p0 + 16w .. +15; the
 * chunk in two halves of Q / 2 tokens (X padded for ldmatrix, the weights
 * w_j = exp2(g'_last - g'_j) dt_j) through ssd_state_half_wg.  Per half chunk one
 * mbarrier (expecting both 64-column boxes); a cluster barrier before the
 * second half's copies, so neither CTA overwrites the other's B while it is
 * still read.  Needs H and heads per group even (the host checks). */
template <typename T, int Q>
__global__ void __launch_bounds__(128, 3) /* launched in clusters of two (ssd_launch_ex) */
    ssd_chunk_state_mc(const ssd_fwd_args a, float *cst, const __grid_constant__ CUtensorMap mb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    constexpr int LDX = SsdWg<Q>::ST_LDX, QH = Q / 2;
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sraw = sf_smem_u32(ssd_smem);
    const uint32_t sB = (sraw + 1023u) & ~1023u;
    T *sX = reinterpret_cast<T *>(ssd_smem + (sB - sraw) + QH * 256);
    float *sw = reinterpret_cast<float *>(sX + QH * LDX);
    const uint32_t sXa = sf_smem_u32(sX), bars = sf_smem_u32(sw + QH); /* two mbarriers */

    const int ptiles = a.P / 64;
    const ssd_hpcb blk = ssd_block_hpcb(a, ptiles);
    const int h = blk.h, pt = blk.pt, c = blk.c, b = blk.b;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t t0 = (int64_t)c * Q, bh = (int64_t)b * a.H + h;
    const int Lc = (int)min((int64_t)Q, a.L - t0), p0 = pt * 64;
    const uint32_t rank = cluster_rank();
    const T *Xg = (const T *)a.x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
    const float *gwc = a.gw + (bh * a.nc + c) * Q, *dtc = a.dtw + (bh * a.nc + c) * Q;
    if (tid == 0) {
        mbar_init(bars, 1);
        mbar_init(bars + 8, 1);
        mbar_init_fence();
    }
    cluster_sync();     /* both CTAs' mbarriers initialised before any box lands */
    ssd_griddep_wait(); /* g' and dt come from the cumsum */
    const float glast = gwc[Q - 1];

    float acc[16][4];
#pragma unroll
    for (int i = 0; i < 16; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int j0 = half * QH, lv = Lc - j0; /* valid tokens of this half (may be <= 0) */
        const uint32_t bar = bars + 8 * half;
        if (half == 1) cluster_sync(); /* both CTAs done with the first half's B (and X) */
        if (tid == 0) {
            /* both boxes (64 columns x QH tokens each) land here; rows past
             * the sequence read as zeros */
            mbar_expect_tx(bar, 2u * QH * 128u);
            tma_load4_mc(sB + rank * (QH * 128), &mb, 64 * (int)rank, (int)(t0 + j0), h / a.hpg, b, bar, 0x3);
        }
        ssd_state_half_xw<QH, LDX>(sXa, Xg, a.xs[1], j0, lv, sw, glast, gwc, dtc, tid);
        sf_cp_async_wait<0>();
        mbar_wait(bar, 0);
        __syncthreads(); /* X, w and B of this half visible to every thread */

        ssd_state_half_wg<T, QH, LDX, 128>(acc, sX, sw, sB, warp);
    }
    ssd_h_store(acc, cst + (bh * a.nc + c) * (int64_t)a.P * a.N + (int64_t)(p0 + 16 * warp + g) * a.N, a.N, t);
#else
    (void)a;
    (void)cst;
    (void)mb;
#endif
}

#endif
