/* ssd_out_tf32.cuh - ssd_out_tf32: the SSD output kernel for f32 inputs on
 * TF32 wgmma (sm_90a), configuration fo32, after ssd_state_fused_tf32.
 * Included only from ssd_fwd.cu, after ssd_state32.cuh.
 *
 * The formulation of ssd_out_sc32 (sub-chunk states): per 64-row block r of
 * a chunk, with q = 64r - 1 (g'_{-1} = 0) and Hs_r the state after token q
 * of the chunk (Hs_0 = the state entering the chunk),
 *   O_r      = diag(exp2(g'_i - g'_q)) C_r Hs_r^T
 *            + ((C_r B_r^T) .* exp2(g'_i - g'_j) dt_j .* [j <= i]) X_r
 *   Hs_{r+1} = exp2(g'_{64r+63} - g'_q) Hs_r + X_r'^T B_r,
 *   X_r'     = rows j of X_r times exp2(g'_{64r+63} - g'_j) dt_j,
 * every exponent <= 0; only the diagonal 64 x 64 tile takes an exp2 per
 * element.
 *
 * TF32 wgmma takes K-major operands only.  Here:
 *   C_r, B_r   TF32 images (ssd_img_tf32 with NAT: token rows, K = n), made
 *              once per (b, group, chunk) and copied here by cp.async;
 *   Hs_r       (P rows, K = n), stored to shared memory by the state warpgroup;
 *   X_r        as the B operand of P X_r and of the state product, transposed
 *              in shared memory to (P rows, K = token) by the state warpgroup;
 *              as A operands nothing needs a layout (registers).
 * Keys of each 8-token group sit in a permuted order on both operands of the
 * token-K products (slot t <-> token 2t, slot t + 4 <-> token 2t + 1), so the
 * accumulators of S are the A fragments of P X_r without shuffles.
 *
 * Block 256 = two warpgroups per (b, chunk, 64-column P tile, head), walking
 * the row blocks in order:
 *   WG0 (output)  O = C_r Hs_r^T, S = C_r B_r^T (ss, one commit); decay
 *                 factors meanwhile; O rows times exp2(g'_i - g'_q),
 *                 P = S .* decay -> O += P X_r (rs); y = (O + D x) silu(z).
 *   WG1 (state)   X_r -> X_r^T (TF32); Hs^T = d Hs^T + (B_r^T diag(w)) X_r
 *                 (rs, A from the B image through registers, two halves of
 *                 64 state columns); Hs_{r+1} -> shared memory once WG0 has
 *                 read Hs_r (named barrier 2).  X_r^T ready: barrier 1.
 * The next row block's C, B and X are in flight during this one (two stages).
 *
 * Shared memory: 2 stages x (C 32 KB + B 32 KB + X 18 KB), X^T 16 KB,
 * Hs 32 KB, g' and dt of the chunk: 215 KB, one block per SM.
 */
#ifndef SF_SSD_OUT_TF32_CUH
#define SF_SSD_OUT_TF32_CUH

#include "ssd_hopper.cuh"
#include "ssd_state32.cuh"

struct SsdO32 {
    static constexpr int LDX = 72; /* X row pitch (floats) */
    static constexpr uint32_t IMG = SsdS32::IMG;
    static constexpr uint32_t O_B = IMG, O_X = 2 * IMG; /* within a stage (C at 0) */
    static constexpr uint32_t STAGE = 2 * IMG + 64 * LDX * 4;
    static constexpr uint32_t O_XT = 2 * STAGE, O_HS = O_XT + 16384, O_V = O_HS + 32768;
    static __host__ __device__ size_t smem(int Q) { return (size_t)O_V + 2 * (size_t)Q * 4 + 1024; }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Byte offset of (row, k) in a K-major, 128-byte-swizzled f32 tile of 64
 * rows (K-atoms of 32 floats, 8 KB each). */
static __device__ __forceinline__ uint32_t ssd_sw64(int row, int k) {
    return (uint32_t)((k >> 5) * 8192 + row * 128 + ((((k >> 2) & 7) ^ (row & 7)) << 4) + (k & 3) * 4);
}
static __device__ __forceinline__ void ssd_sts_tf32(uint32_t addr, float v) {
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(ssd_tf32(v)) : "memory");
}
#endif

