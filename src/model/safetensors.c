/* safetensors.c - Hugging Face safetensors files and sharded checkpoints.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * ({name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}},
 * offsets relative to the byte after the header), then the data. Every
 * number is checked: N inside the file, offsets inside the data, end - begin
 * equal to what dtype and shape imply, and no two tensors overlapping. A
 * sharded checkpoint lists name -> shard file in model.safetensors.index.json
 * ("weight_map"); each shard is mapped once. */
#define _POSIX_C_SOURCE 200809L
#include "ckpt_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* cJSON keeps numbers as doubles: integers are exact up to 2^53. */
static int json_u53(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0)) return 0;
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return 0;
    *out = u;
    return 1;
}

static int st_dtype(const char *s, sfm_wtype *t) {
    static const struct { const char *name; sfm_wtype t; } tab[] = {
        {"F32", SFM_W_F32}, {"F16", SFM_W_F16}, {"BF16", SFM_W_BF16}, {"I64", SFM_W_I64}, {"I32", SFM_W_I32}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(s, tab[i].name)) {
            *t = tab[i].t;
            return 1;
        }
    return 0;
}

typedef struct extent {
    uint64_t begin, end;
    const char *name;
} extent;
static int by_begin(const void *a, const void *b) {
    const extent *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* One tensor entry of the header. */
static sf_status st_entry(sfm_checkpoint *c, const cJSON *it, const sfm_map *m, uint64_t data_off,
                          const char *fname, extent *ext, char *err, size_t errlen) {
    const char *name = it->string;
    if (!cJSON_IsObject(it))
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s: entry %s is not a JSON object", fname, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of))
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG,
                        "%s: tensor %s lacks a dtype string, a shape array or a data_offsets array", fname, name);
    sfm_tensor t;
    memset(&t, 0, sizeof t);
    if (!st_dtype(dt->valuestring, &t.type))
        return sfm_fail(err, errlen, SF_ERR_UNSUPPORTED,
                        "%s: tensor %s has dtype %.16s; supported: F32, F16, BF16, I64, I32", fname, name,
                        dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > SFM_MAX_DIMS)
        return sfm_fail(err, errlen, SF_ERR_UNSUPPORTED, "%s: tensor %s has %d dimensions (at most %d)", fname,
                        name, nd, SFM_MAX_DIMS);
    t.ndim = nd;
    int k = 0;
    for (const cJSON *d = sh->child; d; d = d->next, k++) {
        uint64_t v;
        if (!json_u53(d, &v))
            return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s: tensor %s: shape[%d] is not a non-negative integer",
                            fname, name, k);
        t.shape[k] = (int64_t)v;
    }
    uint64_t b, e;
    if (cJSON_GetArraySize(of) != 2 || !json_u53(of->child, &b) || !json_u53(of->child->next, &e) || b > e)
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG,
                        "%s: tensor %s: data_offsets is not [begin, end] with 0 <= begin <= end", fname, name);
    uint64_t data_size = m->size - data_off;
    if (e > data_size)
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG,
                        "%s: tensor %s: data_offsets end %llu past the data area (%llu bytes)", fname, name,
                        (unsigned long long)e, (unsigned long long)data_size);
    int64_t nb = sfm_tensor_bytes(t.type, t.ndim, t.shape);
    if (nb < 0)
        return sfm_fail(err, errlen, SF_ERR_TOO_LARGE, "%s: tensor %s: element count overflows", fname, name);
    if ((uint64_t)nb != e - b)
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG,
                        "%s: tensor %s: data_offsets span %llu bytes, dtype and shape need %lld", fname, name,
                        (unsigned long long)(e - b), (long long)nb);
    t.name = sfm_own_str(c, name, strlen(name));
    if (!t.name) return sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory for tensor names");
    t.data = m->base + data_off + b;
    t.nbytes = (uint64_t)nb;
    ext->begin = b;
    ext->end = e;
    ext->name = t.name;
    return sfm_ck_add(c, &t, err, errlen);
}

sf_status sfm_st_parse(sfm_checkpoint *c, const sfm_map *m, const char *fname, char *err, size_t errlen) {
    if (m->size < 8)
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s: %llu bytes, too short for a safetensors header",
                        fname, (unsigned long long)m->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | m->base[i];
    if (n > m->size - 8)
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG,
                        "%s: header length %llu exceeds the file (%llu bytes)", fname, (unsigned long long)n,
                        (unsigned long long)m->size);
    cJSON *root = cJSON_ParseWithLength((const char *)m->base + 8, (size_t)n);
    if (!root)
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s: the header is not valid JSON", fname);
    sf_status s = SF_OK;
    extent *ext = NULL;
    if (!cJSON_IsObject(root)) {
        s = sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s: the header is not a JSON object", fname);
        goto done;
    }
    int count = cJSON_GetArraySize(root);
    ext = malloc((size_t)(count > 0 ? count : 1) * sizeof *ext);
    if (!ext) {
        s = sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory reading %s", fname);
        goto done;
    }
    int ne = 0;
    for (const cJSON *it = root->child; it && s == SF_OK; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) {
            if (!cJSON_IsObject(it))
                s = sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s: __metadata__ is not a JSON object", fname);
            continue;
        }
        s = st_entry(c, it, m, 8 + n, fname, &ext[ne], err, errlen);
        if (s == SF_OK) ne++;
    }
    if (s == SF_OK && ne > 1) {
        qsort(ext, (size_t)ne, sizeof *ext, by_begin);
        uint64_t end = 0;
        const char *prev = NULL;
        for (int i = 0; i < ne && s == SF_OK; i++) {
            if (ext[i].begin == ext[i].end) continue; /* empty tensors hold no bytes */
            if (prev && ext[i].begin < end)
                s = sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s: tensors %s and %s overlap", fname, prev,
                             ext[i].name);
            if (ext[i].end > end) {
                end = ext[i].end;
                prev = ext[i].name;
            }
        }
    }
