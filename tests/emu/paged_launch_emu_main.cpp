// paged_launch_emu_main.cpp - sf_attn_paged's CUDA backend as a whole (the
// launcher of src/cuda/paged/paged.cu: the choice of the cp.async or the
// element-load instances, the score modifier and head-dim dispatch, the
// split count, the workspace of the partials, the split counters, the
// error word) run by the host emulator against the reference backend
// (sf_attn_paged, SF_BACKEND_REF) on the same inputs.  Each case runs with
// the untuned split count and pinned ones (SF_AUTOTUNE_FORCE=attn_paged:
// s1 / s3 / m16s8, and tma / tma+s3 for the TMA kernel); outputs and lse poisoned first; afterwards every split
// counter must be back at 0 and the error word clear, except in the case
// with a bad block-table entry, whose sequence must get 0 / -inf and be
// the one recorded.  Cases: bf16 / f16, 16-bit and FP8 pools (per token
// and per head scales), page sizes 1 / 8 / 16 / 64, GQA 1 / 4, decode and 4
// new tokens, causal and a window, softcap, ALiBi, head dims 64 / 128 and
// 59 / 36 / 72 (element loads), q with padded rows.  The emulated device is
// an sm_90 with 2 SMs.  Built and run by run_paged_launch_emu.sh; argument:
// a case name (default: all).
#include "common/cuda_common.h"
#include "emu_bits.h"
#include "paged/counters.h"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

extern "C" sf_status emu_cuda_attn_paged(sf_ctx *ctx, const sf_paged_problem *pr);

struct Case {
    const char *name;
    int b, H, Hkv, d, lq, ps;
    int lens[4];
    int fp8;        // 0: 16-bit pools, 1: FP8 with per-token scales, 2: per-head scales
    bool f16, causal, alibi;
    int wl;         // window left (-1: none)
    float softcap;
    int qpad;       // extra elements between q's heads (rows not 16-byte aligned when odd)
    int bad_seq;    // -1, or the sequence whose first table entry is made out of range
};


static sf_tensor tn(void *p, sf_dtype dt, int rank, const int64_t *shape, const int64_t *stride) {
    sf_tensor t = sf_tensor_contiguous(p, dt, SF_DEVICE_CPU, rank, shape);
    if (stride)
        for (int i = 0; i < rank; i++) t.stride[i] = stride[i];
    return t;
}

