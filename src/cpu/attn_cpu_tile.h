/* attn_cpu_tile.h - the FlashAttention task of attn_cpu.c for one vector
 * width.  Not a header: attn_cpu.c includes it once per ISA with
 *   SF_T_SFX    name suffix (avx512, avx2, generic)
 *   SF_T_W      floats per vector (16, 8, 4)
 *   SF_T_ATTR   function attributes (target ISA)
 *   SF_T_MRS, SF_T_NVS   S^T block: keys x query vectors
 *   SF_T_MRP, SF_T_NVP   P V block: queries x head-dim vectors
 * Each width needs its own vector type: a 64-byte vector in a function
 * without AVX-512 has no register mode and GCC spills every operation
 * through memory (measured: 4 GFLOP/s instead of tens). */

#define SF_CAT2(a, b) a##_##b
#define SF_CAT(a, b) SF_CAT2(a, b)
#define SF_T(name) SF_CAT(name, SF_T_SFX)

#define VF SF_T(vf)
#define VI SF_T(vi)
#define VH SF_T(vh)
#define VU SF_T(vu)

typedef float VF __attribute__((vector_size(SF_T_W * 4), aligned(4), may_alias));
typedef int32_t VI __attribute__((vector_size(SF_T_W * 4), aligned(4), may_alias));
typedef uint32_t VU __attribute__((vector_size(SF_T_W * 4), aligned(4), may_alias));
typedef uint16_t VH __attribute__((vector_size(SF_T_W * 2), aligned(2), may_alias));

/* *xp = 2^*xp for x <= 0 (including -inf): x = n + f with n = round(x), f
 * in [-0.5, 0.5]; 2^f by its Taylor polynomial of degree 7 (truncation
 * < 6e-9 relative, below f32 rounding); 2^n built in the exponent field.
 * Results below 2^-126 flush to 0: they sit next to a column maximum
 * whose term is 1, so dropping them changes no f32 sum. */
SF_AI void SF_T(vexp2)(VF *xp) {
    VF x = *xp;
    const VI tiny = x < -126.0f;
    x = VSEL(tiny, VSET(-126.0f), x);
    const VF t = x + 12582912.0f; /* 1.5 * 2^23: rounds x to an integer in the low bits */
    const VF f = x - (t - 12582912.0f);
    VF p = VSET(1.5252733804059838e-05f);
    p = p * f + 1.5403530393381606e-04f;
    p = p * f + 1.3333558146428441e-03f;
    p = p * f + 9.6181291076284772e-03f;
    p = p * f + 5.5504108664821576e-02f;
    p = p * f + 2.4022650695910071e-01f;
    p = p * f + 6.9314718055994531e-01f;
    p = p * f + 1.0f;
    const VI e = ((VI)t - 0x4B400000 + 127) << 23; /* 2^n, n in [-126, 0] */
    const VF r = p * (VF)e;
    *xp = (VF)((VI)r & ~tiny);
}

/* W halves to floats, exactly (no F16C needed): shift exponent and
 * mantissa into place and rebias by 112; infinities/NaNs get another 112
 * to reach exponent 255; zeros and subnormals are mantissa * 2^-24, exact
 * in f32. */
SF_AI void SF_T(vcvt_f16)(VF *out, const uint16_t *p) {
    const VU h = __builtin_convertvector(*(const VH *)(const void *)p, VU);
    const VU e = h & 0x7c00u;
    VU bits = ((h & 0x7fffu) << 13) + (112u << 23);
    bits += (VU)(e == 0x7c00u) & (112u << 23);
    const VF den = __builtin_convertvector((VI)(h & 0x3ffu), VF) * 0x1p-24f;
    const VF mag = VSEL((VI)(e == 0), den, (VF)bits);
    *out = (VF)((VU)mag | ((h & 0x8000u) << 16));
}

/* bf16 is the top half of an f32. */
SF_AI void SF_T(vcvt_bf16)(VF *out, const uint16_t *p) {
    *out = (VF)(__builtin_convertvector(*(const VH *)(const void *)p, VU) << 16);
}

