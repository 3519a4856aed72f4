/* conv1d_fwd.cuh - the causal depthwise conv1d prefill kernels,
 * channels-last (launched by layer_ops.cu; timed alone by
 * bench/harness/conv1d.cu).
 *
 * A thread owns 4 channels (16 bytes of f32, 8 of f16/bf16) with their
 * weights in registers, and a run of `tl` consecutive tokens; it slides the
 * W-1 previous inputs along in registers, so each input is loaded once per
 * run plus a W-1 token halo at the run start (from x, from initial_state at
 * a sequence start, or zeros).  A warp's 32 lanes cover 32 adjacent vectors
 * (512 or 256 contiguous bytes of one token row), so every load and store
 * is fully coalesced.  The (tokens x channels) tile of a block is 4 runs x
 * 32 vectors; staging it in shared memory would only add a copy, because in
 * this layout the register window already reads every element exactly once
 * with whole-line transactions.  cu_seqlens: a run finds its sequence by
 * binary search and restarts its window at every boundary it crosses.  The
 * final state is a separate tiny kernel (W-1 values per sequence and
 * channel). */
#ifndef SF_LAYER_CONV1D_FWD_CUH
#define SF_LAYER_CONV1D_FWD_CUH

#include "layer/lo_vec.cuh"

struct conv_fwd_args {
    const void *x;
    void *out;
    const float *w, *bias, *init;
    float *fin;
    const void *cu;
    int64_t xs[2], os[2], wsd[2], bs, ins[3], fs[3], cus;
    int64_t L;
    int batch, dim, nseq, tl, ctiles, ttiles, width;
    int has_bias, has_init, silu, varlen, cu64;
};

/* cu_seqlens[i], clamped to [0, L]: a bad device array gives wrong
 * windows, never a read outside x. */
static __device__ __forceinline__ int64_t conv_cu(const conv_fwd_args &a, int i) {
    const int64_t v = a.cu64 ? ((const int64_t *)a.cu)[(int64_t)i * a.cus]
                             : (int64_t)((const int *)a.cu)[(int64_t)i * a.cus];
    return v < 0 ? 0 : v > a.L ? a.L : v;
}

/* The W-1 inputs before token t of the sequence starting at `start`. */
template <typename T, int W, int V>
static __device__ __forceinline__ void conv_window(const conv_fwd_args &a, const T *xb, int seq,
                                                   int64_t start, int64_t t, int c0, int n,
                                                   float (&win)[W - 1][V]) {
#pragma unroll
    for (int k = 0; k < W - 1; k++) {
        const int64_t pos = t - (W - 1) + k;
        if (pos >= start) {
            ld_vec<T, V>(xb + pos * a.xs[1], n, win[k]);
        } else {
            const int64_t j = (W - 1) + (pos - start); /* entry of initial_state */
#pragma unroll
            for (int v = 0; v < V; v++)
                win[k][v] = a.has_init && v < n && j >= 0
                                ? a.init[(int64_t)seq * a.ins[0] + (int64_t)(c0 + v) * a.ins[1] +
                                         j * a.ins[2]]
                                : 0.0f;
        }
    }
}

/* Tokens per step of the main loop (all loads of a step issued before its
 * math), and vector width: 4 channels per thread for every dtype (16 bytes
 * of f32, 8 of f16/bf16), so the weights fit in registers.
 *
 * The 16-bit kernel was bound by instructions, not HBM: with 8 channels
 * per thread it spent ~25 instructions per element (5 shared-memory weight
 * loads, 4 FMAs, 8 for SiLU through __expf / __fdividef, conversions, a
 * 64-bit address and a guard per token, a window shifted by moves) and
 * reached 1.5 TB/s, the same ~400 G elements/s as f32 at half the bytes.
 * Now: weights and bias in registers (20 floats, read once from shared
 * memory), SILU a template flag, steps of 8 whole tokens with no per-token
 * or per-channel guard (a guarded step only at a sequence's or run's end,
 * and a separate loop for the last partial channel vector), the window as
 * the step's leading slots (W-1 moves per 8 tokens), pointers advanced by
 * adds, SiLU in 5 instructions (ftz SFU forms): the bf16 W 4 step is 417
 * SASS instructions for 32 elements, 13 per element (counted with
 * cuobjdump).  __launch_bounds__(128, 4): up to 128 registers, 4 blocks
 * (16 warps) per SM with 64 bytes of loads in flight per thread, no spills
 * (at 5 blocks, 96 registers, ptxas spilled 72-88 bytes: H100, W 4, SiLU,
 * 2.41 against 2.54 TB/s in bf16, 2.61 against 2.79 in f32).
 * Previous version's table (H200, 8 x 4096 x 5376, W 4, SiLU, bf16 / f32
 * GB/s): U 4 x 16-byte vectors 1543 / 3808; U 8 1257 / 3709; next step's
 * loads before the math 1258 / 3688; 8-byte vectors U 8 1574 / 3709. */
