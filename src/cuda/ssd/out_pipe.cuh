/* ssd_out_pipe.cuh - ssd_out_wgp: the sm_90a SSD output kernel of
 * ssd_hopper.cuh (same grid, same work per block, same results) with the
 * tile chain software-pipelined inside each warpgroup.  Included only from
 * ssd_fwd.cu, after ssd_hopper.cuh.
 *
 * ssd_out_wg waits for every wgmma it issues: S = C B_k^T, wait, decay math,
 * O += P X_k, wait.  Here, per row block m of a warpgroup:
 *   issue O = C_m H^T, issue S_0;  wait for O, scale its rows;
 *   for k = 0..m:  issue S_{k+1} (other S buffer);
 *                  wait until S_k is done (O += P X_{k-1} and S_{k+1} may
 *                  still run);  decay math on S_k into P buffer k & 1;
 *                  issue O += P_k X_k;
 *   wait for everything, epilogue.
 * So the tensor core works on S_{k+1} and P_{k-1} X_{k-1} while the
 * warpgroup does the decay math of tile k.  Registers: O 32 + S 2 x 32 +
 * P 2 x 16 + z 16 + D 16; O lives for one row block at a time, so C H^T is
 * computed per row block and H stays resident for the whole head: H is
 * double-buffered (the next head's H loads during this head).  Row blocks
 * are compile-time (a template per warpgroup), the larger one first, so the
 * z prefetch of the first block has the longest chain to hide behind.
 *
 * Shared memory, chunk 256: C 64 KB, B 64 KB, X 2 x 32 KB, H 2 x 16 KB,
 * g'/dt/sw 3 KB = 227 KB, the opt-in maximum: no room for the 1 KB that
 * would align the base by hand, so the kernel traps if the dynamic base is
 * not 1024-aligned (it was in every run on the H200: the block's shared
 * window starts after the driver's 1 KB).  The next head's g'/dt travel in
 * registers (3 per thread) and are stored after the head's first barrier.
 */
#ifndef SF_SSD_OUT_PIPE_CUH
#define SF_SSD_OUT_PIPE_CUH

#include "ssd/hopper.cuh"

template <int Q> struct SsdWgp {
    static constexpr int O_C = 0, O_B = Q * 256, O_X = 2 * Q * 256, O_H = O_X + 2 * Q * 128;
    static constexpr int O_V = O_H + 2 * 16384;
    static constexpr size_t SMEM = (size_t)O_V + 3 * Q * 4;
};