/* n elements of a float tensor from element `off`, to f32 times mul. */
SF_AI void SF_T(load_row)(const void *data, sf_dtype dt, int64_t off, int n, float mul,
                          float *dst) {
    int c = 0;
    if (dt == SF_F32) {
        const float *s = (const float *)data + off;
        for (; c + SF_T_W <= n; c += SF_T_W) VST(dst + c, VLD(s + c) * mul);
    } else {
        const uint16_t *s = (const uint16_t *)data + off;
        for (; c + SF_T_W <= n; c += SF_T_W) {
            VF x;
            if (dt == SF_F16)
                SF_T(vcvt_f16)(&x, s + c);
            else
                SF_T(vcvt_bf16)(&x, s + c);
            VST(dst + c, x * mul);
        }
    }
    for (; c < n; c++) dst[c] = sf_ldf(data, dt, off + c) * mul;
}

/* St[r][W c..] = sum_k K[r][k] * Qt[k][W c..] for mr keys and nv query
 * vectors: mr * nv accumulators; per k, nv loads and mr broadcasts. */
SF_AI void SF_T(kern_s)(int mr, int nv, int d, const float *K, int64_t ldk, const float *Qt,
                        float *St) {
    VF acc[6][4];
    SF_UNROLL for (int r = 0; r < mr; r++) SF_UNROLL for (int c = 0; c < nv; c++) acc[r][c] =
        VSET(0.0f);
    for (int k = 0; k < d; k++) {
        VF q[4];
        SF_UNROLL for (int c = 0; c < nv; c++) q[c] = VLD(Qt + (int64_t)k * QLD + SF_T_W * c);
        SF_UNROLL for (int r = 0; r < mr; r++) {
            const float a = K[r * ldk + k];
            SF_UNROLL for (int c = 0; c < nv; c++) acc[r][c] += a * q[c];
        }
    }
    SF_UNROLL for (int r = 0; r < mr; r++) SF_UNROLL for (int c = 0; c < nv; c++)
        VST(St + r * SLD + SF_T_W * c, acc[r][c]);
}

/* O[r][W c..] = alpha[r] * O[r][W c..] + sum_j Pt[j][r] * V[j][W c..]
 * for mr queries and nv head-dim vectors. */
SF_AI void SF_T(kern_pv)(int mr, int nv, int bc, const float *Pt, const float *V, int64_t ldv,
                         float *O, int64_t ldo, const float *alpha) {
    VF acc[6][4];
    SF_UNROLL for (int r = 0; r < mr; r++) {
        const float al = alpha[r];
        SF_UNROLL for (int c = 0; c < nv; c++) acc[r][c] = VLD(O + r * ldo + SF_T_W * c) * al;
    }
    for (int j = 0; j < bc; j++) {
        VF v[4];
        SF_UNROLL for (int c = 0; c < nv; c++) v[c] = VLD(V + j * ldv + SF_T_W * c);
        SF_UNROLL for (int r = 0; r < mr; r++) {
            const float p = Pt[j * SLD + r];
            SF_UNROLL for (int c = 0; c < nv; c++) acc[r][c] += p * v[c];
        }
    }
    SF_UNROLL for (int r = 0; r < mr; r++) SF_UNROLL for (int c = 0; c < nv; c++)
        VST(O + r * ldo + SF_T_W * c, acc[r][c]);
}

/* Constant-argument dispatch: each (mr, nv) gets its own fully unrolled,
 * register-allocated instance; cases past the block size compile away. */
#define S_CASE(MR, NV)                                                          \
    case (NV) * 8 + (MR):                                                       \
        if ((MR) <= SF_T_MRS && (NV) <= SF_T_NVS) SF_T(kern_s)(MR, NV, d, K, ldk, Qt, St); \
        break;
#define S_CASES(NV) S_CASE(1, NV) S_CASE(2, NV) S_CASE(3, NV) S_CASE(4, NV) S_CASE(5, NV) S_CASE(6, NV)

SF_AI void SF_T(kern_s_any)(int mr, int nv, int d, const float *K, int64_t ldk, const float *Qt,
                            float *St) {
    switch (nv * 8 + mr) {
        S_CASES(1)
        S_CASES(2)
        S_CASES(3)
        S_CASES(4)
    default: break;
    }
}
#undef S_CASES
#undef S_CASE

