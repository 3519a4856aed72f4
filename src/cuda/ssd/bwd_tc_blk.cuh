/* bwd_tc_blk.cuh - a 64-token block of the SSD backward's tc
 * configuration: its place (item, chunk, tokens), the CTA's place in the
 * block-pair, rows and cols grids, and the staging of its tiles (B, C, x,
 * gy, dout / z, the states, cum / dt rows) into shared memory, by cp.async
 * where the data is raw 16-bit. */
#ifndef SF_SSD_BWD_TC_BLK_CUH
#define SF_SSD_BWD_TC_BLK_CUH

#include "ssd/bwd_tc_common.cuh"

/* The block's place: item (task, chunk), tokens [t0, t0 + valid) of the
 * chunk's block blk (chunk start c0). */
struct tc_blk {
    bwd_task k;
    int64_t item, c0;
};
static __device__ __forceinline__ tc_blk tc_blk_of(const ssd_bwd_args &a, int64_t item) {
    tc_blk b;
    b.item = item;
    const int it = (int)item; /* items x blocks < 2^31 (bwd.cu checks) */
    b.k = bwd_task_of(a, it / a.nck);
    b.c0 = b.k.start + (int64_t)(it % a.nck) * a.Q;
    return b;
}
/* The same chunk of the next head (of the same group, no varlen): what
 * bwd_task_of would give, without its divisions. */
static __device__ __forceinline__ tc_blk tc_blk_next(const ssd_bwd_args &a, tc_blk b) {
    b.item += a.nck;
    b.k.h += 1;
    b.k.A = a.A[b.k.h * a.As];
    b.k.bias = a.has_bias ? a.dt_bias[b.k.h * a.biass] : 0.0f;
    b.k.xo += a.xs[2];
    b.k.dto += a.dts[2];
    return b;
}
static __device__ __forceinline__ int tc_valid(const tc_blk &b, int blk) {
    const int64_t v = b.k.end - (b.c0 + (int64_t)blk * TC_BT);
    return v <= 0 ? 0 : v < TC_BT ? (int)v : TC_BT;
}

/* The block's second tile: x, or gy as the chunk-state kernel left it
 * (tgy). */
enum class TcXG { x, gy_ws };

/* Stages the 64-token block's B or C rows (the group's: the same for every
 * head of the CTA). */
template <typename T>
static __device__ __forceinline__ void tc_stage_bc(const ssd_bwd_args &a, int N, const tc_blk &b, int blk, T *sBC,
                                                   const void *BC, const int64_t *st) {
    const int valid = tc_valid(b, blk);
    const int64_t t0 = b.c0 + (int64_t)blk * TC_BT;
    const int64_t bco = (int64_t)b.k.b * st[0] + (int64_t)b.k.g * st[2];
    ssd_stage_async<T, SSD_BWD_THREADS>(sBC, N + 8, (const T *)BC + bco + t0 * st[1], st[1], TC_BT, N, valid, N,
                                        a.tvec);
}

/* Stages the 64-token block's x or gy rows (the head's). */
template <typename T>
static __device__ __forceinline__ void tc_stage_xg(const ssd_bwd_args &a, int P, const tc_blk &b, int blk, T *sXG,
                                                   TcXG xg) {
    const int valid = tc_valid(b, blk);
    const int64_t t0 = b.c0 + (int64_t)blk * TC_BT;
    const bool vec = a.tvec;
    if (xg == TcXG::gy_ws)
        ssd_stage_async<T, SSD_BWD_THREADS>(sXG, P + 8, (const T *)a.tgy + (b.item * a.Q + (int64_t)blk * TC_BT) * P,
                                            P, TC_BT, P, valid, P, true);
    else
        ssd_stage_async<T, SSD_BWD_THREADS>(sXG, P + 8, (const T *)a.x + b.k.xo + t0 * a.xs[1], a.xs[1], TC_BT, P,
                                            valid, P, vec);
}

/* dout and z (with z) of the 64-token block at t0 (valid rows) into the
 * T tiles sD, sZ (ld TC_LDT, so P <= 64), by cp.async. */
