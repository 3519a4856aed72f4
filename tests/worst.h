/* worst.h - the largest of a set of errors, with NaN kept: fmax(w, NaN) is
 * w, so a maximum built with fmax passes an output that was never written
 * (poisoned with NaN) or came out NaN.  worst_of makes any NaN error
 * infinite; abs_diff is 0 for equal values (two infinities of one sign, an
 * empty row's -inf lse) and NaN when either side is NaN. */
#ifndef SF_TEST_WORST_H
#define SF_TEST_WORST_H

#include <math.h>

static inline double worst_of(double w, double e) { return e <= w ? w : e == e ? e : INFINITY; }
static inline double abs_diff(double x, double y) { return x == y ? 0.0 : fabs(x - y); }

#endif
