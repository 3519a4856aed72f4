/* test_dec_qkv.c - the engine's decode-step q/k/v product with the rotary
 * embedding and the KV-cache append in its epilogue (src/cuda/layer/
 * dec_gemv.h, SF_DEC_QKV) against a double reference:
 *     [q | k | v] = x W^T (+ bias), x given or RMSNorm(nres) * nw;
 *     q's and k's pairs (2i, 2i + 1) of a head's first R channels rotated
 *     by 2 pi pos[m] turns[i]; q into its buffer, k and v into slot
 *     lens[m] of row m's pages (block table row m).
 * Random pages (a shuffled table), random lengths and positions, f16 and
 * bf16 (the norm: bf16), 1-4 rows, both configuration rows, the 1B-class
 * and SmolLM2 shapes, a partial rotary dim, a bias; q and both pools
 * poisoned (NaN) first, and every slot but the appended ones checked still
 * poisoned.  A row whose length is past its table, or whose page is out of
 * the pool: that row's k and v skipped, the others written, the next
 * synchronize SF_ERR_INDEX and the one after SF_OK.  Refusals: N not
 * qd + 2 kd, an odd head dim, R past the head dim, a page size not a power
 * of two, q over the weights, a missing table.  Skipped (77) without a
 * device. */
#include "dec_test.h"

#include <math.h>

static const double PI = 3.14159265358979323846;

typedef struct {
    int H, Hkv, hd, R, K, M, ps;
    int norm, bias, config, bad; /* bad: row 0's length past its table (1), its page out of the pool (2) */
    sf_dtype dt;
} qcase;

