// emu_bits.h - the drivers' host helpers: a float rounded to T's bits and
// T's bits back to float (sf_elem of common/cuda_common.h), the same for a
// run-time choice of f16 / bf16, and 16-byte aligned host storage.
#pragma once
#include "common/cuda_common.h"
#include <cstring>
#include <vector>

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

// v rounded to f16 (or bf16) bits, and back
static inline uint16_t to16(float v, bool f16) { return f16 ? bits<__half>(v) : bits<__nv_bfloat16>(v); }
static inline float from16(uint16_t u, bool f16) { return f16 ? val<__half>(u) : val<__nv_bfloat16>(u); }

// 16-byte aligned, zeroed host storage of n bytes
struct Mem {
    std::vector<uint8_t> v;
    uint8_t *p;
    explicit Mem(size_t n) : v(n + 16, 0) { p = v.data() + (16 - (uintptr_t)v.data() % 16) % 16; }
};
