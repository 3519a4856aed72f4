/* ssd_out_sc.cuh - ssd_out_wgs: the sm_90a SSD output kernel with the
 * intra-chunk off-diagonal term taken through sub-chunk states.  Same grid,
 * inputs and results as ssd_out_wg (ssd_hopper.cuh); included only from
 * ssd_fwd.cu, after ssd_hopper.cuh.
 *
 * ssd_out_wg computes, for each row block m (64 rows) of a chunk, every
 * tile S_mk = C_m B_k^T with k <= m, scales it by the decay and multiplies
 * by X_k: 10 tiles per head at chunk 256, each a 64 x 64 x N product plus
 * ~300 instructions of decay math.  The tiles below the diagonal are a
 * low-rank term: for rows i of block m and keys j < 64m,
 *   sum_j C_i B_j^T exp2(g'_i - g'_j) dt_j x_j  =  exp2(g'_i - g'_q) C_i Hs_m^T,
 * with q = 64m - 1 and Hs_m the state after token q of the chunk
 * (g'_{-1} = 0, Hs_0 = H, the state entering the chunk):
 *   Hs_{m+1} = exp2(g'_{64m+63} - g'_{64m-1}) Hs_m + X_m'^T B_m,
 *   X_m' = rows j of block m scaled by exp2(g'_{64m+63} - g'_j) dt_j
 * (every factor <= 1: g' does not increase).  So per head and row block:
 *   O_m = diag(exp2(g'_i - g'_q)) C_m Hs_m^T + P_mm X_m,
 * and only the diagonal tile P_mm = (C_m B_m^T) * decay * dt (causal mask)
 * needs the per-element exp2: 4 tiles instead of 10, plus three P x N
 * state updates (m64n128k16 chains, A = X'^T from registers as in
 * ssd_chunk_state_wg) and four C Hs^T products.
 *
 * Warpgroup 0 owns row blocks 0 and 1, warpgroup 1 blocks 2 and 3 (chunk
 * 128: one each).  Each builds the states it needs from H itself (warpgroup
 * 1 runs the chain through Hs_2 and Hs_3, warpgroup 0 to Hs_1): no waiting
 * on the other warpgroup.  A state is rounded to the input dtype once, when
 * it is stored for its C Hs^T product (H itself arrives so rounded).
 * Buffers: H (16 KB) serves C_0 H^T and both chains' first step; warpgroup 0
 * then overwrites it with Hs_1 (after named barrier 1, which both
 * warpgroups pass once per head when each has read H), and once C_1 Hs_1^T
 * is done loads the next head's H into it;
 * warpgroup 1 keeps Hs_2 then Hs_3 in its own 16 KB.
 *
 * Shared memory, chunk 256: C 64 KB, B 64 KB, X 2 x 32 KB, H 16 KB, Hs
 * 16 KB, g'/dt/sw 3 KB = 227 KB, the opt-in maximum: as in ssd_out_wgp
 * (ssd_out_pipe.cuh) the base must be 1024-aligned without a pad (it is on
 * the H200) and the kernel traps otherwise; the next head's g'/dt travel in
 * registers.
 */
#ifndef SF_SSD_OUT_SC_CUH
#define SF_SSD_OUT_SC_CUH

#include "ssd_hopper.cuh"

template <int Q> struct SsdWgs {
    static constexpr int O_C = 0, O_B = Q * 256, O_X = 2 * Q * 256, O_H = O_X + 2 * Q * 128;
    static constexpr int O_HS = O_H + 16384, O_V = O_HS + 16384;
    static constexpr size_t SMEM = (size_t)O_V + 3 * Q * 4;
};

/* ldmatrix x4 .trans from a shared-space address */
static __device__ __forceinline__ void ssd_ldsm_x4_t_at(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
template <int ID, int N> static __device__ __forceinline__ void ssd_bar_sync() {
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(N) : "memory");
}
static __device__ __forceinline__ void ssd_sts32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

