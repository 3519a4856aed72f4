// ssd_bwd_emu_main.cpp - the CUDA SSD backward (src/cuda/ssd/bwd.cu and its
// stages), compiled for the host with emu_rt.h, against the reference
// backward (sf_ssd_bwd, SF_BACKEND_REF) on small cases that cover its
// paths: several rows a warp and columns a lane, groups with several heads,
// seq_idx resets inside and on chunk boundaries, cu_seqlens with empty
// sequences, empty batches and sequences, bf16; the tc_* cases for the
// tensor-core configurations.  SF_AUTOTUNE_FORCE=ssd_bwd:<name> picks the
// configuration (cpar by default).  Slow (a thread per CUDA
// thread): minutes for all cases.  Built and run by run_ssd_bwd_emu.sh.
#include "common/cuda_common.h"
#include "ssd_bwd.h"
#include <random>
#include <string>
extern "C" sf_status emu_cuda_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_problem *bp);

struct Cfg { const char *name; int b, L, H, P, G, N, Q, D, z, bias, sp, init, fin; float dmin, dmax; int varlen; std::vector<int> lens; sf_dtype dt; int only = -1; /* >= 0: that gradient alone */
             int shift = 0; /* dx, dz one element into their buffers: 16-bit pairs not 4-byte aligned */ };

static std::mt19937_64 rng(7);
static float nrm() { static std::normal_distribution<float> d; return d(rng); }
static float uni(float a, float b) { return std::uniform_real_distribution<float>(a, b)(rng); }

struct Buf { std::vector<unsigned char> d; sf_tensor t{}; };
static void mk(Buf &B, sf_dtype dt, std::vector<int64_t> sh) {
    int64_t n = 1; for (auto v : sh) n *= v;
    B.d.assign((size_t)(n + 1) * sf_dtype_size(dt), 0);
    B.t = sf_tensor_contiguous(B.d.data(), dt, SF_DEVICE_CPU, (int)sh.size(), sh.data());
}
static int64_t numel(const Buf &B) { return sf_tensor_numel(&B.t); }
static void set(Buf &B, int64_t i, float v) { sf_stf(B.t.data, B.t.dtype, i, v); }
static float get(const Buf &B, int64_t i) { return sf_ldf(B.t.data, B.t.dtype, i); }

