/* out.cuh - the output element of sf_gemm_swiglu's kernels (ws.cuh,
 * decode.cuh): f32 -> the bits of a bf16 or f16, round to
 * nearest, and back. */
#ifndef SF_GEMM_SWIGLU_OUT_CUH
#define SF_GEMM_SWIGLU_OUT_CUH

#include "common/ptx.cuh"

namespace sf_gs {

template <typename T> struct GsOut;
template <> struct GsOut<__nv_bfloat16> {
    static __device__ __forceinline__ uint16_t one(float v) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
    static __device__ __forceinline__ float to_f(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
};
template <> struct GsOut<__half> {
    static __device__ __forceinline__ uint16_t one(float v) { return __half_as_ushort(__float2half_rn(v)); }
    static __device__ __forceinline__ float to_f(uint16_t b) { return __half2float(__ushort_as_half(b)); }
};

} /* namespace sf_gs */

#endif
