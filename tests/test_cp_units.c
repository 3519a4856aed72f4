/* test_cp_units.c - unit checks of the merge and the combine against
 * their formulas (empty rows, NaN that must not leak), and the error paths
 * of the building blocks and the drivers. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_cp.h"
#include "worst.h"

void check_merge_units(sf_backend be) {
    sf_ctx *ctx = mk_ctx(be);
    /* b 1, L 4, H 1, d 3: rows (acc, part) = (finite, finite), (-inf, finite),
     * (finite, -inf), (-inf, -inf); empty rows hold NaN that must not leak */
    dbuf OA = bnew(SF_F32, 12), OP = bnew(SF_F32, 12), LA = bnew(SF_F32, 4), LP = bnew(SF_F32, 4);
    float *oa = OA.h, *op = OP.h, *la = LA.h, *lp = LP.h;
    const float la0[4] = {0.5f, -INFINITY, 1.0f, -INFINITY}, lp0[4] = {1.5f, 2.0f, -INFINITY, -INFINITY};
    memcpy(la, la0, sizeof la0);
    memcpy(lp, lp0, sizeof lp0);
    for (int i = 0; i < 12; i++) {
        oa[i] = (float)(i + 1);
        op[i] = (float)(-i);
    }
    for (int e = 0; e < 3; e++) {
        oa[3 + e] = NAN;
        op[6 + e] = NAN;
        oa[9 + e] = op[9 + e] = NAN;
    }
    bput(OA), bput(OP), bput(LA), bput(LP);
    const float oa0[12] = {1, 2, 3, 0, 0, 0, 7, 8, 9, 0, 0, 0};
    const int64_t os[4] = {1, 4, 1, 3}, ls[3] = {1, 1, 4};
    OKS(sf_attn_merge(ctx, T(OA.d, SF_F32, 4, os), T(LA.d, SF_F32, 3, ls), T(OP.d, SF_F32, 4, os),
                      T(LP.d, SF_F32, 3, ls)));
    bget(OA), bget(LA);
    const double wa = 1.0 / (1.0 + exp(1.0)), wp = 1.0 - wa; /* lse 0.5 vs 1.5 */
    for (int e = 0; e < 3; e++) {
        CHECK(fabs(oa[e] - (wa * oa0[e] + wp * (-e))) < 1e-6, "merge row 0 elem %d: %g", e, (double)oa[e]);
        CHECK(oa[3 + e] == (float)(-(3 + e)), "merge row 1 (empty acc) elem %d: %g", e, (double)oa[3 + e]);
        CHECK(oa[6 + e] == oa0[6 + e], "merge row 2 (empty part) elem %d: %g", e, (double)oa[6 + e]);
        CHECK(oa[9 + e] == 0.0f, "merge row 3 (both empty) elem %d: %g", e, (double)oa[9 + e]);
    }
    CHECK(fabs(la[0] - (1.5 + log1p(exp(-1.0)))) < 1e-6, "merge lse row 0: %g", (double)la[0]);
    CHECK(la[1] == 2.0f && la[2] == 1.0f && la[3] == -INFINITY, "merge lse rows 1-3: %g %g %g",
          (double)la[1], (double)la[2], (double)la[3]);
    bfree(&OA), bfree(&OP), bfree(&LA), bfree(&LP);
    sf_ctx_destroy(ctx);
}

