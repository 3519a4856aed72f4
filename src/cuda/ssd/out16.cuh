/* out16.cuh - the fused SSD output on mma.sync for 16-bit inputs (f16,
 * bf16) with N <= 128 (the general and split paths; any GPU).
 *
 * Every warp keeps the C fragments of its rows in registers for the whole
 * block (C H^T and C B^T both reuse them) and owns TWO 16-row tiles that
 * share every B and X fragment it loads: ~128 bytes of ldmatrix per mma
 * instead of ~320 for ssd_chunk_out's 16 x 64 warp tiles.
 *
 * Work split.  A chunk has M16 = Q / 16 row tiles; tile i sees key tiles
 * 0..i (causal).  Warp pairs tile k with tile M16-1-k, so every warp does
 * the same M16 + 1 (16 x 16 key block) units.  A chunk's M16 / 2 pairs are
 * split over two blocks (grid index `hf`, fastest, so both halves read the
 * chunk's B / X from L2 together), Q / 64 warps each:
 *   hf 0: pairs 0 .. NW-1 (rows [0, 16NW) and [Q - 16NW, Q))
 *   hf 1: pairs NW .. 2NW-1 (rows [16NW, 32NW) and [Q - 32NW, Q - 16NW))
 * Shared memory (Q 256): C rows 35 KB + H tile 17 KB + B/X key tiles of 64,
 * double-buffered, 53 KB = 106 KB, so two blocks fit on an SM and one
 * block's staging and epilogue overlap the other's products.  The kernel is
 * latency-bound (231 registers, 2 warps per scheduler): the sm_90a path
 * (out_wg.cuh) is what the H200 runs.
 */
#ifndef SF_SSD_OUT16_CUH
#define SF_SSD_OUT16_CUH

#include "ssd/common.cuh"

/* Tile constants: N padded to 128 (8 k16 steps of C fragments in registers),
 * 64 columns of P per block, 64-key tiles. */
#define SSD_O16_NK 8
#define SSD_O16_LDN (SSD_O16_NK * 16 + 8)
#define SSD_O16_LDX (64 + 8)
#define SSD_O16_LDO (64 + 4)

/* Shared bytes of ssd_chunk_out16 for chunk length Q.  The f32 output
 * staging (Q/2 rows x LDO floats) overlays the C rows (same byte size). */
static inline size_t ssd_out16_smem(int Q) {
    const size_t ldn = SSD_O16_LDN, mr = (size_t)Q / 2;
    return (mr * ldn + 3 * 64 * ldn + 2 * 64 * SSD_O16_LDX) * 2 + (size_t)Q * 12;
}

/* ssd_stage_async with a run-time thread count (blocks of Q / 2 threads). */
template <typename T>
static __device__ __forceinline__ void ssd_stage_n(T *s, int ld, const T *g, int64_t gstride,
                                                   int rows, int cols, int rows_valid,
                                                   int cols_valid, bool vec, int nt) {
    constexpr int V = 16 / sizeof(T);
    const int vpr = cols / V;
    for (int idx = threadIdx.x; idx < rows * vpr; idx += nt) {
        const int r = idx / vpr, cv = (idx - r * vpr) * V;
        T *d = s + r * ld + cv;
        const T *src = g + (int64_t)r * gstride + cv;
        if (r < rows_valid && vec && cv + V <= cols_valid) {
            sf_cp_async16(d, src);
        } else {
            uint4 u = make_uint4(0u, 0u, 0u, 0u);
            if (r < rows_valid) {
                T *e = reinterpret_cast<T *>(&u);
                for (int k = 0; k < V; k++)
                    if (cv + k < cols_valid) e[k] = src[k];
            }
            *reinterpret_cast<uint4 *>(d) = u;
        }
    }
}

/* Grid (flattened): hf fastest, then head, P tile, chunk, batch row.
 * Block Q / 2 threads (Q / 64 warps). */
