/* configs.h - the attention forward's kernel configurations, as data.
 *
 * One row per configuration (one line each: tests/CMakeLists.txt and
 * tools/configs.py read the rows): its name, the kernel and its tile
 * parameters, and a sentence for README.md.  Row order is the untuned
 * default: with SF_AUTOTUNE=0, or under graph capture with nothing cached,
 * the first row whose attn_config_supports() accepts the shape runs ("auto",
 * the heuristic, serves everything).  The autotuner times every row that
 * supports the shape; each of them is picked somewhere in the H200 sweep
 * (bench/RESULTS.md), or serves what the others cannot (wgmma: varlen on
 * sm_90a; mma: other GPUs and head dims).
 */
#ifndef SF_ATTN_CONFIGS_H
#define SF_ATTN_CONFIGS_H

#include "common/config_table.h"

enum class AttnKernel {
    heuristic, /* ws with the tile rows the length suggests, else wgmma, else mma */
    ws,        /* attn_fwd_ws: TMA + warp-specialised wgmma, one CTA per tile     */
    wsp,       /* attn_fwd_wsp: the same kernel persistent over a tile schedule   */
    wgmma,     /* attn_fwd_wgmma: wgmma with a cp.async double buffer            */
    mma,       /* attn_fwd_mma: mma.sync (sm_80 and later)                       */
};

struct AttnConfig {
    const char *name;
    AttnKernel kernel;
    int bm;      /* query rows of a tile (ws / wsp)                         */
    int bn;      /* keys of a tile; 0: the head dim's default (WsBn)        */
    int cluster; /* CTAs of a cluster sharing each K/V stage by multicast    */
    const char *about;
};

static const AttnConfig attn_configs[] = {
    {"auto", AttnKernel::heuristic, 0, 0, 1, "the heuristic: ws (192 query rows at d 64 from L 512, causal 1024), else wgmma, else mma"},
    {"ws128", AttnKernel::ws, 128, 0, 1, "sm_90a, dense, d 64 / 128 / 192 / 256: 128 query rows a CTA, producer warpgroup + 2 consumers in pingpong (d 256 at L >= 1024)"},
    {"ws192", AttnKernel::ws, 192, 0, 1, "sm_90a, dense, d 64: 192 query rows, 3 consumer warpgroups"},
    {"wgmma", AttnKernel::wgmma, 128, 0, 1, "sm_90a, d <= 256: wgmma with a cp.async double buffer; serves varlen batches"},
    {"mma", AttnKernel::mma, 0, 0, 1, "any GPU, any head dim 1..256, any strides, softcap and ALiBi: FlashAttention-2 on mma.sync"},
    {"wsp128", AttnKernel::wsp, 128, 0, 1, "ws128 persistent: one CTA per SM over L2-sized sections of tiles, the next tile's loads under this tile's epilogue (d 64 / 128 / 256)"},
    {"wsp192", AttnKernel::wsp, 192, 0, 1, "ws192 persistent (d 64)"},
    {"wsp128k112", AttnKernel::wsp, 128, 112, 1, "wsp128 at d 64 with 112-key tiles: less padding for short sequences (ViT's 196 keys)"},
    {"wsp128k64", AttnKernel::wsp, 128, 64, 1, "wsp128 at d 256 with 64-key tiles: no padding where L is a multiple of 64 (L 512)"},
    {"wsp128c2", AttnKernel::wsp, 128, 0, 2, "wsp128 at d 128, full attention, in clusters of two CTAs that multicast each K/V stage (less energy a call: long sequences at the power cap)"},
};
static const int ATTN_NCONFIG = (int)(sizeof attn_configs / sizeof attn_configs[0]);

#endif
