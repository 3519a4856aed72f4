/* board_power.cu - the board's energy counter and power limit through NVML,
 * for the autotuner's sustained runs (autotune.h, sf_tune_sustain_fn).
 *
 * libnvidia-ml.so.1 comes with the driver and is loaded at run time
 * (dlopen), so the library neither links nor needs it: without it, or
 * without an energy counter (some boards, MIG instances), the calls answer
 * SF_ERR_UNSUPPORTED and the tuner keeps its short timings.  The few
 * entry points used are declared here (their C ABI: an int status, an
 * opaque device handle). */
#include "common/cuda_common.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

namespace {

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_shutdown_fn)(void);
typedef int (*nvml_by_pci_fn)(const char *bus_id, void **dev);
typedef int (*nvml_energy_fn)(void *dev, unsigned long long *mj);
typedef int (*nvml_limit_fn)(void *dev, unsigned int *mw);

struct BoardPower {
    void *lib;
    void *dev;
    nvml_shutdown_fn shutdown;
    nvml_energy_fn energy;
    nvml_limit_fn limit;
};

/* NVML for the context's device, or NULL with the reason in *why (asked
 * once per context) */
BoardPower *board_open(sf_ctx *ctx, sf_cuda_state *st, const char **why) {
    st->power_tried = 1;
    char bus[32];
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, ctx->device) != cudaSuccess) {
        (void)cudaGetLastError();
        *why = "no PCI bus id for the device";
        return NULL;
    }
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        *why = "libnvidia-ml.so.1 not loaded";
        return NULL;
    }
    nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
    nvml_by_pci_fn by_pci = (nvml_by_pci_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    BoardPower b;
    b.lib = lib;
    b.dev = NULL;
    b.shutdown = (nvml_shutdown_fn)dlsym(lib, "nvmlShutdown");
    b.energy = (nvml_energy_fn)dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption");
    b.limit = (nvml_limit_fn)dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit");
    if (!init || !by_pci || !b.shutdown || !b.energy || !b.limit || init() != 0) {
        dlclose(lib);
        *why = "NVML did not initialise";
        return NULL;
    }
    unsigned long long mj = 0;
    unsigned int mw = 0;
    if (by_pci(bus, &b.dev) != 0 || b.energy(b.dev, &mj) != 0 || b.limit(b.dev, &mw) != 0 || mw == 0) {
        b.shutdown();
        dlclose(lib);
        *why = "no energy counter or power limit";
        return NULL;
    }
    BoardPower *p = (BoardPower *)malloc(sizeof *p);
    if (!p) {
        b.shutdown();
        dlclose(lib);
        *why = "out of memory";
        return NULL;
    }
    *p = b;
    st->power = p;
    return p;
}

} /* namespace */

extern "C" sf_status sf_cuda_board_energy(sf_ctx *ctx, unsigned long long *mj, double *limit_w) {
    sf_cuda_state *st = sf_cuda_st(ctx);
    if (!st) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "board power: not a CUDA context");
    const char *why = "not available on this device";
    BoardPower *b = st->power_tried ? (BoardPower *)st->power : board_open(ctx, st, &why);
    if (!b) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "board power: %s", why);
    if (b->energy(b->dev, mj) != 0) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "board power: NVML read failed");
    if (!limit_w) return SF_OK;
    unsigned int mw = 0;
    if (b->limit(b->dev, &mw) != 0) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "board power: NVML read failed");
    *limit_w = mw / 1000.0;
    return SF_OK;
}

extern "C" void sf_cuda_board_close(sf_cuda_state *st) {
    BoardPower *b = (BoardPower *)st->power;
    if (b) {
        b->shutdown();
        dlclose(b->lib);
        free(b);
    }
    st->power = NULL;
}
