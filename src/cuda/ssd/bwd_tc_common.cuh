/* bwd_tc_common.cuh - building blocks of the SSD backward's tensor-core
 * configuration ("tc", bwd_tc_state.cuh and bwd_tc_chunk.cuh): the
 * workspace and shared-memory layouts, tile staging from global memory
 * (with an elementwise transform: the gate, a per-row weight) into 16-bit
 * operand tiles, and a block GEMM over shared tiles on mma.sync m16n8k16
 * (f32 accumulation) whose epilogue sees every accumulator element once.
 *
 * The "tc" path serves 16-bit x, B, C, dout, z of one dtype, headdim and
 * dstate multiples of 16, chunk a multiple of 64 up to 256, no varlen;
 * bwd_configs.h's supports() says so for the rest. */
#ifndef SF_SSD_BWD_TC_COMMON_CUH
#define SF_SSD_BWD_TC_COMMON_CUH

#include "ssd/bwd_common.cuh"
#include "ssd/mma.cuh"

#define TC_BT 64         /* tokens a block of the chunk's Q x Q products */
#define TC_LDT (TC_BT + 8) /* leading dimension of the 64 x 64 operand tiles */
#define TC_HK 16 /* most heads a pairs / rows / cols CTA walks (bwd.cu picks; 16 beat 8 by 1.4-2.6% on the H100) */

/* Shared memory of the per-block kernels (rows and cols), in bytes; one
 * layout serves both.  T tiles (16-bit): the fixed 64 x N tile (C_i in
 * rows, B_j in cols) at oC; at oV the P x N state (max(64, P) rows), then
 * the products' B_j / C_i; x_j and gy_i (64 x P), the two 64 x 64 tiles
 * (W sums, M; in the pair loop the first is the second buffer of x_j or
 * gy_i, so at least 64 x (P + 8)); f32: the 64 x N accumulator (the 64 x
 * P one lives in registers: tc_gemm_acc), row and column partials, cum and
 * dt rows (three blocks: one fixed, two alternating). */
struct tc_blk_smem {
    size_t oC, oV, oG, oX, oW, oM, oaN, oq, ov, or_, oc, total;
};
static __host__ __device__ inline tc_blk_smem tc_blk_layout(int P, int N) {
    tc_blk_smem s;
    const size_t ldN = (size_t)N + 8, ldP = (size_t)P + 8, t = 2; /* sizeof 16-bit */
    size_t o = 0;
    s.oC = o; o += TC_BT * ldN * t;
    s.oV = o; o += (P > TC_BT ? (size_t)P : TC_BT) * ldN * t;
    s.oG = o; o += TC_BT * ldP * t;
    s.oX = o; o += TC_BT * ldP * t;
    s.oW = o; o += TC_BT * (ldP > TC_LDT ? ldP : TC_LDT) * t;
    s.oM = o; o += TC_BT * TC_LDT * t;
    s.oaN = o; o += TC_BT * ((size_t)N + 8) * 4; /* leading dimension N + 8 */
    s.oq = o; o += TC_BT * ((size_t)N / 16) * 4; /* 64 x (N / 16) partials  */
    s.ov = o; o += 6 * TC_BT * 4;              /* cum, dt of i, j and the next pair's */
    s.or_ = o; o += TC_BT * ((size_t)P / 16) * 4; /* 64 x (P / 16) partials */
    s.oc = o; o += 4 * (size_t)P * 4;           /* 4 row tiles x P partials */
    s.total = o;
    return s;
}

/* Shared memory of the chunk-state kernel: a Q x P and a Q x N tile. */
static __host__ __device__ inline size_t tc_state_smem(int P, int N, int Q) {
    return (size_t)Q * ((size_t)P + 8 + (size_t)N + 8) * 2 + (size_t)Q * 4;
}

/* 8 consecutive elements of a 16-bit tensor as floats (vec: 16-byte
 * aligned, one load). */
