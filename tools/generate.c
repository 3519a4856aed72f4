/* generate.c - `seqfuse generate`: a checkpoint in, text out, through the
 * public engine API (seqfuse.h, "The engine").  Streams the text as it
 * comes (UTF-8 split across tokens is fine: bytes are written as they
 * are), or prints one JSON object with --json; a summary line on stderr. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seqfuse.h"

int cmd_generate(int argc, char **argv);

static void gen_usage(FILE *f) {
    fprintf(f, "usage: seqfuse generate --model PATH (--prompt TEXT | --prompt-ids 1,2,3) [--chat]\n"
               "                        [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
               "                        [--min-p P] [--repetition-penalty R] [--seed S] [--stop STR]\n"
               "                        [--no-bos] [--ignore-eos] [--dequantize] [--dtype f32|bf16|f16]\n"
               "                        [--threads N] [--json] [--cpu | --device N] [--no-graphs]\n"
               "On the GPU (device 0) when there is one, with bf16 activations, each decode step a CUDA\n"
               "graph replay (--no-graphs: every op launched); --cpu runs the CPU\n"
               "(f32 by default).  --temperature 0 (the default) is greedy.  --chat wraps the prompt in the model's chat\n"
               "template.  Text goes to stdout as it is generated; the summary to stderr.\n");
}

typedef struct out_state {
    sf_engine *e;
    int json;
} out_state;

static int on_token(void *user, int seq, int32_t token, const float *logits, int vocab) {
    (void)seq, (void)logits, (void)vocab;
    out_state *o = user;
    if (o->json) return 0;
    size_t len = 0;
    const char *p = sf_engine_token_piece(o->e, token, &len);
    if (p && len && token != sf_engine_eos(o->e)) {
        fwrite(p, 1, len, stdout);
        fflush(stdout);
    }
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* JSON string body of n bytes (control characters and quotes escaped;
 * other bytes as they are). */
static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static int64_t parse_ids(const char *s, int32_t **out) {
    int64_t n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return -1;
    int64_t k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX) {
            free(ids);
            return -1;
        }
        ids[k++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            free(ids);
            return -1;
        }
    }
    *out = ids;
    return k;
}

int cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *prompt_ids = NULL;
    int nstop = 0, chat = 0, json = 0, no_bos = 0, want_cpu = 0, dtype_set = 0, device = -2; /* -2: auto */
    const char *stops[16];
    sf_engine_options eo;
    sf_engine_options_init(&eo);
    sf_sampling s;
    sf_sampling_init(&s);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && (i++, 1))
        if (ARG("--model")) model = v;
        else if (ARG("--prompt")) prompt = v;
        else if (ARG("--prompt-ids")) prompt_ids = v;
        else if (ARG("--max-new-tokens")) s.max_new_tokens = atoi(v);
        else if (ARG("--temperature")) s.temperature = (float)atof(v);
        else if (ARG("--top-k")) s.top_k = atoi(v);
        else if (ARG("--top-p")) s.top_p = (float)atof(v);
        else if (ARG("--min-p")) s.min_p = (float)atof(v);
        else if (ARG("--repetition-penalty")) s.repetition_penalty = (float)atof(v);
        else if (ARG("--seed")) s.seed = strtoull(v, NULL, 10);
        else if (ARG("--threads")) eo.threads = atoi(v);
        else if (ARG("--stop")) {
            if (nstop < 16) stops[nstop++] = v;
        } else if (ARG("--dtype")) {
            dtype_set = 1;
            if (!strcmp(v, "f32")) eo.dtype = SF_F32;
            else if (!strcmp(v, "bf16")) eo.dtype = SF_BF16;
            else if (!strcmp(v, "f16")) eo.dtype = SF_F16;
            else {
                fprintf(stderr, "seqfuse generate: --dtype is f32, bf16 or f16, not %s\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--cpu")) want_cpu = 1;
        else if (ARG("--device")) device = atoi(v);
        else if (!strcmp(a, "--no-bos")) no_bos = 1;
        else if (!strcmp(a, "--ignore-eos")) s.ignore_eos = 1;
        else if (!strcmp(a, "--dequantize")) eo.dequantize = 1;
        else if (!strcmp(a, "--no-graphs")) eo.use_graphs = 0;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            gen_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "seqfuse generate: unknown or incomplete option %s\n", a);
            gen_usage(stderr);
            return 2;
        }
