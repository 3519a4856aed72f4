/* test_engine.c - the public engine API on the loader's tiny checkpoints
 * (tests/model/tiny_model.c: a 2-layer llama as safetensors + config.json,
 * and llama / qwen2 GGUF images with Q4_1, Q8_0, F16 and BF16 tensors),
 * written to a temporary folder:
 *   - several prompts through a batch smaller than their number (continuous
 *     batching) give each the tokens and logits it gets alone;
 *   - a callback that ends one sequence early leaves the others unchanged;
 *   - GGUF images with every tensor type load (quantised and dequantised)
 *     and generate;
 *   - seeded sampling is reproducible, top_k = 1 is greedy;
 *   - on a GPU, CUDA graph replays of the decode step give the tokens and
 *     logits of direct launches (skipped, visibly, without one);
 *   - every validation error, with its message.
 * The transformers comparison is tests/model/test_engine_hf.py. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seqfuse.h"
#include "tiny_model.h"

static int checks = 0, failures = 0;

#define EXPECT(cond, ...)                               \
    do {                                                \
        checks++;                                       \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
        }                                               \
    } while (0)

#define NP 3
#define NEW 6
static const int32_t P0[] = {1, 5, 9, 3}, P1[] = {2}, P2[] = {7, 7, 1, 0, 12, 15, 4};
static const int32_t *PROMPTS[NP] = {P0, P1, P2};
static const int64_t PLEN[NP] = {4, 1, 7};

/* what the callback records: tokens and the logits they came from */
typedef struct rec {
    int V;
    int stop_seq, stop_after;
    int n[NP];
    float logits[NP][NEW][TM_VOCAB];
    int bad;
} rec;

static int on_token(void *user, int seq, int32_t tok, const float *logits, int vocab) {
    rec *r = user;
    if (seq < 0 || seq >= NP || vocab != TM_VOCAB || tok < 0 || tok >= vocab || r->n[seq] >= NEW) {
        r->bad++;
        return 1;
    }
    for (int i = 0; i < vocab; i++) {
        if (!isfinite(logits[i])) r->bad++;
        r->logits[seq][r->n[seq]][i] = logits[i];
    }
    r->n[seq]++;
    return seq == r->stop_seq && r->n[seq] == r->stop_after;
}

static sf_status run(sf_engine *e, int first, int n, const sf_sampling *s, rec *r, int32_t out[NP][NEW],
                     sf_generation *g) {
    memset(r, 0, sizeof *r);
    r->stop_seq = -1;
    for (int i = 0; i < n; i++) {
        memset(&g[i], 0, sizeof g[i]);
        g[i].prompt = PROMPTS[first + i], g[i].prompt_len = PLEN[first + i], g[i].tokens = out[i];
    }
    return sf_engine_generate(e, g, n, s, on_token, r, NULL);
}