void check_combine_units(sf_backend be) {
    sf_ctx *ctx = mk_ctx(be);
    enum { R = 4, NS = 2 * 3 * 2 * 5 }; /* b 2, H 3, P 2, N 5 */
    dbuf S = brnd(SF_F32, R * NS, -1, 1), LD = brnd(SF_F32, R * 6, -3, 0), HIN = bnew(SF_F32, NS);
    const float *s = S.h, *ld = LD.h, *hin = HIN.h;
    for (int r = 0; r < R; r++) {
        bpoison(HIN);
        OKS(sf_ssd_cp_combine(ctx, T(S.d, SF_F32, 5, (int64_t[]){R, 2, 3, 2, 5}),
                              T(LD.d, SF_F32, 3, (int64_t[]){R, 2, 3}), r,
                              T(HIN.d, SF_F32, 4, (int64_t[]){2, 3, 2, 5})));
        bget(HIN);
        double worst = 0;
        for (int i = 0; i < NS; i++) {
            const int bh = i / 10;
            double want = 0; /* sum_{q<r} exp(sum_{q<k<r} ld_k) S_q, literally */
            for (int qq = 0; qq < r; qq++) {
                double e = 0;
                for (int kk = qq + 1; kk < r; kk++) e += ld[kk * 6 + bh];
                want += exp(e) * s[qq * NS + i];
            }
            worst = worst_of(worst, abs_diff(hin[i], want));
        }
        CHECK(worst < 1e-5, "combine rank %d: max abs err %g", r, worst);
    }
    bfree(&S), bfree(&LD), bfree(&HIN);
    sf_ctx_destroy(ctx);
}