static int run(const Cfg &c, const char *cfgname) {
    const int64_t b = c.b, L = c.L, H = c.H, P = c.P, G = c.G, N = c.N;
    const int64_t ns = c.varlen == 2 ? (int64_t)c.lens.size() : b;
    Buf x, dt, A, Bm, Cm, D, z, bias, init, seq, cu, dout, dfin;
    mk(x, c.dt, {b, L, H, P}); mk(dt, c.dt, {b, L, H}); mk(A, SF_F32, {H}); mk(Bm, c.dt, {b, L, G, N}); mk(Cm, c.dt, {b, L, G, N});
    for (int64_t i = 0; i < numel(x); i++) set(x, i, nrm());
    for (int64_t i = 0; i < numel(dt); i++) set(dt, i, c.sp ? uni(-4, -1) : uni(0.005f, 0.1f));
    for (int64_t i = 0; i < H; i++) set(A, i, -uni(0.5f, 8.0f));
    for (int64_t i = 0; i < numel(Bm); i++) { set(Bm, i, 0.5f * nrm()); set(Cm, i, 0.5f * nrm()); }
    sf_ssd_bwd_params q; sf_ssd_bwd_params_init(&q);
    auto &p = q.fwd;
    p.x = x.t; p.dt = dt.t; p.A = A.t; p.B = Bm.t; p.C = Cm.t;
    if (c.D) { if (c.D == 1) mk(D, SF_F32, {H}); else mk(D, SF_F32, {H, P}); for (int64_t i = 0; i < numel(D); i++) set(D, i, nrm()); p.D = D.t; }
    if (c.z) { mk(z, c.dt, {b, L, H, P}); for (int64_t i = 0; i < numel(z); i++) set(z, i, nrm()); p.z = z.t; }
    if (c.bias) { mk(bias, SF_F32, {H}); for (int64_t i = 0; i < H; i++) set(bias, i, c.sp ? uni(-1, 0.5f) : uni(0, 0.02f)); p.dt_bias = bias.t; }
    if (c.init) { mk(init, SF_F32, {ns, H, P, N}); for (int64_t i = 0; i < numel(init); i++) set(init, i, 0.5f * nrm()); p.initial_states = init.t; }
    if (c.varlen == 1) { mk(seq, SF_I32, {b, L}); for (int64_t r = 0; r < b; r++) { int64_t pos = 0; int id = 0; for (int l : c.lens) { for (int j = 0; j < l && pos < L; j++) ((int *)seq.t.data)[r * L + pos++] = id; id++; } while (pos < L) ((int *)seq.t.data)[r * L + pos++] = id; } p.seq_idx = seq.t; }
    if (c.varlen == 2) { mk(cu, SF_I32, {ns + 1}); int acc = 0; ((int *)cu.t.data)[0] = 0; for (size_t i = 0; i < c.lens.size(); i++) { acc += c.lens[i]; ((int *)cu.t.data)[i + 1] = acc; } p.cu_seqlens = cu.t; }
    p.chunk_size = c.Q; p.dt_softplus = c.sp; p.dt_min = c.dmin; p.dt_max = c.dmax > 0 ? c.dmax : INFINITY;
    mk(dout, c.dt, {b, L, H, P}); for (int64_t i = 0; i < numel(dout); i++) set(dout, i, nrm()); q.dout = dout.t;
    if (c.fin) { mk(dfin, SF_F32, {ns, H, P, N}); for (int64_t i = 0; i < numel(dfin); i++) set(dfin, i, 0.5f * nrm()); q.dfinal_states = dfin.t; }
    // gradients: emu and ref
    const char *names[] = {"dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinit"};
    const sf_tensor *ins[] = {&p.x, &p.dt, &p.A, &p.B, &p.C, &p.D, &p.z, &p.dt_bias, &p.initial_states};
    Buf ge[9], gr[9];
    sf_ssd_bwd_params qe = q, qr = q;
    sf_tensor *te[9] = {&qe.dx, &qe.ddt, &qe.dA, &qe.dB, &qe.dC, &qe.dD, &qe.dz, &qe.ddt_bias, &qe.dinitial_states};
    sf_tensor *tr[9] = {&qr.dx, &qr.ddt, &qr.dA, &qr.dB, &qr.dC, &qr.dD, &qr.dz, &qr.ddt_bias, &qr.dinitial_states};
    for (int k = 0; k < 9; k++) {
        if (!ins[k]->data || (c.only >= 0 && k != c.only)) continue;
        std::vector<int64_t> sh(ins[k]->shape, ins[k]->shape + ins[k]->rank);
        sf_dtype gd = (k == 2 || k == 5 || k == 7 || k == 8) ? SF_F32 : ins[k]->dtype;
        mk(ge[k], gd, sh); mk(gr[k], gd, sh);
        if (c.shift && (k == 0 || k == 6)) ge[k].t.data = ge[k].d.data() + sf_dtype_size(gd);
        for (int64_t i = 0; i < numel(ge[k]); i++) { set(ge[k], i, NAN); set(gr[k], i, NAN); }
        *te[k] = ge[k].t; *tr[k] = gr[k].t;
    }
    sf_ctx *ctx; sf_ctx_create(&ctx, SF_DEVICE_CPU);
    qr.backend = SF_BACKEND_REF;
    if (sf_ssd_bwd(ctx, &qr) != SF_OK) { printf("ref failed: %s\n", sf_ctx_last_error(ctx)); return 1; }
    // the emu call: validated problem as the front end makes it
    sf_ssd_fwd_params fp = qe.fwd; fp.out = qe.dout; fp.final_states = qe.dfinal_states;
    sf_ssd_bwd_problem bp; memset(&bp, 0, sizeof bp); bp.p = &qe;
    if (sf_ssd_validate(ctx, &fp, "emu", "dout", "dfinal_states", 0, &bp.f) != SF_OK) { printf("validate: %s\n", sf_ctx_last_error(ctx)); return 1; }
    sf_status s = emu_cuda_ssd_bwd(ctx, &bp);
    if (s != SF_OK) { printf("emu failed: %s\n", sf_ctx_last_error(ctx)); return 1; }
    int bad = 0;
    printf("%-12s %-5s %-4s:", c.name, cfgname, sf_dtype_name(c.dt));
    for (int k = 0; k < 9; k++) {
        if (!ins[k]->data || (c.only >= 0 && k != c.only)) continue;
        double num = 0, den = 0; long nan = 0;
        for (int64_t i = 0; i < numel(ge[k]); i++) {
            double e = get(ge[k], i), r = get(gr[k], i);
            if (std::isnan(e)) { nan++; continue; }
            num += (e - r) * (e - r); den += r * r;
        }
        double err = den > 0 ? sqrt(num / den) : sqrt(num);
        double tol = c.dt == SF_F32 ? 1e-4 : 1e-2;
        bool ok = err <= tol && nan == 0;
        bad |= !ok;
        printf(" %s %.1e%s%s", names[k], err, nan ? " NAN" : "", ok ? "" : "!");
    }
    printf("  %s\n", bad ? "FAIL" : "ok");
    sf_ctx_destroy(ctx);
    return bad;
}

