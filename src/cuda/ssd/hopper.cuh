/* ssd_hopper.cuh - the fast path of the chunked SSD forward: 16-bit inputs,
 * dense batches (no seq_idx / cu_seqlens), chunk 128 or 256, N <= 128 with
 * N % 8 == 0, P % 64 == 0, 16-byte aligned rows.  Included only from
 * ssd_fwd.cu (after ssd_chunk.cuh, whose args and workspace it shares).
 *
 * Four launches, each parallel over everything it can be:
 *   ssd_cumsum_warp     (any arch) a warp per (b, chunk, head): processed dt
 *                       and g' = chunk-local cumsum of min(dt A, 0) * log2(e)
 *                       by a warp scan (the general kernel walks the chunk
 *                       with one thread: 10 K threads for the 2.7B shape).
 *   ssd_chunk_state_wg  (sm_90a) per (b, chunk, head, 64 columns of P): the
 *                       chunk's own state S_c = X^T diag(w) B, w_j =
 *                       exp2(g'_last - g'_j) dt_j, as one wgmma chain
 *                       (A = X^T from registers, scaled by w; B from shared
 *                       memory, MN-major), written in f32 to `cst`.
 *   ssd_state_scan      (any arch) per (b, head, 4 state elements): walks the
 *                       chunks, H_{c+1} = exp2(g'_last(c)) H_c + S_c, stores
 *                       H_c (the state entering chunk c) in the input dtype,
 *                       and the final state.
 *   ssd_out_wg          (sm_90a) per (b, chunk, 64 columns of P, run of heads
 *                       of one group): C and B of the chunk are loaded once
 *                       and serve every head of the run; per head X, H and
 *                       the dt / g' vectors are double-buffered (the next
 *                       head's load overlaps this head's products).  Two
 *                       warpgroups, each owning two 64-row blocks of the
 *                       chunk chosen so both do the same number of tiles
 *                       ((0, 3) and (1, 2) at chunk 256):
 *                         O  = diag(exp2 g'_i) C H^T       (wgmma ss)
 *                         S  = C_m B_k^T                   (wgmma ss)
 *                         P  = S * decay * dt (masked on the diagonal tile)
 *                         O += P X_k                       (wgmma rs, X MN-major)
 *                       then D x from the shared X tile, the z gate, store.
 * Decay off the diagonal without an exp2 per element: for rows i of block m
 * and keys j of an earlier tile k, with r = 64k + 63 (k's last key),
 *   exp2(g'_i - g'_j) = exp2(g'_i - g'_r) * exp2(g'_r - g'_j),
 * both factors <= 1 (g' does not increase), so neither overflows and a
 * factor that underflows only does so where the product is below f32's
 * range anyway.  The column factor times dt_j depends on j alone (sw[j]),
 * computed once per head; the row factor is two exp2 per thread per tile.
 */
#ifndef SF_SSD_HOPPER_CUH
#define SF_SSD_HOPPER_CUH

#include "ssd/chunk.cuh"
#include "common/wgmma.cuh"

#include <cuda.h> /* CUtensorMap (a type only) */
#include <type_traits>

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

/* Programmatic dependent launch (wgm40 launches the kernels after the
 * cumsum with it): wait until the previous kernel of the stream has
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

template <typename T, int Q>
__global__ void __launch_bounds__(256) ssd_cumsum_warp(const ssd_fwd_args a) {
    ssd_cumsum_block<T, Q>(a, blockIdx.x);
    /* wgb40 launches it programmatically after ssd_cb_wg, whose output it
     * does not read: it waits at its end only, so that the kernels after it
     * may count on both being complete (a no-op for a plain launch) */
    ssd_griddep_wait();
}

/* ------------------------------------------------------------------ */
/* state scan over chunks                                               */
/* ------------------------------------------------------------------ */
/* Grid (flattened): block of 1024 state elements fastest, then (b, head);
 * each thread 4 consecutive elements of one row (N % 4 == 0).  The next
 * chunk's S and decay are loaded before the current one is used. */
/* A scan thread's 4 consecutive state elements (grid: block of 1024
 * elements fastest, then (b, head)): the (b, h) row, the offset e within
 * its P N states, and (p, n) of the first; ok false past the end. */
