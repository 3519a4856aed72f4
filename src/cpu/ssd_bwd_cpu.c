#include "../core/ssd_bwd.h"
sf_status sf_cpu_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_problem *pr) { return sf_ref_ssd_bwd(ctx, pr); }