template <typename T>
__global__ void __launch_bounds__(128, 2) ssd_chunk_out16(const ssd_fwd_args a) {
    using M = ssd_mma<T>;
    constexpr int NK = SSD_O16_NK, LDN = SSD_O16_LDN, LDX = SSD_O16_LDX, LDO = SSD_O16_LDO;
    constexpr int PT = 64, KT = 64, V = 8, NPAD = NK * 16;
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const int NW = a.Q / 64, RH = 16 * NW, M16 = a.Q / 16, nthr = 32 * NW;
    T *sC = reinterpret_cast<T *>(ssd_smem);
    T *sH = sC + 2 * RH * LDN;
    T *sB0 = sH + 64 * LDN, *sB1 = sB0 + 64 * LDN;
    T *sX0 = sB1 + 64 * LDN, *sX1 = sX0 + 64 * LDX;
    float *sg = reinterpret_cast<float *>(sX1 + 64 * LDX);
    float *sdt = sg + a.Q;
    int *sseq = reinterpret_cast<int *>(sdt + a.Q);
    float *sO = reinterpret_cast<float *>(ssd_smem); /* after the C fragments are taken */

    const int ptiles = (a.P + PT - 1) / PT;
    int64_t id = blockIdx.x;
    const int hf = (int)(id & 1);
    id >>= 1;
    const int h = (int)(id % a.H);
    id /= a.H;
    const int pt = (int)(id % ptiles);
    id /= ptiles;
    const int c = (int)(id % a.nc);
    const int b = (int)(id / a.nc);
    const int64_t t0 = (int64_t)c * a.Q;
    const int Lc = (int)min((int64_t)a.Q, a.L - t0);
    const int lo0 = RH * hf, hi0 = a.Q - RH * (hf + 1); /* the block's two row ranges */
    if (lo0 >= Lc) return;
    const int jmax = min(Lc, hi0 + RH); /* rows and keys this block needs: [0, jmax) */
    const int nkt = (jmax + KT - 1) / KT;
    const int p0 = pt * PT, pvalid = min(PT, a.P - p0), grp = h / a.hpg;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t bh = (int64_t)b * a.H + h;
    const T *Cb = (const T *)a.C + (int64_t)b * a.Cs[0] + t0 * a.Cs[1] + (int64_t)grp * a.Cs[2];
    const T *Bb = (const T *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] + (int64_t)grp * a.Bs[2];
    const T *Xb = (const T *)a.x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
    /* this warp's row tiles (chunk-local tile index) and their rows in sC / sO */
    const int tl[2] = {NW * hf + warp, M16 - 1 - (NW * hf + warp)};
    const int sl[2] = {16 * warp, 16 * (2 * NW - 1 - warp)};

    auto issue = [&](int kt) {
        const int j0 = kt * KT, kv = min(KT, Lc - j0);
        ssd_stage_n<T>((kt & 1) ? sB1 : sB0, LDN, Bb + (int64_t)j0 * a.Bs[1], a.Bs[1], KT, NPAD,
                       kv, a.N, a.vec_B, nthr);
        ssd_stage_n<T>((kt & 1) ? sX1 : sX0, LDX, Xb + (int64_t)j0 * a.xs[1], a.xs[1], KT, PT, kv,
                       pvalid, a.vec_x, nthr);
    };

    /* group 0: both C row ranges, the H tile and key tile 0 */
    ssd_stage_n<T>(sC, LDN, Cb + (int64_t)lo0 * a.Cs[1], a.Cs[1], RH, NPAD, min(RH, Lc - lo0),
                   a.N, a.vec_C, nthr);
    ssd_stage_n<T>(sC + RH * LDN, LDN, Cb + (int64_t)hi0 * a.Cs[1], a.Cs[1], RH, NPAD,
                   min(RH, Lc - hi0), a.N, a.vec_C, nthr);
    ssd_stage_n<T>(sH, LDN,
                   (const T *)a.states + (bh * a.nc + c) * a.P * a.N + (int64_t)p0 * a.N, a.N, PT,
                   NPAD, pvalid, a.N, ((a.N * (int)sizeof(T)) & 15) == 0, nthr);
    issue(0);
    sf_cp_async_commit();
    for (int i = tid; i < jmax; i += nthr) {
        sg[i] = a.gw[(bh * a.nc + c) * a.Q + i];
        sdt[i] = a.dtw[(bh * a.nc + c) * a.Q + i];
        sseq[i] = a.varlen ? a.seqid[(int64_t)b * a.L + t0 + i] : 0;
    }
    sf_cp_async_wait<0>();
    __syncthreads();

    /* C fragments of both row tiles, kept for the whole block */
    uint32_t cf[2][NK][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int k = 0; k < NK; k++) M::load_a(cf[mi][k], sC, LDN, sl[mi], 16 * k);

    /* carried state: O = diag(exp2(g'_i)) C_i H^T */
    float O[2][8][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) O[mi][nt][e] = 0.0f;
#pragma unroll
    for (int k = 0; k < NK; k++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t bf[4];
            M::load_b2(bf, sH, LDN, np * 16, 16 * k);
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                M::mma(O[mi][2 * np], cf[mi][k], bf);
                M::mma(O[mi][2 * np + 1], cf[mi][k], bf + 2);
            }
        }
    const int sfirst = sseq[0];
    int rr[2][2], rseq[2][2];
    float rg[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int r = 16 * tl[mi] + g + 8 * u;
            const bool in = r < Lc;
            rr[mi][u] = r;
            rg[mi][u] = in ? sg[r] : 0.0f;
            rseq[mi][u] = in ? sseq[r] : -1;
            const float f = (in && rseq[mi][u] == sfirst) ? exp2f(fminf(rg[mi][u], 0.0f)) : 0.0f;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                O[mi][nt][2 * u] *= f;
                O[mi][nt][2 * u + 1] *= f;
            }
        }

    /* intra-chunk: per 16-key block, S = C B^T for both tiles from one B
     * fragment load, masked and decayed in registers, then S X with one X
     * fragment load for both.  Tile 0 (the lower one) drops out first. */
    for (int kt = 0; kt < nkt; kt++) {
        __syncthreads(); /* buffer (kt + 1) & 1 (tile kt - 1) is no longer read */
        if (kt + 1 < nkt) {
            issue(kt + 1);
            sf_cp_async_commit();
            sf_cp_async_wait<1>();
        } else {
            sf_cp_async_wait<0>();
        }
        __syncthreads(); /* tile kt visible */
        const T *cB = (kt & 1) ? sB1 : sB0, *cX = (kt & 1) ? sX1 : sX0;
#pragma unroll 1
        for (int kb = 0; kb < KT / 16; kb++) {
            const int tb = kt * (KT / 16) + kb, j0 = tb * 16;
            if (j0 >= Lc || tb > tl[1]) break; /* warp-uniform; tl[1] > tl[0] */
            const bool act0 = tb <= tl[0];
            float S[2][2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) S[mi][nt][e] = 0.0f;
#pragma unroll
            for (int k = 0; k < NK; k++) {
                uint32_t bf[4];
                M::load_b2(bf, cB, LDN, kb * 16, 16 * k);
                M::mma(S[1][0], cf[1][k], bf);
                M::mma(S[1][1], cf[1][k], bf + 2);
                if (act0) {
                    M::mma(S[0][0], cf[0][k], bf);
                    M::mma(S[0][1], cf[0][k], bf + 2);
                }
            }
            /* the four keys of this lane: j0 + nt * 8 + 2t + {0, 1} */
            float gj[2][2], dj[2][2];
            int sj[2][2];
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int v = 0; v < 2; v++) {
                    const int j = j0 + nt * 8 + 2 * t + v;
                    const bool in = j < jmax;
                    gj[nt][v] = in ? sg[j] : 0.0f;
                    dj[nt][v] = in ? sdt[j] : 0.0f;
                    sj[nt][v] = in ? sseq[j] : -2;
                }
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int u = e >> 1, v = e & 1, j = j0 + nt * 8 + 2 * t + v;
                        const bool ok = j <= rr[mi][u] && j < Lc && sj[nt][v] == rseq[mi][u];
                        S[mi][nt][e] =
                            ok ? S[mi][nt][e] * exp2f(fminf(rg[mi][u] - gj[nt][v], 0.0f)) * dj[nt][v]
                               : 0.0f;
                    }
            uint32_t af[2][4];
            M::acc_to_a(af[1], S[1]);
            M::acc_to_a(af[0], S[0]);
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t bf[4];
                M::load_bx2(bf, cX, LDX, np * 16, kb * 16);
                M::mma(O[1][2 * np], af[1], bf);
                M::mma(O[1][2 * np + 1], af[1], bf + 2);
                if (act0) {
                    M::mma(O[0][2 * np], af[0], bf);
                    M::mma(O[0][2 * np + 1], af[0], bf + 2);
                }
            }
        }
    }

    /* epilogue: z and x of this thread's output vectors in flight first,
     * then O -> shared (f32, over the C rows), D x, the z gate, 16-byte
     * stores.  Local row r: r < RH -> lo0 + r, else hi0 + r - RH. */
    constexpr int NV = 8; /* (Q/2 rows x 8 vectors) / (Q/2 threads) */
    const T *zp = (const T *)a.z;
    const T *xp = (const T *)a.x;
    uint4 zraw[NV], xraw[NV];
