/* common.cuh - device helpers shared by the SSD kernels of every stage:
 * block indexing, the initial-state row of a chunk, P x N accumulator loads
 * and stores, the staged sub-tile of a state product (mma.sync), and the
 * programmatic-launch waits of the sm_90a path.
 *
 * Workspace the stages share (ssd_fwd_args):
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
#ifndef SF_SSD_COMMON_CUH
#define SF_SSD_COMMON_CUH

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

/* A run of heads of the sm_90a output kernel: heads h_begin .. h_begin +
 * nh - 1 of one (group, P tile, chunk, batch row) (nh <= 0: none). */
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

/* Programmatic dependent launch (the sm_90a path launches the kernels after
 * the cumsum with it): wait until the previous kernel of the stream has
 * finished and its writes are visible.  A no-op for a normal launch and
 * before sm_90. */
static __device__ __forceinline__ void ssd_griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
/* Lets the next kernel of the stream, launched with programmatic
 * serialisation, start now (it must not read this kernel's output before its
 * own ssd_griddep_wait). */
static __device__ __forceinline__ void ssd_griddep_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

#endif
