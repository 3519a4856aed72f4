// launch.cuh (emulation) - sf_launch_ex on the host: a programmatic
// dependent launch runs as a plain one (the emulator runs kernels in order);
// clusters are not emulated, so a launch in clusters of more than one CTA
// aborts.
#pragma once
#include "common/cuda_common.h"

template <typename... KA, typename... A>
static int sf_launch_ex(void (*kern)(KA...), dim3 grid, dim3 block, size_t smem, cudaStream_t, bool,
                        unsigned cluster, A &&...args) {
    if (cluster > 1) {
        fprintf(stderr, "EMU: a launch in clusters of %u CTAs (not emulated)\n", cluster);
        abort();
    }
    emu_launch(kern, grid, block, smem, args...);
    return 0;
}