/* Grid (flattened): head fastest (neighbouring blocks read the same images
 * from L2), then P tile, chunk, batch row. */
template <int Q>
__global__ void __launch_bounds__(256, 1) ssd_out_tf32(const ssd_fwd_args a, const float *cimg,
                                                      const float *bimg) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    typedef SsdO32 L;
    constexpr int NPART = Q / 64, LDX = L::LDX;
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sraw = ssd_smem_addr(ssd_smem);
    const uint32_t sbase = (sraw + 1023u) & ~1023u;
    unsigned char *gbase = ssd_smem + (sbase - sraw);
    float *sg = reinterpret_cast<float *>(gbase + L::O_V), *sdt = sg + Q;
    const uint32_t sXT = sbase + L::O_XT, sHs = sbase + L::O_HS;

    const int ptiles = a.P / 64, G = a.H / a.hpg;
    int64_t id = blockIdx.x;
    const int h = (int)(id % a.H);
    id /= a.H;
    const int pt = (int)(id % ptiles);
    id /= ptiles;
    const int c = (int)(id % a.nc);
    const int b = (int)(id / a.nc);
    const int64_t t0 = (int64_t)c * Q;
    const int Lc = (int)min((int64_t)Q, a.L - t0), nrb = (Lc + 63) >> 6, p0 = pt * 64;
    const int tid = threadIdx.x, warp = tid >> 5, wgi = warp >> 2, wl = warp & 3;
    const int lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t bh = (int64_t)b * a.H + h;
    const int64_t imo = (((int64_t)b * G + h / a.hpg) * a.nc + c) * NPART * (int64_t)(L::IMG / 4);
    const char *cim = reinterpret_cast<const char *>(cimg + imo);
    const char *bim = reinterpret_cast<const char *>(bimg + imo);
    const float *Xg = (const float *)a.x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;

    /* row block r's C, B and X into stage r % 2 (always one commit group) */
    auto issue = [&](int r) {
        if (r < nrb) {
            const uint32_t st = sbase + (r & 1) * L::STAGE;
            const char *cs = cim + (int64_t)r * L::IMG, *bs = bim + (int64_t)r * L::IMG;
#pragma unroll
            for (int it = 0; it < (int)(L::IMG / 16 / 256); it++) {
                const int i = tid + it * 256;
                cp_async16_u32(st + 16 * i, cs + 16 * i, 16);
                cp_async16_u32(st + L::O_B + 16 * i, bs + 16 * i, 16);
            }
            const int lv = Lc - 64 * r;
#pragma unroll
            for (int it = 0; it < 4; it++) {
                const int i = tid + it * 256, row = i >> 4, cc = i & 15;
                const bool ok = row < lv;
                cp_async16_u32(st + L::O_X + (row * LDX + cc * 4) * 4,
                               ok ? Xg + (int64_t)(64 * r + row) * a.xs[1] + cc * 4 : Xg, ok ? 16 : 0);
            }
        }
        ssd_cp_commit();
    };
    {
        const int64_t v = (bh * a.nc + c) * Q;
        for (int i = tid; i < Q; i += 256) {
            sg[i] = a.gw[v + i];
            sdt[i] = a.dtw[v + i];
        }
    }
    issue(0);

    /* WG1: Hs^T in the accumulator layout, half hf: rows (state columns)
     * n = 64 hf + 16 wl + g (+ 8), columns (P) 8 nt + 2 t (+ 1) */
    float HT[2][8][4];
    auto store_hs = [&]() {
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    ssd_sts_tf32(sHs + ssd_sw64(8 * nt + 2 * t + (e & 1), 64 * hf + 16 * wl + g + 8 * (e >> 1)),
                                 HT[hf][nt][e]);
        fence_async_smem();
    };
    if (wgi == 1) {
        const float *hg = (const float *)a.states + (bh * a.nc + c) * (int64_t)a.P * a.N + (int64_t)p0 * a.N;
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int n = 64 * hf + 16 * wl + g + 8 * (e >> 1), p = 8 * nt + 2 * t + (e & 1);
                    HT[hf][nt][e] = n < a.N ? hg[(int64_t)p * a.N + n] : 0.0f;
                }
        store_hs();
    }

    for (int r = 0; r < nrb; r++) {
        ssd_cp_wait<0>();
        fence_async_smem();
        __syncthreads(); /* stage r landed, Hs_r stored, X^T free */
        issue(r + 1);
        const uint32_t st = sbase + (r & 1) * L::STAGE;
        const float *sX = reinterpret_cast<const float *>(gbase + (r & 1) * L::STAGE + L::O_X);
        const bool more = r + 1 < nrb;
        const float gq = r > 0 ? sg[64 * r - 1] : 0.0f;
        if (wgi == 0) {
            float O[8][4], S[8][4];
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 16; kk++)
                Wg<float, 64>::ss(&O[0][0], wg_desc(st + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024),
                                  wg_desc(sHs + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024), kk > 0);
#pragma unroll
            for (int kk = 0; kk < 16; kk++)
                Wg<float, 64>::ss(&S[0][0], wg_desc(st + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024),
                                  wg_desc(st + L::O_B + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024), kk > 0);
            wg_commit();
            /* while the products run: decay factors, z and D */
            const int rl0 = 16 * wl + g, i0 = 64 * r + rl0, i1 = i0 + 8;
            const float g0 = sg[i0], g1 = sg[i1];
            const float f0 = ssd_ex2(fminf(g0 - gq, 0.0f)), f1 = ssd_ex2(fminf(g1 - gq, 0.0f));
            float fac[8][4];
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int v = 0; v < 2; v++) {
                    const int j = 64 * r + 8 * nt + 2 * t + v;
                    const float gj = sg[j], dj = sdt[j];
                    fac[nt][v] = j <= i0 ? ssd_ex2(g0 - gj) * dj : 0.0f;
                    fac[nt][2 + v] = j <= i1 ? ssd_ex2(g1 - gj) * dj : 0.0f;
                }
            const float *zh = (const float *)a.z + (int64_t)b * a.zs[0] + (t0 + i0) * a.zs[1] +
                              (int64_t)h * a.zs[2] + p0 + 2 * t;
            float2 zr[2][8];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const bool ok = a.has_z && i0 + 8 * u < Lc;
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
                    zr[u][nt] = ok ? __ldg(reinterpret_cast<const float2 *>(zh + 8 * u * a.zs[1] + 8 * nt))
                                   : make_float2(0.0f, 0.0f);
            }
            float dc[8][2];
            ssd_out_load_d(dc, a, h, p0, t);
            wg_wait<0>();
            reg_fence(O);
            reg_fence(S);
            if (more) named_arrive(2, 256); /* Hs_r read: the state warpgroup may replace it */
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                O[nt][0] *= f0;
                O[nt][1] *= f0;
                O[nt][2] *= f1;
                O[nt][3] *= f1;
            }
            /* S column pair (2t, 2t+1) of 8-key group kk -> k slots (t, t + 4) */
            uint32_t pa[8][4];
