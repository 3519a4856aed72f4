/* paged.cu - the paged KV cache on the GPU: sf_kv_append (append.cuh) and
 * sf_attn_paged (decode.cuh: one launch of split-KV attention that checks
 * the table and merges the splits), on 16-bit or FP8 pools.
 * Nothing here reads a length or a table entry on the host, so both calls
 * can be captured in a CUDA graph and replayed with other lengths and
 * tables.
 */
#include "autotune.h"
#include "common/cuda_common.h"
#include "common/launch.cuh"
#include "paged/append.cuh"
#include "paged/counters.h"
#include "paged/decode.cuh"
#include "paged/decode_tma.cuh"
#include "common/tmap.h"

#include <atomic>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace {

using sf_paged::AppendParams;
using sf_paged::PagedParams;

int log2_exact(int64_t v) {
    int s = 0;
    while (((int64_t)1 << s) < v) s++;
    return s;
}

bool al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* 16-byte rows: base aligned, every stride but the unit one a multiple of 8 elements */
bool rows16(const sf_tensor *t, int es) {
    if (!al16(t->data)) return false;
    for (int i = 0; i + 1 < t->rank; i++)
        if ((t->stride[i] * es) % 16 != 0) return false;
    return (t->shape[t->rank - 1] * es) % 16 == 0;
}

unsigned int *err_word(sf_ctx *ctx) {
    sf_cuda_state *st = sf_cuda_st(ctx);
    return st ? st->paged_err_d : nullptr;
}

template <typename E, typename U, int EPU>
sf_status launch_append(sf_ctx *ctx, const AppendParams &p, int64_t total) {
    const int64_t blocks = (total + 255) / 256;
    const unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536);
    sf_paged::kv_append<E, U, EPU><<<grid, 256, 0, sf_cuda_stream(ctx)>>>(p);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* Splits of the longest sequence the table can hold.  With fewer b x Hkv x
 * row-tile groups than `aim` blocks an SM: as many as make them `aim`
 * blocks an SM.  Fewer, longer splits than a full occupancy wave: each
 * block pays for its Q load, its warp merge and its share of the final
 * merge once, and one wave of equal blocks leaves no SM a block behind
 * (H100, b 1 with 32k keys: 2.40 TB/s at one block an SM, 2.22 at three).
 * With more groups than SMs, where the aim gives at most one split, and
 * under two full waves (`occ` blocks an SM resident), the count (1..8, at
 * most two waves of blocks) whose blocks end closest under a whole number
 * of waves, the fewest of equals: a last wave part full leaves SMs idle or
 * at one block and the bytes in flight short (H100, b 32 x 8 heads with 4k
 * keys: 2.69 TB/s at three splits, 0.97 of two waves, 2.45 unsplit, 0.65
 * of one; FP8 pools 2.42 against 2.33).  Never more splits than
 * the table's capacity can use; one when the groups outnumber the split
 * counters (counters.h) or there are none.  A function of shapes only, so
 * graph replays with other lengths keep it. */
int64_t split_count(const PagedParams &p, int64_t sms, int aim, int occ, bool have_ctr) {
    const int64_t base = (int64_t)p.batch * p.nkv * p.mtiles;
    if (!have_ctr || base > SF_PAGED_CTRS) return 1;
    const int64_t cap_keys = (int64_t)p.max_pages << p.page_shift;
    const int64_t by_len = (cap_keys + p.min_split - 1) / p.min_split;
    const int64_t wave = (int64_t)occ * sms;
    int64_t nsm = (int64_t)aim * sms / base;
    if (nsm <= 1 && base > sms && base < 2 * wave) {
        /* the fill of the last wave, base s / (waves s wave), in 1/1024 */
        int64_t best_fill = -1;
        for (int64_t s = 1; s <= 8 && s <= by_len && (s == 1 || base * s <= 2 * wave); s++) {
            const int64_t blocks = base * s, waves = (blocks + wave - 1) / wave;
            const int64_t fill = blocks * 1024 / (waves * wave);
            if (fill > best_fill + 32) best_fill = fill, nsm = s; /* within 1/32: the fewer splits */
        }
    }
    if (nsm > by_len) nsm = by_len;
    if (nsm > 64) nsm = 64;
    return nsm < 1 ? 1 : nsm;
}

