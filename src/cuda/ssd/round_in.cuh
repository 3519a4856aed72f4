/* round_in.cuh - before stage 1 of the chunked SSD forward, for mixed
 * inputs only: an f32 B or C with f16 / bf16 x, rounded to x's dtype into a
 * contiguous workspace copy.  Every product that reads B or C (chunk
 * states, C B^T, the output) runs on tensor cores with operands of x's
 * dtype, so the rounding happens once here instead of in each of them, and
 * the kernels of the same-dtype path serve the mixed call unchanged.  (An
 * f32 dt needs no copy: only the cumsum reads dt, and it is instantiated
 * for dt's dtype.)
 */
#ifndef SF_SSD_ROUND_IN_CUH
#define SF_SSD_ROUND_IN_CUH

#include "common/cuda_common.h"

/* src (b, L, G, N) f32 with strides s0, s1, s2 and a unit last stride ->
 * dst contiguous (b, L, G, N) in T, rounded to nearest even.  Grid-stride
 * over `total` = b L G N elements, n fastest (coalesced on both sides). */
template <typename T>
__global__ void __launch_bounds__(256)
    ssd_round_in(const float *__restrict__ src, int64_t s0, int64_t s1, int64_t s2, T *__restrict__ dst, int L,
                 int G, int N, int64_t total) {
    for (int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; id < total;
         id += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = id;
        const int64_t n = r % N;
        r /= N;
        const int64_t g = r % G;
        r /= G;
        const int64_t t = r % L, b = r / L;
        dst[id] = sf_elem<T>::from_f(src[b * s0 + t * s1 + g * s2 + n]);
    }
}

#endif
