/* ssd_chunk.cuh - the two tensor-core kernels of the chunked SSD forward:
 * ssd_state_pass (chunk states + the sequential pass over chunks) and
 * ssd_chunk_out (the fused output).  Included only from ssd_fwd.cu.
 *
 * Workspace written by the small kernels of ssd_fwd.cu and read here:
 *   dtw, gw   (b, H, nchunks, Q) f32: processed dt, and g' * log2(e) where g'
 *             is the chunk-local cumulative sum of min(dt A, 0) restarted at
 *             every sequence start inside the chunk.  Differences of g' within
 *             one sequence equal those of the plain cumsum, and for a sequence
 *             that starts inside the chunk exp2(g'_i) is exactly the decay from
 *             its start, so initial states of such sequences need no special
 *             exponent.
 *   seqid     (b, L) i32: sequence id of every token (varlen only).
 *   states    (b, H, nchunks, P, N) in the input dtype (the output kernel
 *             feeds it to the tensor cores in that precision anyway, as
 *             mamba_ssm does; half the bytes of f32): the state entering
 *             chunk c for the sequence of the chunk's first token (its
 *             initial state, or zero, when that token starts a sequence).
 *             states32 holds an f32 copy only for ssd_final_varlen.
 */
#ifndef SF_SSD_CHUNK_CUH
#define SF_SSD_CHUNK_CUH

#include "ssd/args.h"
#include "ssd/mma.cuh"

/* The block of a grid with the head fastest, then P tile (of `ptiles`),
 * chunk, batch row. */
struct ssd_hpcb {
    int h, pt, c, b;
};
static __device__ __forceinline__ ssd_hpcb ssd_block_hpcb(const ssd_fwd_args &a, int ptiles) {
    int64_t id = blockIdx.x;
    ssd_hpcb r;
    r.h = (int)(id % a.H);
    id /= a.H;
    r.pt = (int)(id % ptiles);
    id /= ptiles;
    r.c = (int)(id % a.nc);
    r.b = (int)(id / a.nc);
    return r;
}

/* The block of the sm_90a output kernels (run of `hpc` heads fastest, then
 * group, P tile, chunk, batch row): its heads h_begin .. h_begin + nh - 1
 * (nh <= 0: no head; the block returns). */
struct ssd_out_blk {
    int grp, pt, c, b, h_begin, nh;
};
/* group, P tile, chunk and batch row of an output block or unit from its
 * index over (group, P tile, chunk, batch row), group fastest */
static __device__ __forceinline__ void ssd_out_gpcb(ssd_out_blk &r, const ssd_fwd_args &a, int64_t id, int G,
                                                    int ptiles) {
    r.grp = (int)(id % G);
    id /= G;
    r.pt = (int)(id % ptiles);
    id /= ptiles;
    r.c = (int)(id % a.nc);
    r.b = (int)(id / a.nc);
}
static __device__ __forceinline__ ssd_out_blk ssd_out_block(const ssd_fwd_args &a, int hpc) {
    const int nsub = (a.hpg + hpc - 1) / hpc, G = a.H / a.hpg, ptiles = a.P / 64;
    int64_t id = blockIdx.x;
    ssd_out_blk r;
    const int sub = (int)(id % nsub);
    ssd_out_gpcb(r, a, id / nsub, G, ptiles);
    r.h_begin = r.grp * a.hpg + sub * hpc;
    r.nh = min(hpc, (r.grp + 1) * a.hpg - r.h_begin);
    return r;
}

/* Balanced output grids (configurations wgq / fuq): the units are (b, chunk,
 * P tile, head), head fastest, then group, P tile, chunk, batch row; a block
 * takes a contiguous range of them as runs of heads of one (b, chunk, P tile,
 * group).  The run from unit u, ending at uend or at the group's last head. */
static __device__ __forceinline__ ssd_out_blk ssd_out_unit(const ssd_fwd_args &a, int64_t u, int64_t uend) {
    const int G = a.H / a.hpg, ptiles = a.P / 64, hi = (int)(u % a.hpg);
    int64_t id = u / a.hpg;
    ssd_out_blk r;
    ssd_out_gpcb(r, a, id, G, ptiles);
    r.h_begin = r.grp * a.hpg + hi;
    r.nh = (int)min((int64_t)(a.hpg - hi), uend - u);
    return r;
}

