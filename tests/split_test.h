/* split_test.h - tests with a host part and a CUDA part run as two CTest
 * entries: `test_x` runs the host part, `test_x --cuda` the CUDA part
 * only, which exits 77 (CTest's visible skip) without a device and fails
 * when a device is there but no context can be made on it. */
#ifndef SF_SPLIT_TEST_H
#define SF_SPLIT_TEST_H

#include <stdio.h>
#include <string.h>

#include "seqfuse.h"

/* 1: this run is the CUDA part (--cuda), 0: the host part, -1: bad usage */
static inline int split_cuda_part(int argc, char **argv) {
    if (argc == 1) return 0;
    if (argc == 2 && !strcmp(argv[1], "--cuda")) return 1;
    printf("usage: %s [--cuda]\n", argv[0]);
    return -1;
}

/* A context on CUDA device 0 into *gpu: 0 when made; else the exit code of
 * the CUDA part, 77 without a device and 1 when a device would not take a
 * context (both printed). */
static inline int split_gpu_ctx(sf_ctx **gpu, const char *test) {
    *gpu = NULL;
    if (sf_cuda_device_count() < 1) {
        printf("SKIP %s --cuda: no CUDA device (%s)\n", test,
               sf_has_cuda_build() ? "CUDA build" : "build without CUDA");
        return 77;
    }
    if (sf_ctx_create(gpu, 0) != SF_OK) {
        printf("FAIL %s --cuda: a CUDA device is present but no context: %s\n", test, sf_ctx_last_error(NULL));
        return 1;
    }
    return 0;
}

#endif
