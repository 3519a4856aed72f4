/* wg_common.cuh - device helpers of the sm_90a (wgmma) SSD kernels: the
 * z gate, shared-memory loads by address, the output epilogue, the state
 * tile in wgmma accumulators (init, scale, store, final), the shared-memory
 * layouts (SsdWg, SsdFu) and the staged X^T diag(w) B half-chunk product
 * that the chunk-state and fused state kernels share.
 */
#ifndef SF_SSD_WG_COMMON_CUH
#define SF_SSD_WG_COMMON_CUH

#include "ssd/common.cuh"
#include "common/wgmma.cuh"

#include <cuda.h> /* CUtensorMap (a type only) */
#include <type_traits>

/* ------------------------------------------------------------------ */
/* sm_90a kernels                                                       */
/* ------------------------------------------------------------------ */
/* z * sigmoid(z) with the SFU's exp and reciprocal (exp overflowing to inf
 * for z < -88 gives 0, as it should) */
static __device__ __forceinline__ float ssd_silu(float z) {
    return z * __fdividef(1.0f, 1.0f + sf_ex2(-z * SSD_LOG2E));
}
/* The same by one SFU instruction, z sigmoid(z) = h + h tanh(h) with h = z / 2
 * (tanh.approx: relative error about 2^-11 by the PTX ISA, so an absolute
 * error below that as |tanh| <= 1, and the gate's below |z| 2^-12: under a
 * bf16 output's rounding for moderate |z|.  bf16 outputs only: f16 keeps the
 * two-instruction form.  On the H200 it took the output kernel from 346 to
 * 308 µs at b 1 L 16384: the epilogue was bound by the SFU) */
static __device__ __forceinline__ float ssd_silu_tanh(float z) {
    const float h = 0.5f * z;
    return fmaf(h, sf_tanh_approx(h), h);
}
template <typename T>
static __device__ __forceinline__ float ssd_gate(float z) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        return ssd_silu_tanh(z);
    else
        return ssd_silu(z);
}

static __device__ __forceinline__ float ssd_ldsf(uint32_t addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
static __device__ __forceinline__ float4 ssd_ldsf4(uint32_t addr) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}
static __device__ __forceinline__ float2 ssd_ldsf2(uint32_t addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
    return v;
}
/* 32-bit load from a shared-space address */
static __device__ __forceinline__ uint32_t ssd_lds32(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

/* The rows of one thread's 64-column accumulator block (rows g and g + 8 of
 * its warp's 16) times f0 and f1: a per-row decay. */
static __device__ __forceinline__ void ssd_scale_rows(float (&O)[8][4], float f0, float f1) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        O[nt][0] *= f0;
        O[nt][1] *= f0;
        O[nt][2] *= f1;
        O[nt][3] *= f1;
    }
}

/* D of one thread's 16 output columns (p0 + 8 nt + 2 tt + e; D per column
 * or per head), 0 without D: a running pointer, no index products. */
static __device__ __forceinline__ void ssd_out_load_d(float (&dc)[8][2], const ssd_fwd_args &a, int h, int p0,
                                                      int tt) {
    const int64_t ds = a.D_pc ? a.Ds[1] : 0;
    const float *dp = a.D + (int64_t)h * a.Ds[0] + (int64_t)(p0 + 2 * tt) * ds;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        dc[nt][0] = a.has_D ? dp[0] : 0.0f;
        dc[nt][1] = a.has_D ? dp[ds] : 0.0f;
        dp += 8 * ds;
    }
}

/* z of one thread's outputs in two rows of a 64-row block (row0, row0 + 8;
 * 8 column pairs each), in flight while the products run; 0 past the
 * chunk's end or without z.  zh: the head's z at the chunk's first token and
 * the thread's first column. */
template <typename T>
static __device__ __forceinline__ void ssd_out_load_z(uint32_t (&zr)[2][8], const T *zh, int64_t zs1, int row0,
                                                      int Lc, bool hz) {
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int row = row0 + 8 * u;
        const unsigned int *zp = reinterpret_cast<const unsigned int *>(zh + (int64_t)row * zs1);
        const bool ok = hz && row < Lc;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) zr[u][nt] = ok ? __ldg(zp + 4 * nt) : 0u;
    }
}

/* The epilogue of one thread's two rows of a 64-row block: y = O + D x (x
 * from the 128-byte-swizzled shared X tile at sX), gated by silu(z), stored
 * as T.  Branch-free in has_D and has_z: dc is 0 without D and the gate
 * becomes 1 without z, so one straight-line body serves every case; the
 * shared address of column pair nt is one XOR (the swizzle's bits 4-6).
 * oh: the head's output at the chunk's first token and the thread's first
 * column. */
