/* bwd_cpar.cuh - the CUDA SSD backward's chunk-parallel configuration
 * ("cpar"): the tokens of a task are cut into chunks of K = a.Q tokens
 * (an internal length: the result does not depend on it beyond rounding),
 * and what couples chunks is a linear map of the P x N state across each:
 *     h_out = D_c h_in + X_c,        G_in = D_c G_out + R_c
 * where D_c is the chunk's decay product (0 if a sequence starts inside
 * it), X_c the state the chunk makes from a zero state and R_c the adjoint
 * it passes back from a zero adjoint (R_c = sum_i decay(first..i) dy_i C_i^T:
 * no states needed).  Three kernels:
 *   ssd_bwd_local: every (task, chunk) at once: X_c, R_c, D_c;
 *   ssd_bwd_scan:  per task, chunks in order for h_in and in reverse for
 *                  G_out (the reverse state passing), elementwise, written
 *                  over X and R; dinitial_states = the adjoint entering;
 *   ssd_bwd_chunk: every (task, chunk) at once: the chunk's states from
 *                  h_in, its tokens backwards from G_out (bwd_chunk.cuh),
 *                  partials of dA, ddt_bias, dD per chunk.  The chunk's
 *                  Q + 1 states go to the CTA's global scratch (cpar), or
 *                  (ssd_bwd_chunk_sm, cpars) only the state entering every
 *                  sub-block of a.sub tokens does, and each sub-block's
 *                  states are recomputed into shared memory. */
#ifndef SF_SSD_BWD_CPAR_CUH
#define SF_SSD_BWD_CPAR_CUH

#include "ssd/bwd_chunk.cuh"

/* tokens [t0, t1) of item (task, chunk c); false when the chunk is past the
 * task's end */
static __device__ __forceinline__ bool bwd_item(const ssd_bwd_args &a, const bwd_task &k, int c, int64_t *t0,
                                                int64_t *t1) {
    *t0 = k.start + (int64_t)c * a.Q;
    *t1 = *t0 + a.Q < k.end ? *t0 + a.Q : k.end;
    return *t0 < k.end;
}

/* One CTA per (task, chunk): X_c, R_c in shared memory (thread-owned
 * elements, no barrier), then to the workspace. */
__global__ void __launch_bounds__(SSD_BWD_THREADS) ssd_bwd_local_kernel(const ssd_bwd_args a) {
    extern __shared__ float sm[];
    const int P = a.P, N = a.N, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t PN = (int64_t)P * N;
    const int64_t item = blockIdx.x;
    const bwd_task k = bwd_task_of(a, (int)(item / a.nck));
    int64_t t0, t1;
    if (!bwd_item(a, k, (int)(item % a.nck), &t0, &t1)) return;
    float *Xs = sm, *Rs = sm + PN;
    for (int p = w; p < P; p += SSD_BWD_WARPS)
        for (int n = lane; n < N; n += 32) Xs[(int64_t)p * N + n] = Rs[(int64_t)p * N + n] = 0.0f;
    float prod = 1.0f;
    for (int64_t t = t0; t < t1; t++) {
        float dtv, dec;
        bwd_decay(a, k, t, &dtv, &dec);
        prod *= dec;
        for (int p = w; p < P; p += SSD_BWD_WARPS) {
            const float xd = dtv * bwd_ld(a.x, a.xdt, k.xo + t * a.xs[1] + p);
            for (int n = lane; n < N; n += 32) {
                float *c = Xs + (int64_t)p * N + n;
                *c = dec * *c + xd * bwd_ld(a.B, a.Bdt, k.Bo + t * a.Bs[1] + n);
            }
        }
    }
    const int64_t Co = (int64_t)k.b * a.Cs[0] + (int64_t)k.g * a.Cs[2];
    for (int64_t t = t1 - 1; t >= t0; t--) {
        float dtv, dec;
        bwd_decay(a, k, t, &dtv, &dec);
        const bool cut = t + 1 < t1 && bwd_reset(a, k, t + 1); /* t's state does not reach t + 1 */
        for (int p = w; p < P; p += SSD_BWD_WARPS) {
            const float dy = bwd_dy(a, k, t, p);
            for (int n = lane; n < N; n += 32) {
                float *r = Rs + (int64_t)p * N + n;
                *r = dec * ((cut ? 0.0f : *r) + dy * bwd_ld(a.C, a.Cdt, Co + t * a.Cs[1] + n));
            }
        }
    }
    float *X = a.X + item * PN, *R = a.R + item * PN;
    for (int p = w; p < P; p += SSD_BWD_WARPS)
        for (int n = lane; n < N; n += 32) {
            X[(int64_t)p * N + n] = Xs[(int64_t)p * N + n];
            R[(int64_t)p * N + n] = Rs[(int64_t)p * N + n];
        }
    if (threadIdx.x == 0) a.Dc[item] = prod;
}