SF_AI void SF_T(kern_pv_any)(int nv, int bc, const float *Pt, const float *V, int64_t ldv,
                             float *O, int64_t ldo, const float *alpha) {
    switch (nv) {
    case 1: SF_T(kern_pv)(SF_T_MRP, 1, bc, Pt, V, ldv, O, ldo, alpha); break;
    case 2: if (SF_T_NVP >= 2) SF_T(kern_pv)(SF_T_MRP, 2, bc, Pt, V, ldv, O, ldo, alpha); break;
    case 3: if (SF_T_NVP >= 3) SF_T(kern_pv)(SF_T_MRP, 3, bc, Pt, V, ldv, O, ldo, alpha); break;
    case 4: if (SF_T_NVP >= 4) SF_T(kern_pv)(SF_T_MRP, 4, bc, Pt, V, ldv, O, ldo, alpha); break;
    default: break;
    }
}

/* One task: query tile `tile` (BR rows) of batch entry b, head h. */
SF_T_ATTR SF_FMA_ATTR static void SF_T(attn_task)(const attn_plan *pl, float *ws, int64_t b,
                                                  int64_t h, int64_t tile) {
    const sf_attn_problem *pr = pl->pr;
    const int vl = pr->varlen, d = pl->d, dp = pl->dp;
    const sf_dtype dt = pl->dt;
    int64_t q0, lq, k0, lk;
    sf_attn_seq(pr, b, &q0, &lq, &k0, &lk);
    const int64_t i0 = tile * BR;
    if (i0 >= lq) return;
    const int nq = (int)(lq - i0 < BR ? lq - i0 : BR);
    const int nv = (nq + SF_T_W - 1) / SF_T_W; /* query vectors          */
    const int ncol = nv * SF_T_W;              /* score columns computed */
    const int orows = (nq + SF_T_MRP - 1) / SF_T_MRP * SF_T_MRP;
    const int64_t kvh = h / pl->group;

    float *Qt = ws + pl->off_qt, *St = ws + pl->off_st, *O = ws + pl->off_o;
    float *Kp = ws + pl->off_kp, *Vp = ws + pl->off_vp, *tmp = ws + pl->off_tmp;
    float *m = ws + pl->off_m, *l = ws + pl->off_l, *alpha = ws + pl->off_al;

    /* Q tile, transposed and pre-scaled; padded query columns are zero. */
    const int64_t qb = seq_base(&pl->sq, vl, b, q0) + h * pl->sq.hs;
    for (int i = 0; i < nq; i++) {
        SF_T(load_row)(pl->q, dt, qb + (i0 + i) * pl->sq.ts, d, pl->scale2, tmp);
        for (int c = 0; c < d; c++) Qt[c * QLD + i] = tmp[c];
    }
    for (int c = 0; c < d; c++)
        for (int i = nq; i < ncol; i++) Qt[c * QLD + i] = 0.0f;
    /* Scores start at 0: columns past the computed ones stay 0
     * (probability 0 in the padded P V rows), and a skipped S^T block never
     * leaves workspace garbage in a padded column.  Running max -inf, sum
     * 0, output 0. */
    memset(St, 0, (size_t)BC * SLD * sizeof(float));
    for (int i = 0; i < SLD; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        alpha[i] = 0.0f;
    }
    memset(O, 0, (size_t)orows * (size_t)dp * sizeof(float));

    /* Keys any row of the tile sees: [lo of the first row, hi of the
     * last).  lo and hi grow with the row, so a key tile inside [lo of the
     * last row, hi of the first row) needs no mask. */
    int64_t lo_f, hi_f, lo_l, hi_l;
    sf_attn_key_range(pr, i0, lq, lk, &lo_f, &hi_f);
    sf_attn_key_range(pr, i0 + nq - 1, lq, lk, &lo_l, &hi_l);
    /* The same per query chunk of the S kernel (NVS vectors), to skip key
     * blocks none of its queries sees (the masked half of diagonal tiles). */
    int64_t clo[BR / (SF_T_NVS * SF_T_W) + 1], chi[BR / (SF_T_NVS * SF_T_W) + 1];
    for (int c = 0, g = 0; c < nv; c += SF_T_NVS, g++) {
        const int last = (c + SF_T_NVS) * SF_T_W < nq ? (c + SF_T_NVS) * SF_T_W : nq;
        int64_t unused;
        sf_attn_key_range(pr, i0 + c * SF_T_W, lq, lk, &clo[g], &unused);
        sf_attn_key_range(pr, i0 + last - 1, lq, lk, &unused, &chi[g]);
    }
    const int64_t kb = seq_base(&pl->sk, vl, b, k0) + kvh * pl->sk.hs;
    const int64_t vb = seq_base(&pl->sv, vl, b, k0) + kvh * pl->sv.hs;

    for (int64_t kt = lo_f; kt < hi_l; kt += BC) {
        const int bc = (int)(hi_l - kt < BC ? hi_l - kt : BC);
        const float *K;
        int64_t ldk;
        if (pl->kdirect) {
            K = (const float *)pl->k + kb + kt * pl->sk.ts;
            ldk = pl->sk.ts;
        } else {
            for (int j = 0; j < bc; j++)
                SF_T(load_row)(pl->k, dt, kb + (kt + j) * pl->sk.ts, d, 1.0f, Kp + j * dp);
            K = Kp;
            ldk = dp;
        }
        for (int j = 0; j < bc; j++) {
            SF_T(load_row)(pl->v, dt, vb + (kt + j) * pl->sv.ts, d, 1.0f, Vp + j * dp);
            for (int c = d; c < dp; c++) Vp[j * dp + c] = 0.0f;
        }
        const float *V = Vp;
        const int64_t ldv = dp;

        /* S^T = K Q^T in blocks of MRS keys by NVS query vectors.  Each
         * block also prefetches its rows of the next key tile into L2: K/V
         * rows sit H*d elements apart (2 KiB at H 8, d 64), which the
         * hardware prefetchers do not follow, and that stride uses only a
         * fraction of L2's sets, so a head's K/V does not stay there
         * between tasks.  Measured (1 thread, L 2048 d 64): none 88-99,
         * prefetcht0 90-97, prefetcht2 94-103 GFLOP/s. */
        const int64_t kn = kt + BC, bcn = hi_l - kn < BC ? hi_l - kn : BC;
        for (int j = 0; j < bc; j += SF_T_MRS) {
            const int mr = bc - j < SF_T_MRS ? bc - j : SF_T_MRS;
            for (int r = j; r < j + mr && r < bcn; r++) {
                const char *kr = (const char *)pl->k + (kb + (kn + r) * pl->sk.ts) * pl->esz;
                const char *vr = (const char *)pl->v + (vb + (kn + r) * pl->sv.ts) * pl->esz;
                for (int c = 0; c < pl->row_bytes; c += 64) {
                    __builtin_prefetch(kr + c, 0, 1);
                    __builtin_prefetch(vr + c, 0, 1);
                }
            }
            for (int c = 0, g = 0; c < nv; c += SF_T_NVS, g++) {
                /* a block no query of the chunk sees stays unwritten: the
                 * mask below sets all of it to -inf */
                if (kt + j + mr <= clo[g] || kt + j >= chi[g]) continue;
                const int nvc = nv - c < SF_T_NVS ? nv - c : SF_T_NVS;
                SF_T(kern_s_any)(mr, nvc, d, K + j * ldk, ldk, Qt + SF_T_W * c,
                                 St + j * SLD + SF_T_W * c);
            }
        }

        if (pl->score_mod) score_mod(pl, St, b, h, i0, kt, nq, bc, lq, lk);

        if (!(kt >= lo_l && kt + bc <= hi_f)) { /* the band cuts this tile */
            for (int i = 0; i < nq; i++) {
                int64_t lo, hi;
                sf_attn_key_range(pr, i0 + i, lq, lk, &lo, &hi);
                lo = lo - kt < 0 ? 0 : lo - kt < bc ? lo - kt : bc; /* visible [lo, hi) */
                hi = hi - kt < lo ? lo : hi - kt < bc ? hi - kt : bc;
                for (int64_t j = 0; j < lo; j++) St[j * SLD + i] = -INFINITY;
                for (int64_t j = hi; j < bc; j++) St[j * SLD + i] = -INFINITY;
            }
        }

        /* Online softmax down each query column (log2 domain).  A column
         * with no visible key yet keeps m = -inf and takes 0 as its
         * reference, so exp2(-inf - 0) = 0 and never -inf - -inf. */
        for (int c = 0; c < ncol; c += SF_T_W) {
            float *sc = St + c;
            VF mx = VSET(-INFINITY);
            for (int j = 0; j < bc; j++) mx = VMAX(mx, VLD(sc + j * SLD));
            const VF mo = VLD(m + c);
            const VF mn = VMAX(mo, mx);
            const VF mu = VSEL(mn == -INFINITY, VSET(0.0f), mn);
            VF al = mo - mu;
            SF_T(vexp2)(&al);
            VF sum = VSET(0.0f);
            for (int j = 0; j < bc; j++) {
                VF p = VLD(sc + j * SLD) - mu;
                SF_T(vexp2)(&p);
                VST(sc + j * SLD, p);
                sum += p;
            }
            VST(m + c, mn);
            VST(l + c, VLD(l + c) * al + sum);
            VST(alpha + c, al);
        }

        /* O = alpha O + P V in blocks of MRP queries by NVP dim vectors,
         * each over the keys its queries see (P is exactly 0 outside).  A
         * block that sees none of this tile is skipped: its alpha is
         * exactly 1 (max unchanged), or its O is still 0. */
        for (int i = 0; i < orows; i += SF_T_MRP) {
            int64_t ja, jb, unused;
            sf_attn_key_range(pr, i0 + i, lq, lk, &ja, &unused);
            sf_attn_key_range(pr, i0 + (i + SF_T_MRP < nq ? i + SF_T_MRP : nq) - 1, lq, lk, &unused,
                              &jb);
            ja = ja - kt > 0 ? ja - kt : 0;
            jb = jb - kt < bc ? jb - kt : bc;
            if (ja >= jb) continue;
            for (int c = 0; c < dp; c += SF_T_W * SF_T_NVP) {
                const int nvc = (dp - c) / SF_T_W < SF_T_NVP ? (dp - c) / SF_T_W : SF_T_NVP;
                SF_T(kern_pv_any)(nvc, (int)(jb - ja), St + ja * SLD + i, V + ja * ldv + c, ldv,
                                  O + i * dp + c, dp, alpha + i);
            }
        }
    }

    /* out = O / l; lse = ln2 (m + log2 l); a row that saw no key: 0, -inf. */
    const int64_t ob = seq_base(&pl->so, vl, b, q0) + h * pl->so.hs;
    for (int i = 0; i < nq; i++) {
        const float li = l[i];
        const float inv = li > 0.0f ? 1.0f / li : 0.0f;
        const int64_t oo = ob + (i0 + i) * pl->so.ts;
        const float *orow = O + (int64_t)i * dp;
        if (dt == SF_F32) {
            float *dst = (float *)pl->o + oo;
            int c = 0;
            for (; c + SF_T_W <= d; c += SF_T_W) VST(dst + c, VLD(orow + c) * inv);
            for (; c < d; c++) dst[c] = orow[c] * inv;
        } else {
            for (int c = 0; c < d; c++) sf_stf(pl->o, dt, oo + c, orow[c] * inv);
        }
        if (pl->lse) {
            const float v = li > 0.0f ? 0.69314718055994531f * (m[i] + log2f(li)) : -INFINITY;
            const int64_t lo = vl ? h * pl->lse_h + (q0 + i0 + i) * pl->lse_t
                                  : b * pl->lse_b + h * pl->lse_h + (i0 + i) * pl->lse_t;
            pl->lse[lo] = v;
        }
    }
}

#undef VF
#undef VI
#undef VH
#undef VU
#undef SF_T
#undef SF_CAT
#undef SF_CAT2
