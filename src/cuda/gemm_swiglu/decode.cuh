/* decode.cuh - sf_gemm_swiglu for few rows of x (decode, M <= 16), and the
 * fallback for any shape the TMA kernel cannot map: bound by the weight
 * bytes (2 I K, 235 MB at Llama-8B sizes), so each block streams 8 rows of
 * w_gate and the same 8 rows of w_up with 16-byte loads, many in flight,
 * and multiplies them by x on the tensor cores (mma.sync m16n8k16: 16 rows
 * of x by the 8 outputs; FMA units would cost 2 M I K / 67 TFLOP/s, more
 * than the weight stream at M = 16).
 *
 * Block = WK warps splitting K into 32-element chunks (a contiguous range
 * per warp, or every WK-th chunk: CC below).  Lane (g = lane / 4, q = lane
 * % 4) loads 8 consecutive elements
 * k0 + 8q .. k0 + 8q + 7 of weight row g (one 16-byte load; 4 lanes cover a
 * chunk) and the same 8 elements of x rows g and g + 8.  A dot product is
 * the same under any permutation of K applied to both operands, so these
 * 8 elements feed two mma k16 steps as if they were the fragment's k
 * columns 2q, 2q + 1, 2q + 8, 2q + 9 (elements 0-3) and the next (4-7):
 * no shuffles, no shared memory in the main loop.  The warps' partial sums
 * meet in shared memory; silu(g) * u is formed there.  x rows past 16 take
 * further passes over the weights (L2 holds them only for small I K).
 * The same kernel serves the engine's decode-step products
 * (layer/dec_gemv.h): a plain product or one added into an f32 residual
 * stream, or q/k/v with the rotary embedding and the KV-cache append
 * (DecOut), x made by an RMSNorm prologue (NORM). */
#ifndef SF_GEMM_SWIGLU_DECODE_CUH
#define SF_GEMM_SWIGLU_DECODE_CUH

#include "common/ptx.cuh"
#include "gemm_swiglu/args.h"

#include "fused/rope.cuh"
#include "gemm_swiglu/out.cuh"

#include <type_traits>

namespace sf_gs {

/* Elements k .. k + 7 of row p (zeros past K or when !ok).  VEC: one
 * 16-byte load (p 16-byte aligned, K a multiple of 8); else eight 2-byte
 * loads.  STREAM (the weights, read once): kept out of L1 so that x stays
 * there; PF adds a 256-byte L2 prefetch, which brings in the chunks the
 * block's other warps read next (each request is 64 bytes of a row). */
template <bool VEC, bool STREAM = false, bool PF = false>
__device__ __forceinline__ uint4 dec_ld8(const uint16_t *p, int k, int K, bool ok) {
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (VEC) {
        if (ok && k < K) {
            if (STREAM && PF)
                asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                    : "l"(p + k));
            else if (STREAM)
                asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                    : "l"(p + k));
            else
                v = __ldg((const uint4 *)(p + k));
        }
    } else if (ok) {
        uint16_t e[8];
#pragma unroll
        for (int i = 0; i < 8; i++) e[i] = k + i < K ? __ldg(p + k + i) : (uint16_t)0;
        v.x = e[0] | (uint32_t)e[1] << 16;
        v.y = e[2] | (uint32_t)e[3] << 16;
        v.z = e[4] | (uint32_t)e[5] << 16;
        v.w = e[6] | (uint32_t)e[7] << 16;
    }
    return v;
}

/* 16 bytes at element i of the shared rows x (zeros when !ok) */
__device__ __forceinline__ uint4 dec_lds8(const uint4 *x, int i, bool ok) {
    return ok ? *(const uint4 *)((const uint16_t *)x + i) : make_uint4(0u, 0u, 0u, 0u);
}

/* What a block produces.  swiglu: silu(x w_gate^T) * (x w_up^T), 8 outputs
 * (a gate row and an up row each); plain: y = x W^T (+ bias), 16 outputs
 * (W's rows n0 .. n0 + 15 as two sets of 8); res: the same 16 products
 * added to an f32 residual stream, res += x W^T (the engine's o_proj and
 * down_proj, layer/dec_gemv.h); qkv: the plain product's 16 outputs as 8
 * pairs, rotated and stored to q or the paged KV cache (dec_qkv_store). */
