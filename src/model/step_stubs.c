/* step_stubs.c - TEMPORARY: weak stand-ins for sf_embed and sf_sample until
 * their implementations (branch h-sample) are merged; the engine then keeps
 * its host path (sfm_step_create answers SF_ERR_UNSUPPORTED).  Delete this
 * file with the merge. */
#include "seqfuse.h"

__attribute__((weak)) sf_status sf_embed(sf_ctx *ctx, const sf_tensor *table, const sf_tensor *ids,
                                         const sf_tensor *out) {
    (void)ctx, (void)table, (void)ids, (void)out;
    return SF_ERR_UNSUPPORTED;
}
__attribute__((weak)) sf_status sf_sample(sf_ctx *ctx, const sf_tensor *logits, const sf_sampling *s,
                                          const sf_tensor *slots, const sf_tensor *seen, const sf_tensor *rng,
                                          const sf_tensor *tokens) {
    (void)ctx, (void)logits, (void)s, (void)slots, (void)seen, (void)rng, (void)tokens;
    return SF_ERR_UNSUPPORTED;
}
