/* configs.h - the SSD forward's kernel configurations, as data.
 *
 * One row per configuration (one line each: tests/CMakeLists.txt and
 * tools/configs.py read the rows): its name, the path that runs it and that
 * path's parameters, and a sentence for README.md.  Row order is the untuned
 * default: with SF_AUTOTUNE=0, or under graph capture with nothing cached,
 * the first row whose ssd_config_supports() accepts the shape runs.  The
 * autotuner times every row that supports the shape (wgq and fuq win the
 * 16-bit shapes on the H200, fg32 the f32 ones); the rest serve what those
 * cannot.  Variants measured and dropped: bench/RESULTS.md, tried and lost.
 */
#ifndef SF_SSD_CONFIGS_H
#define SF_SSD_CONFIGS_H

#include "common/config_table.h"

enum class SsdPath {
    hopper16, /* sm_90a wgmma, 16-bit: cumsum, C B^T, states, balanced output   */
    tf32_seg, /* sm_90a TF32 wgmma, f32: states in segments, output walking them */
    split32,  /* any GPU, f32: every chunk's state at once, sub-chunk output   */
    general,  /* any GPU: everything (varlen, N <= 256, any alignment)         */
    split,    /* any GPU: every chunk's state at once, the general output      */
};

struct SsdConfig {
    const char *name;
    SsdPath path;
    bool multicast;      /* hopper16: chunk states of head pairs share B (TMA) */
    bool fused_states;   /* hopper16: chunk states and the walk in one kernel  */
    int seg_chunks;      /* tf32_seg: chunks per segment                       */
    const char *about;
};

static const SsdConfig ssd_configs[] = {
    {"wgq", SsdPath::hopper16, true, false, 0, "bf16/f16 on sm_90a: C B^T once per chunk, chunk states of head pairs sharing B by TMA multicast, a scan, the output on one block per SM over balanced ranges (wins at b 1 L 16384)"},
    {"fuq", SsdPath::hopper16, false, true, 0, "bf16/f16 on sm_90a: wgq with chunk states and the walk over chunks fused in one kernel (wins at b 8 L 4096; serves odd heads per group)"},
    {"fg32", SsdPath::tf32_seg, false, false, 8, "f32 on sm_90a (P % 64 == 0, N <= 128, N % 8 == 0): TF32 wgmma, end states of 8-chunk segments, a scan over segments, an output kernel walking each segment"},
    {"split32", SsdPath::split32, false, false, 0, "f32 dense batches on any GPU (P % 64 == 0, N <= 128): every chunk's state at once on mma.sync, the sub-chunk-state output kernel"},
    {"general", SsdPath::general, false, false, 0, "any GPU, any shape: varlen, N <= 256, any alignment; states walked per (b, head, slice), output on mma.sync"},
    {"split", SsdPath::split, false, false, 0, "dense batches on any GPU (chunk 128 / 256): every chunk's state at once on mma.sync, then a scan, the general output kernel"},
};
static const int SSD_NCONFIG = (int)(sizeof ssd_configs / sizeof ssd_configs[0]);

#endif
