/* wsp_sched.h - host arithmetic of the persistent attention kernel's
 * schedule (attn_fwd_wsp), kept apart so that tests/test_fastdiv checks it
 * without a GPU. */
#ifndef SF_WSP_SCHED_H
#define SF_WSP_SCHED_H

#include <stdint.h>

namespace sf_attn {

/* Sections of the tile counter's schedule: a number of (batch, head) pairs
 * near want that divides the pairs evenly: the smallest divisor in [want,
 * 2 want], else the largest in [want / 2, want), else want itself.  A short
 * last section starts its longest tiles last, when nothing is left to fill
 * the SMs beside them: H200, d 256 causal L 2048 (64 pairs), 9 pairs a
 * section 516-530 TFLOP/s, 8 and 16 pairs 610-614 (session 20). */
inline int64_t wsp_even_group(int64_t pairs, int64_t want) {
    if (want < 1) want = 1;
    for (int64_t g = want; g <= 2 * want && g <= pairs; g++)
        if (pairs % g == 0) return g;
    for (int64_t g = want - 1; g >= 1 && 2 * g >= want; g--)
        if (pairs % g == 0) return g;
    return want;
}

} /* namespace sf_attn */

#endif
