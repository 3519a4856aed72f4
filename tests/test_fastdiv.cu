/* test_fastdiv: sf_attn::FastDiv (src/cuda/fastdiv.h) against the plain
 * quotient on the host: every divisor up to 4096, powers of two and their
 * neighbours, random divisors up to 2^31 - 1; dividends at the edges (0, d - 1,
 * d, d + 1, multiples, 2^31 - 1) and at random.  The device path computes
 * the same product's high word (__umulhi). */
#include "fastdiv.h"

#include <stdint.h>
#include <stdio.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next31() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 33); /* 0 .. 2^31 - 1 */
}

static long long fails = 0, checks = 0;
static void check(uint32_t d, uint32_t n) {
    const sf_attn::FastDiv f = sf_attn::FastDiv::make(d);
    const int q = f.div((int)n);
    checks++;
    if (q != (int)(n / d)) {
        if (fails < 10) fprintf(stderr, "FAIL %u / %u: got %d, want %u\n", n, d, q, n / d);
        fails++;
    }
}
static void divisor(uint32_t d) {
    const uint32_t top = 0x7fffffffu;
    const uint32_t edges[] = {0u, 1u, d - 1u, d, d + 1u, 2u * d - 1u, 2u * d, top, top - 1u, (top / d) * d,
                              (top / d) * d - 1u};
    for (uint32_t n : edges)
        if (n <= top) check(d, n);
    for (int i = 0; i < 64; i++) check(d, next31());
}

int main() {
    for (uint32_t d = 1; d <= 4096; d++) divisor(d);
    for (int s = 1; s < 31; s++)
        for (int e = -1; e <= 1; e++) divisor((1u << s) + (uint32_t)e);
    for (int i = 0; i < 20000; i++) {
        const uint32_t d = next31();
        divisor(d ? d : 1u);
    }
    divisor(0x7fffffffu);
    printf("%s: %lld of %lld quotients wrong\n", fails ? "FAILED" : "passed", fails, checks);
    return fails ? 1 : 0;
}
