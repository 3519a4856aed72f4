/* bwd_seq.cuh - the CUDA SSD backward's sequential stage: one CTA per
 * (sequence, head) task at a time (a persistent loop over tasks), the
 * adjoint recurrence of src/ref/ssd_bwd_ref.c in f32 organised like the
 * CPU backward (src/cpu/ssd_bwd_cpu.c):
 *   pass 1: the state entering every chunk of Q tokens, kept in the CTA's
 *           scratch (recomputed from the inputs, not saved by the forward);
 *   pass 2: chunks in reverse: the chunk's Q + 1 states recomputed into
 *           scratch, then its tokens backwards with the adjoint G (P x N,
 *           shared memory) carried across chunk boundaries.
 * Thread (warp w, lane l) of 256 owns state elements (p, n) with
 * p = w (mod 8), n = l (mod 32) in every pass, so state and adjoint updates
 * need no barrier; the per-token reductions go through shared memory in a
 * fixed order (warp butterflies, then warps in order): bit-identical from
 * run to run.  N <= 256 (8 columns a lane).
 *
 * This is the correctness baseline of the CUDA backward: its work is
 * O(L P N) per head like the chunked form's, but it walks tokens one at a
 * time on CUDA cores with the states in global scratch. */
#ifndef SF_SSD_BWD_SEQ_CUH
#define SF_SSD_BWD_SEQ_CUH

#include "ssd/bwd_args.h"

#define SSD_BWD_THREADS 256
#define SSD_BWD_WARPS 8
#define SSD_BWD_NCOL 8 /* columns per lane: N <= 256 */

static __device__ __forceinline__ float bwd_ld(const void *p, int dt, int64_t off) {
    if (dt == SF_F32) return __ldg((const float *)p + off);
    if (dt == SF_F16) return __half2float(((const __half *)p)[off]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[off]);
}
static __device__ __forceinline__ void bwd_st(void *p, int dt, int64_t off, float v) {
    if (dt == SF_F32) ((float *)p)[off] = v;
    else if (dt == SF_F16) ((__half *)p)[off] = __float2half_rn(v);
    else ((__nv_bfloat16 *)p)[off] = __float2bfloat16_rn(v);
}

static __device__ __forceinline__ float bwd_softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

static __device__ __forceinline__ float bwd_dt(const ssd_bwd_args &a, float raw, float bias) {
    float d = raw + bias;
    if (a.softplus) d = bwd_softplus(d);
    if (d < a.dt_min) d = a.dt_min;
    if (d > a.dt_max) d = a.dt_max;
    return d;
}

static __device__ __forceinline__ float bwd_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

struct bwd_task {
    int b, s, h;
    int64_t start, end;
};

static __device__ __forceinline__ bwd_task bwd_task_of(const ssd_bwd_args &a, int k) {
    bwd_task t;
    t.s = k / a.H;
    t.h = k % a.H;
    if (a.varlen == 2) {
        t.b = 0;
        t.start = a.cu64 ? ((const int64_t *)a.cu)[t.s * a.cus] : ((const int *)a.cu)[t.s * a.cus];
        t.end = a.cu64 ? ((const int64_t *)a.cu)[(t.s + 1) * a.cus] : ((const int *)a.cu)[(t.s + 1) * a.cus];
    } else {
        t.b = t.s;
        t.start = 0;
        t.end = a.L;
    }
    return t;
}

/* token t starts a new sequence inside the task's row (seq_idx changes) */
static __device__ __forceinline__ bool bwd_reset(const ssd_bwd_args &a, const bwd_task &k, int64_t t) {
    return a.varlen == 1 && t > k.start &&
           a.seq_idx[k.b * a.sis[0] + t * a.sis[1]] != a.seq_idx[k.b * a.sis[0] + (t - 1) * a.sis[1]];
}