struct SsdScanElem {
    int64_t bh, e;
    int b, h, p, n;
    bool ok;
};
static __device__ __forceinline__ SsdScanElem ssd_scan_elem(const ssd_fwd_args &a) {
    SsdScanElem s;
    const int64_t PN = (int64_t)a.P * a.N, nblk = (PN + 1023) / 1024;
    s.bh = blockIdx.x / nblk;
    s.e = ((blockIdx.x - s.bh * nblk) * 256 + threadIdx.x) * 4;
    s.ok = s.e < PN;
    s.b = s.h = s.p = s.n = 0;
    if (s.ok) {
        s.b = (int)(s.bh / a.H);
        s.h = (int)(s.bh - (int64_t)s.b * a.H);
        s.p = (int)(s.e / a.N);
        s.n = (int)(s.e - (int64_t)s.p * a.N);
    }
    return s;
}
/* the initial state's 4 elements (any strides), or 0 without one */
static __device__ __forceinline__ float4 ssd_scan_init(const ssd_fwd_args &a, const SsdScanElem &s) {
    if (!a.has_init) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float *in = a.init + (int64_t)s.b * a.ins[0] + (int64_t)s.h * a.ins[1] + (int64_t)s.p * a.ins[2] +
                      (int64_t)s.n * a.ins[3];
    return make_float4(in[0], in[a.ins[3]], in[2 * a.ins[3]], in[3 * a.ins[3]]);
}
/* H as the final state's 4 elements (any strides), when asked for */
static __device__ __forceinline__ void ssd_scan_final(const ssd_fwd_args &a, const SsdScanElem &s, float4 H) {
    if (!a.has_final) return;
    float *fo = a.fin + (int64_t)s.b * a.fis[0] + (int64_t)s.h * a.fis[1] + (int64_t)s.p * a.fis[2] +
                (int64_t)s.n * a.fis[3];
    fo[0] = H.x;
    fo[a.fis[3]] = H.y;
    fo[2 * a.fis[3]] = H.z;
    fo[3 * a.fis[3]] = H.w;
}

template <typename T>
__global__ void __launch_bounds__(256) ssd_state_scan(const ssd_fwd_args a, const float *cst) {
    ssd_griddep_wait();
    const int64_t PN = (int64_t)a.P * a.N;
    const SsdScanElem el = ssd_scan_elem(a);
    if (!el.ok) return;
    const int64_t bh = el.bh, e = el.e;
    float4 H = ssd_scan_init(a, el);
    const float *sc = cst + bh * a.nc * PN + e;
    const float *gl = a.gw + bh * a.nc * a.Q + (a.Q - 1);
    T *st = (T *)a.states + bh * a.nc * PN + e;
    float4 Sn = a.nc > 0 ? *reinterpret_cast<const float4 *>(sc) : H;
    float gn = a.nc > 0 ? gl[0] : 0.0f;
    for (int c = 0; c < a.nc; c++) {
        const float4 S = Sn;
        const float dec = exp2f(fminf(gn, 0.0f));
        if (c + 1 < a.nc) {
            Sn = *reinterpret_cast<const float4 *>(sc + (int64_t)(c + 1) * PN);
            gn = gl[(int64_t)(c + 1) * a.Q];
        }
        T *d = st + (int64_t)c * PN;
        if constexpr (sizeof(T) == 4) {
            *reinterpret_cast<float4 *>(d) = H;
        } else {
            const uint32_t lo = ssd_pack(T{}, H.x, H.y), hi = ssd_pack(T{}, H.z, H.w);
            *reinterpret_cast<uint2 *>(d) = make_uint2(lo, hi);
        }
        H = make_float4(fmaf(dec, H.x, S.x), fmaf(dec, H.y, S.y), fmaf(dec, H.z, S.z),
                        fmaf(dec, H.w, S.w));
    }
    ssd_scan_final(a, el, H);
}

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

/* Grid (flattened): head fastest (heads of a group read the same B tile
 * from L2 together), then P tile, chunk, batch row.  Block 128 = one
 * warpgroup; warp w owns state rows p0 + 16w .. +15, all 128 columns.
 * The chunk is taken in two halves of Q / 2 tokens through one ~50 KB
 * buffer (B swizzled, X padded for ldmatrix, the weights w), so three
 * blocks fit on an SM by registers (170 each; four by shared memory, but 128
 * registers spill), against two when the whole chunk was staged at once
 * (100 KB: 2.0 TB/s, 295 us on the 2.7B b8 L4096 shape). */
template <typename T, int Q>
__global__ void __launch_bounds__(128, 3) ssd_chunk_state_wg(const ssd_fwd_args a, float *cst) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    constexpr int LDX = SsdWg<Q>::ST_LDX, QH = Q / 2;
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sraw = sf_smem_u32(ssd_smem);
    const uint32_t sB = (sraw + 1023u) & ~1023u;
    T *sX = reinterpret_cast<T *>(ssd_smem + (sB - sraw) + QH * 256);
    float *sw = reinterpret_cast<float *>(sX + QH * LDX);
    const uint32_t sXa = sf_smem_u32(sX);

    const int ptiles = a.P / 64;
    const ssd_hpcb blk = ssd_block_hpcb(a, ptiles);
    const int h = blk.h, pt = blk.pt, c = blk.c, b = blk.b;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t t0 = (int64_t)c * Q, bh = (int64_t)b * a.H + h;
    const int Lc = (int)min((int64_t)Q, a.L - t0), p0 = pt * 64;
    const T *Bg = (const T *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] + (int64_t)(h / a.hpg) * a.Bs[2];
    const T *Xg = (const T *)a.x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
    const float *gwc = a.gw + (bh * a.nc + c) * Q, *dtc = a.dtw + (bh * a.nc + c) * Q;
    const float glast = gwc[Q - 1];

    float acc[16][4];