template <typename T, int Q, int WGI> struct SsdOutWgs {
    static constexpr int NRB = Q / 64, NR = NRB == 4 ? 2 : 1;
    /* row blocks of this warpgroup, ascending; the chain runs to Hs_MTOP */
    static constexpr int MA = NRB == 4 ? 2 * WGI : WGI, MB = NRB == 4 ? 2 * WGI + 1 : WGI;
    static constexpr int MTOP = NR == 2 ? MB : MA;
    /* named barriers: 1 = both warpgroups, once per head, after warpgroup 1
     * has read H and before warpgroup 0 overwrites it; 2 + WGI = this
     * warpgroup only */
    static __device__ __forceinline__ void wg_bar() { ssd_bar_sync<2 + WGI, 128>(); }

    static __device__ __forceinline__ void run(const ssd_fwd_args &a, int hpc, unsigned char *gbase,
                                               uint32_t base) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        using namespace sf_wg;
        typedef SsdWgs<Q> L;
        const uint32_t sC = base + L::O_C, sB = base + L::O_B, sX0 = base + L::O_X;
        const uint32_t sH = base + L::O_H, sHs = base + L::O_HS;
        float *sg = reinterpret_cast<float *>(gbase + L::O_V), *sdt = sg + Q, *sw = sg + 2 * Q;

        const int nsub = (a.hpg + hpc - 1) / hpc, G = a.H / a.hpg, ptiles = a.P / 64;
        int64_t id = blockIdx.x;
        const int sub = (int)(id % nsub);
        id /= nsub;
        const int grp = (int)(id % G);
        id /= G;
        const int pt = (int)(id % ptiles);
        id /= ptiles;
        const int c = (int)(id % a.nc);
        const int b = (int)(id / a.nc);
        const int h_begin = grp * a.hpg + sub * hpc;
        const int nh = min(hpc, (grp + 1) * a.hpg - h_begin);
        if (nh <= 0) return; /* uniform over the block */
        const int64_t t0 = (int64_t)c * Q;
        const int Lc = (int)min((int64_t)Q, a.L - t0), p0 = pt * 64;
        const int tid = threadIdx.x, wtid = tid & 127, wl = (tid >> 5) & 3, lane = tid & 31;
        const int g = lane >> 2, t = lane & 3;
        const int64_t PN = (int64_t)a.P * a.N;
        const T *Cg = (const T *)a.C + (int64_t)b * a.Cs[0] + t0 * a.Cs[1] + (int64_t)grp * a.Cs[2];
        const T *Bg = (const T *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] + (int64_t)grp * a.Bs[2];
        auto hsrc = [&](int i) {
            const int64_t bh = (int64_t)b * a.H + h_begin + i;
            return (const T *)a.states + (bh * a.nc + c) * PN + (int64_t)p0 * a.N;
        };

        /* head i's X into buffer i & 1 (all threads); its g'_j, g'_(j | 63),
         * dt_j into registers of thread j < Q */
        float vg = 0.0f, vgr = 0.0f, vdt = 0.0f;
        auto issue_xv = [&](int i) {
            int tq = tid; /* opaque: keeps the copies' addresses out of registers across heads */
            asm volatile("" : "+r"(tq));
            const int h = h_begin + i, buf = i & 1;
            const int64_t bh = (int64_t)b * a.H + h;
            const int64_t xo = (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
            load_tile_sw<Q, 64, 256>(sX0 + buf * (Q * 128), (const T *)a.x + xo, a.xs[1], Lc, 8, tq);
            if (tq < Q) {
                const float *gv = a.gw + (bh * a.nc + c) * Q;
                vg = gv[tq];
                vgr = gv[tq | 63];
                vdt = a.dtw[(bh * a.nc + c) * Q + tq];
            }
        };
        load_tile_sw<Q, 128, 256>(sC, Cg, a.Cs[1], Lc, a.N / 8, tid);
        load_tile_sw<Q, 128, 256>(sB, Bg, a.Bs[1], Lc, a.N / 8, tid);
        load_tile_sw<64, 128, 256>(sH, hsrc(0), a.N, 64, a.N / 8, tid);
        issue_xv(0);
        ssd_cp_commit();

        T *obase = (T *)a.out;
        for (int i = 0; i < nh; i++) {
            const int h = h_begin + i, buf = i & 1;
            ssd_cp_wait<0>();
            fence_async_smem();
            __syncthreads(); /* head i's X and H visible; every reader of head i - 1 done */
            if (tid < Q) {
                sg[tid] = vg;
                sdt[tid] = vdt;
                sw[tid] = ssd_ex2(fminf(vgr - vg, 0.0f)) * vdt;
            }
            if (i + 1 < nh) issue_xv(i + 1); /* after the stores above used head i's registers */
            ssd_cp_commit();
            __syncthreads(); /* the vectors of head i visible */

            /* shared addresses and thread coordinates opaque per head (see
             * ssd_out_wg: otherwise hoisted out of the loop and spilled) */
            uint32_t sCi = sC, sBi = sB, sHi = sH, sHsi = sHs, sX = sX0 + buf * (Q * 128);
            uint32_t ag = ssd_smem_addr(sg), adt = ssd_smem_addr(sdt);
            int rq = 16 * wl + g, tt = t;
            asm volatile("" : "+r"(sCi), "+r"(sBi), "+r"(sHi), "+r"(sHsi), "+r"(sX), "+r"(ag), "+r"(adt),
                         "+r"(rq), "+r"(tt));

            /* ---- carried-state terms: O_m = C_m Hs_m^T (row factors later) ---- */
            float O[NR][8][4];
            {
                float acc[16][4];
                if (MTOP > 0) {
                    /* acc = exp2(g'_63) H: the chain's start */
                    const float d = ssd_ex2(fminf(ssd_ldsf(ag + 4 * 63), 0.0f));
#pragma unroll
                    for (int nt = 0; nt < 16; nt++)
#pragma unroll
                        for (int u = 0; u < 2; u++) {
                            const int p = rq + 8 * u;
                            const float2 v = ssd_unpack(
                                T{}, ssd_lds32(sHi + (nt >> 3) * 8192 + p * 128 + ((((nt & 7) ^ p) & 7) << 4) + 4 * tt));
                            acc[nt][2 * u] = d * v.x;
                            acc[nt][2 * u + 1] = d * v.y;
                        }
                }
                if (MA == 0) {
                    wg_fence();
#pragma unroll
                    for (int kk = 0; kk < 8; kk++)
                        Wg<T, 64>::ss(&O[0][0][0],
                                      wg_desc(sCi + (kk >> 2) * (Q * 128) + (kk & 3) * 32, 16, 1024),
                                      wg_desc(sHi + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024), kk > 0);
                    wg_commit();
                }
#pragma unroll
                for (int s = 0; s < MTOP; s++) {
                    if (s > 0) {
                        /* the previous step's product must land before the rescale */
                        wg_wait<0>();
                        reg_fence(acc);
                        /* warpgroup 1's first wait: it has read H (barrier 1) */
                        if (WGI == 1 && s == 1) ssd_bar_sync<1, 256>();
                        const float d = ssd_ex2(fminf(ssd_ldsf(ag + 4 * (64 * s + 63)) -
                                                          ssd_ldsf(ag + 4 * (64 * s - 1)),
                                                      0.0f));
#pragma unroll
                        for (int nt = 0; nt < 16; nt++)
#pragma unroll
                            for (int e = 0; e < 4; e++) acc[nt][e] *= d;
                    }
                    /* acc += X_s'^T B_s: A = X^T of this warp's 16 rows of P,
                     * from the swizzled X tile by ldmatrix.trans, scaled by sw */
                    uint32_t af[4][4];
                    const int q = lane >> 3;
#pragma unroll
                    for (int kk = 0; kk < 4; kk++) {
                        const int j = 64 * s + 16 * kk + (lane & 7) + (q >> 1) * 8, ch = 2 * wl + (q & 1);
                        ssd_ldsm_x4_t_at(af[kk], sX + j * 128 + (((ch ^ j) & 7) << 4));
                        ssd_mma<T>::scale_a(af[kk], sw + 64 * s + 16 * kk);
                    }
                    wg_fence();
#pragma unroll
                    for (int kk = 0; kk < 4; kk++)
                        Wg<T, 128>::rs(&acc[0][0], af[kk], wg_desc(sBi + (64 * s + 16 * kk) * 128, Q * 128, 1024));
                    wg_commit();
                    const int m = s + 1;
                    if (m == MA || m == MB) {
                        const int r = m == MA ? 0 : 1;
                        const uint32_t dst = WGI == 0 ? sHi : sHsi;
                        wg_wait<0>();
                        reg_fence(acc);
                        if (MA == 0) reg_fence(O[0]);
                        /* every reader of dst done: for warpgroup 0 that is
                         * warpgroup 1's reads of H and its own C_0 H^T (barrier
                         * 1, which warpgroup 1 passes at its first wait) */
                        if (WGI == 0 || m == 1)
                            ssd_bar_sync<1, 256>();
                        else
                            wg_bar();
#pragma unroll
                        for (int nt = 0; nt < 16; nt++)
#pragma unroll
                            for (int u = 0; u < 2; u++) {
                                const int p = rq + 8 * u;
                                ssd_sts32(dst + (nt >> 3) * 8192 + p * 128 + ((((nt & 7) ^ p) & 7) << 4) + 4 * tt,
                                          ssd_pack(T{}, acc[nt][2 * u], acc[nt][2 * u + 1]));
                            }
                        fence_async_smem();
                        wg_bar(); /* the state visible to this warpgroup's wgmma */
                        wg_fence();
#pragma unroll
                        for (int kk = 0; kk < 8; kk++)
                            Wg<T, 64>::ss(&O[r][0][0],
                                          wg_desc(sCi + (kk >> 2) * (Q * 128) + m * 8192 + (kk & 3) * 32, 16, 1024),
                                          wg_desc(dst + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024), kk > 0);
                        wg_commit();
                    }
                }
                wg_wait<0>();
#pragma unroll
                for (int r = 0; r < NR; r++) reg_fence(O[r]);
            }
            /* warpgroup 0: H is free (C_0 H^T, C_1 Hs_1^T done; warpgroup 1
             * read it) - the next head's H goes there */
            if (WGI == 0) {
                if (MTOP == 0)
                    ssd_bar_sync<1, 256>();
                else
                    wg_bar();
                if (i + 1 < nh) {
                    int tq = wtid;
                    asm volatile("" : "+r"(tq));
                    load_tile_sw<64, 128, 128>(sHi, hsrc(i + 1), a.N, 64, a.N / 8, tq);
                }
                ssd_cp_commit();
            }

            /* z of this thread's outputs, in flight during the diagonal tiles */
            uint32_t zr[NR][2][8];
#pragma unroll
            for (int r = 0; r < NR; r++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int row = 64 * (r == 0 ? MA : MB) + rq + 8 * u;
                    const T *zp = (const T *)a.z + (int64_t)b * a.zs[0] + (t0 + row) * a.zs[1] +
                                  (int64_t)h * a.zs[2] + p0 + 2 * tt;
#pragma unroll
                    for (int nt = 0; nt < 8; nt++)
                        zr[r][u][nt] = a.has_z && row < Lc
                                           ? __ldg(reinterpret_cast<const unsigned int *>(zp + 8 * nt))
                                           : 0u;
                }
            /* ---- diagonal tiles, both row blocks in flight ---- */
            float S[NR][8][4];
            wg_fence();
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const int m = r == 0 ? MA : MB;
#pragma unroll
                for (int kk = 0; kk < 8; kk++)
                    Wg<T, 64>::ss(&S[r][0][0],
                                  wg_desc(sCi + (kk >> 2) * (Q * 128) + m * 8192 + (kk & 3) * 32, 16, 1024),
                                  wg_desc(sBi + (kk >> 2) * (Q * 128) + m * 8192 + (kk & 3) * 32, 16, 1024),
                                  kk > 0);
                wg_commit();
            }
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const int m = r == 0 ? MA : MB;
                const int row0 = 64 * m + rq, row1 = row0 + 8;
                const float g0 = ssd_ldsf(ag + 4 * row0), g1 = ssd_ldsf(ag + 4 * row1);
                {
                    /* the row factors of the carried-state term */
                    const float gq = m > 0 ? ssd_ldsf(ag + 4 * (64 * m - 1)) : 0.0f;
                    const float f0 = ssd_ex2(fminf(g0 - gq, 0.0f)), f1 = ssd_ex2(fminf(g1 - gq, 0.0f));
#pragma unroll
                    for (int nt = 0; nt < 8; nt++) {
                        O[r][nt][0] *= f0;
                        O[r][nt][1] *= f0;
                        O[r][nt][2] *= f1;
                        O[r][nt][3] *= f1;
                    }
                }
                if (r == 0 && NR == 2)
                    wg_wait<1>();
                else if (r == 0)
                    wg_wait<0>();
                else
                    wg_wait<1>(); /* S_1 done; P_0 X_0 may run */
                reg_fence(S[r]);
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int v = 0; v < 2; v++) {
                        const int j = 64 * m + 8 * nt + 2 * tt + v;
                        const float gj = ssd_ldsf(ag + 4 * j), dj = ssd_ldsf(adt + 4 * j);
                        /* j <= row: g'_row - g'_j <= 0 up to rounding */
                        S[r][nt][v] = j <= row0 ? S[r][nt][v] * ssd_ex2(fminf(g0 - gj, 0.0f)) * dj : 0.0f;
                        S[r][nt][2 + v] = j <= row1 ? S[r][nt][2 + v] * ssd_ex2(fminf(g1 - gj, 0.0f)) * dj : 0.0f;
                    }
                uint32_t pa[4][4];
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    pa[kk][0] = ssd_pack(T{}, S[r][2 * kk][0], S[r][2 * kk][1]);
                    pa[kk][1] = ssd_pack(T{}, S[r][2 * kk][2], S[r][2 * kk][3]);
                    pa[kk][2] = ssd_pack(T{}, S[r][2 * kk + 1][0], S[r][2 * kk + 1][1]);
                    pa[kk][3] = ssd_pack(T{}, S[r][2 * kk + 1][2], S[r][2 * kk + 1][3]);
                }
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
                    Wg<T, 64>::rs(&O[r][0][0], pa[kk], wg_desc(sX + (64 * m + 16 * kk) * 128, Q * 128, 1024));
                wg_commit();
            }
            wg_wait<0>();