__global__ void __launch_bounds__(SSD_BWD_THREADS) ssd_bwd_seq_kernel(const ssd_bwd_args a) {
    extern __shared__ float sm[];
    const int P = a.P, N = a.N;
    const int64_t PN = (int64_t)P * N;
    float *G = sm;                         /* P x N adjoint */
    float *sB = G + PN, *sC = sB + N;      /* this token's B, C rows */
    float *sx = sC + N, *sdy = sx + P, *sgb = sdy + P, *sdD = sgb + P;
    float *colB = sdD + P, *colC = colB + SSD_BWD_WARPS * N, *red = colC + SSD_BWD_WARPS * N;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    float *ck = a.scratch + (int64_t)blockIdx.x * a.scratch_per_cta;
    float *st = ck + (int64_t)a.nck * PN;

    for (int task = blockIdx.x; task < a.ntask; task += gridDim.x) {
        const bwd_task k = bwd_task_of(a, task);
        const int h = k.h, g = h / a.hpg;
        const float Ah = a.A[h * a.As];
        const float bias = a.has_bias ? a.dt_bias[h * a.biass] : 0.0f;
        const int64_t len = k.end - k.start;
        const int64_t nck = (len + a.Q - 1) / a.Q;
        const int64_t xo = (int64_t)k.b * a.xs[0] + (int64_t)h * a.xs[2];
        const int64_t Bo = (int64_t)k.b * a.Bs[0] + (int64_t)g * a.Bs[2];
        const int64_t dto = (int64_t)k.b * a.dts[0] + (int64_t)h * a.dts[2];

        /* pass 1: the state entering each chunk (thread-private elements) */
        float *cur = st;
        for (int p = w; p < P; p += SSD_BWD_WARPS)
            for (int n = lane; n < N; n += 32)
                cur[(int64_t)p * N + n] = a.has_init ? a.init[k.s * a.ins[0] + h * a.ins[1] + p * a.ins[2] + n * a.ins[3]] : 0.0f;
        for (int64_t t = k.start; t < k.end; t++) {
            const int64_t j = (t - k.start) / a.Q;
            if ((t - k.start) % a.Q == 0)
                for (int p = w; p < P; p += SSD_BWD_WARPS)
                    for (int n = lane; n < N; n += 32) ck[j * PN + (int64_t)p * N + n] = cur[(int64_t)p * N + n];
            const float dtv = bwd_dt(a, bwd_ld(a.dt, a.dtdt, dto + t * a.dts[1]), bias);
            const float e = dtv * Ah;
            const float dec = bwd_reset(a, k, t) ? 0.0f : expf(e < 0.0f ? e : 0.0f);
            for (int p = w; p < P; p += SSD_BWD_WARPS) {
                const float xd = dtv * bwd_ld(a.x, a.xdt, xo + t * a.xs[1] + p);
                for (int n = lane; n < N; n += 32) {
                    float *c = cur + (int64_t)p * N + n;
                    *c = dec * *c + xd * bwd_ld(a.B, a.Bdt, Bo + t * a.Bs[1] + n);
                }
            }
        }

        /* the adjoint leaving the task: dfinal_states, or zero */
        for (int p = w; p < P; p += SSD_BWD_WARPS)
            for (int n = lane; n < N; n += 32)
                G[(int64_t)p * N + n] =
                    a.has_final ? a.dfin[k.s * a.dfs[0] + h * a.dfs[1] + p * a.dfs[2] + n * a.dfs[3]] : 0.0f;
        for (int p = tid; p < P; p += SSD_BWD_THREADS) sdD[p] = 0.0f;
        float pdA = 0.0f, pdtb = 0.0f; /* thread 0's */

        /* pass 2: chunks in reverse */
        for (int64_t j = nck - 1; j >= 0; j--) {
            const int64_t t0 = k.start + j * a.Q, t1 = t0 + a.Q < k.end ? t0 + a.Q : k.end;
            for (int p = w; p < P; p += SSD_BWD_WARPS)
                for (int n = lane; n < N; n += 32) st[(int64_t)p * N + n] = ck[j * PN + (int64_t)p * N + n];
            for (int64_t t = t0; t < t1; t++) {
                const float dtv = bwd_dt(a, bwd_ld(a.dt, a.dtdt, dto + t * a.dts[1]), bias);
                const float e = dtv * Ah;
                const float dec = bwd_reset(a, k, t) ? 0.0f : expf(e < 0.0f ? e : 0.0f);
                const float *prv = st + (t - t0) * PN;
                float *nxt = st + (t - t0 + 1) * PN;
                for (int p = w; p < P; p += SSD_BWD_WARPS) {
                    const float xd = dtv * bwd_ld(a.x, a.xdt, xo + t * a.xs[1] + p);
                    for (int n = lane; n < N; n += 32)
                        nxt[(int64_t)p * N + n] =
                            dec * prv[(int64_t)p * N + n] + xd * bwd_ld(a.B, a.Bdt, Bo + t * a.Bs[1] + n);
                }
            }
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
                        pdA += dtv * dec * dat;
                    }
                    const float v = raw + bias;
                    const float u = a.softplus ? bwd_softplus(v) : v;
                    float gr = (u < a.dt_min || u > a.dt_max) ? 0.0f : ddt;
                    if (a.softplus && v <= 20.0f) gr *= 1.0f / (1.0f + expf(-v));
                    pdtb += gr;
                    if (a.ddt) bwd_st(a.ddt, a.dtdt, (int64_t)k.b * a.ddts[0] + t * a.ddts[1] + (int64_t)h * a.ddts[2], gr);
                }
            }
        }
        __syncthreads();
        /* dinitial_states: the adjoint entering the task (its row's first sequence) */
        if (a.dinit)
            for (int p = w; p < P; p += SSD_BWD_WARPS)
                for (int n = lane; n < N; n += 32)
                    a.dinit[k.s * a.dis[0] + h * a.dis[1] + p * a.dis[2] + n * a.dis[3]] = G[(int64_t)p * N + n];
        float *part = a.part + (int64_t)task * (2 + P);
        if (tid == 0) {
            part[0] = pdA;
            part[1] = pdtb;
        }
        for (int p = tid; p < P; p += SSD_BWD_THREADS) part[2 + p] = sdD[p];
        __syncthreads(); /* G and sdD are reused by the next task */
    }
}

