/* out_f32.cuh - ssd_out_sc32: the SSD output kernel for f32 inputs
 * (configuration split32, any GPU) with the intra-chunk off-diagonal term
 * taken through sub-chunk states, on TF32 mma.sync.
 *
 * Per 64-row block r of a chunk, with q = 64r - 1 (g'_{-1} = 0) and Hs_r the
 * state after token q of the chunk (Hs_0 = H, the state entering the chunk):
 *   O_r      = diag(exp2(g'_i - g'_q)) C_r Hs_r^T
 *            + ((C_r B_r^T) .* exp2(g'_i - g'_j) dt_j .* [j <= i]) X_r
 *   Hs_{r+1} = exp2(g'_{64r+63} - g'_q) Hs_r + X_r'^T B_r,
 *   X_r'     = rows j of X_r times exp2(g'_{64r+63} - g'_j) dt_j.
 * Every exponent is <= 0 (g' does not increase).  Only the diagonal 64 x 64
 * tile takes an exp2 per element; ssd_chunk_out visits every key tile below
 * the diagonal instead (10 tiles of 64 x 64 x N per 64-column P tile at
 * chunk 256, against 4 here plus 3 state updates and 4 C Hs^T products).
 *
 * Grid (flattened): head fastest (neighbouring blocks share C / B in L2),
 * then P tile of 64, chunk, batch row.  Block 256 = 8 warps, walking r in
 * order with the running state Hs (64 P rows x NP state columns, f32) in
 * registers; warp w: wc = w >> 2, wr = w & 3 (wc 0) or 3 - (w & 3) (wc 1).
 *   phase 1  S  = C_r B_r^T      rows 16wr.., keys 32wc..   (k = N)
 *            O  = C_r Hs_r^T     rows 16wr.., P    32wc..   (same A fragments)
 *            P  = S .* decay .* dt (mask) -> shared, in A-fragment order
 *            Hs = d_r Hs + X_r'^T B_r   P rows 16wr.., N cols wc NP/2..
 *   barrier
 *   phase 2  Hs -> shared (operand of the next block's C Hs^T);
 *            O += P X_r (rows 16wr.., P 32wc..); D x, z gate, 16-byte stores.
 *   barrier
 * C, B and X of block r + 1 are in flight (cp.async) during all of block r.
 * The last block skips the state update (its result is never read).
 *
 * Fragments (m16n8k8 TF32, a = (g, t) (g+8, t) (g, t+4) (g+8, t+4), b = (t, g)
 * (t+4, g), c = (g, 2t) (g, 2t+1) (g+8, 2t) (g+8, 2t+1)):
 *  - C, B, Hs are row-major with ld = NP + 4 (= 4 mod 32 words, rows 16 bytes
 *    apart mod 128): C_r B_r^T and C_r Hs^T read A and B with ldmatrix.x4 on
 *    f32 data (an 8 x 8 b16 matrix is 8 rows x 4 f32: thread (g, t) gets row
 *    g, word t, exactly the TF32 fragment element).  ldmatrix cannot round:
 *    C and B are rounded to TF32 in place once they land (each thread its
 *    own cp.async chunks); Hs is rounded when stored.
 *  - Products with k = token (X'^T B, P X) pair key 2t with k slot t and key
 *    2t + 1 with slot t + 4 on both operands (the sum does not care); output
 *    columns are paired too: of two n-tiles over 16 columns, tile 0's column
 *    c is 2c and tile 1's is 2c + 1, so one 8-byte load gives both tiles'
 *    element and a thread's accumulators hold 4 consecutive columns (16-byte
 *    stores of O, float4 state rows).  X'^T B pairs its M rows the same way
 *    (row g <-> P row 2g, g + 8 <-> 2g + 1), and Hs is stored with the rows
 *    of each 16-row group de-interleaved (P row 16s + 2g + e at smem row
 *    16s + 8e + g) so that C Hs^T's n-tile pair reads two 8-row matrices.
 *    Those 8-byte loads hit 8t + 2g (mod 32) with ld = 4 mod 16 words: X
 *    (ld 68) and B (ld NP + 4) are conflict-free.
 *  - P goes from S's accumulators to shared memory already in the A-fragment
 *    order of P X (float4 per lane per 8-key step: {c0, c2, c1, c3}) and is
 *    read back by the warp with the same rows (any wc) with one 16-byte load.
 * X stays raw (D x needs full precision) and is rounded in the fragment loads.
 *
 * Shared memory, NP 128: C 2 x 33 KB, B 2 x 33 KB, Hs 33 KB, X 2 x 17 KB,
 * P 16 KB, g' / dt / w 3 KB = 218 KB: one block per SM (NP 64: 138 KB).
 */