enum class DecOut : int { swiglu = 0, plain = 1, res = 2, qkv = 3 };

/* A plain or res output: y[m, n] = s (+ bias[n]) rounded to T, or
 * res[m, n] += s. */
template <typename T, DecOut OUT, typename A> __device__ __forceinline__ void dec_store(const A &a, int64_t m, int n, float s) {
    if constexpr (OUT == DecOut::res) {
        a.res[m * a.res_rs + n] += s;
    } else {
        if (a.bias) s += GsOut<T>::to_f(((const uint16_t *)a.bias)[n]);
        ((uint16_t *)a.y)[m * a.y_rs + n] = GsOut<T>::one(s);
    }
}

/* A qkv output pair: outputs n, n + 1 (n even) of row m, s0 and s1 with
 * the bias added.  q's and k's pairs in a head's first R channels are
 * rotary pairs (args.h GsRope): rotated at the row's position (rope.cuh's
 * angle: turns reduced in double, sincospif in f32); q's go to its buffer,
 * k's and v's to the cache slot of the row's length, through the block
 * table.  A length outside the table, or a page outside the pool, skips
 * the row's k and v and records the row in the error word (as
 * sf_kv_append does). */
template <typename T, typename A> __device__ __forceinline__ void dec_qkv_store(const A &a, int64_t m, int n, float s0, float s1) {
    const GsRope &r = a.rope;
    const bool isq = n < r.qd, isv = n >= r.qd + r.kd;
    const int c = isq ? n : isv ? n - r.qd - r.kd : n - r.qd; /* column in q, k or v */
    const int p = c % r.hd;
    if (!isv && p < r.R) sf_rope_rotate(s0, s1, sf_rope_cs(r.pos[m], r.turns[p >> 1]));
    const uint32_t v = (uint32_t)GsOut<T>::one(s0) | (uint32_t)GsOut<T>::one(s1) << 16;
    if (isq) {
        *(uint32_t *)((uint16_t *)r.q + m * r.qd + c) = v;
        return;
    }
    const int64_t slot = r.lens[m];
    if (slot < 0 || slot >= ((int64_t)r.max_pages << r.page_shift)) {
        if (n == r.qd) sf_record_row_error(r.err, (int)m);
        return;
    }
    const int64_t pg = r.bt[m * r.bt_rs + (slot >> r.page_shift)];
    if (pg < 0 || pg >= r.num_pages) {
        if (n == r.qd) sf_record_row_error(r.err, (int)m);
        return;
    }
    const int64_t off = pg * r.c_sp + (slot & (((int64_t)1 << r.page_shift) - 1)) * r.c_sr + c;
    *(uint32_t *)((uint16_t *)(isv ? r.vc : r.kc) + off) = v;
}

/* MINB blocks per SM at least (the register cap that gives).  The row
 * takes U 8 at 4 blocks an SM (127 registers, no spills): 256 bytes of
 * weights in flight a lane.  At U 4 and 7 blocks ptxas spills 24 bytes,
 * and that kernel ran 0.116 ms a call in a torch process against 0.082 ms
 * in a plain one (H100, M 1); the spill-free one runs 0.082 in both.  CC: each warp takes a contiguous quarter (1 / WK) of the chunks,
 * so its U loads in flight are consecutive 64-byte pieces of each row, else
 * every WK-th chunk (H200, M 1: 3.69 -> 3.93 TB/s with the prefetch).
 * NORM (M <= 16): the product of RMSNorm(a.nres) * a.nw, the norm that
 * precedes a decode step's product, in its prologue instead of a launch of
 * its own: x = a.nres * a.nw rounded to T is made in shared memory (every
 * block redoes it: M rows of K f32 from L2, small next to the weights) and
 * the rows' 1 / rms scales the sums at the end (rounding r nw rather than
 * r nw / rms to T: the same relative error).  Dynamic shared memory: M rows of K + 8 elements (the 16-byte
 * pad puts the rows g of a warp's loads on distinct banks). */
template <typename T, int WK, int U, bool VEC, int MINB = 1, bool PF = false, bool CC = false,
          DecOut OUT = DecOut::swiglu, bool NORM = false, typename A = GsArgs>