done:
    free(ext);
    cJSON_Delete(root);
    return s;
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static char *join(const char *dir, const char *file) {
    size_t a = strlen(dir), b = strlen(file);
    char *p = malloc(a + b + 2);
    if (p) snprintf(p, a + b + 2, "%s/%s", dir, file);
    return p;
}

/* A small JSON file (the index). */
static sf_status read_json(const char *dir, const char *file, cJSON **out, char *err, size_t errlen) {
    *out = NULL;
    char *p = join(dir, file);
    if (!p) return sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory");
    sfm_map m;
    sf_status s = sfm_map_open(p, &m, err, errlen);
    free(p);
    if (s != SF_OK) return s;
    *out = cJSON_ParseWithLength((const char *)m.base, (size_t)m.size);
    sfm_map_close(&m);
    if (!*out) return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s/%s is not valid JSON", dir, file);
    return SF_OK;
}

/* Shard file names must stay inside the checkpoint's directory. */
static int plain_name(const char *s) {
    return s[0] && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/');
}

static sf_status open_shards(sfm_checkpoint *c, const char *dir, const cJSON *wm, const char **shard,
                             int nshard, char *err, size_t errlen) {
    for (int i = 0; i < nshard; i++) {
        char *p = join(dir, shard[i]);
        if (!p) return sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory");
        sf_status s = sfm_map_open(p, &c->maps[i], err, errlen);
        c->nmaps = i + 1;
        if (s == SF_OK) s = sfm_st_parse(c, &c->maps[i], p, err, errlen);
        free(p);
        if (s != SF_OK) return s;
    }
    sf_status s = sfm_ck_index(c, err, errlen);
    if (s != SF_OK) return s;
    for (const cJSON *e = wm->child; e; e = e->next) {
        const sfm_tensor *t = sfm_checkpoint_find(c, e->string);
        int k = 0;
        while (k < nshard && strcmp(shard[k], e->valuestring)) k++;
        const sfm_map *m = &c->maps[k];
        if (!t || (const uint8_t *)t->data < m->base || (const uint8_t *)t->data > m->base + m->size)
            return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "tensor %s is listed in %s but missing from it",
                            e->string, e->valuestring);
    }
    return SF_OK;
}

sf_status sfm_st_open_dir(const char *dir, sfm_checkpoint **out, char *err, size_t errlen) {
    cJSON *idx = NULL;
    const char **shard = NULL;
    sfm_checkpoint *c = NULL;
    sfm_map cfg = {0};
    char *cp = join(dir, "config.json");
    sf_status s = cp ? sfm_map_open(cp, &cfg, err, errlen)
                     : sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory");
    free(cp);
    if (s != SF_OK) goto done;
    char *ip = join(dir, "model.safetensors.index.json");
    int sharded = ip && exists(ip);
    free(ip);
    const cJSON *wm = NULL;
    int nshard = 1;
    if (sharded) {
        s = read_json(dir, "model.safetensors.index.json", &idx, err, errlen);
        if (s != SF_OK) goto done;
        wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
        if (!cJSON_IsObject(wm)) {
            s = sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s/model.safetensors.index.json has no weight_map object", dir);
            goto done;
        }
        int n = cJSON_GetArraySize(wm);
        shard = malloc((size_t)(n > 0 ? n : 1) * sizeof *shard);
        if (!shard) {
            s = sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
        nshard = 0;
        for (const cJSON *e = wm->child; e; e = e->next) {
            if (!cJSON_IsString(e) || !plain_name(e->valuestring)) {
                s = sfm_fail(err, errlen, SF_ERR_INVALID_ARG,
                             "model.safetensors.index.json: tensor %s maps to no plain file name", e->string);
                goto done;
            }
            int k = 0;
            while (k < nshard && strcmp(shard[k], e->valuestring)) k++;
            if (k == nshard) shard[nshard++] = e->valuestring;
        }
        if (nshard == 0) {
            s = sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "%s/model.safetensors.index.json lists no tensors", dir);
            goto done;
        }
    }
    s = sfm_ck_new(0, dir, nshard, &c, err, errlen);
    if (s != SF_OK) goto done;
    s = sfm_config_from_json(c, (const char *)cfg.base, (size_t)cfg.size, err, errlen);
    if (s != SF_OK) goto done;
    if (sharded) {
        s = open_shards(c, dir, wm, shard, nshard, err, errlen);
    } else {
        char *p = join(dir, "model.safetensors");
        if (!p) {
            s = sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
        if (!exists(p)) {
            s = sfm_fail(err, errlen, SF_ERR_INVALID_ARG,
                         "%s holds neither model.safetensors nor model.safetensors.index.json", dir);
        } else {
            s = sfm_map_open(p, &c->maps[0], err, errlen);
            c->nmaps = 1;
            if (s == SF_OK) s = sfm_st_parse(c, &c->maps[0], p, err, errlen);
            if (s == SF_OK) s = sfm_ck_index(c, err, errlen);
        }
        free(p);
    }
    if (s == SF_OK) s = sfm_checkpoint_validate(c, err, errlen);
done:
    free(shard);
    cJSON_Delete(idx);
    sfm_map_close(&cfg);
    if (s != SF_OK) {
        sfm_checkpoint_close(c);
        c = NULL;
    }
    *out = c;
    return s;
}
