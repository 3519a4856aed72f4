/* bulk.h - the bulk paged-decode kernel's host side (paged_bulk.cu), for
 * paged.cu's configuration table. */
#ifndef SF_PAGED_BULK_H
#define SF_PAGED_BULK_H

#include "common/cuda_common.h"
#include "paged/decode.cuh"

/* NULL when paged_attn_bulk with `keys`-key tiles and `stages` stages can
 * serve the problem (16-bit pools of dtype dt, head dim padded to dpad),
 * else why not.  Launches nothing. */
const char *sf_paged_bulk_refusal(sf_ctx *ctx, const sf_paged::PagedParams &p, bool fp8, sf_dtype dt, int dpad,
                                  int keys, int stages);
/* Runs it (after a NULL refusal): workspace from the context, the split
 * counters from the context's CUDA state (or the workspace, zeroed on the
 * stream, while a graph is captured and they would have to grow). */
sf_status sf_paged_bulk_run(sf_ctx *ctx, sf_paged::PagedParams p, sf_dtype dt, int dpad, int keys, int stages);

#endif
