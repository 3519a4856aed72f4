/* dec_test.h - what the tests of the engine's decode products
 * (layer/dec_gemv.h) share: the check that bad calls are refused. */
#ifndef SF_DEC_TEST_H
#define SF_DEC_TEST_H

#include "gpu_test.h"
#include "layer/dec_gemv.h"

typedef struct {
    const char *what;
    sf_dec_gemv_args a;
} dec_bad;

/* Each of bad[0..nb) refused by sf_dec_gemv_supports and by the call;
 * the failures (each printed). */
static inline int dec_all_refused(sf_ctx *gpu, const dec_bad *bad, int nb) {
    int failures = 0;
    for (int i = 0; i < nb; i++) {
        const char *why = sf_dec_gemv_supports(&bad[i].a);
        const sf_status st = sf_cuda_dec_gemv(gpu, &bad[i].a);
        if (!why || st == SF_OK) printf("FAIL refusals: %s served\n", bad[i].what), failures++;
    }
    return failures;
}

#endif