template <typename T>
static __device__ __forceinline__ void tc_ld8(float f[8], const T *g, bool vec) {
    if (vec) {
        ssd_vec<T>::load(f, g);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) f[k] = sf_elem<T>::to_f(g[k]);
    }
}

/* Fills the rows x cols operand tile s (leading dimension ld) from
 * fv(r, c, f[8]), which writes elements (r, c .. c + 7) as floats; rows
 * >= valid are zero.  cols % 8 == 0.  Each thread first gathers TC_U
 * vectors (their loads in flight together), then stores them. */
#define TC_U 4
template <typename T, typename FV>
static __device__ __forceinline__ void tc_stage(T *s, int ld, int rows, int cols, int valid, FV fv) {
    const int vpr = cols >> 3, total = rows * vpr;
    for (int base = threadIdx.x; base < total; base += SSD_BWD_THREADS * TC_U) {
        float f[TC_U][8];
#pragma unroll
        for (int u = 0; u < TC_U; u++) {
            const int idx = base + u * SSD_BWD_THREADS;
            const int r = idx / vpr, c = (idx - r * vpr) * 8;
            if (idx < total && r < valid) {
                fv(r, c, f[u]);
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) f[u][k] = 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < TC_U; u++) {
            const int idx = base + u * SSD_BWD_THREADS;
            const int r = idx / vpr, c = (idx - r * vpr) * 8;
            if (idx < total) ssd_st_smem<T, 8>(s + r * ld + c, f[u], 1.0f);
        }
    }
}

/* The warp's index, which the compiler then knows is below SSD_BWD_WARPS
 * (the CTA's size): with constant shapes every tile test is resolved at
 * compile time. */
static __device__ __forceinline__ int tc_warp() { return (threadIdx.x >> 5) & (SSD_BWD_WARPS - 1); }

/* Block GEMM: out (M x Nn) = sum over K of A (M x K) B (K x Nn), all
 * multiples of 16.  fa(a, m0, k0) loads the A fragment of rows m0.., fb(b,
 * n0, k0) the two B fragments of columns n0 .. n0 + 15; each warp takes 16
 * x 16 tiles (up to 4 at once) and hands each finished one to fe(m0, n0,
 * acc): acc[nt][i] is row m0 + g + 8 (i >> 1), column n0 + 8 nt + 2 t +
 * (i & 1) (g = lane / 4, t = lane % 4).  Every lane of the warp calls fe
 * (it may shuffle). */
template <typename T, typename FA, typename FB, typename FE>
static __device__ __forceinline__ void tc_gemm(int M, int Nn, int K, FA fa, FB fb, FE fe) {
    using F = ssd_mma<T>;
    const int w = tc_warp();
    const int tn = Nn >> 4, tiles = (M >> 4) * tn;
    for (int base = 0; base < tiles; base += 4 * SSD_BWD_WARPS) {
        float acc[4][2][4];
        int m0[4], n0[4];
        bool on[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int tile = base + w + j * SSD_BWD_WARPS;
            on[j] = tile < tiles;
            m0[j] = (tile / tn) << 4;
            n0[j] = (tile % tn) << 4;
#pragma unroll
            for (int i = 0; i < 4; i++) acc[j][0][i] = acc[j][1][i] = 0.0f;
        }
#pragma unroll
        for (int k0 = 0; k0 < K; k0 += 16) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (!on[j]) continue; /* warp-uniform */
                uint32_t a[4], b[4];
                fa(a, m0[j], k0);
                fb(b, n0[j], k0);
                F::mma(acc[j][0], a, b);
                F::mma(acc[j][1], a, b + 2);
            }
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (on[j]) fe(m0[j], n0[j], acc[j]);
    }
}

/* Two block GEMMs with one output tiling (64 x 64 here: 2 tiles a warp),
 * acc1 = A1 B1 over K1 and acc2 = A2 B2 over K2, handed together to
 * fe(m0, n0, acc1, acc2). */
