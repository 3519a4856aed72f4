/* test_paged_bad.c - sf_attn_paged on the GPU with bad block tables and
 * lengths: a page number past the pool, a negative one, a length past the
 * table's capacity, and (with a sliding window) a bad entry among the pages
 * the window does not read.  Each call returns SF_OK (the lengths and
 * tables live on the device), the next synchronize gives SF_ERR_INDEX (and
 * the one after SF_OK), the bad sequence's rows are 0 with lse -inf, and
 * the other sequences' rows are bit for bit those of the call with valid
 * tables (the split count follows the shapes and each length alone).
 * Lengths 700 / 1000 / 300 in tables of 64 pages of 16: several splits per
 * sequence, so the split merge sees the bad entry too.
 * Skipped (77) without a CUDA device. */
#include <math.h>

#include "gpu_test.h"

enum { B = 3, HQ = 8, HKV = 2, D = 128, PS = 16, MP = 64, NPOOL = B * MP + 2 };

static int failures = 0, checks = 0;
#define EXPECT(cond, ...)              \
    do {                               \
        checks++;                      \
        if (!(cond)) {                 \
            failures++;                \
            printf("FAIL ");           \
            printf(__VA_ARGS__);       \
            printf("\n");              \
        }                              \
    } while (0)

static sf_ctx *gpu;
static void *dq, *dk, *dv, *dout, *dlse, *dbt, *dlen;
static int32_t table[B * MP], lens[B], saved[B * MP];
static const int32_t good_lens[B] = {700, 1000, 300};

/* pages handed out in a shuffled order, two spare ones */
static void good_tables(void) {
    int32_t perm[NPOOL];
    for (int i = 0; i < NPOOL; i++) perm[i] = i;
    for (int i = NPOOL - 1; i > 0; i--) {
        const int j = (int)urand(0, i + 1) % (i + 1);
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    memcpy(table, perm, sizeof table);
    memcpy(lens, good_lens, sizeof lens);
}

/* One call with the host table and lengths; out and lse back in o / l
 * (poisoned before); the status of the call, then of the synchronize. */
static void run(int wl, uint16_t *o, float *l, sf_status *call, sf_status *sync) {
    const size_t no = (size_t)B * HQ * D, nl = (size_t)B * HQ;
    for (size_t i = 0; i < no; i++) o[i] = 0x7fc0; /* NaN */
    for (size_t i = 0; i < nl; i++) l[i] = NAN;
    sf_memcpy(gpu, dout, o, no * 2);
    sf_memcpy(gpu, dlse, l, nl * 4);
    sf_memcpy(gpu, dbt, table, sizeof table);
    sf_memcpy(gpu, dlen, lens, sizeof lens);
    sf_attn_paged_params p;
    sf_attn_paged_params_init(&p);
    p.q = sf_tensor_contiguous(dq, SF_BF16, 0, 4, (int64_t[]){B, 1, HQ, D});
    p.k_cache = sf_tensor_contiguous(dk, SF_BF16, 0, 4, (int64_t[]){NPOOL, PS, HKV, D});
    p.v_cache = sf_tensor_contiguous(dv, SF_BF16, 0, 4, (int64_t[]){NPOOL, PS, HKV, D});
    p.out = sf_tensor_contiguous(dout, SF_BF16, 0, 4, (int64_t[]){B, 1, HQ, D});
    p.lse = sf_tensor_contiguous(dlse, SF_F32, 0, 3, (int64_t[]){B, HQ, 1});
    p.block_table = sf_tensor_contiguous(dbt, SF_I32, 0, 2, (int64_t[]){B, MP});
    p.seqlens = sf_tensor_contiguous(dlen, SF_I32, 0, 1, (int64_t[]){B});
    p.causal = 1;
    p.window_left = wl;
    *call = sf_attn_paged(gpu, &p);
    *sync = sf_ctx_synchronize(gpu);
    sf_memcpy(gpu, o, dout, no * 2);
    sf_memcpy(gpu, l, dlse, nl * 4);
}

/* Sequence `bad` zero with lse -inf, the others as in (go, gl). */
static void compare(const char *cfg, const char *what, int bad, const uint16_t *o, const float *l, const uint16_t *go,
                    const float *gl) {
    int zero = 1, same = 1;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < HQ; h++) {
            const size_t r = (size_t)b * HQ + h;
            if (b == bad) {
                zero &= isinf(l[r]) && l[r] < 0;
                for (int c = 0; c < D; c++) zero &= o[r * D + c] == 0 || o[r * D + c] == 0x8000;
            } else {
                same &= memcmp(&l[r], &gl[r], 4) == 0 && memcmp(&o[r * D], &go[r * D], 2 * D) == 0;
            }
        }
    EXPECT(zero, "%s, %s: the bad sequence %d's rows are 0 with lse -inf", cfg, what, bad);
    EXPECT(same, "%s, %s: the other sequences' rows equal the valid call's bit for bit", cfg, what);
}

