/* bwd_tc_chunk.cuh - the per-block stages of the SSD backward's
 * tensor-core configuration ("tc"), after bwd_tc_state.cuh has left each
 * chunk's entering state h (tS) and leaving adjoint G (tdS).  A chunk's
 * tokens are cut into blocks of 64; with e(i, j) = exp(cum_i - cum_j) for
 * j <= i (0 above the diagonal), CB = C B^T and GX = gy x^T:
 *     W = GX e dt_j      M = CB e      Z = W CB   (64 x 64 per block pair)
 *     dC_i = sum_j W B_j + exp(cum_i) gy_i h             (rows kernel)
 *     y_i  = sum_j (M dt_j) x_j + exp(cum_i) C_i h^T + D x_i   -> dz
 *     dB_j = sum_i W^T C_i + exp(cl - cum_j) dt_j x_j G    (cols kernel)
 *     dx_j = dt_j (sum_i M^T gy_i + exp(cl - cum_j) B_j G^T) + D gy_j
 * and d(cum) = row sums of Z + exp(cum) (gy h) . C  (rows)
 *            - column sums of Z - exp(cl - cum) dt (x G) . B  (cols)
 * plus, at the chunk's last token, the state-out terms: the sum of the
 * latter and exp(cl) <h, G>.  ssd_tc_fin_kernel sums d(cum) backwards
 * into d(log decay) per token, then ddt, and the dA, ddt_bias partials.
 * The per-pair terms that are linear in W come from the pairs kernel
 * (bwd_tc_pairs.cuh): Z's sums per head, and W summed over a head group
 * (the products with B_j, C_i once a group, not once a head); here per
 * head only M = CB e (CB from the pairs kernel) and its products with x_j
 * or gy_i.  A rows / cols CTA walks a.hk heads of one group (dC_i, dB_j
 * are sums over the group's heads: its shared-memory accumulator sums them
 * before one write).  Every sum runs in a fixed order: bit-identical from
 * run to run. */
#ifndef SF_SSD_BWD_TC_CHUNK_CUH
#define SF_SSD_BWD_TC_CHUNK_CUH

#include "ssd/bwd_tc_blk.cuh"
#include <type_traits>

/* acc (16 x 16 tile at m0, n0) times the row scale sc[row] added to dst
 * (ld columns, f32); with q, also the row sums of (that) . s16 (a 16-bit
 * tile, ld16) into q[row * qld + n0 / 16]. */
template <typename T>
static __device__ __forceinline__ void tc_add(float *dst, int ld, int m0, int n0, const float (*acc)[4],
                                              const float *sc, const float *sc2, float *q, int qld, const T *s16,
                                              int ld16) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
    T tag{};
    float qs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int r = m0 + g + 8 * hf, c = n0 + 8 * nt + 2 * t;
            const float s = (sc ? sc[r] : 1.0f) * (sc2 ? sc2[r] : 1.0f);
            const float v0 = acc[nt][2 * hf] * s, v1 = acc[nt][2 * hf + 1] * s;
            float2 *d = reinterpret_cast<float2 *>(dst + r * ld + c);
            float2 o = *d;
            o.x += v0;
            o.y += v1;
            *d = o;
            if (q) {
                const float2 e = ssd_unpack(tag, *reinterpret_cast<const uint32_t *>(s16 + r * ld16 + c));
                qs[hf] += v0 * e.x + v1 * e.y;
            }
        }
    if (q)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const float v = tc_quad_sum(qs[hf]);
            if (t == 0) q[(m0 + g + 8 * hf) * qld + (n0 >> 4)] = v;
        }
}


/* The pieces of a 64 x 64 f32 CB tile a thread builds M from: float4
 * u is the tile's float4 threadIdx.x + u * SSD_BWD_THREADS (row r = that
 * / 16, columns 4 (that % 16) ..). */
#define TC_CBV (TC_BT * TC_BT / 4 / SSD_BWD_THREADS)
struct tc_cb_regs {
    float4 v[TC_CBV];
};

/* Block pair pp's f32 CB tile (the pairs kernel's) into registers: issued
 * a pair ahead, its loads are in flight while the pair before runs. */
