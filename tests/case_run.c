/* case_run.c - the machinery that runs one case of the table (cases.c) on
 * one backend against the reference: seeded inputs, poisoned outputs with
 * guard bytes, the op, the comparison.  See cases.h. */
#define _POSIX_C_SOURCE 200809L
#include "case_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ */
/* op-specific: specs, index tensors, params, work counts              */
/* ------------------------------------------------------------------ */

enum { X, DT, A, B, C, D, Z, DTB, INIT, SEQ, CU, OUT, FIN }; /* ssd_fwd */
enum { S_STATE, S_X, S_DT, S_A, S_B, S_C, S_D, S_Z, S_DTB, S_IDX, S_OUT };
enum { Q, K, V, AO, LSE, CUQ, CUK, ALI };
enum { CV_X, CV_W, CV_BIAS, CV_INIT, CV_CU, CV_OUT, CV_FIN };      /* conv1d_fwd    */
enum { UP_STATE, UP_X, UP_W, UP_BIAS, UP_IDX, UP_OUT };           /* conv1d_update */
enum { RN_X, RN_Z, RN_W, RN_OUT, RN_NONE };                       /* rmsnorm_gated */
enum { NM_X, NM_RES, NM_W, NM_B, NM_OUT, NM_HOUT };              /* fused norms   */
enum { SW_G, SW_U, SW_OUT, SW_NONE };                                /* swiglu        */
enum { RP_Q, RP_K, RP_QO, RP_KO, RP_POS, RP_COS, RP_SIN };        /* rope          */
enum { WQ_X, WQ_D, WQ_S, WQ_MIN, WQ_BIAS, WQ_Y, WQ_DT, WQ_NONE };   /* gemm_wq       */
enum { PG_Q, PG_KC, PG_VC, PG_BT, PG_SL, PG_OUT, PG_LSE, PG_KN, PG_VN, PG_COS, PG_SIN, PG_ALI }; /* paged */

static int is_paged(const sfc_case *c) { return c->op == SFC_KV_APPEND || c->op == SFC_ATTN_PAGED; }

/* Keys a paged case's sequence bi holds after the call (append: the cached
 * ones plus the new tokens); b > 8 (a benchmark) repeats the 8 lengths. */
static int64_t paged_len(const sfc_case *c, int bi) {
    return (int64_t)c->klens[bi % 8] + (c->op == SFC_KV_APPEND ? c->Lq : 0);
}
static int64_t paged_pages(const sfc_case *c, int bi) {
    return (paged_len(c, bi) + c->page_size - 1) / c->page_size;
}
/* max_pages: the longest sequence's pages plus one unused (-1) entry;
 * num_pages: every needed page plus c->spare unused ones. */
static void paged_geometry(const sfc_case *c, int64_t *max_pages, int64_t *num_pages) {
    int64_t mp = 0, np = 0;
    for (int bi = 0; bi < c->b; bi++) {
        const int64_t n = paged_pages(c, bi);
        mp = n > mp ? n : mp;
        np += n;
    }
    *max_pages = mp + 1;
    *num_pages = np + c->spare;
}

/* conv1d_update: state slots (0 in a hand-made case means one per sequence) */
static int conv_slots(const sfc_case *c) { return c->nslots > 0 ? c->nslots : c->b; }