static int run(const Case &c, sf_ctx *ctx) {
    std::mt19937 rng(99u + (unsigned)c.d * 13u + (unsigned)c.ps);
    std::normal_distribution<float> nd;
    const int b = c.b, H = c.H, Hkv = c.Hkv, d = c.d, lq = c.lq, ps = c.ps;
    int max_pages = 1, used = 0;
    for (int i = 0; i < b; i++) {
        const int np = (c.lens[i] + ps - 1) / ps;
        max_pages = std::max(max_pages, np + 1);
        used += np;
    }
    const int num_pages = used + 3;
    std::vector<int> perm(num_pages);
    for (int i = 0; i < num_pages; i++) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    Mem table((size_t)b * max_pages * 4), lens((size_t)b * 4);
    int32_t *bt = (int32_t *)table.p, *ln = (int32_t *)lens.p;
    for (int i = 0, k = 0; i < b; i++) {
        ln[i] = c.lens[i];
        for (int j = 0; j < max_pages; j++) bt[i * max_pages + j] = j < (c.lens[i] + ps - 1) / ps ? perm[k++] : -1;
    }
    if (c.bad_seq >= 0) bt[c.bad_seq * max_pages] = num_pages;
    const sf_dtype dt = c.f16 ? SF_F16 : SF_BF16;
    const size_t rows = (size_t)num_pages * ps * Hkv, es = c.fp8 ? 1 : 2;
    Mem kc(rows * d * es), vc(rows * d * es), ks(rows * 4), vs(rows * 4);
    float *ksp = (float *)ks.p, *vsp = (float *)vs.p;
    for (size_t r = 0; r < rows; r++) {
        if (c.fp8 == 1) ksp[r] = 0.5f + 0.01f * (float)(r % 7), vsp[r] = 0.25f + 0.02f * (float)(r % 5);
        for (int e = 0; e < d; e++) {
            if (c.fp8) { // codes of finite values (0x7f / 0xff are NaN)
                kc.p[r * d + e] = (uint8_t)(rng() % 0x7e) | (uint8_t)(rng() & 0x80);
                vc.p[r * d + e] = (uint8_t)(rng() % 0x7e) | (uint8_t)(rng() & 0x80);
            } else {
                ((uint16_t *)kc.p)[r * d + e] = to16(nd(rng), c.f16);
                ((uint16_t *)vc.p)[r * d + e] = to16(nd(rng), c.f16);
            }
        }
    }
    if (c.fp8 == 2)
        for (int h = 0; h < Hkv; h++) ksp[h] = 0.01f * (h + 1), vsp[h] = 0.02f * (h + 1);
    if (c.fp8) // e4m3 values reach 448: keep the scores in a sane range
        for (size_t r = 0; r < (c.fp8 == 1 ? rows : (size_t)Hkv); r++) ksp[r] *= 0.01f;
    // q (b, lq, H, d) with qpad elements between heads
    const int64_t qhs = d + c.qpad, qrs = (int64_t)H * qhs, qbs = (int64_t)lq * qrs;
    Mem q((size_t)b * qbs * 2), out((size_t)b * lq * H * d * 2), ref((size_t)b * lq * H * d * 2);
    Mem lse((size_t)b * H * lq * 4), lref((size_t)b * H * lq * 4), slopes((size_t)H * 4);
    for (int64_t i = 0; i < b * qbs; i++) ((uint16_t *)q.p)[i] = to16(nd(rng), c.f16);
    for (int h = 0; h < H; h++) ((float *)slopes.p)[h] = 0.05f * (h + 1);

    const int64_t qs[4] = {b, lq, H, d}, qst[4] = {qbs, qrs, qhs, 1}, pool[4] = {num_pages, ps, Hkv, d};
    const int64_t bts[2] = {b, max_pages}, bs[1] = {b}, ls[3] = {b, H, lq}, sp3[3] = {num_pages, ps, Hkv};
    const int64_t hs1[1] = {Hkv}, hh[1] = {H};
    sf_attn_paged_params p;
    sf_attn_paged_params_init(&p);
    p.q = tn(q.p, dt, 4, qs, qst);
    p.k_cache = tn(kc.p, c.fp8 ? SF_F8E4M3 : dt, 4, pool, nullptr);
    p.v_cache = tn(vc.p, c.fp8 ? SF_F8E4M3 : dt, 4, pool, nullptr);
    if (c.fp8 == 1) p.k_scale = tn(ks.p, SF_F32, 3, sp3, nullptr), p.v_scale = tn(vs.p, SF_F32, 3, sp3, nullptr);
    if (c.fp8 == 2) p.k_scale = tn(ks.p, SF_F32, 1, hs1, nullptr), p.v_scale = tn(vs.p, SF_F32, 1, hs1, nullptr);
    p.block_table = tn(table.p, SF_I32, 2, bts, nullptr);
    p.seqlens = tn(lens.p, SF_I32, 1, bs, nullptr);
    p.causal = c.causal;
    p.window_left = c.wl;
    p.softcap = c.softcap;
    if (c.alibi) p.alibi_slopes = tn(slopes.p, SF_F32, 1, hh, nullptr);
    // the reference: the table checked on the host (a bad entry is an error there)
    sf_attn_paged_params pr_ref = p;
    pr_ref.out = tn(ref.p, dt, 4, qs, nullptr);
    pr_ref.lse = tn(lref.p, SF_F32, 3, ls, nullptr);
    pr_ref.backend = SF_BACKEND_REF;
    std::vector<int32_t> saved(bt, bt + (size_t)b * max_pages);
    if (c.bad_seq >= 0) { // the reference of the good sequences: the bad one as empty
        bt[c.bad_seq * max_pages] = perm[0];
        ln[c.bad_seq] = 0;
    }
    if (sf_attn_paged(ctx, &pr_ref) != SF_OK) {
        printf("FAIL %s: reference: %s\n", c.name, sf_ctx_last_error(ctx));
        return 1;
    }
    std::copy(saved.begin(), saved.end(), bt);
    for (int i = 0; i < b; i++) ln[i] = c.lens[i];

    sf_attn_paged_params pe = p;
    pe.out = tn(out.p, dt, 4, qs, nullptr);
    pe.lse = tn(lse.p, SF_F32, 3, ls, nullptr);
    sf_paged_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = &pe;
    pr.batch = b, pr.nheads = H, pr.nheads_kv = Hkv, pr.headdim = d, pr.lq = lq;
    pr.num_pages = num_pages, pr.page_size = ps, pr.max_pages = max_pages;
    pr.has_lse = 1;
    pr.scale = 1.0f / sqrtf((float)d);
    pr.wl = c.wl < 0 ? -1 : c.wl;
    pr.wr = c.causal ? 0 : -1;
    pr.softcap = c.softcap;
    pr.fp8 = c.fp8 != 0, pr.scale_per_head = c.fp8 == 2;
    if (c.alibi) pr.alibi = (const float *)slopes.p, pr.alibi_sb = 0, pr.alibi_sh = 1;

    std::vector<unsigned int> ctr(2 + SF_PAGED_CTRS, 0u);
    unsigned int err = 0;
    emu_cs.tile_ctr = ctr.data();
    emu_cs.paged_err_d = &err;
    int fails = 0;
    /* tma / tma+s3: the TMA kernel (decode_tma.cuh) where it serves (narrow tiles, pages of 16 or more) */
    const char *forces[] = {nullptr, "s1", "s3", "m16s8", "tma", "tma+s3"};
    for (const char *f : forces) {
        if (f) setenv("SF_AUTOTUNE_FORCE", (std::string("attn_paged:") + f).c_str(), 1);
        else unsetenv("SF_AUTOTUNE_FORCE");
        memset(out.p, 0xff, (size_t)b * lq * H * d * 2);
        memset(lse.p, 0xff, (size_t)b * H * lq * 4);
        err = 0;
        const sf_status s = emu_cuda_attn_paged(ctx, &pr);
        if (s != SF_OK) {
            printf("FAIL %-22s %-7s: %s\n", c.name, f ? f : "default", sf_ctx_last_error(ctx));
            fails++;
            continue;
        }
        double maxref = 0, maxe = 0, lerr = 0;
        int bad = 0;
        for (int i = 0; i < b; i++)
            for (int t = 0; t < lq; t++)
                for (int h = 0; h < H; h++) {
                    const size_t o = (((size_t)i * lq + t) * H + h) * d;
                    for (int e = 0; e < d; e++) {
                        const double g = from16(((uint16_t *)out.p)[o + e], c.f16);
                        const double r = from16(((uint16_t *)ref.p)[o + e], c.f16);
                        if (!std::isfinite(g)) bad++;
                        maxref = std::max(maxref, std::fabs(r));
                        maxe = std::max(maxe, std::fabs(g - r));
                    }
                    const float lg = ((float *)lse.p)[((size_t)i * H + h) * lq + t];
                    const float lr = ((float *)lref.p)[((size_t)i * H + h) * lq + t];
                    if (std::isinf(lr)) bad += !(std::isinf(lg) && lg < 0);
                    else if (!std::isfinite(lg)) bad++; /* std::max would drop a NaN (unwritten) lse */
                    else lerr = std::max(lerr, (double)std::fabs(lg - lr) / std::max(1.0, (double)std::fabs(lr)));
                }
        unsigned int left = 0;
        for (unsigned int w : ctr) left += w != 0u;
        const unsigned int want_err = c.bad_seq >= 0 ? (unsigned int)c.bad_seq + 1u : 0u;
        const double tol = c.f16 ? 5e-3 : 2e-2, rel = maxe / std::max(maxref, 1e-30);
        const bool ok = bad == 0 && rel <= tol && lerr <= 1e-4 && left == 0 && err == want_err;
        fails += !ok;
        printf("%-4s %-22s %-7s %s%s d %3d ps %3d: max|o - ref| / max|ref| = %.2e (tol %.0e), lse %.1e%s%s%s\n",
               ok ? "ok" : "FAIL", c.name, f ? f : "default", c.f16 ? "f16 " : "bf16", c.fp8 ? " fp8" : "    ", d, ps,
               rel, tol, lerr, bad ? ", non-finite outputs or a bad lse" : "", left ? ", counters left set" : "",
               err != want_err ? ", wrong error word" : "");
    }
    unsetenv("SF_AUTOTUNE_FORCE");
    emu_cs.tile_ctr = nullptr;
    emu_cs.paged_err_d = nullptr;
    return fails;
}

