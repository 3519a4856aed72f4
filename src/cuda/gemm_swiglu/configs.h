/* configs.h - the kernel configurations of sf_gemm_swiglu's CUDA backend,
 * as data: {name, kernel, outputs per tile (BN), stages, row tiles per L2
 * group, warps along K, chunks in flight, blocks per SM, L2 prefetch,
 * contiguous K ranges, cluster, about}.  One row a line (tests/CMakeLists.txt and
 * tools/configs.py read the rows).  Row 0, "auto", is the heuristic and
 * serves every shape; with SF_AUTOTUNE=0 or under graph capture with nothing
 * cached it runs.  The autotuner times every row that supports the shape
 * (gs_supports in gemm_swiglu.cu); SF_AUTOTUNE_FORCE=gemm_swiglu:NAME pins
 * one.  Llama-8B (K 4096, I 14336), CUDA-graph timings (H100): dec4 at
 * M 1 and 16 (0.082 / 0.084 ms against ws128's 0.085 at M 16), ws128 at
 * M 64, ws64 / ws128c2 within noise at M 512, ws128c2 at M 4096
 * (bench/RESULTS.md). */
#ifndef SF_GEMM_SWIGLU_CONFIGS_H
#define SF_GEMM_SWIGLU_CONFIGS_H

#include "common/config_table.h"

enum class GsKernel {
    heuristic, /* dec4 to M 16, ws128 to M 256, ws64 to 1023, ws128c2 (when they serve) */
    ws,        /* gs_ws_kernel: TMA + warp-specialised wgmma, persistent (ws.cuh)   */
    dec,       /* gs_dec_kernel: weight streaming on mma.sync (decode.cuh)          */
};

struct GsConfig {
    const char *name;
    GsKernel kernel;
    int bn;     /* ws: outputs per tile (B tile: bn gate + bn up rows)          */
    int stages; /* ws: pipeline stages of 64 K elements                          */
    int gm;     /* ws: row tiles per L2 group                                    */
    int wk;     /* dec: warps along K                                            */
    int u;      /* dec: 32-element chunks of each weight row in flight per warp  */
    int minb;   /* dec: blocks per SM the register cap must allow                */
    int pf;     /* dec: 256-byte L2 prefetch with each weight load               */
    int contig; /* dec: each warp a contiguous range of K (else interleaved)     */
    int cluster; /* ws: CTAs of a cluster sharing each weight tile by multicast  */
    const char *about;
};

static const GsConfig gs_configs[] = {
    {"auto", GsKernel::heuristic, 0, 0, 0, 0, 0, 0, 0, 0, 1, "the heuristic: dec4 to M 16, ws128 to M 256, ws64 below M 1024, ws128c2 from there (dec4 where TMA cannot map the tensors)"},
    {"dec4", GsKernel::dec, 0, 0, 0, 4, 8, 4, 1, 1, 1, "any GPU, any shape and alignment: 8 outputs a block, 4 warps each on a quarter of K, 8 chunks of 16-byte weight loads in flight with a 256-byte L2 prefetch, 4 blocks an SM (no spills), mma.sync (decode, M <= 16; 16 rows of x per pass over the weights)"},
    {"ws128", GsKernel::ws, 128, 4, 16, 0, 0, 0, 0, 0, 1, "sm_90a, 16-byte aligned rows: 128 x 128-output tiles (wgmma n 256: gate | up), 4 stages, persistent, groups of 16 row tiles"},
    {"ws64", GsKernel::ws, 64, 6, 8, 0, 0, 0, 0, 0, 1, "sm_90a, 16-byte aligned rows: 128 x 64-output tiles (wgmma n 128), 6 stages, persistent: twice the tiles for mid-size M"},
    {"ws128c2", GsKernel::ws, 128, 4, 8, 0, 0, 0, 0, 0, 2, "ws128 in clusters of two CTAs on neighbouring row tiles, each weight tile multicast into both: half the weight traffic from L2, less energy a call (large M at the power cap)"},
};
static const int GS_NCONFIG = (int)(sizeof gs_configs / sizeof gs_configs[0]);

#endif