/* dB, dC of groups with several heads: each (token, group) row summed over
 * its heads in head order.  One thread per (token, group, n). */
__global__ void ssd_bwd_bc_kernel(const ssd_bwd_args a) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t total = (int64_t)a.batch * a.L * a.G * a.N;
    if (i >= total) return;
    const int n = (int)(i % a.N);
    const int g = (int)((i / a.N) % a.G);
    const int64_t bt = i / ((int64_t)a.N * a.G);
    const int64_t b = bt / a.L, t = bt % a.L;
    const int64_t o = (bt * a.H + (int64_t)g * a.hpg) * a.N + n;
    float vb = 0.0f, vc = 0.0f;
    for (int j = 0; j < a.hpg; j++) {
        vb += a.pdB[o + (int64_t)j * a.N];
        vc += a.pdC[o + (int64_t)j * a.N];
    }
    if (a.dB) bwd_st(a.dB, a.Bdt, b * a.dBs[0] + t * a.dBs[1] + (int64_t)g * a.dBs[2] + n, vb);
    if (a.dC) bwd_st(a.dC, a.Cdt, b * a.dCs[0] + t * a.dCs[1] + (int64_t)g * a.dCs[2] + n, vc);
}

/* dA, ddt_bias, dD: the tasks' partials summed over sequences in order.
 * One block per head. */
__global__ void ssd_bwd_param_kernel(const ssd_bwd_args a) {
    const int h = blockIdx.x, P = a.P;
    const int nseq = a.ntask / (a.H > 0 ? a.H : 1);
    if (threadIdx.x == 0) {
        float sA = 0.0f, sb = 0.0f, sD = 0.0f;
        for (int s = 0; s < nseq; s++) {
            const float *pp = a.part + ((int64_t)s * a.H + h) * (2 + P);
            sA += pp[0];
            sb += pp[1];
        }
        if (a.dA) a.dA[h * a.dAs] = sA;
        if (a.ddt_bias) a.ddt_bias[h * a.dbs] = sb;
        if (a.dD && !a.D_pc) {
            for (int p = 0; p < P; p++) {
                float si = 0.0f;
                for (int s = 0; s < nseq; s++) si += a.part[((int64_t)s * a.H + h) * (2 + P) + 2 + p];
                sD += si;
            }
            a.dD[h * a.dDs[0]] = sD;
        }
    }
    if (a.dD && a.D_pc)
        for (int p = threadIdx.x; p < P; p += blockDim.x) {
            float si = 0.0f;
            for (int s = 0; s < nseq; s++) si += a.part[((int64_t)s * a.H + h) * (2 + P) + 2 + p];
            a.dD[h * a.dDs[0] + p * a.dDs[1]] = si;
        }
}

#endif
