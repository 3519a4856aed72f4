/* bwd_reduce.cuh - the CUDA SSD backward's reductions, each in a fixed
 * order (bit-identical from run to run):
 *   ssd_bwd_bc_kernel:    dB, dC of groups with several heads: each
 *                         (token, group) row summed over its partial rows
 *                         (of a head each, or of a.hk heads) in order;
 *   ssd_bwd_param_kernel: dA, ddt_bias, dD: the partials of the tasks (and
 *                         their chunks) summed in order. */
#ifndef SF_SSD_BWD_REDUCE_CUH
#define SF_SSD_BWD_REDUCE_CUH

#include "ssd/bwd_common.cuh"

/* One thread per (token, group, n). */
__global__ void ssd_bwd_bc_kernel(const ssd_bwd_args a) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t total = (int64_t)a.batch * a.L * a.G * a.N;
    if (i >= total) return;
    const int n = (int)(i % a.N);
    const int g = (int)((i / a.N) % a.G);
    const int64_t bt = i / ((int64_t)a.N * a.G);
    const int64_t b = bt / a.L, t = bt % a.L;
    const int nrow = a.H / a.hk, per = a.hpg / a.hk; /* partial rows: a token's, a group's */
    const int64_t o = (bt * nrow + (int64_t)g * per) * a.N + n;
    float vb = 0.0f, vc = 0.0f;
    for (int j = 0; j < per; j++) {
        vb += a.pdB[o + (int64_t)j * a.N];
        vc += a.pdC[o + (int64_t)j * a.N];
    }
    if (a.dB) bwd_st(a.dB, a.Bdt, b * a.dBs[0] + t * a.dBs[1] + (int64_t)g * a.dBs[2] + n, vb);
    if (a.dC) bwd_st(a.dC, a.Cdt, b * a.dCs[0] + t * a.dCs[1] + (int64_t)g * a.dCs[2] + n, vc);
}

/* One block per head; partial j of task (s, h) at part[((s H + h) npt + j) (2 + P)]:
 * dA, ddt_bias, then dD per channel. */
__global__ void ssd_bwd_param_kernel(const ssd_bwd_args a) {
    const int h = blockIdx.x, P = a.P;
    const int nseq = a.ntask / a.H;
    const int64_t stride = 2 + (int64_t)P;
    if (threadIdx.x == 0) {
        float sA = 0.0f, sb = 0.0f;
        for (int s = 0; s < nseq; s++)
            for (int j = 0; j < a.npt; j++) {
                const float *pp = a.part + (((int64_t)s * a.H + h) * a.npt + j) * stride;
                sA += pp[0];
                sb += pp[1];
            }
        if (a.dA) a.dA[h * a.dAs] = sA;
        if (a.ddt_bias) a.ddt_bias[h * a.dbs] = sb;
    }
    if (!a.dD) return;
    __shared__ float chan[256];
    float sD = 0.0f; /* thread 0: the per-head dD, channels in order */
    for (int p0 = 0; p0 < P; p0 += 256) {
        const int p = p0 + (int)threadIdx.x;
        if (threadIdx.x < 256 && p < P) {
            float si = 0.0f;
            for (int s = 0; s < nseq; s++)
                for (int j = 0; j < a.npt; j++) si += a.part[(((int64_t)s * a.H + h) * a.npt + j) * stride + 2 + p];
            if (a.D_pc) a.dD[h * a.dDs[0] + p * a.dDs[1]] = si;
            else chan[threadIdx.x] = si;
        }
        __syncthreads();
        if (!a.D_pc && threadIdx.x == 0)
            for (int q = 0; q < 256 && p0 + q < P; q++) sD += chan[q];
        __syncthreads();
    }
    if (!a.D_pc && threadIdx.x == 0) a.dD[h * a.dDs[0]] = sD;
}

#endif