#pragma unroll
    for (int i = 0; i < 16; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int j0 = half * QH, lv = Lc - j0; /* valid tokens of this half (may be <= 0) */
        if (half == 1) __syncthreads(); /* every read of the first half is done */
        load_tile_sw_rs<QH, 128, 128>(sB, Bg + (int64_t)j0 * a.Bs[1], a.Bs[1], lv, a.N / 8, tid);
        ssd_state_half_xw<QH, LDX>(sXa, Xg, a.xs[1], j0, lv, sw, glast, gwc, dtc, tid);
        sf_cp_async_wait<0>();
        fence_async_smem();
        __syncthreads();

        ssd_state_half_wg<T, QH, LDX, 128>(acc, sX, sw, sB, warp);
    }

    float *dst = cst + (bh * a.nc + c) * (int64_t)a.P * a.N + (int64_t)(p0 + 16 * warp + g) * a.N;
#pragma unroll
    for (int nt = 0; nt < 16; nt++) {
        const int n = nt * 8 + 2 * t;
        if (n < a.N) {
            *reinterpret_cast<float2 *>(dst + n) = make_float2(acc[nt][0], acc[nt][1]);
            *reinterpret_cast<float2 *>(dst + 8 * a.N + n) = make_float2(acc[nt][2], acc[nt][3]);
        }
    }
#else
    (void)a;
    (void)cst;
#endif
}

/* ssd_chunk_state_wg for pairs of heads that share B (configuration wgm40):
 * a cluster of two CTAs, heads h and h + 1 of one (b, chunk, P tile), each
 * CTA loading one 64-column half of the B tile by TMA and multicasting it
 * to both, so B leaves L2 once per pair instead of once per head (at b 1 L
 * 16384 ssd_chunk_state_wg runs at 80% of L2 throughput, B being two thirds
 * of what it reads).  X and w as in ssd_chunk_state_wg.  Per half chunk one
 * mbarrier (expecting both 64-column boxes); a cluster barrier before the
 * second half's copies, so neither CTA overwrites the other's B while it is
 * still read.  Needs H and heads per group even (the host checks). */
template <typename T, int Q>
__global__ void __launch_bounds__(128, 3) /* launched in clusters of two (ssd_launch_ex) */
    ssd_chunk_state_mc(const ssd_fwd_args a, float *cst, const __grid_constant__ CUtensorMap mb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    constexpr int LDX = SsdWg<Q>::ST_LDX, QH = Q / 2;
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sraw = sf_smem_u32(ssd_smem);
    const uint32_t sB = (sraw + 1023u) & ~1023u;
    T *sX = reinterpret_cast<T *>(ssd_smem + (sB - sraw) + QH * 256);
    float *sw = reinterpret_cast<float *>(sX + QH * LDX);
    const uint32_t sXa = sf_smem_u32(sX), bars = sf_smem_u32(sw + QH); /* two mbarriers */

    const int ptiles = a.P / 64;
    const ssd_hpcb blk = ssd_block_hpcb(a, ptiles);
    const int h = blk.h, pt = blk.pt, c = blk.c, b = blk.b;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t t0 = (int64_t)c * Q, bh = (int64_t)b * a.H + h;
    const int Lc = (int)min((int64_t)Q, a.L - t0), p0 = pt * 64;
    const uint32_t rank = cluster_rank();
    const T *Xg = (const T *)a.x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
    const float *gwc = a.gw + (bh * a.nc + c) * Q, *dtc = a.dtw + (bh * a.nc + c) * Q;
    if (tid == 0) {
        mbar_init(bars, 1);
        mbar_init(bars + 8, 1);
        mbar_init_fence();
    }
    cluster_sync();     /* both CTAs' mbarriers initialised before any box lands */
    ssd_griddep_wait(); /* g' and dt come from the cumsum */
    const float glast = gwc[Q - 1];

    float acc[16][4];
#pragma unroll
    for (int i = 0; i < 16; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int j0 = half * QH, lv = Lc - j0; /* valid tokens of this half (may be <= 0) */
        const uint32_t bar = bars + 8 * half;
        if (half == 1) cluster_sync(); /* both CTAs done with the first half's B (and X) */
        if (tid == 0) {
            /* both boxes (64 columns x QH tokens each) land here; rows past
             * the sequence read as zeros */
            mbar_expect_tx(bar, 2u * QH * 128u);
            tma_load4_mc(sB + rank * (QH * 128), &mb, 64 * (int)rank, (int)(t0 + j0), h / a.hpg, b, bar, 0x3);
        }
        ssd_state_half_xw<QH, LDX>(sXa, Xg, a.xs[1], j0, lv, sw, glast, gwc, dtc, tid);
        sf_cp_async_wait<0>();
        mbar_wait(bar, 0);
        __syncthreads(); /* X, w and B of this half visible to every thread */

        ssd_state_half_wg<T, QH, LDX, 128>(acc, sX, sw, sB, warp);
    }
    ssd_h_store(acc, cst + (bh * a.nc + c) * (int64_t)a.P * a.N + (int64_t)(p0 + 16 * warp + g) * a.N, a.N, t);
#else
    (void)a;
    (void)cst;
    (void)mb;
#endif
}

