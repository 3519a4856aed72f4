/* configs.h - the tile configurations of sf_gemm_wq's CUDA kernel (one
 * kernel template, gemm_wq.cu): {name, BM rows of x, BN rows of W, warps
 * along M, along N, along K, BK elements of K per stage, stages, about}.
 * Warps along K split each stage's K range (128 elements each, so a group of
 * up to 128 never straddles two warps) and add their partial sums in the
 * epilogue.  wq_pick is the one selector; SF_AUTOTUNE_FORCE=gemm_wq:name
 * pins a row (tests/CMakeLists.txt runs the case table once per row). */
#ifndef SF_GEMM_WQ_CONFIGS_H
#define SF_GEMM_WQ_CONFIGS_H

#include <stdint.h>

typedef struct wq_config {
    const char *name;
    int bm, bn, wm, wn, wk, bk, stages;
    const char *about;
} wq_config;

/* one row a line (tools/configs.py and tests/CMakeLists.txt read them) */
static const wq_config wq_configs[] = {
    {"dec8", 8, 16, 1, 1, 4, 512, 4, "M <= 8: 16 rows of W x 8 rows of x per block, 4 warps split K, 4 stages of 512"},
    {"dec16", 16, 32, 1, 1, 4, 512, 3, "M <= 16: 32 rows of W x 16 rows of x, 4 warps split K, 3 stages of 512"},
    {"mid64", 64, 32, 2, 1, 2, 256, 4, "M <= 256: 32 rows of W x 64 rows of x, 2 x 2 warps (M, K), 4 stages of 256"},
    {"pre128", 128, 128, 4, 2, 1, 64, 4, "larger M: 128 x 128 tiles, 4 x 2 warps, 4 stages of 64"},
};
#define WQ_NCONFIGS ((int)(sizeof wq_configs / sizeof wq_configs[0]))

/* The untuned choice: the decode tiles while x fits one tile of rows (the
 * weights streamed once per 8 or 16 rows), then taller tiles. */
static inline int wq_pick(int64_t M) {
    if (M <= 8) return 0;
    if (M <= 16) return 1;
    if (M <= 256) return 2;
    return 3;
}

#endif