/* Row of initial_states a sequence starting at chunk c begins from (-1: zeros).
 * With cu_seqlens every sequence has its own row; otherwise only the row's
 * first sequence (which starts at chunk 0) starts from initial_states[b]. */
static __device__ __forceinline__ int64_t ssd_init_row(const ssd_fwd_args &a, int b, int c,
                                                       int seq) {
    if (!a.has_init) return -1;
    if (a.varlen == 2) return seq;
    return c == 0 ? b : -1;
}

/* A P x N f32 matrix (element (p, n) at base[p * sp + n * sn]) to / from the
 * accumulator layout of a warp tile of 16 rows (prow0..) x NT8 * 8 columns. */
template <int NT8>
static __device__ __forceinline__ void ssd_acc_load(float R[][4], const float *base, int64_t sp,
                                                    int64_t sn, int prow0, int ncol0, int P,
                                                    int N) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
#pragma unroll
    for (int nt = 0; nt < NT8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int p = prow0 + g + (e >> 1) * 8, n = ncol0 + nt * 8 + 2 * t + (e & 1);
            R[nt][e] = (base && p < P && n < N) ? base[p * sp + n * sn] : 0.0f;
        }
}

template <int NT8>
static __device__ __forceinline__ void ssd_acc_store(const float R[][4], float *base, int64_t sp,
                                                     int64_t sn, int prow0, int ncol0, int P,
                                                     int N) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
#pragma unroll
    for (int nt = 0; nt < NT8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int p = prow0 + g + (e >> 1) * 8, n = ncol0 + nt * 8 + 2 * t + (e & 1);
            if (p < P && n < N) base[p * sp + n * sn] = R[nt][e];
        }
}

/* Same, to a row-major P x N tile of T (unit column stride, row stride N);
 * column pairs go out as one 4- or 8-byte store when N is even. */
template <typename T, int NT8>
static __device__ __forceinline__ void ssd_acc_store_op(const float R[][4], T *base, int prow0,
                                                        int ncol0, int P, int N) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
#pragma unroll
    for (int nt = 0; nt < NT8; nt++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int p = prow0 + g + u * 8, n = ncol0 + nt * 8 + 2 * t;
            if (p >= P) continue;
            T *d = base + (int64_t)p * N + n;
            const float v0 = R[nt][2 * u], v1 = R[nt][2 * u + 1];
            if ((N & 1) == 0 && n + 1 < N) {
                if constexpr (sizeof(T) == 4) {
                    *reinterpret_cast<float2 *>(d) = make_float2(v0, v1);
                } else {
                    *reinterpret_cast<uint32_t *>(d) = ssd_pack(T{}, v0, v1);
                }
            } else {
                if (n < N) d[0] = sf_elem<T>::from_f(v0);
                if (n + 1 < N) d[1] = sf_elem<T>::from_f(v1);
            }
        }
}

/* One staged sub-tile of a chunk's state product, S += X^T diag(w) B over
 * its first kv tokens: the warp's 16 P rows (wm) x 32 N columns (wn); X
 * token-major (ld LDX), B token-major (ld LDB), w the sub-tile's weights. */
template <typename T, int KT, int LDX, int LDB>
static __device__ __forceinline__ void ssd_state_subtile(float (&S)[4][4], const T *cX, const T *cB,
                                                         const float *w, int kv, int wm, int wn) {
    using M = ssd_mma<T>;
#pragma unroll 4
    for (int kk = 0; kk < KT; kk += M::K) {
        if (kk >= kv) break;
        uint32_t af[4], bf[4];
        M::load_a_t(af, cX, LDX, wm * 16, kk);
        M::scale_a(af, w + kk);
#pragma unroll
        for (int np = 0; np < 2; np++) {
            M::load_b2_t(bf, cB, LDB, wn * 32 + np * 16, kk);
            M::mma(S[2 * np], af, bf);
            M::mma(S[2 * np + 1], af, bf + 2);
        }
    }
}