/* Chunk states and the pass over chunks in one kernel, for dense batches
 * (configurations fu8 / fu40 / fub40 with NW 128, fnb40 with NW 64): a
 * block per (b, P tile, NW-column state slice, head), head fastest (the
 * heads of a group read the same B tiles from L2 together), walks the
 * chunks in order with its 64 x NW slice of the state H (f32) in the wgmma
 * accumulator: at chunk c it stores H (the state entering c, in T, for the
 * output kernel), scales it by 2^(g'_last), then adds X_c^T diag(w) B_c
 * (w_j = 2^(g'_last - g'_j) dt_j) half a chunk at a time.  The halves stream
 * through NST shared stages: the next NST - 1 halves' copies are in flight
 * while one is multiplied.  No f32 chunk-state round trip through HBM (the
 * split kernels write and read 335 MB of it at the 2.7B b8 L4096 shape);
 * the cost is parallelism: batch x heads x P tiles x N / NW blocks, each
 * walking every chunk (NW 64 doubles the blocks for small batches and reads
 * X twice). */
template <typename T, int Q, int NW, int NST>
__global__ void __launch_bounds__(128, NW == 128 ? 2 : 3) ssd_state_fused_wg(const ssd_fwd_args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    typedef SsdFu<Q, NW, NST> F;
    constexpr int LDX = F::LDX, QH = F::QH, NT8 = NW / 8;
    static_assert(NST >= 2, "two stages at least");
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sraw = sf_smem_u32(ssd_smem);
    const uint32_t sbase = (sraw + 1023u) & ~1023u;
    unsigned char *gbase = ssd_smem + (sbase - sraw);

    const int ptiles = a.P / 64, nsl = (a.N + NW - 1) / NW;
    int64_t id = blockIdx.x;
    const int h = (int)(id % a.H);
    id /= a.H;
    const int sl = (int)(id % nsl);
    id /= nsl;
    const int pt = (int)(id % ptiles);
    const int b = (int)(id / ptiles);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t bh = (int64_t)b * a.H + h, PN = (int64_t)a.P * a.N;
    const int p0 = pt * 64, n0 = sl * NW, nsub = 2 * a.nc;
    const int nv8 = min(NW / 8, (a.N - n0) / 8); /* this slice's 16-byte chunks of a B row */
    const T *Bg = (const T *)a.B + (int64_t)b * a.Bs[0] + (int64_t)(h / a.hpg) * a.Bs[2] + n0;
    const T *Xg = (const T *)a.x + (int64_t)b * a.xs[0] + (int64_t)h * a.xs[2] + p0;

    /* this thread's token of a sub-tile (s: chunk s / 2, half s % 2):
     * g', dt and the chunk's last g', fetched one issue ahead of use */
    float pg = 0.0f, pd = 0.0f, pgl = 0.0f;
    auto fetch = [&](int s) {
        if (s < nsub && tid < QH) {
            const int64_t v = (bh * a.nc + (s >> 1)) * Q;
            pg = a.gw[v + (s & 1) * QH + tid];
            pd = a.dtw[v + (s & 1) * QH + tid];
            pgl = a.gw[v + Q - 1];
        }
    };
    /* sub-tile s's copies into stage s % NST (always one commit group) */
    auto issue = [&](int s) {
        if (s < nsub) {
            const int64_t t0 = (int64_t)(s >> 1) * Q + (s & 1) * QH;
            const int lv = (int)min((int64_t)QH, a.L - t0); /* valid tokens (may be <= 0) */
            const uint32_t st = sbase + (s % NST) * F::STAGE;
            load_tile_sw_rs<QH, NW, 128>(st, Bg + t0 * a.Bs[1], a.Bs[1], lv, nv8, tid);
#pragma unroll
            for (int it = 0; it < QH * 8 / 128; it++) {
                const int i = tid + it * 128, r = i >> 3, cc = i & 7;
                const bool ok = r < lv;
                cp_async16_u32(st + F::OX + (r * LDX + cc * 8) * 2, ok ? Xg + (t0 + r) * a.xs[1] + cc * 8 : Xg,
                               ok ? 16 : 0);
            }
            if (tid < QH)
                reinterpret_cast<float *>(gbase + (s % NST) * F::STAGE + F::OW)[tid] =
                    exp2f(fminf(pgl - pg, 0.0f)) * pd;
        }
        sf_cp_async_commit();
    };

    /* H in the accumulator layout: rows p0 + 16 warp + g (+ 8), columns n0 + 8 nt + 2 t (+ 1) */
    float H[NT8][4];
    const int pr = p0 + 16 * warp + g;
    ssd_h_init(H, a, b, h, pr, t, a.has_init, n0);
#pragma unroll
    for (int u = 0; u < NST - 1; u++) {
        fetch(u);
        issue(u);
    }
    fetch(NST - 1);
    for (int s = 0; s < nsub; s++) {
        sf_cp_async_wait<NST - 2>(); /* sub-tile s landed (s + 1 .. s + NST - 2 may be in flight) */
        fence_async_smem();
        __syncthreads(); /* ... for every thread; stage (s - 1) % NST free (sub-tile s - 1 done) */
        issue(s + NST - 1);
        fetch(s + NST);
        if ((s & 1) == 0) {
            /* H is the state entering chunk s / 2: store it, then decay it */
            const int c = s >> 1;
            ssd_h_store(H, (T *)a.states + (bh * a.nc + c) * PN + (int64_t)pr * a.N, a.N, t, n0);
            ssd_h_scale(H, exp2f(fminf(a.gw[(bh * a.nc + c) * Q + Q - 1], 0.0f)));
        }
        const int stg = s % NST;
        ssd_state_half_wg<T, QH, LDX, NW>(H, reinterpret_cast<const T *>(gbase + stg * F::STAGE + F::OX),
                                          reinterpret_cast<const float *>(gbase + stg * F::STAGE + F::OW),
                                          sbase + stg * F::STAGE, warp);
    }
    if (a.has_final) ssd_h_final(H, a, b, h, pr, t, n0);
#else
    (void)a;
#endif
}

