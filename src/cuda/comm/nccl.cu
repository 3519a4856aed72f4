/* comm_nccl.cu - the NCCL communicator (sf_comm) and the two context-
 * parallel drivers over it: the transport of cp.h built from NCCL calls.
 *
 * Streams: the all-gather of the SSD summaries runs on the context's
 * stream (nothing could overlap it: the correction needs its result).
 * The ring's send/recv run on a non-blocking stream of the communicator
 * so that each transfer overlaps the attention on the block already
 * held; two events order them against the context's stream: `mark`
 * (the receive buffer is no longer read, the block to send is written)
 * and `done` (the received block may be read).
 * Buffer: one cudaMalloc'd block per communicator, grown (after a sync)
 * on the first call that needs more, so steady-state calls allocate
 * nothing and never synchronise. */
#include "common/cuda_common.h"
#include "cp.h"

#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#include <mutex>

/* NCCL is loaded at run time (dlopen of libnccl.so.2) on the first
 * communicator call, so that libseqfuse itself loads on machines without
 * NCCL; nccl.h only supplies the types.  The table is filled once per
 * process and never changes afterwards. */
typedef struct sf_nccl_api {
    ncclResult_t (*GetUniqueId)(ncclUniqueId *);
    ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*CommDestroy)(ncclComm_t);
    ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                              cudaStream_t);
    ncclResult_t (*Send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*Recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*GroupStart)(void);
    ncclResult_t (*GroupEnd)(void);
    const char *(*GetErrorString)(ncclResult_t);
    int ok;
    char why[256];
} sf_nccl_api;

static const sf_nccl_api *sf_nccl(void) {
    static sf_nccl_api api;
    static std::once_flag once;
    std::call_once(once, [] {
        void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(api.why, sizeof api.why, "cannot load the NCCL library libnccl.so.2 (%s)",
                     dlerror());
            return;
        }
#define SF_NCCL_SYM(field, name)                                                      \
    if (!(*(void **)&api.field = dlsym(h, name))) {                                   \
        snprintf(api.why, sizeof api.why, "libnccl.so.2 lacks the symbol %s", name);  \
        return;                                                                       \
    }
        SF_NCCL_SYM(GetUniqueId, "ncclGetUniqueId")
        SF_NCCL_SYM(CommInitRank, "ncclCommInitRank")
        SF_NCCL_SYM(CommDestroy, "ncclCommDestroy")
        SF_NCCL_SYM(AllGather, "ncclAllGather")
        SF_NCCL_SYM(Send, "ncclSend")
        SF_NCCL_SYM(Recv, "ncclRecv")
        SF_NCCL_SYM(GroupStart, "ncclGroupStart")
        SF_NCCL_SYM(GroupEnd, "ncclGroupEnd")
        SF_NCCL_SYM(GetErrorString, "ncclGetErrorString")
#undef SF_NCCL_SYM
        api.ok = 1;
    });
    return &api;
}

struct sf_comm {
    ncclComm_t nccl;
    int rank, nranks, device;
    cudaStream_t stream;
    cudaEvent_t ev_mark, ev_done;
    void *buf;
    size_t buf_size;
};

