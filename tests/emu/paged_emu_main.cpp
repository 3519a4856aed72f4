// paged_emu_main.cpp - sf_attn_paged's decode kernel (paged/decode.cuh:
// paged_attn, 16-bit and FP8 pools) run by the host emulator against a
// double-precision attention over the same keys, dequantised for FP8.
// Pages handed out in a shuffled order, page sizes 1 / 8 / 16 / 64, ragged
// lengths with 0, GQA 4 and 8, one and four new tokens (causal, bottom-right),
// d 64 / 128 and 96 (padded to 128), d 59 / 36 / 72 by element loads, splits merged by the last block of a
// group (a counter), softcap; outputs and lse poisoned first, the counters
// checked back at 0.  Built and run by run_paged_emu.sh; argument: a case
// name (default: all).
#include "common/cuda_common.h"
#include "emu_bits.h"
#include "paged/decode.cuh"
#include "paged/decode_tma.cuh"
#include "common/tmap.h"
#include <algorithm>
#include <random>
#include <string>
#include <vector>

using namespace sf_paged;
constexpr int NAR_TMA_RUN = 64; /* run_t: the TMA kernel */

struct PCase {
    const char *name;
    int b, H, Hkv, d, lq, ps, nsplit;
    bool fp8;
    float cap;
    int lens[4];
    int qspread; /* q of head h times 2^(qspread ((h mod 3) - 1)), at most 2^12 in f16: rows far from 1 in size */
};

static float e4m3(uint8_t c) { return __half2float(__ushort_as_half(emu_e4m3_to_half(c))); }
static uint8_t to_e4m3(float x) { // nearest e4m3 code (ties: either; the reference dequantises the code)
    uint8_t best = 0;
    float bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        const float v = e4m3((uint8_t)c);
        if (std::isnan(v)) continue;
        const float dd = std::fabs(v - x);
        if (dd < bd) bd = dd, best = (uint8_t)c;
    }
    return best;
}