#undef ARG
    }
    if (!model || (!prompt == !prompt_ids)) {
        fprintf(stderr, "seqfuse generate: --model and one of --prompt / --prompt-ids are required\n");
        gen_usage(stderr);
        return 2;
    }
    if (s.max_new_tokens < 1) {
        fprintf(stderr, "seqfuse generate: --max-new-tokens must be at least 1\n");
        return 2;
    }
    s.stop = stops, s.nstop = nstop;
    /* the GPU when there is one (bf16 unless --dtype says otherwise), else the CPU */
    if (want_cpu) device = SF_DEVICE_CPU;
    else if (device == -2) device = sf_cuda_device_count() > 0 ? 0 : SF_DEVICE_CPU;
    if (device < SF_DEVICE_CPU) {
        fprintf(stderr, "seqfuse generate: --device wants a CUDA ordinal >= 0\n");
        return 2;
    }
    eo.device = device;
    if (device != SF_DEVICE_CPU && !dtype_set) eo.dtype = SF_BF16;
    eo.max_seqs = 1;
    int32_t *ids = NULL;
    int64_t nids = 0;
    if (prompt_ids && (nids = parse_ids(prompt_ids, &ids)) < 1) {
        fprintf(stderr, "seqfuse generate: --prompt-ids wants comma-separated token ids, got \"%s\"\n", prompt_ids);
        return 2;
    }
    /* room for the prompt (bounded by its bytes + the chat template) and the output */
    const int64_t room = (prompt ? (int64_t)strlen(prompt) + 64 : nids) + s.max_new_tokens + 1;
    eo.max_seq_len = (int)(room < 1 << 20 ? room : 1 << 20);
    const double t0 = now_ms();
    char err[512];
    sf_engine *e = NULL;
    sf_status st = sf_engine_create(model, &eo, &e, err, sizeof err);
    if (st != SF_OK) {
        fprintf(stderr, "seqfuse generate: %s: %s\n", sf_status_string(st), err);
        free(ids);
        return 1;
    }
    const double load_ms = now_ms() - t0;
    if (prompt) {
        const int64_t n = sf_engine_tokenize(e, prompt, chat, !no_bos && !chat, NULL, 0);
        if (n < 1 || !(ids = malloc((size_t)n * sizeof *ids)) || sf_engine_tokenize(e, prompt, chat, !no_bos && !chat, ids, n) != n) {
            fprintf(stderr, "seqfuse generate: tokenizing the prompt: %s\n", n < 0 ? sf_engine_last_error(e) : "empty prompt");
            sf_engine_destroy(e);
            free(ids);
            return 1;
        }
        nids = n;
    }
    int32_t *out = malloc((size_t)s.max_new_tokens * sizeof *out);
    if (!out) {
        sf_engine_destroy(e);
        free(ids);
        return 1;
    }
    sf_generation g;
    memset(&g, 0, sizeof g);
    g.prompt = ids, g.prompt_len = nids, g.tokens = out;
    out_state os = {e, json};
    sf_engine_stats stx;
    st = sf_engine_generate(e, &g, 1, &s, on_token, &os, &stx);
    int rc = 0;
    if (st != SF_OK) {
        fprintf(stderr, "\nseqfuse generate: %s: %s\n", sf_status_string(st), sf_engine_last_error(e));
        rc = 1;
    }
    const double pre_tps = stx.prefill_ms > 0 ? stx.prompt_tokens / (stx.prefill_ms / 1e3) : 0;
    const double dec_tps = stx.decode_ms > 0 ? stx.decode_steps / (stx.decode_ms / 1e3) : 0;
    const double ms_tok = stx.decode_steps ? stx.decode_ms / (double)stx.decode_steps : 0;
    const double mem_mb = (double)(sf_engine_weight_bytes(e) + sf_engine_kv_bytes(e)) / 1048576.0;
    static const char *why[] = {"length", "eos", "stop", "callback"};
    if (json && st == SF_OK) {
        /* the text: every generated token's bytes, the EOS excepted */
        size_t cap = 256, n = 0;
        char *text = malloc(cap);
        for (int64_t i = 0; text && i < g.ntokens; i++) {
            size_t len = 0;
            const char *p = out[i] == sf_engine_eos(e) ? NULL : sf_engine_token_piece(e, out[i], &len);
            if (!p) continue;
            if (n + len + 1 > cap) {
                char *nt = realloc(text, cap = 2 * cap + len);
                if (!nt) break;
                text = nt;
            }
            memcpy(text + n, p, len), n += len;
        }
        printf("{\"model\": ");
        json_str(stdout, sf_engine_describe(e), strlen(sf_engine_describe(e)));
        printf(", \"prompt_tokens\": [");
        for (int64_t i = 0; i < nids; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("], \"tokens\": [");
        for (int64_t i = 0; i < g.ntokens; i++) printf("%s%d", i ? ", " : "", out[i]);
        printf("], \"text\": ");
        json_str(stdout, text ? text : "", text ? n : 0);
        printf(", \"finish\": \"%s\", \"load_ms\": %.1f, \"prefill_ms\": %.2f, \"decode_ms\": %.2f, "
               "\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"ms_per_token\": %.3f, \"memory_mb\": %.1f}\n",
               why[g.finish], load_ms, stx.prefill_ms, stx.decode_ms, pre_tps, dec_tps, ms_tok, mem_mb);
        free(text);
    } else if (st == SF_OK) {
        printf("\n");
    }
    fprintf(stderr,
            "[%s] %lld prompt tokens, %lld generated (%s); prefill %.1f tok/s, decode %.2f tok/s "
            "(%.2f ms/token); weights + KV %.1f MB; load %.0f ms\n",
            sf_engine_describe(e), (long long)nids, (long long)g.ntokens, why[g.finish], pre_tps, dec_tps, ms_tok, mem_mb,
            load_ms);
    sf_engine_destroy(e);
    free(ids);
    free(out);
    return rc;
}