#ifndef SF_SSD_OUT_F32_CUH
#define SF_SSD_OUT_F32_CUH

#include "ssd/common.cuh"

template <int NP> struct SsdSc32 {
    static constexpr int LDN = NP + 4, LDX = 64 + 4;
    static constexpr int TN = 64 * LDN, TX = 64 * LDX; /* floats per tile */
    static constexpr int O_C = 0, O_B = 2 * TN, O_HS = 4 * TN, O_X = 5 * TN;
    static constexpr int O_P = O_X + 2 * TX, O_V = O_P + 4 * 8 * 32 * 4;
    static constexpr size_t SMEM = (size_t)(O_V + 3 * 256) * 4;
};

/* Rounds to TF32, in place, the 16-byte chunks that ssd_stage_async<float,
 * NT> gave this thread for a ROWS x COLS tile (same index walk): valid once
 * this thread's copies have completed (cp.async.wait_group with a memory
 * clobber), before the barrier that publishes.  All loads first, then the
 * stores: one shared-memory latency per tile, not one per chunk (the
 * compiler cannot tell the chunks apart and would serialise them). */
template <int NT, int ROWS, int COLS>
static __device__ __forceinline__ void ssd_sc32_round_own(float *s, int ld) {
    constexpr int VPR = COLS / 4, TOTAL = ROWS * VPR, PER = (TOTAL + NT - 1) / NT;
    float4 v[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int idx = threadIdx.x + u * NT;
        if (idx < TOTAL) {
            const int r = idx / VPR, cv = (idx - r * VPR) * 4;
            v[u] = *reinterpret_cast<const float4 *>(s + r * ld + cv);
        }
    }
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int idx = threadIdx.x + u * NT;
        if (idx < TOTAL) {
            const int r = idx / VPR, cv = (idx - r * VPR) * 4;
            *reinterpret_cast<float4 *>(s + r * ld + cv) =
                make_float4(sf_tf32(v[u].x), sf_tf32(v[u].y), sf_tf32(v[u].z), sf_tf32(v[u].w));
        }
    }
}

/* C and B are rounded once in shared memory, after they land (rounding every
 * fragment as it is loaded instead: tried and lost, bench/RESULTS.md). */