/* S_mk = C_m B_k^T over the state dimension: the 64 x 64 tile (m, k) of a
 * chunk for the output kernel, row block m (descriptor dCm) against B rows
 * of block k, from the swizzled C / B tiles at sC (B at sC + Q * 256). */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <typename T, int Q>
static __device__ __forceinline__ void ssd_cb_tile(float (&S)[8][4], uint64_t dCm, uint32_t sC, int k) {
    using namespace sf_wg;
    const uint64_t dBk = wg_desc(sC + (Q * 256) + k * 8192, 16, 1024);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        Wg<T, 64>::ss(&S[0][0], wg_desc_add(dCm, (kk >> 2) * (Q * 128) + (kk & 3) * 32),
                      wg_desc_add(dBk, (kk >> 2) * (Q * 128) + (kk & 3) * 32), kk > 0);
    wg_commit();
}
#endif

/* The tiles of C B^T on and below the diagonal, once per (b, group, chunk)
 * for every head of the group (configuration wgb40): tile (m, k) at
 * cb + ((b G + grp) nchunks + c) NTILE 4096 + (m (m + 1) / 2 + k) 4096 in
 * accumulator-fragment order, float4 (nt 128 + thread of the warpgroup), so
 * the output kernel's warpgroup reads its S fragments as they were computed
 * here (the same products: the same values as ssd_out_wg's own).  Grid
 * (flattened): chunk fastest, then group, batch row; block 256 = two
 * warpgroups, row blocks split as in ssd_out_wg.  The forward's first
 * kernel (a plain launch: the previous forward's output kernel is done with
 * the tiles); it lets the cumsum, which does not read its output, start at
 * once. */
template <typename T, int Q>
__global__ void __launch_bounds__(256, 1) ssd_cb_wg(const ssd_fwd_args a, float *cb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    typedef SsdWg<Q> L;
    constexpr int NRB = Q / 64, NR = NRB == 4 ? 2 : 1;
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sC = (sf_smem_u32(ssd_smem) + 1023u) & ~1023u;
    const int G = a.H / a.hpg;
    int64_t id = blockIdx.x;
    const int c = (int)(id % a.nc);
    id /= a.nc;
    const int grp = (int)(id % G), b = (int)(id / G);
    const int64_t t0 = (int64_t)c * Q;
    const int Lc = (int)min((int64_t)Q, a.L - t0);
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), lt = tid & 127;
    ssd_griddep_launch();
    load_tile_sw_rs<Q, 128, 256>(sC, (const T *)a.C + (int64_t)b * a.Cs[0] + t0 * a.Cs[1] + (int64_t)grp * a.Cs[2],
                                 a.Cs[1], Lc, a.N / 8, tid);
    load_tile_sw_rs<Q, 128, 256>(sC + Q * 256,
                                 (const T *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] + (int64_t)grp * a.Bs[2],
                                 a.Bs[1], Lc, a.N / 8, tid);
    sf_cp_async_commit();
    sf_cp_async_wait<0>();
    fence_async_smem();
    __syncthreads();
    float *dst = cb + (((int64_t)b * G + grp) * a.nc + c) * (L::NTILE * 4096) + 4 * lt;
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const int m = r == 0 ? wg : NRB - 1 - wg;
        if (64 * m >= Lc) continue;
        const uint64_t dCm = wg_desc(sC + m * 8192, 16, 1024);
        for (int k = 0; k <= m; k++) {
            float S[8][4];
            ssd_cb_tile<T, Q>(S, dCm, sC, k);
            wg_wait<0>();
            reg_fence(S);
            float *d = dst + (m * (m + 1) / 2 + k) * 4096;
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
                *reinterpret_cast<float4 *>(d + nt * 512) = make_float4(S[nt][0], S[nt][1], S[nt][2], S[nt][3]);
        }
    }