static __device__ __forceinline__ tc_cb_regs tc_load_cb(const float *cbt, int pp) {
    const float4 *src = reinterpret_cast<const float4 *>(cbt + pp * (int64_t)(TC_BT * TC_BT));
    tc_cb_regs cb;
#pragma unroll
    for (int u = 0; u < TC_CBV; u++) cb.v[u] = __ldg(src + threadIdx.x + u * SSD_BWD_THREADS);
    return cb;
}

/* One block pair (bi, bj) of a head, x_j (rows) or gy_i (cols) staged and
 * visible, CB in registers (tc_load_cb): M = CB e (times dt_j: rows), as
 * 16-bit into sM; then rows: acc += M x_j, cols: acc += M^T gy_i (M is
 * stored [i][j]: k-major for the transposed product).  sM is read until
 * the caller's next barrier. */
template <typename T, bool ROWS>
static __device__ __forceinline__ void tc_pair_m(int P, int bi, int bj, const tc_cb_regs &cb, const T *sG,
                                                 const T *sX, T *sM, const float *vI, const float *vJ,
                                                 float (*acc)[2][4]) {
    using F = ssd_mma<T>;
    const int ldP = P + 8;
    T tag{};
    if (bj < bi) {
        /* e(i, j) = exp(cum_i - ref) exp(ref - cum_j), both <= 1 with ref
         * the cum at block j's end: 8 exps a thread instead of 16 */
        const int c = (threadIdx.x & 15) << 2;
        const float ref = vJ[TC_BT - 1];
        float vd[4];
#pragma unroll
        for (int e = 0; e < 4; e++) vd[e] = __expf(ref - vJ[c + e]) * (ROWS ? vJ[TC_BT + c + e] : 1.0f);
#pragma unroll
        for (int u = 0; u < TC_CBV; u++) {
            const int r = (threadIdx.x >> 4) + 16 * u;
            const float ur = __expf(vI[r] - ref);
            const uint2 mp = make_uint2(ssd_pack(tag, cb.v[u].x * vd[0] * ur, cb.v[u].y * vd[1] * ur),
                                        ssd_pack(tag, cb.v[u].z * vd[2] * ur, cb.v[u].w * vd[3] * ur));
            *reinterpret_cast<uint2 *>(sM + r * TC_LDT + c) = mp;
        }
    } else {
#pragma unroll
        for (int u = 0; u < TC_CBV; u++) {
            const int idx = threadIdx.x + u * SSD_BWD_THREADS, r = idx >> 4, c = (idx & 15) << 2;
            const float cv[4] = {cb.v[u].x, cb.v[u].y, cb.v[u].z, cb.v[u].w};
            float m[4];
#pragma unroll
            for (int e = 0; e < 4; e++) { /* the diagonal block: causal where c + e <= r */
                const float ex = c + e <= r ? __expf(vI[r] - vJ[c + e]) : 0.0f; /* <= 1: cum falls */
                m[e] = ROWS ? cv[e] * ex * vJ[TC_BT + c + e] : cv[e] * ex;
            }
            const uint2 mp = make_uint2(ssd_pack(tag, m[0], m[1]), ssd_pack(tag, m[2], m[3]));
            *reinterpret_cast<uint2 *>(sM + r * TC_LDT + c) = mp;
        }
    }
    __syncthreads();
    if constexpr (ROWS)
        tc_gemm_acc<T>(
            P, TC_BT, [&](uint32_t f[4], int m0, int k0) { F::load_a(f, sM, TC_LDT, m0, k0); },
            [&](uint32_t f[4], int n0, int k0) { F::load_b2_t(f, sX, ldP, n0, k0); }, acc);
    else
        tc_gemm_acc<T>(
            P, TC_BT, [&](uint32_t f[4], int m0, int k0) { F::load_a_t(f, sM, TC_LDT, m0, k0); },
            [&](uint32_t f[4], int n0, int k0) { F::load_b2_t(f, sG, ldP, n0, k0); }, acc);
}

/* The head group's dC_i (rows: sum over j <= i of Ws_ij B_j) or dB_j
 * (cols: sum over i >= j of Ws_ij^T C_i) added to aN, Ws the pairs
 * kernel's W summed over the group's heads (tws); sW and sBC (ld N + 8)
 * are free. */