template <typename T, int Q, int WGI> struct SsdOutWgp {
    static constexpr int NRB = Q / 64, NR = NRB == 4 ? 2 : 1;
    /* row blocks of this warpgroup, the larger first */
    static constexpr int MA = NRB == 4 ? NRB - 1 - WGI : WGI, MB = NRB == 4 ? WGI : WGI;

    static __device__ __forceinline__ void bar() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

    /* wgmma.wait_group with a count known only after unrolling */
    static __device__ __forceinline__ void wait_n(int n) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        using namespace sf_wg;
        if (n <= 0) wg_wait<0>();
        else if (n == 1) wg_wait<1>();
        else wg_wait<2>();
#else
        (void)n;
#endif
    }

    static __device__ __forceinline__ void run(const ssd_fwd_args &a, int hpc, unsigned char *gbase,
                                               uint32_t base) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        using namespace sf_wg;
        typedef SsdWgp<Q> L;
        const uint32_t sC = base + L::O_C, sB = base + L::O_B, sX0 = base + L::O_X, sH0 = base + L::O_H;
        float *sg = reinterpret_cast<float *>(gbase + L::O_V), *sdt = sg + Q, *sw = sg + 2 * Q;

        const ssd_out_blk blk = ssd_out_block(a, hpc);
        const int grp = blk.grp, pt = blk.pt, c = blk.c, b = blk.b, h_begin = blk.h_begin, nh = blk.nh;
        if (nh <= 0) return; /* uniform over the block */
        const int64_t t0 = (int64_t)c * Q;
        const int Lc = (int)min((int64_t)Q, a.L - t0), p0 = pt * 64;
        const int tid = threadIdx.x, wl = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
        const int64_t PN = (int64_t)a.P * a.N;
        const T *Cg = (const T *)a.C + (int64_t)b * a.Cs[0] + t0 * a.Cs[1] + (int64_t)grp * a.Cs[2];
        const T *Bg = (const T *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] + (int64_t)grp * a.Bs[2];

        /* head i's X and H into buffers i & 1; its g'_j, g'_(j | 63), dt_j
         * into registers of thread j < Q */
        float vg = 0.0f, vgr = 0.0f, vdt = 0.0f;
        auto issue_head = [&](int i) {
            int tq = tid; /* opaque: keeps the copies' addresses out of registers across heads */
            asm volatile("" : "+r"(tq));
            const int h = h_begin + i, buf = i & 1;
            const int64_t bh = (int64_t)b * a.H + h;
            const int64_t xo = (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
            load_tile_sw_rs<Q, 64, 256>(sX0 + buf * (Q * 128), (const T *)a.x + xo, a.xs[1], Lc, 8, tq);
            load_tile_sw_rs<64, 128, 256>(sH0 + buf * 16384,
                                          (const T *)a.states + (bh * a.nc + c) * PN + (int64_t)p0 * a.N,
                                          a.N, 64, a.N / 8, tq);
            if (tq < Q) {
                const float *gv = a.gw + (bh * a.nc + c) * Q;
                vg = gv[tq];
                vgr = gv[tq | 63];
                vdt = a.dtw[(bh * a.nc + c) * Q + tq];
            }
        };
        load_tile_sw_rs<Q, 128, 256>(sC, Cg, a.Cs[1], Lc, a.N / 8, tid);
        load_tile_sw_rs<Q, 128, 256>(sB, Bg, a.Bs[1], Lc, a.N / 8, tid);
        issue_head(0);
        sf_cp_async_commit();

        T *obase = (T *)a.out;
        for (int i = 0; i < nh; i++) {
            const int h = h_begin + i, buf = i & 1;
            sf_cp_async_wait<0>();
            fence_async_smem();
            bar(); /* head i's X and H visible; every reader of head i - 1 done */
            if (tid < Q) {
                sg[tid] = vg;
                sdt[tid] = vdt;
                sw[tid] = sf_ex2(fminf(vgr - vg, 0.0f)) * vdt;
            }
            if (i + 1 < nh) issue_head(i + 1); /* after the stores above used head i's registers */
            sf_cp_async_commit();
            bar(); /* the vectors of head i visible */

            /* shared addresses and thread coordinates opaque per head (see
             * ssd_out_wg: otherwise hoisted out of the loop and spilled) */
            uint32_t sCi = sC, sBi = sB, sHi = sH0 + buf * 16384, sX = sX0 + buf * (Q * 128);
            uint32_t ag = sf_smem_u32(sg), adt = sf_smem_u32(sdt), aw = sf_smem_u32(sw);
            int rq = 16 * wl + g, tt = t;
            asm volatile("" : "+r"(sCi), "+r"(sBi), "+r"(sHi), "+r"(sX), "+r"(ag), "+r"(adt), "+r"(aw),
                         "+r"(rq), "+r"(tt));
            /* this head's z and output at the chunk's first token, thread's first column */
            const T *zh = (const T *)a.z + (int64_t)b * a.zs[0] + t0 * a.zs[1] + (int64_t)h * a.zs[2] + p0 + 2 * tt;
            T *oh = obase + (int64_t)b * a.os[0] + t0 * a.os[1] + (int64_t)h * a.os[2] + p0 + 2 * tt;
            float dc[8][2];
            ssd_out_load_d(dc, a, h, p0, tt);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const int m = r == 0 ? MA : MB;
                if (64 * m >= Lc) continue;
                const int row0 = 64 * m + rq, row1 = row0 + 8;
                const float g0 = ssd_ldsf(ag + 4 * row0), g1 = ssd_ldsf(ag + 4 * row1);
                uint32_t zr[2][8];
                ssd_out_load_z(zr, zh, a.zs[1], row0, Lc, a.has_z);
                float O[8][4], S[2][8][4];
                uint32_t pa[2][4][4];
                /* descriptors: C_m, B_0, H, X_0 (the others are offsets from these) */
                const uint64_t dCm = wg_desc(sCi + m * 8192, 16, 1024), dB = wg_desc(sBi, 16, 1024);
                const uint64_t dH = wg_desc(sHi, 16, 1024), dX = wg_desc(sX, Q * 128, 1024);
                /* O = C_m H^T, then S_0 */
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < 8; kk++)
                    Wg<T, 64>::ss(&O[0][0], wg_desc_add(dCm, (kk >> 2) * (Q * 128) + (kk & 3) * 32),
                                  wg_desc_add(dH, (kk >> 2) * 8192 + (kk & 3) * 32), kk > 0);
                wg_commit();
#pragma unroll
                for (int kk = 0; kk < 8; kk++)
                    Wg<T, 64>::ss(&S[0][0][0], wg_desc_add(dCm, (kk >> 2) * (Q * 128) + (kk & 3) * 32),
                                  wg_desc_add(dB, (kk >> 2) * (Q * 128) + (kk & 3) * 32), kk > 0);
                wg_commit();
                wg_wait<1>(); /* O done, S_0 may run */
                reg_fence(O);
                {
                    const float f0 = sf_ex2(fminf(g0, 0.0f)), f1 = sf_ex2(fminf(g1, 0.0f));
                    ssd_scale_rows(O, f0, f1);
                }
#pragma unroll
                for (int k = 0; k <= (r == 0 ? MA : MB); k++) {
                    const bool next = k < m;
                    if (next) {
                        wg_fence();
#pragma unroll
                        for (int kk = 0; kk < 8; kk++)
                            Wg<T, 64>::ss(&S[(k + 1) & 1][0][0],
                                          wg_desc_add(dCm, (kk >> 2) * (Q * 128) + (kk & 3) * 32),
                                          wg_desc_add(dB, (kk >> 2) * (Q * 128) + (k + 1) * 8192 + (kk & 3) * 32),
                                          kk > 0);
                        wg_commit();
                    }
                    /* pending, oldest first: S_k, [P_{k-1} X_{k-1}], [S_{k+1}] */
                    wait_n((k > 0 ? 1 : 0) + (next ? 1 : 0));
                    float(&Sk)[8][4] = S[k & 1];
                    reg_fence(Sk);
                    if (k < m) {
                        const float gr = ssd_ldsf(ag + 4 * (64 * k + 63));
                        const float f0 = sf_ex2(fminf(g0 - gr, 0.0f)), f1 = sf_ex2(fminf(g1 - gr, 0.0f));
#pragma unroll
                        for (int nt = 0; nt < 8; nt++) {
                            const float2 w = ssd_ldsf2(aw + 4 * (64 * k + 8 * nt + 2 * tt));
                            Sk[nt][0] *= f0 * w.x;
                            Sk[nt][1] *= f0 * w.y;
                            Sk[nt][2] *= f1 * w.x;
                            Sk[nt][3] *= f1 * w.y;
                        }
                    } else {
#pragma unroll
                        for (int nt = 0; nt < 8; nt++)
#pragma unroll
                            for (int v = 0; v < 2; v++) {
                                const int j = 64 * k + 8 * nt + 2 * tt + v;
                                const float gj = ssd_ldsf(ag + 4 * j), dj = ssd_ldsf(adt + 4 * j);
                                /* j <= row: g'_row - g'_j <= 0 up to rounding */
                                Sk[nt][v] = j <= row0 ? Sk[nt][v] * sf_ex2(fminf(g0 - gj, 0.0f)) * dj : 0.0f;
                                Sk[nt][2 + v] = j <= row1 ? Sk[nt][2 + v] * sf_ex2(fminf(g1 - gj, 0.0f)) * dj : 0.0f;
                            }
                    }
                    /* P buffer k & 1 was last read by P_{k-2} X_{k-2}: done */
                    uint32_t(&Pk)[4][4] = pa[k & 1];
                    ssd_pack_p<T>(Pk, Sk);
                    wg_fence();
#pragma unroll
                    for (int kk = 0; kk < 4; kk++)
                        Wg<T, 64>::rs(&O[0][0], Pk[kk], wg_desc_add(dX, (64 * k + 16 * kk) * 128));
                    wg_commit();
                }
                wg_wait<0>();
                reg_fence(O);
                ssd_out_epilogue(O, dc, zr, a.has_z, sX, row0, tt, Lc, oh, a.os[1]);
            }
        }
#else
        (void)a;
        (void)hpc;
        (void)gbase;
        (void)base;
#endif
    }
};

/* Grid and block as ssd_out_wg. */
template <typename T, int Q>
__global__ void __launch_bounds__(256, 1) ssd_out_wgp(const ssd_fwd_args a, int hpc) {
    extern __shared__ __align__(1024) unsigned char ssd_smem_p[];
    const uint32_t base = sf_smem_u32(ssd_smem_p);
    if (base & 1023u) __trap(); /* the layout needs 1024-aligned tiles (see the header) */
    if ((threadIdx.x >> 7) == 0)
        SsdOutWgp<T, Q, 0>::run(a, hpc, ssd_smem_p, base);
    else
        SsdOutWgp<T, Q, 1>::run(a, hpc, ssd_smem_p, base);
}

#endif