#pragma unroll
            for (int kk = 0; kk < 8; kk++) {
                pa[kk][0] = __float_as_uint(ssd_tf32(S[kk][0] * fac[kk][0]));
                pa[kk][1] = __float_as_uint(ssd_tf32(S[kk][2] * fac[kk][2]));
                pa[kk][2] = __float_as_uint(ssd_tf32(S[kk][1] * fac[kk][1]));
                pa[kk][3] = __float_as_uint(ssd_tf32(S[kk][3] * fac[kk][3]));
            }
            named_sync(1, 256); /* X_r^T in shared memory */
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 8; kk++)
                Wg<float, 64>::rs(&O[0][0], pa[kk], wg_desc(sXT + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024));
            wg_commit();
            wg_wait<0>();
            reg_fence(O);
            /* y = (O + D x) silu(z), rows i0 and i1 */
            float *oh = (float *)a.out + (int64_t)b * a.os[0] + (t0 + i0) * a.os[1] + (int64_t)h * a.os[2] + p0 + 2 * t;
#pragma unroll
            for (int u = 0; u < 2; u++) {
                if (i0 + 8 * u >= Lc) continue;
                const float *xr = sX + (rl0 + 8 * u) * LDX + 2 * t;
#pragma unroll
                for (int nt = 0; nt < 8; nt++) {
                    const float2 xv = *reinterpret_cast<const float2 *>(xr + 8 * nt);
                    const float s0 = a.has_z ? ssd_silu(zr[u][nt].x) : 1.0f;
                    const float s1 = a.has_z ? ssd_silu(zr[u][nt].y) : 1.0f;
                    *reinterpret_cast<float2 *>(oh + 8 * u * a.os[1] + 8 * nt) =
                        make_float2(fmaf(dc[nt][0], xv.x, O[nt][2 * u]) * s0,
                                    fmaf(dc[nt][1], xv.y, O[nt][2 * u + 1]) * s1);
                }
            }
        } else {
            /* X_r -> X_r^T (TF32, permuted k slots): lane (g, t) takes P row
             * 8 ph + g and slot 4 kq + t: conflict-free stores */
#pragma unroll 8
            for (int it = 0; it < 32; it++) {
                const int cb = it * 4 + wl, p = 8 * (cb & 7) + g, ks = 4 * (cb >> 3) + t;
                const int j = (ks & ~7) | ((ks & 3) << 1) | ((ks >> 2) & 1);
                ssd_sts_tf32(sXT + ssd_sw64(p, ks), sX[j * LDX + p]);
            }
            fence_async_smem();
            named_sync(1, 256);
            if (more) {
                const float gl = sg[64 * r + 63];
                const float d = ssd_ex2(fminf(gl - gq, 0.0f));
#pragma unroll
                for (int hf = 0; hf < 2; hf++)
#pragma unroll
                    for (int nt = 0; nt < 8; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) HT[hf][nt][e] *= d;
                /* w of this thread's tokens 8 kk + 2 t (+ 1) */
                float w[8][2];
#pragma unroll
                for (int kk = 0; kk < 8; kk++)
#pragma unroll
                    for (int v = 0; v < 2; v++) {
                        const int j = 64 * r + 8 * kk + 2 * t + v;
                        w[kk][v] = ssd_ex2(fminf(gl - sg[j], 0.0f)) * sdt[j];
                    }
                const uint32_t sB = st + L::O_B;
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int n0 = 64 * hf + 16 * wl + g;
                    uint32_t af[8][4];
#pragma unroll
                    for (int kk = 0; kk < 8; kk++) {
                        const int j0 = 8 * kk + 2 * t;
                        af[kk][0] = __float_as_uint(ssd_tf32(ssd_ldsf(sB + ssd_sw64(j0, n0)) * w[kk][0]));
                        af[kk][1] = __float_as_uint(ssd_tf32(ssd_ldsf(sB + ssd_sw64(j0, n0 + 8)) * w[kk][0]));
                        af[kk][2] = __float_as_uint(ssd_tf32(ssd_ldsf(sB + ssd_sw64(j0 + 1, n0)) * w[kk][1]));
                        af[kk][3] = __float_as_uint(ssd_tf32(ssd_ldsf(sB + ssd_sw64(j0 + 1, n0 + 8)) * w[kk][1]));
                    }
                    wg_fence();
#pragma unroll
                    for (int kk = 0; kk < 8; kk++)
                        Wg<float, 64>::rs(&HT[hf][0][0], af[kk],
                                          wg_desc(sXT + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024));
                    wg_commit();
                }
                wg_wait<0>();
                reg_fence(HT[0]);
                reg_fence(HT[1]);
                named_sync(2, 256); /* the output warpgroup has read Hs_r */
                store_hs();
            }
        }
    }
#else
    (void)a;
    (void)cimg;
    (void)bimg;
#endif
}

#endif
