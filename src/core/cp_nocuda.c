/* cp_nocuda.c - the context-parallel entry points a build lacks: the CUDA
 * kernels of src/cuda/comm/cp.cu in a build without CUDA, and the NCCL
 * communicator and drivers of src/cuda/comm/nccl.cu in a build without
 * NCCL (CPU-only, or CUDA without libnccl / nccl.h).  Each answers
 * SF_ERR_UNSUPPORTED with the reason. */
#include "cp.h"

#if !defined(SF_WITH_CUDA)
#define CP_NO_CUDA "seqfuse was built without CUDA (no nvcc found at configure time)"

sf_status sf_cuda_cp_logdecay(sf_ctx *ctx, const sf_cp_ssd_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_cp_local: " CP_NO_CUDA);
}
sf_status sf_cuda_cp_correct(sf_ctx *ctx, const sf_cp_ssd_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_cp_correct: " CP_NO_CUDA);
}
sf_status sf_cuda_cp_combine(sf_ctx *ctx, const sf_cp_combine_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_cp_combine: " CP_NO_CUDA);
}
sf_status sf_cuda_cp_merge(sf_ctx *ctx, const sf_cp_merge_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_attn_merge: " CP_NO_CUDA);
}
sf_status sf_cuda_cp_pack(sf_ctx *ctx, void *dst, const sf_tensor *src) {
    (void)dst;
    (void)src;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_attn_fwd_ring: " CP_NO_CUDA);
}
#endif

#if !defined(SF_WITH_NCCL)
#define CP_NO_NCCL                                                                        \
    "seqfuse was built without NCCL (the communicator needs a CUDA build that finds "    \
    "libnccl and nccl.h at configure time)"

sf_status sf_comm_id_create(sf_comm_id *id) {
    if (!id) return SF_ERR_NULL_POINTER;
    memset(id, 0, sizeof *id);
    return SF_ERR_UNSUPPORTED;
}
sf_status sf_comm_create(sf_comm **out, sf_ctx *ctx, const sf_comm_id *id, int nranks, int rank) {
    (void)id;
    (void)nranks;
    (void)rank;
    if (out) *out = NULL;
    if (!ctx) return SF_ERR_NULL_POINTER;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_comm_create: " CP_NO_NCCL);
}
void sf_comm_destroy(sf_comm *comm) { (void)comm; }
int sf_comm_rank(const sf_comm *comm) {
    (void)comm;
    return -1;
}
int sf_comm_size(const sf_comm *comm) {
    (void)comm;
    return 0;
}
sf_status sf_ssd_fwd_cp(sf_ctx *ctx, sf_comm *comm, const sf_ssd_fwd_params *p) {
    (void)comm;
    (void)p;
    if (!ctx) return SF_ERR_NULL_POINTER;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_fwd_cp: " CP_NO_NCCL);
}
sf_status sf_attn_fwd_ring(sf_ctx *ctx, sf_comm *comm, const sf_attn_fwd_params *p) {
    (void)comm;
    (void)p;
    if (!ctx) return SF_ERR_NULL_POINTER;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_attn_fwd_ring: " CP_NO_NCCL);
}
#endif
