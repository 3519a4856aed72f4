// attn_bwd_emu_main.cpp - the CUDA attention backward (src/cuda/attn/bwd.cu,
// its launcher and kernels) run by the host emulator against the reference
// backward (sf_attn_bwd, SF_BACKEND_REF) on small cases that cover its
// paths: head dims 64 / 128 and padded ones (40, 96), bf16 / f16, causal
// with lq != lk (bottom-right), a sliding window, GQA 2:1, varlen with an
// empty sequence, softcap, ALiBi, lengths off the tiles; fast and
// deterministic modes.  SF_AUTOTUNE_FORCE=attn_bwd:<name> picks the
// configuration; cases whose head dim it does not hold are skipped.
// out and lse come from the reference forward (rounded to the dtype as
// the forward writes them).  Errors: max |x - ref| / max |ref| per tensor;
// on a failure, where the bad elements lie (heads, rows, columns).
// Built and run by run_attn_bwd_emu.sh.
//   attn_bwd_emu [case|all] [fast|det|both]
#include "attn_emu_case.h"
#include "attn_bwd.h"
#include <map>
#include <set>
extern "C" sf_status emu_cuda_attn_bwd(sf_ctx *ctx, const sf_attn_bwd_problem *bp);

// "a-b, c, ..." of a set of indices
static std::string ranges(const std::set<int64_t> &s) {
    std::string r;
    char buf[64];
    for (auto it = s.begin(); it != s.end();) {
        int64_t a = *it, b = a;
        while (++it != s.end() && *it == b + 1) b = *it;
        snprintf(buf, sizeof buf, a == b ? "%s%lld" : "%s%lld-%lld", r.empty() ? "" : ",", (long long)a, (long long)b);
        r += buf;
        if (r.size() > 200) { r += ",..."; break; }
    }
    return r;
}

// where the elements with |x - ref| > tol max|ref| lie: the (batch, row)
// pairs as sequence rows, heads, columns
static void pattern(const char *name, const Buf &x, const Buf &r, double tol, const AttnCase &c, int rows_per_b) {
    double mx = 0;
    for (int64_t i = 0; i < numel(r); i++) mx = std::max(mx, (double)std::fabs(get(r, i)));
    const int64_t Hn = x.t.shape[x.t.rank - 2], d = c.d;
    std::set<int64_t> heads, cols, bs;
    std::map<int64_t, std::set<int64_t>> rows; // per batch entry
    long n = 0;
    for (int64_t i = 0; i < numel(r); i++) {
        const double e = std::fabs((double)get(x, i) - get(r, i));
        if (!(e <= tol * mx)) {
            n++;
            const int64_t row = i / (Hn * d);
            heads.insert(i / d % Hn);
            cols.insert(i % d);
            rows[rows_per_b ? row / rows_per_b : 0].insert(rows_per_b ? row % rows_per_b : row);
        }
    }
    printf("    %s: %ld bad of %lld; heads %s; cols %s\n", name, n, (long long)numel(r), ranges(heads).c_str(),
           ranges(cols).c_str());
    for (auto &kv : rows)
        printf("      %s %lld rows %s\n", rows_per_b ? "batch" : "packed", (long long)kv.first, ranges(kv.second).c_str());
}

static int run(const AttnCase &c, const char *cfg, int det) {
    AttnData a;
    attn_make(c, a);
    const bool vl = !c.lens_q.empty();
    sf_ctx *ctx;
    sf_ctx_create(&ctx, SF_DEVICE_CPU);
    a.f.backend = SF_BACKEND_REF;
    if (sf_attn_fwd(ctx, &a.f) != SF_OK) {
        printf("ref forward failed: %s\n", sf_ctx_last_error(ctx));
        return 1;
    }
    Buf dout, ge[3], gr[3];
    std::vector<int64_t> qs(a.q.t.shape, a.q.t.shape + a.q.t.rank), ks(a.k.t.shape, a.k.t.shape + a.k.t.rank);
    mk(dout, c.dt, qs);
    for (int64_t i = 0; i < numel(dout); i++) set(dout, i, nrm());
    for (int k = 0; k < 3; k++) {
        mk(ge[k], c.dt, k ? ks : qs);
        mk(gr[k], c.dt, k ? ks : qs);
        for (int64_t i = 0; i < numel(ge[k]); i++) set(ge[k], i, NAN), set(gr[k], i, NAN);
    }
    sf_attn_bwd_params q;
    sf_attn_bwd_params_init(&q);
    q.fwd = a.f;
    q.dout = dout.t;
    q.deterministic = det;
    sf_attn_bwd_params qr = q, qe = q;
    qr.dq = gr[0].t, qr.dk = gr[1].t, qr.dv = gr[2].t;
    qe.dq = ge[0].t, qe.dk = ge[1].t, qe.dv = ge[2].t;
    qr.backend = SF_BACKEND_REF;
    if (sf_attn_bwd(ctx, &qr) != SF_OK) {
        printf("ref backward failed: %s\n", sf_ctx_last_error(ctx));
        return 1;
    }
    sf_attn_bwd_problem pr;
    memset(&pr, 0, sizeof pr);
    if (sf_attn_problem_build(ctx, "emu", &qe.fwd, &pr.f) != SF_OK) {
        printf("problem: %s\n", sf_ctx_last_error(ctx));
        return 1;
    }
    pr.p = &qe;
    pr.deterministic = det;
    // poison the workspace (D, the dQ accumulator): NaN where not written
    {
        const size_t n = (size_t)(a.tq * c.H * (c.d + 2)) * 4 + 4096;
        void *w = sf_ws_get(ctx, n);
        if (w) memset(w, 0xff, n);
    }
    const sf_status s = emu_cuda_attn_bwd(ctx, &pr);
    printf("%-8s %-13s %-4s %-4s:", cfg, c.name, sf_dtype_name(c.dt), det ? "det" : "fast");
    if (s != SF_OK) {
        printf(" emu failed: %s  FAIL\n", sf_ctx_last_error(ctx));
        sf_ctx_destroy(ctx);
        return 1;
    }
    const char *names[] = {"dq", "dk", "dv"};
    const double tol = c.dt == SF_BF16 ? 2e-2 : 1e-2;
    bool bad[3], any = false;
    for (int k = 0; k < 3; k++) {
        const Err e = rel_err(ge[k], gr[k]);
        bad[k] = !(e.rel <= tol) || e.nan;
        any |= bad[k];
        printf(" %s %.1e%s%s", names[k], e.rel, e.nan ? " NAN" : "", bad[k] ? "!" : "");
    }
    printf("  %s\n", any ? "FAIL" : "PASS");
    for (int k = 0; k < 3; k++)
        if (bad[k]) pattern(names[k], ge[k], gr[k], tol, c, vl ? 0 : (k ? c.lk : c.lq));
    sf_ctx_destroy(ctx);
    return any;
}

