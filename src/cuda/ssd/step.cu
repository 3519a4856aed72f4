/* ssd_step.cu - the Mamba-2 decode step on the GPU (sf_ssd_step): the
 * launcher of ssd_step_kernel (ssd_step.cuh), per (x dtype, state dtype).  Measured on the H200 (H 80,
 * P 64, N 128, f32 state, bf16 x): 3.4-3.7 TB/s of state traffic at batch 64
 * to 256, 82-87% of copy bandwidth (bench/RESULTS.md). */
#include "common/cuda_common.h"
#include "ssd/step.cuh"

template <typename T, typename TS>
static sf_status ssd_step_launch(sf_ctx *ctx, const ssd_step_args &a, int kv) {
    cudaStream_t stream = sf_cuda_stream(ctx);
    const unsigned grid = (unsigned)((int64_t)a.batch * a.H);
    switch (kv) {
    case 1: ssd_step_kernel<T, TS, 1><<<grid, 128, 0, stream>>>(a); break;
    case 2: ssd_step_kernel<T, TS, 2><<<grid, 128, 0, stream>>>(a); break;
    case 4: ssd_step_kernel<T, TS, 4><<<grid, 128, 0, stream>>>(a); break;
    default: ssd_step_kernel<T, TS, 0><<<grid, 128, 0, stream>>>(a); break;
    }
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* The state's dtype, independent of x's. */
template <typename T>
static sf_status ssd_step_launch_state(sf_ctx *ctx, const ssd_step_args &a, int kv, sf_dtype sdt) {
    switch (sdt) {
    case SF_F32: return ssd_step_launch<T, float>(ctx, a, kv);
    case SF_F16: return ssd_step_launch<T, __half>(ctx, a, kv);
    case SF_BF16: return ssd_step_launch<T, __nv_bfloat16>(ctx, a, kv);
    default: return sf_fail(ctx, SF_ERR_DTYPE, "sf_ssd_step: state must be f32, f16 or bf16");
    }
}

extern "C" sf_status sf_cuda_ssd_step(sf_ctx *ctx, const sf_ssd_step_problem *pr) {
    const sf_ssd_step_params *p = pr->p;
    ssd_step_args a;
    memset(&a, 0, sizeof(a));
    a.state = p->state.data;
    a.x = p->x.data; a.dt = p->dt.data; a.B = p->B.data; a.C = p->C.data; a.z = p->z.data;
    a.out = p->out.data;
    a.A = (const float *)p->A.data; a.D = (const float *)p->D.data;
    a.dt_bias = (const float *)p->dt_bias.data; a.idx = (const int *)p->state_idx.data;
    sf_cuda_copy_strides(a.ss, &p->state, 4);
    sf_cuda_copy_strides(a.xs, &p->x, 2);
    sf_cuda_copy_strides(a.dts, &p->dt, 2);
    sf_cuda_copy_strides(a.Bs, &p->B, 2);
    sf_cuda_copy_strides(a.Cs, &p->C, 2);
    sf_cuda_copy_strides(a.zs, &p->z, pr->has_z ? 2 : 0);
    sf_cuda_copy_strides(a.os, &p->out, 2);
    a.As = p->A.stride[0];
    sf_cuda_copy_strides(a.Ds, &p->D, pr->has_D ? p->D.rank : 0);
    a.biass = pr->has_dt_bias ? p->dt_bias.stride[0] : 0;
    a.idxs = pr->has_idx ? p->state_idx.stride[0] : 0;
    a.batch = (int)pr->batch; a.H = (int)pr->nheads; a.P = (int)pr->headdim;
    a.N = (int)pr->dstate; a.hpg = (int)pr->heads_per_group; a.nslots = (int)pr->nslots;
    a.has_D = pr->has_D; a.D_pc = pr->D_per_channel; a.has_z = pr->has_z;
    a.has_bias = pr->has_dt_bias; a.softplus = p->dt_softplus; a.has_idx = pr->has_idx;
    a.dt_min = p->dt_min; a.dt_max = p->dt_max;
    /* the front end allows f32 besides x's dtype for these */
    a.dt32 = p->dt.dtype == SF_F32; a.B32 = p->B.dtype == SF_F32; a.C32 = p->C.dtype == SF_F32;
    if ((int64_t)a.batch * a.H == 0) return SF_OK;
    if ((int64_t)a.batch * a.H > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_step: batch x nheads too large");
    /* 4-element state rows: unit column stride, every other stride and the
     * base aligned to 4 elements (16 bytes in f32, 8 in 16 bits) */
    const sf_tensor *s = &p->state;
    const uintptr_t al = 4 * sf_dtype_size(s->dtype) - 1;
    int kv = 0;
    if (s->stride[3] == 1 && s->stride[0] % 4 == 0 && s->stride[1] % 4 == 0 &&
        s->stride[2] % 4 == 0 && ((uintptr_t)s->data & al) == 0 && a.N % 4 == 0)
        kv = a.N <= 128 ? 1 : a.N <= 256 ? 2 : a.N <= 512 ? 4 : 0;
    switch (p->x.dtype) {
    case SF_F32: return ssd_step_launch_state<float>(ctx, a, kv, s->dtype);
    case SF_F16: return ssd_step_launch_state<__half>(ctx, a, kv, s->dtype);
    case SF_BF16: return ssd_step_launch_state<__nv_bfloat16>(ctx, a, kv, s->dtype);
    default: return sf_fail(ctx, SF_ERR_DTYPE, "sf_ssd_step: x must be f32, f16 or bf16");
    }
}