template <typename T, bool ROWS>
static __device__ __forceinline__ void tc_ws_products(const ssd_bwd_args &a, int N, const tc_cta &cta, const tc_blk &b0,
                                                      int blk, T *sW, T *sBC, float *aN, int ldA) {
    using F = ssd_mma<T>;
    const int ldN = N + 8, nb = a.Q / TC_BT;
    const auto add = [&](int m0, int n0, float (*c)[4]) {
        tc_add<T>(aN, ldA, m0, n0, c, nullptr, nullptr, nullptr, 0, nullptr, 0);
    };
    const int lo = ROWS ? 0 : blk, hi = ROWS ? blk : nb - 1;
    for (int o = lo; o <= hi; o++) {
        if (!ROWS && tc_valid(b0, o) == 0) break;
        const int pp = ROWS ? tc_pair_ix(blk, o) : tc_pair_ix(o, blk);
        const T *ws = (const T *)a.tws + (cta.gi * a.npair + pp) * (int64_t)(TC_BT * TC_BT);
        ssd_stage_async<T, SSD_BWD_THREADS>(sW, TC_LDT, ws, TC_BT, TC_BT, TC_BT, TC_BT, TC_BT, true);
        if (ROWS) tc_stage_bc<T>(a, N, b0, o, sBC, a.B, a.Bs);
        else tc_stage_bc<T>(a, N, b0, o, sBC, a.C, a.Cs);
        tc_stage_wait();
        __syncthreads();
        if constexpr (ROWS)
            tc_gemm<T>(
                TC_BT, N, TC_BT, [&](uint32_t f[4], int m0, int k0) { F::load_a(f, sW, TC_LDT, m0, k0); },
                [&](uint32_t f[4], int n0, int k0) { F::load_b2_t(f, sBC, ldN, n0, k0); }, add);
        else
            tc_gemm<T>(
                TC_BT, N, TC_BT, [&](uint32_t f[4], int m0, int k0) { F::load_a_t(f, sW, TC_LDT, m0, k0); },
                [&](uint32_t f[4], int n0, int k0) { F::load_b2_t(f, sBC, ldN, n0, k0); }, add);
        __syncthreads();
    }
}


/* The CTA's dB or dC rows (64 x N f32 in acc, ld columns, its first
 * vi rows valid), summed over its heads: into the output when those heads
 * are the whole group, else into the head group's partial rows
 * (b, L, H / hk, N) of part. */
static __device__ __forceinline__ void tc_store_bc(const ssd_bwd_args &a, const tc_blk &b0, int64_t t0, int vi,
                                                   int N, const float *acc, int ld, float *part, void *out,
                                                   const int64_t *os, int odt) {
    const int nhg = a.H / a.hk, hg = b0.k.h / a.hk;
    for (int i = threadIdx.x; i < vi * N; i += SSD_BWD_THREADS) {
        const int r = i / N, n = i % N;
        const int64_t t = t0 + r;
        if (part)
            part[(((int64_t)b0.k.b * a.L + t) * nhg + hg) * N + n] = acc[r * ld + n];
        else if (out)
            bwd_st(out, odt, (int64_t)b0.k.b * os[0] + t * os[1] + (int64_t)b0.k.g * os[2] + n, acc[r * ld + n]);
    }
}

/* One CTA per (batch, head group, chunk, block i): for each of its a.hk
 * heads dz_i and the rows' part of d(cum); dC_i summed over those heads
 * (into dC when they are the whole group, else into the group's partial
 * rows pdC that ssd_bwd_bc_kernel sums). */
