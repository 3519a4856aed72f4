/* test_graph_cpu.c - pinned memory, asynchronous copies and CUDA graphs on
 * a CPU context: sf_malloc_host gives plain memory, sf_memcpy_async copies
 * at once (checked on seeded random bytes), and every graph call answers
 * SF_ERR_UNSUPPORTED (or the argument error) with a sentence, in any build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seqfuse.h"

static int failures;

static void expect(sf_status got, sf_status want, const char *what, const sf_ctx *c) {
    if (got == want && (want == SF_OK || sf_ctx_last_error(c)[0])) return;
    printf("FAIL %s: %s (%s), want %s with a sentence\n", what, sf_status_string(got), sf_ctx_last_error(c),
           sf_status_string(want));
    failures++;
}

int main(void) {
    const char *se = getenv("SF_SEED");
    const unsigned seed = se ? (unsigned)strtoul(se, NULL, 0) : (unsigned)time(NULL);
    printf("test_graph_cpu: seed %u (SF_SEED to repeat)\n", seed);
    srand(seed);
    sf_ctx *c;
    if (sf_ctx_create(&c, SF_DEVICE_CPU) != SF_OK) return printf("FAIL no CPU context\n"), 1;
    void *a = NULL, *b = NULL;
    const size_t n = 1000 + (size_t)(rand() % 5000);
    expect(sf_malloc_host(c, &a, n), SF_OK, "sf_malloc_host", c);
    expect(sf_malloc_host(c, &b, n), SF_OK, "sf_malloc_host", c);
    if (!a || !b || ((uintptr_t)a & 255)) {
        printf("FAIL sf_malloc_host gave %p, %p (256-byte aligned expected)\n", a, b);
        return 1;
    }
    for (size_t i = 0; i < n; i++) ((unsigned char *)a)[i] = (unsigned char)rand();
    memset(b, 0xa5, n);
    expect(sf_memcpy_async(c, b, a, n), SF_OK, "sf_memcpy_async", c);
    if (memcmp(a, b, n)) printf("FAIL sf_memcpy_async on a CPU context: the bytes differ\n"), failures++;
    expect(sf_memcpy_async(c, b, a, 0), SF_OK, "an empty copy", c);
    expect(sf_memcpy_async(c, NULL, a, n), SF_ERR_NULL_POINTER, "a copy to NULL", c);
    expect(sf_malloc_host(c, NULL, n), SF_ERR_NULL_POINTER, "sf_malloc_host into NULL", c);
    void *big = (void *)1;
    expect(sf_malloc_host(c, &big, SIZE_MAX - 8), SF_ERR_OUT_OF_MEMORY, "sf_malloc_host of SIZE_MAX", c);
    if (big) printf("FAIL a failed sf_malloc_host left %p\n", big), failures++;
    expect(sf_free_host(c, a), SF_OK, "sf_free_host", c);
    expect(sf_free_host(c, b), SF_OK, "sf_free_host", c);
    expect(sf_free_host(c, NULL), SF_OK, "sf_free_host(NULL)", c);

    sf_graph *g = (sf_graph *)&g;
    expect(sf_graph_begin(c), SF_ERR_UNSUPPORTED, "sf_graph_begin on a CPU context", c);
    expect(sf_graph_end(c, &g), SF_ERR_UNSUPPORTED, "sf_graph_end on a CPU context", c);
    expect(sf_graph_launch(c, g), SF_ERR_UNSUPPORTED, "sf_graph_launch on a CPU context", c);
    sf_graph_destroy(NULL);
    if (sf_graph_begin(NULL) != SF_ERR_NULL_POINTER || sf_graph_end(NULL, &g) != SF_ERR_NULL_POINTER ||
        sf_graph_launch(NULL, g) != SF_ERR_NULL_POINTER || sf_malloc_host(NULL, &a, 1) != SF_ERR_NULL_POINTER ||
        sf_memcpy_async(NULL, a, a, 1) != SF_ERR_NULL_POINTER || sf_free_host(NULL, NULL) != SF_ERR_NULL_POINTER)
        printf("FAIL a NULL context is not SF_ERR_NULL_POINTER\n"), failures++;
    sf_ctx_destroy(c);
    printf("%s test_graph_cpu\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
