/* The tokenizer against Hugging Face's ids (fixtures written by
 * make_tokenizer_ref.py), decoding, round trips on seeded random text,
 * invalid UTF-8, the error paths, the chat prompt, and a throughput print.
 *
 *   test_tokenizer --json tokenizer.json --ref ref.json [--smollm2]
 *   test_tokenizer --gguf [path] --ref ref.json [--smollm2]   (path or $SF_SMOLLM2_GGUF)
 *   test_tokenizer --checkpoint DIR --ref ref.json [--bos N --eos N]   (HF directory)
 *   test_tokenizer --errors
 * --lossy: the pre-tokenizer adds or removes text (no round-trip checks);
 * --nfc: the model normalises to NFC (refusals of such text expected);
 * --stdin: ids of hex-encoded lines (tokenizer_diff.py).
 * A missing model file is a visible skip (77). */
#define _POSIX_C_SOURCE 200809L   /* mkstemp, clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tokenizer.h"

#define SKIP 77

static int failures;
static int lossy;    /* --lossy: the pre-tokenizer drops or adds text: no round trips */
static int nfc;      /* --nfc: refusals of text NFC could change are expected */
#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            failures++;                                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                             \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
        }                                                                                    \
    } while (0)

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    *len = (size_t)n;
    fclose(f);
    return b;
}

/* Encodes with the size protocol (a first call with a small buffer). */
static int32_t *encode(const sfm_tokenizer *t, const char *s, size_t len, int special, int64_t *n)
{
    char err[256] = "";
    int32_t small[4];
    int64_t k = sfm_tokenizer_encode(t, s, len, special, small, 4, err, sizeof err);
    if (k < 0 && nfc && strstr(err, "NFC")) {
        *n = -1;
        return NULL;
    }
    CHECK(k >= 0, "encode failed: %s", err);
    if (k < 0)
        return NULL;
    int32_t *ids = malloc(((size_t)k + 1) * sizeof *ids);
    int64_t k2 = sfm_tokenizer_encode(t, s, len, special, ids, k, err, sizeof err);
    CHECK(k2 == k, "second encode gave %lld ids, first %lld", (long long)k2, (long long)k);
    for (int64_t i = 0; i < k && i < 4; i++)
        CHECK(small[i] == ids[i], "the capped call wrote id %lld differently", (long long)i);
    *n = k;
    return ids;
}

/* decode(ids) == s, byte for byte. */
static int roundtrip(const sfm_tokenizer *t, const int32_t *ids, int64_t n, const char *s, size_t len)
{
    if (lossy)
        return 1;
    size_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t pl = 0;
        const char *p = sfm_tokenizer_piece(t, ids[i], &pl);
        if (!p || o + pl > len || memcmp(s + o, p, pl) != 0)
            return 0;
        o += pl;
    }
    return o == len;
}

/* Bytes the vocabulary has a token for: SmolLM2 lacks 21 of the 256 (bytes
 * that valid UTF-8 never holds, and some controls), which HF drops, as we do. */
static unsigned char has_byte[256];

static void find_bytes(const sfm_tokenizer *t)
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b, err[128];
        int32_t id;
        has_byte[b] = sfm_tokenizer_encode(t, &c, 1, 0, &id, 1, err, sizeof err) == 1;
        n += has_byte[b];
    }
    printf("byte tokens: %d of 256 bytes have one\n", n);
}

/* decode(encode(s)) is s without the bytes that have no token. */
static int roundtrip_bytes(const sfm_tokenizer *t, const int32_t *ids, int64_t n, const char *s, size_t len)
{
    char *kept = malloc(len + 1);
    size_t k = 0;
    for (size_t i = 0; kept && i < len; i++)
        if (has_byte[(unsigned char)s[i]])
            kept[k++] = s[i];
    int ok = kept && roundtrip(t, ids, n, kept, k);
    free(kept);
    return ok;
}