template <typename T, int D, bool FP8> static int run_t(const PCase &c, int nar) {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> nd;
    const int b = c.b, H = c.H, Hkv = c.Hkv, d = c.d, lq = c.lq, ps = c.ps, group = H / Hkv;
    int max_pages = 1, used = 0;
    for (int i = 0; i < b; i++) {
        const int np = (c.lens[i] + ps - 1) / ps;
        max_pages = std::max(max_pages, np + 1);
        used += np;
    }
    const int num_pages = used + 3; // spare pages between the used ones
    std::vector<int> perm(num_pages);
    for (int i = 0; i < num_pages; i++) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> table((size_t)b * max_pages, 0), lens(b);
    for (int i = 0, k = 0; i < b; i++) {
        lens[i] = c.lens[i];
        for (int j = 0; j < (c.lens[i] + ps - 1) / ps; j++) table[(size_t)i * max_pages + j] = perm[k++];
    }
    const size_t pool_el = (size_t)num_pages * ps * Hkv * d, es = FP8 ? 1 : 2;
    std::vector<uint4> kb(pool_el * es / 16 + 1), vb(kb.size());
    std::vector<float> kval(pool_el), vval(pool_el), ksc((size_t)num_pages * ps * Hkv, 1.f), vsc(ksc.size(), 1.f);
    for (size_t r = 0; r < (size_t)num_pages * ps * Hkv; r++) { // one (page, row, head) row of d
        float kr[256], vr[256], ka = 0, va = 0;
        for (int e = 0; e < d; e++) kr[e] = nd(rng), vr[e] = nd(rng), ka = std::max(ka, std::fabs(kr[e])), va = std::max(va, std::fabs(vr[e]));
        if (FP8) ksc[r] = ka / 448.f, vsc[r] = va / 448.f;
        for (int e = 0; e < d; e++) {
            const size_t i = r * d + e;
            if (FP8) {
                const uint8_t kc = to_e4m3(kr[e] / ksc[r]), vc = to_e4m3(vr[e] / vsc[r]);
                ((uint8_t *)kb.data())[i] = kc, ((uint8_t *)vb.data())[i] = vc;
                kval[i] = e4m3(kc) * ksc[r], vval[i] = e4m3(vc) * vsc[r];
            } else {
                ((uint16_t *)kb.data())[i] = bits<T>(kr[e]), ((uint16_t *)vb.data())[i] = bits<T>(vr[e]);
                kval[i] = val<T>(((uint16_t *)kb.data())[i]), vval[i] = val<T>(((uint16_t *)vb.data())[i]);
            }
        }
    }
    /* rows past each sequence in its last page: NaN (what a pool may hold there; the kernels must not use them) */
    for (int i = 0; i < b; i++)
        for (int j = c.lens[i]; j % ps != 0; j++) {
            const size_t r0 = (((size_t)table[(size_t)i * max_pages + j / ps] * ps + j % ps) * Hkv) * d;
            for (size_t e = r0; e < r0 + (size_t)Hkv * d; e++) {
                if (FP8) ((uint8_t *)kb.data())[e] = 0x7f, ((uint8_t *)vb.data())[e] = 0x7f;
                else ((uint16_t *)kb.data())[e] = 0x7fff, ((uint16_t *)vb.data())[e] = 0x7fff;
            }
        }
    const size_t qn = (size_t)b * lq * H * d;
    std::vector<uint4> qb(qn * 2 / 16 + 1), ob(qb.size());
    std::vector<float> qval(qn);
    /* f16 q holds at most 2^16 */
    const int spread = std::is_same<T, __half>::value ? std::min(c.qspread, 12) : c.qspread;
    for (size_t i = 0; i < qn; i++) {
        const int h = (int)(i / d % H);
        const float x = std::ldexp(nd(rng), spread * (h % 3 - 1));
        ((uint16_t *)qb.data())[i] = bits<T>(x), qval[i] = val<T>(((uint16_t *)qb.data())[i]);
    }
    memset(ob.data(), 0xff, ob.size() * 16); // poison
    std::vector<float> lse((size_t)b * H * lq, NAN);
    const int mtiles = (group * lq + 15) / 16;
    std::vector<float> opart((size_t)c.nsplit * b * lq * H * D), lpart((size_t)c.nsplit * b * H * lq);
    std::vector<unsigned int> ctr((size_t)b * Hkv * mtiles, 0u);
    unsigned int err = 0;

    PagedParams p;
    memset(&p, 0, sizeof p);
    p.q = qb.data(), p.o = ob.data(), p.lse = lse.data(), p.kc = kb.data(), p.vc = vb.data();
    p.q_sb = (int64_t)lq * H * d, p.q_sr = (int64_t)H * d, p.q_sh = d;
    p.o_sb = p.q_sb, p.o_sr = p.q_sr, p.o_sh = p.q_sh;
    p.l_sb = (int64_t)H * lq, p.l_sh = lq, p.l_sr = 1;
    p.k_sp = p.v_sp = (int64_t)ps * Hkv * d, p.k_sr = p.v_sr = (int64_t)Hkv * d, p.k_sh = p.v_sh = d;
    p.bt = table.data(), p.bt_sb = max_pages, p.bt_sp = 1;
    p.lens = lens.data(), p.lens_s = 1;
    p.batch = b, p.nheads = H, p.nkv = Hkv, p.group = group, p.lq = lq, p.d = d;
    int shift = 0;
    while ((1 << shift) < ps) shift++;
    p.page_shift = shift, p.max_pages = max_pages, p.num_pages = num_pages;
    p.wl = -1, p.wr = 0; // causal
    const double scale = 1.0 / std::sqrt((double)d);
    p.scale_log2 = (float)(scale * 1.4426950408889634);
    p.cap2 = c.cap * 1.4426950408889634f;
    p.mtiles = mtiles;
    p.nsplit_max = c.nsplit, p.min_split = 16;
    p.o_part = opart.data(), p.lse_part = lpart.data();
    p.ctr = c.nsplit > 1 ? ctr.data() : nullptr;
    p.err = &err;
    if (FP8) p.ks = ksc.data(), p.vs = vsc.data(), p.ks_sp = p.vs_sp = (int64_t)ps * Hkv, p.ks_sr = p.vs_sr = Hkv, p.ks_sh = p.vs_sh = 1;

    typedef PagedTraits<D, FP8, NAR_WIDE> Tr;
    typedef PagedTraits<D, FP8, NAR_NARROW | NAR_FOUR> Tr4;
    const dim3 grid((unsigned)c.nsplit, (unsigned)(Hkv * mtiles), (unsigned)b);
    /* head dims that are not whole 16-byte chunks: the element-load instances */
    if (d % (FP8 ? 16 : 8) != 0) {
        if (c.cap > 0.f) emu_launch(paged_attn<T, D, FP8, MOD_CAP, true, NAR_WIDE>, grid, dim3(128), Tr::SMEM, p);
        else emu_launch(paged_attn<T, D, FP8, MOD_NONE, true, NAR_WIDE>, grid, dim3(128), Tr::SMEM, p);
    } else if (nar == (NAR_NARROW | NAR_FOUR | NAR_ACC2)) {
        if (c.cap > 0.f) emu_launch(paged_attn<T, D, FP8, MOD_CAP, false, NAR_NARROW | NAR_FOUR | NAR_ACC2>, grid, dim3(128), Tr4::SMEM, p);
        else emu_launch(paged_attn<T, D, FP8, MOD_NONE, false, NAR_NARROW | NAR_FOUR | NAR_ACC2>, grid, dim3(128), Tr4::SMEM, p);
    } else if (nar >= NAR_TMA_RUN) { /* decode_tma.cuh: pages of 16 keys or more; shapes 0, 1 (16-bit), 2 */
        CUtensorMap tmk, tmv;
        const bool maps = FP8 ? make_tmap_u8(&tmk, p.kc, d, ps, Hkv, num_pages, p.k_sr, p.k_sh, p.k_sp, 16) &&
                                    make_tmap_u8(&tmv, p.vc, d, ps, Hkv, num_pages, p.v_sr, p.v_sh, p.v_sp, 16)
                              : make_tmap(&tmk, true, p.kc, d, ps, Hkv, num_pages, p.k_sr, p.k_sh, p.k_sp, 16) &&
                                    make_tmap(&tmv, true, p.vc, d, ps, Hkv, num_pages, p.v_sr, p.v_sh, p.v_sp, 16);
        if (!maps) {
            printf("FAIL %s: tensor maps refused\n", c.name);
            return 1;
        }
        if constexpr (D == 128 || !FP8) {
            typedef TmaTraits<D, 0, FP8> T0;
            typedef TmaTraits<D, 2, FP8> T2;
            if (nar == NAR_TMA_RUN && c.cap > 0.f) emu_launch(paged_attn_tma<T, D, FP8, true>, grid, dim3(T0::NT), T0::SMEM, p, tmk, tmv);
            else if (nar == NAR_TMA_RUN) emu_launch(paged_attn_tma<T, D, FP8, false>, grid, dim3(T0::NT), T0::SMEM, p, tmk, tmv);
            else if (nar == NAR_TMA_RUN + 2) emu_launch(paged_attn_tma<T, D, FP8, false, 2>, grid, dim3(T2::NT), T2::SMEM, p, tmk, tmv);
            else if constexpr (!FP8)
                emu_launch(paged_attn_tma<T, D, false, false, 1>, grid, dim3(TmaTraits<D, 1>::NT), TmaTraits<D, 1>::SMEM, p, tmk, tmv);
        }
    } else if (nar == NAR_NARROW) { /* narrow tiles: at most 8 query rows a kv head */
        if (c.cap > 0.f) emu_launch(paged_attn<T, D, FP8, MOD_CAP, false, NAR_NARROW>, grid, dim3(128), Tr::SMEM, p);
        else emu_launch(paged_attn<T, D, FP8, MOD_NONE, false, NAR_NARROW>, grid, dim3(128), Tr::SMEM, p);
    } else if (c.cap > 0.f) {
        emu_launch(paged_attn<T, D, FP8, MOD_CAP, false, NAR_WIDE>, grid, dim3(128), Tr::SMEM, p);
    } else {
        emu_launch(paged_attn<T, D, FP8, MOD_NONE, false, NAR_WIDE>, grid, dim3(128), Tr::SMEM, p);
    }

    // reference: row (token t, head h) of sequence i over keys [0, len - lq + t]
    double maxref = 0, maxerr = 0, lerr = 0;
    int bad = 0;
    for (int i = 0; i < b; i++)
        for (int t = 0; t < lq; t++)
            for (int h = 0; h < H; h++) {
                const int kvh = h / group, len = lens[i], hi = std::min(len, len - lq + t + 1);
                std::vector<double> s(std::max(hi, 0));
                double mx = -INFINITY;
                const float *q = &qval[(((size_t)i * lq + t) * H + h) * d];
                for (int j = 0; j < hi; j++) {
                    const size_t r = (((size_t)table[(size_t)i * max_pages + j / ps] * ps + j % ps) * Hkv + kvh) * d;
                    double a = 0;
                    for (int e = 0; e < d; e++) a += (double)q[e] * kval[r + e];
                    a *= scale;
                    if (c.cap > 0.f) a = c.cap * std::tanh(a / c.cap);
                    s[j] = a, mx = std::max(mx, a);
                }
                double l = 0;
                for (int j = 0; j < hi; j++) s[j] = std::exp(s[j] - mx), l += s[j];
                const uint16_t *o = (const uint16_t *)ob.data() + (((size_t)i * lq + t) * H + h) * d;
                for (int e = 0; e < d; e++) {
                    double ref = 0;
                    for (int j = 0; j < hi; j++) {
                        const size_t r = (((size_t)table[(size_t)i * max_pages + j / ps] * ps + j % ps) * Hkv + kvh) * d;
                        ref += s[j] * vval[r + e];
                    }
                    ref = hi > 0 ? ref / l : 0.0;
                    const float got = val<T>(o[e]);
                    if (!std::isfinite(got)) bad++;
                    maxref = std::max(maxref, std::fabs(ref));
                    maxerr = std::max(maxerr, std::fabs(got - ref));
                }
                const double lref = hi > 0 ? mx + std::log(l) : -INFINITY;
                const float lg = lse[((size_t)i * H + h) * lq + t];
                if (hi > 0 && !std::isfinite(lg)) bad++; /* std::max would drop a NaN (unwritten) lse */
                else if (hi > 0) lerr = std::max(lerr, std::fabs(lg - lref) / std::max(1.0, std::fabs(lref)));
                else if (!(std::isinf(lg) && lg < 0)) bad++;
            }
    for (unsigned int w : ctr) bad += w != 0u;
    bad += err != 0u;
    const double tol = sizeof(T) == 2 && std::is_same<T, __nv_bfloat16>::value ? 2e-2 : 5e-3;
    const double rel = maxerr / std::max(maxref, 1e-30);
    const bool ok = bad == 0 && rel <= tol && lerr <= 1e-4;
    printf("%s %-24s %s%s%s d %3d: max|o - ref| / max|ref| = %.2e (tol %.0e), lse %.1e%s\n", ok ? "ok  " : "FAIL", c.name,
           std::is_same<T, __nv_bfloat16>::value ? "bf16" : "f16 ", FP8 ? " fp8" : "    ", nar == NAR_TMA_RUN ? " tma    " : nar > NAR_TMA_RUN ? " tma-cfg" : nar > NAR_NARROW ? " narrow+" : nar ? " narrow " : "        ", d, rel, tol, lerr,
           bad ? " (non-finite outputs, a bad lse, a counter left set or an error recorded)" : "");
    return ok ? 0 : 1;
}