template <int NP>
__global__ void __launch_bounds__(256, 1) ssd_out_sc32(const ssd_fwd_args a) {
    typedef SsdSc32<NP> L;
    typedef ssd_mma<float> M;
    constexpr int LDN = L::LDN, LDX = L::LDX, NQ = NP / 32; /* state n-tile pairs per warp */
    extern __shared__ __align__(16) unsigned char ssd_sc32_smem[];
    float *const sm = reinterpret_cast<float *>(ssd_sc32_smem);
    float *const sCb = sm + L::O_C, *const sBb = sm + L::O_B, *const sHs = sm + L::O_HS;
    float *const sXb = sm + L::O_X, *const sP = sm + L::O_P;
    float *const sg = sm + L::O_V, *const sdt = sg + 256, *const sw = sg + 512;

    const int ptiles = a.P / 64;
    const ssd_hpcb blk = ssd_block_hpcb(a, ptiles);
    const int h = blk.h, pt = blk.pt, c = blk.c, b = blk.b;
    const int64_t t0 = (int64_t)c * a.Q;
    const int Lc = (int)min((int64_t)a.Q, a.L - t0);
    const int nr = (Lc + 63) >> 6; /* row blocks, >= 1 */
    const int p0 = pt * 64, grp = h / a.hpg;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    /* warps w and w + 4 share a scheduler (sub-partition w & 3): pairing row
     * group wr with 3 - wr there evens out the causal work (S and P X grow
     * with wr), 392 / 392 / 360 / 360 mma per block of 64 rows instead of
     * 304 .. 448 with wr = w & 3 */
    const int wc = warp >> 2, wr = wc ? 3 - (warp & 3) : (warp & 3);
    const int64_t bh = (int64_t)b * a.H + h;
    const float *Cg = (const float *)a.C + (int64_t)b * a.Cs[0] + t0 * a.Cs[1] + (int64_t)grp * a.Cs[2];
    const float *Bg = (const float *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] + (int64_t)grp * a.Bs[2];
    const float *Xg = (const float *)a.x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;

    /* C, B, X of row block r into buffer r & 1; rows past the chunk's end and
     * state columns >= N become 0 */
    auto issue = [&](int r) {
        const int buf = r & 1, rv = min(64, Lc - 64 * r);
        const int64_t j0 = 64 * (int64_t)r;
        ssd_stage_async<float, 256>(sCb + buf * L::TN, LDN, Cg + j0 * a.Cs[1], a.Cs[1], 64, NP, rv,
                                    a.N, a.vec_C);
        ssd_stage_async<float, 256>(sBb + buf * L::TN, LDN, Bg + j0 * a.Bs[1], a.Bs[1], 64, NP, rv,
                                    a.N, a.vec_B);
        ssd_stage_async<float, 256>(sXb + buf * L::TX, LDX, Xg + j0 * a.xs[1], a.xs[1], 64, 64, rv,
                                    64, a.vec_x);
    };
    auto round_cb = [&](int r) {
        const int buf = r & 1;
        ssd_sc32_round_own<256, 64, NP>(sCb + buf * L::TN, LDN);
        ssd_sc32_round_own<256, 64, NP>(sBb + buf * L::TN, LDN);
    };

    issue(0);
    sf_cp_async_commit();
    /* g', dt and the state-update weights w_j = exp2(g'_(j|63) - g'_j) dt_j
     * (Q <= 256 = threads; past the chunk's end dt is 0, so w is 0) */
    if (tid < a.Q) {
        const float *gv = a.gw + (bh * a.nc + c) * a.Q, *dv = a.dtw + (bh * a.nc + c) * a.Q;
        const float gj = gv[tid], dj = dv[tid];
        sg[tid] = gj;
        sdt[tid] = dj;
        sw[tid] = exp2f(fminf(gv[tid | 63] - gj, 0.0f)) * dj;
    }

    /* Hs in registers: pair q covers state columns nb = nn0 + 16q ..; for P
     * row pm0 + 2g + u the thread holds columns nb + 4t .. + 3 as
     * {Hs[q][0][2u], Hs[q][1][2u], Hs[q][0][2u + 1], Hs[q][1][2u + 1]} */
    const int pm0 = 16 * wr, nn0 = wc * (NP / 2);
    float Hs[NQ][2][4];
    {
        const float *hg = (const float *)a.states + (bh * a.nc + c) * (int64_t)a.P * a.N +
                          (int64_t)p0 * a.N;
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int n = nn0 + 16 * q + 4 * t, p = pm0 + 2 * g + u;
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (n < a.N) v = *reinterpret_cast<const float4 *>(hg + (int64_t)p * a.N + n);
                Hs[q][0][2 * u] = v.x;
                Hs[q][1][2 * u] = v.y;
                Hs[q][0][2 * u + 1] = v.z;
                Hs[q][1][2 * u + 1] = v.w;
            }
    }
    /* Hs -> shared, TF32-rounded, P row pm0 + 2g + u at row pm0 + 8u + g */
    auto store_hs = [&]() {
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int u = 0; u < 2; u++)
                *reinterpret_cast<float4 *>(sHs + (pm0 + 8 * u + g) * LDN + nn0 + 16 * q + 4 * t) =
                    make_float4(sf_tf32(Hs[q][0][2 * u]), sf_tf32(Hs[q][1][2 * u]),
                                sf_tf32(Hs[q][0][2 * u + 1]), sf_tf32(Hs[q][1][2 * u + 1]));
    };
    store_hs();
    sf_cp_async_wait_mem<0>(); /* clobber: round_cb's loads stay after the wait */
    round_cb(0);
    __syncthreads();

    /* D of this thread's output columns 32wc + 16pp + 4t + e (the same in every block) */
    float Dv[2][4];
