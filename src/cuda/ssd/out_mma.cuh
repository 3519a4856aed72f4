/* out_mma.cuh - stage 3 on mma.sync, any GPU (the general path): the
 * fused output per (chunk, head, P tile, 64-row tile), every dtype and N up
 * to 256, varlen aware; 16-bit inputs with N <= 128 take ssd_chunk_out16
 * (out16.cuh).
 */
#ifndef SF_SSD_OUT_MMA_CUH
#define SF_SSD_OUT_MMA_CUH

#include "ssd/common.cuh"

/* ------------------------------------------------------------------ */
/* compute_out                                                          */
/* ------------------------------------------------------------------ */
/* 16-bit tiles are double-buffered (the next key tile's B and X are in
 * flight during the current tile's products); f32 tiles are twice the size
 * and single-buffered so two blocks still fit on an SM. */
template <typename T> struct ssd_out_cfg {
    static constexpr int STAGES = sizeof(T) == 2 ? 2 : 1;
};

/* Shared bytes of ssd_chunk_out for a padded state size npad. */
template <typename T> static inline size_t ssd_out_smem(int npad, int Q) {
    const size_t ldn = (size_t)npad + ssd_pad<T>::ROW;
    const size_t tile = ldn * 64 * sizeof(T);
    const size_t hb0 = tile > 64 * 68 * 4 ? tile : 64 * 68 * 4;
    const size_t st = ssd_out_cfg<T>::STAGES;
    return tile + hb0 + (st - 1) * tile + st * 64 * (64 + ssd_pad<T>::PX) * sizeof(T) +
           (size_t)Q * 12;
}

/* Grid (flattened): head fastest (neighbouring blocks share the chunk's B/C
 * in L2), then row tile (the longest, last tiles of the causal triangle
 * first), P tile, chunk, batch row.  Block 128 = 4 warps x 16 rows of a
 * 64-row tile, 64 columns of P:
 *   O  = diag(exp2(g'_i)) C_i H_c^T                 (k = N)
 *   O += ((C_i B_j^T) .* exp2(g'_i - g'_j) dt_j .* mask) X_j   per 64-key tile
 * The masked score tile goes from the accumulator straight into A fragments
 * (flash-attention style); only tiles up to the diagonal are visited and, in
 * the diagonal tile, each warp stops at its last row.  The epilogue stages O
 * through shared memory so D x, the z gate and the store are 16-byte wide.
 * Shared: C | H tile / B buffer 0 / output | B buffer 1 | X buffers | vectors
 * (16-bit: the H tile lives in B buffer 1, consumed before tile 1 lands).
 * The warp tile 16 x 64 reloads C fragments and B tiles per warp, so the
 * kernel is shared-memory bound; it serves what the faster kernels do not
 * (f32 with N > 128, varlen, odd alignments). */
