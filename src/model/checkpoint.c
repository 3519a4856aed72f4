/* checkpoint.c - the checkpoint handle: owned memory, the tensor table and
 * its name index, opening by path, and the lookups of checkpoint.h. */
#define _POSIX_C_SOURCE 200809L
#include "ckpt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct sfm_block {
    sfm_block *next;
    max_align_t pad[]; /* the caller's bytes, aligned for any type */
};

sf_status sfm_fail(char *err, size_t errlen, sf_status s, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return s;
}

void *sfm_own(sfm_checkpoint *c, size_t bytes) {
    if (bytes > SIZE_MAX - sizeof(sfm_block)) return NULL;
    sfm_block *b = malloc(sizeof(sfm_block) + bytes);
    if (!b) return NULL;
    b->next = c->owned;
    c->owned = b;
    return b->pad;
}

char *sfm_own_str(sfm_checkpoint *c, const char *s, size_t len) {
    if (len == SIZE_MAX) return NULL;
    char *d = sfm_own(c, len + 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = 0;
    return d;
}

const char *sfm_wtype_name(sfm_wtype t) {
    switch (t) {
    case SFM_W_F32: return "F32";
    case SFM_W_F16: return "F16";
    case SFM_W_BF16: return "BF16";
    case SFM_W_Q8_0: return "Q8_0";
    case SFM_W_Q4_0: return "Q4_0";
    case SFM_W_Q4_1: return "Q4_1";
    case SFM_W_I64: return "I64";
    case SFM_W_I32: return "I32";
    }
    return "?";
}

const char *sfm_arch_name(sfm_arch a) {
    switch (a) {
    case SFM_ARCH_LLAMA: return "llama";
    case SFM_ARCH_QWEN2: return "qwen2";
    case SFM_ARCH_MAMBA2: return "mamba2";
    case SFM_ARCH_HYBRID: return "bamba";
    }
    return "?";
}

/* element counts stop at 2^60 so that bytes (8 per element at most) fit */
#define SFM_NUMEL_MAX ((int64_t)1 << 60)

int64_t sfm_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    int zero = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] == 0) {
            zero = 1;
            continue;
        }
        if (n > SFM_NUMEL_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return zero ? 0 : n;
}

int64_t sfm_tensor_bytes(sfm_wtype t, int ndim, const int64_t *shape) {
    int64_t n = sfm_numel(ndim, shape);
    if (n < 0) return -1;
    int64_t inner = ndim > 0 ? shape[ndim - 1] : 1;
    switch (t) {
    case SFM_W_F32: case SFM_W_I32: return n * 4;
    case SFM_W_F16: case SFM_W_BF16: return n * 2;
    case SFM_W_I64: return n * 8;
    case SFM_W_Q8_0: return inner % 32 ? -1 : n / 32 * 34;
    case SFM_W_Q4_0: return inner % 32 ? -1 : n / 32 * 18;
    case SFM_W_Q4_1: return inner % 32 ? -1 : n / 32 * 20;
    }
    return -1;
}

sf_status sfm_ck_new(int is_gguf, const char *path, int nmaps, sfm_checkpoint **out, char *err,
                     size_t errlen) {
    *out = NULL;
    sfm_checkpoint *c = calloc(1, sizeof *c);
    if (!c) return sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory opening a checkpoint");
    c->is_gguf = is_gguf;
    c->cfg.bos_token_id = c->cfg.eos_token_id = -1;
    c->path = sfm_own_str(c, path, strlen(path));
    c->maps = nmaps > 0 ? sfm_own(c, (size_t)nmaps * sizeof(sfm_map)) : NULL;
    if (!c->path || (nmaps > 0 && !c->maps)) {
        sfm_checkpoint_close(c);
        return sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory opening a checkpoint");
    }
    if (nmaps > 0) memset(c->maps, 0, (size_t)nmaps * sizeof(sfm_map));
    *out = c;
    return SF_OK;
}

sf_status sfm_ck_add(sfm_checkpoint *c, const sfm_tensor *t, char *err, size_t errlen) {
    if (c->nt == c->cap) {
        int cap = c->cap ? c->cap * 2 : 64;
        if (c->cap > (1 << 28)) return sfm_fail(err, errlen, SF_ERR_TOO_LARGE, "too many tensors");
        sfm_tensor *nt = realloc(c->t, (size_t)cap * sizeof *nt);
        if (!nt) return sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory for the tensor table");
        c->t = nt;
        c->cap = cap;
    }
    c->t[c->nt++] = *t;
    return SF_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const sfm_tensor *)a)->name, ((const sfm_tensor *)b)->name);
}