static void print_ids(const char *what, const int32_t *ids, int64_t n)
{
    fprintf(stderr, "  %s:", what);
    for (int64_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static int expect_ids(const sfm_tokenizer *t, const cJSON *c, const char *key, int special)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(c, "text");
    const cJSON *exp = cJSON_GetObjectItemCaseSensitive(c, key), *v;
    if (!exp)
        return 0;
    const char *s = text->valuestring;
    int64_t n = 0;
    int32_t *ids = encode(t, s, strlen(s), special, &n);
    if (!ids)
        return 1;
    int ok = n == cJSON_GetArraySize(exp);
    int64_t i = 0;
    cJSON_ArrayForEach(v, exp) {
        if (i < n && ids[i] != (int32_t)v->valuedouble)
            ok = 0;
        i++;
    }
    CHECK(ok, "%s ids differ for \"%.60s\"", key, s);
    if (!ok) {
        print_ids("got ", ids, n);
        int32_t e[4096];
        int64_t m = 0;
        cJSON_ArrayForEach(v, exp) if (m < 4096) e[m++] = (int32_t)v->valuedouble;
        print_ids("want", e, m);
    }
    /* "<mask>" (tiny) strips the spaces around it: no round trip there */
    CHECK(strstr(s, "<mask>") || roundtrip_bytes(t, ids, n, s, strlen(s)), "decode(encode(s)) != s for \"%.60s\"", s);
    free(ids);
    return ok ? 0 : 1;
}

static int against_reference(const sfm_tokenizer *t, const char *ref_path)
{
    size_t len;
    char *buf = slurp(ref_path, &len);
    CHECK(buf, "cannot read %s", ref_path);
    if (!buf)
        return 1;
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases"), *c;
    int n = 0, bad = 0;
    cJSON_ArrayForEach(c, cases) {
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "refused"))) {   /* NFC would change it */
            const char *s = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
            char err[256] = "";
            int32_t ids[8];
            int64_t k = sfm_tokenizer_encode(t, s, strlen(s), 1, ids, 8, err, sizeof err);
            CHECK(k == -1 && strstr(err, "NFC"), "\"%.60s\" needs NFC: want a refusal, got %lld (%s)", s,
                  (long long)k, err);
            bad += k != -1;
            n++;
            continue;
        }
        bad += expect_ids(t, c, "ids", 1);
        bad += expect_ids(t, c, "ids_no_special", 0);
        n++;
    }
    CHECK(n > 0, "no cases in %s", ref_path);
    printf("reference %s: %d strings, %d mismatches\n", ref_path, n, bad);
    cJSON_Delete(root);
    return bad;
}

/* Invalid UTF-8 never fails. */
static void invalid_utf8(const sfm_tokenizer *t)
{
    static const char *bad[] = {"\xff\xfe", "abc\x80xyz", "\xc3(", "caf\xc3", "\xe2\x82", "ok \xf0\x9f\x98 end",
                                "\xed\xa0\x80 surrogate", "\xc0\xaf overlong", "a\0b", " \x85 x 12\xff" "34"};
    static const size_t lens[] = {2, 7, 2, 4, 2, 10, 13, 11, 3, 11};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int64_t n = 0;
        int32_t *ids = encode(t, bad[i], lens[i], 1, &n);
        if (!ids && n == -1)
            continue;
        CHECK(ids && roundtrip_bytes(t, ids, n, bad[i], lens[i]), "invalid UTF-8 case %zu does not round-trip", i);
        free(ids);
    }
}

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* Seeded random strings from fragments of many scripts (and raw bytes). */
static void random_roundtrips(const sfm_tokenizer *t, uint64_t seed, int count)
{
    static const char *frag[] = {"the", " ", "  ", "\n", "\t", "'s", "'LL", "123", "9", "caf\xc3\xa9", "\xe4\xbd\xa0\xe5\xa5\xbd",
                                 "\xf0\x9f\x98\x80", "\xd9\x85\xd8\xb1", "<|im_end|>", "<|im", "...", "{", "x_y", "\xc2\xa0",
                                 "\xe2\x80\x8d", "A", "zz", "\r\n", "0.5", "\xef\xbc\x91"};
    rng_state = seed;
    printf("round trips: seed %llu, %d strings\n", (unsigned long long)seed, count);
    char s[512];
    for (int k = 0; k < count; k++) {
        size_t len = 0;
        int parts = 1 + (int)(rnd() % 40);
        for (int p = 0; p < parts; p++) {
            if (rnd() % 10 == 0) {   /* a raw byte, often not UTF-8 */
                s[len++] = (char)(rnd() & 0xFF);
                continue;
            }
            const char *f = frag[rnd() % (sizeof frag / sizeof *frag)];
            size_t fl = strlen(f);
            if (len + fl >= sizeof s)
                break;
            memcpy(s + len, f, fl);
            len += fl;
        }
        for (int special = 0; special < 2; special++) {
            int64_t n = 0;
            int32_t *ids = encode(t, s, len, special, &n);
            if (!ids && n == -1)
                continue;
            CHECK(ids && roundtrip_bytes(t, ids, n, s, len), "random string %d (seed %llu) does not round-trip", k,
                  (unsigned long long)seed);
            free(ids);
        }
    }
}