/* Blocks an SM the splits aim at (split_count): one with 16-bit pages, two
 * with FP8 pages, whose tiles cost a conversion each and want the second
 * block's warps (on the H100 the best pinned split count at every point of
 * b 1-16 with 4k-32k keys; bench/gpu_paged.py --split-sweep). */
constexpr int SPLIT_BLOCKS_SM_16 = 1, SPLIT_BLOCKS_SM_FP8 = 2;

/* SF_AUTOTUNE_FORCE=attn_paged:NAME[+NAME...], measuring aids: "s<N>" runs
 * N splits at most (1..MAX_SPLITS) where the counters allow more than one,
 * "m<K>s<N>" also splits of K keys at least (MIN_SPLIT_KEYS otherwise);
 * "nopdl" a plain launch; "wide" the 16-row tiles where narrow ones would
 * serve; "nar4" FP8 narrow tiles at four blocks an SM.  Unset or unknown:
 * the defaults. */
struct PagedForce {
    int splits;    /* 0: by the occupancy */
    int min_split; /* keys a split takes at least */
};
/* calls f on each '+'-separated name of the forced list */
template <typename F> void paged_names(F f) {
    char buf[64];
    const char *n = sf_autotune_forced_name("attn_paged", buf, sizeof buf);
    while (n && *n) {
        char one[32];
        size_t k = 0;
        while (n[k] && n[k] != '+') k++;
        const size_t m = k < sizeof one ? k : sizeof one - 1;
        memcpy(one, n, m);
        one[m] = 0;
        f(one);
        n += k + (n[k] == '+');
    }
}
PagedForce paged_force() {
    PagedForce f = {0, sf_paged::MIN_SPLIT_KEYS};
    paged_names([&](const char *n) {
        if (n[0] == 'm') { /* m<K>: splits of K keys at least (a multiple of 16) */
            const int v = atoi(n + 1);
            if (v >= 16 && v % 16 == 0) f.min_split = v;
            n++;
            while (*n >= '0' && *n <= '9') n++;
        }
        if (n[0] == 's') {
            const int v = atoi(n + 1);
            if (v >= 1 && v <= sf_paged::MAX_SPLITS) f.splits = v;
        }
    });
    return f;
}

bool paged_forced(const char *what) {
    bool hit = false;
    paged_names([&](const char *n) { hit = hit || strcmp(n, what) == 0; });
    return hit;
}
bool paged_nopdl() { return paged_forced("nopdl"); }

/* Resident blocks an SM of kernel K (threads, shared bytes), asked once;
 * contexts on other threads may ask at the same time: the same answer. */
template <auto K> sf_status blocks_per_sm(sf_ctx *ctx, int threads, size_t smem, int *per_sm) {
    static std::atomic<int> cache{0};
    int n = cache.load(std::memory_order_relaxed);
    if (n == 0) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)K, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        SF_CUDA_CHECK(ctx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, K, threads, smem));
        n = n > 0 ? n : 1;
        cache.store(n, std::memory_order_relaxed);
    }
    *per_sm = n;
    return SF_OK;
}

/* The split plan of a launch (split_count, or the pinned count) and its
 * workspace: the split partials, lse then O (none with one split). */
