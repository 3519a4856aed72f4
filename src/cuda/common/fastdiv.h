/* fastdiv.h - division of a non-negative int by a divisor fixed before the
 * kernel launch, by a multiply and a shift (host and device; the attention
 * kernels' schedules use it, tests/test_fastdiv.cu checks it on the host). */
#ifndef SF_FASTDIV_H
#define SF_FASTDIV_H

#include <stdint.h>

namespace sf_attn {

/* n / d for 0 <= n < 2^31 and 1 <= d < 2^31: the magic number of Granlund
 * and Montgomery rounded up, mul = ceil(2^(31 + l) / d) with l = ceil(log2 d)
 * (< 2^32 since d > 2^(l - 1)), q = (n mul) >> (32 + l - 1).  A division by
 * a runtime int is ~25 instructions, and every warp of the persistent
 * attention kernel did several per work tile. */
struct FastDiv {
    uint32_t mul, shr; /* mul 0: d is 1 */
    static FastDiv make(uint32_t d) {
        FastDiv f{0u, 0u};
        if (d > 1) {
            uint32_t l = 0;
            while ((1ull << l) < d) l++;
            f.mul = (uint32_t)(((1ull << (31 + l)) + d - 1) / d);
            f.shr = l - 1;
        }
        return f;
    }
    __host__ __device__ __forceinline__ int div(int n) const {
#ifdef __CUDA_ARCH__
        return mul ? (int)(__umulhi((uint32_t)n, mul) >> shr) : n;
#else
        return mul ? (int)((uint32_t)(((uint64_t)(uint32_t)n * mul) >> 32) >> shr) : n;
#endif
    }
};

} /* namespace sf_attn */

#endif
