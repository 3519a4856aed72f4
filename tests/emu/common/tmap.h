// tmap.h (emulation) - make_tmap of src/cuda/common/tmap.h on the host: the
// (d, rows, heads, batch) 16-bit map with 64-column boxes and the 128-byte
// swizzle, its fields kept in the CUtensorMap's opaque bytes as an EmuTmap
// for the emulated TMA copies (common/wgmma.cuh: emu_tma_load4,
// tma_store4).  The same refusals as the driver's for the strides.
#pragma once
#include <cuda.h>
#include <cstdint>
#include <cstring>

struct EmuTmap {
    const void *ptr;
    int64_t dims[4];    /* elements: columns, rows, heads, batch */
    int64_t strides[3]; /* bytes: rows, heads, batch */
    int box[2];         /* columns, rows */
    int es;             /* element bytes: 2, or 1 (make_tmap_u8) */
};
static_assert(sizeof(EmuTmap) <= sizeof(CUtensorMap), "an EmuTmap fits a CUtensorMap");

static inline bool make_tmap(CUtensorMap *m, bool, const void *ptr, int64_t d, int64_t rows, int64_t heads,
                             int64_t batch, int64_t sr, int64_t sh, int64_t sb, unsigned box_rows = 128) {
    if (heads == 1) sh = sr * rows;
    if (batch == 1) sb = (heads == 1 ? sr * rows : sh * heads);
    const int64_t st[3] = {sr * 2, sh * 2, sb * 2};
    for (int i = 0; i < 3; i++)
        if (st[i] <= 0 || st[i] % 16 != 0 || st[i] >= (1LL << 40)) return false;
    if (((uintptr_t)ptr & 15) || box_rows == 0 || box_rows > 256) return false;
    EmuTmap t = {ptr, {d, rows, heads, batch}, {st[0], st[1], st[2]}, {64, (int)box_rows}, 2};
    memset(m, 0, sizeof *m);
    memcpy(m, &t, sizeof t);
    return true;
}

static inline bool make_tmap_u8(CUtensorMap *m, const void *ptr, int64_t d, int64_t rows, int64_t heads,
                                int64_t batch, int64_t sr, int64_t sh, int64_t sb, unsigned box_rows) {
    if (heads == 1) sh = sr * rows;
    if (batch == 1) sb = (heads == 1 ? sr * rows : sh * heads);
    const int64_t st[3] = {sr, sh, sb};
    for (int i = 0; i < 3; i++)
        if (st[i] <= 0 || st[i] % 16 != 0 || st[i] >= (1LL << 40)) return false;
    if (((uintptr_t)ptr & 15) || box_rows == 0 || box_rows > 256) return false;
    EmuTmap t = {ptr, {d, rows, heads, batch}, {st[0], st[1], st[2]}, {128, (int)box_rows}, 1};
    memset(m, 0, sizeof *m);
    memcpy(m, &t, sizeof t);
    return true;
}