template <typename T> static int run_d(const PCase &c, int nar) {
    const int dp = c.d <= 64 ? 64 : 128;
    if (c.fp8) return dp == 64 ? run_t<T, 64, true>(c, nar) : run_t<T, 128, true>(c, nar);
    return dp == 64 ? run_t<T, 64, false>(c, nar) : run_t<T, 128, false>(c, nar);
}

int main(int argc, char **argv) {
    static const PCase cases[] = {
        {"decode_ps16_gqa4", 3, 8, 2, 128, 1, 16, 1, false, 0.f, {37, 0, 70}},
        {"decode_split4_ps16", 2, 8, 2, 64, 1, 16, 4, false, 0.f, {100, 33}},
        {"decode_split3_ps8", 2, 16, 2, 128, 1, 8, 3, false, 0.f, {90, 5}},
        {"decode_ps1_d96", 2, 4, 1, 96, 1, 1, 2, false, 0.f, {23, 40}},
        {"lq4_ps64_gqa4", 2, 4, 1, 64, 4, 64, 2, false, 0.f, {70, 3}},
        {"softcap_split2", 2, 8, 2, 64, 1, 16, 2, false, 2.f, {48, 64}},
        /* 6 query rows a kv head (group 3, two new tokens): narrow tiles with padding rows and causal rows */
        {"g3_lq2_split2", 2, 6, 2, 64, 2, 16, 2, false, 0.f, {40, 77}},
        {"fp8_g3_lq2_softcap", 2, 6, 2, 128, 2, 8, 3, true, 1.5f, {90, 2}},
        {"fp8_decode_split2", 2, 8, 2, 128, 1, 16, 2, true, 0.f, {60, 17}},
        {"fp8_ps8_d64", 2, 8, 1, 64, 4, 8, 3, true, 0.f, {50, 0}},
        /* q rows of 2^-20, 1 and 2^20 (FP8: S in f16 on rows scaled apart) */
        {"fp8_qspread_d128", 2, 12, 3, 128, 1, 16, 2, true, 0.f, {70, 33}, 20},
        {"fp8_qspread_d64_lq4", 1, 6, 3, 64, 4, 16, 1, true, 0.f, {45}, 12},
        /* many tiles a warp: every stage of the ring reused several times */
        {"long_ring_ps16", 1, 8, 2, 128, 1, 16, 1, false, 0.f, {613}},
        /* pages of 64, splits, ragged tails: the TMA kernel's boxes at rows 16 / 32 / 48 of a page */
        {"ps64_split3_gqa8", 2, 16, 2, 128, 1, 64, 3, false, 0.f, {517, 300}},
        {"fp8_long_ring_ps16", 1, 8, 2, 128, 1, 16, 1, true, 0.f, {613}},
        {"fp8_long_split2_ps32", 2, 4, 1, 64, 1, 32, 2, true, 0.f, {517, 300}},
        /* element loads: d 59 (rows of 118 bytes), d 36 with softcap and
         * pages of 1, FP8 d 72 */
        {"el_d59_split2", 3, 8, 2, 59, 1, 16, 2, false, 0.f, {40, 0, 75}},
        {"el_d36_ps1_softcap", 2, 4, 1, 36, 1, 1, 3, false, 1.5f, {30, 57}},
        {"el_fp8_d72_lq4_ps4", 2, 8, 2, 72, 4, 4, 2, true, 0.f, {50, 13}},
    };
    const std::string only = argc > 1 ? argv[1] : "";
    int fails = 0, ran = 0;
    for (const PCase &c : cases) {
        if (!only.empty() && only != c.name) continue;
        ran++;
        fails += run_d<__nv_bfloat16>(c, NAR_WIDE);
        fails += run_d<__half>(c, NAR_WIDE);
        /* where the library takes narrow tiles (paged.cu): those too */
        if ((c.H / c.Hkv) * c.lq <= 8 && c.d % (c.fp8 ? 16 : 8) == 0) {
            fails += run_d<__nv_bfloat16>(c, NAR_NARROW);
            fails += run_d<__half>(c, NAR_NARROW);
            if (c.ps >= 16 && (!c.fp8 || c.d > 64)) { /* the TMA kernel (attn_paged:tma, tma3, tma1) */
                fails += run_d<__nv_bfloat16>(c, NAR_TMA_RUN);
                fails += run_d<__half>(c, NAR_TMA_RUN);
                if (c.cap == 0.f) {
                    if (!c.fp8) fails += run_d<__nv_bfloat16>(c, NAR_TMA_RUN + 1);
                    fails += run_d<__half>(c, NAR_TMA_RUN + 2);
                }
            }
            /* the measuring variants (attn_paged:nar4+acc2): four blocks an SM (FP8), two S accumulators */
            fails += run_d<__nv_bfloat16>(c, NAR_NARROW | NAR_FOUR | NAR_ACC2);
            fails += run_d<__half>(c, NAR_NARROW | NAR_FOUR | NAR_ACC2);
        }
    }
    if (!ran) { printf("no case named %s\n", only.c_str()); return 1; }
    printf("%d case(s), %d failure(s)\n", ran, fails);
    return fails ? 1 : 0;
}