static void build_specs(const sfc_case *c, sf_dtype dt, tspec *t) {
    memset(t, 0, sizeof(tspec) * MAXT);
    int64_t b = c->b, L = c->L, H = c->H, P = c->P, G = c->G, N = c->N;
    /* SSD dt, B, C: the case's dtype, or f32 where the case asks */
    const sf_dtype dtdt = c->f32_in & SFC_F32_DT ? SF_F32 : dt;
    const sf_dtype bdt = c->f32_in & SFC_F32_B ? SF_F32 : dt;
    const sf_dtype cdt = c->f32_in & SFC_F32_C ? SF_F32 : dt;
    if (c->op == SFC_SSD_FWD) {
        int64_t ns = c->varlen == 2 ? c->nseq : b;
        ct_ssd_inputs(c, dt, t);
        ct_spec(&t[OUT], 4, (int64_t[]){b, L, H, P}, dt, GEN_OUT);
        if (c->final) ct_spec(&t[FIN], 4, (int64_t[]){ns, H, P, N}, SF_F32, GEN_OUT);
    } else if (c->op == SFC_SSD_STEP) {
        ct_spec(&t[S_STATE], 4, (int64_t[]){c->nslots, H, P, N}, c->state_dtype, GEN_HALF);
        t[S_STATE].is_inout = 1;
        ct_spec(&t[S_X], 3, (int64_t[]){b, H, P}, dt, GEN_NORMAL);
        ct_spec(&t[S_DT], 2, (int64_t[]){b, H}, dtdt, c->softplus ? GEN_DT_RAW : GEN_DT_POS);
        ct_spec(&t[S_A], 1, (int64_t[]){H}, SF_F32, GEN_A);
        ct_spec(&t[S_B], 3, (int64_t[]){b, G, N}, bdt, GEN_HALF);
        ct_spec(&t[S_C], 3, (int64_t[]){b, G, N}, cdt, GEN_HALF);
        if (c->D == 1) ct_spec(&t[S_D], 1, (int64_t[]){H}, SF_F32, GEN_NORMAL);
        if (c->D == 2) ct_spec(&t[S_D], 2, (int64_t[]){H, P}, SF_F32, GEN_NORMAL);
        if (c->z) ct_spec(&t[S_Z], 3, (int64_t[]){b, H, P}, dt, GEN_NORMAL);
        if (c->dt_bias) ct_spec(&t[S_DTB], 1, (int64_t[]){H}, SF_F32, c->softplus ? GEN_DTB_SP : GEN_DTB);
        if (c->nslots != c->b) ct_spec(&t[S_IDX], 1, (int64_t[]){b}, SF_I32, GEN_NONE);
        ct_spec(&t[S_OUT], 3, (int64_t[]){b, H, P}, dt, GEN_OUT);
    } else if (c->op == SFC_CONV1D_FWD) {
        int64_t ns = c->varlen == 2 ? c->nseq : b, dim = c->dim, W = c->width;
        ct_spec(&t[CV_X], 3, (int64_t[]){b, L, dim}, dt, GEN_NORMAL);
        ct_spec(&t[CV_W], 2, (int64_t[]){dim, W}, SF_F32, GEN_HALF);
        if (c->bias) ct_spec(&t[CV_BIAS], 1, (int64_t[]){dim}, SF_F32, GEN_NORMAL);
        if (c->init) ct_spec(&t[CV_INIT], 3, (int64_t[]){ns, dim, W - 1}, SF_F32, GEN_NORMAL);
        if (c->varlen == 2) ct_spec(&t[CV_CU], 1, (int64_t[]){ns + 1}, SF_I32, GEN_NONE);
        ct_spec(&t[CV_OUT], 3, (int64_t[]){b, L, dim}, dt, GEN_OUT);
        if (c->final) ct_spec(&t[CV_FIN], 3, (int64_t[]){ns, dim, W - 1}, SF_F32, GEN_OUT);
    } else if (c->op == SFC_CONV1D_UPDATE) {
        int64_t dim = c->dim, W = c->width;
        ct_spec(&t[UP_STATE], 3, (int64_t[]){conv_slots(c), dim, W - 1}, SF_F32, GEN_NORMAL);
        t[UP_STATE].is_inout = 1;
        ct_spec(&t[UP_X], 2, (int64_t[]){b, dim}, dt, GEN_NORMAL);
        ct_spec(&t[UP_W], 2, (int64_t[]){dim, W}, SF_F32, GEN_HALF);
        if (c->bias) ct_spec(&t[UP_BIAS], 1, (int64_t[]){dim}, SF_F32, GEN_NORMAL);
        if (conv_slots(c) != c->b) ct_spec(&t[UP_IDX], 1, (int64_t[]){b}, SF_I32, GEN_NONE);
        ct_spec(&t[UP_OUT], 2, (int64_t[]){b, dim}, dt, GEN_OUT);
    } else if (c->op == SFC_RMSNORM_GATED) {
        int64_t rows = b * L, dim = c->dim;
        ct_spec(&t[RN_X], 2, (int64_t[]){rows, dim}, dt, GEN_NORMAL);
        if (c->z) ct_spec(&t[RN_Z], 2, (int64_t[]){rows, dim}, dt, GEN_NORMAL);
        ct_spec(&t[RN_W], 1, (int64_t[]){dim}, SF_F32, GEN_NORMAL);
        ct_spec(&t[RN_OUT], 2, (int64_t[]){rows, dim}, dt, GEN_OUT);
    } else if (c->op == SFC_ADD_RMSNORM || c->op == SFC_ADD_LAYERNORM) {
        const int64_t rows = b * L, dim = c->dim;
        const sf_dtype wdt = c->wlow ? dt : SF_F32, rdt = c->res_f32 ? SF_F32 : dt;
        ct_spec(&t[NM_X], 2, (int64_t[]){rows, dim}, dt, GEN_NORMAL);
        if (c->residual) ct_spec(&t[NM_RES], 2, (int64_t[]){rows, dim}, rdt, GEN_NORMAL);
        ct_spec(&t[NM_W], 1, (int64_t[]){dim}, wdt, GEN_NORMAL);
        if (c->bias) ct_spec(&t[NM_B], 1, (int64_t[]){dim}, wdt, GEN_NORMAL);
        ct_spec(&t[NM_OUT], 2, (int64_t[]){rows, dim}, dt, GEN_OUT);
        /* h in place: written over the residual (set_params), compared there */
        if (c->residual && c->h_inplace) t[NM_RES].is_inout = 1;
        else if (c->hout) ct_spec(&t[NM_HOUT], 2, (int64_t[]){rows, dim}, rdt, GEN_OUT);
    } else if (c->op == SFC_SWIGLU) {
        const int64_t rows = b * L, n = c->dim;
        const int sep = c->layout == SF_SWIGLU_SEPARATE;
        ct_spec(&t[SW_G], 2, (int64_t[]){rows, sep ? n : 2 * n}, dt, GEN_NORMAL);
        if (sep) ct_spec(&t[SW_U], 2, (int64_t[]){rows, n}, dt, GEN_NORMAL);
        ct_spec(&t[SW_OUT], 2, (int64_t[]){rows, n}, dt, GEN_OUT);
    } else if (c->op == SFC_ROPE) {
        const int64_t T = b * L, d = c->d, R = c->rot_dim ? c->rot_dim : c->d;
        ct_spec(&t[RP_Q], 3, (int64_t[]){T, H, d}, dt, GEN_NORMAL);
        if (!c->no_k) ct_spec(&t[RP_K], 3, (int64_t[]){T, c->Hkv, d}, dt, GEN_NORMAL);
        t[RP_Q].is_inout = t[RP_K].is_inout = !c->out_of_place;
        if (c->out_of_place) {
            ct_spec(&t[RP_QO], 3, (int64_t[]){T, H, d}, dt, GEN_OUT);
            if (!c->no_k) ct_spec(&t[RP_KO], 3, (int64_t[]){T, c->Hkv, d}, dt, GEN_OUT);
        }
        if (c->pos_ids) ct_spec(&t[RP_POS], 1, (int64_t[]){T}, SF_I32, GEN_NONE);
        if (c->tables) {
            ct_spec(&t[RP_COS], 2, (int64_t[]){c->npos, R / 2}, SF_F32, GEN_UNIT);
            ct_spec(&t[RP_SIN], 2, (int64_t[]){c->npos, R / 2}, SF_F32, GEN_UNIT);
        }
    } else if (c->op == SFC_GEMM_WQ) {
        const int64_t M = b, n = c->wq_n, k = c->wq_k, ng = k / c->wq_group;
        ct_spec(&t[WQ_X], 2, (int64_t[]){M, k}, dt, GEN_NORMAL);
        ct_spec(&t[WQ_D], 2, (int64_t[]){n, c->wq_bits == 4 ? k / 2 : k}, SF_U8, GEN_NONE);
        /* scales and mins in x's dtype (f32 with f32 x), contiguous by contract */
        ct_spec(&t[WQ_S], 2, (int64_t[]){ng, n}, dt, GEN_SCALE);
        t[WQ_S].contig = 1;
        if (c->wq_min) {
            ct_spec(&t[WQ_MIN], 2, (int64_t[]){ng, n}, dt, GEN_MIN);
            t[WQ_MIN].contig = 1;
        }
        if (c->bias) ct_spec(&t[WQ_BIAS], 1, (int64_t[]){n}, dt, GEN_NORMAL);
        ct_spec(&t[WQ_Y], 2, (int64_t[]){M, n}, dt, GEN_OUT);
        if (c->wq_tiled) /* SF_QW_TILED: rows to a multiple of 128, row bytes of 64 */
            ct_spec(&t[WQ_DT], 2, (int64_t[]){(n + 127) / 128 * 128, ((c->wq_bits == 4 ? k / 2 : k) + 63) / 64 * 64},
                    SF_U8, GEN_NONE);
    } else if (is_paged(c)) {
        int64_t d = c->d, Hkv = c->Hkv, mp, np, ps = c->page_size;
        paged_geometry(c, &mp, &np);
        const int gpool = c->op == SFC_KV_APPEND ? GEN_OUT : GEN_NORMAL; /* append: poisoned */
        ct_spec(&t[PG_KC], 4, (int64_t[]){np, ps, Hkv, d}, dt, gpool);
        ct_spec(&t[PG_VC], 4, (int64_t[]){np, ps, Hkv, d}, dt, gpool);
        ct_spec(&t[PG_BT], 2, (int64_t[]){b, mp}, SF_I32, GEN_NONE);
        ct_spec(&t[PG_SL], 1, (int64_t[]){b}, SF_I32, GEN_NONE);
        if (c->op == SFC_ATTN_PAGED) {
            ct_spec(&t[PG_Q], 4, (int64_t[]){b, c->Lq, H, d}, dt, GEN_NORMAL);
            ct_spec(&t[PG_OUT], 4, (int64_t[]){b, c->Lq, H, d}, dt, GEN_OUT);
            ct_spec(&t[PG_LSE], 3, (int64_t[]){b, H, c->Lq}, SF_F32, GEN_OUT);
            if (c->alibi == 1) ct_spec(&t[PG_ALI], 1, (int64_t[]){H}, SF_F32, GEN_SLOPE);
            if (c->alibi == 2) ct_spec(&t[PG_ALI], 2, (int64_t[]){b, H}, SF_F32, GEN_SLOPE);
        } else {
            ct_spec(&t[PG_KN], 4, (int64_t[]){b, c->Lq, Hkv, d}, dt, GEN_NORMAL);
            ct_spec(&t[PG_VN], 4, (int64_t[]){b, c->Lq, Hkv, d}, dt, GEN_NORMAL);
            if (c->rope && c->tables) {
                const int64_t R = c->rot_dim ? c->rot_dim : d;
                ct_spec(&t[PG_COS], 2, (int64_t[]){c->npos, R / 2}, SF_F32, GEN_UNIT);
                ct_spec(&t[PG_SIN], 2, (int64_t[]){c->npos, R / 2}, SF_F32, GEN_UNIT);
            }
        }
    } else {
        int64_t d = c->d, Hkv = c->Hkv;
        if (c->attn_varlen) {
            int64_t tq = 0, tk = 0;
            for (int i = 0; i < c->b; i++) tq += c->qlens[i], tk += c->klens[i];
            ct_spec(&t[Q], 3, (int64_t[]){tq, H, d}, dt, GEN_NORMAL);
            ct_spec(&t[K], 3, (int64_t[]){tk, Hkv, d}, dt, GEN_NORMAL);
            ct_spec(&t[V], 3, (int64_t[]){tk, Hkv, d}, dt, GEN_NORMAL);
            ct_spec(&t[AO], 3, (int64_t[]){tq, H, d}, dt, GEN_OUT);
            ct_spec(&t[LSE], 2, (int64_t[]){H, tq}, SF_F32, GEN_OUT);
            ct_spec(&t[CUQ], 1, (int64_t[]){b + 1}, SF_I32, GEN_NONE);
            ct_spec(&t[CUK], 1, (int64_t[]){b + 1}, SF_I32, GEN_NONE);
        } else {
            ct_spec(&t[Q], 4, (int64_t[]){b, c->Lq, H, d}, dt, GEN_NORMAL);
            ct_spec(&t[K], 4, (int64_t[]){b, c->Lk, Hkv, d}, dt, GEN_NORMAL);
            ct_spec(&t[V], 4, (int64_t[]){b, c->Lk, Hkv, d}, dt, GEN_NORMAL);
            ct_spec(&t[AO], 4, (int64_t[]){b, c->Lq, H, d}, dt, GEN_OUT);
            ct_spec(&t[LSE], 3, (int64_t[]){b, H, c->Lq}, SF_F32, GEN_OUT);
        }
        if (c->alibi == 1) ct_spec(&t[ALI], 1, (int64_t[]){H}, SF_F32, GEN_SLOPE);
        if (c->alibi == 2) ct_spec(&t[ALI], 2, (int64_t[]){b, H}, SF_F32, GEN_SLOPE);
    }
}

