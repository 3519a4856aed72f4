/* out_tf32.cuh - ssd_out_tf32: the SSD output kernel for f32 inputs on
 * TF32 wgmma (sm_90a, configuration fg32), after ssd_state_fused_tf32.
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
 *              once per (b, group, chunk) and copied here by the bulk
 *              copy engine (one copy per image and row block);
 *   Hs_r       (P rows, K = n), stored to shared memory by the state warpgroup;
 *   X_r        as the B operand of P X_r and of the state product, transposed
 *              in shared memory to (P rows, K = token) by the state warpgroup;
 *              as A operands nothing needs a layout (registers).
 * Keys of each 8-token group sit in a permuted order on both operands of the
 * token-K products (slot t <-> token 2t, slot t + 4 <-> token 2t + 1), so the
 * accumulators of S are the A fragments of P X_r without shuffles.
 *
 * Block 256 = two warpgroups per work unit (b, chunk, 64-column P tile,
 * head), persistent (one block per SM taking units in turn), walking each
 * unit's row blocks in order:
 *   WG0 (output)  O = C_r Hs_r^T, S = C_r B_r^T (ss, one commit); decay
 *                 factors meanwhile; O rows times exp2(g'_i - g'_q),
 *                 P = S .* decay -> O += P X_r (rs); y = (O + D x) silu(z).
 *   WG1 (state)   X_r -> X_r^T (TF32); Hs^T = d Hs^T + (B_r^T diag(w)) X_r
 *                 (rs, A from the B image through registers, two halves of
 *                 64 state columns); Hs_{r+1} -> shared memory once WG0 has
 *                 read Hs_r (named barrier 2).  X_r^T ready: WG1 arrives
 *                 at barrier 1 (WG0 waits there before P X_r) and syncs
 *                 among itself (barrier 3), so its state product overlaps
 *                 WG0's first products instead of following them.
 * The next row block's C, B and X are in flight during this one (two
 * stages), across units too: a unit's last row block loads the next unit's
 * first stage, vectors and entering state.  TF32 rounding by two integer
 * operations (ssd_tf32r); X^T written in 16-byte chunks.
 *
 * Shared memory: 2 stages x (C 32 KB + B 32 KB + X 18 KB), X^T 16 KB,
 * Hs 32 KB, g' and dt of two units: 217 KB, one block per SM (H200, 2.7B
 * f32 b8 L4096: 1.28 ms against ssd_out_sc32's 2.89).
 */
#ifndef SF_SSD_OUT_TF32_CUH
#define SF_SSD_OUT_TF32_CUH

#include "ssd/wg_common.cuh"
#include "ssd/state_tf32.cuh"

struct SsdO32 {
    static constexpr int LDX = 72; /* X row pitch (floats) */
    static constexpr uint32_t IMG = SsdS32::IMG;
    static constexpr uint32_t O_B = IMG, O_X = 2 * IMG; /* within a stage (C at 0) */
    static constexpr uint32_t STAGE = 2 * IMG + 64 * LDX * 4;
    static constexpr uint32_t O_XT = 2 * STAGE, O_HS = O_XT + 16384, O_V = O_HS + 32768;
    /* two buffers of the g' and dt vectors (the next unit's load ahead),
     * then the two stages' mbarriers */
    static __host__ __device__ uint32_t o_bar(int Q) { return O_V + 16u * (uint32_t)Q; }
    static __host__ __device__ size_t smem(int Q) { return (size_t)o_bar(Q) + 16 + 1024; }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Byte offset of (row, k) in a K-major, 128-byte-swizzled f32 tile of 64
 * rows (K-atoms of 32 floats, 8 KB each). */
static __device__ __forceinline__ uint32_t ssd_sw64(int row, int k) {
    return (uint32_t)((k >> 5) * 8192 + row * 128 + ((((k >> 2) & 7) ^ (row & 7)) << 4) + (k & 3) * 4);
}
/* Round to TF32, nearest with ties away (cvt.rna's result): two integer
 * operations instead of cvt.rna.tf32.f32's emulation (sm_90 has no single
 * instruction for it); infinities stay, NaNs stay NaNs. */
static __device__ __forceinline__ float ssd_tf32r(float x) {
    return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}
static __device__ __forceinline__ void ssd_sts_tf32(uint32_t addr, float v) {
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(ssd_tf32r(v)) : "memory");
}
#endif