sf_status plan_splits(sf_ctx *ctx, PagedParams &p, int dpad, int per_sm, bool fp8, int force_splits) {
    const sf_cuda_state *st = sf_cuda_st(ctx);
    const int aim = fp8 ? SPLIT_BLOCKS_SM_FP8 : SPLIT_BLOCKS_SM_16;
    int64_t nsm = split_count(p, st && st->sm_count > 0 ? st->sm_count : 132, per_sm < aim ? per_sm : aim, per_sm,
                              st && st->tile_ctr);
    if (force_splits > 0 && st && st->tile_ctr && (int64_t)p.batch * p.nkv * p.mtiles <= SF_PAGED_CTRS)
        nsm = force_splits;
    p.nsplit_max = (int)nsm;
    p.ctr = nsm > 1 ? st->tile_ctr + 2 : nullptr;
    if (nsm > 1) {
        const size_t n_lse = ((size_t)nsm * p.batch * p.nheads * p.lq * sizeof(float) + 255) & ~(size_t)255;
        const size_t n_o = (size_t)nsm * p.batch * p.lq * p.nheads * dpad * sizeof(float);
        unsigned char *ws = (unsigned char *)sf_ws_get(ctx, n_lse + n_o);
        if (!ws) return SF_ERR_OUT_OF_MEMORY; /* the arena set the detail */
        p.lse_part = (float *)ws;
        p.o_part = (float *)(ws + n_lse);
    }
    return SF_OK;
}

/* One launch of a paged kernel over (splits, kv heads x row tiles,
 * sequences): the table checks and the merge of the splits are in it; on
 * sm_90 a programmatic dependent of the kernel ahead (it waits for that
 * kernel before reading anything, decode.cuh), so its launch overlaps that
 * kernel's end. */
template <auto K, typename... A>
sf_status launch_paged(sf_ctx *ctx, const PagedParams &p, int threads, size_t smem, const A &...maps) {
    const sf_cuda_state *st = sf_cuda_st(ctx);
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)K, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const bool pdl = st && st->sm_major >= 9 && !paged_nopdl();
    SF_CUDA_CHECK(ctx, sf_launch_ex(K, dim3((unsigned)p.nsplit_max, (unsigned)(p.nkv * p.mtiles), (unsigned)p.batch),
                                    dim3(threads), smem, sf_cuda_stream(ctx), pdl, 1u, p, maps...));
    return SF_OK;
}

template <typename T, int D, bool FP8, int MOD, bool EL, int NAR>
sf_status launch_attn(sf_ctx *ctx, PagedParams p, int dpad, int force_splits) {
    typedef sf_paged::PagedTraits<D, FP8, NAR> Tr;
    constexpr auto kern = sf_paged::paged_attn<T, D, FP8, MOD, EL, NAR>;
    int per_sm = 0;
    sf_status r = blocks_per_sm<kern>(ctx, 128, Tr::SMEM, &per_sm);
    if (r == SF_OK) r = plan_splits(ctx, p, dpad, per_sm, FP8, force_splits);
    return r == SF_OK ? launch_paged<kern>(ctx, p, 128, Tr::SMEM) : r;
}

/* The TMA kernel (decode_tma.cuh): tensor maps of the two pools as
 * (d, page row, kv head, page) with boxes of 16 rows; *took false (and
 * nothing launched) when the driver refuses them, so the caller takes the
 * cp.async kernel. */
