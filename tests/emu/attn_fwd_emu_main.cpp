// attn_fwd_emu_main.cpp - the GPU-tested Hopper attention forward
// attn_fwd_wgmma<T, D> (src/cuda/attn/fwd_wgmma.cuh: wgmma ss for S = Q K^T,
// rs for O += P V, 128-byte swizzled tiles) run by the host emulator
// against the reference forward (sf_attn_fwd, SF_BACKEND_REF): a check of
// the emulator's wgmma (tests/emu/common/wgmma.cuh), since the kernel is
// known to be right.  FwdParams are filled as launch_mma.cuh does for this
// kernel (128-row tiles, grid (tiles, heads)).  The dense d 64 / 128 cases
// also run the warp-specialised attn_fwd_ws (src/cuda/attn/fwd_ws.cuh: a
// producer warp's TMA loads on mbarrier stages, two consumer warpgroups) as
// launch_ws.cuh launches it, its tensor maps from the emulated make_tmap: a
// check of the emulator's mbarriers and TMA copies.  Built and run by
// run_attn_fwd_emu.sh; argument: a case name (default: all).
#include "attn_emu_case.h"
#include "attn/fwd_wgmma.cuh"
#include "attn/fwd_ws.cuh"
#include "common/tmap.h"

#include <type_traits>

using sf_attn::FwdParams;

template <typename T, int D> static void launch(const FwdParams &p, int64_t nx) {
    emu_launch(sf_attn::attn_fwd_wgmma<T, D>, dim3((unsigned)nx, (unsigned)p.nheads), 256,
               sf_attn::WgTraits<D>::SMEM, p);
}

/* attn_fwd_ws as launch_ws.cuh launches it (BM 128; 3 stages at d 64, 2 at 128) */
template <typename T, int D, int NST> static bool launch_ws(FwdParams p) {
    using Tr = sf_attn::WsTraits<D, 128, NST>;
    p.n_mtiles = (p.lq + 127) / 128;
    const int64_t nx = (int64_t)p.batch * p.n_mtiles, hkv = p.nheads / p.heads_per_kv;
    const bool bf = std::is_same<T, __nv_bfloat16>::value;
    CUtensorMap mq, mk, mv;
    if (!make_tmap(&mq, bf, p.q, p.d, p.lq, p.nheads, p.batch, p.q_sr, p.q_sh, p.q_sb, 128) ||
        !make_tmap(&mk, bf, p.k, p.d, p.lk, hkv, p.batch, p.k_sr, p.k_sh, p.k_sb, Tr::BN) ||
        !make_tmap(&mv, bf, p.v, p.d, p.lk, hkv, p.batch, p.v_sr, p.v_sh, p.v_sb, Tr::BN))
        return false;
    emu_launch(sf_attn::attn_fwd_ws<T, D, 128, NST>, dim3((unsigned)nx, (unsigned)p.nheads), dim3(Tr::NT), Tr::SMEM, p,
               mq, mk, mv);
    return true;
}

