/* dec_gemv_configs.h - the configuration rows of the engine's decode-step
 * products (layer/dec_gemv.h) as data: {name, warps along K, blocks an SM
 * the register cap allows, about}, one row a line (tools/configs.py reads
 * them).  Row 0, "auto", is the heuristic; SF_AUTOTUNE_FORCE=dec_gemv:NAME
 * pins a row for the plain and res products.  Every row: 8 chunks of
 * 16-byte weight loads in flight a warp, each warp a contiguous range of
 * K, a 256-byte L2 prefetch with each load (sf_gemm_swiglu's dec4 row); a
 * block takes 16 outputs (swiglu: 8).  Engine, ms a decode step (H100,
 * same run): w8 for the plain and res products 1.317 at llama-1b batch 1
 * and 0.808 at smollm2-135m, against 1.373 / 0.859 with 16 warps and
 * 1.482 / 0.841 with w4 (bench/RESULTS.md). */
#ifndef SF_DEC_GEMV_CONFIGS_H
#define SF_DEC_GEMV_CONFIGS_H

struct DgConfig {
    const char *name;
    int wk;   /* warps along K                        */
    int minb; /* blocks an SM the register cap allows */
    const char *about;
};

static const DgConfig dg_configs[] = {
    {"auto", 0, 0, "the heuristic: w8 for plain and res products, w4 for swiglu"},
    {"w8", 8, 2, "8 warps along K, two blocks an SM"},
    {"w4", 4, 4, "4 warps along K, four blocks an SM (sf_gemm_swiglu's dec4)"},
};
static const int DG_NCONFIG = (int)(sizeof dg_configs / sizeof dg_configs[0]);

#endif