template <typename T, int D, bool FP8, bool CAP, int CFG = 0>
sf_status launch_attn_tma(sf_ctx *ctx, PagedParams p, int dpad, int force_splits, bool *took) {
    typedef sf_paged::TmaTraits<D, CFG, FP8> Tr;
    *took = false;
    const int64_t ps = (int64_t)1 << p.page_shift;
    CUtensorMap tmk, tmv;
    const bool bf = std::is_same<T, __nv_bfloat16>::value;
    const bool maps =
        FP8 ? make_tmap_u8(&tmk, p.kc, p.d, ps, p.nkv, p.num_pages, p.k_sr, p.k_sh, p.k_sp, 16) &&
                  make_tmap_u8(&tmv, p.vc, p.d, ps, p.nkv, p.num_pages, p.v_sr, p.v_sh, p.v_sp, 16)
            : make_tmap(&tmk, bf, p.kc, p.d, ps, p.nkv, p.num_pages, p.k_sr, p.k_sh, p.k_sp, 16) &&
                  make_tmap(&tmv, bf, p.vc, p.d, ps, p.nkv, p.num_pages, p.v_sr, p.v_sh, p.v_sp, 16);
    if (!maps) return SF_OK;
    *took = true;
    constexpr auto kern = sf_paged::paged_attn_tma<T, D, FP8, CAP, CFG>;
    int per_sm = 0;
    sf_status r = blocks_per_sm<kern>(ctx, Tr::NT, Tr::SMEM, &per_sm);
    if (r == SF_OK) r = plan_splits(ctx, p, dpad, per_sm, FP8, force_splits);
    return r == SF_OK ? launch_paged<kern>(ctx, p, Tr::NT, Tr::SMEM, tmk, tmv) : r;
}

/* Score modifiers: ALiBi (softcap at run time in it), softcap, none.
 * Narrow tiles (decode.cuh) where a kv head has at most 8 query rows:
 * decode (one new token) with GQA groups up to 8, the engines' case (H100,
 * b 32 with 4k keys: bf16 2.83 TB/s against 2.79 wide, FP8 2.35 against
 * 2.28); the element-load and ALiBi instances keep 16-row tiles. */
template <typename T, int D, bool FP8, bool EL>
sf_status attn_dispatch_mod(sf_ctx *ctx, PagedParams p, int dpad) {
    const PagedForce f = paged_force();
    p.min_split = f.min_split;
    using namespace sf_paged;
    if (p.alibi) return launch_attn<T, D, FP8, MOD_ALIBI, EL, NAR_WIDE>(ctx, p, dpad, f.splits);
    if constexpr (!EL) {
        if (p.group * p.lq <= 8 && !paged_forced("wide")) {
            if constexpr (D == 128 || (D == 64 && !FP8)) {
                const sf_cuda_state *st = sf_cuda_st(ctx);
                const int cfg = paged_forced("tma") ? 0 : paged_forced("tma3") ? 1 : paged_forced("tma1") ? 2 : -1;
                if (cfg >= 0 && p.page_shift >= 4 && st && st->sm_major >= 9) {
                    bool took = false;
                    sf_status r = SF_OK;
                    if (p.cap2 > 0.f) r = launch_attn_tma<T, D, FP8, true>(ctx, p, dpad, f.splits, &took);
                    else if (cfg == 1 && D == 128 && !FP8) r = launch_attn_tma<T, 128, false, false, 1>(ctx, p, dpad, f.splits, &took);
                    else if (cfg == 2 && D == 128) r = launch_attn_tma<T, 128, FP8, false, 2>(ctx, p, dpad, f.splits, &took);
                    else r = launch_attn_tma<T, D, FP8, false>(ctx, p, dpad, f.splits, &took);
                    if (took || r != SF_OK) return r;
                }
            }
            if constexpr (D == 128) { /* measuring aids: variants of the narrow tiles */
                const int v = (FP8 && paged_forced("nar4") ? NAR_FOUR : 0) | (paged_forced("l2") ? NAR_L2 : 0) |
                              (paged_forced("acc2") ? NAR_ACC2 : 0);
                if (v && p.cap2 == 0.f) {
                    switch (v) {
                    case NAR_FOUR: return launch_attn<T, D, FP8, MOD_NONE, false, NAR_NARROW | NAR_FOUR>(ctx, p, dpad, f.splits);
                    case NAR_FOUR | NAR_ACC2:
                        return launch_attn<T, D, FP8, MOD_NONE, false, NAR_NARROW | NAR_FOUR | NAR_ACC2>(ctx, p, dpad, f.splits);
                    case NAR_ACC2: return launch_attn<T, D, FP8, MOD_NONE, false, NAR_NARROW | NAR_ACC2>(ctx, p, dpad, f.splits);
                    case NAR_L2: return launch_attn<T, D, FP8, MOD_NONE, false, NAR_NARROW | NAR_L2>(ctx, p, dpad, f.splits);
                    default: break;
                    }
                }
            }
            if (p.cap2 > 0.f) return launch_attn<T, D, FP8, MOD_CAP, false, NAR_NARROW>(ctx, p, dpad, f.splits);
            return launch_attn<T, D, FP8, MOD_NONE, false, NAR_NARROW>(ctx, p, dpad, f.splits);
        }
    }
    if (p.cap2 > 0.f) return launch_attn<T, D, FP8, MOD_CAP, EL, NAR_WIDE>(ctx, p, dpad, f.splits);
    return launch_attn<T, D, FP8, MOD_NONE, EL, NAR_WIDE>(ctx, p, dpad, f.splits);
}