int main(int argc, char **argv) {
    // name, b, H, Hkv, d, lq, ps, lens, fp8, f16, causal, alibi, wl, softcap, qpad, bad_seq
    const Case cases[] = {
        {"decode_gqa4_ps16", 3, 8, 2, 128, 1, 16, {37, 0, 300}, 0, false, true, false, -1, 0.f, 0, -1},
        {"decode_mha_ps1_f16", 2, 4, 4, 64, 1, 1, {70, 5}, 0, true, true, false, -1, 0.f, 0, -1},
        {"lq4_window_ps64", 2, 4, 1, 64, 4, 64, {200, 9}, 0, false, true, false, 30, 0.f, 0, -1},
        {"softcap_alibi_ps8", 2, 8, 2, 128, 1, 8, {150, 33}, 0, true, true, true, -1, 2.f, 0, -1},
        {"el_d59_ps16", 3, 8, 2, 59, 1, 16, {40, 0, 250}, 0, false, true, false, -1, 0.f, 0, -1},
        {"el_d36_lq4_softcap", 2, 4, 1, 36, 4, 1, {70, 9}, 0, true, true, false, -1, 1.5f, 0, -1},
        {"el_q_rows_unaligned", 2, 8, 2, 64, 1, 16, {90, 17}, 0, false, true, false, -1, 0.f, 3, -1},
        {"fp8_token_ps16", 2, 8, 2, 128, 1, 16, {120, 41}, 1, false, true, false, -1, 0.f, 0, -1},
        {"fp8_head_d72_el", 2, 8, 2, 72, 4, 8, {60, 13}, 2, true, true, false, -1, 0.f, 0, -1},
        {"bad_entry", 3, 8, 2, 64, 1, 16, {40, 100, 20}, 0, false, true, false, -1, 0.f, 0, 1},
    };
    sf_ctx *ctx;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) return 1;
    int failed = 0, ran = 0;
    for (const Case &c : cases) {
        if (argc > 1 && strcmp(argv[1], c.name)) continue;
        failed += run(c, ctx) > 0;
        ran++;
    }
    sf_ctx_destroy(ctx);
    if (!ran) {
        printf("no case named %s\n", argc > 1 ? argv[1] : "");
        return 1;
    }
    printf("%s: %d of %d cases without a failure\n", failed ? "FAIL" : "PASS", ran - failed, ran);
    return failed ? 1 : 0;
}
