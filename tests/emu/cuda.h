// cuda.h (emulation) - the one driver type the kernels take: CUtensorMap, an
// opaque 128 bytes that tests/emu/common/tmap.h fills with an EmuTmap.
#pragma once
#include <cstdint>
struct alignas(64) CUtensorMap {
    uint64_t opaque[16];
};
