/* mamba.c - the Mamba-2 mixer over the public ops (transformers' Mamba2Mixer
 * layout):
 *   [z | xBC | dt] = h W_in^T                     (E, E + 2 G N, H columns)
 *   xBC = SiLU(causal_conv1d(xBC) + b)            (sf_conv1d_fwd; decode: sf_conv1d_update)
 *   y = SSD(x, dt + dt_bias (softplus), A, B, C) + D x
 *                                                 (sf_ssd_fwd; decode: sf_ssd_step)
 *   y = RMSNorm_g(y * silu(z)) w                  (sf_rmsnorm_gated, G groups)
 *   out = y W_out^T
 * Each sequence keeps one conv state and one SSM state in its slot: a
 * prefill writes them from zero (one call per sequence: the final states go
 * to the sequence's slot), a decode step updates them in place through
 * state_idx. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sf_status sfm_mamba_load(sfm_model *m, const sfm_checkpoint *ck, const char *prefix, int dequantize,
                         sfm_mamba **out, char *err, size_t errlen) {
    const sfm_config *c = m->cfg;
    const int64_t D = c->hidden_size, E = c->ssm_inner, H = c->ssm_heads, GN = (int64_t)c->ssm_groups * c->ssm_state;
    const int64_t CD = E + 2 * GN, W = c->ssm_conv_kernel, P = c->ssm_head_dim, N = c->ssm_state;
    const int dev = sf_ctx_device(m->ctx);
    sfm_mamba *mb = calloc(1, sizeof *mb);
    if (!mb) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory");
    *out = mb;
    if (W < 2 || W > 4) return sfm_model_fail(err, errlen, SF_ERR_UNSUPPORTED, "conv_kernel %lld (2 to 4)", (long long)W);
    char nm[200], bn[200];
#define NM(s) (snprintf(nm, sizeof nm, "%s.%s", prefix, s), nm)
#define NEED(var, s)                                          \
    const sfm_tensor *var = sfm_need(ck, NM(s), err, errlen); \
    if (!var) return SF_ERR_INVALID_ARG
    sf_status st;
    NEED(inw, "in_proj.weight");
    snprintf(bn, sizeof bn, "%s.in_proj.bias", prefix);
    if ((st = sfm_load_linear(m, inw, sfm_checkpoint_find(ck, bn), E + CD + H, D, dequantize, &mb->in_proj, err, errlen)))
        return st;
    NEED(outw, "out_proj.weight");
    snprintf(bn, sizeof bn, "%s.out_proj.bias", prefix);
    if ((st = sfm_load_linear(m, outw, sfm_checkpoint_find(ck, bn), D, E, dequantize, &mb->out_proj, err, errlen)))
        return st;
    /* conv1d.weight (CD, 1, W) read as (CD, W) */
    NEED(cw, "conv1d.weight");
    float *f;
    if ((st = sfm_host_f32(m, cw, &f, err, errlen))) return st;
    void *d = sfm_dev_alloc(m, (size_t)(CD * W) * 4);
    if (!d || sf_memcpy(m->ctx, d, f, (size_t)(CD * W) * 4) != SF_OK)
        return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for %s", cw->name);
    mb->conv_w = sf_tensor_contiguous(d, SF_F32, dev, 2, (int64_t[]){CD, W});
    const sfm_tensor *cb = sfm_checkpoint_find(ck, NM("conv1d.bias"));
    if (cb && (st = sfm_load_vec(m, cb, CD, &mb->conv_b, err, errlen))) return st;
    NEED(dtb, "dt_bias");
    if ((st = sfm_load_vec(m, dtb, H, &mb->dt_bias, err, errlen))) return st;
    NEED(dd, "D");
    if ((st = sfm_load_vec(m, dd, H, &mb->D, err, errlen))) return st;
    NEED(nw, "norm.weight");
    if ((st = sfm_load_vec(m, nw, E, &mb->norm, err, errlen))) return st;
    /* A = -exp(A_log), made on the host */
    NEED(al, "A_log");
    if (al->ndim != 1 || al->shape[0] != H) return sfm_model_fail(err, errlen, SF_ERR_SHAPE, "%s: want (%lld)", al->name, (long long)H);
    if ((st = sfm_host_f32(m, al, &f, err, errlen))) return st;
    float *a = malloc((size_t)H * 4);
    if (!a) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < H; i++) a[i] = -expf(f[i]);
    d = sfm_dev_alloc(m, (size_t)H * 4);
    st = d ? sf_memcpy(m->ctx, d, a, (size_t)H * 4) : SF_ERR_OUT_OF_MEMORY;
    free(a);
    if (st != SF_OK) return sfm_model_fail(err, errlen, st, "no device memory for A");
    mb->A = sf_tensor_contiguous(d, SF_F32, dev, 1, (int64_t[]){H});
    /* state slots */
    void *cs = sfm_dev_alloc(m, (size_t)(m->max_seqs * CD * (W - 1)) * 4);
    void *ss = sfm_dev_alloc(m, (size_t)(m->max_seqs * H * P * N) * 4);
    if (!cs || !ss) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for the Mamba states");
    mb->conv_state = sf_tensor_contiguous(cs, SF_F32, dev, 3, (int64_t[]){m->max_seqs, CD, W - 1});
    mb->ssm_state = sf_tensor_contiguous(ss, SF_F32, dev, 4, (int64_t[]){m->max_seqs, H, P, N});
    m->kv_bytes += (int64_t)m->max_seqs * (CD * (W - 1) + H * P * N) * 4;
    return SF_OK;
