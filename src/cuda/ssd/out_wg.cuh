/* out_wg.cuh - stage 3 on sm_90a (configurations wgq, fuq): the fused
 * output y = exp(g_i) C_i H_c + sum_j (C_i . B_j) exp(g_i - g_j) dt_j x_j
 * + D x_i, gated by silu(z), on wgmma (DESIGN.md section 1).  Per (b, chunk,
 * 64 columns of P, head): two warpgroups, each owning two 64-row blocks of
 * the chunk chosen so both do the same number of tiles ((0, 3) and (1, 2) at
 * chunk 256):
 *   O  = diag(exp2 g'_i) C H^T       (wgmma ss)
 *   P  = S * decay * dt              (S = C B^T from cb.cuh; masked on the
 *                                     diagonal tile)
 *   O += P X_k                       (wgmma rs, X MN-major)
 * then D x from the shared X tile, the z gate, store.  Decay off the
 * diagonal without an exp2 per element: for rows i of block m and keys j of
 * an earlier tile k, with r = 64k + 63 (k's last key),
 *   exp2(g'_i - g'_j) = exp2(g'_i - g'_r) * exp2(g'_r - g'_j),
 * both factors <= 1 (g' does not increase), so neither overflows and a
 * factor that underflows only does so where the product is below f32's
 * range anyway.  The column factor times dt_j depends on j alone (sw[j]),
 * computed once per head; the row factor is two exp2 per thread per tile.
 */
#ifndef SF_SSD_OUT_WG_CUH
#define SF_SSD_OUT_WG_CUH

#include "ssd/wg_common.cuh"

/* Grid: one block per SM, each taking a contiguous range of the (b, chunk,
 * P tile, head) units (ssd_out_unit) as runs of heads of one group, so no SM
 * has more than one unit above the average (blocks of a fixed 40 heads left
 * 4 of 132 SMs idle at b 1 L 16384).  Block 256 = two warpgroups.  The runs
 * of one chunk share C through L2; S = C B^T comes from ssd_cb_wg's buffer
 * `cb`, each warpgroup's tiles in its order through a two-slot ring of bulk
 * copies (one 16 KB copy a tile, issued two tiles ahead by the warpgroup's
 * first thread). */
