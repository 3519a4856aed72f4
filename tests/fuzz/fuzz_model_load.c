/* fuzz_model_load.c - libFuzzer harness over the checkpoint loaders
 * (src/model/): the input's first byte picks
 *   0  the rest as a GGUF file,
 *   1  a u16 length, that many bytes of config.json, the rest as a
 *      safetensors file,
 *   2  the rest as config.json alone (the empty safetensors image behind
 *      it is refused once the config has been read),
 * opened from memory exactly as from a mapped file. A crash, a sanitizer
 * report, a leak or a hang is a bug; any error status is fine, and an
 * opened checkpoint has every tensor read end to end (ASan sees any view
 * outside the input).
 *
 * Seeds: `test_checkpoint --write-seeds DIR` (tests/model/). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"

static void touch(const sfm_checkpoint *c) {
    volatile uint8_t sink = 0;
    for (int i = 0; i < sfm_checkpoint_count(c); i++) {
        const sfm_tensor *t = sfm_checkpoint_tensor(c, i);
        const uint8_t *p = t->data;
        if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1];
        if (sfm_checkpoint_find(c, t->name) != t) abort();
    }
    (void)sink;
    int64_t v;
    const char *s;
    size_t n;
    for (int64_t i = 0; i < sfm_meta_array_len(c, "tokenizer.ggml.tokens"); i++) sfm_meta_array_string(c, "tokenizer.ggml.tokens", i, &s, &n);
    sfm_meta_int(c, "general.alignment", &v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    sfm_checkpoint *c = NULL;
    char err[256];
    uint8_t mode = data[0] % 3;
    data++, size--;
    if (mode == 0) {
        /* a copy of exactly the input's bytes, so reads past it are caught */
        uint8_t *copy = malloc(size ? size : 1);
        if (!copy) return 0;
        memcpy(copy, data, size);
        if (sfm_checkpoint_open_gguf_memory(copy, size, &c, err, sizeof err) == SF_OK) touch(c);
        sfm_checkpoint_close(c);
        free(copy);
        return 0;
    }
    size_t clen = size;
    if (mode == 1) {
        if (size < 2) return 0;
        clen = (size_t)data[0] | (size_t)data[1] << 8;
        data += 2, size -= 2;
        if (clen > size) clen = size;
    }
    char *cfg = malloc(clen + 1);
    if (!cfg) return 0;
    memcpy(cfg, data, clen);
    cfg[clen] = 0;
    size_t rest = size - clen;
    uint8_t *st = malloc(rest ? rest : 1);
    if (st) {
        memcpy(st, data + clen, rest);
        if (sfm_checkpoint_open_st_memory(st, mode == 1 ? rest : 0, cfg, &c, err, sizeof err) == SF_OK) touch(c);
        sfm_checkpoint_close(c);
    }
    free(st);
    free(cfg);
    return 0;
}