/* ------------------------------------------------------------------ */
/* fwd_pass_state                                                       */
/* ------------------------------------------------------------------ */
/* Grid (flattened): state slice fastest (P / 32 x N / 64), then head, then
 * batch row.  Block 128 = 2 x 2 warps, warp tile 16 (P) x 32 (N) held in
 * registers across all chunks: S_c = X^T diag(w) B on tensor cores (A = X^T
 * from a token-major tile, scaled by w per k column in registers; B = raw B
 * rows), H_{c+1} = exp2(g'_last) H_c + S_c.  The chunk is consumed in
 * sub-tiles of KT tokens over the flat sequence of (chunk, sub-tile), three
 * cp.async stages deep; the next chunk's dt / g' / sequence ids are loaded
 * into registers a chunk ahead.  The chain of sub-tiles is sequential per
 * block, so what bounds this kernel is load latency, not arithmetic.
 * Measured (H200, 2.7B shape b8 L4096 bf16): whole forward 5.1 ms with
 * synchronous staging, 4.5 ms with two stages, 3.75 ms with three stages and
 * the other changes below; this kernel alone 745 us (ncu), ~1.8 us per
 * sub-tile per block: latency-bound. */
template <typename T>
__global__ void __launch_bounds__(128) ssd_state_pass(const ssd_fwd_args a) {
    constexpr int PS = 32, NS = 64, KT = sizeof(T) == 2 ? 64 : 32, ST = 3;
    constexpr int LDX = PS + ssd_pad<T>::KMAJ, LDB = NS + ssd_pad<T>::KMAJ;
    __shared__ __align__(16) T sX[ST][KT * LDX];
    __shared__ __align__(16) T sB[ST][KT * LDB];
    __shared__ __align__(16) float sg[256], sdt[256], sw[256];
    __shared__ int sseq[256];

    const int npsl = (a.P + PS - 1) / PS, nnsl = (a.N + NS - 1) / NS;
    int64_t id = blockIdx.x;
    const int sl = (int)(id % (npsl * nnsl));
    id /= npsl * nnsl;
    const int h = (int)(id % a.H);
    const int b = (int)(id / a.H);
    const int p0 = (sl / nnsl) * PS, n0 = (sl % nnsl) * NS;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int wm = warp & 1, wn = warp >> 1;
    const int prow0 = p0 + wm * 16, ncol0 = n0 + wn * 32;
    const T *xb = (const T *)a.x + (int64_t)b * a.xs[0] + (int64_t)h * a.xs[2] + p0;
    const T *Bb = (const T *)a.B + (int64_t)b * a.Bs[0] + (int64_t)(h / a.hpg) * a.Bs[2] + n0;
    const int64_t bh = (int64_t)b * a.H + h;
    const int64_t PN = (int64_t)a.P * a.N;
    const int pv = min(PS, a.P - p0), nv = min(NS, a.N - n0);
    const int spc = a.Q / KT; /* sub-tiles per full chunk */
    const int Llast = (int)(a.L - (int64_t)(a.nc - 1) * a.Q);
    const int nit = (a.nc - 1) * spc + (Llast + KT - 1) / KT; /* all sub-tiles */

    /* flat sub-tile `it` -> buffer it % ST; always one (maybe empty) group */
    auto issue = [&](int it) {
        if (it < nit) {
            const int c = it / spc, k0 = (it - c * spc) * KT;
            const int64_t tok = (int64_t)c * a.Q + k0;
            const int kv = (int)min((int64_t)KT, min((int64_t)a.Q - k0, a.L - tok));
            ssd_stage_async<T, 128>(sX[it % ST], LDX, xb + tok * a.xs[1], a.xs[1], KT, PS, kv,
                                    pv, a.vec_x);
            ssd_stage_async<T, 128>(sB[it % ST], LDB, Bb + tok * a.Bs[1], a.Bs[1], KT, NS, kv,
                                    nv, a.vec_B);
        }
        sf_cp_async_commit();
    };
    /* per-chunk vectors, Q <= 256 so two per thread */
    float pg[2], pd[2];
    int ps[2];
    auto fetch_vec = [&](int c) {
        const int64_t t0 = (int64_t)c * a.Q;
        const int Lc = (int)min((int64_t)a.Q, a.L - t0);
        const float *gwc = a.gw + (bh * a.nc + c) * a.Q, *dtc = a.dtw + (bh * a.nc + c) * a.Q;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int i = tid + 128 * u;
            pg[u] = i < a.Q ? gwc[i] : 0.0f;
            pd[u] = i < a.Q ? dtc[i] : 0.0f;
            ps[u] = (a.varlen && i < Lc) ? a.seqid[(int64_t)b * a.L + t0 + i] : -1;
        }
    };

    float R[4][4];
    {
        const int64_t row = a.varlen == 2 ? -1 : ssd_init_row(a, b, 0, 0);
        ssd_acc_load<4>(R, row < 0 ? nullptr : a.init + row * a.ins[0] + h * a.ins[1], a.ins[2],
                        a.ins[3], prow0, ncol0, a.P, a.N);
    }
    for (int u = 0; u < ST - 1; u++) issue(u);
    if (a.nc > 0) fetch_vec(0);
    int it = 0, prev_last = 0;
    for (int c = 0; c < a.nc; c++) {
        const int64_t t0 = (int64_t)c * a.Q;
        const int Lc = (int)min((int64_t)a.Q, a.L - t0);
        __syncthreads(); /* the previous chunk's readers of the shared vectors are done */
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int i = tid + 128 * u;
            if (i < a.Q) {
                sg[i] = pg[u];
                sdt[i] = pd[u];
                sseq[i] = ps[u];
            }
        }
        __syncthreads();
        if (c + 1 < a.nc) fetch_vec(c + 1); /* in flight during this chunk */
        const int sfirst = a.varlen ? sseq[0] : 0, slast = a.varlen ? sseq[Lc - 1] : 0;
        const float glast = sg[Lc - 1];
        for (int i = tid; i < a.Q; i += 128)
            sw[i] = (i < Lc && (!a.varlen || sseq[i] == slast))
                        ? exp2f(fminf(glast - sg[i], 0.0f)) * sdt[i]
                        : 0.0f;
        /* the state entering this chunk for its first sequence */
        if (c == 0 || (a.varlen && sfirst != prev_last)) {
            const int64_t row = ssd_init_row(a, b, c, sfirst);
            ssd_acc_load<4>(R, row < 0 ? nullptr : a.init + row * a.ins[0] + h * a.ins[1],
                            a.ins[2], a.ins[3], prow0, ncol0, a.P, a.N);
        }
        prev_last = slast;
        ssd_acc_store_op<T, 4>(R, (T *)a.states + (bh * a.nc + c) * PN, prow0, ncol0, a.P, a.N);
        if (a.states32)
            ssd_acc_store<4>(R, a.states32 + (bh * a.nc + c) * PN, a.N, 1, prow0, ncol0, a.P,
                             a.N);

        float S[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[nt][e] = 0.0f;
        for (int k0 = 0; k0 < Lc; k0 += KT, it++) {
            issue(it + ST - 1);
            sf_cp_async_wait<ST - 1>();
            __syncthreads(); /* sub-tile `it` (and sw) visible to all warps */
            const T *cX = sX[it % ST], *cB = sB[it % ST];
            const int kv = min(KT, Lc - k0);
            ssd_state_subtile<T, KT, LDX, LDB>(S, cX, cB, sw + k0, kv, wm, wn);
            __syncthreads(); /* buffer it % ST free for sub-tile it + ST */
        }
        /* a last sequence that started inside the chunk does not continue H_c */
        if (a.varlen && slast != sfirst) {
            const int64_t row = a.varlen == 2 ? ssd_init_row(a, b, c, slast) : -1;
            ssd_acc_load<4>(R, row < 0 ? nullptr : a.init + row * a.ins[0] + h * a.ins[1],
                            a.ins[2], a.ins[3], prow0, ncol0, a.P, a.N);
        }
        const float dec = exp2f(fminf(glast, 0.0f));
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) R[nt][e] = fmaf(dec, R[nt][e], S[nt][e]);
    }
    sf_cp_async_wait<0>();
    if (a.has_final && a.varlen != 2)
        ssd_acc_store<4>(R, a.fin + (int64_t)b * a.fis[0] + h * a.fis[1], a.fis[2], a.fis[3],
                         prow0, ncol0, a.P, a.N);
}

