/* bench_model.c - `seqfuse bench-model`: the engine on a checkpoint over a
 * sweep of batch sizes and prompt lengths (seeded random prompt ids, greedy,
 * EOS ignored so every sequence makes the same number of tokens): prefill
 * tokens/s, decode tokens/s and ms per decode step, through the public
 * engine API.  One engine serves the sweep (sized for its largest point);
 * each point runs once to warm up, then is timed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seqfuse.h"

int cmd_bench_model(int argc, char **argv);

static void bm_usage(FILE *f) {
    fprintf(f, "usage: seqfuse bench-model --model PATH [--batch 1,8,32] [--prompt-len 128,512]\n"
               "                           [--new-tokens N] [--seed S] [--dtype f32|bf16|f16] [--dequantize]\n"
               "                           [--threads N] [--json] [--cpu | --device N] [--no-graphs] [--ragged]\n"
               "Defaults: batch 1, prompt length 128, 32 new tokens; the GPU (bf16) when there is one,\n"
               "each decode step a CUDA graph replay (--no-graphs: every op launched).  --ragged: the\n"
               "prompts of a batch of b at length L have L - i L / 2b tokens (i = 0 .. b - 1), several\n"
               "lengths in one prefill.\n");
}

/* "1,8,32" -> up to cap positive ints; the count, or -1 for a bad list. */
static int bm_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s) {
        char *end;
        const long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || n == cap || (*end && *end != ',')) return -1;
        out[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return n;
}

static int bm_max(const int *v, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

int cmd_bench_model(int argc, char **argv) {
    const char *model = NULL;
    int batches[16] = {1}, lens[16] = {128}, nb = 1, nl = 1, newt = 32, json = 0, want_cpu = 0, device = -2,
        dtype_set = 0, ragged = 0;
    unsigned long long seed = 1;
    sf_engine_options eo;
    sf_engine_options_init(&eo);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && (i++, 1))
        if (ARG("--model")) model = v;
        else if (ARG("--batch")) nb = bm_list(v, batches, 16);
        else if (ARG("--prompt-len")) nl = bm_list(v, lens, 16);
        else if (ARG("--new-tokens")) newt = atoi(v);
        else if (ARG("--seed")) seed = strtoull(v, NULL, 10);
        else if (ARG("--threads")) eo.threads = atoi(v);
        else if (ARG("--device")) device = atoi(v);
        else if (ARG("--dtype")) {
            dtype_set = 1;
            if (!strcmp(v, "f32")) eo.dtype = SF_F32;
            else if (!strcmp(v, "bf16")) eo.dtype = SF_BF16;
            else if (!strcmp(v, "f16")) eo.dtype = SF_F16;
            else {
                fprintf(stderr, "seqfuse bench-model: --dtype is f32, bf16 or f16, not %s\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--cpu")) want_cpu = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--dequantize")) eo.dequantize = 1;
        else if (!strcmp(a, "--no-graphs")) eo.use_graphs = 0;
        else if (!strcmp(a, "--ragged")) ragged = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bm_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "seqfuse bench-model: unknown or incomplete option %s\n", a);
            bm_usage(stderr);
            return 2;
        }