static void throughput(const sfm_tokenizer *t, const char *ref_path)
{
    size_t rl;
    char *buf = slurp(ref_path, &rl);
    cJSON *root = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases"), *c;
    size_t cap = 1 << 20, len = 0;
    char *text = malloc(cap);
    while (text && cases && len < cap) {
        size_t before = len;
        cJSON_ArrayForEach(c, cases) {
            const char *s = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
            size_t sl = strlen(s);
            if (strstr(s, "<mask>") || cJSON_GetObjectItemCaseSensitive(c, "refused"))
                continue;
            if (len + sl + 1 > cap)
                break;
            memcpy(text + len, s, sl);
            len += sl;
            text[len++] = '\n';
        }
        if (len == before)
            break;
    }
    int32_t *ids = malloc(cap * sizeof *ids);
    char err[256] = "";
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int64_t n = text && ids ? sfm_tokenizer_encode(t, text, len, 1, ids, (int64_t)cap, err, sizeof err) : -1;
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    CHECK(n > 0 && n <= (int64_t)cap, "throughput encode failed: %s", err);
    if (n > 0)
        printf("throughput: %zu bytes -> %lld tokens in %.3f s: %.2f M tokens/s, %.1f MB/s\n", len, (long long)n, s,
               (double)n / s * 1e-6, (double)len / s * 1e-6);
    CHECK(n <= 0 || roundtrip_bytes(t, ids, n, text, len), "the 1 MB text does not round-trip");
    free(text);
    free(ids);
    cJSON_Delete(root);
}

/* One 1 MB word of each kind the regexes treat apart: merging is n log n
 * and the regex engine must not run out of stack or heap. */
static void long_runs(const sfm_tokenizer *t)
{
    static const char fill[] = {'a', ' ', '\n', '7', '!'};
    size_t len = 1 << 20;
    char *text = malloc(len);
    int64_t cap = (int64_t)len + 16;   /* a prefix space adds one */
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    for (size_t f = 0; text && ids && f < sizeof fill; f++) {
        memset(text, fill[f], len);
        char err[256] = "";
        clock_t c0 = clock();
        int64_t n = sfm_tokenizer_encode(t, text, len, 1, ids, cap, err, sizeof err);
        double s = (double)(clock() - c0) / CLOCKS_PER_SEC;
        CHECK(n >= (lossy ? 0 : 1) && n <= cap, "1 MB run of 0x%02x: %lld (%s)", fill[f], (long long)n, err);
        CHECK(n <= 0 || roundtrip(t, ids, n, text, len), "1 MB run of 0x%02x does not round-trip", fill[f]);
        printf("1 MB run of 0x%02x: %lld tokens in %.3f s\n", fill[f], (long long)n, s);
    }
    free(text);
    free(ids);
}

static void smollm2_checks(const sfm_tokenizer *t)
{
    CHECK(sfm_tokenizer_vocab_size(t) == 49152, "vocab size %d", sfm_tokenizer_vocab_size(t));
    CHECK(sfm_tokenizer_bos(t) == 1 && sfm_tokenizer_eos(t) == 2, "bos %d eos %d", sfm_tokenizer_bos(t),
          sfm_tokenizer_eos(t));
    CHECK(sfm_tokenizer_add_bos(t) == 0, "SmolLM2 adds no BOS");
    CHECK(sfm_tokenizer_token_id(t, "<|im_end|>") == 2, "<|im_end|> id");
    CHECK(sfm_tokenizer_is_special(t, 2) && !sfm_tokenizer_is_special(t, 100), "special flags");
    CHECK(sfm_tokenizer_token_id(t, "no such token here") == -1, "unknown token id");
    CHECK(sfm_tokenizer_piece(t, -1, NULL) == NULL && sfm_tokenizer_piece(t, 49152, NULL) == NULL, "bad id piece");
    size_t pl;
    const char *p = sfm_tokenizer_piece(t, 2, &pl);
    CHECK(p && pl == 10 && memcmp(p, "<|im_end|>", 10) == 0, "special token piece");
    /* SmolLM2's template adds its default system message */
    static const char want[] = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                               "Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n";
    size_t need = sfm_tokenizer_chat_prompt(t, "Hi!", NULL, 0);
    CHECK(need == sizeof want - 1, "chat prompt length %zu, want %zu", need, sizeof want - 1);
    char buf[512], tiny[8];
    sfm_tokenizer_chat_prompt(t, "Hi!", buf, sizeof buf);
    CHECK(strcmp(buf, want) == 0, "chat prompt:\n%s", buf);
    sfm_tokenizer_chat_prompt(t, "Hi!", tiny, sizeof tiny);
    CHECK(memcmp(tiny, want, 7) == 0 && tiny[7] == 0, "truncated chat prompt");
}