int main(void) {
    if (sf_ctx_create(&gpu, 0) != SF_OK) {
        printf("skip: no CUDA device\n");
        return 77;
    }
    printf("seed %llu\n", (unsigned long long)rng);
    const size_t nkv = (size_t)NPOOL * PS * HKV * D, nq = (size_t)B * HQ * D;
    uint16_t *hk = xmalloc(nkv * 2), *hv = xmalloc(nkv * 2), *hq = xmalloc(nq * 2);
    for (size_t i = 0; i < nkv; i++) hk[i] = to_bf16((float)urand(-1, 1)), hv[i] = to_bf16((float)urand(-1, 1));
    for (size_t i = 0; i < nq; i++) hq[i] = to_bf16((float)urand(-1, 1));
    uint16_t *o = xmalloc(nq * 2), *go = xmalloc(nq * 2);
    float l[B * HQ], gl[B * HQ];
    int ok = sf_malloc(gpu, &dk, nkv * 2) == SF_OK && sf_malloc(gpu, &dv, nkv * 2) == SF_OK &&
             sf_malloc(gpu, &dq, nq * 2) == SF_OK && sf_malloc(gpu, &dout, nq * 2) == SF_OK &&
             sf_malloc(gpu, &dlse, sizeof l) == SF_OK && sf_malloc(gpu, &dbt, sizeof table) == SF_OK &&
             sf_malloc(gpu, &dlen, sizeof lens) == SF_OK;
    EXPECT(ok, "device buffers: %s", sf_ctx_last_error(gpu));
    if (!ok) return 1;
    sf_memcpy(gpu, dk, hk, nkv * 2);
    sf_memcpy(gpu, dv, hv, nkv * 2);
    sf_memcpy(gpu, dq, hq, nq * 2);
    good_tables();
    memcpy(saved, table, sizeof table);

    {
        const char *cfg = "cuda";
        for (int win = 0; win < 2; win++) {
            const int wl = win ? 20 : -1;
            sf_status call, sync;
            memcpy(table, saved, sizeof table);
            memcpy(lens, good_lens, sizeof lens);
            run(wl, go, gl, &call, &sync);
            EXPECT(call == SF_OK && sync == SF_OK, "%s window %d: valid tables: %d / %d (%s)", cfg, wl, (int)call,
                   (int)sync, sf_ctx_last_error(gpu));
            int finite = 1;
            for (size_t i = 0; i < nq; i++) finite &= isfinite(from_bf16(go[i]));
            EXPECT(finite, "%s window %d: valid tables give finite outputs", cfg, wl);
            struct {
                const char *what;
                int seq, idx, val, len;
            } bad[] = {
                {"page past the pool", 1, 1 * MP + 40, NPOOL, 0},
                {"negative page", 2, 2 * MP + 3, -1, 0},
                {"length past the table", 0, 0, 0, MP * PS + 1},
                {"page past the pool outside the window", 0, 0 * MP + 2, NPOOL + 5, 0},
            };
            for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
                if (!win && k == 3) continue; /* without a window every page is read: case 1 covers it */
                memcpy(table, saved, sizeof table);
                memcpy(lens, good_lens, sizeof lens);
                if (bad[k].len) lens[bad[k].seq] = bad[k].len;
                else table[bad[k].idx] = bad[k].val;
                run(wl, o, l, &call, &sync);
                char what[96];
                snprintf(what, sizeof what, "%s, window %d", bad[k].what, wl);
                EXPECT(call == SF_OK, "%s, %s: the call itself succeeds (%s)", cfg, what, sf_ctx_last_error(gpu));
                EXPECT(sync == SF_ERR_INDEX, "%s, %s: the synchronize reports it, got %d", cfg, what, (int)sync);
                EXPECT(sf_ctx_synchronize(gpu) == SF_OK, "%s, %s: then the record is clear", cfg, what);
                compare(cfg, what, bad[k].seq, o, l, go, gl);
            }
        }
    }
    void *bufs[] = {dk, dv, dq, dout, dlse, dbt, dlen};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) sf_free(gpu, bufs[i]);
    sf_ctx_destroy(gpu);
    free(hk), free(hv), free(hq), free(o), free(go);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