/* One CTA per task: X_c := the state entering chunk c, R_c := the adjoint
 * of the state leaving it; dinitial_states. */
__global__ void __launch_bounds__(SSD_BWD_THREADS) ssd_bwd_scan_kernel(const ssd_bwd_args a) {
    const int P = a.P, N = a.N;
    const int64_t PN = (int64_t)P * N;
    const int task = blockIdx.x;
    const bwd_task k = bwd_task_of(a, task);
    const int64_t nc = (k.end - k.start + a.Q - 1) / a.Q;
    const int64_t base = (int64_t)task * a.nck;
    for (int64_t e = threadIdx.x; e < PN; e += SSD_BWD_THREADS) {
        const int p = (int)(e / N), n = (int)(e % N);
        float hv = a.has_init ? a.init[k.s * a.ins[0] + k.h * a.ins[1] + p * a.ins[2] + n * a.ins[3]] : 0.0f;
        for (int64_t c = 0; c < nc; c++) {
            float *x = a.X + (base + c) * PN + e;
            const float xv = *x;
            *x = hv;
            hv = a.Dc[base + c] * hv + xv;
        }
        float gv = a.has_final ? a.dfin[k.s * a.dfs[0] + k.h * a.dfs[1] + p * a.dfs[2] + n * a.dfs[3]] : 0.0f;
        for (int64_t c = nc - 1; c >= 0; c--) {
            float *r = a.R + (base + c) * PN + e;
            const float rv = *r;
            *r = gv;
            gv = a.Dc[base + c] * gv + rv;
        }
        if (a.dinit) a.dinit[k.s * a.dis[0] + k.h * a.dis[1] + p * a.dis[2] + n * a.dis[3]] = gv;
    }
}

/* (task, chunk) items on a persistent grid: each CTA has its own scratch of
 * Q + 1 states. */
__global__ void __launch_bounds__(SSD_BWD_THREADS) ssd_bwd_chunk_kernel(const ssd_bwd_args a) {
    extern __shared__ float sm[];
    const int P = a.P, N = a.N, tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int64_t PN = (int64_t)P * N;
    const bwd_smem s = bwd_smem_of(sm, P, N);
    float *st = a.scratch + (int64_t)blockIdx.x * a.scratch_per_cta;
    const int64_t nitems = (int64_t)a.ntask * a.nck;
    for (int64_t item = blockIdx.x; item < nitems; item += gridDim.x) {
        const bwd_task k = bwd_task_of(a, (int)(item / a.nck));
        int64_t t0, t1;
        float *part = a.part + item * (2 + P);
        if (!bwd_item(a, k, (int)(item % a.nck), &t0, &t1)) {
            for (int p = tid; p < P + 2; p += SSD_BWD_THREADS) part[p] = 0.0f;
            continue;
        }
        const float *X = a.X + item * PN, *R = a.R + item * PN;
        for (int p = w; p < P; p += SSD_BWD_WARPS)
            for (int n = lane; n < N; n += 32) {
                st[(int64_t)p * N + n] = X[(int64_t)p * N + n];
                s.G[(int64_t)p * N + n] = R[(int64_t)p * N + n];
            }
        for (int p = tid; p < P; p += SSD_BWD_THREADS) s.sdD[p] = 0.0f;
        float pdA = 0.0f, pdtb = 0.0f;
        bwd_recompute(a, k, t0, t1, st);
        bwd_tokens(a, k, t0, t1, st, s, &pdA, &pdtb);
        __syncthreads();
        if (tid == 0) {
            part[0] = pdA;
            part[1] = pdtb;
        }
        for (int p = tid; p < P; p += SSD_BWD_THREADS) part[2 + p] = s.sdD[p];
        __syncthreads(); /* sdD is reset by the next item */
    }
}

