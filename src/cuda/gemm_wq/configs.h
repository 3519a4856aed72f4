/* configs.h - the configurations of sf_gemm_wq's CUDA kernels, three kinds:
 *   tiled rows (kind 0), one kernel template (gemm_wq.cu): {name, 0, BM
 *     rows of x, BN rows of W, warps along M, along N, along K, BK elements
 *     of K per stage, stages, about}.  Warps along K split each stage's K
 *     range (128 elements each, so a group of up to 128 never straddles two
 *     warps) and add their partial sums in the epilogue.
 *   streaming decode rows (kind 1, decode.cuh): {name, 1, most rows of x,
 *     rows of W per block, m16 tiles per warp, warps, 1, 0, chunks of codes
 *     held in registers ahead, xg, about}; they serve a group_size that is a
 *     multiple of a chunk (128 int4, 64 int8 codes) and split K across a
 *     cluster of blocks; xg 1: x's fragments read from global memory in the
 *     loop (decode.cuh's XG), SF_QW_TILED codes only.
 *   the slab row (kind 2, slab.cuh): {name, 2, fewest rows of x, 0...}: W
 *     dequantised a slab of rows at a time into an L2-sized workspace
 *     buffer, each slab multiplied by cuBLAS; for many rows of x, where the
 *     product is compute-bound and the codes' bandwidth saving is moot.
 * wq_pick is the one selector; SF_AUTOTUNE_FORCE=gemm_wq:name pins a row
 * (tests/CMakeLists.txt runs the case table once per row; a row that cannot
 * serve a case answers SF_ERR_UNSUPPORTED and the case is skipped). */
#ifndef SF_GEMM_WQ_CONFIGS_H
#define SF_GEMM_WQ_CONFIGS_H

#include <stdint.h>
#include <string.h>

typedef struct wq_config {
    const char *name;
    int kind;              /* WQ_TILED, WQ_STREAM or WQ_SLAB */
    int bm, bn, wm, wn, wk, bk, stages;
    int xg;                /* stream rows: x from global memory (tiled codes) */
    const char *about;
} wq_config;

enum { WQ_TILED = 0, WQ_STREAM = 1, WQ_SLAB = 2 };

/* one row a line (tools/configs.py and tests/CMakeLists.txt read them) */
static const wq_config wq_configs[] = {
    {"stream", 1, 16, 128, 1, 8, 1, 0, 4, 0, "M <= 16 with groups of whole chunks (128 int4 / 64 int8 codes), M <= 2 / 4 with int4 groups of 32 / 64 and M <= 4 with int8 groups of 32 (GGUF's blocks): codes streamed into registers 4 chunks ahead, 128 rows of W a block (8 warps), K split over a cluster"},
    {"dec8", 0, 8, 16, 1, 1, 4, 512, 4, 0, "M <= 8: 16 rows of W x 8 rows of x per block, 4 warps split K, 4 stages of 512"},
    {"dec16", 0, 16, 32, 1, 1, 4, 512, 3, 0, "M <= 16: 32 rows of W x 16 rows of x, 4 warps split K, 3 stages of 512"},
    {"mid64", 0, 64, 32, 2, 1, 2, 256, 4, 0, "M <= 256: 32 rows of W x 64 rows of x, 2 x 2 warps (M, K), 4 stages of 256"},
    {"pre128", 0, 128, 128, 4, 2, 1, 64, 4, 0, "larger M: 128 x 128 tiles, 4 x 2 warps, 4 stages of 64"},
    {"slab", 2, 17, 0, 0, 0, 0, 0, 0, 0, "M > 16, no bias: W dequantised to x's dtype in slabs of 16 MiB or 2048 rows, each slab a cuBLAS product; the weights are rounded to x's dtype"},
    {"streamxg", 1, 16, 256, 2, 8, 1, 0, 2, 1, "SF_QW_TILED codes, the stream row's M and groups: the stream kernel with two m16 tiles a warp sharing x's fragments (256 rows of W a block), 2 chunks ahead, and x's fragments read from global memory (L1) in the loop instead of staged in shared memory first; for wide W (gate, gate+up), where it keeps enough warps"},
};
#define WQ_NCONFIGS ((int)(sizeof wq_configs / sizeof wq_configs[0]))

/* The row named `name`, or -1. */
static inline int wq_row(const char *name) {
    for (int i = 0; i < WQ_NCONFIGS; i++)
        if (!strcmp(wq_configs[i].name, name)) return i;
    return -1;
}

/* Groups a chunk of the stream rows (128 int4 / 64 int8 codes): 1 for
 * groups of whole chunks, else decode.cuh's GP (2 or 4). */
static inline int wq_chunk_groups(int int4, int group) {
    const int chunk = int4 ? 128 : 64;
    return group < chunk ? chunk / group : 1;
}

/* Whether row `cfg` serves M rows of x with these codes (tiled: the codes
 * are SF_QW_TILED); the tiled rows serve every shape, slowly past their M. */
static inline int wq_supports(int cfg, int64_t M, int64_t K, int int4, int group, int has_bias, int tiled) {
    const wq_config *c = &wq_configs[cfg];
    if (c->kind == WQ_TILED) return 1;
    if (c->kind == WQ_SLAB) return M >= c->bm && !has_bias;
    /* groups smaller than a chunk (128 int4 / 64 int8 codes): decode.cuh's
     * GP, M <= 8 / (groups a chunk), K whole chunks (a chunk's codes and
     * scales lie inside the rows) */
    const int chunk = int4 ? 128 : 64, gp = wq_chunk_groups(int4, group);
    return M <= (gp > 1 ? 8 / gp : c->bm) && (gp > 1 ? K % chunk == 0 : group % chunk == 0) && (!c->xg || tiled);
}

/* Rows of x from which the slab row beats the tiles (H200). */
#define WQ_SLAB_FROM 17

/* The untuned choice: the streaming decode kernel where it serves, as
 * 'streamxg' for tiled codes of a wide W (at least 3/4 as many 128-row
 * bands as SMs: Llama-8B's gate 14336 and gate+up 28672 rows, where it took
 * 6-32% off 'stream' at M 1-16 on the H100; on 4096 rows its 32 rows a warp
 * leave too few warps and 'stream' wins), the decode tiles while x fits one tile
 * of rows (the weights streamed once per 8 or 16 rows), then taller tiles. */
static inline int wq_pick(int64_t M, int64_t N, int64_t K, int sms, int int4, int group, int has_bias, int tiled) {
    const int xg = wq_row("streamxg"), st = wq_row("stream"), slab = wq_row("slab");
    if (tiled && 4 * ((N + 127) / 128) >= 3 * (int64_t)sms && wq_supports(xg, M, K, int4, group, has_bias, tiled))
        return xg;
    if (wq_supports(st, M, K, int4, group, has_bias, tiled)) return st;
    if (M <= 8) return wq_row("dec8");
    if (M <= 16) return wq_row("dec16");
    if (M >= WQ_SLAB_FROM && wq_supports(slab, M, K, int4, group, has_bias, tiled)) return slab;
    if (M <= 256) return wq_row("mid64");
    return wq_row("pre128");
}

#endif