template <typename T, bool FP8, bool EL>
sf_status attn_dispatch_el(sf_ctx *ctx, const PagedParams &p, int dpad) {
    if (dpad == 64) return attn_dispatch_mod<T, 64, FP8, EL>(ctx, p, dpad);
    if (dpad == 128) return attn_dispatch_mod<T, 128, FP8, EL>(ctx, p, dpad);
    return attn_dispatch_mod<T, 256, FP8, EL>(ctx, p, dpad);
}

/* el: rows by element loads (head dims that are not whole 16-byte chunks,
 * rows of q or the pools not 16-byte aligned) */
template <typename T, bool FP8>
sf_status attn_dispatch(sf_ctx *ctx, const PagedParams &p, int dpad, bool el) {
    return el ? attn_dispatch_el<T, FP8, true>(ctx, p, dpad) : attn_dispatch_el<T, FP8, false>(ctx, p, dpad);
}

template <bool FP8> size_t smem_of(int dpad) {
    return dpad == 64 ? sf_paged::PagedTraits<64, FP8>::SMEM
                      : dpad == 128 ? sf_paged::PagedTraits<128, FP8>::SMEM : sf_paged::PagedTraits<256, FP8>::SMEM;
}

} /* namespace */

extern "C" sf_status sf_cuda_kv_append(sf_ctx *ctx, const sf_paged_problem *pr) {
    const sf_kv_append_params *a = pr->a;
    if (pr->batch == 0 || pr->lq == 0 || pr->nheads_kv == 0) return SF_OK;
    const int es = (int)sf_dtype_size(a->k_cache.dtype);
    AppendParams p;
    memset(&p, 0, sizeof p);
    p.kc = a->k_cache.data, p.vc = a->v_cache.data;
    p.k = a->k.data, p.v = a->v.data;
    p.k_sp = a->k_cache.stride[0], p.k_sr = a->k_cache.stride[1], p.k_sh = a->k_cache.stride[2];
    p.v_sp = a->v_cache.stride[0], p.v_sr = a->v_cache.stride[1], p.v_sh = a->v_cache.stride[2];
    p.nk_sb = a->k.stride[0], p.nk_sr = a->k.stride[1], p.nk_sh = a->k.stride[2];
    p.nv_sb = a->v.stride[0], p.nv_sr = a->v.stride[1], p.nv_sh = a->v.stride[2];
    p.bt = (const int32_t *)a->block_table.data;
    p.bt_sb = a->block_table.stride[0], p.bt_sp = a->block_table.stride[1];
    p.lens = (const int32_t *)a->cache_seqlens.data;
    p.lens_s = a->cache_seqlens.stride[0];
    p.batch = (int)pr->batch, p.lnew = (int)pr->lq, p.nkv = (int)pr->nheads_kv;
    p.page_shift = log2_exact(pr->page_size);
    p.max_pages = (int)pr->max_pages, p.num_pages = (int)pr->num_pages;
    p.err = err_word(ctx);
    if (pr->fp8) { /* quantised on the way in (append.cuh), rotated or not */
        sf_paged::AppendRope r;
        if (pr->rope.p) {
            sf_paged::append_rope_args(&pr->rope, pr->headdim, &r);
        } else {
            memset(&r, 0, sizeof r);
            r.d = (int)pr->headdim;
        }
        sf_paged::AppendScales sc;
        memset(&sc, 0, sizeof sc);
        if (pr->scale_per_head) {
            sc.k_head = (const float *)a->k_scale.data, sc.kh_s = a->k_scale.stride[0];
            sc.v_head = (const float *)a->v_scale.data, sc.vh_s = a->v_scale.stride[0];
        } else {
            sc.k_tok = (float *)a->k_scale.data, sc.v_tok = (float *)a->v_scale.data;
            sc.k_sp = a->k_scale.stride[0], sc.k_sr = a->k_scale.stride[1], sc.k_sh = a->k_scale.stride[2];
            sc.v_sp = a->v_scale.stride[0], sc.v_sr = a->v_scale.stride[1], sc.v_sh = a->v_scale.stride[2];
        }
        const int rope = !pr->rope.p ? 0 : pr->rope.gptj ? 2 : 1;
        switch (a->k.dtype) {
        case SF_F16: return sf_paged::launch_append_fp8<__half>(ctx, p, r, sc, rope);
        case SF_BF16: return sf_paged::launch_append_fp8<__nv_bfloat16>(ctx, p, r, sc, rope);
        default: return sf_paged::launch_append_fp8<float>(ctx, p, r, sc, rope);
        }
    }
    if (pr->rope.p) { /* K rotated on the way in: its own kernel (append.cuh) */
        sf_paged::AppendRope r;
        sf_paged::append_rope_args(&pr->rope, pr->headdim, &r);
        switch (a->k_cache.dtype) {
        case SF_F16: return sf_paged::launch_append_rope<__half>(ctx, p, r, pr->rope.gptj);
        case SF_BF16: return sf_paged::launch_append_rope<__nv_bfloat16>(ctx, p, r, pr->rope.gptj);
        default: return sf_paged::launch_append_rope<float>(ctx, p, r, pr->rope.gptj);
        }
    }
    const bool vec = rows16(&a->k_cache, es) && rows16(&a->v_cache, es) && rows16(&a->k, es) && rows16(&a->v, es);
    p.units = vec ? (int)(pr->headdim * es / 16) : (int)pr->headdim;
    const int64_t total = (int64_t)p.batch * p.lnew * p.nkv * p.units;
    if (es == 2)
        return vec ? launch_append<uint16_t, uint4, 8>(ctx, p, total) : launch_append<uint16_t, uint16_t, 1>(ctx, p, total);
    return vec ? launch_append<uint32_t, uint4, 4>(ctx, p, total) : launch_append<uint32_t, uint32_t, 1>(ctx, p, total);
}