template <typename T, int PT, int NT>
__global__ void __launch_bounds__(SSD_BWD_THREADS, 2) ssd_tc_rows_kernel(const ssd_bwd_args a) {
    extern __shared__ __align__(16) unsigned char smraw[];
    using F = ssd_mma<T>;
    const int P = PT ? PT : a.P, N = NT ? NT : a.N, Q = a.Q, ldP = P + 8, ldN = N + 8, nq = N / 16;
    const int ldA = N + 8; /* the f32 accumulator's rows: conflict-free float2 access */
    const tc_cta cta = tc_cta_of(a);
    const int bi = cta.blk;
    const tc_blk b0 = tc_blk_of(a, tc_item(a, cta, 0));
    const int vi = tc_valid(b0, bi); /* the same for every head (no varlen) */
    if (vi == 0) return;
    const tc_blk_smem L = tc_blk_layout(P, N);
    T *sC = (T *)(smraw + L.oC), *sG = (T *)(smraw + L.oG), *sB = (T *)(smraw + L.oV), *sX = (T *)(smraw + L.oX);
    T *sW = (T *)(smraw + L.oW), *sM = (T *)(smraw + L.oM), *sS = (T *)(smraw + L.oV); /* sS: the head's state */
    float *aN = (float *)(smraw + L.oaN);
    float *zq = (float *)(smraw + L.oq), *v = (float *)(smraw + L.ov);
    float *vI = v, *vJ = v + 2 * TC_BT, *vJ2 = v + 4 * TC_BT;
    const int64_t t0 = b0.c0 + (int64_t)bi * TC_BT;
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    for (int i = threadIdx.x; i < TC_BT * ldA; i += SSD_BWD_THREADS) aN[i] = 0.0f;
    tc_stage_bc<T>(a, N, b0, bi, sC, a.C, a.Cs);
    tc_blk b = b0;
    for (int hj = 0; hj < a.hk; hj++) {
        if (hj > 0) b = tc_blk_next(a, b);
        float acc[4][2][4]; /* y_i (64 x P), tc_gemm_acc's tiles */
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[j][0][e] = acc[j][1][e] = 0.0f;
        /* the pairs (bi, bj <= bi) in order, the next one's x_j, cum / dt
         * rows (cp.async) and CB (registers) loading while one runs: x_j
         * alternates between sX and sW (x_i, last, in sX), cum / dt_j between
         * vJ and vJ2 */
        tc_load_cd(a, b, bi, vI);
        tc_stage_xg<T>(a, P, b, bi, sG, TcXG::gy_ws);
        tc_stage_state<T>(P, N, sS, (const T *)a.tS16 + b.item * (int64_t)P * N); /* for after the loop */
        const float *cbt = tc_cb_tiles(a, b);
        tc_load_cd(a, b, 0, (bi & 1) ? vJ2 : vJ);
        tc_stage_xg<T>(a, P, b, 0, (bi & 1) ? sW : sX, TcXG::x);
        sf_cp_async_commit();
        tc_cb_regs cbn = tc_load_cb(cbt, tc_pair_ix(bi, 0));
        for (int bj = 0; bj <= bi; bj++) {
            const bool odd = (bi - bj) & 1;
            sf_cp_async_wait<0>();
            __syncthreads(); /* the pair's tiles visible; the pair before done with sM and its buffers */
            const tc_cb_regs cb = cbn;
            if (bj < bi) {
                tc_load_cd(a, b, bj + 1, odd ? vJ : vJ2);
                tc_stage_xg<T>(a, P, b, bj + 1, odd ? sX : sW, TcXG::x);
                sf_cp_async_commit();
                cbn = tc_load_cb(cbt, tc_pair_ix(bi, bj + 1));
            }
            tc_pair_m<T, true>(P, bi, bj, cb, sG, odd ? sW : sX, sM, vI, odd ? vJ2 : vJ, acc);
        }
        __syncthreads(); /* the last product is done with sM, sW */
        /* sS holds the state entering the chunk, sX still x_i (bj == bi last); dout_i and z_i for dz
         * into the free sW, sM (P <= 64: they fit) */
        const bool zsm = a.has_z && a.dz && P <= TC_BT;
        if (zsm) tc_stage_dz<T>(a, P, b, t0, vi, sW, sM); /* in flight during the state products */
        sf_cp_async_commit();
        for (int i = threadIdx.x; i < TC_BT; i += SSD_BWD_THREADS) vJ[i] = expf(vI[i]); /* exp(cum_i) */
        __syncthreads();
        tc_gemm<T>(
            TC_BT, N, P, [&](uint32_t f[4], int m0, int k0) { F::load_a(f, sG, ldP, m0, k0); },
            [&](uint32_t f[4], int n0, int k0) { F::load_b2_t(f, sS, ldN, n0, k0); },
            [&](int m0, int n0, float (*acc)[4]) { tc_add<T>(aN, ldA, m0, n0, acc, vJ, nullptr, zq, nq, sC, ldN); });
        tc_gemm_acc_rows<T>(
            P, N, [&](uint32_t f[4], int m0, int k0) { F::load_a(f, sC, ldN, m0, k0); },
            [&](uint32_t f[4], int n0, int k0) { F::load_b2(f, sS, ldN, n0, k0); }, vJ, acc);
        sf_cp_async_wait<0>();
        __syncthreads(); /* dout_i, z_i visible */
        const int h = b.k.h;
        if (a.has_z && a.dz) { /* dz from y_i (registers), x_i, dout_i, z_i; 16-bit like x, a channel pair at a time */
            T *dzb = (T *)a.dz + (int64_t)b.k.b * a.dzs[0] + (int64_t)h * a.dzs[2] + t0 * a.dzs[1];
            const T *dob = (const T *)a.dout + (int64_t)b.k.b * a.dos[0] + (int64_t)h * a.dos[2] + t0 * a.dos[1];
            const T *zb = (const T *)a.z + (int64_t)b.k.b * a.zs[0] + (int64_t)h * a.zs[2] + t0 * a.zs[1];
            const float Dh = a.has_D && !a.D_pc ? a.D[h * a.Ds[0]] : 0.0f;
            const auto epi = [&](auto staged) { /* dout, z from sW, sM or from global memory */
                constexpr bool S = decltype(staged)::value;
                tc_acc_tiles(P, [&](int j, int m0, int n0) {
                    float2 Dv[2];
#pragma unroll
                    for (int nt = 0; nt < 2; nt++) Dv[nt] = tc_d2(a, h, n0 + 8 * nt + 2 * tq, Dh);
#pragma unroll
                    for (int hf = 0; hf < 2; hf++) {
                        const int r = m0 + g + 8 * hf;
                        if (r >= vi) continue;
#pragma unroll
                        for (int nt = 0; nt < 2; nt++) {
                            const int p = n0 + 8 * nt + 2 * tq;
                            const float2 xv = tc_ld2s(sX + r * ldP + p);
                            const float2 dy = S ? tc_ld2s(sW + r * TC_LDT + p) : tc_ld2g(dob + r * a.dos[1] + p);
                            const float2 zv = S ? tc_ld2s(sM + r * TC_LDT + p) : tc_ld2g(zb + r * a.zs[1] + p);
                            const float y0 = acc[j][nt][2 * hf] + Dv[nt].x * xv.x;
                            const float y1 = acc[j][nt][2 * hf + 1] + Dv[nt].y * xv.y;
                            const float s0 = sf_sigmoid_sfu(zv.x), s1 = sf_sigmoid_sfu(zv.y);
                            tc_st2(dzb + r * a.dzs[1] + p, a.tpair, dy.x * y0 * s0 * (1.0f + zv.x * (1.0f - s0)),
                                   dy.y * y1 * s1 * (1.0f + zv.y * (1.0f - s1)));
                        }
                    }
                });
            };
            if (P <= TC_BT) epi(std::true_type{}); /* zsm: staged */
            else epi(std::false_type{});
        }
        /* Z's row sums over the pairs (bi, j <= bi), in order, and the state part */
        for (int r = threadIdx.x; r < vi; r += SSD_BWD_THREADS) {
            float s = 0.0f;
            for (int bj = 0; bj <= bi; bj++) s += a.tzr[(b.item * a.npair + tc_pair_ix(bi, bj)) * TC_BT + r];
            for (int c = 0; c < nq; c++) s += zq[r * nq + c];
            a.trow[b.item * Q + bi * TC_BT + r] = s;
        }
        __syncthreads(); /* sX, zq, vI are the next head's */
    }
    tc_ws_products<T, true>(a, N, cta, b0, bi, sW, sB, aN, ldA);
    tc_store_bc(a, b0, t0, vi, N, aN, ldA, a.pdC, a.dC, a.dCs, a.Cdt);
}

