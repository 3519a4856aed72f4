/* The checkpoint's insides, shared by checkpoint.c, safetensors.c, gguf.c
 * and config.c (not installed). */
#ifndef SF_MODEL_CKPT_INTERNAL_H
#define SF_MODEL_CKPT_INTERNAL_H

#include <stdarg.h>

#include "checkpoint.h"
#include "mapped_file.h"

/* One GGUF metadata value. Strings and arrays point into the mapped file;
 * string arrays get a table of (pointer, length) pairs. */
typedef struct sfm_kv {
    const char *key;         /* not NUL-terminated */
    uint64_t key_len;
    uint32_t type;           /* GGUF value type */
    union {
        uint64_t u;
        int64_t i;
        double f;
    } v;
    const uint8_t *str;      /* string: bytes */
    uint64_t str_len;
    uint32_t arr_type;       /* array: element type, count, data */
    uint64_t arr_n;
    const uint8_t *arr;
    const uint8_t **arr_str; /* string arrays: element pointers ... */
    uint64_t *arr_str_len;   /* ... and lengths */
} sfm_kv;

typedef struct sfm_block sfm_block;

struct sfm_checkpoint {
    int is_gguf;
    char *path;
    sfm_config cfg;
    sfm_map *maps;
    int nmaps;
    sfm_tensor *t;
    int nt, cap;
    int indexed;      /* t is sorted by name (sfm_ck_index) */
    sfm_kv *kv;
    int64_t nkv;
    sfm_block *owned; /* every other allocation: names, copies, tables */
};

/* Writes the message and returns s. */
sf_status sfm_fail(char *err, size_t errlen, sf_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Memory freed with the checkpoint (NULL when out of memory). */
void *sfm_own(sfm_checkpoint *c, size_t bytes);
char *sfm_own_str(sfm_checkpoint *c, const char *s, size_t len);
/* An empty checkpoint with room for nmaps maps. */
sf_status sfm_ck_new(int is_gguf, const char *path, int nmaps, sfm_checkpoint **out, char *err,
                     size_t errlen);
/* Appends a tensor (name and data already owned / mapped). */
sf_status sfm_ck_add(sfm_checkpoint *c, const sfm_tensor *t, char *err, size_t errlen);
/* Sorts the name index; a name seen twice is an error. */
sf_status sfm_ck_index(sfm_checkpoint *c, char *err, size_t errlen);

/* Element count of a shape, or -1 past 2^60 (or a negative extent). */
int64_t sfm_numel(int ndim, const int64_t *shape);
/* Bytes of a tensor of this type and shape (-1 when the count overflows or
 * a block type's innermost extent is not a multiple of 32). */
int64_t sfm_tensor_bytes(sfm_wtype t, int ndim, const int64_t *shape);

/* safetensors.c: the tensors of one file's bytes (in m), tagged `fname` in
 * messages. */
sf_status sfm_st_parse(sfm_checkpoint *c, const sfm_map *m, const char *fname, char *err,
                       size_t errlen);
/* safetensors.c: a HF directory (config.json, one file or an index). */
sf_status sfm_st_open_dir(const char *dir, sfm_checkpoint **out, char *err, size_t errlen);
/* gguf.c: one GGUF file's bytes (m is taken over, even on failure). */
sf_status sfm_gguf_open_map(const char *path, sfm_map *m, sfm_checkpoint **out, char *err,
                            size_t errlen);

/* config.c: from config.json text (len bytes), and from GGUF metadata. */
sf_status sfm_config_from_json(sfm_checkpoint *c, const char *text, size_t len, char *err,
                               size_t errlen);
sf_status sfm_config_from_gguf(sfm_checkpoint *c, char *err, size_t errlen);
/* config.c: every tensor the architecture needs, with its shape. */
sf_status sfm_checkpoint_validate(const sfm_checkpoint *c, char *err, size_t errlen);

/* The open-from-memory entries of the fuzzer and the tests: a GGUF image,
 * or a safetensors image with config.json text. */
sf_status sfm_checkpoint_open_gguf_memory(const void *data, size_t n, sfm_checkpoint **out,
                                          char *err, size_t errlen);
sf_status sfm_checkpoint_open_st_memory(const void *data, size_t n, const char *config_json,
                                        sfm_checkpoint **out, char *err, size_t errlen);

#endif
