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
 * A slab has at least WQ_SLAB_MIN_ROWS rows even past 16 MiB (at K 14336:
 * 2048 rows, 56 MiB), since cuBLAS loses ~15% on slabs of 512 rows.
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

#include "gemm_wq.h" /* sf_wq_tiled_off */

#define WQ_SLAB_BYTES ((size_t)16 << 20)
#define WQ_SLAB_MIN_ROWS 2048

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

/* Rows n0 .. n0 + ns - 1 of W into out (ns, K) row-major: block row y of
 * the grid makes slab row blockIdx.y (grid-stride over rows past 65535),
 * its threads the row's K / 8 pieces; 32-bit index arithmetic inside a row
 * (K < 2^31), group a power of two (a shift).  scales / mins: (G, N) in T. */
template <typename T, bool INT4, bool MIN>
__global__ void __launch_bounds__(256) wq_slab_dequant(const uint8_t *__restrict__ w, int64_t w_rb, int64_t w_bp,
                                                       const uint16_t *__restrict__ scales,
                                                       const uint16_t *__restrict__ mins, int64_t N, int K,
                                                       int group_log2, int64_t n0, int64_t ns, T *__restrict__ out) {
    const int pieces = K / 8;
    for (int64_t r = blockIdx.y; r < ns; r += gridDim.y) {
        const int64_t n = n0 + r;
        const uint8_t *wr = w + n * w_rb;
        T *orow = out + r * (int64_t)K;
        for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < pieces; p += gridDim.x * blockDim.x) {
            const int k = p * 8;
            const int64_t gi = (int64_t)(k >> group_log2) * N + n;
            const float s = wqs_tof<T>(scales[gi]);
            const float m = MIN ? wqs_tof<T>(mins[gi]) : 0.0f;
            /* w_bp > 0: SF_QW_TILED codes, element j of the 8 in slot
             * sf_wq_tiled_slot(j) */
            const int64_t b = INT4 ? k / 2 : k;
            const uint8_t *src = w_bp ? w + sf_wq_tiled_off(n, b, w_bp) : wr + b;
            float v[8];
            if (INT4) {
                const uint32_t c = *(const uint32_t *)src;
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const int sl = w_bp ? sf_wq_tiled_slot(j) : j; /* rows: element 2i low nibble, 2i+1 high */
                    const int u = (int)((c >> (4 * sl)) & 15u);
                    v[j] = (float)(MIN ? u : u - 8);
                }
            } else {
                const uint2 c = *(const uint2 *)src;
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const int sl = w_bp ? sf_wq_tiled_slot(j) : j;
                    const uint32_t b = ((sl < 4 ? c.x : c.y) >> (8 * (sl % 4))) & 255u;
                    v[j] = (float)(MIN ? (int)b : (int)(int8_t)b);
                }
            }
            uint4 o;
            o.x = wqs_pack<T>(fmaf(s, v[0], m), fmaf(s, v[1], m));
            o.y = wqs_pack<T>(fmaf(s, v[2], m), fmaf(s, v[3], m));
            o.z = wqs_pack<T>(fmaf(s, v[4], m), fmaf(s, v[5], m));
            o.w = wqs_pack<T>(fmaf(s, v[6], m), fmaf(s, v[7], m));
            *(uint4 *)(orow + k) = o;
        }
    }
}

#endif