/* ------------------------------------------------------------------ */
/* chunk states alone (the split path: then ssd_state_scan)             */
/* ------------------------------------------------------------------ */
/* S_c = X_c^T diag(w) B_c for every chunk at once, w_j = exp2(g'_last -
 * g'_j) dt_j, in f32 to `cst` (P x N per (b, h, c)); the scan over chunks
 * is ssd_state_scan's.  ssd_state_pass walks the chunks of a (b, h, state
 * slice) in order with the state on chip, so its parallelism is batch x
 * heads x slices (2.7B f32 b8 L4096: 1.50 ms, latency-bound); here every
 * chunk is a block of its own.  Dense batches only (a chunk's tokens are
 * one sequence).  Grid (flattened): state slice fastest (P / 32 x N / 64),
 * then head, chunk, batch row.  Block 128 = 2 x 2 warps of 16 (P) x 32 (N),
 * the same tiles and three-stage cp.async staging as ssd_state_pass. */
template <typename T>
__global__ void __launch_bounds__(128) ssd_chunk_state_mma(const ssd_fwd_args a, float *cst) {
    constexpr int PS = 32, NS = 64, KT = sizeof(T) == 2 ? 64 : 32, ST = 3;
    constexpr int LDX = PS + ssd_pad<T>::KMAJ, LDB = NS + ssd_pad<T>::KMAJ;
    __shared__ __align__(16) T sX[ST][KT * LDX];
    __shared__ __align__(16) T sB[ST][KT * LDB];
    __shared__ __align__(16) float sw[256];

    const int npsl = (a.P + PS - 1) / PS, nnsl = (a.N + NS - 1) / NS;
    int64_t id = blockIdx.x;
    const int sl = (int)(id % (npsl * nnsl));
    id /= npsl * nnsl;
    const int h = (int)(id % a.H);
    id /= a.H;
    const int c = (int)(id % a.nc);
    const int b = (int)(id / a.nc);
    const int p0 = (sl / nnsl) * PS, n0 = (sl % nnsl) * NS;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int wm = warp & 1, wn = warp >> 1;
    const int prow0 = p0 + wm * 16, ncol0 = n0 + wn * 32;
    const int64_t t0 = (int64_t)c * a.Q, bh = (int64_t)b * a.H + h;
    const int Lc = (int)min((int64_t)a.Q, a.L - t0);
    const T *xb = (const T *)a.x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
    const T *Bb = (const T *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] +
                  (int64_t)(h / a.hpg) * a.Bs[2] + n0;
    const int pv = min(PS, a.P - p0), nv = min(NS, a.N - n0);
    const int nit = (Lc + KT - 1) / KT;

    /* sub-tile `it` -> buffer it % ST; always one (maybe empty) group */
    auto issue = [&](int it) {
        if (it < nit) {
            const int k0 = it * KT, kv = min(KT, Lc - k0);
            ssd_stage_async<T, 128>(sX[it % ST], LDX, xb + (int64_t)k0 * a.xs[1], a.xs[1], KT, PS, kv,
                                    pv, a.vec_x);
            ssd_stage_async<T, 128>(sB[it % ST], LDB, Bb + (int64_t)k0 * a.Bs[1], a.Bs[1], KT, NS, kv,
                                    nv, a.vec_B);
        }
        sf_cp_async_commit();
    };
    for (int u = 0; u < ST - 1; u++) issue(u);
    const float *gwc = a.gw + (bh * a.nc + c) * a.Q, *dtc = a.dtw + (bh * a.nc + c) * a.Q;
    const float glast = gwc[Lc - 1];
    for (int i = tid; i < a.Q; i += 128)
        sw[i] = i < Lc ? exp2f(fminf(glast - gwc[i], 0.0f)) * dtc[i] : 0.0f;

    float S[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) S[nt][e] = 0.0f;
    for (int it = 0; it < nit; it++) {
        issue(it + ST - 1);
        sf_cp_async_wait<ST - 1>();
        __syncthreads(); /* sub-tile `it` (and sw) visible to all warps */
        const T *cX = sX[it % ST], *cB = sB[it % ST];
        const int k0 = it * KT, kv = min(KT, Lc - k0);
        ssd_state_subtile<T, KT, LDX, LDB>(S, cX, cB, sw + k0, kv, wm, wn);
        __syncthreads(); /* buffer it % ST free for sub-tile it + ST */
    }
    sf_cp_async_wait<0>();
    ssd_acc_store<4>(S, cst + (bh * a.nc + c) * (int64_t)a.P * a.N, a.N, 1, prow0, ncol0, a.P, a.N);
}

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
 * Measured (H200, b8 L4096 H80 P64 N128 Q256, ncu): bf16 2.91 ms, f32 6.88 ms:
 * far from the tensor-core bound (~0.3 ms); the warp tile 16 x 64 reloads
 * C fragments and B tiles per warp (shared-memory bound) and 4-warp blocks
 * hide little latency.  16-bit inputs with N <= 128 now take ssd_chunk_out16
 * (ssd_out16.cuh: C fragments in registers, paired row tiles), measured
 * 2.86 ms: see there for why that did not help and what comes next. */
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
