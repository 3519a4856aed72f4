/* tmap.h - TMA tensor maps for the sm_90a kernels (host code, included by
 * the .cu files that launch them): the driver's cuTensorMapEncodeTiled,
 * reached through cudaGetDriverEntryPointByVersion (no -lcuda), and the
 * 4-D (columns, rows, heads, batch) 16-bit map with 128-byte swizzle that
 * the attention Q / K / V tiles and the SSD B tiles use. */
#ifndef SF_TMAP_H
#define SF_TMAP_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>

static inline PFN_cuTensorMapEncodeTiled_v12000 tmap_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        PFN_cuTensorMapEncodeTiled_v12000 r = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                             &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            r = (PFN_cuTensorMapEncodeTiled_v12000)f;
        (void)cudaGetLastError();
        return r;
    }();
    return fn;
}

/* (d, rows, heads, batch) map with 64 x 128-row boxes, 128-byte swizzle;
 * rows past `rows` read as zeros.  A size-1 dimension gets a harmless
 * stride (the API leaves it free, TMA wants multiples of 16 bytes).
 * false when the driver refuses it (the caller falls back). */
static inline bool make_tmap(CUtensorMap *m, bool bf16, const void *ptr, int64_t d, int64_t rows, int64_t heads,
                             int64_t batch, int64_t sr, int64_t sh, int64_t sb, unsigned box_rows = 128) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = tmap_encoder();
    if (!enc) return false;
    if (heads == 1) sh = sr * rows;
    if (batch == 1) sb = (heads == 1 ? sr * rows : sh * heads);
    const int64_t st[3] = {sr * 2, sh * 2, sb * 2};
    for (int i = 0; i < 3; i++)
        if (st[i] <= 0 || st[i] % 16 != 0 || st[i] >= (1LL << 40)) return false;
    cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)batch};
    cuuint64_t strides[3] = {(cuuint64_t)st[0], (cuuint64_t)st[1], (cuuint64_t)st[2]};
    cuuint32_t box[4] = {64, box_rows, 1, 1};
    cuuint32_t es[4] = {1, 1, 1, 1};
    CUresult r = enc(m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                     const_cast<void *>(ptr), dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

/* (d, rows, heads, batch) map of 1-byte elements (FP8 codes) with boxes of
 * 128 columns x box_rows, 128-byte swizzle; strides in bytes.  false when
 * the driver refuses it. */
static inline bool make_tmap_u8(CUtensorMap *m, const void *ptr, int64_t d, int64_t rows, int64_t heads,
                                int64_t batch, int64_t sr, int64_t sh, int64_t sb, unsigned box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = tmap_encoder();
    if (!enc) return false;
    if (heads == 1) sh = sr * rows;
    if (batch == 1) sb = (heads == 1 ? sr * rows : sh * heads);
    const int64_t st[3] = {sr, sh, sb};
    for (int i = 0; i < 3; i++)
        if (st[i] <= 0 || st[i] % 16 != 0 || st[i] >= (1LL << 40)) return false;
    cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)batch};
    cuuint64_t strides[3] = {(cuuint64_t)st[0], (cuuint64_t)st[1], (cuuint64_t)st[2]};
    cuuint32_t box[4] = {128, box_rows, 1, 1};
    cuuint32_t es[4] = {1, 1, 1, 1};
    CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void *>(ptr), dims, strides, box, es,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

#endif