#else
    (void)a;
    (void)cb;
#endif
}

/* Grid (flattened): run of heads fastest (the runs of one chunk share C and
 * B through L2), then group, P tile, chunk, batch row.  Block 256 = two
 * warpgroups; `hpc` heads per run.  CBG (configuration wgb40): S = C B^T
 * tiles from ssd_cb_wg's buffer `cb` instead of a product per head, each
 * warpgroup's tiles in its order through a two-slot ring of bulk copies
 * (one 16 KB copy a tile, issued two tiles ahead by the warpgroup's first
 * thread); B is not loaded.  BAL (CBG only; configurations wgq / fuq): one
 * block per SM, each taking a contiguous range of the (b, chunk, P tile,
 * head) units (ssd_out_unit) as runs of heads, so no SM has more than one
 * unit above the average (40 heads a block leave 4 of 132 SMs idle at b 1
 * L 16384 and give the others 40 units against 38.8). */
template <typename T, int Q, bool CBG, bool BAL = false>
__global__ void __launch_bounds__(256, 1) ssd_out_wg(const ssd_fwd_args a, int hpc, const float *cb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    typedef SsdWg<Q> L;
    constexpr int NRB = Q / 64, NR = NRB == 4 ? 2 : 1;
    static_assert(NRB == 2 || NRB == 4, "chunk 128 or 256");
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sraw = sf_smem_u32(ssd_smem);
    const uint32_t base = (sraw + 1023u) & ~1023u;
    const uint32_t sC = base + L::O_C, sB = base + L::O_B, sX0 = base + L::O_X, sH = base + L::O_H;
    unsigned char *gbase = ssd_smem + (base - sraw);
    float *sv = reinterpret_cast<float *>(gbase + L::O_V); /* g'[2][Q], dt[2][Q], sw[Q] */
    float *sw = sv + 4 * Q;

    static_assert(CBG || !BAL, "the balanced grid takes the C B^T tiles");
    /* BAL: this block's units */
    int64_t u = 0, uend = 0;
    if constexpr (BAL) {
        const int64_t U = (int64_t)a.batch * a.nc * (a.P / 64) * a.H;
        u = blockIdx.x * U / gridDim.x;
        uend = (blockIdx.x + 1) * U / gridDim.x;
    }
    if (CBG) mbar_init_stages(base + L::O_BAR, 4);
    int nbase = 0; /* CBG: S tiles of the block's earlier runs (the ring's slots and phases go on) */
    for (bool first = true;; first = false) {
        ssd_out_blk blk;
        if constexpr (BAL) {
            if (u >= uend) break;
            blk = ssd_out_unit(a, u, uend);
            u += blk.nh;
            if (!first) __syncthreads(); /* the last run's buffers and S slots are read */
        } else {
            if (!first) break;
            blk = ssd_out_block(a, hpc);
        }
        const int grp = blk.grp, pt = blk.pt, c = blk.c, b = blk.b, h_begin = blk.h_begin, nh = blk.nh;
        if (nh <= 0) return;
        const int64_t t0 = (int64_t)c * Q;
        const int Lc = (int)min((int64_t)Q, a.L - t0), p0 = pt * 64;
        /* the warpgroup index through a shuffle from lane 0: known warp-uniform,
         * so descriptors built from it stay in uniform registers */
        const int tid = threadIdx.x, warp = tid >> 5, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), wl = warp & 3;
        const int lane = tid & 31, g = lane >> 2, t = lane & 3;
        const T *Cg = (const T *)a.C + (int64_t)b * a.Cs[0] + t0 * a.Cs[1] + (int64_t)grp * a.Cs[2];
        const T *Bg = (const T *)a.B + (int64_t)b * a.Bs[0] + t0 * a.Bs[1] + (int64_t)grp * a.Bs[2];
        const int64_t PN = (int64_t)a.P * a.N;

        /* head i's X, H and vectors; X / vectors into buffer i & 1 */
        auto issue_head = [&](int i) {
            const int h = h_begin + i, buf = i & 1;
            const int64_t bh = (int64_t)b * a.H + h;
            const T *Xg = (const T *)a.x + (int64_t)b * a.xs[0] + t0 * a.xs[1] + (int64_t)h * a.xs[2] + p0;
            load_tile_sw_rs<Q, 64, 256>(sX0 + buf * (Q * 128), Xg, a.xs[1], Lc, 8, tid);
            load_tile_sw_rs<64, 128, 256>(sH, (const T *)a.states + (bh * a.nc + c) * PN + (int64_t)p0 * a.N,
                                          a.N, 64, a.N / 8, tid);
            const float *gsrc = a.gw + (bh * a.nc + c) * Q, *dsrc = a.dtw + (bh * a.nc + c) * Q;
            if (tid < Q / 4) {
                cp_async16_u32(sf_smem_u32(sv + buf * Q) + 16 * tid, gsrc + 4 * tid, 16);
                cp_async16_u32(sf_smem_u32(sv + (2 + buf) * Q) + 16 * tid, dsrc + 4 * tid, 16);
            }
        };
        /* this warpgroup's row blocks */
        int mblk[NR];
        mblk[0] = wg;
        if (NR == 2) mblk[NR - 1] = NRB - 1 - wg;

        /* CBG: the warpgroup's S tiles per head, in the order the loop below
         * takes them (row block mblk[0]'s k = 0..m, then mblk[1]'s; a row block
         * past the chunk's end has none), the ring's slots and mbarriers, and
         * tile n of the block's sequence into slot n & 1 */
        const int m0 = mblk[0], m1 = mblk[NR - 1];
        const int tph = (64 * m0 < Lc ? m0 + 1 : 0) + (NR == 2 && 64 * m1 < Lc ? m1 + 1 : 0), ntile = nh * tph;
        const uint32_t sS = base + L::O_S + wg * 32768, barS = base + L::O_BAR + wg * 16;
        const float *cbc = CBG ? cb + (((int64_t)b * (a.H / a.hpg) + grp) * a.nc + c) * (L::NTILE * 4096) : nullptr;
        auto issue_s = [&](int n) {
            const int pos = n % tph, m = pos <= m0 ? m0 : m1, k = pos <= m0 ? pos : pos - m0 - 1;
            const uint32_t bar = barS + 8 * ((nbase + n) & 1);
            mbar_expect_tx(bar, 16384);
            bulk_copy_g2s(sS + ((nbase + n) & 1) * 16384, cbc + (m * (m + 1) / 2 + k) * 4096, 16384, bar);
        };

        load_tile_sw_rs<Q, 128, 256>(sC, Cg, a.Cs[1], Lc, a.N / 8, tid);
        if (!CBG) load_tile_sw_rs<Q, 128, 256>(sB, Bg, a.Bs[1], Lc, a.N / 8, tid);
        ssd_griddep_wait(); /* C and B are inputs; the states, vectors and S tiles come from earlier kernels */
        issue_head(0);
        sf_cp_async_commit();
        if (CBG && (tid & 127) == 0) {
            if (nbase > 0) fence_async_smem(); /* the slots' reads in the last run, then the copies */
            for (int n = 0; n < 2 && n < ntile; n++) issue_s(n);
        }
        int ns = 0; /* CBG: the warpgroup's next tile in the sequence */
        const T *zbase = (const T *)a.z;
        T *obase = (T *)a.out;

        for (int i = 0; i < nh; i++) {
            const int h = h_begin + i, buf = i & 1;
            /* shared addresses and thread coordinates made opaque per head, so
             * the compiler does not hoist every unrolled descriptor and address
             * out of the loop and keep (spill) them all */
            uint32_t sX = sX0 + buf * (Q * 128), sCi = sC, sHi = sH;
            const float *sg = sv + buf * Q, *sdt = sv + (2 + buf) * Q;
            /* the same vectors as shared-space addresses, for ld.shared */
            uint32_t ag = sf_smem_u32(sg), adt = sf_smem_u32(sdt), aw = sf_smem_u32(sw);
            int rq = 16 * wl + g, tt = t; /* the thread's row in a 64-row block, its column pair */
            asm volatile("" : "+r"(sX), "+r"(sCi), "+r"(sHi), "+r"(ag), "+r"(adt), "+r"(aw), "+r"(rq), "+r"(tt));
            sf_cp_async_wait<0>();
            fence_async_smem();
            __syncthreads(); /* head i's tiles visible; head i - 1 fully done */

            /* carried state: O = C_m H^T for both row blocks */
            float O[NR][8][4];
            wg_fence();
#pragma unroll
            for (int r = 0; r < NR; r++)
#pragma unroll
                for (int kk = 0; kk < 8; kk++)
                    Wg<T, 64>::ss(&O[r][0][0],
                                  wg_desc(sCi + (kk >> 2) * (Q * 128) + mblk[r] * 8192 + (kk & 3) * 32, 16, 1024),
                                  wg_desc(sHi + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024), kk > 0);
            wg_commit();
            if (tid < Q) sw[tid] = sf_ex2(fminf(sg[tid | 63] - sg[tid], 0.0f)) * sdt[tid];
            wg_wait<0>();
#pragma unroll
            for (int r = 0; r < NR; r++) reg_fence(O[r]);
            __syncthreads(); /* sH free, sw visible */
            if (i + 1 < nh) issue_head(i + 1);
            sf_cp_async_commit();

            /* this head's z and output at the chunk's first token, thread's first column */
            const T *zh = zbase + (int64_t)b * a.zs[0] + t0 * a.zs[1] + (int64_t)h * a.zs[2] + p0 + 2 * tt;
            T *oh = obase + (int64_t)b * a.os[0] + t0 * a.os[1] + (int64_t)h * a.os[2] + p0 + 2 * tt;
            /* D of this thread's 16 output columns (per column or per head) */
            float dc[8][2];
            ssd_out_load_d(dc, a, h, p0, tt);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const int m = mblk[r];
                if (64 * m >= Lc) continue;
                const int row0 = 64 * m + rq, row1 = row0 + 8;
                const float g0 = ssd_ldsf(ag + 4 * row0), g1 = ssd_ldsf(ag + 4 * row1);
                {
                    const float f0 = sf_ex2(fminf(g0, 0.0f)), f1 = sf_ex2(fminf(g1, 0.0f));
                    ssd_scale_rows(O[r], f0, f1);
                }
                /* z of this thread's outputs, in flight during the products */
                uint32_t zr[2][8];
                ssd_out_load_z(zr, zh, a.zs[1], row0, Lc, a.has_z);
                const uint64_t dCm = wg_desc(sCi + m * 8192, 16, 1024);
                for (int k = 0; k <= m; k++) {
                    float S[8][4];
                    /* below the diagonal: the shared loads of the decay vectors
                     * issued first, their latency hidden by the product's issue */
                    float gr = 0.0f;
                    float2 w[8];
                    if (k < m) {
                        gr = ssd_ldsf(ag + 4 * (64 * k + 63));
#pragma unroll
                        for (int nt = 0; nt < 8; nt++) w[nt] = ssd_ldsf2(aw + 4 * (64 * k + 8 * nt + 2 * tt));
                    }
                    if constexpr (CBG) {
                        const int nsg = nbase + ns;
                        const uint32_t slot = sS + (nsg & 1) * 16384 + 16 * (tid & 127);
                        mbar_wait(barS + 8 * (nsg & 1), (nsg >> 1) & 1);
#pragma unroll
                        for (int nt = 0; nt < 8; nt++) {
                            const float4 v = ssd_ldsf4(slot + nt * 2048);
                            S[nt][0] = v.x;
                            S[nt][1] = v.y;
                            S[nt][2] = v.z;
                            S[nt][3] = v.w;
                        }
                        named_sync(1 + wg, 128); /* the warpgroup is done with the slot (refilled below) */
                        ns++;
                    } else {
                        ssd_cb_tile<T, Q>(S, dCm, sCi, k);
                    }
                    /* the decay factors do not depend on S: computed while the
                     * product (and the previous tile's P X) run */
                    float fac[8][4];
                    if (k < m) {
                        const float f0 = sf_ex2(fminf(g0 - gr, 0.0f)), f1 = sf_ex2(fminf(g1 - gr, 0.0f));
#pragma unroll
                        for (int nt = 0; nt < 8; nt++) {
                            fac[nt][0] = f0 * w[nt].x;
                            fac[nt][1] = f0 * w[nt].y;
                            fac[nt][2] = f1 * w[nt].x;
                            fac[nt][3] = f1 * w[nt].y;
                        }
                    } else {
#pragma unroll
                        for (int nt = 0; nt < 8; nt++)
#pragma unroll
                            for (int v = 0; v < 2; v++) {
                                const int j = 64 * k + 8 * nt + 2 * tt + v;
                                const float gj = ssd_ldsf(ag + 4 * j), dj = ssd_ldsf(adt + 4 * j);
                                /* j <= row: g'_row - g'_j <= 0 (g' does not increase) */
                                fac[nt][v] = j <= row0 ? sf_ex2(g0 - gj) * dj : 0.0f;
                                fac[nt][2 + v] = j <= row1 ? sf_ex2(g1 - gj) * dj : 0.0f;
                            }
                    }
                    wg_wait<0>(); /* S_k and the previous P X */
                    reg_fence(S);
#pragma unroll
                    for (int nt = 0; nt < 8; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) S[nt][e] *= fac[nt][e];
                    const uint64_t dXk = wg_desc(sX + 64 * k * 128, Q * 128, 1024);
                    uint32_t pa[4][4];
                    ssd_pack_p<T>(pa, S);
                    wg_fence();
#pragma unroll
                    for (int kk = 0; kk < 4; kk++)
                        Wg<T, 64>::rs(&O[r][0][0], pa[kk], wg_desc_add(dXk, 16 * kk * 128));
                    wg_commit(); /* waited for with the next S, or below */
                    if (CBG && (tid & 127) == 0 && ns + 1 < ntile) {
                        /* the slot of the tile just read gets the tile after the
                         * next, here where the fence's wait is covered by the
                         * product just issued.  The fence orders the slot's
                         * reads (generic proxy, before the warpgroup barrier)
                         * before the copy's writes (async proxy): without it
                         * about one tile in 10^5 was read after its refill had
                         * landed (b 1 L 16384: 2-5 K outputs a run differed
                         * from wg40's; with it every run is equal bit for bit) */
                        fence_async_smem();
                        issue_s(ns + 1);
                    }
                }
                wg_wait<0>();
                reg_fence(O[r]);
                ssd_out_epilogue(O[r], dc, zr, a.has_z, sX, row0, tt, Lc, oh, a.os[1]);
            }
        }
        nbase += ntile;
    } /* runs */
#else
    (void)a;
    (void)hpc;
    (void)cb;
#endif
}

#endif