template <typename T, int Q>
__global__ void __launch_bounds__(256, 1) ssd_out_wg(const ssd_fwd_args a, const float *cb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    typedef SsdWg<Q> L;
    constexpr int NRB = Q / 64, NR = NRB == 4 ? 2 : 1;
    static_assert(NRB == 2 || NRB == 4, "chunk 128 or 256");
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sraw = sf_smem_u32(ssd_smem);
    const uint32_t base = (sraw + 1023u) & ~1023u;
    const uint32_t sC = base + L::O_C, sX0 = base + L::O_X, sH = base + L::O_H;
    unsigned char *gbase = ssd_smem + (base - sraw);
    float *sv = reinterpret_cast<float *>(gbase + L::O_V); /* g'[2][Q], dt[2][Q], sw[Q] */
    float *sw = sv + 4 * Q;

    /* this block's units */
    const int64_t U = (int64_t)a.batch * a.nc * (a.P / 64) * a.H;
    int64_t u = blockIdx.x * U / gridDim.x;
    const int64_t uend = (blockIdx.x + 1) * U / gridDim.x;
    mbar_init_stages(base + L::O_BAR, 4);
    int nbase = 0; /* S tiles of the block's earlier runs (the ring's slots and phases go on) */
    for (bool first = true;; first = false) {
        if (u >= uend) break;
        const ssd_out_blk blk = ssd_out_unit(a, u, uend);
        u += blk.nh;
        if (!first) __syncthreads(); /* the last run's buffers and S slots are read */
        const int grp = blk.grp, pt = blk.pt, c = blk.c, b = blk.b, h_begin = blk.h_begin, nh = blk.nh;
        if (nh <= 0) return;
        const int64_t t0 = (int64_t)c * Q;
        const int Lc = (int)min((int64_t)Q, a.L - t0), p0 = pt * 64;
        /* the warpgroup index through a shuffle from lane 0: known warp-uniform,
         * so descriptors built from it stay in uniform registers */
        const int tid = threadIdx.x, warp = tid >> 5, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), wl = warp & 3;
        const int lane = tid & 31, g = lane >> 2, t = lane & 3;
        const T *Cg = (const T *)a.C + (int64_t)b * a.Cs[0] + t0 * a.Cs[1] + (int64_t)grp * a.Cs[2];
        const int64_t PN = (int64_t)a.P * a.N;

        /* head i's X, H and vectors; X / vectors into buffer i & 1 */
        auto issue_head = [&](int i) {
            const int h = h_begin + i, buf = i & 1;
            const int64_t bh = (int64_t)b * a.H + h;
            const T *Xg = (const T *)a.x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
            load_tile_sw_rs<Q, 64, 256>(sX0 + buf * (Q * 128), Xg, a.xs[1], Lc, 8, tid);
            load_tile_sw_rs<64, 128, 256>(sH, (const T *)a.states + (bh * a.nc + c) * PN + (int64_t)p0 * a.N,
                                          a.N, 64, a.N / 8, tid);
            const float *gsrc = a.gw + (bh * a.nc + c) * Q, *dsrc = a.dtw + (bh * a.nc + c) * Q;
            if (tid < Q / 4) {
                cp_async16_u32(sf_smem_u32(sv + buf * Q) + 16 * tid, gsrc + 4 * tid, 16);
                cp_async16_u32(sf_smem_u32(sv + (2 + buf) * Q) + 16 * tid, dsrc + 4 * tid, 16);
            }
        };
        /* this warpgroup's row blocks */
        int mblk[NR];
        mblk[0] = wg;
        if (NR == 2) mblk[NR - 1] = NRB - 1 - wg;

        /* the warpgroup's S tiles per head, in the order the loop below
         * takes them (row block mblk[0]'s k = 0..m, then mblk[1]'s; a row block
         * past the chunk's end has none), the ring's slots and mbarriers, and
         * tile n of the block's sequence into slot n & 1 */
        const int m0 = mblk[0], m1 = mblk[NR - 1];
        const int tph = (64 * m0 < Lc ? m0 + 1 : 0) + (NR == 2 && 64 * m1 < Lc ? m1 + 1 : 0), ntile = nh * tph;
        const uint32_t sS = base + L::O_S + wg * 32768, barS = base + L::O_BAR + wg * 16;
        const float *cbc = cb + (((int64_t)b * (a.H / a.hpg) + grp) * a.nc + c) * (L::NTILE * 4096);
        auto issue_s = [&](int n) {
            const int pos = n % tph, m = pos <= m0 ? m0 : m1, k = pos <= m0 ? pos : pos - m0 - 1;
            const uint32_t bar = barS + 8 * ((nbase + n) & 1);
            mbar_expect_tx(bar, 16384);
            bulk_copy_g2s(sS + ((nbase + n) & 1) * 16384, cbc + (m * (m + 1) / 2 + k) * 4096, 16384, bar);
        };

        load_tile_sw_rs<Q, 128, 256>(sC, Cg, a.Cs[1], Lc, a.N / 8, tid);
        ssd_griddep_wait(); /* C is an input; the states, vectors and S tiles come from earlier kernels */
        issue_head(0);
        sf_cp_async_commit();
        if ((tid & 127) == 0) {
            if (nbase > 0) fence_async_smem(); /* the slots' reads in the last run, then the copies */
            for (int n = 0; n < 2 && n < ntile; n++) issue_s(n);
        }
        int ns = 0; /* the warpgroup's next tile in the sequence */
        const T *zbase = (const T *)a.z;
        T *obase = (T *)a.out;

        for (int i = 0; i < nh; i++) {
            const int h = h_begin + i, buf = i & 1;
            /* shared addresses and thread coordinates made opaque per head, so
             * the compiler does not hoist every unrolled descriptor and address
             * out of the loop and keep (spill) them all */
            uint32_t sX = sX0 + buf * (Q * 128), sCi = sC, sHi = sH;
            const float *sg = sv + buf * Q, *sdt = sv + (2 + buf) * Q;
            /* the same vectors as shared-space addresses, for ld.shared */
            uint32_t ag = sf_smem_u32(sg), adt = sf_smem_u32(sdt), aw = sf_smem_u32(sw);
            int rq = 16 * wl + g, tt = t; /* the thread's row in a 64-row block, its column pair */
            asm volatile("" : "+r"(sX), "+r"(sCi), "+r"(sHi), "+r"(ag), "+r"(adt), "+r"(aw), "+r"(rq), "+r"(tt));
            sf_cp_async_wait<0>();
            fence_async_smem();
            __syncthreads(); /* head i's tiles visible; head i - 1 fully done */

            /* carried state: O = C_m H^T for both row blocks */
            float O[NR][8][4];
            wg_fence();
#pragma unroll
            for (int r = 0; r < NR; r++)
#pragma unroll
                for (int kk = 0; kk < 8; kk++)
                    Wg<T, 64>::ss(&O[r][0][0],
                                  wg_desc(sCi + (kk >> 2) * (Q * 128) + mblk[r] * 8192 + (kk & 3) * 32, 16, 1024),
                                  wg_desc(sHi + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024), kk > 0);
            wg_commit();
            if (tid < Q) sw[tid] = sf_ex2(fminf(sg[tid | 63] - sg[tid], 0.0f)) * sdt[tid];
            wg_wait<0>();
#pragma unroll
            for (int r = 0; r < NR; r++) reg_fence(O[r]);
            __syncthreads(); /* sH free, sw visible */
            if (i + 1 < nh) issue_head(i + 1);
            sf_cp_async_commit();

            /* this head's z and output at the chunk's first token, thread's first column */
            const T *zh = zbase + (int64_t)b * a.zs[0] + t0 * a.zs[1] + (int64_t)h * a.zs[2] + p0 + 2 * tt;
            T *oh = obase + (int64_t)b * a.os[0] + t0 * a.os[1] + (int64_t)h * a.os[2] + p0 + 2 * tt;
            /* D of this thread's 16 output columns (per column or per head) */
            float dc[8][2];
            ssd_out_load_d(dc, a, h, p0, tt);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const int m = mblk[r];
                if (64 * m >= Lc) continue;
                const int row0 = 64 * m + rq, row1 = row0 + 8;
                const float g0 = ssd_ldsf(ag + 4 * row0), g1 = ssd_ldsf(ag + 4 * row1);
                {
                    const float f0 = sf_ex2(fminf(g0, 0.0f)), f1 = sf_ex2(fminf(g1, 0.0f));
                    ssd_scale_rows(O[r], f0, f1);
                }
                /* z of this thread's outputs, in flight during the products */
                uint32_t zr[2][8];
                ssd_out_load_z(zr, zh, a.zs[1], row0, Lc, a.has_z);
                for (int k = 0; k <= m; k++) {
                    float S[8][4];
                    /* below the diagonal: the shared loads of the decay vectors
                     * issued first, their latency hidden by the product's issue */
                    float gr = 0.0f;
                    float2 w[8];
                    if (k < m) {
                        gr = ssd_ldsf(ag + 4 * (64 * k + 63));
#pragma unroll
                        for (int nt = 0; nt < 8; nt++) w[nt] = ssd_ldsf2(aw + 4 * (64 * k + 8 * nt + 2 * tt));
                    }
                    {
                        const int nsg = nbase + ns;
                        const uint32_t slot = sS + (nsg & 1) * 16384 + 16 * (tid & 127);
                        mbar_wait(barS + 8 * (nsg & 1), (nsg >> 1) & 1);
#pragma unroll
                        for (int nt = 0; nt < 8; nt++) {
                            const float4 v = ssd_ldsf4(slot + nt * 2048);
                            S[nt][0] = v.x;
                            S[nt][1] = v.y;
                            S[nt][2] = v.z;
                            S[nt][3] = v.w;
                        }
                        named_sync(1 + wg, 128); /* the warpgroup is done with the slot (refilled below) */
                        ns++;
                    }
                    /* the decay factors do not depend on S: computed while the
                     * product (and the previous tile's P X) run */
                    float fac[8][4];
                    if (k < m) {
                        const float f0 = sf_ex2(fminf(g0 - gr, 0.0f)), f1 = sf_ex2(fminf(g1 - gr, 0.0f));
#pragma unroll
                        for (int nt = 0; nt < 8; nt++) {
                            fac[nt][0] = f0 * w[nt].x;
                            fac[nt][1] = f0 * w[nt].y;
                            fac[nt][2] = f1 * w[nt].x;
                            fac[nt][3] = f1 * w[nt].y;
                        }
                    } else {
#pragma unroll
                        for (int nt = 0; nt < 8; nt++)
#pragma unroll
                            for (int v = 0; v < 2; v++) {
                                const int j = 64 * k + 8 * nt + 2 * tt + v;
                                const float gj = ssd_ldsf(ag + 4 * j), dj = ssd_ldsf(adt + 4 * j);
                                /* j <= row: g'_row - g'_j <= 0 (g' does not increase) */
                                fac[nt][v] = j <= row0 ? sf_ex2(g0 - gj) * dj : 0.0f;
                                fac[nt][2 + v] = j <= row1 ? sf_ex2(g1 - gj) * dj : 0.0f;
                            }
                    }
                    wg_wait<0>(); /* S_k and the previous P X */
                    reg_fence(S);
#pragma unroll
                    for (int nt = 0; nt < 8; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) S[nt][e] *= fac[nt][e];
                    const uint64_t dXk = wg_desc(sX + 64 * k * 128, Q * 128, 1024);
                    uint32_t pa[4][4];
                    ssd_pack_p<T>(pa, S);
                    wg_fence();
#pragma unroll
                    for (int kk = 0; kk < 4; kk++)
                        Wg<T, 64>::rs(&O[r][0][0], pa[kk], wg_desc_add(dXk, 16 * kk * 128));
                    wg_commit(); /* waited for with the next S, or below */
                    if ((tid & 127) == 0 && ns + 1 < ntile) {
                        /* the slot of the tile just read gets the tile after the
                         * next, here where the fence's wait is covered by the
                         * product just issued.  The fence orders the slot's
                         * reads (generic proxy, before the warpgroup barrier)
                         * before the copy's writes (async proxy): without it
                         * about one tile in 10^5 was read after its refill had
                         * landed (at b 1 L 16384, 2-5 K outputs of a run) */
                        fence_async_smem();
                        issue_s(ns + 1);
                    }
                }
                wg_wait<0>();
                reg_fence(O[r]);
                ssd_out_epilogue(O[r], dc, zr, a.has_z, sX, row0, tt, Lc, oh, a.os[1]);
            }
        }
        nbase += ntile;
    } /* runs */
#else
    (void)a;
    (void)cb;
#endif
}

#endif