static void write_file(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

static void errors(void)
{
    char err[256] = "";
    sfm_tokenizer *t = (sfm_tokenizer *)1;
    CHECK(sfm_tokenizer_from_json("/nonexistent/tokenizer.json", &t, err, sizeof err) == SF_ERR_INVALID_ARG &&
          t == NULL && strstr(err, "cannot open"), "missing file: %s", err);
    char path[] = "/tmp/sf_tok_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0)
        return;
    static const struct { const char *json; sf_status want; const char *msg; } cases[] = {
        {"{not json", SF_ERR_INVALID_ARG, "not valid JSON"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", SF_ERR_UNSUPPORTED, "not a BPE"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]},"
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", SF_ERR_INVALID_ARG, "not in the vocabulary"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
         "\"pre_tokenizer\": {\"type\": \"Whitespace\"}}", SF_ERR_UNSUPPORTED, "\"Whitespace\" is not supported"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
         "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
         SF_ERR_INVALID_ARG, "does not compile"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": null}",
         SF_ERR_UNSUPPORTED, "only byte-level"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", SF_ERR_INVALID_ARG, "no valid id"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"byte_fallback\": true}}",
         SF_ERR_UNSUPPORTED, "byte_fallback"},
        {"{\"normalizer\": {\"type\": \"NFKC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", SF_ERR_UNSUPPORTED, "NFKC"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_file(path, cases[i].json);
        err[0] = 0;
        t = NULL;
        sf_status s = sfm_tokenizer_from_json(path, &t, err, sizeof err);
        CHECK(s == cases[i].want && t == NULL && strstr(err, cases[i].msg), "error case %zu: status %d, \"%s\"", i,
              (int)s, err);
        sfm_tokenizer_free(t);
    }
    /* the NFC normaliser is refused only where it could change the text */
    write_file(path, "{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1,"
                     " \"ab\": 2}, \"merges\": [\"a b\"]}, \"pre_tokenizer\": {\"type\": \"ByteLevel\","
                     " \"add_prefix_space\": false}}");
    t = NULL;
    CHECK(sfm_tokenizer_from_json(path, &t, err, sizeof err) == SF_OK, "NFC tokenizer: %s", err);
    if (t) {
        int32_t ids[8];
        CHECK(sfm_tokenizer_encode(t, "abab", 4, 1, ids, 8, err, sizeof err) == 2 && ids[0] == 2 && ids[1] == 2,
              "tiny merge");
        CHECK(sfm_tokenizer_encode(t, "a\xcc\x81", 3, 1, ids, 8, err, sizeof err) == -1 && strstr(err, "NFC"),
              "combining mark under NFC: %s", err);
        CHECK(sfm_tokenizer_encode(t, NULL, 1, 1, ids, 8, err, sizeof err) == -1, "NULL text");
        CHECK(sfm_tokenizer_encode(t, "", 0, 1, ids, 8, err, sizeof err) == 0, "empty text");
        sfm_tokenizer_free(t);
    }
    remove(path);
    CHECK(sfm_tokenizer_vocab_size(NULL) == 0 && sfm_tokenizer_bos(NULL) == -1, "NULL tokenizer accessors");
    sfm_tokenizer_free(NULL);
    printf("error paths: %zu malformed tokenizer.json files refused\n", sizeof cases / sizeof *cases);
}

/* The chat prompt of a vocabulary in a temporary directory (tokenizer.json
 * + tokenizer_config.json): ChatML with the template's default system
 * message, Llama-3 headers, and neither. */
static void chat_case(const char *added, const char *post, const char *config, const char *want, int bos, int eos,
                      int add_bos)
{
    char dir[] = "/tmp/sf_tokchat_XXXXXX", path[64], cpath[64], err[256] = "";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
    char json[2048];
    snprintf(json, sizeof json,
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [%s],"
             " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
             " \"post_processor\": %s}", added, post ? post : "null");
    write_file(path, json);
    if (config)
        write_file(cpath, config);
    sfm_tokenizer *t = NULL;
    CHECK(sfm_tokenizer_from_json(path, &t, err, sizeof err) == SF_OK, "chat vocabulary: %s", err);
    if (t) {
        char buf[512];
        size_t n = sfm_tokenizer_chat_prompt(t, "Hi", buf, sizeof buf);
        CHECK(n == strlen(want) && strcmp(buf, want) == 0, "chat prompt:\n%s\nwant:\n%s", buf, want);
        CHECK(sfm_tokenizer_bos(t) == bos && sfm_tokenizer_eos(t) == eos, "bos %d eos %d, want %d %d",
              sfm_tokenizer_bos(t), sfm_tokenizer_eos(t), bos, eos);
        CHECK(sfm_tokenizer_add_bos(t) == add_bos, "add_bos %d, want %d", sfm_tokenizer_add_bos(t), add_bos);
        sfm_tokenizer_free(t);
    }
    remove(path);
    remove(cpath);
    rmdir(dir);
}

static void chat(void)
{
    /* Qwen2.5's template: Jinja strings with escaped newlines; the first
     * "<|im_start|>system" is followed by the caller's message, not a literal */
    chat_case("{\"id\": 1, \"content\": \"<|im_start|>\", \"special\": true},"
              "{\"id\": 2, \"content\": \"<|im_end|>\", \"special\": true}", NULL,
              "{\"bos_token\": null, \"eos_token\": \"<|im_end|>\", \"chat_template\": \"{%- if messages[0]['role'] == "
              "'system' %}{{- '<|im_start|>system\\\\n' + messages[0]['content'] + '<|im_end|>\\\\n' }}{%- else %}"
              "{{- '<|im_start|>system\\\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
              "<|im_end|>\\\\n' }}{%- endif %}\"}",
              "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", -1, 2, 0);
    /* ChatML without a template: no system message */
    chat_case("{\"id\": 1, \"content\": \"<|im_start|>\", \"special\": true},"
              "{\"id\": 2, \"content\": \"<|im_end|>\", \"special\": true}", NULL, NULL,
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", -1, -1, 0);
    /* Llama-3: BOS from its post-processor template unless the config says */
    static const char l3[] = "{\"id\": 1, \"content\": \"<|begin_of_text|>\", \"special\": true},"
                             "{\"id\": 2, \"content\": \"<|start_header_id|>\", \"special\": true},"
                             "{\"id\": 3, \"content\": \"<|end_header_id|>\", \"special\": true},"
                             "{\"id\": 4, \"content\": \"<|eot_id|>\", \"special\": true}";
    static const char l3post[] = "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"},"
                                 "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\":"
                                 " \"<|begin_of_text|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\"}}]}]}";
    static const char l3want[] = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                                 "<|start_header_id|>assistant<|end_header_id|>\n\n";
    chat_case(l3, l3post, "{\"bos_token\": {\"content\": \"<|begin_of_text|>\"}, \"eos_token\": \"<|eot_id|>\"}",
              l3want, 1, 4, 1);
    chat_case(l3, l3post, "{\"bos_token\": \"<|begin_of_text|>\", \"add_bos_token\": false}", l3want, 1, -1, 0);
    chat_case("{\"id\": 1, \"content\": \"<s>\", \"special\": true}", NULL, NULL, "Hi", -1, -1, 0);
    printf("chat prompts: ChatML (template system message, none), Llama-3, plain\n");
}

/* --stdin: each input line is a text in hex; prints its ids (or ERR) on a
 * line, for the differential test against HF (tokenizer_diff.py). */
static int ids_of_stdin(const sfm_tokenizer *t)
{
    char line[1 << 16];
    static char text[1 << 15];
    static int32_t ids[1 << 15];
    while (fgets(line, sizeof line, stdin)) {
        size_t len = 0;
        for (size_t i = 0; line[i] && line[i + 1] && line[i] != '\n' && len < sizeof text; i += 2) {
            unsigned v = 0;
            if (sscanf(line + i, "%2x", &v) != 1)
                break;
            text[len++] = (char)v;
        }
        char err[256];
        int64_t n = sfm_tokenizer_encode(t, text, len, 1, ids, 1 << 15, err, sizeof err);
        if (n < 0 || n > (1 << 15)) {
            printf("ERR\n");
            continue;
        }
        for (int64_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *json = NULL, *gguf = NULL, *ref = NULL;
    int smollm2 = 0, use_gguf = 0, from_stdin = 0, want_bos = -2, want_eos = -2;
    const char *refused_msg = NULL;   /* --refused TEXT: the tokenizer must fail saying TEXT */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--refused") && i + 1 < argc)
            refused_msg = argv[++i];
        else if (!strcmp(argv[i], "--bos") && i + 1 < argc)
            want_bos = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--eos") && i + 1 < argc)
            want_eos = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gguf") || !strcmp(argv[i], "--checkpoint")) {
            use_gguf = 1;
            if (i + 1 < argc && argv[i + 1][0] != '-')
                gguf = argv[++i];
        } else if (!strcmp(argv[i], "--ref") && i + 1 < argc)
            ref = argv[++i];
        else if (!strcmp(argv[i], "--smollm2"))
            smollm2 = 1;
        else if (!strcmp(argv[i], "--stdin"))
            from_stdin = 1;
        else if (!strcmp(argv[i], "--lossy"))
            lossy = 1;
        else if (!strcmp(argv[i], "--nfc"))
            nfc = 1;
        else if (!strcmp(argv[i], "--errors")) {
            errors();
            chat();
            printf(failures ? "FAILED: %d checks\n" : "ok\n", failures);
            return failures ? 1 : 0;
        } else {
            fprintf(stderr, "usage: %s (--json PATH | --gguf [PATH] | --checkpoint PATH | --errors) [--bos N] [--eos N] [--refused TEXT] [--ref REF.json] [--smollm2] [--lossy] [--nfc] [--stdin]\n", argv[0]);
            return 2;
        }
    }
    sfm_tokenizer *t = NULL;
    char err[256] = "";
    clock_t c0 = clock();
    if (use_gguf) {
        if (!gguf)
            gguf = getenv("SF_SMOLLM2_GGUF");
        FILE *f = gguf ? fopen(gguf, "rb") : NULL;
        if (!f) {
            printf("skip: the checkpoint is not available (the SmolLM2 GGUF: set SF_SMOLLM2_GGUF; got %s)\n",
                   gguf ? gguf : "nothing");
            return SKIP;
        }
        fclose(f);
        sfm_checkpoint *ck = NULL;
        sf_status s = sfm_checkpoint_open(gguf, &ck, err, sizeof err);
        CHECK(s == SF_OK, "checkpoint open: %s", err);
        if (s == SF_OK) {
            s = sfm_tokenizer_open(ck, &t, err, sizeof err);
            if (refused_msg) {
                CHECK(s != SF_OK && t == NULL && strstr(err, refused_msg), "want a refusal saying \"%s\", got %d: %s",
                      refused_msg, (int)s, err);
                printf("refused as expected: %s\n", err);
                sfm_checkpoint_close(ck);
                printf(failures ? "FAILED: %d checks\n" : "ok\n", failures);
                return failures ? 1 : 0;
            }
            CHECK(s == SF_OK, "tokenizer of %s: %s", gguf, err);
        }
        sfm_checkpoint_close(ck);   /* the tokenizer owns copies of what it needs */
    } else if (json) {
        FILE *f = fopen(json, "rb");
        if (!f) {
            printf("skip: %s not found (made at test time from the SmolLM2 GGUF by make_tokenizer_ref.py)\n", json);
            return SKIP;
        }
        fclose(f);
        sf_status s = sfm_tokenizer_from_json(json, &t, err, sizeof err);
        CHECK(s == SF_OK, "tokenizer from %s: %s", json, err);
    }
    if (!t) {
        printf("FAILED: no tokenizer\n");
        return 1;
    }
    if (from_stdin) {
        ids_of_stdin(t);
        sfm_tokenizer_free(t);
        return 0;
    }
    printf("loaded %d tokens in %.3f s (CPU)\n", sfm_tokenizer_vocab_size(t), (double)(clock() - c0) / CLOCKS_PER_SEC);
    CHECK(want_bos == -2 || sfm_tokenizer_bos(t) == want_bos, "bos %d, want %d", sfm_tokenizer_bos(t), want_bos);
    CHECK(want_eos == -2 || sfm_tokenizer_eos(t) == want_eos, "eos %d, want %d", sfm_tokenizer_eos(t), want_eos);
    find_bytes(t);
    if (ref)
        against_reference(t, ref);
    invalid_utf8(t);
    random_roundtrips(t, 20241204, 2000);
    if (smollm2)
        smollm2_checks(t);
    if (ref)
        throughput(t, ref);
    long_runs(t);
    sfm_tokenizer_free(t);
    printf(failures ? "FAILED: %d checks\n" : "ok\n", failures);
    return failures ? 1 : 0;
}