/* idx[0..b) = the first b entries of a random permutation of 0..n-1 (n >=
 * b); without memory for the permutation, the identity. */
static void shuffled_slots(int32_t *idx, int b, int n, uint64_t *rng) {
    int *perm = (int *)malloc(sizeof(int) * (size_t)n);
    if (!perm) {
        for (int i = 0; i < b; i++) idx[i] = i;
        return;
    }
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(ct_rng_next(rng) % (uint64_t)(i + 1)), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    for (int i = 0; i < b; i++) idx[i] = perm[i];
    free(perm);
}

/* Index tensors: cu_seqlens, seq_idx, a shuffled state_idx with a pad. */
static void fill_index(const sfc_case *c, tspec *t, uint64_t *rng) {
    /* cu_seqlens of the SSD and the conv1d: the running sum of the lengths */
    const int cu_slot = c->op == SFC_SSD_FWD ? CU : c->op == SFC_CONV1D_FWD ? CV_CU : -1;
    if (cu_slot >= 0 && t[cu_slot].present) {
        int32_t *cu = (int32_t *)t[cu_slot].h;
        cu[0] = 0;
        for (int i = 0; i < c->nseq; i++) cu[i + 1] = cu[i] + c->seqlens[i];
    }
    if (c->op == SFC_SSD_FWD && t[SEQ].present) {
        int32_t *si = (int32_t *)t[SEQ].h;
        for (int64_t r = 0; r < c->b; r++) {
            int64_t pos = 0, id = 0;
            for (int s = 0; s < c->nseq; s++, id++)
                for (int j = 0; j < c->seqlens[s] && pos < c->L; j++) si[r * c->L + pos++] = (int32_t)id;
            while (pos < c->L) si[r * c->L + pos++] = (int32_t)id;
        }
    }
    if (c->op == SFC_SSD_STEP && t[S_IDX].present) {
        int32_t *idx = (int32_t *)t[S_IDX].h;
        shuffled_slots(idx, c->b, c->nslots, rng);
        if (c->b > 1) idx[c->b / 2] = -1; /* one padding entry */
    }
    if (c->op == SFC_CONV1D_UPDATE && t[UP_IDX].present) {
        int32_t *idx = (int32_t *)t[UP_IDX].h;
        const int n = conv_slots(c) > c->b ? conv_slots(c) : c->b;
        shuffled_slots(idx, c->b, n, rng);
        /* slots past conv_slots are padding */
        for (int i = 0; i < c->b; i++) idx[i] = idx[i] < conv_slots(c) ? idx[i] : -1;
        if (c->b > 1) idx[c->b / 2] = -1; /* one padding entry */
    }
    if (is_paged(c)) {
        /* the pages in a random order (non-contiguous, non-monotonic), the
         * spare ones left unused somewhere in the pool */
        int64_t mp, np, used = 0;
        paged_geometry(c, &mp, &np);
        for (int bi = 0; bi < c->b; bi++) used += paged_pages(c, bi);
        int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)(used + 1));
        int32_t *bt = (int32_t *)t[PG_BT].h, *sl = (int32_t *)t[PG_SL].h;
        if (perm) shuffled_slots(perm, (int)used, (int)np, rng);
        int64_t k = 0;
        for (int bi = 0; bi < c->b; bi++) {
            for (int64_t j = 0; j < mp; j++)
                bt[bi * mp + j] = j < paged_pages(c, bi) ? (perm ? perm[k++] : (int32_t)k++) : -1;
            sl[bi] = c->klens[bi % 8];
        }
        free(perm);
    }
    if (c->op == SFC_GEMM_WQ) /* uniformly random codes, every byte value */
        for (int64_t e = 0; e < ct_numel(&t[WQ_D]); e++) t[WQ_D].h[e] = (unsigned char)(ct_rng_next(rng) >> 56);
    if (c->op == SFC_GEMM_WQ && c->wq_tiled) { /* the same codes tiled, by the library on the host */
        sf_ctx *hc = NULL;
        sf_qweight q;
        memset(&q, 0, sizeof q);
        q.format = c->wq_bits == 4 ? SF_QW_INT4 : SF_QW_INT8;
        q.n = c->wq_n, q.k = c->wq_k, q.group_size = c->wq_group;
        q.data = sf_tensor_contiguous(t[WQ_D].h, SF_U8, SF_DEVICE_CPU, 2, t[WQ_D].shape);
        /* scales are not read: a stand-in of the right shape for validation */
        float *sc = (float *)calloc((size_t)(c->wq_k / c->wq_group * c->wq_n), sizeof(float));
        q.scales = sf_tensor_contiguous(sc, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){c->wq_k / c->wq_group, c->wq_n});
        const sf_tensor dst = sf_tensor_contiguous(t[WQ_DT].h, SF_U8, SF_DEVICE_CPU, 2, t[WQ_DT].shape);
        sf_status st = sc ? sf_ctx_create(&hc, SF_DEVICE_CPU) : SF_ERR_OUT_OF_MEMORY;
        if (st == SF_OK) st = sf_tile_qweight(hc, &q, &dst);
        if (st != SF_OK) { /* poison: the comparison then fails loudly */
            fprintf(stderr, "sf_tile_qweight: %s\n", hc ? sf_ctx_last_error(hc) : "no context");
            memset(t[WQ_DT].h, 0xff, (size_t)ct_numel(&t[WQ_DT]));
        }
        sf_ctx_destroy(hc);
        free(sc);
    }
    if (c->op == SFC_ROPE && t[RP_POS].present) /* distinct positions in a random order */
        shuffled_slots((int32_t *)t[RP_POS].h, c->b * c->L, c->npos, rng);
    if (c->op == SFC_ATTN_FWD && t[CUQ].present) {
        int32_t *cq = (int32_t *)t[CUQ].h, *ck = (int32_t *)t[CUK].h;
        cq[0] = ck[0] = 0;
        for (int i = 0; i < c->b; i++) cq[i + 1] = cq[i] + c->qlens[i], ck[i + 1] = ck[i] + c->klens[i];
    }
}

