/* fuzz_tokenizer.c - libFuzzer harness over the byte-level BPE tokenizer
 * (src/model/tokenizer*.c). The input's first byte picks
 *   0, 1  the rest as text, encoded (parse_special = the byte) by the small
 *         tokenizers of tests/model/tiny/ (Llama-3 regex with ignore_merges,
 *         Qwen2 with NFC, SmolLM's digits, every Split behaviour): ids in
 *         range, the size protocol kept, and decode(encode(s)) == s where
 *         the pre-tokenizer keeps every byte and NFC did not refuse;
 *   2     the rest as a tokenizer.json, loaded and, if accepted, used.
 * A crash, a sanitizer report, a leak, a hang or a broken property is a bug;
 * an error status is fine.
 *
 * Seeds: `fuzz_tokenizer -write_seeds=DIR` (texts of many scripts, and the
 * tiny tokenizer.json files). SF_TOK_FUZZ_DIR is tests/model/tiny. */
#define _GNU_SOURCE   /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

static const char *names[] = {"llama3", "qwen2", "smollm", "behaviours"};
#define NTOK 4
static sfm_tokenizer *toks[NTOK];

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = b ? (size_t)n : 0;
    return b;
}

static void write_seed(const char *dir, const char *name, uint8_t mode, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "fuzz_tokenizer: cannot write %s\n", path);
        exit(1);
    }
    fputc(mode, f);
    fwrite(p, 1, n, f);
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char path[4096], err[256];
    for (int k = 0; k < NTOK; k++) {
        snprintf(path, sizeof path, "%s/%s.tokenizer.json", SF_TOK_FUZZ_DIR, names[k]);
        if (sfm_tokenizer_from_json(path, &toks[k], err, sizeof err) != SF_OK) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", err);
            exit(1);
        }
    }
    for (int i = 1; i < *argc; i++) {
        if (strncmp((*argv)[i], "-write_seeds=", 13))
            continue;
        const char *dir = (*argv)[i] + 13;
        static const char *texts[] = {
            "Hello, world! It's 2024: 12345 cats.", "def f(x):\n    return x  # \t\r\n",
            "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 \xd9\x85\xd8\xb1 e\xcc\x81", "a<|eot|>b <mask> [user]",
            "the-final--countdown zzqzz", "\xff\xfe\xc3( \xe2\x82", "   \n\n  x\xe2\x80\x83\xe3\x80\x80"};
        for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
            char nm[32];
            snprintf(nm, sizeof nm, "text_%zu", t);
            write_seed(dir, nm, (uint8_t)(t & 1), texts[t], strlen(texts[t]));
        }
        for (int k = 0; k < NTOK; k++) {
            size_t n;
            snprintf(path, sizeof path, "%s/%s.tokenizer.json", SF_TOK_FUZZ_DIR, names[k]);
            char *j = slurp(path, &n);
            if (j) {
                char nm[64];
                snprintf(nm, sizeof nm, "json_%s", names[k]);
                write_seed(dir, nm, 2, j, n);
            }
            free(j);
        }
        exit(0);
    }
    return 0;
}

/* Encodes text and checks the properties; aborts on a broken one. */
static void check(const sfm_tokenizer *t, const char *text, size_t len, int special, int lossless)
{
    char err[256];
    int32_t small[3];
    int64_t n = sfm_tokenizer_encode(t, text, len, special, small, 3, err, sizeof err);
    if (n < 0)
        return;   /* a refusal (NFC) is allowed, with its message */
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids)
        return;
    if (sfm_tokenizer_encode(t, text, len, special, ids, n, err, sizeof err) != n)
        abort();
    size_t o = 0;
    int same = 1;
    for (int64_t i = 0; i < n; i++) {
        size_t pl;
        if (i < 3 && ids[i] != small[i])
            abort();
        const char *p = sfm_tokenizer_piece(t, ids[i], &pl);
        if (!p || ids[i] < 0 || ids[i] >= sfm_tokenizer_vocab_size(t))
            abort();
        if (o + pl > len || memcmp(text + o, p, pl) != 0)
            same = 0;
        o += pl;
    }
    if (lossless && (!same || o != len))
        abort();
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1 << 16))
        return 0;
    uint8_t mode = data[0] % 3;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (mode < 2) {
        /* "<mask>" strips the spaces around it in "behaviours" */
        int has_mask = len >= 6 && memmem(text, len, "<mask>", 6) != NULL;
        for (int k = 0; k < NTOK; k++)
            check(toks[k], text, len, mode, k != 3 || !has_mask);
        return 0;
    }
    sfm_tokenizer *t = NULL;
    char err[256];
    if (tok_from_json_text(text, len, NULL, &t, err, sizeof err) == SF_OK) {
        static const char sample[] = "Hello <|eot|> w\xc3\xb6rld 123 \xf0\x9f\x98\x80  \n";
        check(t, sample, sizeof sample - 1, 1, 0);
        char buf[64];
        sfm_tokenizer_chat_prompt(t, "hi", buf, sizeof buf);
        sfm_tokenizer_free(t);
    }
    return 0;
}