#pragma unroll
            for (int r = 0; r < NR; r++) reg_fence(O[r]);

            /* ---- epilogue: D x from the swizzled shared X, z gate, store ---- */
            /* D of this thread's 16 output columns (per column or per head),
             * loaded here rather than held through the tiles (registers) */
            float dc[8][2];
            {
                const int64_t d0 = (int64_t)h * a.Ds[0], ds = a.D_pc ? a.Ds[1] : 0;
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        dc[nt][e] = a.has_D ? a.D[d0 + (int64_t)(p0 + 8 * nt + 2 * tt + e) * ds] : 0.0f;
            }
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const int m = r == 0 ? MA : MB;
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int row = 64 * m + rq + 8 * u;
                    if (row >= Lc) continue;
                    T *op = obase + (int64_t)b * a.os[0] + (t0 + row) * a.os[1] + (int64_t)h * a.os[2] + p0;
#pragma unroll
                    for (int nt = 0; nt < 8; nt++) {
                        const int col = 8 * nt + 2 * tt;
                        float y0 = O[r][nt][2 * u], y1 = O[r][nt][2 * u + 1];
                        if (a.has_D) {
                            const float2 xv =
                                ssd_unpack(T{}, ssd_lds32(sX + row * 128 + (((nt ^ row) & 7) << 4) + 4 * tt));
                            y0 = fmaf(dc[nt][0], xv.x, y0);
                            y1 = fmaf(dc[nt][1], xv.y, y1);
                        }
                        if (a.has_z) {
                            const float2 zv = ssd_unpack(T{}, zr[r][u][nt]);
                            y0 *= ssd_silu(zv.x);
                            y1 *= ssd_silu(zv.y);
                        }
                        *reinterpret_cast<uint32_t *>(op + col) = ssd_pack(T{}, y0, y1);
                    }
                }
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
__global__ void __launch_bounds__(256, 1) ssd_out_wgs(const ssd_fwd_args a, int hpc) {
    extern __shared__ __align__(1024) unsigned char ssd_smem_s[];
    const uint32_t base = ssd_smem_addr(ssd_smem_s);
    if (base & 1023u) __trap(); /* the layout needs 1024-aligned tiles (see the header) */
    if ((threadIdx.x >> 7) == 0)
        SsdOutWgs<T, Q, 0>::run(a, hpc, ssd_smem_s, base);
    else
        SsdOutWgs<T, Q, 1>::run(a, hpc, ssd_smem_s, base);
}

#endif
