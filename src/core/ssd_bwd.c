/* ssd_bwd.c - front end of sf_ssd_bwd: the forward's checks on the
 * forward's description (dout and dfinal_states in the places of out and
 * final_states), the gradients' shapes and dtypes, aliasing, then a
 * backend. */
#include "check.h"
#include "ssd_bwd.h"

void sf_ssd_bwd_params_init(sf_ssd_bwd_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    sf_ssd_fwd_params_init(&p->fwd);
    p->backend = SF_BACKEND_AUTO;
}

/* Every element of a host tensor (rank <= 4) set to v. */
static void fill_host(const sf_tensor *t, float v) {
    if (!t->data) return;
    int64_t sh[4] = {1, 1, 1, 1}, st[4] = {0, 0, 0, 0};
    for (int d = 0; d < t->rank; d++) {
        sh[4 - t->rank + d] = t->shape[d];
        st[4 - t->rank + d] = t->stride[d];
    }
    for (int64_t i = 0; i < sh[0]; i++)
        for (int64_t j = 0; j < sh[1]; j++)
            for (int64_t k = 0; k < sh[2]; k++)
                for (int64_t l = 0; l < sh[3]; l++)
                    sf_stf(t->data, t->dtype, i * st[0] + j * st[1] + k * st[2] + l * st[3], v);
}

/* No tokens or no channels, on the host: every gradient is zero but
 * dinitial_states, which is dfinal_states (the state passes through). */
static void ssd_bwd_empty_host(const sf_ssd_bwd_params *p) {
    const sf_tensor *zero[] = {&p->dx, &p->ddt, &p->dA, &p->dB, &p->dC, &p->dD, &p->dz, &p->ddt_bias};
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++) fill_host(zero[i], 0.0f);
    const sf_tensor *di = &p->dinitial_states, *df = &p->dfinal_states;
    if (!di->data) return;
    for (int64_t s = 0; s < di->shape[0]; s++)
        for (int64_t h = 0; h < di->shape[1]; h++)
            for (int64_t i = 0; i < di->shape[2]; i++)
                for (int64_t n = 0; n < di->shape[3]; n++)
                    ((float *)di->data)[sf_off4(di, s, h, i, n)] =
                        df->data ? ((const float *)df->data)[sf_off4(df, s, h, i, n)] : 0.0f;
}

/* A gradient of an optional input is only defined when the input is given. */
static sf_status need_input(sf_ctx *ctx, const char *op, const sf_tensor *grad, const char *gname,
                            const sf_tensor *in, const char *iname) {
    if (grad->data && !in->data)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %s is asked for but fwd.%s is absent", op, gname,
                       iname);
    return SF_OK;
}

sf_status sf_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_params *p) {
    static const char *op = "sf_ssd_bwd";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);

    /* the forward's description, dout and dfinal_states checked as its
     * out and final_states (same shapes and dtypes) */
    sf_ssd_fwd_params fp = p->fwd;
    fp.out = p->dout;
    fp.final_states = p->dfinal_states;
    fp.backend = p->backend;
    sf_ssd_bwd_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    CHK(sf_ssd_validate(ctx, &fp, op, "dout", "dfinal_states", 0, &pr.f));
    const sf_ssd_fwd_params *f = &p->fwd;
    const int64_t b = pr.f.batch, L = pr.f.seqlen, H = pr.f.nheads, P = pr.f.headdim;
    const int64_t G = pr.f.ngroups, N = pr.f.dstate;
    const int64_t ns = pr.f.varlen == 2 ? pr.f.nseq : b;

    CHK(sf_check_tensor(ctx, op, "dx", &p->dx, 0, 4, (int64_t[]){b, L, H, P}, (int)f->x.dtype, 1));
    CHK(sf_check_tensor(ctx, op, "ddt", &p->ddt, 0, 3, (int64_t[]){b, L, H}, (int)f->dt.dtype, 0));
    CHK(sf_check_tensor(ctx, op, "dB", &p->dB, 0, 4, (int64_t[]){b, L, G, N}, (int)f->B.dtype, 1));
    CHK(sf_check_tensor(ctx, op, "dC", &p->dC, 0, 4, (int64_t[]){b, L, G, N}, (int)f->C.dtype, 1));
    CHK(sf_check_tensor(ctx, op, "dA", &p->dA, 0, 1, (int64_t[]){H}, SF_F32, 0));
    CHK(need_input(ctx, op, &p->dz, "dz", &f->z, "z"));
    CHK(sf_check_tensor(ctx, op, "dz", &p->dz, 0, 4, (int64_t[]){b, L, H, P}, (int)f->x.dtype, 1));
    CHK(need_input(ctx, op, &p->dD, "dD", &f->D, "D"));
    if (pr.f.D_per_channel)
        CHK(sf_check_tensor(ctx, op, "dD", &p->dD, 0, 2, (int64_t[]){H, P}, SF_F32, 0));
    else
        CHK(sf_check_tensor(ctx, op, "dD", &p->dD, 0, 1, (int64_t[]){H}, SF_F32, 0));
    CHK(need_input(ctx, op, &p->ddt_bias, "ddt_bias", &f->dt_bias, "dt_bias"));
    CHK(sf_check_tensor(ctx, op, "ddt_bias", &p->ddt_bias, 0, 1, (int64_t[]){H}, SF_F32, 0));
    CHK(need_input(ctx, op, &p->dinitial_states, "dinitial_states", &f->initial_states, "initial_states"));
    CHK(sf_check_tensor(ctx, op, "dinitial_states", &p->dinitial_states, 0, 4, (int64_t[]){ns, H, P, N},
                        SF_F32, 0));
    CHK(sf_check_flag(ctx, op, "deterministic", p->deterministic));

    const sf_named_tensor outs[] = {SF_NT("dx", &p->dx), SF_NT("ddt", &p->ddt), SF_NT("dA", &p->dA),
                                    SF_NT("dB", &p->dB), SF_NT("dC", &p->dC), SF_NT("dD", &p->dD),
                                    SF_NT("dz", &p->dz), SF_NT("ddt_bias", &p->ddt_bias),
                                    SF_NT("dinitial_states", &p->dinitial_states)};
    const sf_named_tensor ins[] = {SF_NT("x", &f->x), SF_NT("dt", &f->dt), SF_NT("A", &f->A),
                                   SF_NT("B", &f->B), SF_NT("C", &f->C), SF_NT("D", &f->D),
                                   SF_NT("z", &f->z), SF_NT("dt_bias", &f->dt_bias),
                                   SF_NT("initial_states", &f->initial_states),
                                   SF_NT("seq_idx", &f->seq_idx), SF_NT("cu_seqlens", &f->cu_seqlens),
                                   SF_NT("dout", &p->dout), SF_NT("dfinal_states", &p->dfinal_states)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));

    if ((b == 0 || L == 0 || H == 0 || P == 0) && be != SF_BACKEND_CUDA) {
        ssd_bwd_empty_host(p);
        ctx->last_backend = be;
        return SF_OK;
    }
    sf_status s;
    switch (be) {
    case SF_BACKEND_REF:
        CHK(sf_ssd_build_segments(ctx, op, &pr.f));
        s = sf_ref_ssd_bwd(ctx, &pr);
        break;
    case SF_BACKEND_CPU:
        CHK(sf_ssd_build_segments(ctx, op, &pr.f));
        s = sf_cpu_ssd_bwd(ctx, &pr);
        break;
    default: s = sf_cuda_ssd_bwd(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}
