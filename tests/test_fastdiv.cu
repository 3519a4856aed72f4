/* test_fastdiv: the attention schedules' host arithmetic.
 * sf_attn::FastDiv (src/cuda/fastdiv.h) against the plain quotient: every
 * divisor up to 4096, powers of two and their neighbours, random divisors up
 * to 2^31 - 1; dividends at the edges (0, d - 1, d, d + 1, multiples,
 * 2^31 - 1) and at random.  The device path computes the same product's
 * high word (__umulhi).  The section sizes of src/cuda/attn/scheduler.h against
 * the properties the persistent kernel's launcher relies on. */
#include "common/fastdiv.h"
#include "attn/scheduler.h"

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

/* sf_attn::wsp_even_group (src/cuda/attn/scheduler.h), for every pair count and
 * wish up to 300 / 200: a divisor of the pairs in [want / 2, 2 want] when
 * one exists (else want itself), the nearest one at or above want, and one
 * below want only when none lies at or above it; and at shapes of the
 * benchmark */
static void even_group() {
    for (int64_t pairs = 1; pairs <= 300; pairs++)
        for (int64_t want = 1; want <= 200; want++) {
            const int64_t got = sf_attn::wsp_even_group(pairs, want);
            bool any = false, above = false; /* a divisor in range; one in [want, 2 want] */
            for (int64_t g = 1; g <= pairs; g++)
                if (pairs % g == 0 && 2 * g >= want && g <= 2 * want) {
                    any = true;
                    above = above || g >= want;
                }
            bool ok = any ? pairs % got == 0 && 2 * got >= want && got <= 2 * want && (got >= want) == above
                          : got == want;
            /* nearest: no divisor strictly between want and got (either side) */
            for (int64_t g = (got < want ? got : want) + 1; ok && g < (got < want ? want : got); g++)
                if (pairs % g == 0) ok = false;
            if (any && got >= want && pairs % want == 0) ok = ok && got == want;
            checks++;
            if (!ok) {
                if (fails < 10)
                    fprintf(stderr, "FAIL wsp_even_group(%lld, %lld) = %lld\n", (long long)pairs, (long long)want,
                            (long long)got);
                fails++;
            }
        }
    const int64_t cases[][3] = {{64, 9, 16}, {64, 5, 8}, {32, 3, 4}, {16, 2, 2}, {256, 12, 16}, {21, 4, 7}, {7, 3, 3},
                                {1, 5, 5}, {64, 0, 1}};
    for (const auto &c : cases) {
        checks++;
        if (sf_attn::wsp_even_group(c[0], c[1]) != c[2]) {
            fprintf(stderr, "FAIL wsp_even_group(%lld, %lld) != %lld\n", (long long)c[0], (long long)c[1],
                    (long long)c[2]);
            fails++;
        }
    }
}

/* sf_attn::wsp_static_walks against a walk of the round robin: the levels
 * that CTA x's tiles take over nm rounds are all nm levels */
static void static_walks() {
    for (int64_t grid = 1; grid <= 300; grid++)
        for (int64_t nm = 1; nm <= 40; nm++)
            for (int64_t g = 1; g <= 8; g++) {
                const int64_t sec = g * nm;
                bool all = true;
                for (int64_t x = 0; x < grid && all; x++) {
                    bool seen[40] = {false};
                    int count = 0;
                    for (int64_t r = 0; r < nm; r++) {
                        const int64_t lvl = ((x + r * grid) % sec) / g;
                        if (!seen[lvl]) seen[lvl] = true, count++;
                    }
                    all = count == nm;
                }
                checks++;
                /* the closed form claims the walk when the step is whole and
                 * coprime; a fractional step can still visit every level, so
                 * only its claims are checked */
                if (sf_attn::wsp_static_walks(grid, nm, g) && !all) {
                    if (fails < 10) fprintf(stderr, "FAIL wsp_static_walks(%lld, %lld, %lld): a CTA misses a level\n",
                                            (long long)grid, (long long)nm, (long long)g);
                    fails++;
                }
            }
    const int64_t cases[][4] = {{132, 4, 4, 1}, {132, 8, 4, 1}, {132, 16, 4, 1}, {132, 3, 4, 0},
                                {132, 6, 4, 0}, {132, 11, 4, 0}, {132, 5, 4, 1}, {132, 1, 4, 1}};
    for (const auto &c : cases) {
        checks++;
        if (sf_attn::wsp_static_walks(c[0], c[1], c[2]) != (c[3] != 0)) {
            fprintf(stderr, "FAIL wsp_static_walks(%lld, %lld, %lld) != %lld\n", (long long)c[0], (long long)c[1],
                    (long long)c[2], (long long)c[3]);
            fails++;
        }
    }
}

int main() {
    even_group();
    static_walks();
    for (uint32_t d = 1; d <= 4096; d++) divisor(d);
    for (int s = 1; s < 31; s++)
        for (int e = -1; e <= 1; e++) divisor((1u << s) + (uint32_t)e);
    for (int i = 0; i < 20000; i++) {
        const uint32_t d = next31();
        divisor(d ? d : 1u);
    }
    divisor(0x7fffffffu);
    printf("%s: %lld of %lld quotients and groups wrong\n", fails ? "FAILED" : "passed", fails, checks);
    return fails ? 1 : 0;
}