/* kv_append's parameters with the rotation its rope points to. */
typedef struct append_params {
    sf_kv_append_params a;
    sf_rope_params rope;
} append_params;

static void set_params(const sfc_case *c, tspec *t, int ref, int device, sf_backend be,
                       void *params) {
#define VW(i) ct_view(&t[i], ref ? (void *)t[i].ref : t[i].dptr, ref, device)
    if (c->op == SFC_SSD_FWD) {
        sf_ssd_fwd_params *p = (sf_ssd_fwd_params *)params;
        sf_ssd_fwd_params_init(p);
        p->x = VW(X), p->dt = VW(DT), p->A = VW(A), p->B = VW(B), p->C = VW(C);
        p->D = VW(D), p->z = VW(Z), p->dt_bias = VW(DTB), p->initial_states = VW(INIT);
        p->seq_idx = VW(SEQ), p->cu_seqlens = VW(CU), p->out = VW(OUT), p->final_states = VW(FIN);
        p->chunk_size = c->chunk;
        p->dt_softplus = c->softplus;
        p->dt_min = c->dt_min;
        p->dt_max = c->dt_max > 0 ? c->dt_max : INFINITY;
        p->backend = be;
    } else if (c->op == SFC_SSD_STEP) {
        sf_ssd_step_params *p = (sf_ssd_step_params *)params;
        sf_ssd_step_params_init(p);
        p->state = VW(S_STATE), p->x = VW(S_X), p->dt = VW(S_DT), p->A = VW(S_A);
        p->B = VW(S_B), p->C = VW(S_C), p->D = VW(S_D), p->z = VW(S_Z), p->dt_bias = VW(S_DTB);
        p->state_idx = VW(S_IDX), p->out = VW(S_OUT);
        p->dt_softplus = c->softplus;
        p->dt_min = c->dt_min;
        p->dt_max = c->dt_max > 0 ? c->dt_max : INFINITY;
        p->backend = be;
    } else if (c->op == SFC_CONV1D_FWD) {
        sf_conv1d_params *p = (sf_conv1d_params *)params;
        sf_conv1d_params_init(p);
        p->x = VW(CV_X), p->weight = VW(CV_W), p->bias = VW(CV_BIAS);
        p->initial_state = VW(CV_INIT), p->final_state = VW(CV_FIN);
        p->cu_seqlens = VW(CV_CU), p->out = VW(CV_OUT);
        p->silu = c->silu;
        p->backend = be;
    } else if (c->op == SFC_CONV1D_UPDATE) {
        sf_conv1d_update_params *p = (sf_conv1d_update_params *)params;
        sf_conv1d_update_params_init(p);
        p->conv_state = VW(UP_STATE), p->x = VW(UP_X), p->weight = VW(UP_W);
        p->bias = VW(UP_BIAS), p->state_idx = VW(UP_IDX), p->out = VW(UP_OUT);
        p->silu = c->silu;
        p->backend = be;
    } else if (c->op == SFC_RMSNORM_GATED) {
        sf_rmsnorm_gated_params *p = (sf_rmsnorm_gated_params *)params;
        sf_rmsnorm_gated_params_init(p);
        p->x = VW(RN_X), p->z = VW(RN_Z), p->weight = VW(RN_W), p->out = VW(RN_OUT);
        p->group_size = c->group;
        p->norm_before_gate = c->norm_before_gate;
        p->eps = 1e-5f;
        p->backend = be;
    } else if (c->op == SFC_ADD_RMSNORM || c->op == SFC_ADD_LAYERNORM) {
        sf_norm_params *p = (sf_norm_params *)params;
        sf_norm_params_init(p);
        p->x = VW(NM_X), p->residual = VW(NM_RES), p->weight = VW(NM_W), p->bias = VW(NM_B);
        p->out = VW(NM_OUT), p->residual_out = c->h_inplace ? p->residual : VW(NM_HOUT);
        if (c->eps > 0.f) p->eps = c->eps;
        p->backend = be;
    } else if (c->op == SFC_SWIGLU) {
        sf_swiglu_params *p = (sf_swiglu_params *)params;
        sf_swiglu_params_init(p);
        p->gate = VW(SW_G), p->up = VW(SW_U), p->out = VW(SW_OUT);
        p->layout = (sf_swiglu_layout)c->layout;
        p->backend = be;
    } else if (c->op == SFC_ROPE) {
        sf_rope_params *p = (sf_rope_params *)params;
        sf_rope_params_init(p);
        p->q = VW(RP_Q), p->k = VW(RP_K), p->q_out = VW(RP_QO), p->k_out = VW(RP_KO);
        p->positions = VW(RP_POS), p->cos = VW(RP_COS), p->sin = VW(RP_SIN);
        p->rotary_dim = c->rot_dim;
        p->style = c->gptj ? SF_ROPE_GPTJ : SF_ROPE_NEOX;
        if (c->llama3) p->scaling = SF_ROPE_LLAMA3, p->theta = 500000.0f;
        p->backend = be;
    } else if (c->op == SFC_GEMM_WQ) {
        sf_gemm_wq_params *p = (sf_gemm_wq_params *)params;
        sf_gemm_wq_params_init(p);
        p->x = VW(WQ_X), p->bias = VW(WQ_BIAS), p->y = VW(WQ_Y);
        p->w.format = c->wq_bits == 4 ? SF_QW_INT4 : SF_QW_INT8;
        p->w.n = c->wq_n, p->w.k = c->wq_k, p->w.group_size = c->wq_group;
        p->w.data = VW(WQ_D), p->w.scales = VW(WQ_S), p->w.mins = VW(WQ_MIN);
        if (c->wq_tiled && !ref) p->w.data = VW(WQ_DT), p->w.layout = SF_QW_TILED;
        p->backend = be;
    } else if (c->op == SFC_KV_APPEND) {
        append_params *ap = (append_params *)params;
        sf_kv_append_params *p = &ap->a;
        sf_kv_append_params_init(p);
        p->k_cache = VW(PG_KC), p->v_cache = VW(PG_VC), p->k = VW(PG_KN), p->v = VW(PG_VN);
        p->block_table = VW(PG_BT), p->cache_seqlens = VW(PG_SL);
        p->backend = be;
        if (c->rope) {
            sf_rope_params *r = &ap->rope;
            sf_rope_params_init(r);
            r->cos = VW(PG_COS), r->sin = VW(PG_SIN);
            r->rotary_dim = c->rot_dim;
            r->style = c->gptj ? SF_ROPE_GPTJ : SF_ROPE_NEOX;
            if (c->llama3) r->scaling = SF_ROPE_LLAMA3, r->theta = 500000.0f;
            p->rope = r;
        }
    } else if (c->op == SFC_ATTN_PAGED) {
        sf_attn_paged_params *p = (sf_attn_paged_params *)params;
        sf_attn_paged_params_init(p);
        p->q = VW(PG_Q), p->k_cache = VW(PG_KC), p->v_cache = VW(PG_VC);
        p->block_table = VW(PG_BT), p->seqlens = VW(PG_SL), p->out = VW(PG_OUT), p->lse = VW(PG_LSE);
        p->causal = c->causal;
        p->softmax_scale = c->ascale > 0.f ? c->ascale / sqrtf((float)c->d) : 0.f;
        p->window_left = c->wl == 0 && c->wr == 0 ? -1 : c->wl;
        p->window_right = c->wl == 0 && c->wr == 0 ? -1 : c->wr;
        p->softcap = c->softcap;
        p->alibi_slopes = VW(PG_ALI);
        p->backend = be;
    } else {
        sf_attn_fwd_params *p = (sf_attn_fwd_params *)params;
        sf_attn_fwd_params_init(p);
        p->q = VW(Q), p->k = VW(K), p->v = VW(V), p->out = VW(AO), p->lse = VW(LSE);
        p->cu_seqlens_q = VW(CUQ), p->cu_seqlens_k = VW(CUK);
        p->causal = c->causal;
        p->softmax_scale = c->ascale > 0.f ? c->ascale / sqrtf((float)c->d) : 0.f;
        p->window_left = c->wl == 0 && c->wr == 0 ? -1 : c->wl;
        p->window_right = c->wl == 0 && c->wr == 0 ? -1 : c->wr;
        p->softcap = c->softcap;
        p->alibi_slopes = VW(ALI);
        p->backend = be;
    }
#undef VW
}