template <typename T>
static __device__ __forceinline__ void tc_stage_dz(const ssd_bwd_args &a, int P, const tc_blk &b, int64_t t0, int valid,
                                                   T *sD, T *sZ) {
    const int64_t h = b.k.h;
    ssd_stage_async<T, SSD_BWD_THREADS>(sD, TC_LDT, (const T *)a.dout + b.k.b * a.dos[0] + h * a.dos[2] + t0 * a.dos[1],
                                        a.dos[1], TC_BT, P, valid, P, a.tvec);
    if (a.has_z)
        ssd_stage_async<T, SSD_BWD_THREADS>(sZ, TC_LDT, (const T *)a.z + b.k.b * a.zs[0] + h * a.zs[2] + t0 * a.zs[1],
                                            a.zs[1], TC_BT, P, valid, P, a.tvec);
}

/* Waits for the thread's own cp.async copies of the tc_stage_* calls
 * before it (the barrier after it makes every thread's visible). */
static __device__ __forceinline__ void tc_stage_wait() {
    sf_cp_async_commit();
    sf_cp_async_wait<0>();
}

/* The CTA's place in the rows / cols grids: (batch, head group of a.hk
 * heads, chunk) times the chunk's blocks; the item of its head j. */
struct tc_cta {
    int64_t gi; /* (batch, head group, chunk) */
    int blk;
};
static __device__ __forceinline__ tc_cta tc_cta_of(const ssd_bwd_args &a) {
    const int nb = a.Q / TC_BT;
    return tc_cta{(int64_t)(blockIdx.x / nb), (int)(blockIdx.x % nb)};
}
static __device__ __forceinline__ int64_t tc_item(const ssd_bwd_args &a, const tc_cta &c, int j) {
    const int nhg = a.H / a.hk, gi = (int)c.gi; /* < 2^31: the grids' sizes */
    const int bh = gi / a.nck, chunk = gi % a.nck;
    const int64_t task = (int64_t)(bh / nhg) * a.H + (bh % nhg) * a.hk + j;
    return task * a.nck + chunk;
}

/* The P x N 16-bit state at src (16-byte aligned rows) as an operand
 * tile (ld N + 8). */
template <typename T>
static __device__ __forceinline__ void tc_stage_state(int P, int N, T *s, const T *src) {
    ssd_stage_async<T, SSD_BWD_THREADS>(s, N + 8, src, N, P, N, P, N, true);
}

/* cum and dt of block blk into v[0..63], v[64..127] by cp.async (the
 * workspace rows are 16-byte aligned): in the group tc_stage_wait waits for */
static __device__ __forceinline__ void tc_load_cd(const ssd_bwd_args &a, const tc_blk &b, int blk, float *v) {
    const int i = threadIdx.x, q = TC_BT / 4; /* 16-byte pieces a row */
    if (i < 2 * q) {
        const float *src = (i < q ? a.tcum : a.tdt) + b.item * a.Q + blk * TC_BT;
        sf_cp_async16(v + 4 * i, src + 4 * (i % q));
    }
}


/* The index of the causal block pair (bi, bj), bj <= bi, among a chunk's
 * a.npair pairs, and back. */
static __host__ __device__ inline int tc_pair_ix(int bi, int bj) { return bi * (bi + 1) / 2 + bj; }
static __device__ __forceinline__ void tc_pair_of(int pp, int &bi, int &bj) {
    bi = 0;
    while ((bi + 1) * (bi + 2) / 2 <= pp) bi++;
    bj = pp - bi * (bi + 1) / 2;
}

/* The chunk's f32 CB tiles (pairs kernel) of the block's group. */
static __device__ __forceinline__ const float *tc_cb_tiles(const ssd_bwd_args &a, const tc_blk &b) {
    const int64_t bcg = ((int64_t)b.k.b * a.nck + b.item % a.nck) * a.G + b.k.g;
    return a.tcb + bcg * a.npair * (int64_t)(TC_BT * TC_BT);
}

#endif
