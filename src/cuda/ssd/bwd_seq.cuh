/* bwd_seq.cuh - the CUDA SSD backward's sequential configuration ("seq"):
 * one CTA per (sequence, head) task at a time (a persistent loop), the
 * adjoint recurrence of src/ref/ssd_bwd_ref.c in f32 organised like the CPU
 * backward (src/cpu/ssd_bwd_cpu.c):
 *   pass 1: the state entering every chunk of Q tokens, kept in the CTA's
 *           scratch (recomputed from the inputs, not saved by the forward);
 *   pass 2: chunks in reverse (bwd_chunk.cuh), the adjoint carried across
 *           chunk boundaries in shared memory.
 * Its parallelism is tasks only (b x H, or sequences x H): the reference
 * point of the chunk-parallel configuration (bwd_cpar.cuh). */
#ifndef SF_SSD_BWD_SEQ_CUH
#define SF_SSD_BWD_SEQ_CUH

#include "ssd/bwd_chunk.cuh"

__global__ void __launch_bounds__(SSD_BWD_THREADS) ssd_bwd_seq_kernel(const ssd_bwd_args a) {
    extern __shared__ float sm[];
    const int P = a.P, N = a.N, tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int64_t PN = (int64_t)P * N;
    const bwd_smem s = bwd_smem_of(sm, P, N);
    float *ck = a.scratch + (int64_t)blockIdx.x * a.scratch_per_cta;
    float *st = ck + (int64_t)a.nck * PN;

    for (int task = blockIdx.x; task < a.ntask; task += gridDim.x) {
        const bwd_task k = bwd_task_of(a, task);
        const int64_t nck = (k.end - k.start + a.Q - 1) / a.Q;

        /* pass 1: the state entering each chunk (thread-owned elements) */
        float *cur = st;
        for (int p = w; p < P; p += SSD_BWD_WARPS)
            for (int n = lane; n < N; n += 32)
                cur[(int64_t)p * N + n] =
                    a.has_init ? a.init[k.s * a.ins[0] + k.h * a.ins[1] + p * a.ins[2] + n * a.ins[3]] : 0.0f;
        for (int64_t j = 0; j < nck; j++) {
            for (int p = w; p < P; p += SSD_BWD_WARPS)
                for (int n = lane; n < N; n += 32) ck[j * PN + (int64_t)p * N + n] = cur[(int64_t)p * N + n];
            const int64_t t0 = k.start + j * a.Q, t1 = t0 + a.Q < k.end ? t0 + a.Q : k.end;
            for (int64_t t = t0; t < t1; t++) {
                float dtv, dec;
                bwd_decay(a, k, t, &dtv, &dec);
                for (int p = w; p < P; p += SSD_BWD_WARPS) {
                    const float xd = dtv * bwd_ld(a.x, a.xdt, k.xo + t * a.xs[1] + p);
                    for (int n = lane; n < N; n += 32) {
                        float *c = cur + (int64_t)p * N + n;
                        *c = dec * *c + xd * bwd_ld(a.B, a.Bdt, k.Bo + t * a.Bs[1] + n);
                    }
                }
            }
        }

        /* the adjoint leaving the task: dfinal_states, or zero */
        for (int p = w; p < P; p += SSD_BWD_WARPS)
            for (int n = lane; n < N; n += 32)
                s.G[(int64_t)p * N + n] =
                    a.has_final ? a.dfin[k.s * a.dfs[0] + k.h * a.dfs[1] + p * a.dfs[2] + n * a.dfs[3]] : 0.0f;
        for (int p = tid; p < P; p += SSD_BWD_THREADS) s.sdD[p] = 0.0f;
        float pdA = 0.0f, pdtb = 0.0f;

        /* pass 2: chunks in reverse */
        for (int64_t j = nck - 1; j >= 0; j--) {
            const int64_t t0 = k.start + j * a.Q, t1 = t0 + a.Q < k.end ? t0 + a.Q : k.end;
            for (int p = w; p < P; p += SSD_BWD_WARPS)
                for (int n = lane; n < N; n += 32) st[(int64_t)p * N + n] = ck[j * PN + (int64_t)p * N + n];
            bwd_recompute(a, k, t0, t1, st);
            bwd_tokens(a, k, t0, t1, st, s, &pdA, &pdtb);
        }
        __syncthreads();
        /* dinitial_states: the adjoint entering the task (its row's first sequence) */
        if (a.dinit)
            for (int p = w; p < P; p += SSD_BWD_WARPS)
                for (int n = lane; n < N; n += 32)
                    a.dinit[k.s * a.dis[0] + k.h * a.dis[1] + p * a.dis[2] + n * a.dis[3]] = s.G[(int64_t)p * N + n];
        float *part = a.part + (int64_t)task * (2 + P);
        if (tid == 0) {
            part[0] = pdA;
            part[1] = pdtb;
        }
        for (int p = tid; p < P; p += SSD_BWD_THREADS) part[2 + p] = s.sdD[p];
        __syncthreads(); /* G and sdD are reused by the next task */
    }
}

#endif