#define SF_NCCL_CHECK(ctx, call)                                                          \
    do {                                                                                  \
        ncclResult_t sf_r_ = (call);                                                      \
        if (sf_r_ != ncclSuccess)                                                         \
            return sf_fail((ctx), SF_ERR_CUDA, "%s:%d: %s: NCCL: %s", __FILE__, __LINE__, \
                           #call, sf_nccl()->GetErrorString(sf_r_));                             \
    } while (0)

static_assert(sizeof(ncclUniqueId) <= sizeof(((sf_comm_id *)0)->bytes),
              "sf_comm_id must hold an ncclUniqueId");

extern "C" sf_status sf_comm_id_create(sf_comm_id *id) {
    if (!id) return SF_ERR_NULL_POINTER;
    if (!sf_nccl()->ok) return SF_ERR_UNSUPPORTED;
    ncclUniqueId u;
    if (sf_nccl()->GetUniqueId(&u) != ncclSuccess) return SF_ERR_CUDA;
    memset(id, 0, sizeof *id);
    memcpy(id->bytes, &u, sizeof u);
    return SF_OK;
}

static void comm_free(sf_comm *c) {
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->nccl) sf_nccl()->CommDestroy(c->nccl);
    if (c->buf) cudaFree(c->buf);
    if (c->ev_mark) cudaEventDestroy(c->ev_mark);
    if (c->ev_done) cudaEventDestroy(c->ev_done);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static sf_status comm_init(sf_ctx *ctx, sf_comm *c, const sf_comm_id *id) {
    SF_CUDA_CHECK(ctx, cudaSetDevice(c->device));
    ncclUniqueId u;
    memcpy(&u, id->bytes, sizeof u);
    ncclComm_t nc = NULL; /* set only on success: comm_free must not see a half-made one */
    SF_NCCL_CHECK(ctx, sf_nccl()->CommInitRank(&nc, c->nranks, u, c->rank));
    c->nccl = nc;
    SF_CUDA_CHECK(ctx, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    SF_CUDA_CHECK(ctx, cudaEventCreateWithFlags(&c->ev_mark, cudaEventDisableTiming));
    SF_CUDA_CHECK(ctx, cudaEventCreateWithFlags(&c->ev_done, cudaEventDisableTiming));
    return SF_OK;
}

extern "C" sf_status sf_comm_create(sf_comm **out, sf_ctx *ctx, const sf_comm_id *id, int nranks,
                                    int rank) {
    static const char *op = "sf_comm_create";
    if (!ctx) return SF_ERR_NULL_POINTER;
    ctx->err[0] = 0;
    if (!out) return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    if (!id) return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: id is NULL", op);
    if (ctx->device < 0)
        return sf_fail(ctx, SF_ERR_DEVICE, "%s: a communicator needs a CUDA context (one GPU per "
                       "rank); this context is on the CPU", op);
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: rank %d of %d ranks is not in [0, nranks)", op,
                       rank, nranks);
    if (!sf_nccl()->ok) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: %s", op, sf_nccl()->why);
    sf_comm *c = (sf_comm *)calloc(1, sizeof *c);
    if (!c) return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    c->rank = rank;
    c->nranks = nranks;
    c->device = ctx->device;
    sf_status s = comm_init(ctx, c, id);
    if (s != SF_OK) {
        comm_free(c);
        return s;
    }
    *out = c;
    return SF_OK;
}

extern "C" void sf_comm_destroy(sf_comm *comm) { comm_free(comm); }
extern "C" int sf_comm_rank(const sf_comm *comm) { return comm ? comm->rank : -1; }
extern "C" int sf_comm_size(const sf_comm *comm) { return comm ? comm->nranks : 0; }

/* ------------------------------------------------------------------ */
/* The transport over NCCL                                              */
/* ------------------------------------------------------------------ */

static void *nccl_buffer(void *user, sf_ctx *ctx, size_t bytes) {
    sf_comm *c = (sf_comm *)user;
    if (bytes <= c->buf_size) return c->buf;
    /* Growth: the old block may still be read by queued work of an
     * earlier call; wait for both streams before freeing it. */
    if (cudaStreamSynchronize(c->stream) != cudaSuccess ||
        cudaStreamSynchronize(sf_cuda_stream(ctx)) != cudaSuccess) {
        sf_fail(ctx, SF_ERR_CUDA, "communicator buffer: %s", cudaGetErrorString(cudaGetLastError()));
        return NULL;
    }
    if (c->buf) cudaFree(c->buf);
    c->buf = NULL;
    c->buf_size = 0;
    const size_t want = bytes + bytes / 8;
    if (cudaMalloc(&c->buf, want) != cudaSuccess) {
        cudaGetLastError();
        c->buf = NULL;
        sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "communicator buffer: cudaMalloc(%zu bytes) failed", want);
        return NULL;
    }
    c->buf_size = want;
    return c->buf;
}