/* One CTA per (batch, head group, chunk, block j): for each of its a.hk
 * heads dx_j, x . d(x / dt), the columns' part of d(cum), the state-out
 * terms, the dD partial of the block; dB_j summed over those heads (as
 * dC_i in the rows kernel). */
template <typename T, int PT, int NT>
__global__ void __launch_bounds__(SSD_BWD_THREADS, 2) ssd_tc_cols_kernel(const ssd_bwd_args a) {
    extern __shared__ __align__(16) unsigned char smraw[];
    using F = ssd_mma<T>;
    const int P = PT ? PT : a.P, N = NT ? NT : a.N, Q = a.Q, nb = Q / TC_BT, ldP = P + 8, ldN = N + 8, nq = N / 16;
    const int ldA = N + 8; /* the f32 accumulator's rows: conflict-free float2 access */
    const tc_cta cta = tc_cta_of(a);
    const int bj = cta.blk;
    const tc_blk b0 = tc_blk_of(a, tc_item(a, cta, 0));
    const int vj = tc_valid(b0, bj); /* the same for every head (no varlen) */
    if (vj == 0) {
        for (int hj = 0; hj < a.hk; hj++) {
            float *part = a.part + (tc_item(a, cta, hj) * nb + bj) * (2 + P); /* (item, block) */
            for (int p = threadIdx.x; p < P; p += SSD_BWD_THREADS) part[2 + p] = 0.0f;
        }
        return;
    }
    const tc_blk_smem L = tc_blk_layout(P, N);
    T *sC = (T *)(smraw + L.oV), *sG = (T *)(smraw + L.oG), *sB = (T *)(smraw + L.oC), *sX = (T *)(smraw + L.oX);
    T *sW = (T *)(smraw + L.oW), *sM = (T *)(smraw + L.oM), *sS = (T *)(smraw + L.oV); /* sS: the head's state */
    float *aN = (float *)(smraw + L.oaN);
    float *zq = (float *)(smraw + L.oq), *v = (float *)(smraw + L.ov);
    float *xr = (float *)(smraw + L.or_), *dp = (float *)(smraw + L.oc);
    float *vI = v, *vJ = v + 2 * TC_BT, *vI2 = v + 4 * TC_BT;
    const int64_t t0 = b0.c0 + (int64_t)bj * TC_BT;
    const int lane = threadIdx.x & 31, w = tc_warp(), g = lane >> 2, tq = lane & 3, tn = P / 16;
    for (int i = threadIdx.x; i < TC_BT * ldA; i += SSD_BWD_THREADS) aN[i] = 0.0f;
    tc_stage_bc<T>(a, N, b0, bj, sB, a.B, a.Bs);
    tc_blk b = b0;
    for (int hj = 0; hj < a.hk; hj++) {
        if (hj > 0) b = tc_blk_next(a, b);
        float acc[4][2][4]; /* d(x_j / dt_j) (64 x P), tc_gemm_acc's tiles */
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[j][0][e] = acc[j][1][e] = 0.0f;
        /* the pairs (bi >= bj, bj) in order, the next one's gy_i, cum / dt
         * rows (cp.async) and CB (registers) loading while one runs: gy_i
         * alternates between sG and sW, cum / dt_i between vI and vI2 */
        tc_load_cd(a, b, bj, vJ);
        tc_stage_xg<T>(a, P, b, bj, sX, TcXG::x);
        const float *cbt = tc_cb_tiles(a, b);
        tc_load_cd(a, b, bj, vI);
        tc_stage_xg<T>(a, P, b, bj, sG, TcXG::gy_ws);
        tc_stage_state<T>(P, N, sS, (const T *)a.tdS16 + b.item * (int64_t)P * N); /* for after the loop */
        sf_cp_async_commit();
        tc_cb_regs cbn = tc_load_cb(cbt, tc_pair_ix(bj, bj));
        for (int bi = bj; bi < nb && tc_valid(b, bi) > 0; bi++) {
            const bool odd = (bi - bj) & 1;
            sf_cp_async_wait<0>();
            __syncthreads(); /* the pair's tiles visible; the pair before done with sM and its buffers */
            const tc_cb_regs cb = cbn;
            if (bi + 1 < nb && tc_valid(b, bi + 1) > 0) {
                tc_load_cd(a, b, bi + 1, odd ? vI : vI2);
                tc_stage_xg<T>(a, P, b, bi + 1, odd ? sG : sW, TcXG::gy_ws);
                sf_cp_async_commit();
                cbn = tc_load_cb(cbt, tc_pair_ix(bi + 1, bj));
            }
            tc_pair_m<T, false>(P, bi, bj, cb, odd ? sW : sG, sX, sM, odd ? vI2 : vI, vJ, acc);
        }
        __syncthreads(); /* the last product is done with sM, sW, vI */
        /* sS holds the adjoint leaving the chunk; exp(cl - cum_j) into vI */
        const bool gsm = P <= TC_BT; /* dout_j, z_j for gy into the free sW, sM */
        if (gsm) tc_stage_dz<T>(a, P, b, t0, vj, sW, sM); /* in flight during the state products */
        sf_cp_async_commit();
        const float cl = a.tcum[b.item * Q + Q - 1];
        for (int i = threadIdx.x; i < TC_BT; i += SSD_BWD_THREADS) vI[i] = expf(cl - vJ[i]);
        __syncthreads();
        tc_gemm_acc_rows<T>(
            P, N, [&](uint32_t f[4], int m0, int k0) { F::load_a(f, sB, ldN, m0, k0); },
            [&](uint32_t f[4], int n0, int k0) { F::load_b2(f, sS, ldN, n0, k0); }, vI, acc);
        tc_gemm<T>(
            TC_BT, N, P, [&](uint32_t f[4], int m0, int k0) { F::load_a(f, sX, ldP, m0, k0); },
            [&](uint32_t f[4], int n0, int k0) { F::load_b2_t(f, sS, ldN, n0, k0); },
            [&](int m0, int n0, float (*acc)[4]) {
                tc_add<T>(aN, ldA, m0, n0, acc, vI, vJ + TC_BT, zq, nq, sB, ldN);
            });
        sf_cp_async_wait<0>();
        __syncthreads(); /* dout_j, z_j visible */
        const int h = b.k.h;
        /* from the register tiles: dx = dt d(x / dt) + D gy; the row partials
         * of x . d(x / dt) (xr: 64 x P / 16) and the column ones of gy x (dp:
         * 4 row tiles x P), each slot written by one lane; gy_j in f32 from
         * dout_j and z_j as bwd_dy gives it */
        T *dxb = a.dx ? (T *)a.dx + (int64_t)b.k.b * a.dxs[0] + (int64_t)h * a.dxs[2] + t0 * a.dxs[1] : nullptr;
        const float Dh = a.has_D && !a.D_pc ? a.D[h * a.Ds[0]] : 0.0f;
        const auto epi = [&](auto staged) { /* dout_j, z_j from sW, sM or from global memory */
            constexpr bool S = decltype(staged)::value;
            tc_acc_tiles(P, [&](int j, int m0, int n0) {
                float rs[2] = {0.0f, 0.0f}, cs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                float2 Dv[2];
#pragma unroll
                for (int nt = 0; nt < 2; nt++) Dv[nt] = tc_d2(a, h, n0 + 8 * nt + 2 * tq, Dh);
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int r = m0 + g + 8 * hf;
                    if (r >= vj) continue;
                    const float dtr = vJ[TC_BT + r];
#pragma unroll
                    for (int nt = 0; nt < 2; nt++) { /* channels p, p + 1 */
                        const int p = n0 + 8 * nt + 2 * tq;
                        const float g0 = acc[j][nt][2 * hf], g1 = acc[j][nt][2 * hf + 1];
                        const float2 xv = tc_ld2s(sX + r * ldP + p);
                        float2 gy;
                        if constexpr (S) {
                            gy = tc_ld2s(sW + r * TC_LDT + p);
                            if (a.has_z) {
                                const float2 zv = tc_ld2s(sM + r * TC_LDT + p);
                                gy.x *= sf_silu_sfu(zv.x);
                                gy.y *= sf_silu_sfu(zv.y);
                            }
                        } else {
                            gy = make_float2(bwd_dy(a, b.k, t0 + r, p), bwd_dy(a, b.k, t0 + r, p + 1));
                        }
                        rs[hf] += xv.x * g0;
                        rs[hf] += xv.y * g1;
                        cs[2 * nt] += gy.x * xv.x;
                        cs[2 * nt + 1] += gy.y * xv.y;
                        if (a.dx)
                            tc_st2(dxb + r * a.dxs[1] + p, a.tpair, dtr * g0 + Dv[nt].x * gy.x, dtr * g1 + Dv[nt].y * gy.y);
                    }
                }
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const float v2 = tc_quad_sum(rs[hf]);
                    if (tq == 0) xr[(m0 + g + 8 * hf) * tn + (n0 >> 4)] = v2;
                }
#pragma unroll
                for (int ci = 0; ci < 4; ci++) {
                    const float v2 = tc_col_sum(cs[ci]);
                    if (g == 0) dp[(m0 >> 4) * P + n0 + 8 * (ci >> 1) + 2 * tq + (ci & 1)] = v2;
                }
            });
        };
        if (gsm) epi(std::true_type{});
        else epi(std::false_type{});
        __syncthreads();
        /* per token: x . d(x / dt), the columns' d(cum), q */
        for (int r = threadIdx.x; r < vj; r += SSD_BWD_THREADS) {
            float s = 0.0f, q = 0.0f, zs = 0.0f;
            for (int c = 0; c < tn; c++) s += xr[r * tn + c];
            for (int c = 0; c < nq; c++) q += zq[r * nq + c];
            for (int bi = bj; bi < nb && tc_valid(b, bi) > 0; bi++)
                zs += a.tzc[(b.item * a.npair + tc_pair_ix(bi, bj)) * TC_BT + r];
            const int64_t o = b.item * Q + bj * TC_BT + r;
            a.tddt[o] = s;
            a.tq[o] = q;
            a.tcol[o] = -zs - q;
        }
        /* the block's dD partial: row tiles in order (rows past the end: 0) */
        float *part = a.part + (b.item * nb + bj) * (2 + (int64_t)P); /* (item, block) */
        for (int p = threadIdx.x; p < P; p += SSD_BWD_THREADS) {
            float s = 0.0f;
            for (int c = 0; c < 4; c++) s += dp[c * P + p];
            part[2 + p] = s;
        }
        __syncthreads(); /* sX, zq, xr, dp, v are the next head's */
    }
    tc_ws_products<T, false>(a, N, cta, b0, bj, sW, sC, aN, ldA);
    tc_store_bc(a, b0, t0, vj, N, aN, ldA, a.pdB, a.dB, a.dBs, a.Bdt);
}