static sf_status call_op(const sfc_case *c, sf_ctx *ctx, const void *params) {
    switch (c->op) {
    case SFC_SSD_FWD: return sf_ssd_fwd(ctx, (const sf_ssd_fwd_params *)params);
    case SFC_SSD_STEP: return sf_ssd_step(ctx, (const sf_ssd_step_params *)params);
    case SFC_CONV1D_FWD: return sf_conv1d_fwd(ctx, (const sf_conv1d_params *)params);
    case SFC_CONV1D_UPDATE: return sf_conv1d_update(ctx, (const sf_conv1d_update_params *)params);
    case SFC_RMSNORM_GATED: return sf_rmsnorm_gated(ctx, (const sf_rmsnorm_gated_params *)params);
    case SFC_KV_APPEND: return sf_kv_append(ctx, (const sf_kv_append_params *)params);
    case SFC_ATTN_PAGED: return sf_attn_paged(ctx, (const sf_attn_paged_params *)params);
    case SFC_ADD_RMSNORM: return sf_add_rmsnorm(ctx, (const sf_norm_params *)params);
    case SFC_ADD_LAYERNORM: return sf_add_layernorm(ctx, (const sf_norm_params *)params);
    case SFC_SWIGLU: return sf_swiglu(ctx, (const sf_swiglu_params *)params);
    case SFC_ROPE: return sf_rope(ctx, (const sf_rope_params *)params);
    case SFC_GEMM_WQ: return sf_gemm_wq(ctx, (const sf_gemm_wq_params *)params);
    default: return sf_attn_fwd(ctx, (const sf_attn_fwd_params *)params);
    }
}

/* FLOPs and the fewest bytes one call must move. */
static void work(const sfc_case *c, const tspec *t, sfc_result *r) {
    double bytes = 0;
    for (int i = 0; i < MAXT; i++)
        if (t[i].present) bytes += (double)ct_numel(&t[i]) * (double)sf_dtype_size(t[i].dtype) * (t[i].is_inout ? 2 : 1);
    r->bytes = bytes;
    if (c->op == SFC_SSD_FWD) {
        double tok = (double)c->b * c->L * c->H, Qc = c->chunk;
        r->flops = tok * (4.0 * c->P * c->N + Qc * c->N + Qc * c->P);
    } else if (c->op == SFC_SSD_STEP) {
        r->flops = (double)c->b * c->H * c->P * c->N * 5.0;
    } else if (c->op == SFC_CONV1D_FWD || c->op == SFC_CONV1D_UPDATE) {
        r->flops = 2.0 * c->width * (double)c->b * c->L * c->dim;
    } else if (c->op == SFC_RMSNORM_GATED) {
        r->flops = (double)c->b * c->L * c->dim * (c->z ? 6.0 : 4.0);
    } else if (c->op == SFC_ADD_RMSNORM || c->op == SFC_ADD_LAYERNORM) {
        r->flops = (double)c->b * c->L * c->dim * (c->op == SFC_ADD_LAYERNORM ? 7.0 : 5.0);
    } else if (c->op == SFC_SWIGLU) {
        r->flops = (double)c->b * c->L * c->dim * 5.0;
    } else if (c->op == SFC_ROPE) {
        r->flops = (double)c->b * c->L * (c->H + c->Hkv) * (c->rot_dim ? c->rot_dim : c->d) * 3.0;
    } else if (c->op == SFC_GEMM_WQ) {
        r->flops = 2.0 * c->b * c->L * (double)c->wq_n * c->wq_k;
    } else if (c->op == SFC_KV_APPEND) {
        /* a copy: bytes only; rope: 3 flops a rotated channel */
        r->flops = c->rope ? (double)c->b * c->Lq * c->Hkv * (c->rot_dim ? c->rot_dim : c->d) * 3.0 : 0.0;
    } else {
        double pairs = 0;
        int nb = c->b;
        for (int bi = 0; bi < nb; bi++) {
            int64_t lq = c->attn_varlen ? c->qlens[bi] : c->Lq, lk = c->attn_varlen ? c->klens[bi] : c->Lk;
            if (c->op == SFC_ATTN_PAGED) lk = paged_len(c, bi);
            for (int64_t i = 0; i < lq; i++) {
                int64_t pos = i + lk - lq;
                int64_t wl = c->wl == 0 && c->wr == 0 ? -1 : c->wl, wr = c->wl == 0 && c->wr == 0 ? -1 : c->wr;
                if (c->causal) wr = 0;
                int64_t lo = wl < 0 ? 0 : pos - wl, hi = wr < 0 ? lk : pos + wr + 1;
                if (lo < 0) lo = 0;
                if (hi > lk) hi = lk;
                if (hi > lo) pairs += (double)(hi - lo);
            }
        }
        r->flops = 4.0 * pairs * c->H * c->d;
    }
}

/* ------------------------------------------------------------------ */
/* run                                                                  */
/* ------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The reference's pools after kv_append equal the expectation computed here
 * from the block table: new token j of sequence b at position len + j, every
 * other slot NaN.  A rotated K pool (rope) is checked for where it was
 * written only: its values are the reference's to define. */
static int append_ref_ok(const sfc_case *c, const tspec *t) {
    const int64_t Hkv = c->Hkv, d = c->d, ps = c->page_size, mp = t[PG_BT].shape[1];
    const int64_t n = ct_numel(&t[PG_KC]);
    const int32_t *bt = (const int32_t *)t[PG_BT].h;
    float *want = (float *)malloc(sizeof(float) * (size_t)(n + 1));
    if (!want) return 0;
    int ok = 1;
    for (int pool = 0; pool < 2 && ok; pool++) {
        const float *src = t[pool ? PG_VN : PG_KN].ref, *got = t[pool ? PG_VC : PG_KC].ref;
        for (int64_t i = 0; i < n; i++) want[i] = NAN;
        for (int bi = 0; bi < c->b; bi++)
            for (int64_t j = 0; j < c->Lq; j++) {
                const int64_t pos = c->klens[bi % 8] + j, page = bt[bi * mp + pos / ps];
                for (int64_t h = 0; h < Hkv; h++)
                    memcpy(want + ((page * ps + pos % ps) * Hkv + h) * d,
                           src + (((int64_t)bi * c->Lq + j) * Hkv + h) * d, sizeof(float) * (size_t)d);
            }
        const int where_only = pool == 0 && c->rope;
        for (int64_t i = 0; i < n && ok; i++)
            if (!(isnan(want[i]) ? isnan(got[i]) : where_only ? !isnan(got[i]) : want[i] == got[i])) ok = 0;
    }
    free(want);
    return ok;
}