static int run_case(sf_ctx *gpu, qcase c) {
    const int qd = c.H * c.hd, kd = c.Hkv * c.hd, N = qd + 2 * kd, K = c.K, M = c.M, hd = c.hd;
    const int MP = 5, NP = M * MP + 3; /* table rows of 5 pages, 3 spare pages */
    const int64_t csr = kd, csp = (int64_t)c.ps * csr, pool = (int64_t)NP * csp;
    const double eps_dt = c.dt == SF_F16 ? 4.9e-4 : 3.9e-3, neps = 1e-5;
    double *xd = xmalloc(sizeof(double) * (size_t)M * K), *wd = xmalloc(sizeof(double) * (size_t)N * K);
    double *bd = xmalloc(sizeof(double) * (size_t)N), *turns = xmalloc(sizeof(double) * (size_t)(c.R / 2 + 1));
    uint16_t *xh = xmalloc(2 * (size_t)M * K), *wh = xmalloc(2 * (size_t)N * K), *bh = xmalloc(2 * (size_t)N);
    uint16_t *qh = xmalloc(2 * (size_t)M * qd), *kh = xmalloc(2 * (size_t)pool), *vh = xmalloc(2 * (size_t)pool);
    float *nres = xmalloc(4 * (size_t)M * K), *nw = xmalloc(4 * (size_t)K);
    int32_t *bt = xmalloc(4 * (size_t)M * MP), *pos = xmalloc(4 * (size_t)M), *lens = xmalloc(4 * (size_t)M);
    int32_t *perm = xmalloc(4 * (size_t)NP);
    for (int64_t i = 0; i < (int64_t)N * K; i++) wd[i] = put16(c.dt, wh, i, urand(-1, 1) / sqrt((double)K));
    for (int n = 0; n < N; n++) bd[n] = c.bias ? put16(c.dt, bh, n, urand(-0.5, 0.5)) : 0;
    for (int k = 0; k < K; k++) nw[k] = (float)urand(0.5, 1.5);
    for (int64_t i = 0; i < (int64_t)M * K; i++) nres[i] = (float)urand(-3, 3);
    for (int m = 0; m < M; m++) {
        double ss = 0;
        for (int k = 0; k < K; k++) ss += (double)nres[m * K + k] * nres[m * K + k];
        const double rs = 1.0 / sqrt(ss / K + neps);
        for (int k = 0; k < K; k++) xd[m * K + k] = put16(c.dt, xh, m * K + k, c.norm ? nres[m * K + k] * rs * nw[k] : urand(-1, 1));
    }
    for (int i = 0; i < c.R / 2; i++) turns[i] = pow(10000.0, -2.0 * i / c.R) / (2 * PI) * urand(0.5, 1.5);
    for (int i = 0; i < NP; i++) perm[i] = i;
    for (int i = NP - 1; i > 0; i--) {
        const int j = (int)urand(0, i + 1 - 1e-9), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int m = 0; m < M; m++) {
        for (int p = 0; p < MP; p++) bt[m * MP + p] = perm[m * MP + p];
        lens[m] = (int32_t)urand(0, MP * c.ps - 1e-9);
        pos[m] = (int32_t)urand(0, 200000); /* large angles: the double reduction */
    }
    if (c.bad == 1) lens[0] = MP * c.ps;
    if (c.bad == 2) bt[lens[0] / c.ps] = NP;
    memset(qh, 0xff, 2 * (size_t)M * qd); /* NaN in both dtypes */
    memset(kh, 0xff, 2 * (size_t)pool), memset(vh, 0xff, 2 * (size_t)pool);
    void *x = dev_copy(gpu, xh, 2 * (size_t)M * K), *w = dev_copy(gpu, wh, 2 * (size_t)N * K);
    void *b = dev_copy(gpu, bh, 2 * (size_t)N), *q = dev_copy(gpu, qh, 2 * (size_t)M * qd);
    void *kc = dev_copy(gpu, kh, 2 * (size_t)pool), *vc = dev_copy(gpu, vh, 2 * (size_t)pool);
    void *nr = dev_copy(gpu, nres, 4 * (size_t)M * K), *nwd = dev_copy(gpu, nw, 4 * (size_t)K);
    void *btd = dev_copy(gpu, bt, 4 * (size_t)M * MP), *posd = dev_copy(gpu, pos, 4 * (size_t)M);
    void *lensd = dev_copy(gpu, lens, 4 * (size_t)M), *td = dev_copy(gpu, turns, 8 * (size_t)(c.R / 2 + 1));
    sf_dec_gemv_args a;
    memset(&a, 0, sizeof a);
    a.dt = c.dt, a.out = SF_DEC_QKV, a.config = c.config;
    if (c.norm) a.nres = nr, a.nw = nwd, a.ldn = K, a.eps = (float)neps;
    else a.x = x, a.ldx = K;
    a.w = w, a.ldw = K, a.bias = c.bias ? b : NULL;
    a.M = M, a.N = N, a.K = K, a.pdl = (M + K) % 2;
    sf_dec_rope *r = &a.rope;
    r->q = q, r->k_cache = kc, r->v_cache = vc, r->cache_page_stride = csp, r->cache_row_stride = csr;
    r->num_pages = NP, r->page_size = c.ps, r->pos = posd, r->lens = lensd, r->block_table = btd;
    r->bt_stride = MP, r->max_pages = MP, r->turns = td, r->qd = qd, r->kd = kd, r->hd = hd, r->R = c.R;
    int failures = 0;
    const sf_status st = sf_cuda_dec_gemv(gpu, &a);
    const sf_status sync = st == SF_OK ? sf_ctx_synchronize(gpu) : st;
    const sf_status after = sf_ctx_synchronize(gpu);
    char label[160];
    snprintf(label, sizeof label, "%s row %s H %d/%d hd %d R %d K %d M %d ps %d%s%s%s", sf_dtype_name(c.dt),
             sf_dec_gemv_config_name(c.config), c.H, c.Hkv, hd, c.R, K, M, c.ps, c.norm ? " norm" : "",
             c.bias ? " bias" : "", c.bad ? " bad row 0" : "");
    if (st != SF_OK || (c.bad ? sync != SF_ERR_INDEX : sync != SF_OK) || after != SF_OK) {
        printf("FAIL %s: call %d, synchronize %d (want %d), then %d: %s\n", label, st, sync, c.bad ? SF_ERR_INDEX : SF_OK,
               after, sf_ctx_last_error(gpu));
        failures = 1;
    } else {
        CK(sf_memcpy(gpu, qh, q, 2 * (size_t)M * qd));
        CK(sf_memcpy(gpu, kh, kc, 2 * (size_t)pool));
        CK(sf_memcpy(gpu, vh, vc, 2 * (size_t)pool));
        double worst = 0;
        int64_t written = 0;
        double *s = xmalloc(sizeof(double) * (size_t)N), *as = xmalloc(sizeof(double) * (size_t)N);
        for (int m = 0; m < M; m++) {
            for (int n = 0; n < N; n++) {
                double t = bd[n], at = fabs(bd[n]);
                for (int k = 0; k < K; k++) t += xd[m * K + k] * wd[(int64_t)n * K + k], at += fabs(xd[m * K + k] * wd[(int64_t)n * K + k]);
                s[n] = t, as[n] = at;
            }
            const int skip = c.bad && m == 0;
            const int64_t slot = lens[m], off = skip ? 0 : (int64_t)bt[m * MP + slot / c.ps] * csp + (slot % c.ps) * csr;
            for (int n = 0; n < N; n += 2) {
                const int isq = n < qd, isv = n >= qd + kd, col = isq ? n : isv ? n - qd - kd : n - qd, p = col % hd;
                double y0 = s[n], y1 = s[n + 1];
                const double mag = as[n] + as[n + 1];
                if (!isv && p < c.R) {
                    const double ang = 2 * PI * fmod((double)pos[m] * turns[p / 2], 1.0);
                    const double cs = cos(ang), sn = sin(ang);
                    y0 = s[n] * cs - s[n + 1] * sn, y1 = s[n + 1] * cs + s[n] * sn;
                }
                if (!isq && skip) continue;
                const uint16_t *o = isq ? qh : isv ? vh : kh;
                const int64_t at = isq ? (int64_t)m * qd + col : off + col;
                const double want[2] = {y0, y1};
                for (int j = 0; j < 2; j++) {
                    const double tol = 2 * eps_dt * (fabs(want[j]) + mag) + 1e-5;
                    const double e = fabs(get16(c.dt, o, at + j) - want[j]) / tol;
                    if (!(e <= 1.0)) worst = e != e ? INFINITY : e > worst ? e : worst;
                }
                if (!isq) written += 2;
            }
        }
        /* every other slot of both pools still poisoned */
        int64_t untouched = 0;
        for (int64_t i = 0; i < pool; i++) untouched += get16(c.dt, kh, i) != get16(c.dt, kh, i);
        for (int64_t i = 0; i < pool; i++) untouched += get16(c.dt, vh, i) != get16(c.dt, vh, i);
        if (untouched != 2 * pool - written) {
            printf("FAIL %s: %lld pool elements written, want %lld\n", label, (long long)(2 * pool - untouched), (long long)written);
            failures = 1;
        }
        if (worst > 0) {
            printf("FAIL %s: error %.2f x tolerance\n", label, worst);
            failures = 1;
        }
        free(s), free(as);
    }
    sf_free(gpu, x), sf_free(gpu, w), sf_free(gpu, b), sf_free(gpu, q), sf_free(gpu, kc), sf_free(gpu, vc);
    sf_free(gpu, nr), sf_free(gpu, nwd), sf_free(gpu, btd), sf_free(gpu, posd), sf_free(gpu, lensd), sf_free(gpu, td);
    free(xd), free(wd), free(bd), free(turns), free(xh), free(wh), free(bh), free(qh), free(kh), free(vh);
    free(nres), free(nw), free(bt), free(pos), free(lens), free(perm);
    return failures;
}