#define EXPECT(call, want)                                                                         \
    do {                                                                                           \
        sf_status g_ = (call);                                                                     \
        if (g_ != (want)) {                                                                        \
            printf("FAIL %s:%d: %s -> %s (want %s): %s\n", __FILE__, __LINE__, #call,              \
                   sf_status_string(g_), sf_status_string(want), sf_ctx_last_error(ctx));          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static sf_status fake_run_attn(sf_ctx *ctx, const sf_attn_fwd_params *p) {
    rank_tp r = {NULL, 0, ctx, NULL, 0};
    sf_cp_transport t = make_tp(&r, 2); /* fails before any exchange */
    sf_status s = sf_cp_attn_ring_run(ctx, p, &t);
    sf_free(ctx, r.buf);
    return s;
}

void check_errors(void) {
    sf_ctx *ctx = mk_ctx(SF_BACKEND_CPU);
    ssd_case c = {"err", SF_F32, 1, 8, 2, 4, 1, 4, 64, 0, 0, 0, 0, 1, 0.0f, INFINITY,
                  SF_BACKEND_CPU, 1, {0}};
    ssd_data d;
    memset(&d, 0, sizeof d);
    d.x = brnd(SF_F32, 64, -1, 1);
    d.dt = brnd(SF_F32, 16, 0, 0.2);
    d.B = brnd(SF_F32, 32, -1, 1);
    d.C = brnd(SF_F32, 32, -1, 1);
    d.A = brnd(SF_F32, 2, -1, -0.5);
    float out[64], st[32], st2[32], ld[2], fin[32];
    int32_t sidx[8] = {0};
    sf_ssd_fwd_params p = ssd_params(&c, &d, 0, 8, out, NULL, 0);
    const sf_tensor S = T(st, SF_F32, 4, (int64_t[]){1, 2, 4, 4}), LD = T(ld, SF_F32, 2, (int64_t[]){1, 2});
    OKS(sf_ssd_cp_local(ctx, &p, S, LD));
    sf_ssd_fwd_params q = p;
    q.seq_idx = T(sidx, SF_I32, 2, (int64_t[]){1, 8});
    EXPECT(sf_ssd_cp_local(ctx, &q, S, LD), SF_ERR_UNSUPPORTED);
    EXPECT(sf_ssd_cp_correct(ctx, &q, S, S, LD), SF_ERR_UNSUPPORTED);
    q = p;
    q.cu_seqlens = T(sidx, SF_I32, 1, (int64_t[]){2});
    EXPECT(sf_ssd_cp_local(ctx, &q, S, LD), SF_ERR_UNSUPPORTED);
    EXPECT(sf_ssd_cp_local(ctx, &p, T(st, SF_F32, 4, (int64_t[]){1, 2, 4, 3}), LD), SF_ERR_SHAPE);
    EXPECT(sf_ssd_cp_local(ctx, &p, S, T(ld, SF_F16, 2, (int64_t[]){1, 2})), SF_ERR_DTYPE);
    EXPECT(sf_ssd_cp_local(ctx, &p, (sf_tensor){0}, LD), SF_ERR_NULL_POINTER);
    EXPECT(sf_ssd_cp_local(ctx, &p, T(d.B.h, SF_F32, 4, (int64_t[]){1, 2, 4, 4}), LD), SF_ERR_INVALID_ARG);
    EXPECT(sf_ssd_cp_local(NULL, &p, S, LD), SF_ERR_NULL_POINTER);
    EXPECT(sf_ssd_cp_local(ctx, NULL, S, LD), SF_ERR_NULL_POINTER);

    const sf_tensor S2 = T(st2, SF_F32, 4, (int64_t[]){1, 2, 4, 4});
    const sf_tensor SA = T(st, SF_F32, 5, (int64_t[]){2, 1, 1, 4, 4});
    const sf_tensor LA = T(ld, SF_F32, 3, (int64_t[]){2, 1, 1});
    const sf_tensor H1 = T(st2, SF_F32, 4, (int64_t[]){1, 1, 4, 4});
    OKS(sf_ssd_cp_combine(ctx, SA, LA, 1, H1));
    EXPECT(sf_ssd_cp_combine(ctx, SA, LA, 2, H1), SF_ERR_INVALID_ARG);
    EXPECT(sf_ssd_cp_combine(ctx, SA, LA, -1, H1), SF_ERR_INVALID_ARG);
    EXPECT(sf_ssd_cp_combine(ctx, SA, T(ld, SF_F32, 3, (int64_t[]){1, 1, 1}), 0, H1), SF_ERR_SHAPE);
    EXPECT(sf_ssd_cp_combine(ctx, SA, LA, 0, T(st, SF_F32, 4, (int64_t[]){1, 1, 4, 4})),
           SF_ERR_INVALID_ARG);
    EXPECT(sf_ssd_cp_combine(ctx, T(st, SF_F32, 4, (int64_t[]){1, 1, 4, 4}), LA, 0, H1), SF_ERR_SHAPE);

    OKS(sf_ssd_cp_correct(ctx, &p, S2, (sf_tensor){0}, (sf_tensor){0}));
    EXPECT(sf_ssd_cp_correct(ctx, &p, (sf_tensor){0}, S, LD), SF_ERR_NULL_POINTER);
    q = p;
    q.final_states = T(fin, SF_F32, 4, (int64_t[]){1, 2, 4, 4});
    EXPECT(sf_ssd_cp_correct(ctx, &q, S2, (sf_tensor){0}, LD), SF_ERR_NULL_POINTER);
    EXPECT(sf_ssd_cp_correct(ctx, &q, S2, S, (sf_tensor){0}), SF_ERR_NULL_POINTER);
    OKS(sf_ssd_cp_correct(ctx, &q, S2, S, LD));
    EXPECT(sf_ssd_cp_correct(ctx, &q, T(st2, SF_F32, 4, (int64_t[]){1, 2, 2, 4}), S, LD), SF_ERR_SHAPE);

    /* merge */
    float oa[48], op[48], la[4], lp[4];
    const int64_t os[4] = {1, 2, 2, 12}, ls[3] = {1, 2, 2};
    for (int i = 0; i < 4; i++) la[i] = lp[i] = 0.0f;
    OKS(sf_attn_merge(ctx, T(oa, SF_F32, 4, os), T(la, SF_F32, 3, ls), T(op, SF_F32, 4, os),
                      T(lp, SF_F32, 3, ls)));
    EXPECT(sf_attn_merge(ctx, T(oa, SF_F32, 4, os), T(la, SF_F32, 3, ls), T(op, SF_F32, 4, os),
                         T(lp, SF_F32, 3, (int64_t[]){1, 2, 1})), SF_ERR_SHAPE);
    EXPECT(sf_attn_merge(ctx, T(oa, SF_F32, 4, os), T(la, SF_F32, 3, ls), T(op, SF_I32, 4, os),
                         T(lp, SF_F32, 3, ls)), SF_ERR_DTYPE);
    EXPECT(sf_attn_merge(ctx, T(oa, SF_F32, 4, os), T(la, SF_F32, 3, ls), T(oa, SF_F32, 4, os),
                         T(lp, SF_F32, 3, ls)), SF_ERR_INVALID_ARG);
    EXPECT(sf_attn_merge(ctx, T(oa, SF_F32, 4, os), (sf_tensor){0}, T(op, SF_F32, 4, os),
                         T(lp, SF_F32, 3, ls)), SF_ERR_NULL_POINTER);

    /* drivers: what fails before any communication */
    sf_attn_fwd_params a;
    sf_attn_fwd_params_init(&a);
    a.q = T(oa, SF_F32, 4, os);
    a.k = T(op, SF_F32, 4, os);
    a.v = T(op, SF_F32, 4, os);
    a.out = T(d.x.h, SF_F32, 4, os);
    a.window_left = 1;
    EXPECT(fake_run_attn(ctx, &a), SF_ERR_UNSUPPORTED);
    a.window_left = -1;
    a.cu_seqlens_q = a.cu_seqlens_k = T(sidx, SF_I32, 1, (int64_t[]){2});
    EXPECT(fake_run_attn(ctx, &a), SF_ERR_UNSUPPORTED);
    memset(&a.cu_seqlens_q, 0, sizeof(sf_tensor));
    memset(&a.cu_seqlens_k, 0, sizeof(sf_tensor));
    a.alibi_slopes = T(lp, SF_F32, 1, (int64_t[]){2}); /* ALiBi needs each chunk's offset */
    EXPECT(fake_run_attn(ctx, &a), SF_ERR_UNSUPPORTED);
    memset(&a.alibi_slopes, 0, sizeof(sf_tensor));
    const int64_t odd[4] = {1, 3, 2, 8};
    a.q = T(oa, SF_F32, 4, odd);
    a.k = a.v = T(op, SF_F32, 4, odd);
    a.out = T(d.x.h, SF_F32, 4, odd);
    EXPECT(fake_run_attn(ctx, &a), SF_ERR_SHAPE);
    {
        rank_tp r = {NULL, 0, ctx, NULL, 0};
        sf_cp_transport t = make_tp(&r, 2);
        q.seq_idx = T(sidx, SF_I32, 2, (int64_t[]){1, 8});
        EXPECT(sf_cp_ssd_run(ctx, &q, &t), SF_ERR_UNSUPPORTED);
        sf_free(ctx, r.buf);
    }

    /* the communicator on a CPU context: no NCCL here, or not a GPU */
    sf_comm *comm = (sf_comm *)&c;
    sf_comm_id id;
    sf_status s = sf_comm_create(&comm, ctx, &id, 1, 0);
    CHECK((s == SF_ERR_DEVICE || s == SF_ERR_UNSUPPORTED) && comm == NULL, "sf_comm_create on CPU: %s",
          sf_status_string(s));
    EXPECT(sf_comm_create(NULL, ctx, &id, 1, 0),
           s == SF_ERR_DEVICE ? SF_ERR_NULL_POINTER : SF_ERR_UNSUPPORTED);
    s = sf_ssd_fwd_cp(ctx, NULL, &p);
    CHECK(s == SF_ERR_NULL_POINTER || s == SF_ERR_UNSUPPORTED, "sf_ssd_fwd_cp NULL comm: %s", sf_status_string(s));
    s = sf_attn_fwd_ring(ctx, NULL, &a);
    CHECK(s == SF_ERR_NULL_POINTER || s == SF_ERR_UNSUPPORTED, "sf_attn_fwd_ring NULL comm: %s", sf_status_string(s));
    CHECK(sf_comm_rank(NULL) == -1 && sf_comm_size(NULL) == 0, "sf_comm_rank/size of NULL");
    sf_comm_destroy(NULL);
    bfree(&d.x), bfree(&d.dt), bfree(&d.B), bfree(&d.C), bfree(&d.A);
    sf_ctx_destroy(ctx);
}