/* The error bar of FlashAttention's own tests: a naive attention in the
 * low precision (S = QK^T scaled and stored in the dtype, P = exp(S - max)
 * stored in the dtype, O = PV / rowsum accumulated in f32 and stored), its
 * relative error against the reference.  Ours must be at most twice it. */
static double naive_attn_err(const sfc_case *c, const tspec *t, sf_dtype dt) {
    const int64_t H = c->H, Hkv = c->Hkv, d = c->d, grp = H / Hkv;
    const double scale = (c->ascale > 0.f ? c->ascale : 1.0) / sqrt((double)d);
    const int32_t *cq = t[CUQ].present ? (const int32_t *)t[CUQ].h : NULL;
    const int32_t *ck = t[CUK].present ? (const int32_t *)t[CUK].h : NULL;
    const float *q = t[Q].ref, *k = t[K].ref, *v = t[V].ref, *ref = t[AO].ref;
    const float *slopes = t[ALI].present ? t[ALI].ref : NULL;
    int64_t maxk = 0;
    for (int bi = 0; bi < c->b; bi++) {
        int64_t lk = ck ? ck[bi + 1] - ck[bi] : c->Lk;
        if (lk > maxk) maxk = lk;
    }
    float *p = (float *)malloc(sizeof(float) * (size_t)(maxk + 1));
    float *o = (float *)malloc(sizeof(float) * (size_t)d);
    if (!p || !o) {
        free(p);
        free(o);
        return NAN; /* no low-precision baseline: reported as such */
    }
    double num = 0, den = 0;
    for (int bi = 0; bi < c->b; bi++) {
        int64_t q0 = cq ? cq[bi] : (int64_t)bi * c->Lq, lq = cq ? cq[bi + 1] - cq[bi] : c->Lq;
        int64_t k0 = ck ? ck[bi] : (int64_t)bi * c->Lk, lk = ck ? ck[bi + 1] - ck[bi] : c->Lk;
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < lq; i++) {
                int64_t pos = i + lk - lq;
                int64_t wl = c->wl == 0 && c->wr == 0 ? -1 : c->wl, wr = c->wl == 0 && c->wr == 0 ? -1 : c->wr;
                if (c->causal) wr = 0;
                int64_t lo = wl < 0 ? 0 : pos - wl, hi = wr < 0 ? lk : pos + wr + 1;
                if (lo < 0) lo = 0;
                if (hi > lk) hi = lk;
                const float *qi = q + ((q0 + i) * H + h) * d;
                float m = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    const float *kj = k + ((k0 + j) * Hkv + h / grp) * d;
                    float s = 0;
                    for (int64_t e = 0; e < d; e++) s += qi[e] * kj[e];
                    s = (float)(s * scale);
                    if (c->softcap > 0.f) s = c->softcap * tanhf(s / c->softcap);
                    if (slopes) s -= slopes[c->alibi == 2 ? bi * H + h : h] * (float)(pos > j ? pos - j : j - pos);
                    p[j - lo] = ct_round_to(dt, s);
                    if (p[j - lo] > m) m = p[j - lo];
                }
                float l = 0;
                for (int64_t e = 0; e < d; e++) o[e] = 0;
                for (int64_t j = lo; j < hi; j++) {
                    float pj = ct_round_to(dt, expf(p[j - lo] - m));
                    l += pj;
                    const float *vj = v + ((k0 + j) * Hkv + h / grp) * d;
                    for (int64_t e = 0; e < d; e++) o[e] += pj * vj[e];
                }
                const float *ri = ref + ((q0 + i) * H + h) * d;
                for (int64_t e = 0; e < d; e++) {
                    double ov = hi > lo ? ct_round_to(dt, o[e] / l) : 0.0, r = ri[e];
                    num += (ov - r) * (ov - r);
                    den += r * r;
                }
            }
    }
    free(p);
    free(o);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}


/* One timed call: the backend's op, or the baseline's. */
typedef struct timed_call {
    const sfc_case *c;
    sf_ctx *ctx;
    const void *params;
    const sfc_baseline *bl; /* NULL: the backend (call_op, then synchronize) */
    char *msg;
    size_t msglen;
} timed_call;

static sf_status timed_once(const timed_call *tc) {
    if (tc->bl) return tc->bl->run(tc->bl->self, tc->c->op, tc->params, tc->msg, tc->msglen);
    sf_status st = call_op(tc->c, tc->ctx, tc->params);
    return st == SF_OK ? sf_ctx_synchronize(tc->ctx) : st;
}

/* A warm-up, then the median of `reps` calls, each up to its completion
 * (wall clock: the backend and the baseline are timed alike). */
static sf_status time_median(const timed_call *tc, int reps, double *ms) {
    double *ts = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!ts) return SF_ERR_OUT_OF_MEMORY;
    sf_status st = timed_once(tc);
    for (int r = 0; r < reps && st == SF_OK; r++) {
        double t0 = sfc_now();
        st = timed_once(tc);
        ts[r] = sfc_now() - t0;
    }
    if (st == SF_OK) {
        qsort(ts, (size_t)reps, sizeof(double), cmp_double);
        *ms = 1e3 * ts[reps / 2];
    }
    free(ts);
    return st;
}

/* The baseline's outputs, tb[0] like t[first] and tb[1] like t[second]
 * (when the op has that output and the baseline writes it): allocated on
 * the target, poisoned, written by one untimed run and copied back; then
 * the baseline is timed.  prm is the backend's params: a copy points at
 * tb. */
static sf_status run_baseline(const sfc_case *c, tspec *t, tspec *tb, int first, int second,
                              const void *prm, sf_ctx *ctx, int reps, const sfc_baseline *bl,
                              sfc_result *res, char *msg, size_t msglen) {
    union {
        sf_ssd_fwd_params a;
        sf_attn_fwd_params c;
    } bp;
    if (c->op != SFC_SSD_FWD && c->op != SFC_ATTN_FWD) {
        snprintf(msg, msglen, "no baseline for %s", sfc_op_name(c->op));
        return SF_ERR_UNSUPPORTED;
    }
    const int slot[2] = {first, c->op == SFC_SSD_FWD ? second : -1};
    for (int k = 0; k < 2; k++) {
        if (slot[k] < 0 || !t[slot[k]].present) continue;
        tb[k] = t[slot[k]];
        tb[k].ref = NULL;
        tb[k].dptr = NULL;
        tb[k].h = (unsigned char *)malloc(tb[k].alloc);
        if (!tb[k].h) {
            snprintf(msg, msglen, "cannot allocate %zu bytes of host memory for the baseline's output", tb[k].alloc);
            return SF_ERR_OUT_OF_MEMORY;
        }
        memset(tb[k].h, 0xff, tb[k].alloc);
        sf_status st = sf_malloc(ctx, &tb[k].dptr, tb[k].alloc);
        if (st == SF_OK) st = sf_memcpy(ctx, tb[k].dptr, tb[k].h, tb[k].alloc);
        if (st != SF_OK) return st;
    }
    const int device = sf_ctx_device(ctx);
    if (c->op == SFC_SSD_FWD) {
        bp.a = *(const sf_ssd_fwd_params *)prm;
        bp.a.out = ct_view(&tb[0], tb[0].dptr, 0, device);
        bp.a.final_states = ct_view(&tb[1], tb[1].dptr, 0, device);
    } else {
        bp.c = *(const sf_attn_fwd_params *)prm;
        bp.c.out = ct_view(&tb[0], tb[0].dptr, 0, device);
        memset(&bp.c.lse, 0, sizeof bp.c.lse);
    }
    sf_status st = bl->prepare(bl->self, c->op, &bp, msg, msglen);
    if (st != SF_OK) return st;
    st = bl->run(bl->self, c->op, &bp, msg, msglen);
    for (int k = 0; k < 2 && st == SF_OK; k++) {
        if (!tb[k].h) continue;
        st = sf_memcpy(ctx, tb[k].h, tb[k].dptr, tb[k].alloc);
        if (st == SF_OK && !ct_guards_intact(&tb[k])) res->base_guard_ok = 0;
    }
    if (st == SF_OK && reps > 0) {
        timed_call tc = {c, ctx, &bp, bl, msg, msglen};
        st = time_median(&tc, reps, &res->base_ms);
    }
    return st;
}

