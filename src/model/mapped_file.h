/* A read-only view of a whole file (mmap), or of caller memory, with
 * bounds-checked ranges: every parser reads through these checks. */
#ifndef SF_MODEL_MAPPED_FILE_H
#define SF_MODEL_MAPPED_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "seqfuse.h"

typedef struct sfm_map {
    const uint8_t *base; /* NULL for an empty file */
    uint64_t size;
    int mapped;          /* 1: munmap at close; 0: borrowed memory */
} sfm_map;

/* Maps `path` read-only. SF_ERR_INVALID_ARG (with strerror) when it cannot be
 * opened, is not a regular file or cannot be mapped. */
sf_status sfm_map_open(const char *path, sfm_map *m, char *err, size_t errlen);
/* A view of memory the caller keeps alive (fuzzing, tests). */
void sfm_map_borrow(sfm_map *m, const void *data, uint64_t size);
void sfm_map_close(sfm_map *m);

/* 1 when [off, off + len) lies inside the map (overflow-checked). */
static inline int sfm_map_has(const sfm_map *m, uint64_t off, uint64_t len) {
    return off <= m->size && len <= m->size - off;
}
/* The pointer to [off, off + len), or NULL when the range is outside. */
static inline const uint8_t *sfm_map_view(const sfm_map *m, uint64_t off, uint64_t len) {
    return sfm_map_has(m, off, len) ? m->base + off : NULL;
}

#endif
