/* embed.cu - CUDA sf_embed: out[i, :] = table[ids[i], :].
 *
 * A block of 256 threads per row (grid.x rows, grid.y splits wide rows).
 * Same dtype with 16-byte aligned rows: a copy of 16-byte vectors;
 * otherwise element by element through f32 (round to nearest even on the
 * store).  An id outside [0, V) (not checked on the host: that would need
 * a synchronisation) writes a row of zeros.  No workspace, no
 * synchronisation (CUDA-graph capturable). */
#include "common/cuda_common.h"
#include "sample_ops.h"

struct embed_args {
    const void *table;
    const int32_t *ids;
    void *out;
    int64_t ts, is, os0, os1; /* strides (elements) of table rows, ids, out */
    int64_t V, D;
};

/* per: elements in 16 bytes; nvec = D / per */
__global__ void __launch_bounds__(256) embed_copy_kernel(const embed_args a, int64_t per, int64_t nvec) {
    const int64_t i = blockIdx.x;
    const int32_t id = a.ids[i * a.is];
    uint4 *o = (uint4 *)a.out + i * (a.os0 / per);
    const bool ok = id >= 0 && id < a.V;
    const uint4 *t = (const uint4 *)a.table + (ok ? (int64_t)id * (a.ts / per) : 0);
    for (int64_t v = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; v < nvec; v += (int64_t)gridDim.y * blockDim.x)
        o[v] = ok ? __ldg(t + v) : make_uint4(0, 0, 0, 0);
}

template <typename TI, typename TO>
__global__ void __launch_bounds__(256) embed_kernel(const embed_args a) {
    const int64_t i = blockIdx.x;
    const int32_t id = a.ids[i * a.is];
    const bool ok = id >= 0 && id < a.V;
    const TI *t = (const TI *)a.table + (ok ? (int64_t)id * a.ts : 0);
    TO *o = (TO *)a.out + i * a.os0;
    for (int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; j < a.D; j += (int64_t)gridDim.y * blockDim.x)
        o[j * a.os1] = sf_elem<TO>::from_f(ok ? sf_elem<TI>::to_f(t[j]) : 0.0f);
}

template <typename TI>
static void launch_to(const embed_args &a, sf_dtype od, dim3 g, cudaStream_t st) {
    switch (od) {
    case SF_F32: embed_kernel<TI, float><<<g, 256, 0, st>>>(a); break;
    case SF_F16: embed_kernel<TI, __half><<<g, 256, 0, st>>>(a); break;
    default: embed_kernel<TI, __nv_bfloat16><<<g, 256, 0, st>>>(a); break;
    }
}

extern "C" sf_status sf_cuda_embed(sf_ctx *ctx, const sf_embed_problem *pr) {
    const sf_tensor *tb = pr->table, *o = pr->out;
    embed_args a;
    a.table = tb->data, a.ids = (const int32_t *)pr->ids->data, a.out = o->data;
    a.ts = tb->stride[0], a.is = pr->ids->stride[0], a.os0 = o->stride[0], a.os1 = o->stride[1];
    a.V = pr->V, a.D = pr->D;
    cudaStream_t st = sf_cuda_stream(ctx);
    const int64_t es = (int64_t)sf_dtype_size(tb->dtype), per = 16 / es;
    const bool vec = tb->dtype == o->dtype && (o->stride[1] == 1 || a.D == 1) && a.D % per == 0 &&
                     a.ts % per == 0 && a.os0 % per == 0 && ((uintptr_t)a.table % 16) == 0 &&
                     ((uintptr_t)a.out % 16) == 0;
    const int64_t work = vec ? a.D / per : a.D;
    int64_t gy = (work + 255) / 256;
    if (gy > 65535) gy = 65535; /* the kernels stride over the rest */
    const dim3 g((unsigned)pr->n, (unsigned)gy);
    if (vec) {
        embed_copy_kernel<<<g, 256, 0, st>>>(a, per, work);
    } else {
        switch (tb->dtype) {
        case SF_F32: launch_to<float>(a, o->dtype, g, st); break;
        case SF_F16: launch_to<__half>(a, o->dtype, g, st); break;
        default: launch_to<__nv_bfloat16>(a, o->dtype, g, st); break;
        }
    }
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}
