/* cumsum.cuh - stage 1 of the chunked SSD forward: processed dt and the
 * chunk-local cumulative sum g' (times log2 e) of min(dt A, 0), stored once
 * for the state and output stages (DESIGN.md section 1).
 *   ssd_seqid         (varlen) the sequence id of every token
 *   ssd_chunk_cumsum  one thread per (b, chunk, head) walks the chunk,
 *                     restarting at sequence starts (the general path)
 *   ssd_cumsum_warp   a warp per (b, chunk, head) by a warp scan, dense
 *                     batches (the split, sm_90a and TF32 paths)
 */
#ifndef SF_SSD_CUMSUM_CUH
#define SF_SSD_CUMSUM_CUH

#include "ssd/common.cuh"

/* One thread per token.  cu_seqlens: the last s with cu[s] <= t (empty
 * sequences are skipped that way); seq_idx: its value. */
__global__ void ssd_seqid(const ssd_fwd_args a) {
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)a.batch * a.L) return;
    const int64_t b = id / a.L, t = id - b * a.L;
    int sid;
    if (a.varlen == 1) {
        sid = a.seq_idx[b * a.sis[0] + t * a.sis[1]];
    } else {
        int lo = 0, hi = a.nseq - 1; /* answer in [lo, hi] */
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            const int64_t v = a.cu64 ? ((const int64_t *)a.cu)[mid * a.cus]
                                     : (int64_t)((const int32_t *)a.cu)[mid * a.cus];
            if (v <= t) lo = mid; else hi = mid - 1;
        }
        sid = lo;
    }
    a.seqid[id] = sid;
}

/* Grid (flattened): 128-head group fastest, then chunk, batch row; one thread
 * per (b, chunk, head) walks the chunk (dt loads of a warp are one row of
 * consecutive heads).  dt = clamp(softplus?(dt + bias)); g' = running sum of
 * min(dt A, 0), restarted where the sequence id changes, times log2(e).
 * Entries past the end of a partial chunk hold dt = 0 and the last g'. */
template <typename T>
__global__ void __launch_bounds__(128) ssd_chunk_cumsum(const ssd_fwd_args a) {
    const int nhb = (a.H + 127) / 128;
    int64_t id = blockIdx.x;
    const int hbk = (int)(id % nhb);
    id /= nhb;
    const int c = (int)(id % a.nc);
    const int b = (int)(id / a.nc);
    const int h = hbk * 128 + threadIdx.x;
    if (h >= a.H) return;
    const T *dt = (const T *)a.dt + (int64_t)b * a.dts[0] + (int64_t)h * a.dts[2];
    const float A = a.A[h * a.As], bias = a.has_bias ? a.dt_bias[h * a.biass] : 0.0f;
    const int64_t t0 = (int64_t)c * a.Q;
    const int Lc = (int)min((int64_t)a.Q, a.L - t0);
    const int64_t off = (((int64_t)b * a.H + h) * a.nc + c) * a.Q;
    float *dtw = a.dtw + off, *gw = a.gw + off;
    const int *sid = a.varlen ? a.seqid + (int64_t)b * a.L + t0 : nullptr;
    float gs = 0.0f;
    int prev = sid ? sid[0] : 0;
    /* 8 independent dt loads in flight, then the sequential sum over them */
    for (int i0 = 0; i0 < a.Q; i0 += 8) {
        float raw[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            raw[u] = i0 + u < Lc ? sf_elem<T>::to_f(dt[(t0 + i0 + u) * a.dts[1]]) : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + u;
            float d = 0.0f;
            if (i < Lc) {
                d = sf_dt_process(raw[u] + bias, a.softplus, a.dt_min, a.dt_max);
                if (sid) {
                    const int s = sid[i];
                    if (s != prev) gs = 0.0f;
                    prev = s;
                }
                gs += fminf(d * A, 0.0f);
            }
            dtw[i] = d;
            gw[i] = gs * SSD_LOG2E;
        }
    }
}

/* ------------------------------------------------------------------ */
/* chunk_cumsum by warp scans                                            */
/* ------------------------------------------------------------------ */
/* Grid (flattened): group of 8 heads fastest, then chunk, batch row; block
 * 256 = a warp per head; lane l owns the Q / 32 consecutive tokens from
 * l * Q / 32.  Entries past the end of a partial chunk get dt = 0 and the
 * last g' (their min(dt A, 0) is 0), as the general kernel writes them. */
template <typename T, int Q> static __device__ __forceinline__ void ssd_cumsum_block(const ssd_fwd_args &a, int64_t id) {
    constexpr int R = Q / 32;
    const int nhg = (a.H + 7) / 8;
    const int hg = (int)(id % nhg);
    id /= nhg;
    const int c = (int)(id % a.nc);
    const int b = (int)(id / a.nc);
    const int lane = threadIdx.x & 31, h = hg * 8 + (threadIdx.x >> 5);
    if (h >= a.H) return;
    const T *dt = (const T *)a.dt + (int64_t)b * a.dts[0] + (int64_t)h * a.dts[2];
    const float A = a.A[h * a.As], bias = a.has_bias ? a.dt_bias[h * a.biass] : 0.0f;
    const int64_t t0 = (int64_t)c * Q;
    const int Lc = (int)min((int64_t)Q, a.L - t0), i0 = lane * R;
    float raw[R], d[R], s[R];
#pragma unroll
    for (int u = 0; u < R; u++)
        raw[u] = i0 + u < Lc ? sf_elem<T>::to_f(dt[(t0 + i0 + u) * a.dts[1]]) : 0.0f;
    float run = 0.0f;
#pragma unroll
    for (int u = 0; u < R; u++) {
        float v = 0.0f;
        if (i0 + u < Lc) {
            v = sf_dt_process(raw[u] + bias, a.softplus, a.dt_min, a.dt_max);
        }
        d[u] = v;
        run += fminf(v * A, 0.0f);
        s[u] = run;
    }
    float incl = run;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    const float excl = incl - run;
    const int64_t off = (((int64_t)b * a.H + h) * a.nc + c) * Q + i0;
#pragma unroll
    for (int u = 0; u < R; u += 4) { /* off is a multiple of 4 floats: 16-byte stores */
        *reinterpret_cast<float4 *>(a.dtw + off + u) = make_float4(d[u], d[u + 1], d[u + 2], d[u + 3]);
        *reinterpret_cast<float4 *>(a.gw + off + u) =
            make_float4((excl + s[u]) * SSD_LOG2E, (excl + s[u + 1]) * SSD_LOG2E,
                        (excl + s[u + 2]) * SSD_LOG2E, (excl + s[u + 3]) * SSD_LOG2E);
    }
}


template <typename T, int Q>
__global__ void __launch_bounds__(256) ssd_cumsum_warp(const ssd_fwd_args a) {
    ssd_cumsum_block<T, Q>(a, blockIdx.x);
    /* launched programmatically after ssd_cb_wg (the sm_90a path), whose output it
     * does not read: it waits at its end only, so that the kernels after it
     * may count on both being complete (a no-op for a plain launch) */
    ssd_griddep_wait();
}

#endif