/* Persistent: gridDim.x blocks (at most one per SM) take the work units u =
 * blockIdx.x + k gridDim.x in turn; unit u (flattened: head fastest, so the
 * blocks running at one time read the same images from L2, then P tile,
 * chunk, batch row).  During a unit's last row block the next unit's first
 * stage, its g' / dt vectors (second buffer) and its entering state are
 * loaded, so no unit starts on an exposed load. */
struct SsdO32Unit {
    int h, p0, Lc, nrb, b;
    int64_t t0, bh;
    const char *cim, *bim;
    const float *Xg, *hs; /* hs: the state entering the unit (P N floats) */
};

/* Walks (configuration fg32, wsl > 0): a unit is a segment of
 * wsl chunks of one (b, head, P tile), u = walk * wsl + chunk in the
 * segment (walks flattened like ssd_state_fused_tf32's grid: head fastest,
 * P tile, segment, batch row); the block takes walks walk = blockIdx.x + k
 * gridDim.x and their chunks in order.  A walk starts from E_s (`ebuf`,
 * ssd_seg_scan's, P N floats per (b, h, segment)); at the last row block of
 * a chunk the state warpgroup carries the state on to the next chunk's
 * start instead of loading it, so no per-chunk state is read (or made). */
template <int Q>
__global__ void __launch_bounds__(256, 1) ssd_out_tf32(const ssd_fwd_args a, const float *cimg,
                                                      const float *bimg, int64_t nunits, const float *ebuf,
                                                      int wsl) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    typedef SsdO32 L;
    constexpr int NPART = Q / 64, LDX = L::LDX;
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sraw = sf_smem_u32(ssd_smem);
    const uint32_t sbase = (sraw + 1023u) & ~1023u;
    unsigned char *gbase = ssd_smem + (sbase - sraw);
    float *svec = reinterpret_cast<float *>(gbase + L::O_V); /* [2][g' Q, dt Q] */
    const uint32_t sXT = sbase + L::O_XT, sHs = sbase + L::O_HS;
    /* wgmma descriptors of X^T, Hs and stage 0's C (+ STAGE for stage 1, +
     * O_B for its B); each k-step one 32-bit add (wg_desc_add) */
    const uint64_t dXT = wg_desc(sXT, 16, 1024), dHs = wg_desc(sHs, 16, 1024), dC0 = wg_desc(sbase, 16, 1024);

    const int ptiles = a.P / 64, G = a.H / a.hpg;
    const int tid = threadIdx.x, warp = tid >> 5, wgi = warp >> 2, wl = warp & 3;
    const int lane = tid & 31, g = lane >> 2, t = lane & 3;

    const int nseg = wsl > 0 ? (a.nc + wsl - 1) / wsl : 1;
    /* unit indices are below nunits <= INT32_MAX (checked by the host):
     * 32-bit division (a 64-bit one is a ~70-instruction call, and each unit
     * took ten of them) */
    const uint32_t uH = (uint32_t)a.H, uP = (uint32_t)ptiles, uS = (uint32_t)nseg, uW = (uint32_t)wsl;
    /* the unit after u in this block's order (walks: the next chunk of the
     * segment, else the first of the block's next walk) */
    auto next_unit = [&](int64_t u) -> int64_t {
        if (wsl == 0) return u + gridDim.x;
        const uint32_t wk = (uint32_t)u / uW, seg = wk / (uH * uP) % uS;
        if ((uint32_t)u - wk * uW + 1 < (uint32_t)min(wsl, a.nc - (int)seg * wsl)) return u + 1;
        return ((int64_t)wk + gridDim.x) * wsl;
    };
    auto decode = [&](int64_t id64, SsdO32Unit &w) {
        uint32_t id = (uint32_t)id64, j = 0;
        if (wsl > 0) {
            j = id % uW;
            id /= uW;
        }
        w.h = (int)(id % uH);
        id /= uH;
        w.p0 = 64 * (int)(id % uP);
        id /= uP;
        int c;
        if (wsl > 0) {
            const int seg = (int)(id % uS);
            w.b = (int)(id / uS);
            c = seg * wsl + (int)j;
            /* the walk's entering state (only read at its first chunk) */
            w.hs = ebuf + (((int64_t)w.b * a.H + w.h) * nseg + seg) * (int64_t)a.P * a.N;
        } else {
            c = (int)(id % (uint32_t)a.nc);
            w.b = (int)(id / (uint32_t)a.nc);
            w.hs = (const float *)a.states + (((int64_t)w.b * a.H + w.h) * a.nc + c) * (int64_t)a.P * a.N;
        }
        const int b = w.b;
        w.t0 = (int64_t)c * Q;
        w.Lc = (int)min((int64_t)Q, a.L - w.t0);
        w.nrb = (w.Lc + 63) >> 6;
        w.bh = ((int64_t)b * a.H + w.h) * a.nc + c; /* (b, h, chunk) row of the vectors and states */
        const int64_t imo = (((int64_t)b * G + w.h / a.hpg) * a.nc + c) * NPART * (int64_t)(L::IMG / 4);
        w.cim = reinterpret_cast<const char *>(cimg + imo);
        w.bim = reinterpret_cast<const char *>(bimg + imo);
        w.Xg = (const float *)a.x + (int64_t)b * a.xs[0] + w.t0 * a.xs[1] + (int64_t)w.h * a.xs[2] + w.p0;
    };
    /* row block r of unit w into stage sp: the C and B images (32 KB each)
     * by two bulk copies on the stage's mbarrier, X by cp.async (one commit
     * group, empty when !on; one base address per thread, constant steps) */
    const uint32_t sbar = sbase + L::o_bar(Q);
    auto issue = [&](bool on, const SsdO32Unit &w, int r, int sp) {
        if (on) {
            if (tid == 0) {
                const uint32_t st = sbase + sp * L::STAGE, bar = sbar + 8 * sp;
                mbar_expect_tx(bar, 2 * L::IMG);
                bulk_copy_g2s(st, w.cim + (int64_t)r * L::IMG, L::IMG, bar);
                bulk_copy_g2s(st + L::O_B, w.bim + (int64_t)r * L::IMG, L::IMG, bar);
            }
            const int row = tid >> 4, cc = tid & 15, lv = w.Lc - 64 * r;
            const float *xg = w.Xg + (int64_t)(64 * r + row) * a.xs[1] + cc * 4;
            const int64_t xstep = 16 * a.xs[1];
            const uint32_t sx = sbase + sp * L::STAGE + L::O_X + (row * LDX + cc * 4) * 4;
#pragma unroll
            for (int it = 0; it < 4; it++) {
                const bool ok = row + 16 * it < lv;
                cp_async16_u32(sx + 16 * LDX * 4 * it, ok ? xg + it * xstep : w.Xg, ok ? 16 : 0);
            }
        }
        sf_cp_async_commit();
    };
    auto load_vec = [&](const SsdO32Unit &w, int vb) {
        float *v = svec + vb * 2 * Q;
        for (int i = tid; i < Q; i += 256) {
            v[i] = a.gw[w.bh * Q + i];
            v[Q + i] = a.dtw[w.bh * Q + i];
        }
    };

    /* WG1: Hs^T in the accumulator layout, half hf: rows (state columns)
     * n = 64 hf + 16 wl + g (+ 8), columns (P) 8 nt + 2 t (+ 1) */
    float HT[2][8][4];
    /* ssd_sw64(8 i + 2 t + (e & 1), 64 j + 16 wl + g + 8 (e >> 1)) = so[e] +
     * 1024 i + 16384 j: the 4 byte offsets of this thread's elements in the
     * accumulator layout, for Hs (rows P, K = n) and the B image (rows
     * token, K = n) alike; constant steps become immediate offsets */
    const uint32_t so[4] = {ssd_sw64(2 * t, 16 * wl + g), ssd_sw64(2 * t + 1, 16 * wl + g),
                            ssd_sw64(2 * t, 16 * wl + g + 8), ssd_sw64(2 * t + 1, 16 * wl + g + 8)};
    auto load_h = [&](const SsdO32Unit &w) {
        const int N = a.N, n0 = 16 * wl + g;
        const float *hg = w.hs + (int64_t)(w.p0 + 2 * t) * N + n0;
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int n = 64 * hf + 8 * (e >> 1);
                    HT[hf][nt][e] = n0 + n < N ? hg[(8 * nt + (e & 1)) * N + n] : 0.0f;
                }
    };
    auto store_hs = [&]() {
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) ssd_sts_tf32(sHs + so[e] + 1024 * nt + 16384 * hf, HT[hf][nt][e]);
        fence_async_smem();
    };

    /* WG1: X_r (stage at sX) -> X_r^T, then the barriers that publish it */
    auto transpose = [&](const float *sX) {
        /* X_r -> X_r^T (TF32, permuted k slots): 16-byte chunk c of P row p
         * holds slots 4c .. 4c + 3 = tokens 8 (c / 2) + 2 i + c % 2; lane =
         * P row within a half: conflict-free loads and stores */
#pragma unroll
        for (int it = 0; it < 8; it++) {
            const int cb = it * 4 + wl, p = 32 * (cb & 1) + lane, cc = cb >> 1;
            const float *xs = sX + (8 * (cc >> 1) + (cc & 1)) * LDX + p;
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(sXT + ssd_sw64(p, 4 * cc)),
                         "f"(ssd_tf32r(xs[0])), "f"(ssd_tf32r(xs[2 * LDX])), "f"(ssd_tf32r(xs[4 * LDX])),
                         "f"(ssd_tf32r(xs[6 * LDX]))
                         : "memory");
        }
        fence_async_smem();
        named_arrive(1, 256); /* X_r^T for the output warpgroup's P X_r */
        named_sync(3, 128);   /* and for this warpgroup's state product */
    };

    int64_t u = wsl > 0 ? (int64_t)blockIdx.x * wsl : blockIdx.x;
    if (u >= nunits) return;
    mbar_init_stages(sbar, 2);
    SsdO32Unit cu, nx;
    decode(u, cu);
    load_vec(cu, 0);
    issue(true, cu, 0, 0);
    if (wgi == 1) {
        load_h(cu);
        store_hs();
    }
    int k = 0, vb = 0; /* row blocks done (stage parity), vector buffer */
    for (;;) {
        const int64_t un = next_unit(u);
        const bool has_next = un < nunits;
        if (has_next) decode(un, nx);
        /* the next unit is this one's next chunk: its entering state comes
         * from this unit's state product over its last row block */
        const bool cont = wsl > 0 && un == u + 1;
        const int64_t t0 = cu.t0;
        const int Lc = cu.Lc, nrb = cu.nrb, h = cu.h, p0 = cu.p0;
        const int b = cu.b;
        const float *sg = svec + vb * 2 * Q, *sdt = sg + Q;
        for (int r = 0; r < nrb; r++, k++) {
            sf_cp_async_wait<0>();                             /* stage k's X */
            mbar_wait(sbar + 8 * (k & 1), (k >> 1) & 1); /* ... and images */
            fence_async_smem();
            __syncthreads(); /* stage k landed, Hs stored, X^T free, vectors visible */
            const bool last = r + 1 == nrb, more = !last, step = more || cont;
            /* Hs of the next row block comes from this unit's state product, or
             * is the next unit's entering state */
            const bool hsnext = more || has_next;
            if (more) issue(true, cu, r + 1, (k + 1) & 1);
            else {
                issue(has_next, nx, 0, (k + 1) & 1);
                if (has_next) load_vec(nx, vb ^ 1);
            }
            const uint32_t st = sbase + (k & 1) * L::STAGE;
            const uint64_t dC = wg_desc_add(dC0, (k & 1) * L::STAGE);
            const float *sX = reinterpret_cast<const float *>(gbase + (k & 1) * L::STAGE + L::O_X);
            const float gq = r > 0 ? sg[64 * r - 1] : 0.0f;
            if (wgi == 0) {
                const int rl0 = 16 * wl + g, i0 = 64 * r + rl0, i1 = i0 + 8;
                /* z of this thread's outputs, in flight during the products; rows
                 * past the chunk read the chunk's first row instead (not stored) */
                float2 zr[2][8];
                if (a.has_z) {
                    const float *zc = (const float *)a.z + (int64_t)b * a.zs[0] + t0 * a.zs[1] +
                                      (int64_t)h * a.zs[2] + p0 + 2 * t;
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        const float2 *zu = reinterpret_cast<const float2 *>(
                            i0 + 8 * u < Lc ? zc + (int64_t)(i0 + 8 * u) * a.zs[1] : zc);
#pragma unroll
                        for (int nt = 0; nt < 8; nt++) zr[u][nt] = __ldg(zu + 4 * nt);
                    }
                } else {
#pragma unroll
                    for (int u = 0; u < 2; u++)
#pragma unroll
                        for (int nt = 0; nt < 8; nt++) zr[u][nt] = make_float2(0.0f, 0.0f);
                }
                float O[8][4], S[8][4];
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < 16; kk++)
                    Wg<float, 64>::ss(&O[0][0], wg_desc_add(dC, (kk >> 2) * 8192 + (kk & 3) * 32),
                                      wg_desc_add(dHs, (kk >> 2) * 8192 + (kk & 3) * 32), kk > 0);
#pragma unroll
                for (int kk = 0; kk < 16; kk++)
                    Wg<float, 64>::ss(&S[0][0], wg_desc_add(dC, (kk >> 2) * 8192 + (kk & 3) * 32),
                                      wg_desc_add(dC, L::O_B + (kk >> 2) * 8192 + (kk & 3) * 32), kk > 0);
                wg_commit();
                /* while the products run: decay factors and D */
                const float g0 = sg[i0], g1 = sg[i1];
                const float f0 = sf_ex2(fminf(g0 - gq, 0.0f)), f1 = sf_ex2(fminf(g1 - gq, 0.0f));
                float fac[8][4];
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int v = 0; v < 2; v++) {
                        const int j = 64 * r + 8 * nt + 2 * t + v;
                        const float gj = sg[j], dj = sdt[j];
                        fac[nt][v] = j <= i0 ? sf_ex2(g0 - gj) * dj : 0.0f;
                        fac[nt][2 + v] = j <= i1 ? sf_ex2(g1 - gj) * dj : 0.0f;
                    }
                float dc[8][2];
                ssd_out_load_d(dc, a, h, p0, t);
                wg_wait<0>();
                reg_fence(O);
                reg_fence(S);
                if (hsnext) named_arrive(2, 256); /* Hs_r read: the state warpgroup may replace it */
                ssd_scale_rows(O, f0, f1);
                /* S column pair (2t, 2t+1) of 8-key group kk -> k slots (t, t + 4) */
                uint32_t pa[8][4];