static void test_model(const char *path, const char *what) {
    char err[512];
    sf_engine_options o;
    sf_engine_options_init(&o);
    EXPECT(o.device == SF_DEVICE_CPU && o.max_seqs == 0 && o.use_graphs == 1, "options_init defaults");
    o.max_seqs = 2, o.max_seq_len = 24, o.page_size = 4;
    sf_engine *e = NULL;
    sf_status st = sf_engine_create(path, &o, &e, err, sizeof err);
    EXPECT(st == SF_OK, "%s: create: %s: %s", what, sf_status_string(st), err);
    if (st != SF_OK) return;
    EXPECT(sf_engine_vocab_size(e) == TM_VOCAB, "%s: vocab %d", what, sf_engine_vocab_size(e));
    printf("%s: %s\n", what, sf_engine_describe(e));
    sf_sampling s;
    sf_sampling_init(&s);
    s.max_new_tokens = NEW, s.ignore_eos = 1;
    static rec alone[NP], both, r2;
    static int32_t out_alone[NP][NP][NEW], out[NP][NEW];
    sf_generation g[NP];
    for (int i = 0; i < NP; i++) {
        st = run(e, i, 1, &s, &alone[i], out_alone[i], g);
        EXPECT(st == SF_OK && g[0].ntokens == NEW && g[0].finish == SF_FINISH_LENGTH && alone[i].bad == 0,
               "%s: prompt %d alone: %s (%s), %lld tokens, finish %d, bad %d", what, i, sf_status_string(st), sf_engine_last_error(e),
               (long long)g[0].ntokens, (int)g[0].finish, alone[i].bad);
    }
    /* all three through 2 slots: the third joins when a slot frees */
    st = run(e, 0, NP, &s, &both, out, g);
    EXPECT(st == SF_OK, "%s: batch: %s", what, sf_engine_last_error(e));
    for (int i = 0; i < NP; i++) {
        EXPECT(!memcmp(out[i], out_alone[i][0], sizeof out[i]), "%s: prompt %d: batch tokens differ from alone", what, i);
        double worst = 0;
        for (int j = 0; j < NEW; j++)
            for (int v = 0; v < TM_VOCAB; v++) {
                const double d = fabs(both.logits[i][j][v] - alone[i].logits[0][j][v]);
                worst = d > worst ? d : worst;
            }
        EXPECT(worst <= 1e-4, "%s: prompt %d: logits in a batch differ from alone by %.3g", what, i, worst);
    }
    /* the same with the prefill's attention a dense call a prompt (model.c:
     * the layout long prompts of several lengths take) instead of varlen */
    setenv("SF_AUTOTUNE_FORCE", "engine_prefill:perseq", 1);
    st = run(e, 0, NP, &s, &both, out, g);
    unsetenv("SF_AUTOTUNE_FORCE");
    EXPECT(st == SF_OK, "%s: batch, prefill a call a prompt: %s", what, sf_engine_last_error(e));
    for (int i = 0; i < NP; i++) {
        EXPECT(!memcmp(out[i], out_alone[i][0], sizeof out[i]), "%s: prompt %d: tokens of a call a prompt differ from alone",
               what, i);
        double worst = 0;
        for (int j = 0; j < NEW; j++)
            for (int v = 0; v < TM_VOCAB; v++) {
                const double d = fabs(both.logits[i][j][v] - alone[i].logits[0][j][v]);
                worst = d > worst || d != d ? d : worst;
            }
        EXPECT(worst <= 1e-4, "%s: prompt %d: logits of a call a prompt differ from alone by %.3g", what, i, worst);
    }
    /* the callback ends prompt 0 after 2 tokens; the others are unchanged */
    memset(&r2, 0, sizeof r2);
    r2.stop_seq = 0, r2.stop_after = 2;
    for (int i = 0; i < NP; i++) {
        memset(&g[i], 0, sizeof g[i]);
        g[i].prompt = PROMPTS[i], g[i].prompt_len = PLEN[i], g[i].tokens = out[i];
    }
    st = sf_engine_generate(e, g, NP, &s, on_token, &r2, NULL);
    EXPECT(st == SF_OK && g[0].finish == SF_FINISH_CALLBACK && g[0].ntokens == 2, "%s: callback stop", what);
    EXPECT(!memcmp(out[1], out_alone[1][0], sizeof out[1]) && !memcmp(out[2], out_alone[2][0], sizeof out[2]),
           "%s: the others changed when prompt 0 left early", what);
    /* seeded sampling */
    sf_sampling t = s;
    t.temperature = 0.9f, t.top_k = 8, t.top_p = 0.95f, t.min_p = 0.02f, t.repetition_penalty = 1.3f, t.seed = 99;
    static int32_t o1[NP][NEW], o2[NP][NEW];
    run(e, 0, NP, &t, &both, o1, g);
    run(e, 0, NP, &t, &both, o2, g);
    EXPECT(!memcmp(o1, o2, sizeof o1), "%s: the same seed drew different tokens", what);
    t.top_k = 1, t.repetition_penalty = 1.0f;
    run(e, 0, NP, &t, &both, o1, g);
    for (int i = 0; i < NP; i++) EXPECT(!memcmp(o1[i], out_alone[i][0], sizeof o1[i]), "%s: top_k 1 is not greedy", what);
    /* validation */
    struct {
        float temp, top_p, min_p, pen;
        int top_k, mnt;
        const char *needle;
    } bad[] = {{-1, 1, 0, 1, 0, 4, "temperature"}, {0, 0, 0, 1, 0, 4, "top_p"}, {0, 1, 1.5f, 1, 0, 4, "min_p"},
               {0, 1, 0, 0, 0, 4, "repetition_penalty"}, {0, 1, 0, 1, -2, 4, "top_k"}, {0, 1, 0, 1, 0, 0, "max_new_tokens"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        sf_sampling b = s;
        b.temperature = bad[k].temp, b.top_p = bad[k].top_p, b.min_p = bad[k].min_p;
        b.repetition_penalty = bad[k].pen, b.top_k = bad[k].top_k, b.max_new_tokens = bad[k].mnt;
        st = run(e, 0, 1, &b, &both, out, g);
        EXPECT(st == SF_ERR_INVALID_ARG && strstr(sf_engine_last_error(e), bad[k].needle), "%s: bad %s: %s \"%s\"", what,
               bad[k].needle, sf_status_string(st), sf_engine_last_error(e));
    }
    int32_t oov[2] = {1, TM_VOCAB}, longp[30] = {0};
    g[0].prompt = oov, g[0].prompt_len = 2, g[0].tokens = out[0];
    st = sf_engine_generate(e, g, 1, &s, NULL, NULL, NULL);
    EXPECT(st == SF_ERR_INDEX && strstr(sf_engine_last_error(e), "vocabulary"), "%s: id past the vocabulary", what);
    g[0].prompt = longp, g[0].prompt_len = 30;
    st = sf_engine_generate(e, g, 1, &s, NULL, NULL, NULL);
    EXPECT(st == SF_ERR_INVALID_ARG && strstr(sf_engine_last_error(e), "max_seq_len"), "%s: prompt too long", what);
    g[0].prompt_len = 0;
    EXPECT(sf_engine_generate(e, g, 1, &s, NULL, NULL, NULL) == SF_ERR_INVALID_ARG, "%s: empty prompt", what);
    EXPECT(sf_engine_generate(NULL, g, 1, &s, NULL, NULL, NULL) == SF_ERR_NULL_POINTER, "NULL engine");
    /* a sequence that reaches max_seq_len ends there */
    g[0].prompt = longp, g[0].prompt_len = 20, g[0].tokens = NULL;
    s.max_new_tokens = 10;
    st = sf_engine_generate(e, g, 1, &s, NULL, NULL, NULL);
    EXPECT(st == SF_OK && g[0].ntokens == 4 && g[0].finish == SF_FINISH_LENGTH, "%s: max_seq_len: %lld tokens", what,
           (long long)g[0].ntokens);
    sf_engine_destroy(e);
}

/* The GPU engine (device 0, bf16): each decode step replayed from a CUDA
 * graph against the same step launched op by op: the same tokens (greedy,
 * then sampled with a seed and a penalty) and logits, three prompts through
 * two slots with prompt 0 ended by the callback after 2 tokens (buckets 2
 * and 1, a prompt joining).  Skipped, visibly, without a CUDA device. */
static void test_gpu_graphs(const char *path) {
    if (sf_cuda_device_count() < 1) {
        printf("SKIP gpu graphs: no CUDA device\n");
        return;
    }
    static rec r[2][2];
    static int32_t out[2][2][NP][NEW];
    int64_t ntok[2][2][NP];
    for (int ug = 0; ug < 2; ug++) {
        sf_engine_options o;
        sf_engine_options_init(&o);
        o.device = 0, o.dtype = SF_BF16, o.use_graphs = ug;
        o.max_seqs = 2, o.max_seq_len = 24, o.page_size = 4;
        sf_engine *e = NULL;
        char err[512];
        const sf_status st = sf_engine_create(path, &o, &e, err, sizeof err);
        EXPECT(st == SF_OK, "gpu (use_graphs %d): create: %s", ug, err);
        if (!e) return;
        sf_sampling s;
        sf_sampling_init(&s);
        s.max_new_tokens = NEW, s.ignore_eos = 1;
        for (int k = 0; k < 2; k++) {
            if (k == 1) s.temperature = 0.9f, s.top_k = 8, s.top_p = 0.95f, s.repetition_penalty = 1.3f, s.seed = 7;
            sf_generation g[NP];
            memset(&r[ug][k], 0, sizeof r[ug][k]);
            r[ug][k].stop_seq = 0, r[ug][k].stop_after = 2;
            for (int i = 0; i < NP; i++) {
                memset(&g[i], 0, sizeof g[i]);
                g[i].prompt = PROMPTS[i], g[i].prompt_len = PLEN[i], g[i].tokens = out[ug][k][i];
            }
            const sf_status gs = sf_engine_generate(e, g, NP, &s, on_token, &r[ug][k], NULL);
            EXPECT(gs == SF_OK && r[ug][k].bad == 0 && g[0].ntokens == 2 && g[1].ntokens == NEW && g[2].ntokens == NEW,
                   "gpu (use_graphs %d, %s): %s (%s), %lld/%lld/%lld tokens", ug, k ? "sampled" : "greedy",
                   sf_status_string(gs), sf_engine_last_error(e), (long long)g[0].ntokens, (long long)g[1].ntokens,
                   (long long)g[2].ntokens);
            for (int i = 0; i < NP; i++) ntok[ug][k][i] = g[i].ntokens;
        }
        sf_engine_destroy(e);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < NP; i++) {
            const int64_t nt = ntok[1][k][i] < ntok[0][k][i] ? ntok[1][k][i] : ntok[0][k][i];
            EXPECT(ntok[1][k][i] == ntok[0][k][i] && !memcmp(out[1][k][i], out[0][k][i], (size_t)nt * sizeof(int32_t)),
                   "gpu %s prompt %d: graphs and direct launches chose different tokens", k ? "sampled" : "greedy", i);
            double worst = 0, scale = 0;
            for (int64_t j = 0; j < nt; j++)
                for (int v = 0; v < TM_VOCAB; v++) {
                    const double a = r[1][k].logits[i][j][v], b = r[0][k].logits[i][j][v];
                    worst = fabs(a - b) > worst ? fabs(a - b) : worst;
                    scale = fabs(b) > scale ? fabs(b) : scale;
                }
            EXPECT(worst <= 1e-2 * scale, "gpu %s prompt %d: logits of graphs and direct launches differ by %.3g (scale %.3g)",
                   k ? "sampled" : "greedy", i, worst, scale);
        }
    printf("gpu graphs: tokens and logits of graph replays equal direct launches (greedy, sampled)\n");
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    const int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* GGUF: the tiny images hold arbitrary bytes (the loader's tests need only
 * their layout), so the values are not meaningful: the engine must load
 * every tensor type (Q4_1, Q8_0, F16, BF16, F32; qwen2 biases) quantised and
 * dequantised, and generate.  The numerics of GGUF weights are checked
 * against transformers in tests/model/test_engine_hf.py. */
static void test_gguf_runs(const char *path) {
    for (int dq = 0; dq < 2; dq++) {
        sf_engine_options o;
        sf_engine_options_init(&o);
        o.max_seqs = 2, o.max_seq_len = 16, o.dequantize = dq;
        sf_engine *e = NULL;
        char err[256];
        const sf_status st = sf_engine_create(path, &o, &e, err, sizeof err);
        EXPECT(st == SF_OK, "%s (dequantize %d): %s", path, dq, err);
        if (!e) continue;
        printf("%s\n", sf_engine_describe(e));
        static rec r;
        static int32_t out[NP][NEW];
        sf_generation g[NP];
        sf_sampling s;
        sf_sampling_init(&s);
        s.max_new_tokens = NEW, s.ignore_eos = 1;
        EXPECT(run(e, 0, NP, &s, &r, out, g) == SF_OK && g[2].ntokens == NEW, "%s: generate: %s", path, sf_engine_last_error(e));
        sf_engine_destroy(e);
    }
}

int main(void) {
    char dir[] = "/tmp/sf_engine_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char p[600], hf[64], g1[64], g2[64];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    mkdir(hf, 0700);
    tm_buf b = {0};
    tm_safetensors(&b, 0, -1, TM_ST_OK);
    snprintf(p, sizeof p, "%s/model.safetensors", hf);
    int ok = write_file(p, b.p, b.n);
    tm_free(&b);
    snprintf(p, sizeof p, "%s/config.json", hf);
    const char *cfg = tm_config_json("LlamaForCausalLM");
    ok = ok && write_file(p, cfg, strlen(cfg));
    snprintf(g1, sizeof g1, "%s/llama.gguf", dir);
    tm_gguf(&b, 0, TM_GG_OK);
    ok = ok && write_file(g1, b.p, b.n);
    tm_free(&b);
    snprintf(g2, sizeof g2, "%s/qwen2.gguf", dir);
    tm_gguf(&b, 1, TM_GG_OK);
    ok = ok && write_file(g2, b.p, b.n);
    tm_free(&b);
    EXPECT(ok, "writing the tiny checkpoints under %s", dir);
    if (ok) {
        test_model(hf, "safetensors llama");
        test_gpu_graphs(hf);
        test_gguf_runs(g1);
        test_gguf_runs(g2);
    }
    /* creation errors */
    char err[256];
    sf_engine *e = (sf_engine *)1;
    EXPECT(sf_engine_create(NULL, NULL, &e, err, sizeof err) == SF_ERR_NULL_POINTER && e == NULL, "NULL path");
    snprintf(p, sizeof p, "%s/none", dir);
    EXPECT(sf_engine_create(p, NULL, &e, err, sizeof err) != SF_OK && e == NULL && err[0], "missing checkpoint: %s", err);
    sf_engine_options o;
    sf_engine_options_init(&o);
    o.page_size = 3;
    EXPECT(sf_engine_create(hf, &o, &e, err, sizeof err) == SF_ERR_INVALID_ARG && strstr(err, "page_size"), "page_size 3: %s", err);
    o.page_size = 0, o.max_seqs = -1;
    EXPECT(sf_engine_create(hf, &o, &e, err, sizeof err) == SF_ERR_INVALID_ARG, "max_seqs -1: %s", err);
    sf_engine_destroy(NULL);
    /* cleanup */
    const char *files[] = {"hf/model.safetensors", "hf/config.json", "llama.gguf", "qwen2.gguf"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(hf);
    rmdir(dir);
    printf("test_engine: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
