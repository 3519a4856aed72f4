/* configs.h - sf_attn_paged's CUDA kernel configurations, as data: {name,
 * kernel, keys a tile, stages, about}.  One row a line (tests/CMakeLists.txt
 * and tools/configs.py read the rows).  Row 0, "auto", is the heuristic and
 * serves every problem; with SF_AUTOTUNE=0, or under graph capture with
 * nothing cached, it runs.  The autotuner times every row that supports the
 * problem (paged_config_run in paged.cu says why a row cannot);
 * SF_AUTOTUNE_FORCE=attn_paged:NAME pins one. */
#ifndef SF_PAGED_CONFIGS_H
#define SF_PAGED_CONFIGS_H

#include "common/config_table.h"

enum class PagedKernel {
    heuristic, /* bulk64s3 where it serves, else mma                        */
    mma,       /* paged_attn (decode.cuh): per-warp cp.async rings, mma.sync */
    bulk,      /* paged_attn_bulk (decode_bulk.cuh): producer warp, bulk copies */
};

struct PagedConfig {
    const char *name;
    PagedKernel kernel;
    int keys;   /* bulk: keys a tile (16 a consumer warp)   */
    int stages; /* bulk: tiles in the shared-memory ring    */
    const char *about;
};

static const PagedConfig paged_configs[] = {
    {"auto", PagedKernel::heuristic, 0, 0, "the heuristic: bulk64s3 on sm_90a with 16-bit pools, else mma"},
    {"mma", PagedKernel::mma, 0, 0, "any GPU (sm_80+), 16-bit and FP8 pools, any page size: 4 warps each on every 4th 16-key tile with its own 2-stage cp.async ring, mma.sync; validation and the split merge in kernels of their own"},
    {"bulk64s3", PagedKernel::bulk, 64, 3, "sm_90a, 16-bit pools, any page size: a producer warp copies each K and V row of 64-key tiles (cp.async.bulk) into a 3-stage ring, 4 consumer warps on mma.sync; validation and the split merge fused"},
    {"bulk32s4", PagedKernel::bulk, 32, 4, "bulk64s3 with 32-key tiles, 2 consumer warps and 4 stages: smaller blocks, more of them an SM"},
};
static const int PAGED_NCONFIG = (int)(sizeof paged_configs / sizeof paged_configs[0]);

#endif