template <typename T>
static __device__ __forceinline__ void ssd_out_epilogue(const float (&O)[8][4], const float (&dc)[8][2],
                                                        const uint32_t (&zr)[2][8], bool hz, uint32_t sX,
                                                        int row0, int tt, int Lc, T *oh, int64_t os1) {
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int row = row0 + 8 * u;
        const uint32_t xa = sX + row * 128 + 4 * tt + ((row & 7) << 4);
        uint32_t *op = reinterpret_cast<uint32_t *>(oh + (int64_t)row * os1);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            const float2 xv = ssd_unpack(T{}, ssd_lds32(xa ^ (nt << 4)));
            const float2 zv = ssd_unpack(T{}, zr[u][nt]);
            const float s0 = hz ? ssd_gate<T>(zv.x) : 1.0f, s1 = hz ? ssd_gate<T>(zv.y) : 1.0f;
            const float y0 = fmaf(dc[nt][0], xv.x, O[nt][2 * u]) * s0;
            const float y1 = fmaf(dc[nt][1], xv.y, O[nt][2 * u + 1]) * s1;
            if (row < Lc) op[4 * nt] = ssd_pack(T{}, y0, y1);
        }
    }
}

/* The state H of a fused state pass in the m64nN accumulator layout of one
 * warpgroup (NT = N / 8 column groups of its slice from column n0): thread
 * (warp, g, t) holds rows pr = p0 + 16 warp + g and pr + 8, columns
 * n0 + 8 nt + 2 t (+ 1).  Shared by the 16-bit and the TF32 passes. */
template <int NT>
static __device__ __forceinline__ void ssd_h_init(float (&H)[NT][4], const ssd_fwd_args &a, int b, int h, int pr,
                                                  int t, bool init, int n0 = 0) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int p = pr + (e >> 1) * 8, n = n0 + 8 * nt + 2 * t + (e & 1);
            H[nt][e] = init && n < a.N
                           ? a.init[(int64_t)b * a.ins[0] + (int64_t)h * a.ins[1] + (int64_t)p * a.ins[2] +
                                    (int64_t)n * a.ins[3]]
                           : 0.0f;
        }
}
/* H's rows into a row-major (P, N) array of T at dst = row pr */
template <typename T, int NT>
static __device__ __forceinline__ void ssd_h_store(const float (&H)[NT][4], T *dst, int N, int t, int n0 = 0) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int n = n0 + 8 * nt + 2 * t;
        if (n < N) {
            if constexpr (sizeof(T) == 4) {
                *reinterpret_cast<float2 *>(dst + n) = make_float2(H[nt][0], H[nt][1]);
                *reinterpret_cast<float2 *>(dst + 8 * N + n) = make_float2(H[nt][2], H[nt][3]);
            } else {
                *reinterpret_cast<uint32_t *>(dst + n) = ssd_pack(T{}, H[nt][0], H[nt][1]);
                *reinterpret_cast<uint32_t *>(dst + 8 * N + n) = ssd_pack(T{}, H[nt][2], H[nt][3]);
            }
        }
    }
}
template <int NT> static __device__ __forceinline__ void ssd_h_scale(float (&H)[NT][4], float d) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) H[nt][e] *= d;
}
/* H as the final state (f32, any strides) */
template <int NT>
static __device__ __forceinline__ void ssd_h_final(const float (&H)[NT][4], const ssd_fwd_args &a, int b, int h,
                                                   int pr, int t, int n0 = 0) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int p = pr + (e >> 1) * 8, n = n0 + 8 * nt + 2 * t + (e & 1);
            if (n < a.N)
                a.fin[(int64_t)b * a.fis[0] + (int64_t)h * a.fis[1] + (int64_t)p * a.fis[2] + (int64_t)n * a.fis[3]] =
                    H[nt][e];
        }
}

