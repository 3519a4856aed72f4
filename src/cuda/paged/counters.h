/* counters.h - the paged decode's split counters (decode.cuh): one word per
 * (sequence, kv head, row tile) of a call with several splits, counting the
 * splits done; the last split of a group merges the group's partials and
 * puts its word back to 0, so the next call or graph replay starts at 0.
 * They live after the attention's two words in sf_cuda_state::tile_ctr
 * (device.cu allocates and zeroes 2 + SF_PAGED_CTRS words).  A call with
 * more groups than that runs one split a sequence: with that many groups
 * the grid is several waves deep without splitting. */
#ifndef SF_PAGED_COUNTERS_H
#define SF_PAGED_COUNTERS_H

#define SF_PAGED_CTRS 8192

#endif