/* One CTA (256 threads >= Q) per item: d(cum) summed backwards into the
 * gradient of each token's log decay, then ddt (through the clamp,
 * softplus and bias) and the item's dA, ddt_bias partials (in its first
 * block's slot; the other blocks' get 0). */
__global__ void __launch_bounds__(SSD_BWD_THREADS) ssd_tc_fin_kernel(const ssd_bwd_args a) {
    __shared__ float sc[2][SSD_BWD_THREADS];
    __shared__ float red[SSD_BWD_WARPS];
    const int Q = a.Q, nb = Q / TC_BT, P = a.P;
    const tc_blk b = tc_blk_of(a, blockIdx.x);
    const int64_t vq64 = b.k.end - b.c0;
    const int vq = vq64 < Q ? (int)vq64 : Q;
    const int i = threadIdx.x;
    const int64_t o = b.item * Q + i;
    const bool valid = i < vq;
    float dc = valid ? a.trow[o] + a.tcol[o] : 0.0f;
    const float qs = tc_block_sum(valid ? a.tq[o] : 0.0f, red);
    if (i == vq - 1) {
        float dot = 0.0f;
        for (int s = 0; s < a.tnsl; s++) dot += a.tdot[b.item * a.tnsl + s];
        dc += qs + expf(a.tcum[b.item * Q + Q - 1]) * dot;
    }
    /* suffix sums (Hillis-Steele, double-buffered) */
    int cur = 0;
    sc[0][i] = dc;
    __syncthreads();
    for (int s = 1; s < Q; s <<= 1) {
        const float v = sc[cur][i] + (i + s < SSD_BWD_THREADS ? sc[cur][i + s] : 0.0f);
        sc[cur ^ 1][i] = v;
        cur ^= 1;
        __syncthreads();
    }
    const float da = sc[cur][i];
    float pA = 0.0f, pb = 0.0f;
    if (valid) {
        const int64_t t = b.c0 + i;
        const float dtv = a.tdt[o];
        const bool live = dtv * b.k.A < 0.0f;
        float ddt = a.tddt[o];
        if (live) {
            ddt += b.k.A * da;
            pA = dtv * da;
        }
        const float raw = bwd_ld(a.dt, a.dtdt, b.k.dto + t * a.dts[1]);
        const float v = raw + b.k.bias;
        const float u = a.softplus ? bwd_softplus(v) : v;
        float gr = (u < a.dt_min || u > a.dt_max) ? 0.0f : ddt;
        if (a.softplus && v <= 20.0f) gr *= 1.0f / (1.0f + expf(-v));
        pb = gr;
        if (a.ddt) bwd_st(a.ddt, a.dtdt, (int64_t)b.k.b * a.ddts[0] + t * a.ddts[1] + (int64_t)b.k.h * a.ddts[2], gr);
    }
    pA = tc_block_sum(pA, red);
    pb = tc_block_sum(pb, red);
    if (i < nb) {
        float *part = a.part + (b.item * nb + i) * (2 + (int64_t)P);
        part[0] = i == 0 ? pA : 0.0f;
        part[1] = i == 0 ? pb : 0.0f;
    }
}

#endif
