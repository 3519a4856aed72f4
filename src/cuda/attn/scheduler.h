/* scheduler.h - host arithmetic of the persistent attention kernel's tile
 * schedule (attn_fwd_wsp): section sizes; kept apart so that
 * tests/test_fastdiv checks it without a GPU.  The schedule itself (static
 * round robin over L2-sized sections, or a tile counter) is WspSched in
 * fwd_wsp.cuh, filled by launch_wsp. */
#ifndef SF_WSP_SCHED_H
#define SF_WSP_SCHED_H

#include <stdint.h>

namespace sf_attn {

/* Sections of the tile counter's schedule: a number of (batch, head) pairs
 * near want that divides the pairs evenly: the smallest divisor in [want,
 * 2 want], else the largest in [want / 2, want), else want itself.  A short
 * last section starts its longest tiles last, when nothing is left to fill
 * the SMs beside them (d 256 causal L 2048, 64 pairs: 9 pairs a section
 * 516-530 TFLOP/s, 8 or 16 pairs 610-614). */
inline int64_t wsp_even_group(int64_t pairs, int64_t want) {
    if (want < 1) want = 1;
    for (int64_t g = want; g <= 2 * want && g <= pairs; g++)
        if (pairs % g == 0) return g;
    for (int64_t g = want - 1; g >= 1 && 2 * g >= want; g--)
        if (pairs % g == 0) return g;
    return want;
}

/* Whether the static round robin (CTA x takes tiles x, x + grid, ...) over
 * sections of g pairs walks each CTA through every query-tile level: a
 * section is g * nm tiles, level outer, pair inner, so a CTA's next tile
 * sits (grid mod g * nm) tiles further on, step = that / g levels when g
 * divides it; every level comes round when step and nm are coprime (nm 4,
 * 8, 16 with g 4 and 132 CTAs: step 1).  Otherwise the same CTAs can take
 * the longest tiles round after round (nm 3 with g 4: step 0). */
inline bool wsp_static_walks(int64_t grid, int64_t nm, int64_t g) {
    if (nm <= 1) return true;
    const int64_t d = grid % (g * nm);
    if (d % g != 0) return false;
    int64_t a = d / g, b = nm; /* gcd(step, nm) == 1 */
    while (b) {
        const int64_t r = a % b;
        a = b;
        b = r;
    }
    return a == 1;
}

} /* namespace sf_attn */

#endif