#pragma unroll
    for (int q = 0; q < NV; q++) {
        const int idx = tid + nthr * q, r = idx >> 3, cv = (idx & 7) * V;
        const int row = r < RH ? lo0 + r : hi0 + r - RH;
        zraw[q] = make_uint4(0u, 0u, 0u, 0u);
        xraw[q] = make_uint4(0u, 0u, 0u, 0u);
        if (row < Lc && cv < pvalid) {
            const int64_t tok = t0 + row;
            const T *zr = zp + (int64_t)b * a.zs[0] + tok * a.zs[1] + (int64_t)h * a.zs[2] + p0 + cv;
            const T *xr = xp + (int64_t)b * a.xs[0] + tok * a.xs[1] + (int64_t)h * a.xs[2] + p0 + cv;
            const bool full = cv + V <= pvalid;
            if (a.has_z) {
                if (full && a.vec_z) {
                    zraw[q] = __ldg(reinterpret_cast<const uint4 *>(zr));
                } else {
                    T *e = reinterpret_cast<T *>(&zraw[q]);
                    for (int k = 0; k < V; k++)
                        if (cv + k < pvalid) e[k] = zr[k];
                }
            }
            if (a.has_D) {
                if (full && a.vec_x) {
                    xraw[q] = __ldg(reinterpret_cast<const uint4 *>(xr));
                } else {
                    T *e = reinterpret_cast<T *>(&xraw[q]);
                    for (int k = 0; k < V; k++)
                        if (cv + k < pvalid) e[k] = xr[k];
                }
            }
        }
    }
    __syncthreads(); /* every warp is past its last read of sB / sX */
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int u = 0; u < 2; u++)
                *reinterpret_cast<float2 *>(sO + (sl[mi] + g + 8 * u) * LDO + nt * 8 + 2 * t) =
                    make_float2(O[mi][nt][2 * u], O[mi][nt][2 * u + 1]);
    __syncthreads();
    T *op = (T *)a.out;
    const float Dh = (a.has_D && !a.D_pc) ? a.D[h * a.Ds[0]] : 0.0f;