#pragma unroll
                for (int kk = 0; kk < 8; kk++) {
                    pa[kk][0] = __float_as_uint(ssd_tf32r(S[kk][0] * fac[kk][0]));
                    pa[kk][1] = __float_as_uint(ssd_tf32r(S[kk][2] * fac[kk][2]));
                    pa[kk][2] = __float_as_uint(ssd_tf32r(S[kk][1] * fac[kk][1]));
                    pa[kk][3] = __float_as_uint(ssd_tf32r(S[kk][3] * fac[kk][3]));
                }
                named_sync(1, 256); /* X_r^T in shared memory */
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < 8; kk++)
                    Wg<float, 64>::rs(&O[0][0], pa[kk], wg_desc_add(dXT, (kk >> 2) * 8192 + (kk & 3) * 32));
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
                if (step) {
                    transpose(sX);
                    const float gl = sg[64 * r + 63];
                    const float d = sf_ex2(fminf(gl - gq, 0.0f));
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
                            w[kk][v] = sf_ex2(fminf(gl - sg[j], 0.0f)) * sdt[j];
                        }
                    const uint32_t sB = st + L::O_B;
#pragma unroll
                    for (int hf = 0; hf < 2; hf++) {
                        uint32_t af[8][4];
#pragma unroll
                        for (int kk = 0; kk < 8; kk++) {
                            const uint32_t sb = sB + 1024 * kk + 16384 * hf;
                            af[kk][0] = __float_as_uint(ssd_tf32r(ssd_ldsf(sb + so[0]) * w[kk][0]));
                            af[kk][1] = __float_as_uint(ssd_tf32r(ssd_ldsf(sb + so[2]) * w[kk][0]));
                            af[kk][2] = __float_as_uint(ssd_tf32r(ssd_ldsf(sb + so[1]) * w[kk][1]));
                            af[kk][3] = __float_as_uint(ssd_tf32r(ssd_ldsf(sb + so[3]) * w[kk][1]));
                        }
                        wg_fence();
#pragma unroll
                        for (int kk = 0; kk < 8; kk++)
                            Wg<float, 64>::rs(&HT[hf][0][0], af[kk],
                                              wg_desc_add(dXT, (kk >> 2) * 8192 + (kk & 3) * 32));
                        wg_commit();
                    }
                    wg_wait<0>();
                    reg_fence(HT[0]);
                    reg_fence(HT[1]);
                    named_sync(2, 256); /* the output warpgroup has read Hs_r */
                    store_hs();
                } else if (has_next) {
                    /* the next unit's entering state, in flight during the
                     * transposition */
                    load_h(nx);
                    transpose(sX);
                    named_sync(2, 256); /* the output warpgroup has read Hs_r */
                    store_hs();
                } else {
                    transpose(sX);
                }
            }
        }
        if (!has_next) break;
        u = un;
        cu = nx;
        vb ^= 1;
    }
#else
    (void)a;
    (void)cimg;
    (void)bimg;
    (void)nunits;
    (void)ebuf;
    (void)wsl;
#endif
}

#endif
