/* bwd_common.cuh - device helpers of the CUDA SSD backward's stages:
 * loads and stores in a tensor's dtype, dt processing, the (sequence, head)
 * task of an index, seq_idx resets, the shared-memory layout of the stages
 * that walk tokens backwards.
 *
 * Thread (warp w, lane l) of SSD_BWD_THREADS owns the state elements (p, n)
 * with p = w (mod 8), n = l (mod 32) in every stage, so state and adjoint
 * updates need no barrier; the per-token reductions go through shared
 * memory in a fixed order (warp butterflies, then warps in order), which
 * makes every output bit-identical from run to run.  N <= 256. */
#ifndef SF_SSD_BWD_COMMON_CUH
#define SF_SSD_BWD_COMMON_CUH

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

/* processed dt, as sf_dt_process */
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

/* Task k: sequence s (a batch row, or a cu_seqlens sequence) and head h,
 * tokens [start, end) of row b. */
struct bwd_task {
    int b, s, h, g;
    int64_t start, end;
    float A, bias;
    int64_t xo, Bo, dto; /* offsets of (b, ., h) in x, (b, ., g) in B, (b, ., h) in dt */
};

static __device__ __forceinline__ bwd_task bwd_task_of(const ssd_bwd_args &a, int k) {
    bwd_task t;
    t.s = k / a.H;
    t.h = k % a.H;
    t.g = t.h / a.hpg;
    if (a.varlen == 2) {
        t.b = 0;
        t.start = a.cu64 ? ((const int64_t *)a.cu)[t.s * a.cus] : ((const int *)a.cu)[t.s * a.cus];
        t.end = a.cu64 ? ((const int64_t *)a.cu)[(t.s + 1) * a.cus] : ((const int *)a.cu)[(t.s + 1) * a.cus];
    } else {
        t.b = t.s;
        t.start = 0;
        t.end = a.L;
    }
    t.A = a.A[t.h * a.As];
    t.bias = a.has_bias ? a.dt_bias[t.h * a.biass] : 0.0f;
    t.xo = (int64_t)t.b * a.xs[0] + (int64_t)t.h * a.xs[2];
    t.Bo = (int64_t)t.b * a.Bs[0] + (int64_t)t.g * a.Bs[2];
    t.dto = (int64_t)t.b * a.dts[0] + (int64_t)t.h * a.dts[2];
    return t;
}

/* token t starts a new sequence inside the task's row (seq_idx changes) */
static __device__ __forceinline__ bool bwd_reset(const ssd_bwd_args &a, const bwd_task &k, int64_t t) {
    return a.varlen == 1 && t > k.start &&
           a.seq_idx[k.b * a.sis[0] + t * a.sis[1]] != a.seq_idx[k.b * a.sis[0] + (t - 1) * a.sis[1]];
}

/* dt and decay of token t: dec is 0 where t starts a sequence (nothing
 * flows in from t - 1) */
static __device__ __forceinline__ void bwd_decay(const ssd_bwd_args &a, const bwd_task &k, int64_t t, float *dtv,
                                                 float *dec) {
    *dtv = bwd_dt(a, bwd_ld(a.dt, a.dtdt, k.dto + t * a.dts[1]), k.bias);
    const float e = *dtv * k.A;
    *dec = bwd_reset(a, k, t) ? 0.0f : expf(e < 0.0f ? e : 0.0f);
}

/* the forward's dy -> the state's: dout silu(z) (dout without z) */
static __device__ __forceinline__ float bwd_dy(const ssd_bwd_args &a, const bwd_task &k, int64_t t, int p) {
    float dy = bwd_ld(a.dout, a.xdt, (int64_t)k.b * a.dos[0] + (int64_t)k.h * a.dos[2] + t * a.dos[1] + p);
    if (a.has_z) {
        const float zv = bwd_ld(a.z, a.xdt, (int64_t)k.b * a.zs[0] + (int64_t)k.h * a.zs[2] + t * a.zs[1] + p);
        dy *= zv / (1.0f + expf(-zv));
    }
    return dy;
}

/* Shared memory of the stages that walk tokens backwards. */
struct bwd_smem {
    float *G;            /* P x N adjoint                   */
    float *sB, *sC;      /* this token's B, C rows (N)      */
    float *sx, *sdy, *sgb, *sdD; /* x, dy, G B, running dD (P) */
    float *colB, *colC;  /* warps' column sums (8 x N)      */
    float *red;          /* warps' sums of <G, h_{t-1}> (8) */
};

static __host__ __device__ inline size_t bwd_smem_floats(int P, int N) {
    const size_t f = (size_t)P * N + 2 * (size_t)N + 4 * (size_t)P + 2 * SSD_BWD_WARPS * (size_t)N + SSD_BWD_WARPS;
    return (f + 3) / 4 * 4; /* what follows starts 16-byte aligned */
}
static __host__ __device__ inline size_t bwd_smem_bytes(int P, int N) { return sizeof(float) * bwd_smem_floats(P, N); }

static __device__ __forceinline__ bwd_smem bwd_smem_of(float *sm, int P, int N) {
    bwd_smem s;
    s.G = sm;
    s.sB = s.G + (int64_t)P * N;
    s.sC = s.sB + N;
    s.sx = s.sC + N;
    s.sdy = s.sx + P;
    s.sgb = s.sdy + P;
    s.sdD = s.sgb + P;
    s.colB = s.sdD + P;
    s.colC = s.colB + SSD_BWD_WARPS * N;
    s.red = s.colC + SSD_BWD_WARPS * N;
    return s;
}

#endif
