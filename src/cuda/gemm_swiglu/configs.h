/* configs.h - the kernel configurations of sf_gemm_swiglu's CUDA backend,
 * as data: {name, kernel, outputs per tile (BN), stages, row tiles per L2
 * group, warps along K, blocks per SM, L2 prefetch, contiguous K ranges,
 * cluster, about}.  One row a line (tests/CMakeLists.txt and
 * tools/configs.py read the rows).  Row 0, "auto", is the heuristic and
 * serves every shape; with SF_AUTOTUNE=0 or under graph capture with nothing
 * cached it runs.  The autotuner times every row that supports the shape
 * (gs_supports in gemm_swiglu.cu); SF_AUTOTUNE_FORCE=gemm_swiglu:NAME pins
 * one.  Llama-8B (K 4096, I 14336), CUDA-graph timings: dcp512 at M 1
 * (H100: 0.093 ms against dec4's 0.116), ws128 at M 16 (H100 0.085 against
 * dec4's 0.117; H200 0.076 against 0.079) and 64, ws64 /
 * ws128c2 within noise at M 512, ws128c2 at M 4096 (bench/RESULTS.md). */
#ifndef SF_GEMM_SWIGLU_CONFIGS_H
#define SF_GEMM_SWIGLU_CONFIGS_H

#include "common/config_table.h"

enum class GsKernel {
    heuristic, /* dcp512 at M <= 8, ws128 to M 256, ws64 to 1023, ws128c2 (when they serve) */
    ws,        /* gs_ws_kernel: TMA + warp-specialised wgmma, persistent (ws.cuh)   */
    dec,       /* gs_dec_kernel: weight streaming on mma.sync (decode.cuh)          */
    dcp,       /* gs_dcp_kernel: weights staged by cp.async, mma.sync (decode_cp.cuh) */
};

struct GsConfig {
    const char *name;
    GsKernel kernel;
    int bn;     /* ws: outputs per tile (B tile: bn gate + bn up rows)          */
    int stages; /* ws: pipeline stages of 64 K elements                          */
    int gm;     /* ws: row tiles per L2 group                                    */
    int wk;     /* dec: warps along K (4 chunk loads in flight per warp)        */
    int minb;   /* dec: blocks per SM the register cap must allow                */
    int pf;     /* dec: 256-byte L2 prefetch with each weight load               */
    int contig; /* dec: each warp a contiguous range of K (else interleaved)     */
    int cluster; /* ws: CTAs of a cluster sharing each weight tile by multicast  */
    int ks;     /* dcp: K elements a stage (stages: the ring's depth)            */
    const char *about;
};

static const GsConfig gs_configs[] = {
    {"auto", GsKernel::heuristic, 0, 0, 0, 0, 0, 0, 0, 1, 0, "the heuristic: dcp512 at M <= 8 (aligned), ws128 to M 256, ws64 below M 1024, ws128c2 from there (dec4 where TMA cannot map the tensors)"},
    {"dec4", GsKernel::dec, 0, 0, 0, 4, 7, 1, 1, 1, 0, "any GPU, any shape and alignment: 8 outputs a block, 4 warps each on a quarter of K, 16-byte weight loads with a 256-byte L2 prefetch, 7 blocks an SM, mma.sync (decode, M <= 16; 16 rows of x per pass over the weights)"},
    {"ws128", GsKernel::ws, 128, 4, 16, 0, 0, 0, 0, 1, 0, "sm_90a, 16-byte aligned rows: 128 x 128-output tiles (wgmma n 256: gate | up), 4 stages, persistent, groups of 16 row tiles"},
    {"ws64", GsKernel::ws, 64, 6, 8, 0, 0, 0, 0, 1, 0, "sm_90a, 16-byte aligned rows: 128 x 64-output tiles (wgmma n 128), 6 stages, persistent: twice the tiles for mid-size M"},
    {"ws128c2", GsKernel::ws, 128, 4, 8, 0, 0, 0, 0, 2, 0, "ws128 in clusters of two CTAs on neighbouring row tiles, each weight tile multicast into both: half the weight traffic from L2, less energy a call (large M at the power cap)"},
    {"dcp512", GsKernel::dcp, 0, 4, 0, 4, 0, 0, 0, 1, 512, "any GPU, K a multiple of 8, 16-byte aligned rows, M <= 8: 8 outputs a block, their 16 weight rows staged by cp.async in 4 stages of 512 K elements (512-byte warp copies), ldmatrix + mma.sync over 4 warps (decode)"},
};
static const int GS_NCONFIG = (int)(sizeof gs_configs / sizeof gs_configs[0]);

#endif