__global__ void __launch_bounds__(WK * 32, MINB) gs_dec_kernel(const A a) {
    constexpr bool SW = OUT == DecOut::swiglu;
    constexpr int NB = SW ? 8 : 16; /* outputs a block */
    /* The engine's products (layer/dec_gemv.h) are launched as programmatic
     * dependents: they wait for the kernel ahead before anything else, and
     * let the next kernel launch once their weights are read (issuing the
     * first weight loads before the wait cost 3-5% of an engine step). */
    constexpr bool DEP = !std::is_same<A, GsArgs>::value;
    if constexpr (DEP) sf_pdl_wait();
    static_assert(!NORM || VEC, "the norm prologue takes 16-byte rows");
    __shared__ float red[WK][2][16][9]; /* [warp][gate, up | rows n0.., n0 + 8..][row][output], padded */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int n0 = blockIdx.x * NB, na = n0 + g, nb = SW ? na : na + 8;
    const bool oka = na < a.I, okb = SW ? oka : nb < a.I;
    const uint16_t *wg = (const uint16_t *)a.wg + (int64_t)(oka ? na : 0) * a.wg_rs;
    const uint16_t *wu = SW ? (const uint16_t *)a.wu + (int64_t)(okb ? nb : 0) * a.wu_rs
                            : (const uint16_t *)a.wg + (int64_t)(okb ? nb : 0) * a.wg_rs;
    const int K = a.K, nch = (K + 31) / 32;
    extern __shared__ uint4 gs_dyn[];
    /* NORM: the rows r * nw rounded to T into shared memory, and each
     * warp's share of every row's sum of squares; rstd scales the sums in
     * the epilogue (silu(rstd g) * rstd u, rstd y), so the prologue is one
     * pass of loads and one barrier */
    __shared__ float ssq[NORM ? WK : 1][16];
    if constexpr (NORM) {
        uint16_t *xs = (uint16_t *)gs_dyn;
        const int xs_rs = K + 8, kv = K / 8;
        for (int m = 0; m < a.M; m++) {
            const float *rr = a.nres + (int64_t)m * a.nres_rs;
            float s = 0.0f;
#pragma unroll 2
            for (int i = threadIdx.x; i < kv; i += WK * 32) {
                const int k = i * 8;
                const float4 r0 = *(const float4 *)(rr + k), r1 = *(const float4 *)(rr + k + 4);
                const float4 w0 = *(const float4 *)(a.nw + k), w1 = *(const float4 *)(a.nw + k + 4);
                s += r0.x * r0.x + r0.y * r0.y + r0.z * r0.z + r0.w * r0.w;
                s += r1.x * r1.x + r1.y * r1.y + r1.z * r1.z + r1.w * r1.w;
                uint4 v;
                v.x = sf_mma16<T>::pack(r0.x * w0.x, r0.y * w0.y);
                v.y = sf_mma16<T>::pack(r0.z * w0.z, r0.w * w0.w);
                v.z = sf_mma16<T>::pack(r1.x * w1.x, r1.y * w1.y);
                v.w = sf_mma16<T>::pack(r1.z * w1.z, r1.w * w1.w);
                *(uint4 *)(xs + (int64_t)m * xs_rs + k) = v;
            }
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (lane == 0) ssq[w][m] = s;
        }
        __syncthreads();
    }
    /* row m's 1 / rms (NORM), or 1 */
    auto rstd = [&](int m) {
        if constexpr (NORM) {
            float t = 0.0f;
#pragma unroll
            for (int v = 0; v < WK; v++) t += ssq[v][m];
            return rsqrtf(t / (float)K + a.eps);
        } else {
            (void)m;
            return 1.0f;
        }
    };

    for (int mc = 0; mc < a.M; mc += 16) {
        const bool ok0 = mc + g < a.M, ok1 = mc + g + 8 < a.M;
        const uint16_t *x0 = (const uint16_t *)a.x + (int64_t)(ok0 ? mc + g : 0) * a.x_rs;
        const uint16_t *x1 = (const uint16_t *)a.x + (int64_t)(ok1 ? mc + g + 8 : 0) * a.x_rs;
        float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cu[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        /* chunks [cb, ce) of this warp, stepped by cs, U at a time cstep apart */
        const int cpw = (nch + WK - 1) / WK;
        const int cb = CC ? w * cpw : w, ce = CC ? min(nch, (w + 1) * cpw) : nch;
        const int cs = CC ? U : WK * U, cstep = CC ? 1 : WK;
        for (int c0 = cb; c0 < ce; c0 += cs) {
            uint4 bg[U], bu[U];
            /* every weight load of the U chunks first: U * 32 bytes in flight per lane */
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * cstep, k = c * 32 + 8 * q;
                bg[u] = dec_ld8<VEC, true, PF>(wg, k, K, oka && c < ce);
                bu[u] = dec_ld8<VEC, true, PF>(wu, k, K, okb && c < ce);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * cstep, k = c * 32 + 8 * q;
                const uint4 xa = NORM ? dec_lds8(gs_dyn, g * (K + 8) + k, ok0 && c < ce && k < K)
                                      : dec_ld8<VEC>(x0, k, K, ok0 && c < ce);
                const uint4 xb = NORM ? dec_lds8(gs_dyn, (g + 8) * (K + 8) + k, ok1 && c < ce && k < K)
                                      : dec_ld8<VEC>(x1, k, K, ok1 && c < ce);
                const uint32_t a1[4] = {xa.x, xb.x, xa.y, xb.y}, a2[4] = {xa.z, xb.z, xa.w, xb.w};
                sf_mma16<T>::run(cg, a1, bg[u].x, bg[u].y);
                sf_mma16<T>::run(cu, a1, bu[u].x, bu[u].y);
                sf_mma16<T>::run(cg, a2, bg[u].z, bg[u].w);
                sf_mma16<T>::run(cu, a2, bu[u].z, bu[u].w);
            }
        }
        if constexpr (DEP) sf_pdl_launch();
        /* C fragment: rows g, g + 8 (x rows), columns 2q, 2q + 1 (outputs) */
        red[w][0][g][2 * q] = cg[0];
        red[w][0][g][2 * q + 1] = cg[1];
        red[w][0][g + 8][2 * q] = cg[2];
        red[w][0][g + 8][2 * q + 1] = cg[3];
        red[w][1][g][2 * q] = cu[0];
        red[w][1][g][2 * q + 1] = cu[1];
        red[w][1][g + 8][2 * q] = cu[2];
        red[w][1][g + 8][2 * q + 1] = cu[3];
        __syncthreads();
        for (int e = threadIdx.x; e < 16 * NB; e += WK * 32) {
            const int m = SW ? e >> 3 : e >> 4, o = SW ? e & 7 : e & 15;
            if constexpr (SW) {
                if (mc + m < a.M && n0 + o < a.I) {
                    float sg = 0.0f, su = 0.0f;
#pragma unroll
                    for (int v = 0; v < WK; v++) {
                        sg += red[v][0][m][o];
                        su += red[v][1][m][o];
                    }
                    if constexpr (NORM) {
                        const float rs = rstd(mc + m);
                        sg *= rs, su *= rs;
                    }
                    ((uint16_t *)a.y)[(int64_t)(mc + m) * a.y_rs + n0 + o] = GsOut<T>::one(sf_silu_sfu(sg) * su);
                }
            } else if constexpr (OUT == DecOut::qkv) {
                /* pairs (n, n + 1): the first 128 threads take one each */
                if (e >= 8 * 16) continue;
                const int pm = e >> 3, po = (e & 7) * 2;
                if (mc + pm >= a.M || n0 + po >= a.I) continue;
                float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                for (int v = 0; v < WK; v++) {
                    s0 += red[v][po >> 3][pm][po & 7];
                    s1 += red[v][po >> 3][pm][(po & 7) + 1];
                }
                if constexpr (NORM) {
                    const float rs = rstd(mc + pm);
                    s0 *= rs, s1 *= rs;
                }
                if (a.bias) {
                    s0 += GsOut<T>::to_f(((const uint16_t *)a.bias)[n0 + po]);
                    s1 += GsOut<T>::to_f(((const uint16_t *)a.bias)[n0 + po + 1]);
                }
                dec_qkv_store<T>(a, mc + pm, n0 + po, s0, s1);
            } else {
                if (mc + m >= a.M || n0 + o >= a.I) continue;
                float s = 0.0f;
#pragma unroll
                for (int v = 0; v < WK; v++) s += red[v][o >> 3][m][o & 7];
                dec_store<T, OUT>(a, mc + m, n0 + o, NORM ? s * rstd(mc + m) : s);
            }
        }
        __syncthreads(); /* red is rewritten by the next pass */
    }
}

} /* namespace sf_gs */

#endif