static sf_status run_case(const sfc_case *c, sf_dtype dt, sf_backend be, sf_ctx *ctx,
                          sf_ctx *ref_ctx, uint64_t seed, int reps, int skip_ref,
                          const sfc_baseline *bl, sfc_result *res, char *msg, size_t msglen) {
    tspec t[MAXT], tb[2];
    memset(tb, 0, sizeof tb);
    build_specs(c, dt, t);
    memset(res, 0, sizeof *res);
    res->guard_ok = 1;
    res->base_guard_ok = 1;
    if (msg && msglen) msg[0] = 0;
    uint64_t rng = seed * 0x2545f4914f6cdd1dull + (uint64_t)(c - sfc_cases) + 1;
    sf_status st = SF_OK;
    union {
        sf_ssd_fwd_params a;
        sf_ssd_step_params b;
        sf_attn_fwd_params c;
        sf_conv1d_params d;
        sf_conv1d_update_params e;
        sf_rmsnorm_gated_params f;
        append_params g;
        sf_attn_paged_params h;
        sf_norm_params i;
        sf_swiglu_params j;
        sf_rope_params k;
        sf_gemm_wq_params l;
    } prm, prm_ref;

    for (int i = 0; i < MAXT; i++) {
        if (!t[i].present) continue;
        ct_layout(&t[i], c->strided);
        t[i].h = (unsigned char *)malloc(t[i].alloc);
        t[i].ref = (float *)calloc((size_t)ct_numel(&t[i]) + 1, t[i].is_index ? sizeof(int32_t) : sizeof(float));
        if (!t[i].h || !t[i].ref) {
            st = SF_ERR_OUT_OF_MEMORY;
            if (msg && msglen)
                snprintf(msg, msglen, "cannot allocate %.3g GB of host memory for tensor %d of the case",
                         ((double)t[i].alloc + (double)ct_numel(&t[i]) * 4.0) * 1e-9, i);
            goto done;
        }
        memset(t[i].h, 0xff, t[i].alloc);
        if (t[i].is_out && c->op == SFC_KV_APPEND) /* the reference's pools: poisoned too */
            for (int64_t e = 0; e < ct_numel(&t[i]); e++) t[i].ref[e] = NAN;
        if (t[i].is_out) continue;
        if (t[i].is_index) continue;
        int64_t n = ct_numel(&t[i]);
        for (int64_t e = 0; e < n; e++) t[i].ref[e] = ct_store(&t[i], e, (float)ct_gen_value(t[i].gen, &rng));
    }
    fill_index(c, t, &rng);
    for (int i = 0; i < MAXT; i++) /* index tensors are contiguous: the reference shares them */
        if (t[i].present && t[i].is_index) memcpy(t[i].ref, t[i].h, (size_t)ct_numel(&t[i]) * sf_dtype_size(t[i].dtype));
    work(c, t, res);

    /* the target's buffers */
    for (int i = 0; i < MAXT && st == SF_OK; i++) {
        if (!t[i].present) continue;
        st = sf_malloc(ctx, &t[i].dptr, t[i].alloc);
        if (st == SF_OK) st = sf_memcpy(ctx, t[i].dptr, t[i].h, t[i].alloc);
    }
    if (st != SF_OK) goto done;
    set_params(c, t, 0, sf_ctx_device(ctx), be, &prm);
    sf_ctx_reset_workspace_peak(ctx);
    st = call_op(c, ctx, &prm);
    if (st == SF_OK) st = sf_ctx_synchronize(ctx);
    if (st != SF_OK) goto done;
    res->ws_peak = sf_ctx_workspace_peak(ctx);
    for (int i = 0; i < MAXT; i++) {
        if (!t[i].present || !(t[i].is_out || t[i].is_inout)) continue;
        /* the state of ssd_step is updated in place: t[i].h becomes the result,
         * and its reference copy is updated in place by the reference */
        sf_memcpy(ctx, t[i].h, t[i].dptr, t[i].alloc);
        if (t[i].is_out && !ct_guards_intact(&t[i])) res->guard_ok = 0;
    }

    if (reps > 0) {
        timed_call tc = {c, ctx, &prm, NULL, msg, msglen};
        st = time_median(&tc, reps, &res->ms);
        if (st != SF_OK) goto done;
    }

    int first = c->op == SFC_SSD_FWD ? OUT : c->op == SFC_SSD_STEP ? S_OUT : AO;
    int second = c->op == SFC_SSD_FWD ? FIN : c->op == SFC_SSD_STEP ? S_STATE : LSE;
    if (c->op == SFC_CONV1D_FWD) first = CV_OUT, second = CV_FIN;
    if (c->op == SFC_CONV1D_UPDATE) first = UP_OUT, second = UP_STATE;
    if (c->op == SFC_RMSNORM_GATED) first = RN_OUT, second = RN_NONE; /* absent */
    if (c->op == SFC_ATTN_PAGED) first = PG_OUT, second = PG_LSE;
    if (c->op == SFC_ADD_RMSNORM || c->op == SFC_ADD_LAYERNORM)
        first = NM_OUT, second = c->residual && c->h_inplace ? NM_RES : NM_HOUT;
    if (c->op == SFC_SWIGLU) first = SW_OUT, second = SW_NONE; /* absent */
    if (c->op == SFC_ROPE) first = c->out_of_place ? RP_QO : RP_Q, second = c->out_of_place ? RP_KO : RP_K;
    if (c->op == SFC_GEMM_WQ) first = WQ_Y, second = WQ_NONE; /* absent */
    if (bl) {
        char bmsg[512] = "";
        st = run_baseline(c, t, tb, first, second, &prm, ctx, reps, bl, res, bmsg, sizeof bmsg);
        bl->release(bl->self);
        if (st != SF_OK) {
            if (msg && msglen) snprintf(msg, msglen, "naive baseline: %s", bmsg[0] ? bmsg : sf_ctx_last_error(ctx));
            goto done;
        }
    }

    if (!skip_ref) {
        /* reference: contiguous f32 copies of the same (rounded) inputs */
        set_params(c, t, 1, SF_DEVICE_CPU, SF_BACKEND_REF, &prm_ref);
        sf_ctx_reset_workspace_peak(ref_ctx);
        double t0 = sfc_now();
        sf_status rs = call_op(c, ref_ctx, &prm_ref);
        res->ref_ms = 1e3 * (sfc_now() - t0);
        res->ref_ws_peak = sf_ctx_workspace_peak(ref_ctx);
        if (rs != SF_OK) {
            if (msg) snprintf(msg, msglen, "reference failed: %s", sf_ctx_last_error(ref_ctx));
            st = SF_ERR_INTERNAL;
            goto done;
        }
        if (c->op == SFC_KV_APPEND) {
            /* the whole pools: written slots equal, untouched ones still poison;
             * and the reference itself against the runner's own expectation */
            res->err = ct_compare_pool(&t[PG_KC], t[PG_KC].ref, &res->unwritten, &res->nonfinite);
            res->err2 = ct_compare_pool(&t[PG_VC], t[PG_VC].ref, &res->unwritten, &res->nonfinite);
            if (!append_ref_ok(c, t)) {
                if (msg) snprintf(msg, msglen, "the append reference differs from the expected pool");
                st = SF_ERR_INTERNAL;
                goto done;
            }
        } else {
            res->err = ct_compare(&t[first], t[first].ref, &res->unwritten, &res->nonfinite);
            if (t[second].present)
                res->err2 = ct_compare(&t[second], t[second].ref, &res->unwritten, &res->nonfinite);
        }
        if (c->op == SFC_ATTN_FWD && dt != SF_F32) res->err_naive = naive_attn_err(c, t, dt);
        if (tb[0].h)
            res->base_err = ct_compare(&tb[0], t[first].ref, &res->base_unwritten, &res->base_nonfinite);
        if (tb[1].h)
            res->base_err2 = ct_compare(&tb[1], t[second].ref, &res->base_unwritten, &res->base_nonfinite);
    }

done:
    if (st != SF_OK && msg && msglen && !msg[0]) snprintf(msg, msglen, "%s", sf_ctx_last_error(ctx));
    for (int i = 0; i < MAXT; i++) {
        if (t[i].dptr) sf_free(ctx, t[i].dptr);
        free(t[i].h);
        free(t[i].ref);
    }
    for (int k = 0; k < 2; k++) {
        if (tb[k].dptr) sf_free(ctx, tb[k].dptr);
        free(tb[k].h);
    }
    return st;
}

