// attn_emu_case.h - the attention cases of the emulator drivers
// (attn_fwd_emu_main.cpp, attn_bwd_emu_main.cpp): seeded random q, k, v
// (dense (b, L, H, d) or varlen (total, H, d) with cu_seqlens), the forward
// parameters, and the error measure (max |x - ref| / max |ref|).
#pragma once
#include "common/cuda_common.h"
#include <random>
#include <string>
#include <vector>

struct AttnCase {
    const char *name;
    int b, lq, lk, H, Hkv, d;
    int causal, wl, wr;
    float softcap;
    int alibi;                  // 1: slopes (H)
    std::vector<int> lens_q, lens_k; // varlen when not empty (b = their count)
    sf_dtype dt;
};

struct Buf {
    std::vector<unsigned char> d;
    sf_tensor t{};
};
static inline void mk(Buf &B, sf_dtype dt, std::vector<int64_t> sh) {
    int64_t n = 1;
    for (auto v : sh) n *= v;
    B.d.assign((size_t)(n + 64) * sf_dtype_size(dt), 0);
    // 16-byte aligned data (the kernels' 16-byte loads)
    void *p = B.d.data() + ((16 - (uintptr_t)B.d.data() % 16) % 16);
    B.t = sf_tensor_contiguous(p, dt, SF_DEVICE_CPU, (int)sh.size(), sh.data());
}
static inline int64_t numel(const Buf &B) { return sf_tensor_numel(&B.t); }
static inline void set(Buf &B, int64_t i, float v) { sf_stf(B.t.data, B.t.dtype, i, v); }
static inline float get(const Buf &B, int64_t i) { return sf_ldf(B.t.data, B.t.dtype, i); }

static std::mt19937_64 emu_rng(11);
static inline float nrm() { static std::normal_distribution<float> d; return d(emu_rng); }

// the inputs of case c, ready for sf_attn_fwd (out and lse allocated, NaN)
struct AttnData {
    Buf q, k, v, out, lse, cuq, cuk, alibi;
    sf_attn_fwd_params f;
    int64_t tq, tk; // rows of q, k (varlen: totals; dense: b L)
};
static inline void attn_make(const AttnCase &c, AttnData &a) {
    const bool vl = !c.lens_q.empty();
    sf_attn_fwd_params_init(&a.f);
    if (vl) {
        const int64_t b = (int64_t)c.lens_q.size();
        mk(a.cuq, SF_I32, {b + 1});
        mk(a.cuk, SF_I32, {b + 1});
        int64_t sq = 0, sk = 0;
        ((int *)a.cuq.t.data)[0] = 0;
        ((int *)a.cuk.t.data)[0] = 0;
        for (int64_t i = 0; i < b; i++) {
            sq += c.lens_q[i];
            sk += c.lens_k[i];
            ((int *)a.cuq.t.data)[i + 1] = (int)sq;
            ((int *)a.cuk.t.data)[i + 1] = (int)sk;
        }
        a.tq = sq;
        a.tk = sk;
        mk(a.q, c.dt, {sq, c.H, c.d});
        mk(a.k, c.dt, {sk, c.Hkv, c.d});
        mk(a.v, c.dt, {sk, c.Hkv, c.d});
        mk(a.out, c.dt, {sq, c.H, c.d});
        mk(a.lse, SF_F32, {c.H, sq});
        a.f.cu_seqlens_q = a.cuq.t;
        a.f.cu_seqlens_k = a.cuk.t;
    } else {
        a.tq = (int64_t)c.b * c.lq;
        a.tk = (int64_t)c.b * c.lk;
        mk(a.q, c.dt, {c.b, c.lq, c.H, c.d});
        mk(a.k, c.dt, {c.b, c.lk, c.Hkv, c.d});
        mk(a.v, c.dt, {c.b, c.lk, c.Hkv, c.d});
        mk(a.out, c.dt, {c.b, c.lq, c.H, c.d});
        mk(a.lse, SF_F32, {c.b, c.H, c.lq});
    }
    for (int64_t i = 0; i < numel(a.q); i++) set(a.q, i, nrm());
    for (int64_t i = 0; i < numel(a.k); i++) set(a.k, i, nrm());
    for (int64_t i = 0; i < numel(a.v); i++) set(a.v, i, nrm());
    for (int64_t i = 0; i < numel(a.out); i++) set(a.out, i, NAN);
    for (int64_t i = 0; i < numel(a.lse); i++) set(a.lse, i, NAN);
    a.f.q = a.q.t;
    a.f.k = a.k.t;
    a.f.v = a.v.t;
    a.f.out = a.out.t;
    a.f.lse = a.lse.t;
    a.f.causal = c.causal;
    a.f.window_left = c.wl;
    a.f.window_right = c.wr;
    a.f.softcap = c.softcap;
    if (c.alibi) {
        mk(a.alibi, SF_F32, {c.H});
        for (int h = 0; h < c.H; h++) set(a.alibi, h, 0.05f * (h + 1));
        a.f.alibi_slopes = a.alibi.t;
    }
}

// max |x - r| / max |r| over a tensor, counting NaNs in x
struct Err {
    double rel;
    long nan;
    int64_t worst; // element of the largest error
};
static inline Err rel_err(const Buf &x, const Buf &r) {
    double mx = 0, me = 0;
    long nan = 0;
    int64_t worst = -1;
    for (int64_t i = 0; i < numel(r); i++) {
        const double rv = get(r, i), xv = get(x, i);
        if (std::isfinite(rv)) mx = std::max(mx, std::fabs(rv));
        if (std::isnan(xv) && !std::isnan(rv)) { nan++; if (worst < 0) worst = i; continue; }
        if (std::isinf(rv) || std::isinf(xv)) {
            if (rv != xv) { nan++; worst = i; }
            continue;
        }
        if (std::fabs(xv - rv) > me) { me = std::fabs(xv - rv); if (!nan) worst = i; }
    }
    return {mx > 0 ? me / mx : me, nan, worst};
}