/* cpars: as ssd_bwd_chunk, the per-token states of a sub-block of a.sub
 * tokens in shared memory after the adjoint's rows; the state entering each
 * sub-block in the CTA's scratch (ceil(Q / sub) states). */
__global__ void __launch_bounds__(SSD_BWD_THREADS) ssd_bwd_chunk_sm_kernel(const ssd_bwd_args a) {
    extern __shared__ float sm[];
    const int P = a.P, N = a.N, tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int64_t PN = (int64_t)P * N;
    const bwd_smem s = bwd_smem_of(sm, P, N);
    float *sst = sm + bwd_smem_floats(P, N);
    float *ck = a.scratch + (int64_t)blockIdx.x * a.scratch_per_cta;
    const int64_t nitems = (int64_t)a.ntask * a.nck;
    for (int64_t item = blockIdx.x; item < nitems; item += gridDim.x) {
        const bwd_task k = bwd_task_of(a, (int)(item / a.nck));
        int64_t t0, t1;
        float *part = a.part + item * (2 + P);
        if (!bwd_item(a, k, (int)(item % a.nck), &t0, &t1)) {
            for (int p = tid; p < P + 2; p += SSD_BWD_THREADS) part[p] = 0.0f;
            continue;
        }
        const float *X = a.X + item * PN, *R = a.R + item * PN;
        for (int p = w; p < P; p += SSD_BWD_WARPS)
            for (int n = lane; n < N; n += 32) {
                sst[(int64_t)p * N + n] = X[(int64_t)p * N + n];
                s.G[(int64_t)p * N + n] = R[(int64_t)p * N + n];
            }
        /* forward through the chunk, keeping the state entering each sub-block */
        const int64_t nsub = (t1 - t0 + a.sub - 1) / a.sub;
        for (int64_t j = 0; j < nsub; j++) {
            for (int p = w; p < P; p += SSD_BWD_WARPS)
                for (int n = lane; n < N; n += 32) ck[j * PN + (int64_t)p * N + n] = sst[(int64_t)p * N + n];
            const int64_t s0 = t0 + j * a.sub, s1 = s0 + a.sub < t1 ? s0 + a.sub : t1;
            for (int64_t t = s0; t < s1; t++) {
                float dtv, dec;
                bwd_decay(a, k, t, &dtv, &dec);
                for (int p = w; p < P; p += SSD_BWD_WARPS) {
                    const float xd = dtv * bwd_ld(a.x, a.xdt, k.xo + t * a.xs[1] + p);
                    for (int n = lane; n < N; n += 32) {
                        float *c = sst + (int64_t)p * N + n;
                        *c = dec * *c + xd * bwd_ld(a.B, a.Bdt, k.Bo + t * a.Bs[1] + n);
                    }
                }
            }
        }
        for (int p = tid; p < P; p += SSD_BWD_THREADS) s.sdD[p] = 0.0f;
        float pdA = 0.0f, pdtb = 0.0f;
        for (int64_t j = nsub - 1; j >= 0; j--) {
            const int64_t s0 = t0 + j * a.sub, s1 = s0 + a.sub < t1 ? s0 + a.sub : t1;
            for (int p = w; p < P; p += SSD_BWD_WARPS)
                for (int n = lane; n < N; n += 32) sst[(int64_t)p * N + n] = ck[j * PN + (int64_t)p * N + n];
            bwd_recompute(a, k, s0, s1, sst);
            bwd_tokens(a, k, s0, s1, sst, s, &pdA, &pdtb);
        }
        __syncthreads();
        if (tid == 0) {
            part[0] = pdA;
            part[1] = pdtb;
        }
        for (int p = tid; p < P; p += SSD_BWD_THREADS) part[2 + p] = s.sdD[p];
        __syncthreads(); /* sdD is reset by the next item */
    }
}

#endif