#undef ARG
    }
    if (!model) {
        fprintf(stderr, "seqfuse bench-model: --model is required\n");
        bm_usage(stderr);
        return 2;
    }
    if (nb < 1 || nl < 1) {
        fprintf(stderr, "seqfuse bench-model: --batch and --prompt-len take comma-separated positive integers (16 at most)\n");
        return 2;
    }
    if (newt < 1 || newt > 1 << 20) {
        fprintf(stderr, "seqfuse bench-model: --new-tokens must be between 1 and 2^20\n");
        return 2;
    }
    if (want_cpu) device = SF_DEVICE_CPU;
    else if (device == -2) device = sf_cuda_device_count() > 0 ? 0 : SF_DEVICE_CPU;
    if (device < SF_DEVICE_CPU) {
        fprintf(stderr, "seqfuse bench-model: --device wants a CUDA ordinal >= 0\n");
        return 2;
    }
    eo.device = device;
    if (device != SF_DEVICE_CPU && !dtype_set) eo.dtype = SF_BF16;
    const int maxb = bm_max(batches, nb), maxl = bm_max(lens, nl);
    eo.max_seqs = maxb;
    eo.max_seq_len = maxl + newt + 1;
    char err[512];
    sf_engine *e = NULL;
    sf_status st = sf_engine_create(model, &eo, &e, err, sizeof err);
    if (st != SF_OK) {
        fprintf(stderr, "seqfuse bench-model: %s: %s\n", sf_status_string(st), err);
        return 1;
    }
    const int vocab = sf_engine_vocab_size(e);
    int32_t *ids = malloc((size_t)maxb * (size_t)maxl * sizeof *ids);
    int32_t *out = malloc((size_t)maxb * (size_t)newt * sizeof *out);
    sf_generation *g = calloc((size_t)maxb, sizeof *g);
    if (!ids || !out || !g) {
        fprintf(stderr, "seqfuse bench-model: out of host memory\n");
        free(ids), free(out), free(g);
        sf_engine_destroy(e);
        return 1;
    }
    /* prompt ids: splitmix64 from the seed, away from the first ids (often special) */
    unsigned long long x = seed;
    const int lo = vocab > 512 ? 256 : 0;
    for (int64_t i = 0; i < (int64_t)maxb * maxl; i++) {
        unsigned long long z = (x += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        ids[i] = lo + (int32_t)(z % (unsigned long long)(vocab - lo));
    }
    sf_sampling s;
    sf_sampling_init(&s);
    s.max_new_tokens = newt;
    s.ignore_eos = 1;
    if (json) printf("{\"model\": \"%s\", \"points\": [", sf_engine_describe(e));
    else
        printf("%s\n%6s %8s %8s %14s %14s %12s\n", sf_engine_describe(e), "batch", "prompt", "new", "prefill tok/s",
               "decode tok/s", "ms / step");
    int rc = 0, first = 1;
    for (int bi = 0; bi < nb && !rc; bi++)
        for (int li = 0; li < nl && !rc; li++) {
            const int b = batches[bi], L = lens[li];
            for (int i = 0; i < b; i++) {
                g[i].prompt = ids + (int64_t)i * maxl;
                g[i].prompt_len = ragged ? L - (int)((int64_t)i * L / (2 * b)) : L;
                g[i].tokens = out + (int64_t)i * newt;
            }
            sf_engine_stats stx;
            for (int rep = 0; rep < 2 && !rc; rep++) /* a warm-up, then the timed run */
                if ((st = sf_engine_generate(e, g, b, &s, NULL, NULL, &stx)) != SF_OK) {
                    fprintf(stderr, "seqfuse bench-model: batch %d, prompt %d: %s: %s\n", b, L, sf_status_string(st),
                            sf_engine_last_error(e));
                    rc = 1;
                }
            if (rc) break;
            const double pre = stx.prefill_ms > 0 ? 1e3 * (double)stx.prompt_tokens / stx.prefill_ms : 0.0;
            const double dec = stx.decode_ms > 0 ? 1e3 * (double)(stx.generated_tokens - b) / stx.decode_ms : 0.0;
            const double step = stx.decode_steps > 0 ? stx.decode_ms / (double)stx.decode_steps : 0.0;
            if (json)
                printf("%s{\"batch\": %d, \"prompt_len\": %d, \"ragged\": %s, \"new_tokens\": %d, "
                       "\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"ms_per_step\": %.4f}",
                       first ? "" : ", ", b, L, ragged ? "true" : "false", newt, pre, dec, step);
            else
                printf("%6d %8d %8d %14.1f %14.1f %12.3f\n", b, L, newt, pre, dec, step);
            first = 0;
            fflush(stdout);
        }
    if (json) printf("]}\n");
    free(ids), free(out), free(g);
    sf_engine_destroy(e);
    return rc;
}