#pragma unroll
    for (int pp = 0; pp < 2; pp++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            Dv[pp][e] = !a.has_D ? 0.0f
                        : a.D_pc ? a.D[h * a.Ds[0] + (int64_t)(p0 + 32 * wc + 16 * pp + 4 * t + e) * a.Ds[1]]
                                 : a.D[h * a.Ds[0]];
    const float *zp = (const float *)a.z;
    float *op = (float *)a.out;
    const int lr = lane & 7, lm = lane >> 3; /* ldmatrix: row in matrix, matrix */
    const int il0 = 16 * wr + g;             /* block-local rows il0, il0 + 8 */
    /* S's key pairs (16 keys each) that reach rows <= 16wr + 15 */
    const bool act0 = 2 * wc <= wr, act1 = 2 * wc + 1 <= wr;

    for (int r = 0; r < nr; r++) {
        const int buf = r & 1, i0 = 64 * r;
        const bool more = r + 1 < nr;
        if (more) issue(r + 1); /* buffer (r + 1) & 1: last read in block r - 1 */
        sf_cp_async_commit();
        const float *sC = sCb + buf * L::TN, *sB = sBb + buf * L::TN, *sX = sXb + buf * L::TX;
        const float gq = r ? sg[i0 - 1] : 0.0f;

        /* ---- phase 1: S = C B^T and O = C Hs^T, k over the state ---- */
        float S[4][4], O[4][4];
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                S[n][e] = 0.0f;
                O[n][e] = 0.0f;
            }
        {
            const float *pa = sC + (16 * wr + lr + (lm & 1) * 8) * LDN + (lm >> 1) * 4;
            const float *pb = sB + (32 * wc + lr + (lm >> 1) * 8) * LDN + (lm & 1) * 4;
            const float *ph = sHs + (32 * wc + lr + (lm >> 1) * 8) * LDN + (lm & 1) * 4;
#pragma unroll 4
            for (int k = 0; k < NP; k += 8) {
                uint32_t af[4], bf[4];
                sf_ldsm_x4(af, pa + k);
                if (act0) {
                    sf_ldsm_x4(bf, pb + k);
                    M::mma(S[0], af, bf);
                    M::mma(S[1], af, bf + 2);
                }
                if (act1) {
                    sf_ldsm_x4(bf, pb + 16 * LDN + k);
                    M::mma(S[2], af, bf);
                    M::mma(S[3], af, bf + 2);
                }
                sf_ldsm_x4(bf, ph + k);
                M::mma(O[0], af, bf);
                M::mma(O[1], af, bf + 2);
                sf_ldsm_x4(bf, ph + 16 * LDN + k);
                M::mma(O[2], af, bf);
                M::mma(O[3], af, bf + 2);
            }
        }
        /* row factors exp2(g'_i - g'_q); rows past the chunk's end read the
         * last g' (never stored) */
        float rg[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            rg[u] = sg[i0 + il0 + 8 * u];
            const float f = exp2f(fminf(rg[u] - gq, 0.0f));
#pragma unroll
            for (int n = 0; n < 4; n++) {
                O[n][2 * u] *= f;
                O[n][2 * u + 1] *= f;
            }
        }
        /* P = S .* exp2(g'_i - g'_j) dt_j, j <= i, j < Lc, to shared in the
         * A-fragment order of P X (8-key step kk = 4wc + n) */
#pragma unroll
        for (int n = 0; n < 4; n++) {
            if (n < 2 ? act0 : act1) {
                float v[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int u = e >> 1, il = il0 + 8 * u, jl = 32 * wc + 8 * n + 2 * t + (e & 1);
                    const bool ok = jl <= il && i0 + jl < Lc;
                    v[e] = ok ? S[n][e] * exp2f(fminf(rg[u] - sg[i0 + jl], 0.0f)) * sdt[i0 + jl]
                              : 0.0f;
                }
                *reinterpret_cast<float4 *>(sP + ((wr * 8 + 4 * wc + n) * 32 + lane) * 4) =
                    make_float4(sf_tf32(v[0]), sf_tf32(v[2]), sf_tf32(v[1]), sf_tf32(v[3]));
            }
        }
        /* Hs_{r+1} = d_r Hs_r + X'^T B (rows pm0 + 2g (+1), columns paired) */
        if (more) {
            const float dr = exp2f(fminf(sg[i0 + 63] - gq, 0.0f));
#pragma unroll
            for (int q = 0; q < NQ; q++)
#pragma unroll
                for (int e = 0; e < 2; e++)
#pragma unroll
                    for (int k = 0; k < 4; k++) Hs[q][e][k] *= dr;
            const float *xa = sX + 2 * t * LDX + pm0 + 2 * g;
            const float *bb = sB + 2 * t * LDN + nn0 + 2 * g;
            const float *ww = sw + i0 + 2 * t;
#pragma unroll 2
            for (int kk = 0; kk < 8; kk++) {
                const float2 w = *reinterpret_cast<const float2 *>(ww + 8 * kk);
                const float2 x0 = *reinterpret_cast<const float2 *>(xa + 8 * kk * LDX);
                const float2 x1 = *reinterpret_cast<const float2 *>(xa + (8 * kk + 1) * LDX);
                uint32_t af[4];
                af[0] = __float_as_uint(sf_tf32(x0.x * w.x));
                af[1] = __float_as_uint(sf_tf32(x0.y * w.x));
                af[2] = __float_as_uint(sf_tf32(x1.x * w.y));
                af[3] = __float_as_uint(sf_tf32(x1.y * w.y));
#pragma unroll
                for (int q = 0; q < NQ; q++) {
                    const float2 b0 = *reinterpret_cast<const float2 *>(bb + 8 * kk * LDN + 16 * q);
                    const float2 b1 =
                        *reinterpret_cast<const float2 *>(bb + (8 * kk + 1) * LDN + 16 * q);
                    uint32_t bA[2] = {__float_as_uint(b0.x), __float_as_uint(b1.x)};
                    uint32_t bB[2] = {__float_as_uint(b0.y), __float_as_uint(b1.y)};
                    M::mma(Hs[q][0], af, bA);
                    M::mma(Hs[q][1], af, bB);
                }
            }
        }
        __syncthreads(); /* P visible; every reader of C_r, B_r and Hs_r done */

        /* ---- phase 2 ---- */
        if (more) store_hs();
        /* z of this thread's outputs: rows il0 + 8u, P columns 32wc + 16pp + 4t .. + 3 */
        float zv[2][2][4];
#pragma unroll
        for (int u = 0; u < 2; u++)
#pragma unroll
            for (int pp = 0; pp < 2; pp++) {
                const int i = i0 + il0 + 8 * u, pl = 32 * wc + 16 * pp + 4 * t;
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (a.has_z && i < Lc) {
                    const float *zr = zp + (int64_t)b * a.zs[0] + (t0 + i) * a.zs[1] +
                                      (int64_t)h * a.zs[2] + p0 + pl;
                    if (a.vec_z) {
                        v = __ldg(reinterpret_cast<const float4 *>(zr));
                    } else {
                        v = make_float4(zr[0], zr[1], zr[2], zr[3]);
                    }
                }
                zv[u][pp][0] = v.x;
                zv[u][pp][1] = v.y;
                zv[u][pp][2] = v.z;
                zv[u][pp][3] = v.w;
            }
        /* O += P X over the key steps that reach rows <= 16wr + 15 */
        {
            const float *xb = sX + 2 * t * LDX + 32 * wc + 2 * g;
            for (int kk = 0; kk <= 2 * wr + 1; kk++) {
                const float4 pa4 = *reinterpret_cast<const float4 *>(sP + ((wr * 8 + kk) * 32 + lane) * 4);
                const uint32_t af[4] = {__float_as_uint(pa4.x), __float_as_uint(pa4.y),
                                        __float_as_uint(pa4.z), __float_as_uint(pa4.w)};
#pragma unroll
                for (int pp = 0; pp < 2; pp++) {
                    const float2 b0 = *reinterpret_cast<const float2 *>(xb + 8 * kk * LDX + 16 * pp);
                    const float2 b1 =
                        *reinterpret_cast<const float2 *>(xb + (8 * kk + 1) * LDX + 16 * pp);
                    const uint32_t bA[2] = {__float_as_uint(sf_tf32(b0.x)),
                                            __float_as_uint(sf_tf32(b1.x))};
                    const uint32_t bB[2] = {__float_as_uint(sf_tf32(b0.y)),
                                            __float_as_uint(sf_tf32(b1.y))};
                    M::mma(O[2 * pp], af, bA);
                    M::mma(O[2 * pp + 1], af, bB);
                }
            }
        }
        /* epilogue: D x (x from the raw X tile), z gate, 16-byte stores */
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int il = il0 + 8 * u, i = i0 + il;
            if (i >= Lc) continue;
            const int64_t tok = t0 + i;
#pragma unroll
            for (int pp = 0; pp < 2; pp++) {
                const int pl = 32 * wc + 16 * pp + 4 * t;
                float y[4] = {O[2 * pp][2 * u], O[2 * pp + 1][2 * u], O[2 * pp][2 * u + 1],
                              O[2 * pp + 1][2 * u + 1]};
                if (a.has_D) {
                    const float4 xv = *reinterpret_cast<const float4 *>(sX + il * LDX + pl);
                    const float xe[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) y[e] = fmaf(Dv[pp][e], xe[e], y[e]);
                }
                if (a.has_z) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float zz = zv[u][pp][e];
                        y[e] *= zz / (1.0f + expf(-zz));
                    }
                }
                float *orow = op + (int64_t)b * a.os[0] + tok * a.os[1] + (int64_t)h * a.os[2] + p0 + pl;
                if (a.vec_o) {
                    *reinterpret_cast<float4 *>(orow) = make_float4(y[0], y[1], y[2], y[3]);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; e++) orow[e] = y[e];
                }
            }
        }
        if (more) {
            sf_cp_async_wait_mem<0>(); /* this thread's copies of block r + 1 */
            round_cb(r + 1);
        }
        __syncthreads(); /* block r + 1's tiles and Hs visible; block r's readers done */
    }
    sf_cp_async_wait<0>();
}

#endif
