/* mapped_file.c - read-only mmap of a file, and borrowed views. */
#define _POSIX_C_SOURCE 200809L
#include "mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

sf_status sfm_map_open(const char *path, sfm_map *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return SF_ERR_INVALID_ARG;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file", path);
        close(fd);
        return SF_ERR_INVALID_ARG;
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        snprintf(err, errlen, "%s is too large to map", path);
        close(fd);
        return SF_ERR_TOO_LARGE;
    }
    m->size = (uint64_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, (size_t)m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            snprintf(err, errlen, "cannot map %s: %s", path, strerror(errno));
            close(fd);
            memset(m, 0, sizeof *m);
            return SF_ERR_INVALID_ARG;
        }
        m->base = p;
        m->mapped = 1;
    }
    close(fd); /* the mapping keeps the file */
    return SF_OK;
}

void sfm_map_borrow(sfm_map *m, const void *data, uint64_t size) {
    m->base = data;
    m->size = data ? size : 0;
    m->mapped = 0;
}

void sfm_map_close(sfm_map *m) {
    if (m->mapped && m->base) munmap((void *)m->base, (size_t)m->size);
    memset(m, 0, sizeof *m);
}