static sf_status nccl_allgather(void *user, sf_ctx *ctx, void *buf, size_t bytes) {
    sf_comm *c = (sf_comm *)user;
    /* in place: this rank's slot is already at buf + rank * bytes */
    SF_NCCL_CHECK(ctx, sf_nccl()->AllGather((char *)buf + (size_t)c->rank * bytes, buf, bytes, ncclChar,
                                     c->nccl, sf_cuda_stream(ctx)));
    return SF_OK;
}

static sf_status nccl_mark(void *user, sf_ctx *ctx) {
    sf_comm *c = (sf_comm *)user;
    SF_CUDA_CHECK(ctx, cudaEventRecord(c->ev_mark, sf_cuda_stream(ctx)));
    return SF_OK;
}

static sf_status nccl_ring_start(void *user, sf_ctx *ctx, const void *const *send,
                                 void *const *recv, int n, size_t bytes) {
    sf_comm *c = (sf_comm *)user;
    const int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
    SF_CUDA_CHECK(ctx, cudaStreamWaitEvent(c->stream, c->ev_mark, 0));
    SF_NCCL_CHECK(ctx, sf_nccl()->GroupStart());
    for (int i = 0; i < n; i++) {
        ncclResult_t r1 = sf_nccl()->Send(send[i], bytes, ncclChar, next, c->nccl, c->stream);
        ncclResult_t r2 = sf_nccl()->Recv(recv[i], bytes, ncclChar, prev, c->nccl, c->stream);
        if (r1 != ncclSuccess || r2 != ncclSuccess) {
            sf_nccl()->GroupEnd();
            return sf_fail(ctx, SF_ERR_CUDA, "ring exchange: NCCL: %s",
                           sf_nccl()->GetErrorString(r1 != ncclSuccess ? r1 : r2));
        }
    }
    SF_NCCL_CHECK(ctx, sf_nccl()->GroupEnd());
    return SF_OK;
}

static sf_status nccl_ring_wait(void *user, sf_ctx *ctx) {
    sf_comm *c = (sf_comm *)user;
    SF_CUDA_CHECK(ctx, cudaEventRecord(c->ev_done, c->stream));
    SF_CUDA_CHECK(ctx, cudaStreamWaitEvent(sf_cuda_stream(ctx), c->ev_done, 0));
    return SF_OK;
}

static sf_status comm_transport(sf_ctx *ctx, sf_comm *comm, const char *op, sf_cp_transport *t) {
    if (!comm) return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: comm is NULL", op);
    if (ctx->device != comm->device)
        return sf_fail(ctx, SF_ERR_DEVICE, "%s: the communicator is on CUDA device %d but the "
                       "context is on %s %d", op, comm->device,
                       ctx->device < 0 ? "the CPU" : "CUDA device", ctx->device);
    t->user = comm;
    t->rank = comm->rank;
    t->nranks = comm->nranks;
    t->buffer = nccl_buffer;
    t->allgather = nccl_allgather;
    t->mark = nccl_mark;
    t->ring_start = nccl_ring_start;
    t->ring_wait = nccl_ring_wait;
    return SF_OK;
}

extern "C" sf_status sf_ssd_fwd_cp(sf_ctx *ctx, sf_comm *comm, const sf_ssd_fwd_params *p) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    ctx->err[0] = 0;
    sf_cp_transport t;
    sf_status s = comm_transport(ctx, comm, "sf_ssd_fwd_cp", &t);
    if (s != SF_OK) return s;
    return sf_cp_ssd_run(ctx, p, &t);
}

extern "C" sf_status sf_attn_fwd_ring(sf_ctx *ctx, sf_comm *comm, const sf_attn_fwd_params *p) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    ctx->err[0] = 0;
    sf_cp_transport t;
    sf_status s = comm_transport(ctx, comm, "sf_attn_fwd_ring", &t);
    if (s != SF_OK) return s;
    return sf_cp_attn_ring_run(ctx, p, &t);
}