#undef NM
#undef NEED
}

#define STEP(call)                                                                                           \
    do {                                                                                                     \
        sf_status s_ = (call);                                                                               \
        if (s_ != SF_OK) return sfm_model_fail(err, errlen, s_, "mamba: %s: %s", #call, sf_ctx_last_error(m->ctx)); \
    } while (0)

sf_status sfm_mamba_mixer(sfm_model *m, const sfm_mamba *mb, int n, int64_t T, const int32_t *cu,
                          const int32_t *slots_h, void *slots_d, int decode, char *err, size_t errlen) {
    const sfm_config *c = m->cfg;
    const int dev = sf_ctx_device(m->ctx);
    const int64_t E = c->ssm_inner, H = c->ssm_heads, P = c->ssm_head_dim, G = c->ssm_groups, N = c->ssm_state;
    const int64_t GN = G * N, CD = E + 2 * GN, LD = E + CD + H, W = c->ssm_conv_kernel;
    const sf_dtype act = m->act;
    const size_t es = sf_dtype_size(act);
#define AT(buf, off) ((char *)(buf) + (size_t)(off) * es)
    STEP(sfm_linear_apply(m, &mb->in_proj, m->h, T, m->zxd));
    if (decode) {
        const sf_tensor si = sf_tensor_contiguous(slots_d, SF_I32, dev, 1, (int64_t[]){n});
        sf_conv1d_update_params cp;
        sf_conv1d_update_params_init(&cp);
        cp.conv_state = mb->conv_state;
        cp.x = sf_tensor_contiguous(AT(m->zxd, E), act, dev, 2, (int64_t[]){n, CD});
        cp.x.stride[0] = LD;
        cp.weight = mb->conv_w, cp.bias = mb->conv_b;
        cp.state_idx = si;
        cp.out = sf_tensor_contiguous(m->xbc, act, dev, 2, (int64_t[]){n, CD});
        cp.silu = 1;
        STEP(sf_conv1d_update(m->ctx, &cp));
        sf_ssd_step_params sp;
        sf_ssd_step_params_init(&sp);
        sp.state = mb->ssm_state;
        sp.x = sf_tensor_contiguous(m->xbc, act, dev, 3, (int64_t[]){n, H, P});
        sp.x.stride[0] = CD;
        sp.B = sf_tensor_contiguous(AT(m->xbc, E), act, dev, 3, (int64_t[]){n, G, N});
        sp.B.stride[0] = CD;
        sp.C = sf_tensor_contiguous(AT(m->xbc, E + GN), act, dev, 3, (int64_t[]){n, G, N});
        sp.C.stride[0] = CD;
        sp.dt = sf_tensor_contiguous(AT(m->zxd, E + CD), act, dev, 2, (int64_t[]){n, H});
        sp.dt.stride[0] = LD;
        sp.A = mb->A, sp.D = mb->D, sp.dt_bias = mb->dt_bias;
        sp.state_idx = si;
        sp.out = sf_tensor_contiguous(m->y, act, dev, 3, (int64_t[]){n, H, P});
        sp.dt_softplus = 1;
        sp.dt_min = (float)c->ssm_time_step_limit_lo, sp.dt_max = (float)c->ssm_time_step_limit_hi;
        STEP(sf_ssd_step(m->ctx, &sp));
    } else {
        for (int i = 0; i < n; i++) { /* one call per prompt: its final states go to its slot */
            const int64_t r0 = cu[i], L = cu[i + 1] - cu[i], s = slots_h[i];
            sf_conv1d_params cp;
            sf_conv1d_params_init(&cp);
            cp.x = sf_tensor_contiguous(AT(m->zxd, r0 * LD + E), act, dev, 3, (int64_t[]){1, L, CD});
            cp.x.stride[1] = LD, cp.x.stride[0] = L * LD;
            cp.weight = mb->conv_w, cp.bias = mb->conv_b;
            cp.final_state = sf_tensor_contiguous((float *)mb->conv_state.data + s * CD * (W - 1), SF_F32, dev, 3,
                                                  (int64_t[]){1, CD, W - 1});
            cp.out = sf_tensor_contiguous(AT(m->xbc, r0 * CD), act, dev, 3, (int64_t[]){1, L, CD});
            cp.silu = 1;
            STEP(sf_conv1d_fwd(m->ctx, &cp));
            sf_ssd_fwd_params sp;
            sf_ssd_fwd_params_init(&sp);
            char *xb = AT(m->xbc, r0 * CD);
            sp.x = sf_tensor_contiguous(xb, act, dev, 4, (int64_t[]){1, L, H, P});
            sp.x.stride[1] = CD, sp.x.stride[0] = L * CD;
            sp.B = sf_tensor_contiguous(xb + E * es, act, dev, 4, (int64_t[]){1, L, G, N});
            sp.B.stride[1] = CD, sp.B.stride[0] = L * CD;
            sp.C = sf_tensor_contiguous(xb + (E + GN) * es, act, dev, 4, (int64_t[]){1, L, G, N});
            sp.C.stride[1] = CD, sp.C.stride[0] = L * CD;
            sp.dt = sf_tensor_contiguous(AT(m->zxd, r0 * LD + E + CD), act, dev, 3, (int64_t[]){1, L, H});
            sp.dt.stride[1] = LD, sp.dt.stride[0] = L * LD;
            sp.A = mb->A, sp.D = mb->D, sp.dt_bias = mb->dt_bias;
            sp.out = sf_tensor_contiguous(AT(m->y, r0 * E), act, dev, 4, (int64_t[]){1, L, H, P});
            sp.final_states = sf_tensor_contiguous((float *)mb->ssm_state.data + s * H * P * N, SF_F32, dev, 4,
                                                   (int64_t[]){1, H, P, N});
            sp.chunk_size = c->ssm_chunk == 64 || c->ssm_chunk == 128 ? c->ssm_chunk : 256;
            sp.dt_softplus = 1;
            sp.dt_min = (float)c->ssm_time_step_limit_lo, sp.dt_max = (float)c->ssm_time_step_limit_hi;
            STEP(sf_ssd_fwd(m->ctx, &sp));
        }
    }
    sf_rmsnorm_gated_params gp;
    sf_rmsnorm_gated_params_init(&gp);
    gp.x = sf_tensor_contiguous(m->y, act, dev, 2, (int64_t[]){T, E});
    gp.z = sf_tensor_contiguous(m->zxd, act, dev, 2, (int64_t[]){T, E});
    gp.z.stride[0] = LD;
    gp.weight = mb->norm;
    gp.out = sf_tensor_contiguous(m->yn, act, dev, 2, (int64_t[]){T, E});
    gp.group_size = (int)(E / G);
    gp.norm_before_gate = c->ssm_norm_before_gate;
    gp.eps = (float)c->norm_eps;
    STEP(sf_rmsnorm_gated(m->ctx, &gp));
    return SF_OK; /* out_proj is the caller's, fused with the norm after it */
#undef AT
}