template <typename T, typename FA1, typename FB1, typename FA2, typename FB2, typename FE>
static __device__ __forceinline__ void tc_gemm2(int M, int Nn, int K1, int K2, FA1 fa1, FB1 fb1, FA2 fa2, FB2 fb2,
                                                FE fe) {
    using F = ssd_mma<T>;
    const int w = tc_warp();
    const int tn = Nn >> 4, tiles = (M >> 4) * tn;
    for (int base = 0; base < tiles; base += 2 * SSD_BWD_WARPS) {
        float acc1[2][2][4], acc2[2][2][4];
        int m0[2], n0[2];
        bool on[2];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int tile = base + w + j * SSD_BWD_WARPS;
            on[j] = tile < tiles;
            m0[j] = (tile / tn) << 4;
            n0[j] = (tile % tn) << 4;
#pragma unroll
            for (int i = 0; i < 4; i++) acc1[j][0][i] = acc1[j][1][i] = acc2[j][0][i] = acc2[j][1][i] = 0.0f;
        }
#pragma unroll
        for (int k0 = 0; k0 < K1; k0 += 16) {
#pragma unroll
            for (int j = 0; j < 2; j++) {
                if (!on[j]) continue;
                uint32_t a[4], b[4];
                fa1(a, m0[j], k0);
                fb1(b, n0[j], k0);
                F::mma(acc1[j][0], a, b);
                F::mma(acc1[j][1], a, b + 2);
            }
        }
#pragma unroll
        for (int k0 = 0; k0 < K2; k0 += 16) {
#pragma unroll
            for (int j = 0; j < 2; j++) {
                if (!on[j]) continue;
                uint32_t a[4], b[4];
                fa2(a, m0[j], k0);
                fb2(b, n0[j], k0);
                F::mma(acc2[j][0], a, b);
                F::mma(acc2[j][1], a, b + 2);
            }
        }
#pragma unroll
        for (int j = 0; j < 2; j++)
            if (on[j]) fe(m0[j], n0[j], acc1[j], acc2[j]);
    }
}

/* A 64 x Nn (Nn <= 128) output accumulated in registers across calls:
 * warp w owns the 16 x 16 tiles w + 8 j (j < 4) of the row-major tile
 * order (Nn / 16 a row), acc[j] as tc_gemm hands them to its epilogue. */
template <typename T, typename FA, typename FB>
static __device__ __forceinline__ void tc_gemm_acc(int Nn, int K, FA fa, FB fb, float (*acc)[2][4]) {
    using F = ssd_mma<T>;
    const int w = tc_warp(), tn = Nn >> 4, tiles = 4 * tn;
    int m0[4], n0[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int tile = w + j * SSD_BWD_WARPS;
        m0[j] = (tile / tn) << 4;
        n0[j] = (tile % tn) << 4;
    }
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += 16) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (w + j * SSD_BWD_WARPS >= tiles) continue; /* warp-uniform */
            uint32_t a[4], b[4];
            fa(a, m0[j], k0);
            fb(b, n0[j], k0);
            F::mma(acc[j][0], a, b);
            F::mma(acc[j][1], a, b + 2);
        }
    }
}

/* f(j, m0, n0) for each of the warp's tiles j of a 64 x Nn tc_gemm_acc
 * accumulator (at rows m0, columns n0). */
template <typename FT>
static __device__ __forceinline__ void tc_acc_tiles(int Nn, FT f) {
    const int w = tc_warp(), tn = Nn >> 4;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int tile = w + j * SSD_BWD_WARPS;
        if (tile >= 4 * tn) continue; /* warp-uniform */
        f(j, (tile / tn) << 4, (tile % tn) << 4);
    }
}

/* tc_gemm_acc with the product's row m scaled by s[m] (f32, after the
 * products: the 16-bit operands stay as they are). */
