// selftest_emu_main.cpp - the emulator's own primitives on small kernels
// written here, against host results:
//   ring   a two-stage producer / consumer ring on mbarriers: one producer
//          thread fills a stage by cp.async.bulk after the stage's "empty"
//          mbarrier, four consumer warps read it after its "full" one (its
//          transaction bytes) and arrive on "empty"; 40 tiles, so each
//          barrier runs many phases, parity wrapping included.
//   tx     the bytes arriving before the expect_tx of the same phase (the
//          count goes below 0 and the phase still completes once).
// Built and run by run_selftest_emu.sh; argument: a test name (default all).
// A wrong expect_tx or a missing arrival shows as the deadlock report.
#include "common/cuda_common.h"
#include "common/ptx.cuh"
#include "common/wgmma.cuh"

#include <string>
#include <vector>

using namespace sf_wg;

struct RingArgs {
    const float *src;
    float *out;
    int tiles;
};
constexpr uint32_t STAGE_BYTES = 1024, BAR = 4096; /* full[s] at BAR + 8 s, empty[s] at BAR + 16 + 8 s */

static void ring_kernel(const RingArgs a) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        for (int s = 0; s < 2; s++) {
            mbar_init(BAR + 8 * s, 1);
            mbar_init(BAR + 16 + 8 * s, 4); /* one lane of each consumer warp */
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (warp == 0) {
        if (lane == 0)
            for (int t = 0; t < a.tiles; t++) {
                const int s = t & 1;
                const uint32_t ph = (t >> 1) & 1;
                mbar_wait(BAR + 16 + 8 * s, ph ^ 1u); /* the consumers freed the stage */
                mbar_expect_tx(BAR + 8 * s, STAGE_BYTES);
                bulk_copy_g2s(s * STAGE_BYTES, a.src + (size_t)t * 256, STAGE_BYTES, BAR + 8 * s);
            }
        return;
    }
    const int cw = warp - 1;
    float acc = 0.0f;
    for (int t = 0; t < a.tiles; t++) {
        const int s = t & 1;
        mbar_wait(BAR + 8 * s, (t >> 1) & 1);
        const float *buf = (const float *)emu_sptr(s * STAGE_BYTES);
        acc += (t + 1) * (buf[cw * 64 + lane] + buf[cw * 64 + 32 + lane]);
        __syncwarp();
        if (lane == 0) mbar_arrive(BAR + 16 + 8 * s);
    }
    a.out[threadIdx.x - 32] = acc;
}

static int test_ring() {
    const int tiles = 40;
    std::vector<float> src((size_t)tiles * 256), out(128, -1.0f);
    for (size_t i = 0; i < src.size(); i++) src[i] = (float)((i * 7919) % 1000) / 64.0f;
    emu_launch(ring_kernel, dim3(3), dim3(160), 8192, RingArgs{src.data(), out.data(), tiles});
    int bad = 0;
    for (int i = 0; i < 128; i++) {
        const int cw = i / 32, lane = i % 32;
        double want = 0.0;
        for (int t = 0; t < tiles; t++)
            want += (t + 1) * ((double)src[(size_t)t * 256 + cw * 64 + lane] + src[(size_t)t * 256 + cw * 64 + 32 + lane]);
        if (fabs(out[i] - want) > 1e-6 * fabs(want) + 1e-3) bad++;
    }
    printf("%s ring: %d of 128 consumer sums wrong\n", bad ? "FAIL" : "PASS", bad);
    return bad != 0;
}

struct TxArgs {
    const float *src;
    float *out;
};
static void tx_kernel(const TxArgs a) {
    if (threadIdx.x == 0) mbar_init(BAR, 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        bulk_copy_g2s(0, a.src, 512, BAR);      /* bytes first: the count goes to -512 */
        mbar_expect_tx(BAR, 512);               /* then the arrival with its bytes */
    }
    mbar_wait(BAR, 0);
    a.out[threadIdx.x] = ((const float *)emu_sptr(0))[threadIdx.x];
}

static int test_tx() {
    std::vector<float> src(128), out(64, -1.0f);
    for (int i = 0; i < 128; i++) src[i] = (float)i;
    emu_launch(tx_kernel, dim3(1), dim3(64), 4096, TxArgs{src.data(), out.data()});
    int bad = 0;
    for (int i = 0; i < 64; i++) bad += out[i] != src[i];
    printf("%s tx: %d of 64 wrong\n", bad ? "FAIL" : "PASS", bad);
    return bad != 0;
}

int main(int argc, char **argv) {
    const std::string only = argc > 1 ? argv[1] : "";
    int fails = 0;
    if (only.empty() || only == "ring") fails += test_ring();
    if (only.empty() || only == "tx") fails += test_tx();
    return fails ? 1 : 0;
}
