/* slab.cuh - sf_gemm_wq for many rows of x: W dequantised a slab of rows at a
 * time into the workspace, each slab multiplied by cuBLAS.
 *
 * At M = 4096 the product is compute-bound (Llama-8B gate: 481 GFLOP, ~0.7
 * ms on the tensor cores) and the codes' bandwidth saving is worth ~30 us,
 * so the best a fused kernel can do is match cuBLAS; the tiled mma.sync
 * kernel reaches a fifth of it.  A slab of at most WQ_SLAB_BYTES (16 MiB:
 * it stays in the H200's 50 MB L2 between its write and cuBLAS's read)
 * holds ns rows of W in x's dtype: w = s * v + m computed in f32 and rounded
 * once to x's dtype (the one place the weights are rounded: ~2^-9 relative
 * in bf16, well inside the output's own rounding after a K-long sum).
 * One thread makes 8 consecutive elements of a row (4 bytes of int4 codes
 * or 8 of int8) and stores them in one 16-byte write; K is a multiple of the
 * group (>= 32), so 8 elements never straddle two groups or two rows.
 */
#ifndef SF_GEMM_WQ_SLAB_CUH
#define SF_GEMM_WQ_SLAB_CUH

#include <cuda_bf16.h>
#include <library_types.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define WQ_SLAB_BYTES ((size_t)16 << 20)

template <typename T> __device__ __forceinline__ float wqs_tof(uint16_t h);
template <> __device__ __forceinline__ float wqs_tof<__half>(uint16_t h) { return __half2float(__ushort_as_half(h)); }
template <> __device__ __forceinline__ float wqs_tof<__nv_bfloat16>(uint16_t h) {
    return __bfloat162float(__ushort_as_bfloat16(h));
}
template <typename T> __device__ __forceinline__ uint32_t wqs_pack(float a, float b);
template <> __device__ __forceinline__ uint32_t wqs_pack<__half>(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *(const uint32_t *)&h;
}
template <> __device__ __forceinline__ uint32_t wqs_pack<__nv_bfloat16>(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(const uint32_t *)&h;
}

template <typename T> struct wqs_cuda_type;
template <> struct wqs_cuda_type<__half> { static constexpr cudaDataType_t value = CUDA_R_16F; };
template <> struct wqs_cuda_type<__nv_bfloat16> { static constexpr cudaDataType_t value = CUDA_R_16BF; };

/* Rows n0 .. n0 + ns - 1 of W into out (ns, K) row-major, grid-stride over
 * the ns * K / 8 pieces.  scales / mins: (G, N) in T. */
template <typename T, bool INT4, bool MIN>
__global__ void __launch_bounds__(256) wq_slab_dequant(const uint8_t *__restrict__ w, int64_t w_rb,
                                                       const uint16_t *__restrict__ scales,
                                                       const uint16_t *__restrict__ mins, int64_t N, int64_t K,
                                                       int group, int64_t n0, int64_t ns, T *__restrict__ out) {
    const int64_t per_row = K / 8, total = ns * per_row;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / per_row, k = (e % per_row) * 8, n = n0 + r;
        const int64_t gi = (k / group) * N + n;
        const float s = wqs_tof<T>(scales[gi]);
        const float m = MIN ? wqs_tof<T>(mins[gi]) : 0.0f;
        float v[8];
        if (INT4) {
            const uint32_t c = *(const uint32_t *)(w + n * w_rb + k / 2);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int u = (int)((c >> (4 * j)) & 15u); /* element 2i low nibble, 2i+1 high */
                v[j] = (float)(MIN ? u : u - 8);
            }
        } else {
            const uint2 c = *(const uint2 *)(w + n * w_rb + k);
            const uint32_t cw[2] = {c.x, c.y};
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const uint32_t b = (cw[j / 4] >> (8 * (j % 4))) & 255u;
                v[j] = (float)(MIN ? (int)b : (int)(int8_t)b);
            }
        }
        uint4 o;
        o.x = wqs_pack<T>(fmaf(s, v[0], m), fmaf(s, v[1], m));
        o.y = wqs_pack<T>(fmaf(s, v[2], m), fmaf(s, v[3], m));
        o.z = wqs_pack<T>(fmaf(s, v[4], m), fmaf(s, v[5], m));
        o.w = wqs_pack<T>(fmaf(s, v[6], m), fmaf(s, v[7], m));
        *(uint4 *)(out + r * K + k) = o;
    }
}

#endif