static int run(const AttnCase &c, bool ws) {
    AttnData a, r;
    attn_make(c, a);
    const bool vl = !c.lens_q.empty();
    // the reference on a copy of the output tensors
    mk(r.out, c.dt, std::vector<int64_t>(a.out.t.shape, a.out.t.shape + a.out.t.rank));
    mk(r.lse, SF_F32, std::vector<int64_t>(a.lse.t.shape, a.lse.t.shape + a.lse.t.rank));
    sf_ctx *ctx;
    sf_ctx_create(&ctx, SF_DEVICE_CPU);
    sf_attn_fwd_params fr = a.f;
    fr.out = r.out.t;
    fr.lse = r.lse.t;
    fr.backend = SF_BACKEND_REF;
    if (sf_attn_fwd(ctx, &fr) != SF_OK) {
        printf("ref failed: %s\n", sf_ctx_last_error(ctx));
        return 1;
    }
    FwdParams p;
    memset(&p, 0, sizeof p);
    p.q = a.q.t.data, p.k = a.k.t.data, p.v = a.v.t.data, p.o = a.out.t.data;
    p.lse = (float *)a.lse.t.data;
    const sf_tensor *ts[] = {&a.q.t, &a.k.t, &a.v.t, &a.out.t};
    int64_t *st[] = {&p.q_sb, &p.k_sb, &p.v_sb, &p.o_sb};
    for (int i = 0; i < 4; i++) {
        const int o = vl ? 0 : 1;
        st[i][0] = vl ? 0 : ts[i]->stride[0];
        st[i][1] = ts[i]->stride[o];
        st[i][2] = ts[i]->stride[o + 1];
    }
    if (vl) {
        p.l_sb = 0, p.l_sh = a.lse.t.stride[0], p.l_sr = a.lse.t.stride[1];
        p.cu_q = a.cuq.t.data, p.cu_k = a.cuk.t.data;
        p.cu_q_s = p.cu_k_s = 1;
        p.batch = (int)c.lens_q.size();
        p.lq = (int)a.tq, p.lk = (int)a.tk;
    } else {
        p.l_sb = a.lse.t.stride[0], p.l_sh = a.lse.t.stride[1], p.l_sr = a.lse.t.stride[2];
        p.batch = c.b;
        p.lq = c.lq, p.lk = c.lk;
    }
    p.varlen = vl;
    p.nheads = c.H;
    p.heads_per_kv = c.H / c.Hkv;
    p.d = c.d;
    p.wl = c.wl;
    p.wr = c.causal ? 0 : c.wr;
    p.scale_log2 = (float)(1.4426950408889634 / std::sqrt((double)c.d));
    p.aligned = 1;
    // launch_mma.cuh's count_tiles(p, 128) and n_mtiles
    const int64_t nx = vl ? ((int64_t)p.lq + (int64_t)p.batch * 127) / 128 : (int64_t)p.batch * ((p.lq + 127) / 128);
    if (!vl) p.n_mtiles = (p.lq + 127) / 128;
    const bool bf = c.dt == SF_BF16;
    if (ws) {
        const bool ok = c.d == 64 ? (bf ? launch_ws<__nv_bfloat16, 64, 3>(p) : launch_ws<__half, 64, 3>(p))
                                  : (bf ? launch_ws<__nv_bfloat16, 128, 2>(p) : launch_ws<__half, 128, 2>(p));
        if (!ok) {
            printf("%-14s ws: no tensor map\n", c.name);
            return 1;
        }
    } else if (nx > 0) {
        if (c.d <= 64) bf ? launch<__nv_bfloat16, 64>(p, nx) : launch<__half, 64>(p, nx);
        else bf ? launch<__nv_bfloat16, 128>(p, nx) : launch<__half, 128>(p, nx);
    }
    const Err eo = rel_err(a.out, r.out), el = rel_err(a.lse, r.lse);
    const double tol = 1e-2;
    const bool ok = eo.rel <= tol && !eo.nan && el.rel <= 1e-3 && !el.nan;
    printf("%-14s %-5s %-4s d %3d: out %.1e%s lse %.1e%s  %s\n", c.name, ws ? "ws" : "wgmma", sf_dtype_name(c.dt), c.d, eo.rel,
           eo.nan ? " NAN" : "", el.rel, el.nan ? " NAN" : "", ok ? "PASS" : "FAIL");
    if (!ok && eo.worst >= 0) {
        const int64_t i = eo.worst;
        printf("   worst out element %lld (row %lld, head %lld, col %lld): %g vs %g\n", (long long)i,
               (long long)(i / (c.H * c.d)), (long long)(i / c.d % c.H), (long long)(i % c.d), get(a.out, i),
               get(r.out, i));
    }
    sf_ctx_destroy(ctx);
    return !ok;
}

int main(int argc, char **argv) {
    const sf_dtype B = SF_BF16, F = SF_F16;
    std::vector<AttnCase> cs = {
        // name, b, lq, lk, H, Hkv, d, causal, wl, wr, softcap, alibi, lens_q, lens_k, dtype
        {"d64_gqa", 1, 200, 333, 2, 1, 64, 0, -1, -1, 0.f, 0, {}, {}, B},
        {"d64_causal", 1, 200, 333, 2, 1, 64, 1, -1, -1, 0.f, 0, {}, {}, F},
        {"d128_gqa", 1, 200, 333, 2, 1, 128, 0, -1, -1, 0.f, 0, {}, {}, F},
        {"d128_causal", 1, 200, 333, 2, 1, 128, 1, -1, -1, 0.f, 0, {}, {}, B},
        {"d40_causal", 2, 130, 130, 1, 1, 40, 1, -1, -1, 0.f, 0, {}, {}, B},
        {"d96_window", 1, 150, 290, 2, 2, 96, 0, 60, 20, 0.f, 0, {}, {}, F},
        {"d128_varlen", 0, 0, 0, 2, 1, 128, 1, -1, -1, 0.f, 0, {70, 0, 190}, {90, 5, 200}, B},
    };
    int fails = 0, n = 0;
    for (auto &c : cs)
        if (argc < 2 || c.name == std::string(argv[1])) {
            fails += run(c, false), n++;
            /* the ws kernel's shapes: dense, d 64 or 128, no window (ws_shape_refusal) */
            if (c.lens_q.empty() && (c.d == 64 || c.d == 128) && c.wl < 0 && c.wr < 0) fails += run(c, true), n++;
        }
    printf("%s: %d of %d cases\n", fails ? "FAIL" : "PASS", n - fails, n);
    return fails != 0;
}