int main(int argc, char **argv) {
    const char *cfg = getenv("SF_AUTOTUNE_FORCE") ? getenv("SF_AUTOTUNE_FORCE") + 9 : "auto";
    const char *mode = argc > 2 ? argv[2] : "both";
    const sf_dtype B = SF_BF16, F = SF_F16;
    std::vector<AttnCase> cs = {
        // name, b, lq, lk, H, Hkv, d, causal, wl, wr, softcap, alibi, lens_q, lens_k, dtype
        {"d64_gqa", 1, 150, 290, 2, 1, 64, 0, -1, -1, 0.f, 0, {}, {}, B},
        {"d64_causal", 1, 150, 290, 2, 1, 64, 1, -1, -1, 0.f, 0, {}, {}, F},
        {"d40_causal", 2, 130, 100, 1, 1, 40, 1, -1, -1, 0.f, 0, {}, {}, B},
        {"d64_window", 1, 150, 290, 2, 2, 64, 0, 60, 20, 0.f, 0, {}, {}, B},
        {"d64_softcap", 1, 150, 150, 2, 1, 64, 1, -1, -1, 30.f, 0, {}, {}, B},
        {"d64_varlen", 0, 0, 0, 2, 1, 64, 1, -1, -1, 0.f, 0, {70, 0, 130}, {90, 50, 150}, B},
        // key blocks that no query sees (dK = dV = 0), rows that see no key (lse -inf)
        {"d64_noitems", 1, 64, 400, 2, 1, 64, 1, 10, 0, 0.f, 0, {}, {}, F},
        {"d128_gqa", 1, 150, 290, 2, 1, 128, 1, -1, -1, 0.f, 0, {}, {}, B},
        {"d128_f16", 1, 200, 200, 2, 2, 128, 0, -1, -1, 0.f, 0, {}, {}, F},
        {"d96_window", 1, 150, 290, 2, 1, 96, 0, 60, 20, 0.f, 0, {}, {}, F},
        {"d128_alibi", 1, 150, 290, 2, 1, 128, 1, -1, -1, 0.f, 1, {}, {}, B},
        {"d128_lq_gt_lk", 1, 200, 100, 2, 1, 128, 1, -1, -1, 0.f, 0, {}, {}, B},
        {"d128_varlen", 0, 0, 0, 2, 1, 128, 0, -1, -1, 0.f, 0, {70, 0, 130}, {90, 50, 150}, F},
        {"d256_gqa", 1, 150, 130, 2, 1, 256, 1, -1, -1, 0.f, 0, {}, {}, B},
        {"d256_f16", 1, 100, 100, 1, 1, 256, 0, -1, -1, 0.f, 0, {}, {}, F},
        {"d192_window", 1, 130, 170, 2, 2, 192, 0, 40, 20, 0.f, 0, {}, {}, B},
        {"d256_softcap_alibi", 1, 90, 140, 2, 1, 256, 1, -1, -1, 20.f, 1, {}, {}, B},
        {"d160_varlen", 0, 0, 0, 2, 1, 160, 1, -1, -1, 0.f, 0, {70, 0, 130}, {90, 50, 150}, F},
    };
    int fails = 0, n = 0;
    for (auto &c : cs) {
        if (argc > 1 && strcmp(argv[1], "all") && c.name != std::string(argv[1])) continue;
        // the configuration's head dim: its name ends in it (fa64q32x2: 64)
        int dmax = 0;
        for (const char *p = cfg; *p; p++)
            if (*p >= '0' && *p <= '9') { dmax = atoi(p); break; }
        if (dmax && c.d > dmax) continue;
        // the ws rows take dense batches only (their TMA tiles)
        if (!strncmp(cfg, "ws", 2) && !c.lens_q.empty()) continue;
        // the 128 rows on the cases above 64 unless a case is named
        const bool named = argc > 1 && strcmp(argv[1], "all");
        if (dmax >= 128 && c.d <= 64 && !named) continue;
        if (dmax >= 256 && c.d <= 128 && !named) continue;
        for (int det = 0; det < 2; det++) {
            if ((det && !strcmp(mode, "fast")) || (!det && !strcmp(mode, "det"))) continue;
            fails += run(c, cfg, det);
            n++;
            fflush(stdout);
        }
    }
    printf("%s %s: %d of %d runs pass\n", fails ? "FAIL" : "PASS", cfg, n - fails, n);
    return fails != 0;
}
