/* bwd_tc_state.cuh - the chunk-level stages of the SSD backward's
 * tensor-core configuration ("tc"); item = (task, chunk c), tokens
 * [t0, t0 + Q) of the task, those past its end padded (dt 0, no decay):
 *   ssd_tc_prep_kernel:  per item, processed dt and the inclusive cumulative
 *                        log-decay cum_t = sum_{s <= t} min(dt_s A, 0);
 *   ssd_tc_local_kernel: per item, on tensor cores, the chunk's own state
 *                        S_c = sum_s exp(cum_last - cum_s) dt_s x_s B_s^T
 *                        and the adjoint it passes back from a zero one,
 *                        R_c = sum_t exp(cum_t) gy_t C_t^T (P x N, f32),
 *                        and gy_t in 16-bit (tgy) for the block stages;
 *   ssd_tc_scan_kernel:  per (task, slice of the state), chunks in order
 *                        for the state entering each chunk (over S_c) and in
 *                        reverse for the adjoint leaving it (over R_c):
 *                        h_in(c+1) = e_c h_in(c) + S_c, G(c-1) = e_c G(c) +
 *                        R_c with e_c = exp(cum_last(c)); dinitial_states =
 *                        the adjoint entering chunk 0; per chunk the slice's
 *                        <h_in, G> for d(cum_last). */
#ifndef SF_SSD_BWD_TC_STATE_CUH
#define SF_SSD_BWD_TC_STATE_CUH

#include "ssd/bwd_tc_common.cuh"

/* One CTA (Q <= 256 threads) per item. */
__global__ void __launch_bounds__(SSD_BWD_THREADS) ssd_tc_prep_kernel(const ssd_bwd_args a) {
    __shared__ float sc[2][SSD_BWD_THREADS];
    const int64_t item = blockIdx.x;
    const bwd_task k = bwd_task_of(a, (int)(item / a.nck));
    const int64_t t0 = k.start + (item % a.nck) * (int64_t)a.Q;
    const int i = threadIdx.x;
    float dtv = 0.0f, e = 0.0f;
    if (i < a.Q && t0 + i < k.end) {
        dtv = bwd_dt(a, bwd_ld(a.dt, a.dtdt, k.dto + (t0 + i) * a.dts[1]), k.bias);
        e = dtv * k.A;
        if (!(e < 0.0f)) e = 0.0f;
    }
    /* inclusive scan (Hillis-Steele, double-buffered) */
    int cur = 0;
    sc[0][i] = e;
    __syncthreads();
    for (int o = 1; o < a.Q; o <<= 1) {
        const float v = sc[cur][i] + (i >= o ? sc[cur][i - o] : 0.0f);
        sc[cur ^ 1][i] = v;
        cur ^= 1;
        __syncthreads();
    }
    if (i < a.Q) {
        a.tcum[item * a.Q + i] = sc[cur][i];
        a.tdt[item * a.Q + i] = dtv;
    }
}

/* One CTA per item: S_c into tS, R_c into tdS (the scan turns them into
 * the states and adjoints).  PT, NT, QT: the shape compiled in (0: read
 * from a). */
template <typename T, int PT, int NT, int QT>
__global__ void __launch_bounds__(SSD_BWD_THREADS) ssd_tc_local_kernel(const ssd_bwd_args a) {
    extern __shared__ __align__(16) unsigned char smraw[];
    using F = ssd_mma<T>;
    const int P = PT ? PT : a.P, N = NT ? NT : a.N, Q = QT ? QT : a.Q, ldP = P + 8, ldN = N + 8;
    const int64_t item = blockIdx.x;
    const bwd_task k = bwd_task_of(a, (int)(item / a.nck));
    const int64_t t0 = k.start + (item % a.nck) * (int64_t)Q;
    const int valid = (int)(k.end - t0 < Q ? k.end - t0 : Q);
    T *sX = (T *)smraw;
    T *sB = sX + (size_t)Q * ldP;
    float *w = (float *)(sB + (size_t)Q * ldN);
    const float *cum = a.tcum + item * Q, *dtv = a.tdt + item * Q;
    const float cl = cum[Q - 1];
    const bool vec = a.tvec;
    const int64_t PN = (int64_t)P * N;
    const int64_t Co = (int64_t)k.b * a.Cs[0] + (int64_t)k.g * a.Cs[2];
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: x weighted exp(cl - cum) dt against B (x raw by cp.async,
         * the weight applied to its fragments: the same one rounding); pass
         * 1: gy weighted exp(cum) against C */
        if (pass == 0) {
            ssd_stage_async<T, SSD_BWD_THREADS>(sX, ldP, (const T *)a.x + k.xo + t0 * a.xs[1], a.xs[1], Q, P, valid,
                                                P, vec);
            ssd_stage_async<T, SSD_BWD_THREADS>(sB, ldN, (const T *)a.B + k.Bo + t0 * a.Bs[1], a.Bs[1], Q, N, valid,
                                                N, vec);
        } else {
            ssd_stage_async<T, SSD_BWD_THREADS>(sB, ldN, (const T *)a.C + Co + t0 * a.Cs[1], a.Cs[1], Q, N, valid, N,
                                                vec);
        }
        for (int i = threadIdx.x; i < Q; i += SSD_BWD_THREADS)
            w[i] = pass == 0 ? expf(cl - cum[i]) * dtv[i] : expf(cum[i]);
        __syncthreads();
        if (pass == 1) {
            T *gy = (T *)a.tgy + item * Q * P; /* gy in 16-bit for the block stages */
            tc_stage<T>(sX, ldP, Q, P, valid, [&](int r, int c, float f[8]) {
                tc_gy8<T>(a, k, t0 + r, c, vec, f);
                ssd_vec<T>::store(gy + (int64_t)r * P + c, f);
#pragma unroll
                for (int q = 0; q < 8; q++) f[q] *= w[r];
            });
        }
        sf_cp_async_commit();
        sf_cp_async_wait<0>();
        __syncthreads();
        float *dst = (pass == 0 ? a.tS : a.tdS) + item * PN;
        tc_gemm<T>(
            P, N, Q,
            [&](uint32_t fr[4], int m0, int k0) {
                F::load_a_t(fr, sX, ldP, m0, k0);
                if (pass == 0) F::scale_a(fr, w + k0);
            },
            [&](uint32_t fr[4], int n0, int k0) { F::load_b2_t(fr, sB, ldN, n0, k0); },
            [&](int m0, int n0, float (*acc)[4]) {
                const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
#pragma unroll
                    for (int hf = 0; hf < 2; hf++) {
                        const int r = m0 + g + 8 * hf, c = n0 + 8 * nt + 2 * t;
                        *reinterpret_cast<float2 *>(dst + (int64_t)r * N + c) =
                            make_float2(acc[nt][2 * hf], acc[nt][2 * hf + 1]);
                    }
            });
        __syncthreads(); /* the tiles are restaged by the next pass */
    }
}

