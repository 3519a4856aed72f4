/* bwd_chunk.cuh - the per-chunk work of the CUDA SSD backward, shared by
 * the sequential stage (bwd_seq.cuh) and the chunk-parallel one
 * (bwd_cpar.cuh): the chunk's states recomputed from the state entering it,
 * then its tokens backwards with the adjoint G (P x N, shared memory):
 *     g = G + dy C;  gb = g B;  da += <g, h_{t-1}>;  dB += dt x g;
 *     dC += dy h_t;  G = a g;
 * dx = dt gb + D dy, d(dt) = x . gb + A a da (where dt A < 0) back through
 * the clamp, softplus and bias; dz from y = h_t C + D x. */
#ifndef SF_SSD_BWD_CHUNK_CUH
#define SF_SSD_BWD_CHUNK_CUH

#include "ssd/bwd_common.cuh"

/* st[0] holds the state entering token t0 (thread-owned elements); fills
 * st[1 .. t1 - t0] with the state after each token. */
static __device__ void bwd_recompute(const ssd_bwd_args &a, const bwd_task &k, int64_t t0, int64_t t1, float *st) {
    const int P = a.P, N = a.N, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t PN = (int64_t)P * N;
    for (int64_t t = t0; t < t1; t++) {
        float dtv, dec;
        bwd_decay(a, k, t, &dtv, &dec);
        const float *prv = st + (t - t0) * PN;
        float *nxt = st + (t - t0 + 1) * PN;
        for (int p = w; p < P; p += SSD_BWD_WARPS) {
            const float xd = dtv * bwd_ld(a.x, a.xdt, k.xo + t * a.xs[1] + p);
            for (int n = lane; n < N; n += 32)
                nxt[(int64_t)p * N + n] = dec * prv[(int64_t)p * N + n] + xd * bwd_ld(a.B, a.Bdt, k.Bo + t * a.Bs[1] + n);
        }
    }
}

/* Tokens t1 - 1 down to t0, the states in st as bwd_recompute left them, G
 * the adjoint of the state after t1 - 1 (thread-owned elements).  Writes
 * the tokens' dx, dz, ddt and dB/dC rows (or per-head rows), adds to s.sdD
 * (thread p's), and to *pdA, *pdtb (thread 0's). */