static int refusals(sf_ctx *gpu) {
    void *buf;
    CK(sf_malloc(gpu, &buf, 1 << 22));
    char *p = buf;
    sf_dec_gemv_args a;
    memset(&a, 0, sizeof a);
    a.dt = SF_BF16, a.out = SF_DEC_QKV, a.x = p, a.ldx = 64, a.w = p + 4096, a.ldw = 64;
    a.M = 2, a.N = 4 * 16 + 2 * 2 * 16, a.K = 64; /* 4 q heads, 2 kv heads of 16 */
    sf_dec_rope *r = &a.rope;
    r->q = p + 65536, r->k_cache = p + 131072, r->v_cache = p + 262144, r->cache_row_stride = 32, r->cache_page_stride = 8 * 32;
    r->num_pages = 4, r->page_size = 8, r->pos = (int32_t *)(p + 393216), r->lens = (int32_t *)(p + 393216 + 64);
    r->block_table = (int32_t *)(p + 393216 + 128), r->bt_stride = 4, r->max_pages = 4, r->turns = (double *)(p + 393216 + 256);
    r->qd = 64, r->kd = 32, r->hd = 16, r->R = 16;
    int failures = 0;
    const char *ok = sf_dec_gemv_supports(&a);
    if (ok) printf("FAIL refusals: a good call refused: %s\n", ok), failures++;
    dec_bad bad[8];
    int nb = 0;
    bad[nb].what = "N not qd + 2 kd", bad[nb].a = a, bad[nb].a.N = 120, nb++;
    bad[nb].what = "an odd head dim", bad[nb].a = a, bad[nb].a.rope.hd = 15, nb++;
    bad[nb].what = "R past the head dim", bad[nb].a = a, bad[nb].a.rope.R = 18, nb++;
    bad[nb].what = "page size 6", bad[nb].a = a, bad[nb].a.rope.page_size = 6, bad[nb].a.rope.cache_page_stride = 6 * 32, nb++;
    bad[nb].what = "q over W", bad[nb].a = a, bad[nb].a.rope.q = p + 4096 + 64, nb++;
    bad[nb].what = "no block table", bad[nb].a = a, bad[nb].a.rope.block_table = NULL, nb++;
    bad[nb].what = "the K cache over the V cache", bad[nb].a = a, bad[nb].a.rope.v_cache = p + 131072 + 512, nb++;
    bad[nb].what = "a y with qkv", bad[nb].a = a, bad[nb].a.y = p + 524288, bad[nb].a.ldy = 128, nb++;
    failures += dec_all_refused(gpu, bad, nb);
    sf_free(gpu, buf);
    return failures;
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const int start = gpu_test_start("test_dec_qkv");
    if (start) return start;
    sf_ctx *gpu;
    CK(sf_ctx_create(&gpu, GPU_TEST_DEVICE));
    /* H, Hkv, hd, R, K: Llama-3.2-1B, SmolLM2-135M, a partial rotary dim
     * (Bamba's half), a small odd one */
    const int shapes[][5] = {{32, 8, 64, 64, 2048}, {9, 3, 64, 64, 576}, {8, 2, 128, 64, 256}, {3, 1, 16, 16, 40}};
    const int nconf = sf_dec_gemv_nconfig();
    int failures = 0, cases = 0;
    for (int s = 0; s < 4; s++)
        for (int v = 0; v < 8; v++)
            for (int cf = 0; cf < nconf; cf++) {
                if (quick && (s == 0 || v > 3)) continue;
                qcase c;
                c.H = shapes[s][0], c.Hkv = shapes[s][1], c.hd = shapes[s][2], c.R = shapes[s][3], c.K = shapes[s][4];
                c.M = 1 + (v + s) % 4, c.ps = v % 2 ? 16 : v % 4 ? 1 : 64;
                c.norm = v % 4 < 2, c.bias = v % 3 == 0, c.config = cf, c.bad = v == 5 ? 1 : v == 6 ? 2 : 0;
                c.dt = c.norm ? SF_BF16 : (v + cf) % 2 ? SF_F16 : SF_BF16;
                failures += run_case(gpu, c);
                cases++;
            }
    failures += refusals(gpu);
    sf_ctx_destroy(gpu);
    printf("%s test_dec_qkv: %d cases, refusals\n", failures ? "FAIL" : "PASS", cases);
    return failures ? 1 : 0;
}