sf_status sfc_run(const sfc_case *c, sf_dtype dt, sf_backend be, sf_ctx *ctx, sf_ctx *ref_ctx,
                  uint64_t seed, int reps, int skip_ref, sfc_result *res, char *msg, size_t msglen) {
    return run_case(c, dt, be, ctx, ref_ctx, seed, reps, skip_ref, NULL, res, msg, msglen);
}

sf_status sfc_run_baseline(const sfc_case *c, sf_dtype dt, sf_backend be, sf_ctx *ctx,
                           sf_ctx *ref_ctx, uint64_t seed, int reps, const sfc_baseline *bl,
                           sfc_result *res, char *msg, size_t msglen) {
    return run_case(c, dt, be, ctx, ref_ctx, seed, reps, 0, bl, res, msg, msglen);
}

/* Whether SF_AUTOTUNE_FORCE pins a configuration of this op ("op:name,..."). */
static int forced_for(sfc_op op) {
    const char *env = getenv("SF_AUTOTUNE_FORCE");
    if (!env) return 0;
    char key[64];
    snprintf(key, sizeof key, "%s:", sfc_op_name(op));
    for (const char *s = env; (s = strstr(s, key)) != NULL; s++)
        if (s == env || s[-1] == ',') return 1;
    return 0;
}

/* What a backend documents it does not serve (seqfuse.h). */
static int documented_unsupported(const sfc_case *c, sf_dtype dt, sf_backend be) {
    const sfc_op op = c->op;
    if (op == SFC_GEMM_WQ && c->wq_tiled && be == SF_BACKEND_CPU) return 1; /* tiled codes: CUDA's layout */
    if (be != SF_BACKEND_CUDA) return 0;
    /* the paged cache and the quantised product in f32 are served by the
     * host backends only */
    return dt == SF_F32 && (op == SFC_GEMM_WQ || op == SFC_ATTN_FWD || op == SFC_KV_APPEND || op == SFC_ATTN_PAGED);
}

int sfc_check_all(int op, sf_backend be, int device, uint64_t seed, int all, int threads,
                  int *passed, int *skipped) {
    sf_ctx *ctx = NULL, *ref = NULL;
    int failed = 0;
    *passed = *skipped = 0;
    if (sf_ctx_create(&ctx, device) != SF_OK || sf_ctx_create(&ref, SF_DEVICE_CPU) != SF_OK) {
        printf("  FAIL cannot create contexts\n");
        sf_ctx_destroy(ctx);
        return 1;
    }
    if (threads > 0) sf_ctx_set_threads(ctx, threads);
    const sf_dtype dts[] = {SF_F32, SF_F16, SF_BF16};
    for (int ci = 0; ci < sfc_ncases; ci++) {
        const sfc_case *c = &sfc_cases[ci];
        if ((op >= 0 && (int)c->op != op) || c->workload || (c->big && !all)) continue;
        for (int di = 0; di < 3; di++) {
            sfc_result r;
            char msg[512];
            sf_status st = sfc_run(c, dts[di], be, ctx, ref, seed, 0, 0, &r, msg, sizeof msg);
            double tol = sfc_tolerance1(c, dts[di], be), tol2 = sfc_tolerance2(c, dts[di], be);
            const char *dn = sf_dtype_name(dts[di]);
            if (st == SF_ERR_UNSUPPORTED && documented_unsupported(c, dts[di], be)) {
                printf("  skip %-22s %-4s documented unsupported: %s\n", c->name, dn, msg);
                (*skipped)++;
                continue;
            }
            /* SF_AUTOTUNE_FORCE pins one kernel configuration of an op, which
             * need not serve every case of that op: those are listed, not failed */
            if (st == SF_ERR_UNSUPPORTED && forced_for(c->op)) {
                printf("  skip %-22s %-4s the forced configuration cannot serve it: %s\n", c->name, dn, msg);
                (*skipped)++;
                continue;
            }
            int ok = st == SF_OK && r.err <= tol && r.err2 <= tol2 && r.unwritten == 0 &&
                     r.nonfinite == 0 && r.guard_ok;
            /* low-precision attention: at most twice the naive kernel's error */
            int naive_ok = r.err_naive <= 0 || r.err <= 2.0 * r.err_naive;
            ok = ok && naive_ok;
            if (st != SF_OK)
                printf("  FAIL %-22s %-4s %s: %s\n", c->name, dn, sf_status_string(st), msg);
            else
                printf("  %s %-22s %-4s %-4s err %.2e  err2 %.2e  (tol %.1e%s%s)%s%s%s%s\n",
                       ok ? "ok  " : "FAIL", c->name, dn, sf_backend_name(be), r.err, r.err2, tol,
                       tol2 == tol ? "" : c->op == SFC_KV_APPEND ? ", err2 (V, copied) exact" : ", err2 tol of the state's dtype",
                       r.err_naive > 0 ? ", <= 2x naive" : "",
                       naive_ok ? "" : "  WORSE THAN 2x THE NAIVE LOW-PRECISION ATTENTION",
                       r.unwritten ? "  UNWRITTEN outputs" : "",
                       r.nonfinite ? "  NON-FINITE outputs" : "",
                       r.guard_ok ? "" : "  GUARD/PADDING overwritten");
            fflush(stdout);
            if (ok)
                (*passed)++;
            else
                failed++;
        }
    }
    sf_ctx_destroy(ctx);
    sf_ctx_destroy(ref);
    return failed;
}