template <typename T>
__global__ void __launch_bounds__(128) ssd_chunk_out(const ssd_fwd_args a) {
    using M = ssd_mma<T>;
    constexpr int MT = 64, PT = 64, KT = 64, V = ssd_vec<T>::V, STAGES = ssd_out_cfg<T>::STAGES;
    constexpr int LDX = PT + ssd_pad<T>::PX, LDO = PT + 4;
    const int LDN = a.Npad + ssd_pad<T>::ROW;
    const int hb0 = max(LDN * 64, 64 * LDO * (int)(4 / sizeof(T)));
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    T *sC = reinterpret_cast<T *>(ssd_smem);
    T *sB0 = sC + MT * LDN;
    T *sB1 = sB0 + hb0;                            /* == sX0 when STAGES == 1 */
    T *sX0 = sB1 + (STAGES - 1) * LDN * 64;
    T *sX1 = sX0 + (STAGES - 1) * KT * LDX;
    float *sg = reinterpret_cast<float *>(sX1 + KT * LDX);
    float *sdt = sg + a.Q;
    int *sseq = reinterpret_cast<int *>(sdt + a.Q);
    T *sH = STAGES == 2 ? sB1 : sB0;

    const int mtiles = a.Q / MT, ptiles = (a.P + PT - 1) / PT;
    int64_t id = blockIdx.x;
    const int h = (int)(id % a.H);
    id /= a.H;
    const int mt = mtiles - 1 - (int)(id % mtiles);
    id /= mtiles;
    const int pt = (int)(id % ptiles);
    id /= ptiles;
    const int c = (int)(id % a.nc);
    const int b = (int)(id / a.nc);
    const int64_t t0 = (int64_t)c * a.Q;
    const int Lc = (int)min((int64_t)a.Q, a.L - t0);
    const int i0 = mt * MT;
    if (i0 >= Lc) return;
    const int p0 = pt * PT, grp = h / a.hpg;
    const int nrows = min(MT, Lc - i0), pvalid = min(PT, a.P - p0);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wr = warp * 16;
    const int64_t bh = (int64_t)b * a.H + h;
    const T *x = (const T *)a.x;
    const T *Cb = (const T *)a.C + (int64_t)b * a.Cs[0] + t0 * a.Cs[1] + (int64_t)grp * a.Cs[2];
    const T *Bb = (const T *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] + (int64_t)grp * a.Bs[2];
    const T *Xb = x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
    const int last = min(mt, (Lc - 1) / KT); /* last key tile */

    auto issue = [&](int kt) {
        const int j0 = kt * KT, kv = min(KT, Lc - j0);
        const bool one = STAGES == 2 && (kt & 1);
        ssd_stage_async<T, 128>(one ? sB1 : sB0, LDN, Bb + (int64_t)j0 * a.Bs[1], a.Bs[1], KT,
                                a.Npad, kv, a.N, a.vec_B);
        ssd_stage_async<T, 128>(one ? sX1 : sX0, LDX, Xb + (int64_t)j0 * a.xs[1], a.xs[1], KT,
                                PT, kv, pvalid, a.vec_x);
    };

    /* everything this block needs first is in flight before the first wait */
    ssd_stage_async<T, 128>(sC, LDN, Cb + (int64_t)i0 * a.Cs[1], a.Cs[1], MT, a.Npad, nrows, a.N,
                            a.vec_C);
    ssd_stage_async<T, 128>(sH, LDN,
                            (const T *)a.states + (bh * a.nc + c) * a.P * a.N + (int64_t)p0 * a.N,
                            a.N, PT, a.Npad, pvalid, a.N, ((a.N * (int)sizeof(T)) & 15) == 0);
    if (STAGES == 2) issue(0);
    sf_cp_async_commit();
    const int nvec = min(Lc, i0 + MT);
    for (int i = tid; i < nvec; i += 128) {
        sg[i] = a.gw[(bh * a.nc + c) * a.Q + i];
        sdt[i] = a.dtw[(bh * a.nc + c) * a.Q + i];
        if (a.varlen) sseq[i] = a.seqid[(int64_t)b * a.L + t0 + i];
    }
    sf_cp_async_wait<0>();
    __syncthreads();

    float O[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) O[nt][e] = 0.0f;
    for (int k = 0; k < a.Npad; k += M::K) {
        uint32_t af[4], bf[4];
        M::load_a(af, sC, LDN, wr, k);
#pragma unroll
        for (int np = 0; np < 4; np++) {
            M::load_b2(bf, sH, LDN, np * 16, k);
            M::mma(O[2 * np], af, bf);
            M::mma(O[2 * np + 1], af, bf + 2);
        }
    }
    /* rows of this lane: r[0] = i0 + wr + g, r[1] = r[0] + 8 (chunk-local) */
    const int sfirst = a.varlen ? sseq[0] : 0;
    int rr[2], rseq[2];
    float rg[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        rr[u] = i0 + wr + g + 8 * u;
        const bool in = rr[u] < Lc;
        rg[u] = in ? sg[rr[u]] : 0.0f;
        rseq[u] = (in && a.varlen) ? sseq[rr[u]] : 0;
        const float f = (in && rseq[u] == sfirst) ? exp2f(fminf(rg[u], 0.0f)) : 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            O[nt][2 * u] *= f;
            O[nt][2 * u + 1] *= f;
        }
    }

    for (int kt = 0; kt <= last; kt++) {
        const int j0 = kt * KT;
        const int kv = min(KT, Lc - j0);
        __syncthreads(); /* the buffer about to be filled is no longer read */
        if (STAGES == 2) {
            if (kt + 1 <= last) {
                issue(kt + 1);
                sf_cp_async_commit();
                sf_cp_async_wait<1>();
            } else {
                sf_cp_async_wait<0>();
            }
        } else {
            issue(kt);
            sf_cp_async_commit();
            sf_cp_async_wait<0>();
        }
        __syncthreads(); /* tile kt visible */
        const bool one = STAGES == 2 && (kt & 1);
        const T *cB = one ? sB1 : sB0, *cX = one ? sX1 : sX0;
        /* keys of this tile the warp's rows can see */
        const int kmax = min(kt == mt ? wr + 16 : KT, kv);
        float S[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[nt][e] = 0.0f;
        for (int k = 0; k < a.Npad; k += M::K) {
            uint32_t af[4], bf[4];
            M::load_a(af, sC, LDN, wr, k);
#pragma unroll
            for (int np = 0; np < 4; np++) {
                if (np * 16 < kmax) {
                    M::load_b2(bf, cB, LDN, np * 16, k);
                    M::mma(S[2 * np], af, bf);
                    M::mma(S[2 * np + 1], af, bf + 2);
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int u = e >> 1, j = j0 + nt * 8 + 2 * t + (e & 1);
                const bool ok = j <= rr[u] && j < Lc && (!a.varlen || sseq[j] == rseq[u]);
                const float gj = ok ? sg[j] : 0.0f, dj = ok ? sdt[j] : 0.0f;
                S[nt][e] = ok ? S[nt][e] * exp2f(fminf(rg[u] - gj, 0.0f)) * dj : 0.0f;
            }
#pragma unroll
        for (int kk = 0; kk < KT / M::K; kk++) {
            if (kk * M::K < kmax) {
                uint32_t af[4], bf[4];
                M::acc_to_a(af, S + kk * (M::K / 8));
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    M::load_bx2(bf, cX, LDX, np * 16, kk * M::K);
                    M::mma(O[2 * np], af, bf);
                    M::mma(O[2 * np + 1], af, bf + 2);
                }
            }
        }
    }

    /* epilogue: O -> shared (f32), then D x, the z gate and 16-byte stores.
     * x of these rows is the X tile of the diagonal key tile, still in
     * shared memory; z is loaded for all of a thread's vectors at once. */
    constexpr int NV = MT * (PT / V) / 128; /* vectors per thread */
    const T *zp = (const T *)a.z;
    uint4 zraw[NV];
    if (a.has_z) {
#pragma unroll
        for (int q = 0; q < NV; q++) {
            const int idx = tid + 128 * q, r = idx / (PT / V), cv = (idx - r * (PT / V)) * V;
            zraw[q] = make_uint4(0u, 0u, 0u, 0u);
            if (r < nrows && cv < pvalid) {
                const T *zr = zp + (int64_t)b * a.zs[0] + (t0 + i0 + r) * a.zs[1] +
                              (int64_t)h * a.zs[2] + p0 + cv;
                if (cv + V <= pvalid && a.vec_z) {
                    zraw[q] = __ldg(reinterpret_cast<const uint4 *>(zr));
                } else {
                    T *e = reinterpret_cast<T *>(&zraw[q]);
                    for (int k = 0; k < V; k++)
                        if (cv + k < pvalid) e[k] = zr[k];
                }
            }
        }
    }
    __syncthreads();
    float *sO = reinterpret_cast<float *>(sB0);
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int u = 0; u < 2; u++)
            *reinterpret_cast<float2 *>(sO + (wr + g + 8 * u) * LDO + nt * 8 + 2 * t) =
                make_float2(O[nt][2 * u], O[nt][2 * u + 1]);
    __syncthreads();
    const T *sXd = (STAGES == 2 && (last & 1)) ? sX1 : sX0; /* rows i0.. of x */
    T *op = (T *)a.out;
    const float Dh = (a.has_D && !a.D_pc) ? a.D[h * a.Ds[0]] : 0.0f;
#pragma unroll
    for (int q = 0; q < NV; q++) {
        const int idx = tid + 128 * q, r = idx / (PT / V), cv = (idx - r * (PT / V)) * V;
        if (r >= nrows || cv >= pvalid) continue;
        const int rl = i0 + r;
        const int64_t tok = t0 + rl;
        float y[V];
#pragma unroll
        for (int e = 0; e < V; e++) y[e] = sO[r * LDO + cv + e];
        if (a.has_D) {
#pragma unroll
            for (int e = 0; e < V; e++) {
                const float xv = sf_elem<T>::to_f(sXd[r * LDX + cv + e]);
                const float d = a.D_pc ? (cv + e < pvalid
                                              ? a.D[h * a.Ds[0] + (int64_t)(p0 + cv + e) * a.Ds[1]]
                                              : 0.0f)
                                       : Dh;
                y[e] = fmaf(d, xv, y[e]);
            }
        }
        /* cu_seqlens: a sequence starting inside the chunk starts from its own
         * initial state, decayed by exp2(g'_i) (g' restarts at its start) */
        if (a.varlen == 2 && a.has_init && sseq[rl] != sfirst) {
            const float dec = exp2f(fminf(sg[rl], 0.0f));
            const float *in = a.init + (int64_t)sseq[rl] * a.ins[0] + h * a.ins[1];
            for (int e = 0; e < V; e++) {
                if (cv + e >= pvalid) break;
                const float *ip = in + (int64_t)(p0 + cv + e) * a.ins[2];
                float acc = 0.0f;
                for (int n = 0; n < a.N; n++)
                    acc = fmaf(sf_elem<T>::to_f(sC[r * LDN + n]), ip[n * a.ins[3]], acc);
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