#define CONV_U 8
#define CONV_V 4

/* One step of m tokens (m <= CONV_U; FULL: m = CONV_U, no guards) at xp /
 * op (the step's first token): loads, the W taps from the window and the
 * step's own inputs, SiLU, stores; the window becomes the step's last
 * W-1 inputs. */
template <typename T, int W, int V, bool SILU, bool FULL, bool WHOLE>
static __device__ __forceinline__ void conv_step(const conv_fwd_args &a, const T *xp, T *op, int n_, int m,
                                                 const float (&wr)[W][V], const float (&br)[V],
                                                 float (&win)[W - 1][V]) {
    const int n = WHOLE ? V : n_; /* WHOLE: all V channels, no element-wise path */
    float xs[W - 1 + CONV_U][V];
#pragma unroll
    for (int k = 0; k < W - 1; k++)
#pragma unroll
        for (int v = 0; v < V; v++) xs[k][v] = win[k][v];
#pragma unroll
    for (int u = 0; u < CONV_U; u++) {
        if (FULL || u < m) ld_vec<T, V>(xp + u * a.xs[1], n, xs[W - 1 + u]);
        else
#pragma unroll
            for (int v = 0; v < V; v++) xs[W - 1 + u][v] = 0.0f;
    }
#pragma unroll
    for (int u = 0; u < CONV_U; u++) {
        if (FULL || u < m) {
            float o[V];
#pragma unroll
            for (int v = 0; v < V; v++) {
                float acc = br[v];
#pragma unroll
                for (int k = 0; k < W; k++) acc = fmaf(wr[k][v], xs[u + k][v], acc);
                o[v] = SILU ? lo_silu(acc) : acc;
            }
            st_vec<T, V>(op + u * a.os[1], n, o);
        }
    }
    /* the window: the W-1 inputs before the next step */
    if (FULL) {
#pragma unroll
        for (int k = 0; k < W - 1; k++)
#pragma unroll
            for (int v = 0; v < V; v++) win[k][v] = xs[CONV_U + k][v];
    } else {
#pragma unroll
        for (int k = 0; k < W - 1; k++)
#pragma unroll
            for (int v = 0; v < V; v++) {
                float w = win[k][v];
#pragma unroll
                for (int u = 0; u < CONV_U; u++)
                    if (u + 1 == m) w = xs[u + 1 + k][v]; /* slots m .. m+W-2 of xs */
                win[k][v] = w;
            }
    }
}

/* The run [t0, t1) of one thread: the window at t0, then steps of CONV_U
 * tokens (a guarded one at a sequence's or the run's end), restarting the
 * window at each sequence boundary (cu_seqlens).  WHOLE: n = V. */
template <typename T, int W, int V, bool SILU, bool WHOLE>
static __device__ __forceinline__ void conv_run(const conv_fwd_args &a, int b, int seq, int64_t start,
                                                int64_t end, int64_t t0, int64_t t1, int c0, int n,
                                                const float (&wr)[W][V], const float (&br)[V]) {
    const T *xb = (const T *)a.x + (int64_t)b * a.xs[0] + c0;
    T *ob = (T *)a.out + (int64_t)b * a.os[0] + c0;
    float win[W - 1][V];
    conv_window<T, W, V>(a, xb, seq, start, t0, c0, n, win);
    for (int64_t t = t0; t < t1;) {
        if (a.varlen && t >= end && seq + 1 < a.nseq) { /* next non-empty sequence */
            while (t >= end && seq + 1 < a.nseq) {
                seq++;
                start = end;
                end = conv_cu(a, seq + 1);
            }
            conv_window<T, W, V>(a, xb, seq, start, t, c0, n, win);
        }
        /* tokens of this run left in the sequence */
        int64_t m = t1 - t;
        if (a.varlen && end > t && end - t < m) m = end - t;
        const T *xp = xb + t * a.xs[1];
        T *op = ob + t * a.os[1];
        const int64_t xstep = CONV_U * a.xs[1], ostep = CONV_U * a.os[1];
        int64_t done = 0;
        for (; done + CONV_U <= m; done += CONV_U, xp += xstep, op += ostep)
            conv_step<T, W, V, SILU, true, WHOLE>(a, xp, op, n, CONV_U, wr, br, win);
        if (done < m) conv_step<T, W, V, SILU, false, WHOLE>(a, xp, op, n, (int)(m - done), wr, br, win);
        t += m;
    }
}

/* grid: one block per (channel tile of 32 vectors, token tile of 4 runs,
 * batch row), flattened; threadIdx.x = vector, threadIdx.y = run. */