/* The table is sorted by name so that lookups are a binary search. */
sf_status sfm_ck_index(sfm_checkpoint *c, char *err, size_t errlen) {
    if (c->nt > 1) qsort(c->t, (size_t)c->nt, sizeof *c->t, by_name);
    for (int i = 1; i < c->nt; i++)
        if (!strcmp(c->t[i].name, c->t[i - 1].name))
            return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "tensor %s appears twice", c->t[i].name);
    c->indexed = 1;
    return SF_OK;
}

const sfm_tensor *sfm_checkpoint_find(const sfm_checkpoint *c, const char *name) {
    if (!c || !name || !c->indexed) return NULL;
    int lo = 0, hi = c->nt - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const sfm_tensor *t = &c->t[mid];
        int r = strcmp(name, t->name);
        if (!r) return t;
        if (r < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

int sfm_checkpoint_count(const sfm_checkpoint *c) { return c ? c->nt : 0; }
const sfm_tensor *sfm_checkpoint_tensor(const sfm_checkpoint *c, int i) {
    return c && i >= 0 && i < c->nt ? &c->t[i] : NULL;
}
const sfm_config *sfm_checkpoint_config(const sfm_checkpoint *c) { return c ? &c->cfg : NULL; }
int sfm_checkpoint_is_gguf(const sfm_checkpoint *c) { return c ? c->is_gguf : 0; }
const char *sfm_checkpoint_path(const sfm_checkpoint *c) { return c ? c->path : NULL; }

void sfm_checkpoint_close(sfm_checkpoint *c) {
    if (!c) return;
    for (int i = 0; i < c->nmaps; i++) sfm_map_close(&c->maps[i]);
    free(c->t);
    for (sfm_block *b = c->owned; b;) {
        sfm_block *n = b->next;
        free(b);
        b = n;
    }
    free(c);
}

sf_status sfm_checkpoint_open(const char *path, sfm_checkpoint **out, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!out) return sfm_fail(err, errlen, SF_ERR_NULL_POINTER, "out is NULL");
    *out = NULL;
    if (!path) return sfm_fail(err, errlen, SF_ERR_NULL_POINTER, "path is NULL");
    struct stat st;
    if (stat(path, &st) != 0)
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s: no such file or directory", path);
    if (S_ISDIR(st.st_mode)) return sfm_st_open_dir(path, out, err, errlen);
    /* a file: GGUF by its magic; a lone .safetensors needs its directory */
    sfm_map m;
    sf_status s = sfm_map_open(path, &m, err, errlen);
    if (s != SF_OK) return s;
    if (m.size < 4 || memcmp(m.base, "GGUF", 4) != 0) {
        sfm_map_close(&m);
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG,
                        "%s is not a GGUF file (no GGUF magic); give a Hugging Face checkpoint's directory "
                        "for safetensors", path);
    }
    return sfm_gguf_open_map(path, &m, out, err, errlen);
}

sf_status sfm_checkpoint_open_gguf_memory(const void *data, size_t n, sfm_checkpoint **out,
                                          char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    sfm_map m;
    sfm_map_borrow(&m, data, n);
    return sfm_gguf_open_map("<memory>", &m, out, err, errlen);
}

sf_status sfm_checkpoint_open_st_memory(const void *data, size_t n, const char *config_json,
                                        sfm_checkpoint **out, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    *out = NULL;
    sfm_checkpoint *c;
    sf_status s = sfm_ck_new(0, "<memory>", 1, &c, err, errlen);
    if (s != SF_OK) return s;
    c->nmaps = 1;
    sfm_map_borrow(&c->maps[0], data, n);
    s = sfm_config_from_json(c, config_json, strlen(config_json), err, errlen);
    if (s == SF_OK) s = sfm_st_parse(c, &c->maps[0], "<memory>", err, errlen);
    if (s == SF_OK) s = sfm_ck_index(c, err, errlen);
    if (s == SF_OK) s = sfm_checkpoint_validate(c, err, errlen);
    if (s != SF_OK) {
        sfm_checkpoint_close(c);
        return s;
    }
    *out = c;
    return SF_OK;
}