#pragma unroll
    for (int q = 0; q < NV; q++) {
        const int idx = tid + nthr * q, r = idx >> 3, cv = (idx & 7) * V;
        const int row = r < RH ? lo0 + r : hi0 + r - RH;
        if (row >= Lc || cv >= pvalid) continue;
        const int64_t tok = t0 + row;
        float y[V];
#pragma unroll
        for (int e = 0; e < V; e++) y[e] = sO[r * LDO + cv + e];
        if (a.has_D) {
            const T *xe = reinterpret_cast<const T *>(&xraw[q]);
#pragma unroll
            for (int e = 0; e < V; e++) {
                const float d = a.D_pc ? (cv + e < pvalid
                                              ? a.D[h * a.Ds[0] + (int64_t)(p0 + cv + e) * a.Ds[1]]
                                              : 0.0f)
                                       : Dh;
                y[e] = fmaf(d, sf_elem<T>::to_f(xe[e]), y[e]);
            }
        }
        /* cu_seqlens: a sequence starting inside the chunk starts from its own
         * initial state, decayed by exp2(g'_i) (g' restarts at its start);
         * rare, so plain loads of C from global memory */
        if (a.varlen == 2 && a.has_init && sseq[row] != sfirst) {
            const float dec = exp2f(fminf(sg[row], 0.0f));
            const float *in = a.init + (int64_t)sseq[row] * a.ins[0] + h * a.ins[1];
            const T *cr = Cb + (int64_t)row * a.Cs[1];
            for (int e = 0; e < V; e++) {
                if (cv + e >= pvalid) break;
                const float *ip = in + (int64_t)(p0 + cv + e) * a.ins[2];
                float acc = 0.0f;
                for (int n = 0; n < a.N; n++)
                    acc = fmaf(sf_elem<T>::to_f(cr[n]), ip[n * a.ins[3]], acc);
                y[e] = fmaf(dec, acc, y[e]);
            }
        }
        if (a.has_z) {
            const T *ze = reinterpret_cast<const T *>(&zraw[q]);
#pragma unroll
            for (int e = 0; e < V; e++) {
                const float zv = sf_elem<T>::to_f(ze[e]);
                y[e] *= zv / (1.0f + expf(-zv));
            }
        }
        T *orow = op + (int64_t)b * a.os[0] + tok * a.os[1] + (int64_t)h * a.os[2] + p0 + cv;
        if (cv + V <= pvalid && a.vec_o) {
            ssd_vec<T>::store(orow, y);
        } else {
            for (int e = 0; e < V; e++)
                if (cv + e < pvalid) orow[e] = sf_elem<T>::from_f(y[e]);
        }
    }
}

#endif
