/* expect.h - the checks of the C API tests (test_api.c, test_paged.c,
 * test_fused.c, test_kv_cache.c): each counts in `checks`, prints a FAIL
 * line with file and line, and counts in `failures`; the test defines both
 * counters, and `ctx` where EXPECT_STATUS is used. */
#ifndef SF_TEST_EXPECT_H
#define SF_TEST_EXPECT_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "seqfuse.h"

/* call returns `want`, and the context's detail mentions `needle` (NULL: any) */
#define EXPECT_STATUS(call, want, needle)                                                     \
    do {                                                                                      \
        sf_status got_ = (call);                                                              \
        checks++;                                                                             \
        const char *m_ = sf_ctx_last_error(ctx);                                              \
        const char *n_ = (needle);                                                            \
        if (got_ != (want) || (n_ && !strstr(m_, n_))) {                                      \
            printf("FAIL %s:%d: %s -> %s (want %s), detail \"%s\" (want it to mention \"%s\")\n", \
                   __FILE__, __LINE__, #call, sf_status_string(got_), sf_status_string(want),  \
                   m_, n_ ? n_ : "");                                                         \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

/* cond holds; otherwise the printf-style message */
#define EXPECT(cond, ...)                               \
    do {                                                \
        checks++;                                       \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
        }                                               \
    } while (0)

/* |got - want| <= tol */
#define EXPECT_NEAR(got, want, tol, what)                                                     \
    do {                                                                                      \
        double g_ = (got), w_ = (want);                                                       \
        checks++;                                                                             \
        if (!(fabs(g_ - w_) <= (tol))) {                                                      \
            printf("FAIL %s:%d: %s = %.9g, want %.9g\n", __FILE__, __LINE__, (what), g_, w_); \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

#endif