template <typename T, typename FA, typename FB>
static __device__ __forceinline__ void tc_gemm_acc_rows(int Nn, int K, FA fa, FB fb, const float *s,
                                                        float (*acc)[2][4]) {
    const int g = (threadIdx.x & 31) >> 2;
    float part[4][2][4];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) part[j][0][e] = part[j][1][e] = 0.0f;
    tc_gemm_acc<T>(Nn, K, fa, fb, part);
    tc_acc_tiles(Nn, [&](int j, int m0, int) {
        const float lo = s[m0 + g], hi = s[m0 + g + 8];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            acc[j][nt][0] += lo * part[j][nt][0];
            acc[j][nt][1] += lo * part[j][nt][1];
            acc[j][nt][2] += hi * part[j][nt][2];
            acc[j][nt][3] += hi * part[j][nt][3];
        }
    });
}

/* Sum over the 4 lanes of a quad (one accumulator row), in a fixed order. */
static __device__ __forceinline__ float tc_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}
/* Sum over the 8 lanes of one accumulator column pair (same t). */
static __device__ __forceinline__ float tc_col_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    return v;
}

/* Block-wide sum of one float per thread (fixed tree: bit-identical run
 * to run); red holds SSD_BWD_WARPS floats.  Every thread gets the sum. */
static __device__ __forceinline__ float tc_block_sum(float v, float *red) {
    v = bwd_warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < SSD_BWD_WARPS; q++) s += red[q];
    return s;
}

/* Two adjacent 16-bit elements as floats: from shared memory (4-byte
 * aligned, one load) or from global memory (no alignment assumed). */
static __device__ __forceinline__ float2 tc_unpack2(__nv_bfloat16, uint32_t v) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u)); /* 2 instructions, not 3 */
}
static __device__ __forceinline__ float2 tc_unpack2(__half, uint32_t v) { return ssd_unpack(__half{}, v); }
template <typename T>
static __device__ __forceinline__ float2 tc_ld2s(const T *s) {
    return tc_unpack2(T{}, *reinterpret_cast<const uint32_t *>(s));
}
template <typename T>
static __device__ __forceinline__ float2 tc_ld2g(const T *g) {
    return make_float2(sf_elem<T>::to_f(g[0]), sf_elem<T>::to_f(g[1]));
}
/* v0, v1 to two adjacent 16-bit outputs: one 4-byte store where pair
 * (the output 4-byte aligned with even strides, bwd.cu's tpair). */
template <typename T>
static __device__ __forceinline__ void tc_st2(T *g, bool pair, float v0, float v1) {
    if (pair) {
        *reinterpret_cast<uint32_t *>(g) = ssd_pack(T{}, v0, v1);
    } else {
        g[0] = sf_elem<T>::from_f(v0);
        g[1] = sf_elem<T>::from_f(v1);
    }
}
/* D of head h at channels p, p + 1 (per channel, or the head's Dh). */
static __device__ __forceinline__ float2 tc_d2(const ssd_bwd_args &a, int h, int p, float Dh) {
    if (!(a.has_D && a.D_pc)) return make_float2(Dh, Dh);
    const float *d = a.D + h * a.Ds[0] + p * a.Ds[1];
    return make_float2(d[0], d[a.Ds[1]]);
}

/* gy = dout silu(z) (dout without z), 8 elements of token row t. */
template <typename T>
static __device__ __forceinline__ void tc_gy8(const ssd_bwd_args &a, const bwd_task &k, int64_t t, int p, bool vec,
                                              float f[8]) {
    tc_ld8<T>(f, (const T *)a.dout + (int64_t)k.b * a.dos[0] + (int64_t)k.h * a.dos[2] + t * a.dos[1] + p, vec);
    if (a.has_z) {
        float z[8];
        tc_ld8<T>(z, (const T *)a.z + (int64_t)k.b * a.zs[0] + (int64_t)k.h * a.zs[2] + t * a.zs[1] + p, vec);
#pragma unroll
        for (int i = 0; i < 8; i++) f[i] *= __fdividef(z[i], 1.0f + __expf(-z[i])); /* 0 where exp overflows */
    }
}

#endif
