/* wgmma_tile.cuh - the 128-byte-swizzled shared tile layout of
 * common/wgmma.cuh: filling a tile with cp.async and the wgmma matrix
 * descriptors that address it.  Plain index arithmetic over the primitives
 * of wgmma.cuh (cp_async16_u32), which includes this file; kept apart so
 * the host emulation (tests/emu) runs this code unchanged. */
#ifndef SF_WGMMA_TILE_CUH
#define SF_WGMMA_TILE_CUH

#include <stdint.h>

namespace sf_wg {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* ROWS x D tile into the swizzled block layout at shared address sbase;
 * rows >= rows and 16-byte chunks >= d8 are zero-filled. */
template <int ROWS, int D, int NT, typename T>
__device__ __forceinline__ void load_tile_sw(uint32_t sbase, const T *g, int64_t row_stride,
                                             int rows, int d8, int tid) {
    constexpr int CH = D / 8, TOTAL = ROWS * CH, ITERS = TOTAL / NT;
    static_assert(TOTAL % NT == 0, "tile / thread count");
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
        const int i = tid + it * NT;
        const int r = i / CH, c = i % CH;
        const bool ok = r < rows && c < d8;
        const T *src = ok ? g + (int64_t)r * row_stride + c * 8 : g;
        const uint32_t dst = sbase + (c >> 3) * (ROWS * 128) + r * 128 + (((c ^ r) & 7) << 4);
        cp_async16_u32(dst, src, ok ? 16 : 0);
    }
}

/* load_tile_sw when every thread keeps one 16-byte column chunk (NT a
 * multiple of the chunks per row) and steps a multiple of 8 rows per copy:
 * the swizzle term is then the same for all of a thread's copies, so each
 * copy costs one pointer step and an immediate shared offset instead of
 * the index arithmetic per copy. */
template <int ROWS, int D, int NT, typename T>
__device__ __forceinline__ void load_tile_sw_rs(uint32_t sbase, const T *g, int64_t row_stride,
                                                int rows, int d8, int tid) {
    constexpr int CH = D / 8, RS = NT / CH, ITERS = ROWS / RS;
    static_assert(NT % CH == 0 && RS % 8 == 0 && ROWS % RS == 0, "row-stepped tile / thread count");
    const int c = tid % CH, r0 = tid / CH;
    const bool cok = c < d8;
    const T *src = g + (int64_t)r0 * row_stride + c * 8;
    const int64_t step = (int64_t)RS * row_stride;
    const uint32_t dst = sbase + (c >> 3) * (ROWS * 128) + r0 * 128 + (((c ^ r0) & 7) << 4);
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
        const bool ok = cok && r0 + it * RS < rows;
        cp_async16_u32(dst + it * RS * 128, ok ? src : g, ok ? 16 : 0);
        src += step;
    }
}

#endif

/* Shared-memory matrix descriptor, 128-byte swizzle. */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3ffffu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3fffu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3fffu) << 32) | (1ull << 62);
}

/* The descriptor of the address `bytes` past the one d describes: the start
 * address is bits 0-13 in 16-byte units, and shared addresses stay below
 * 256 KB, so the sum never carries out of the field (one 32-bit add). */
__device__ __forceinline__ uint64_t wg_desc_add(uint64_t d, uint32_t bytes) {
    return (d & 0xffffffff00000000ull) | (uint32_t)((uint32_t)d + (bytes >> 4));
}

} /* namespace sf_wg */

#endif