template <typename T, int W, int V, bool SILU, bool PF = false>
__global__ void __launch_bounds__(128, 4) conv1d_fwd_kernel(const conv_fwd_args a) {
    const int64_t blk = blockIdx.x;
    const int ct = (int)(blk % a.ctiles);
    const int64_t rest = blk / a.ctiles;
    const int64_t tt = rest % a.ttiles;
    const int b = (int)(rest / a.ttiles);
    if constexpr (PF) {
        /* the rows of the run's window and first step asked into L2 before
         * the weights' load and barrier, which otherwise delay every
         * block's first x load by a round trip */
        const int c0 = (ct * 32 + (int)threadIdx.x) * V;
        const int64_t t0 = (tt * 4 + threadIdx.y) * a.tl;
        if (c0 < a.dim && t0 < a.L) {
            const int64_t k0 = t0 < W - 1 ? 0 : t0 - (W - 1), k1 = min(t0 + CONV_U, a.L);
            const T *xp = (const T *)a.x + (int64_t)b * a.xs[0] + c0 + k0 * a.xs[1];
#pragma unroll 1
            for (int64_t k = k0; k < k1; k++, xp += a.xs[1]) asm volatile("prefetch.global.L2 [%0];" ::"l"(xp));
        }
    }
    /* the block's weights and bias staged through shared memory (coalesced
     * loads, [tap][channel], zero past the channels), then each thread's
     * 4 x (W + 1) into registers: loaded straight from global memory they
     * were 20 64-bit addresses live at once, the kernel's register peak */
    constexpr int CH = 32 * V;
    __shared__ __align__(16) float sw[(W + 1) * CH];
    for (int i = (int)(threadIdx.y * 32 + threadIdx.x); i < (W + 1) * CH; i += 128) {
        const int k = i / CH, c = ct * CH + i % CH;
        sw[i] = c >= a.dim ? 0.0f
                : k < W    ? a.w[(int64_t)c * a.wsd[0] + k * a.wsd[1]]
                : a.has_bias ? a.bias[(int64_t)c * a.bs]
                             : 0.0f;
    }
    __syncthreads();
    const int c0 = (ct * 32 + (int)threadIdx.x) * V;
    if (c0 >= a.dim) return;
    const int n = min(V, a.dim - c0);
    const int64_t t0 = (tt * 4 + threadIdx.y) * a.tl;
    if (t0 >= a.L) return;
    const int64_t t1 = min(t0 + (int64_t)a.tl, a.L);
    float wr[W][V], br[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
        br[v] = sw[W * CH + threadIdx.x * V + v];
#pragma unroll
        for (int k = 0; k < W; k++) wr[k][v] = sw[k * CH + threadIdx.x * V + v];
    }

    int seq = b;
    int64_t start = 0, end = a.L;
    if (a.varlen) { /* the last sequence starting at or before t0 */
        int lo = 0, hi = a.nseq - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (conv_cu(a, mid) <= t0) lo = mid; else hi = mid - 1;
        }
        seq = lo;
        start = conv_cu(a, lo);
        end = conv_cu(a, lo + 1);
    }
    if (n == V) conv_run<T, W, V, SILU, true>(a, b, seq, start, end, t0, t1, c0, n, wr, br);
    else conv_run<T, W, V, SILU, false>(a, b, seq, start, end, t0, t1, c0, n, wr, br);
}

/* grid: one thread per (sequence, channel): the last W-1 entries of
 * [initial_state, x[start..end)]. */
template <typename T>
__global__ void __launch_bounds__(256) conv1d_final_kernel(const conv_fwd_args a) {
    const int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= (int64_t)a.nseq * a.dim) return;
    const int seq = (int)(u / a.dim), c = (int)(u % a.dim);
    const int b = a.varlen ? 0 : seq;
    int64_t start = 0, end = a.L;
    if (a.varlen) {
        start = conv_cu(a, seq);
        end = conv_cu(a, seq + 1);
        if (end < start) end = start;
    }
    const int64_t len = end - start;
    const T *xb = (const T *)a.x + (int64_t)b * a.xs[0] + c;
    float v[3];
    for (int k = 0; k < a.width - 1; k++) {
        const int64_t r = len - (a.width - 1) + k;
        v[k] = r >= 0 ? sf_elem<T>::to_f(xb[(start + r) * a.xs[1]])
               : a.has_init
                   ? a.init[(int64_t)seq * a.ins[0] + (int64_t)c * a.ins[1] + (a.width - 1 + r) * a.ins[2]]
                   : 0.0f;
    }
    for (int k = 0; k < a.width - 1; k++)
        a.fin[(int64_t)seq * a.fs[0] + (int64_t)c * a.fs[1] + k * a.fs[2]] = v[k];
}

#endif
