// emu_bits.h - the drivers' 16-bit helpers: a float rounded to T's bits,
// and T's bits back to float (sf_elem of common/cuda_common.h).
#pragma once
#include "common/cuda_common.h"
#include <cstring>

template <typename T> static uint16_t bits(float v) {
    T h = sf_elem<T>::from_f(v);
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}
template <typename T> static float val(uint16_t b) {
    T h;
    memcpy(&h, &b, 2);
    return sf_elem<T>::to_f(h);
}
