/* bwd_configs.h - the attention backward's configurations (sf_attn_bwd on
 * CUDA), as data: one row a line, {"name", kernel, dmax, "about"}, read by
 * the launcher (bwd.cu), tools/configs.py (README.md) and the pinned tests
 * (tests/CMakeLists.txt).  In order of preference: the first row whose
 * supports() passes serves a call unless SF_AUTOTUNE_FORCE=attn_bwd:<name>
 * names another.
 */
#ifndef SF_ATTN_BWD_CONFIGS_H
#define SF_ATTN_BWD_CONFIGS_H

#include "internal.h"

namespace sf_attn {

/* The configurations, as data, in order of preference: the kernel of the
 * dK/dV pass, the largest head dim it holds (its dK/dV registers and
 * shared tiles are sized for it) and, for the wg and FA2 rows, the query
 * rows a block and the CTAs an SM its registers are capped for (0 for
 * simt). */
enum class BwdKernel { ws, wg, fa2, simt };
struct BwdConfig {
    const char *name;
    BwdKernel kernel;
    int dmax;
    int qrows;
    int ctas;
    const char *about;
};
inline const BwdConfig bwd_configs[] = {
    {"ws64", BwdKernel::ws, 64, 64, 1, "sm_90a warp-specialised (bwd_ws.cuh): the wg64 tiles and products on 2 consumer warpgroups, a producer warp loading Q and dO by TMA (2 stages), a writer warp adding the dQ partials by bulk reduce-adds; dense batches, d <= 64, d % 8 == 0, 16-byte aligned rows"},
    {"ws128", BwdKernel::ws, 128, 64, 1, "sm_90a warp-specialised (bwd_ws.cuh) as ws64, d <= 128"},
    {"wg64", BwdKernel::wg, 64, 64, 1, "sm_90a wgmma (bwd_wg.cuh): 2 warpgroups, 128 keys kept, 64-row query blocks by cp.async (2 stages), dQ on wgmma from dS in shared memory, added by bulk reduce-adds (cp.reduce.async.bulk) of 16 KB shared tiles; d <= 64, d % 8 == 0, 16-byte aligned rows"},
    {"wg128", BwdKernel::wg, 128, 64, 1, "sm_90a wgmma (bwd_wg.cuh) as wg64, d <= 128"},
    {"wg256", BwdKernel::wg, 256, 64, 1, "sm_90a wgmma (bwd_wg256.cuh): 2 warpgroups each holding half the columns of 64 keys' dK and dV, 64-row query blocks by cp.async (2 stages), P and dS through shared memory, dQ added by red.global.add.v4 from the fragments; d <= 256, d % 8 == 0, 16-byte aligned rows"},
    {"fa64q32x2", BwdKernel::fa2, 64, 32, 2, "FA2 scheme at d <= 64: 8 warps, 128 keys kept, 32-row query blocks by cp.async (2 stages), registers capped for 2 CTAs an SM (65 KB of shared memory each)"},
    {"fa64", BwdKernel::fa2, 64, 64, 1, "FA2 scheme: 8 warps, 128 keys kept, 64-row query blocks by cp.async (2 stages), d <= 64"},
    {"fa128", BwdKernel::fa2, 128, 64, 1, "FA2 scheme: 8 warps, 128 keys kept, 64-row query blocks by cp.async (2 stages), d <= 128"},
    {"simt64", BwdKernel::simt, 64, 0, 0, "f32 FMAs, tiles 32 x 32, d <= 64"},
    {"simt128", BwdKernel::simt, 128, 0, 0, "f32 FMAs, tiles 32 x 32, d <= 128"},
    {"simt256", BwdKernel::simt, 256, 0, 0, "f32 FMAs, tiles 32 x 32, d <= 256 (140 KB of shared memory)"},
};

/* Keys a CTA of a row's dK / dV pass holds: 64 at d > 128 on wgmma (dK
 * and dV of 64 keys at d 256 fill half the register file), 32 on simt,
 * else 128. */
constexpr int bwd_keys(BwdKernel k, int dmax) {
    return k == BwdKernel::simt ? 32 : k == BwdKernel::wg && dmax > 128 ? 64 : 128;
}

/* NULL when configuration c can serve head dim d in dtype dt, else the
 * reason; vec16: d % 8 == 0 and the q, k, v, dout rows 16-byte aligned;
 * sm90a: an sm_90 GPU and a build with sm_90a code; varlen: a packed batch. */
inline const char *bwd_config_supports(const BwdConfig &c, int d, sf_dtype dt, bool vec16, bool sm90a, bool varlen) {
    const bool hopper = c.kernel == BwdKernel::wg || c.kernel == BwdKernel::ws;
    if (d > c.dmax) return "head dim larger than the configuration's";
    if (c.kernel != BwdKernel::simt && dt == SF_F32) return "f32 operands (tensor cores take f16/bf16)";
    if (hopper && !sm90a) return "it needs an sm_90 GPU and a build with sm_90a code";
    if (hopper && !vec16) return "it needs d % 8 == 0 and 16-byte aligned q, k, v, dout rows";
    if (c.kernel == BwdKernel::ws && varlen) return "packed (varlen) batches: TMA tiles would read across sequences";
    return nullptr;
}

} /* namespace sf_attn */

#endif