/* Grid (task, slice): thread i of slice s owns state element s * 1024 + i
 * + 256 j, j < 4.  The states entering (f32 over tS, and 16-bit) and the
 * adjoints leaving (16-bit) for the block stages. */
template <typename T>
__global__ void __launch_bounds__(SSD_BWD_THREADS) ssd_tc_scan_kernel(const ssd_bwd_args a) {
    __shared__ float red[SSD_BWD_WARPS];
    const int task = blockIdx.x, sl = blockIdx.y;
    const bwd_task k = bwd_task_of(a, task);
    const int64_t PN = (int64_t)a.P * a.N;
    const int Q = a.Q;
    int nc = (int)((k.end - k.start + Q - 1) / Q);
    if (nc > a.nck) nc = a.nck;
    const int64_t item0 = (int64_t)task * a.nck;
    float h[4], g[4];
    int64_t e[4];
    bool on[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        e[j] = (int64_t)sl * 1024 + threadIdx.x + 256 * j;
        on[j] = e[j] < PN;
        const int p = on[j] ? (int)(e[j] / a.N) : 0, n = on[j] ? (int)(e[j] % a.N) : 0;
        h[j] = on[j] && a.has_init ? a.init[(int64_t)k.s * a.ins[0] + (int64_t)k.h * a.ins[1] + (int64_t)p * a.ins[2] +
                                            (int64_t)n * a.ins[3]]
                                   : 0.0f;
        g[j] = on[j] && a.has_final ? a.dfin[(int64_t)k.s * a.dfs[0] + (int64_t)k.h * a.dfs[1] +
                                             (int64_t)p * a.dfs[2] + (int64_t)n * a.dfs[3]]
                                    : 0.0f;
    }
    /* each pass loads chunk c's values before it stores chunk c - 1's (the
     * compiler cannot move a load above a store that may alias it): two
     * chunks' loads in flight, not one */
    float nloc[4], nec = 0.0f;
    const auto load_fwd = [&](int c) {
        nec = expf(a.tcum[(item0 + c) * Q + Q - 1]);
        const float *S = a.tS + (item0 + c) * PN;
#pragma unroll
        for (int j = 0; j < 4; j++) nloc[j] = on[j] ? S[e[j]] : 0.0f;
    };
    if (nc > 0) load_fwd(0);
    for (int c = 0; c < nc; c++) {
        const float ec = nec;
        float loc[4];
#pragma unroll
        for (int j = 0; j < 4; j++) loc[j] = nloc[j];
        if (c + 1 < nc) load_fwd(c + 1);
        float *S = a.tS + (item0 + c) * PN;
        T *S16 = (T *)a.tS16 + (item0 + c) * PN;
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (on[j]) {
                S[e[j]] = h[j];
                S16[e[j]] = sf_elem<T>::from_f(h[j]);
                h[j] = ec * h[j] + loc[j];
            }
    }
    float nS[4];
    const auto load_bwd = [&](int c) {
        nec = expf(a.tcum[(item0 + c) * Q + Q - 1]);
        const float *S = a.tS + (item0 + c) * PN, *G = a.tdS + (item0 + c) * PN;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            nloc[j] = on[j] ? G[e[j]] : 0.0f;
            nS[j] = on[j] ? S[e[j]] : 0.0f;
        }
    };
    if (nc > 0) load_bwd(nc - 1);
    for (int c = nc - 1; c >= 0; c--) {
        const float ec = nec;
        float loc[4], sv[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            loc[j] = nloc[j];
            sv[j] = nS[j];
        }
        if (c > 0) load_bwd(c - 1);
        T *G16 = (T *)a.tdS16 + (item0 + c) * PN;
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (on[j]) {
                G16[e[j]] = sf_elem<T>::from_f(g[j]);
                dot += sv[j] * g[j];
                g[j] = ec * g[j] + loc[j];
            }
        dot = tc_block_sum(dot, red);
        if (threadIdx.x == 0) a.tdot[(item0 + c) * a.tnsl + sl] = dot;
    }
    if (a.dinit)
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (on[j]) {
                const int p = (int)(e[j] / a.N), n = (int)(e[j] % a.N);
                a.dinit[(int64_t)k.s * a.dis[0] + (int64_t)k.h * a.dis[1] + (int64_t)p * a.dis[2] +
                        (int64_t)n * a.dis[3]] = g[j];
            }
}

#endif