extern "C" sf_status sf_cuda_attn_paged(sf_ctx *ctx, const sf_paged_problem *pr) {
    static const char *op = "sf_attn_paged";
    const sf_attn_paged_params *a = pr->p;
    const sf_dtype dt = a->q.dtype;
    if (dt != SF_F16 && dt != SF_BF16)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: the CUDA backend takes f16/bf16 (got %s); f32 is served "
                       "by the CPU backend on host memory", op, sf_dtype_name(dt));
    const int64_t d = pr->headdim;
    const int pes = pr->fp8 ? 1 : 2; /* pool element bytes */
    /* whole 16-byte chunks in 16-byte aligned rows go by cp.async; any
     * other head dim or alignment by element loads */
    const bool el = d % (pr->fp8 ? 16 : 8) != 0 || !rows16(&a->q, 2) || !rows16(&a->k_cache, pes) ||
                    !rows16(&a->v_cache, pes);
    if (pr->batch == 0 || pr->lq == 0 || pr->nheads == 0) return SF_OK;
    const sf_cuda_state *st = sf_cuda_st(ctx);
    const int dpad = d <= 64 ? 64 : d <= 128 ? 128 : 256;
    const size_t smem = pr->fp8 ? smem_of<true>(dpad) : smem_of<false>(dpad);
    if (st && smem > st->smem_optin)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: head dim %lld needs %zu bytes of shared memory per block; "
                       "this GPU allows %zu", op, (long long)d, smem, st->smem_optin);

    PagedParams p;
    memset(&p, 0, sizeof p);
    p.q = a->q.data, p.o = a->out.data;
    p.lse = pr->has_lse ? (float *)a->lse.data : nullptr;
    p.kc = a->k_cache.data, p.vc = a->v_cache.data;
    p.q_sb = a->q.stride[0], p.q_sr = a->q.stride[1], p.q_sh = a->q.stride[2];
    p.o_sb = a->out.stride[0], p.o_sr = a->out.stride[1], p.o_sh = a->out.stride[2];
    if (p.lse) p.l_sb = a->lse.stride[0], p.l_sh = a->lse.stride[1], p.l_sr = a->lse.stride[2];
    p.k_sp = a->k_cache.stride[0], p.k_sr = a->k_cache.stride[1], p.k_sh = a->k_cache.stride[2];
    p.v_sp = a->v_cache.stride[0], p.v_sr = a->v_cache.stride[1], p.v_sh = a->v_cache.stride[2];
    p.bt = (const int32_t *)a->block_table.data;
    p.bt_sb = a->block_table.stride[0], p.bt_sp = a->block_table.stride[1];
    p.lens = (const int32_t *)a->seqlens.data;
    p.lens_s = a->seqlens.stride[0];
    p.batch = (int)pr->batch, p.nheads = (int)pr->nheads, p.nkv = (int)pr->nheads_kv;
    p.group = (int)(pr->nheads / pr->nheads_kv), p.lq = (int)pr->lq, p.d = (int)d;
    p.page_shift = log2_exact(pr->page_size);
    p.max_pages = (int)pr->max_pages, p.num_pages = (int)pr->num_pages;
    p.wl = (int)pr->wl, p.wr = (int)pr->wr;
    p.scale_log2 = pr->scale * 1.4426950408889634f;
    p.cap2 = pr->softcap * 1.4426950408889634f;
    p.mtiles = (p.group * p.lq + 15) / 16;
    p.err = err_word(ctx);
    if ((int64_t)p.nkv * p.mtiles > 65535 || p.batch > 65535)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: %d sequences x %d kv heads x %d row tiles exceed the CUDA grid",
                       op, p.batch, p.nkv, p.mtiles);

    if (pr->fp8) { /* per-head scales: the same address for every page and row */
        const sf_tensor *ks = &a->k_scale, *vs = &a->v_scale;
        p.ks = (const float *)ks->data, p.vs = (const float *)vs->data;
        if (pr->scale_per_head) {
            p.ks_sh = ks->stride[0], p.vs_sh = vs->stride[0];
        } else {
            p.ks_sp = ks->stride[0], p.ks_sr = ks->stride[1], p.ks_sh = ks->stride[2];
            p.vs_sp = vs->stride[0], p.vs_sr = vs->stride[1], p.vs_sh = vs->stride[2];
        }
    }
    p.alibi = pr->alibi, p.alibi_sb = pr->alibi_sb, p.alibi_sh = pr->alibi_sh;

    if (pr->fp8)
        return dt == SF_BF16 ? attn_dispatch<__nv_bfloat16, true>(ctx, p, dpad, el)
                             : attn_dispatch<__half, true>(ctx, p, dpad, el);
    return dt == SF_BF16 ? attn_dispatch<__nv_bfloat16, false>(ctx, p, dpad, el)
                         : attn_dispatch<__half, false>(ctx, p, dpad, el);
}