template <int Q> struct SsdWg {
    /* chunk_state, half a chunk at a time: B (swizzled, Q/2 x 128) + X
     * (Q/2 x 72 padded) + w (Q/2 f32) */
    static constexpr int ST_LDX = 72;
    static constexpr size_t ST_SMEM = (size_t)Q * 128 + (size_t)(Q / 2) * ST_LDX * 2 + Q * 2 + 1024;
    static constexpr size_t MC_SMEM = ST_SMEM + 16; /* ssd_chunk_state_mc: two mbarriers more */
    /* output: C, B (Q x 128 each), X x 2 (Q x 64), H (64 x 128), then the
     * vectors g'[2][Q], dt[2][Q], sw[Q] */
    static constexpr int O_C = 0, O_B = Q * 256, O_X = 2 * Q * 256, O_H = O_X + 2 * Q * 128;
    static constexpr int O_V = O_H + 64 * 256;
    static constexpr size_t OUT_SMEM = (size_t)O_V + 5 * Q * 4 + 1024;
    /* output with S = C B^T from ssd_cb_wg (CBG): no B; per warpgroup two
     * 16 KB S slots (where B was at chunk 256, after the vectors at 128)
     * and their two mbarriers after the vectors */
    static constexpr int NTILE = (Q / 64) * (Q / 64 + 1) / 2; /* tiles (m, k <= m) */
    static constexpr int O_BAR = O_V + 5 * Q * 4;
    static constexpr int O_S = Q * 256 >= 4 * 16384 ? O_B : (O_BAR + 32 + 1023) & ~1023;
    static constexpr size_t CB_SMEM = (size_t)(O_S == O_B ? O_BAR + 32 : O_S + 4 * 16384) + 1024;
    /* ssd_cb_wg: C and B */
    static constexpr size_t CBK_SMEM = (size_t)Q * 512 + 1024;
};

/* fused state pass with NW state columns per block and NST stages of half a
 * chunk, each B (swizzled, Q/2 x NW) + X (Q/2 x 72 padded) + w (Q/2 f32),
 * 1024-aligned */
template <int Q, int NW, int NST> struct SsdFu {
    static constexpr int QH = Q / 2, LDX = SsdWg<Q>::ST_LDX;
    static constexpr uint32_t OX = QH * NW * 2, OW = OX + QH * LDX * 2;
    static constexpr uint32_t STAGE = (OW + QH * 4 + 1023u) & ~1023u;
    static constexpr size_t SMEM = NST * (size_t)STAGE + 1024;
};

/* A chunk-state kernel's half chunk from token j0 (lv valid, zeros past
 * the sequence's end): X rows by cp.async into the padded tile at shared
 * address sXa (one commit group), and w_j = 2^(g'_last - g'_j) dt_j into sw. */
template <int QH, int LDX, typename T>
static __device__ __forceinline__ void ssd_state_half_xw(uint32_t sXa, const T *Xg, int64_t xs1, int j0, int lv,
                                                         float *sw, float glast, const float *gwc, const float *dtc,
                                                         int tid) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma unroll
    for (int it = 0; it < QH * 8 / 128; it++) {
        const int i = tid + it * 128, r = i >> 3, cc = i & 7;
        const bool ok = r < lv;
        sf_wg::cp_async16_u32(sXa + (r * LDX + cc * 8) * 2, ok ? Xg + (int64_t)(j0 + r) * xs1 + cc * 8 : Xg,
                              ok ? 16 : 0);
    }
    sf_cp_async_commit();
    for (int j = tid; j < QH; j += 128) sw[j] = exp2f(fminf(glast - gwc[j0 + j], 0.0f)) * dtc[j0 + j];
#endif
}

/* The 16-bit A fragments of P X from the f32 accumulator S of P (m64n64) */
template <typename T>
static __device__ __forceinline__ void ssd_pack_p(uint32_t (&pa)[4][4], const float (&S)[8][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        pa[kk][0] = ssd_pack(T{}, S[2 * kk][0], S[2 * kk][1]);
        pa[kk][1] = ssd_pack(T{}, S[2 * kk][2], S[2 * kk][3]);
        pa[kk][2] = ssd_pack(T{}, S[2 * kk + 1][0], S[2 * kk + 1][1]);
        pa[kk][3] = ssd_pack(T{}, S[2 * kk + 1][2], S[2 * kk + 1][3]);
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* acc (+)= X^T diag(w) B over one staged half chunk (QH tokens): A = X^T
 * from the padded token-major tile sX (ld LDX; the warp's 16 P rows)
 * scaled by w per token, B the swizzled token-major tile at sB (NW columns);
 * waits for the product. */
template <typename T, int QH, int LDX, int NW>
static __device__ __forceinline__ void ssd_state_half_wg(float (&acc)[NW / 8][4], const T *sX, const float *sw,
                                                         uint32_t sB, int warp) {
    using namespace sf_wg;
    uint32_t af[QH / 16][4];
#pragma unroll
    for (int kk = 0; kk < QH / 16; kk++) {
        ssd_mma16<T>::load_a_t(af[kk], sX, LDX, 16 * warp, 16 * kk);
        ssd_mma<T>::scale_a(af[kk], sw + 16 * kk);
    }
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < QH / 16; kk++)
        Wg<T, NW>::rs(&acc[0][0], af[kk], wg_desc(sB + kk * 2048, QH * 128, 1024));
    wg_commit();
    wg_wait<0>();
    reg_fence(acc);
}

#endif

#endif