int main(int argc, char **argv) {
    const char *cfgname = getenv("SF_AUTOTUNE_FORCE") ? getenv("SF_AUTOTUNE_FORCE") + 8 : "cpar";
    std::vector<Cfg> cs = {
        {"all_opts", 2, 140, 2, 8, 1, 16, 64, 2, 1, 1, 1, 1, 1, 0.001f, 0.3f, 0, {}, SF_F32},
        {"seq_idx", 2, 140, 2, 8, 2, 16, 64, 1, 0, 0, 0, 1, 1, 0.0f, 0.0f, 1, {30, 34, 36}, SF_F32},
        {"cu_seqlens", 1, 140, 2, 8, 1, 8, 64, 1, 1, 1, 1, 1, 1, 0.0f, 0.0f, 2, {70, 0, 1, 69}, SF_F32},
        {"odd", 1, 77, 3, 20, 3, 40, 64, 2, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_F32},
        {"emptyL", 2, 0, 2, 8, 1, 16, 64, 1, 0, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_F32},
        {"emptyb", 0, 10, 2, 8, 1, 16, 64, 1, 0, 1, 1, 0, 1, 0.0f, 0.0f, 0, {}, SF_F32},
        {"all_bf16", 1, 100, 2, 8, 1, 16, 64, 2, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_BF16},
        // the tensor-core configurations (16-bit, P and N multiples of 16,
        // chunk a multiple of 64, no varlen): groups of 2, 5 and 1 head (a
        // CTA's heads the whole group), partial last chunks and blocks
        {"tc_g2", 1, 150, 4, 16, 2, 16, 64, 2, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_BF16},
        {"tc_g1", 1, 200, 5, 16, 1, 32, 128, 1, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_F16},
        {"tc_geqh", 2, 70, 2, 32, 2, 16, 64, 2, 0, 1, 1, 0, 1, 0.0f, 0.0f, 0, {}, SF_BF16},
        {"tc_nofin", 1, 129, 3, 16, 1, 16, 128, 0, 1, 0, 0, 1, 0, 0.0f, 0.0f, 0, {}, SF_BF16},
        // 18 heads a group: CTAs of 9 heads, two partial rows of dB / dC a group
        {"tc_hk", 1, 150, 18, 16, 1, 16, 64, 2, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_BF16},
        // one gradient asked: dB alone, dC alone, dx alone (no group stage)
        {"tc_onlyB", 1, 150, 4, 16, 2, 16, 64, 1, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_BF16, 3},
        {"tc_onlyC", 1, 150, 4, 16, 2, 16, 64, 1, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_BF16, 4},
        {"tc_onlyx", 1, 150, 4, 16, 1, 16, 64, 1, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_BF16, 0},
        // dx, dz at an odd element offset: their channel pairs stored one by one
        {"tc_shift", 1, 150, 4, 16, 2, 16, 64, 2, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_BF16, -1, 1},
        // the 2.7B layer's tiling (P 64, N 128, chunk 256) and P 128 (slow)
        {"tc_big", 1, 300, 2, 64, 1, 128, 256, 1, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_BF16},
        {"tc_wide", 1, 140, 2, 128, 1, 64, 128, 2, 1, 1, 1, 1, 1, 0.0f, 0.0f, 0, {}, SF_F16},
    };
    int fails = 0;
    for (auto &c : cs) if (argc < 2 || c.name == std::string(argv[1])) fails += run(c, cfgname);
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails != 0;
}