static __device__ void bwd_tokens(const ssd_bwd_args &a, const bwd_task &k, int64_t t0, int64_t t1, const float *st,
                                  const bwd_smem &s, float *pdA, float *pdtb) {
    const int P = a.P, N = a.N, tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int64_t PN = (int64_t)P * N;
    const int h = k.h, g = k.g;
    const float Ah = k.A, bias = k.bias;
    const int64_t xo = k.xo, Bo = k.Bo, dto = k.dto;
    float *G = s.G, *sB = s.sB, *sC = s.sC, *sx = s.sx, *sdy = s.sdy, *sgb = s.sgb, *sdD = s.sdD;
    float *colB = s.colB, *colC = s.colC, *red = s.red;
    float pdA_ = 0.0f, pdtb_ = 0.0f;
    for (int64_t t = t1 - 1; t >= t0; t--) {
        const float raw = bwd_ld(a.dt, a.dtdt, dto + t * a.dts[1]);
        const float dtv = bwd_dt(a, raw, bias);
        const float e = dtv * Ah;
        const bool live = e < 0.0f, reset = bwd_reset(a, k, t);
        const float dec = expf(live ? e : 0.0f);
        /* the state after t does not flow into t + 1 across a seq_idx change */
        if (t + 1 < k.end && bwd_reset(a, k, t + 1))
            for (int p = w; p < P; p += SSD_BWD_WARPS)
                for (int n = lane; n < N; n += 32) G[(int64_t)p * N + n] = 0.0f;
        __syncthreads(); /* the previous token's rows are consumed */
        for (int n = tid; n < N; n += SSD_BWD_THREADS) {
            sB[n] = bwd_ld(a.B, a.Bdt, Bo + t * a.Bs[1] + n);
            sC[n] = bwd_ld(a.C, a.Cdt, (int64_t)k.b * a.Cs[0] + (int64_t)g * a.Cs[2] + t * a.Cs[1] + n);
        }
        for (int p = tid; p < P; p += SSD_BWD_THREADS) {
            sx[p] = bwd_ld(a.x, a.xdt, xo + t * a.xs[1] + p);
            sdy[p] = bwd_ld(a.dout, a.xdt, (int64_t)k.b * a.dos[0] + (int64_t)h * a.dos[2] + t * a.dos[1] + p);
        }
        __syncthreads();
        const float *hprev = st + (t - t0) * PN, *hcur = hprev + PN;
        if (a.has_z) { /* y = h_t C + D x, then the gate's two gradients */
            for (int p = w; p < P; p += SSD_BWD_WARPS) {
                float y = 0.0f;
                for (int n = lane; n < N; n += 32) y += hcur[(int64_t)p * N + n] * sC[n];
                y = bwd_warp_sum(y);
                if (lane == 0) {
                    const float Dv = !a.has_D ? 0.0f : a.D_pc ? a.D[h * a.Ds[0] + p * a.Ds[1]] : a.D[h * a.Ds[0]];
                    y += Dv * sx[p];
                    const float zv = bwd_ld(a.z, a.xdt, (int64_t)k.b * a.zs[0] + (int64_t)h * a.zs[2] + t * a.zs[1] + p);
                    const float sg = 1.0f / (1.0f + expf(-zv));
                    const float dy = sdy[p];
                    if (a.dz)
                        bwd_st(a.dz, a.xdt, (int64_t)k.b * a.dzs[0] + (int64_t)h * a.dzs[2] + t * a.dzs[1] + p,
                               dy * y * sg * (1.0f + zv * (1.0f - sg)));
                    sdy[p] = dy * zv * sg;
                }
            }
            __syncthreads();
        }
        float cB[SSD_BWD_NCOL], cC[SSD_BWD_NCOL];
#pragma unroll
        for (int c = 0; c < SSD_BWD_NCOL; c++) cB[c] = cC[c] = 0.0f;
        float da = 0.0f;
        for (int p = w; p < P; p += SSD_BWD_WARPS) {
            const float dy = sdy[p], dtx = dtv * sx[p];
            float gb = 0.0f;
#pragma unroll
            for (int c = 0; c < SSD_BWD_NCOL; c++) {
                const int n = lane + 32 * c;
                if (n >= N) break;
                const int64_t o = (int64_t)p * N + n;
                const float gv = G[o] + dy * sC[n];
                gb += gv * sB[n];
                da += reset ? 0.0f : gv * hprev[o];
                cB[c] += dtx * gv;
                cC[c] += dy * hcur[o];
                G[o] = dec * gv;
            }
            gb = bwd_warp_sum(gb);
            if (lane == 0) sgb[p] = gb;
        }
#pragma unroll
        for (int c = 0; c < SSD_BWD_NCOL; c++) {
            const int n = lane + 32 * c;
            if (n < N) {
                colB[w * N + n] = cB[c];
                colC[w * N + n] = cC[c];
            }
        }
        da = bwd_warp_sum(da);
        if (lane == 0) red[w] = da;
        __syncthreads();
        /* dB, dC rows: the warps' column sums in warp order */
        for (int n = tid; n < N; n += SSD_BWD_THREADS) {
            float vb = 0.0f, vc = 0.0f;
            for (int q = 0; q < SSD_BWD_WARPS; q++) {
                vb += colB[q * N + n];
                vc += colC[q * N + n];
            }
            if (a.pdB) {
                const int64_t o = (((int64_t)k.b * a.L + t) * a.H + h) * N + n;
                a.pdB[o] = vb;
                a.pdC[o] = vc;
            } else {
                if (a.dB) bwd_st(a.dB, a.Bdt, (int64_t)k.b * a.dBs[0] + t * a.dBs[1] + (int64_t)g * a.dBs[2] + n, vb);
                if (a.dC) bwd_st(a.dC, a.Cdt, (int64_t)k.b * a.dCs[0] + t * a.dCs[1] + (int64_t)g * a.dCs[2] + n, vc);
            }
        }
        for (int p = tid; p < P; p += SSD_BWD_THREADS) {
            const float Dv = !a.has_D ? 0.0f : a.D_pc ? a.D[h * a.Ds[0] + p * a.Ds[1]] : a.D[h * a.Ds[0]];
            sdD[p] += sdy[p] * sx[p];
            if (a.dx)
                bwd_st(a.dx, a.xdt, (int64_t)k.b * a.dxs[0] + t * a.dxs[1] + (int64_t)h * a.dxs[2] + p,
                       dtv * sgb[p] + Dv * sdy[p]);
        }
        if (tid == 0) {
            float ddt = 0.0f, dat = 0.0f;
            for (int p = 0; p < P; p++) ddt += sx[p] * sgb[p];
            for (int q = 0; q < SSD_BWD_WARPS; q++) dat += red[q];
            if (live) {
                ddt += Ah * dec * dat;
                pdA_ += dtv * dec * dat;
            }
            const float v = raw + bias;
            const float u = a.softplus ? bwd_softplus(v) : v;
            float gr = (u < a.dt_min || u > a.dt_max) ? 0.0f : ddt;
            if (a.softplus && v <= 20.0f) gr *= 1.0f / (1.0f + expf(-v));
            pdtb_ += gr;
            if (a.ddt) bwd_st(a.ddt, a.dtdt, (int64_t)k.b * a.ddts[0] + t * a.ddts[1] + (int64_t)h * a.ddts[2], gr);
        }
    }
    if (tid == 0) {
        *pdA += pdA_;
        *pdtb += pdtb_;
    }
}

#endif
