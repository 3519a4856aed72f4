/* ssd_cpu.c - fast CPU backend of the Mamba-2 SSD forward (chunked scan);
 * the one-token decode step is in ssd_step_cpu.c.
 *
 * Forward: the chunked algorithm of DESIGN.md section 1, on f32 tiles.
 * Within a chunk of q tokens (one head, P channels, N state size) with
 * g_i = sum_{t<=i} min(dt_t A, 0) (chunk-local, cumulated in double):
 *   Y  = diag(exp(g)) C H^T                  carried state      (q x N . N x P)
 *   Y += (L o C B^T) X,  L_ij = exp(g_i - g_j) dt_j, j <= i      intra-chunk
 *   y  = (Y + D x) * silu(z)
 *   H' = exp(g_last) H + B^T diag(w) X,  w_j = exp(g_last - g_j) dt_j
 * The state is kept transposed (N x P) so that every product has a
 * contiguous P (or token) row innermost: one register-blocked kernel
 * (4 rows x 64 columns of zmm accumulators, broadcast A, streamed B)
 * serves all four products.  C B^T does not depend on the head, so it is
 * computed once per (chunk, group) and shared by the heads of a lane.
 *
 * Work units.  A lane is (segment, group, block of <= 8 heads); it walks
 * its chunks in order with the states in per-thread tiles (nothing per
 * chunk goes to memory), reading x and writing out token-major across its
 * heads.  Lanes run in parallel (OpenMP, dynamic).  When they cannot keep
 * the threads busy (list-scheduling estimate: one long sequence, few
 * heads), three phases run instead: (1) each chunk's B^T diag(w) X per
 * (chunk, head block), (2) the jump formula H_{c+1} = exp(g_last) H_c + S_c,
 * sequential over chunks, parallel over (segment, head), (3) outputs per
 * (chunk, head block) from the stored entering states.  Measured: three
 * phases cost 2-9% more than balanced lanes, and win below ~6 lanes.
 *
 * Numerics.  g is cumulated in double and every exponent is a double
 * difference rounded to f32 (a difference of two f32 cumulative sums at
 * |g| ~ 1e3 loses ~1e-4).  Every exponent is <= 0.  L is built per 16-row
 * block b0 as exp(g_i - g_b0) exp(g_b0 - g_j) for j < b0 (both <= 1; an
 * underflowed factor means a negligible term), directly on the diagonal
 * block: ~q^2/32 exps per head instead of q^2/2.  exp is a branch-free
 * polynomial (< 2.5e-7 relative) so the loops vectorise.  Denormals are
 * flushed while the workers run (ssd_fp_enter).
 *
 * Measured (f32, b 1, L 4096, P 64, N 128, G 1, chunk 256, dt in [0, 0.1],
 * A in [-8, -1]), wall time, the reference on one thread, this backend on
 * 2 cores (taskset) of an idle AVX-512 Xeon (the 2-core dev box was too
 * loaded to time; there the one-thread CPU times agree within ~10%):
 *     H 8:   ref 0.222 s   cpu 10.4-13.8 ms   16-21x  (core placement)
 *     H 24:  ref 0.711 s   cpu 33.8 ms        21x
 *     H 80:  ref 2.133 s   cpu 87.9 ms        24x
 * chunk 64: 9.1 / 27.7 / 73.0 ms, 24-29x.  One thread does 45-55 GFMA/s of
 * the model's FMAs; the product kernel alone 85 GFMA/s, ~95% of a core's
 * measured FMA peak.  The op is compute-bound on the 2NP FMAs per token
 * and head that the sequential reference also does (in double, ~3 GFMA/s),
 * plus QP/2 for the intra-chunk term: hence SSD_CPU_CHUNK.
 */
#include "ssd_cpu.h"

#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* The chunk length is the problem's (64/128/256) unless this caps it: the
 * result does not depend on it beyond rounding, and the CPU does fewer
 * flops per token with short chunks (2NP + QP/2 per head): capped at 64,
 * H 80 L 4096 ran 25% faster (24-29x the reference instead of 16-24x at
 * chunk 256).  0 = always the problem's chunk. */
#ifndef SSD_CPU_CHUNK
#define SSD_CPU_CHUNK 64
#endif
/* Heads per lane at most: bounds the per-thread x / y / state tiles. */
#ifndef SSD_MAX_HB
#define SSD_MAX_HB 8
#endif
/* The three-phase form is chosen when the best lane schedule is slower
 * than the whole work spread evenly times this (it costs a second pass
 * over x and B, and the states' round trip through memory). */
#ifndef SSD_PHASE3_SLACK
#define SSD_PHASE3_SLACK 1.1
#endif
/* The three-phase form keeps every chunk's state; past this it is not used. */
#define SSD_PHASE3_MAX_BYTES ((size_t)256 << 20)


/* ------------------------------------------------------------------ */
/* The product kernel                                                  */
/* ------------------------------------------------------------------ */

/* C[m][c] (+)= sum_k A[m*sam + k*sak] * B[k*ldb + c] for m < M (a
 * multiple of 4), c < ncols (a multiple of 16); B and C 64-byte aligned
 * with 16-float-multiple leading dimensions.  Row m is token row0 + m of
 * the chunk; causal 1: a 4-row block at token t needs only columns
 * < rup16(t + 4) (C B^T); causal 2: only k <= t + r for row r of the
 * block (L X: L's entries past the diagonal are zero, and a NaN or inf in a
 * later row of X must not reach an earlier output through 0 * NaN). */
typedef struct ssd_gemm {
    int64_t M, K, ncols;
    const float *A;
    int64_t sam, sak;
    const float *B;
    int64_t ldb;
    float *C;
    int64_t ldc;
    int causal, acc;
    int64_t row0;
} ssd_gemm;

typedef void (*ssd_gemm_fn)(const ssd_gemm *g);

#ifndef SSD_X86
static void gemm_scalar(const ssd_gemm *g) {
    for (int64_t i = 0; i < g->M; i++) {
        int64_t kend = g->K, cend = g->ncols;
        const int64_t t = g->row0 + (i & ~(int64_t)3);
        if (g->causal == 1) cend = sf_cpu_min(cend, sf_cpu_rup(t + 4, SSD_PAD));
        if (g->causal == 2) kend = sf_cpu_min(kend, g->row0 + i + 1);
        float *c = g->C + i * g->ldc;
        if (!g->acc)
            for (int64_t j = 0; j < cend; j++) c[j] = 0.0f;
        for (int64_t k = 0; k < kend; k++) {
            const float a = g->A[i * g->sam + k * g->sak];
            const float *b = g->B + k * g->ldb;
            for (int64_t j = 0; j < cend; j++) c[j] += a * b[j];
        }
    }
}
#endif

#ifdef SSD_X86
/* One 4 x (NV*W) block of C, accumulators in registers.  The loops over
 * r_ and v_ have constant bounds and unroll completely; checked in the
 * disassembly: the k loop is 4 loads, 4 broadcasts, 16 vfmadd231ps. */
#define SSD_GEMM_BLOCK(VF, W, NV, LD, ST, SET1, FMA, ZERO)                               \
    do {                                                                                 \
        VF acc_[4][NV];                                                                  \
        for (int r_ = 0; r_ < 4; r_++)                                                   \
            for (int v_ = 0; v_ < NV; v_++)                                              \
                acc_[r_][v_] = accum ? LD(Cm + (i0 + r_) * ldc + c0 + v_ * W) : ZERO(); \
        const int64_t kfull_ = kend < kdiag ? kend : kdiag;                              \
        for (int64_t k = 0; k < kfull_; k++) {                                           \
            const float *bk_ = Bm + k * ldb + c0;                                        \
            VF b_[NV];                                                                   \
            for (int v_ = 0; v_ < NV; v_++) b_[v_] = LD(bk_ + v_ * W);                   \
            for (int r_ = 0; r_ < 4; r_++) {                                             \
                const VF a_ = SET1(ar[r_][k * sak]);                                     \
                for (int v_ = 0; v_ < NV; v_++) acc_[r_][v_] = FMA(a_, b_[v_], acc_[r_][v_]); \
            }                                                                            \
        }                                                                                \
        for (int64_t k = kfull_; k < kend; k++) { /* the diagonal: k <= kdiag + r_ */    \
            const float *bk_ = Bm + k * ldb + c0;                                        \
            for (int r_ = 0; r_ < 4; r_++) {                                             \
                if (k > kdiag + r_) continue;                                            \
                const VF a_ = SET1(ar[r_][k * sak]);                                     \
                for (int v_ = 0; v_ < NV; v_++) acc_[r_][v_] = FMA(a_, LD(bk_ + v_ * W), acc_[r_][v_]); \
            }                                                                            \
        }                                                                                \
        for (int r_ = 0; r_ < 4; r_++)                                                   \
            for (int v_ = 0; v_ < NV; v_++) ST(Cm + (i0 + r_) * ldc + c0 + v_ * W, acc_[r_][v_]); \
    } while (0)

#define SSD_GEMM_DEFINE(NAME, ATTR, VF, W, NV, LD, ST, SET1, FMA, ZERO)                  \
    ATTR static void NAME(const ssd_gemm *g) {                                           \
        const float *Am = g->A, *Bm = g->B;                                              \
        float *Cm = g->C;                                                                \
        const int64_t sam = g->sam, sak = g->sak, ldb = g->ldb, ldc = g->ldc;            \
        const int accum = g->acc;                                                        \
        for (int64_t i0 = 0; i0 < g->M; i0 += 4) {                                       \
            int64_t kend = g->K, cend = g->ncols;                                        \
            if (g->causal == 1) cend = sf_cpu_min(cend, sf_cpu_rup(g->row0 + i0 + 4, SSD_PAD));       \
            if (g->causal == 2) kend = sf_cpu_min(kend, g->row0 + i0 + 4);                     \
            /* causal 2: row r reads k <= kdiag + r only (see above) */                  \
            const int64_t kdiag = g->causal == 2 ? g->row0 + i0 : INT64_MAX / 2;         \
            const float *ar[4];                                                          \
            for (int r = 0; r < 4; r++) ar[r] = Am + (i0 + r) * sam;                     \
            int64_t c0 = 0;                                                              \
            for (; c0 + NV * W <= cend; c0 += NV * W)                                    \
                SSD_GEMM_BLOCK(VF, W, NV, LD, ST, SET1, FMA, ZERO);                      \
            for (; c0 < cend; c0 += W) SSD_GEMM_BLOCK(VF, W, 1, LD, ST, SET1, FMA, ZERO); \
        }                                                                                \
    }

#define SSD_SSE_FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
SSD_GEMM_DEFINE(gemm_avx512, __attribute__((target("avx512f"))), __m512, 16, 4, _mm512_load_ps,
                _mm512_store_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps)
SSD_GEMM_DEFINE(gemm_avx2, __attribute__((target("avx2,fma"))), __m256, 8, 2, _mm256_load_ps,
                _mm256_store_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps)
SSD_GEMM_DEFINE(gemm_sse, , __m128, 4, 2, _mm_load_ps, _mm_store_ps, _mm_set1_ps, SSD_SSE_FMA,
                _mm_setzero_ps)
#endif

static ssd_gemm_fn pick_gemm(void) {
#ifdef SSD_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return gemm_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return gemm_avx2;
    return gemm_sse;
#else
    return gemm_scalar;
#endif
}

/* ------------------------------------------------------------------ */
/* Per-call plan and per-thread tiles                                  */
/* ------------------------------------------------------------------ */

typedef struct ssd_run {
    const sf_ssd_problem *pr;
    const sf_ssd_fwd_params *p;
    int64_t Q, Qp, P, Pp, N, Np, H, hpg;
    int64_t hb;           /* heads per lane                              */
    size_t thread_floats; /* per-thread tile region                      */
    float *tiles;         /* nthreads * thread_floats                    */
    ssd_gemm_fn gemm;
} ssd_run;

/* One thread's tiles.  hb heads of a lane share B, C and C B^T. */
typedef struct ssd_tiles {
    float *Xh;  /* hb x Qp x Pp  x of the lane's heads                 */
    float *Yh;  /* hb x Qp x Pp  their outputs before D, z             */
    float *Xw;  /* Qp x Pp       diag(w) x of one head                 */
    float *BT;  /* Np x Qp       B transposed (rows N.. zero)          */
    float *Ct;  /* Qp x Np       C (rows q..rup4(q) zero)              */
    float *Sc;  /* Qp x Qp       C B^T                                 */
    float *Mt;  /* 16 x Qp       one 16-row block of L o C B^T         */
    float *dt;  /* Qp            processed dt of one head              */
    float *v;   /* Qp            exp(g_b0 - g_j) dt_j                  */
    float *dv;  /* hb x Pp       D per head and channel                */
    float *row; /* 16 x Np       converted rows                        */
    float *st;  /* hb x Np x Pp  states, transposed (N x P)            */
    double *gd; /* Qp            chunk-local cumulative sum of dt A    */
} ssd_tiles;

static size_t tile_floats(int64_t Qp, int64_t Pp, int64_t Np, int64_t hb) {
    return (size_t)((2 * hb + 1) * Qp * Pp + 2 * Qp * Np + Qp * Qp + 16 * Qp + 4 * Qp +
                    hb * Pp + 16 * (Pp + Np) + hb * Np * Pp);
}

static ssd_tiles tiles_of(const ssd_run *r, int tid) {
    ssd_tiles t;
    float *f = r->tiles + (size_t)tid * r->thread_floats;
    const int64_t Qp = r->Qp, Pp = r->Pp, Np = r->Np, hb = r->hb;
    t.Xh = f; f += hb * Qp * Pp;
    t.Yh = f; f += hb * Qp * Pp;
    t.Xw = f; f += Qp * Pp;
    t.BT = f; f += Np * Qp;
    t.Ct = f; f += Qp * Np;
    t.Sc = f; f += Qp * Qp;
    t.Mt = f; f += 16 * Qp;
    t.dt = f; f += Qp;
    t.v = f; f += Qp;
    t.gd = (double *)(void *)f; f += 2 * Qp;
    t.dv = f; f += hb * Pp;
    t.row = f; f += 16 * (Pp + Np); /* also the z row of the epilogue */
    t.st = f;
    return t;
}

/* dst[n][0..16) = src[0..16)[n] for n < N. */
SSD_CLONES static void transpose16(const float *restrict src, int64_t lds, float *restrict dst,
                                   int64_t ldd, int64_t N) {
    for (int64_t n = 0; n < N; n++)
        for (int k = 0; k < 16; k++) dst[n * ldd + k] = src[k * lds + n];
}

/* B of group g, tokens [t0, t0+q) of row b, into BT (and C into Ct).
 * Zeroed where a product reads padding: BT rows N..Np (the state
 * product's A rows), BT columns q..rup16(q) (C B^T), Ct rows q..rup4(q). */
static void load_bc(const ssd_run *r, ssd_tiles *T, int64_t b, int64_t t0, int64_t q, int64_t g,
                    int need_c) {
    const sf_ssd_fwd_params *p = r->p;
    const int64_t N = r->N, Np = r->Np, Qp = r->Qp, qc = sf_cpu_rup(q, SSD_PAD);
    /* 16 rows at a time through a 16 x Np tile, so that B^T is written in
     * whole 64-byte lines (row by row it scattered 4-byte writes: 5%) */
    for (int64_t i0 = 0; i0 < qc; i0 += 16) {
        for (int64_t i = i0; i < i0 + 16; i++) {
            float *row = T->row + (i - i0) * Np;
            if (i < q)
                cvt_in(p->B.data, p->B.dtype, sf_off4(&p->B, b, t0 + i, g, 0), N, row);
            else
                memset(row, 0, (size_t)N * sizeof(float));
        }
        transpose16(T->row, Np, T->BT + i0, Qp, N);
    }
    for (int64_t n = N; n < Np; n++) memset(T->BT + n * Qp, 0, (size_t)Qp * sizeof(float));
    if (!need_c) return;
    for (int64_t i = 0; i < q; i++) {
        float *row = T->Ct + i * Np;
        cvt_in(p->C.data, p->C.dtype, sf_off4(&p->C, b, t0 + i, g, 0), N, row);
        for (int64_t n = N; n < Np; n++) row[n] = 0.0f;
    }
    for (int64_t i = q; i < sf_cpu_rup(q, 4); i++) memset(T->Ct + i * Np, 0, (size_t)Np * sizeof(float));
}

/* x of heads [h0, h1) into Xh, token-major: with the usual layout the
 * heads of a token are adjacent, so this reads one contiguous run per
 * token.  Per head it would read q rows 4*H*P bytes apart (20 KB at H 80,
 * a page per row): measured 4.5 GB/s against 17 GB/s. */
static void gather_x(const ssd_run *r, ssd_tiles *T, int64_t b, int64_t t0, int64_t q,
                     int64_t h0, int64_t h1) {
    const sf_tensor *x = &r->p->x;
    const int64_t P = r->P, Pp = r->Pp, QP = r->Qp * Pp;
    for (int64_t i = 0; i < q; i++)
        for (int64_t h = h0; h < h1; h++) {
            float *row = T->Xh + (h - h0) * QP + i * Pp;
            cvt_in(x->data, x->dtype, sf_off4(x, b, t0 + i, h, 0), P, row);
            for (int64_t c = P; c < Pp; c++) row[c] = 0.0f;
        }
}

/* Processed dt of head h, and g cumulated in double. */
static void load_dt(const ssd_run *r, ssd_tiles *T, int64_t b, int64_t t0, int64_t q, int64_t h) {
    const sf_ssd_fwd_params *p = r->p;
    const float Ah = sf_ldf(p->A.data, p->A.dtype, h * p->A.stride[0]);
    const float bias = r->pr->has_dt_bias
                           ? sf_ldf(p->dt_bias.data, p->dt_bias.dtype, h * p->dt_bias.stride[0])
                           : 0.0f;
    double g = 0.0;
    for (int64_t i = 0; i < q; i++) {
        const float d = sf_dt_process(sf_ldf(p->dt.data, p->dt.dtype, sf_off3(&p->dt, b, t0 + i, h)),
                               bias, p->dt_softplus, p->dt_min, p->dt_max);
        T->dt[i] = d;
        const float a = d * Ah;
        g += a < 0.0f ? (double)a : 0.0;
        T->gd[i] = g;
    }
    /* defined values in the lanes past q that build_l's 16-wide masked
     * diagonal block reads */
    for (int64_t i = q; i < r->Qp; i++) {
        T->dt[i] = 0.0f;
        T->gd[i] = g;
    }
}

/* Rows [b0, b0+16) of L o Sc into Mt; rows past q (up to rup4(q)) zero.
 * int indices (q <= 256): with int64_t ones GCC -fPIC warns of a bogus
 * overflow in the vectorised j loop. */
SSD_CLONES static void build_l(const ssd_tiles *T, int q, int b0, int64_t Qp) {
    const double *gd = T->gd;
    const float *dt = T->dt;
    const int b1 = q < b0 + 16 ? q : b0 + 16;
    const double gb = gd[b0];
    float *restrict v = T->v;
    for (int j = 0; j < b0; j++) v[j] = ssd_exp((float)(gb - gd[j])) * dt[j];
    for (int i = b0; i < b1; i++) {
        const double gi = gd[i];
        const float ei = ssd_exp((float)(gi - gb));
        const float *restrict s = T->Sc + i * Qp;
        float *restrict m = T->Mt + (i - b0) * Qp;
        for (int j = 0; j < b0; j++) m[j] = s[j] * ei * v[j];
        /* Diagonal block: a fixed 16 lanes with a mask, not a loop of
         * 1..16 iterations (which ran scalar: 13% of the op).  gd is
         * non-increasing in double, so gi - gd[j] <= 0 exactly for j <= i;
         * lanes j > i (exponent > 0, clamped at 88 by ssd_exp) are masked
         * to 0, which are also the zeros the causal product reads. */
        const float *restrict sd = s + b0, *restrict dd = dt + b0;
        const double *restrict gdd = gd + b0;
        float *restrict md = m + b0;
        for (int jj = 0; jj < 16; jj++) {
            const float val = sd[jj] * ssd_exp((float)(gi - gdd[jj])) * dd[jj];
            md[jj] = ssd_float(ssd_bits(val) & ((uint32_t)(jj > i - b0) - 1u));
        }
    }
    const int mq = (q + 3) & ~3;
    for (int i = b1; i < mq && i < b0 + 16; i++)
        memset(T->Mt + (i - b0) * Qp, 0, (size_t)q * sizeof(float));
}

/* Y[i] *= exp(g_i). */
SSD_CLONES static void scale_rows(float *Y, const double *gd, int64_t q, int64_t Pp) {
    for (int64_t i = 0; i < q; i++) {
        const float s = ssd_exp((float)gd[i]);
        float *restrict y = Y + i * Pp;
        for (int64_t c = 0; c < Pp; c++) y[c] *= s;
    }
}

/* Xw = diag(w) X, w_j = exp(g_last - g_j) dt_j. */
SSD_CLONES static void weight_x(ssd_tiles *T, const float *X, int64_t q, int64_t Pp) {
    const double gl = T->gd[q - 1];
    for (int64_t j = 0; j < q; j++) {
        const float w = ssd_exp((float)(gl - T->gd[j])) * T->dt[j];
        const float *restrict xr = X + j * Pp;
        float *restrict y = T->Xw + j * Pp;
        for (int64_t c = 0; c < Pp; c++) y[c] = xr[c] * w;
    }
}

SSD_CLONES static void scale_vec(float *restrict a, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) a[i] *= s;
}

/* D skip, z gate and store for heads [h0, h1), token-major (see gather_x). */
SSD_CLONES static void epilogue(const ssd_run *r, ssd_tiles *T, int64_t b, int64_t t0, int64_t q,
                                int64_t h0, int64_t h1) {
    const sf_ssd_problem *pr = r->pr;
    const sf_ssd_fwd_params *p = r->p;
    const int64_t P = r->P, Pp = r->Pp, QP = r->Qp * Pp;
    if (pr->has_D)
        for (int64_t h = h0; h < h1; h++)
            for (int64_t c = 0; c < P; c++)
                T->dv[(h - h0) * Pp + c] =
                    pr->D_per_channel ? sf_ldf(p->D.data, p->D.dtype, sf_off2(&p->D, h, c))
                                      : sf_ldf(p->D.data, p->D.dtype, h * p->D.stride[0]);
    for (int64_t i = 0; i < q; i++)
        for (int64_t h = h0; h < h1; h++) {
            float *restrict y = T->Yh + (h - h0) * QP + i * Pp;
            const float *restrict xr = T->Xh + (h - h0) * QP + i * Pp;
            const float *restrict dv = T->dv + (h - h0) * Pp;
            if (pr->has_D)
                for (int64_t c = 0; c < P; c++) y[c] += dv[c] * xr[c];
            if (pr->has_z) {
                float *restrict zr = T->row;
                cvt_in(p->z.data, p->z.dtype, sf_off4(&p->z, b, t0 + i, h, 0), P, zr);
                for (int64_t c = 0; c < P; c++) y[c] *= zr[c] / (1.0f + ssd_exp(-zr[c]));
            }
            cvt_out(p->out.data, p->out.dtype, sf_off4(&p->out, b, t0 + i, h, 0), P, y);
        }
}

/* Y = diag(exp(g)) C st^T + (L o C B^T) X for one head (st NULL: zero
 * state).  Needs load_bc with C, chunk_cb and load_dt. */
static void head_out(const ssd_run *r, ssd_tiles *T, int64_t q, const float *X, float *Y,
                     const float *st) {
    const int64_t mq = sf_cpu_rup(q, 4), Pp = r->Pp, Qp = r->Qp;
    if (st) {
        const ssd_gemm g1 = {mq, r->N, Pp, T->Ct, r->Np, 1, st, Pp, Y, Pp, 0, 0, 0};
        r->gemm(&g1);
        scale_rows(Y, T->gd, q, Pp);
    }
    /* L in 16-row blocks, each consumed at once: a 16 x Qp tile stays in
     * L1 instead of a Qp x Qp one in L2 */
    for (int64_t b0 = 0; b0 < mq; b0 += 16) {
        build_l(T, (int)q, (int)b0, Qp);
        const ssd_gemm g2 = {sf_cpu_min(16, mq - b0), q, Pp, T->Mt, Qp, 1, X, Pp, Y + b0 * Pp, Pp,
                             2, st != NULL, b0};
        r->gemm(&g2);
    }
}

/* st = exp(g_last) st + B^T diag(w) X (the contribution alone if !live). */
static void head_state(const ssd_run *r, ssd_tiles *T, int64_t q, const float *X, float *st,
                       int live) {
    const int64_t Pp = r->Pp;
    weight_x(T, X, q, Pp);
    if (live) scale_vec(st, r->N * Pp, ssd_exp((float)T->gd[q - 1]));
    const ssd_gemm g = {r->Np, q, Pp, T->BT, r->Qp, 1, T->Xw, Pp, st, Pp, 0, live, 0};
    r->gemm(&g);
}

/* initial_states[row, h] (P x N) -> st (N x P, padding zero). */
static void state_load(const ssd_run *r, float *st, int64_t row, int64_t h) {
    const sf_tensor *t = &r->p->initial_states;
    memset(st, 0, (size_t)(r->Np * r->Pp) * sizeof(float));
    for (int64_t c = 0; c < r->P; c++)
        for (int64_t n = 0; n < r->N; n++)
            st[n * r->Pp + c] = sf_ldf(t->data, t->dtype, sf_off4(t, row, h, c, n));
}

/* st (zeros when NULL) -> final_states[row, h]. */
static void state_store(const ssd_run *r, const float *st, int64_t row, int64_t h) {
    const sf_tensor *t = &r->p->final_states;
    for (int64_t c = 0; c < r->P; c++)
        for (int64_t n = 0; n < r->N; n++)
            sf_stf(t->data, t->dtype, sf_off4(t, row, h, c, n), st ? st[n * r->Pp + c] : 0.0f);
}

/* One chunk for heads [h0, h1) of group g: outputs from the entering
 * states st + (h - h0) * NP (absent: zero), and, when update, the states
 * advanced past the chunk in place. */
static void chunk_heads(const ssd_run *r, ssd_tiles *T, int64_t b, int64_t t0, int64_t q,
                        int64_t g, int64_t h0, int64_t h1, float *st, int have, int update) {
    const int64_t NP = r->Np * r->Pp, QP = r->Qp * r->Pp;
    load_bc(r, T, b, t0, q, g, 1);
    const ssd_gemm cb = {sf_cpu_rup(q, 4), r->N, sf_cpu_rup(q, SSD_PAD), T->Ct, r->Np, 1, T->BT, r->Qp,
                         T->Sc, r->Qp, 1, 0, 0};
    r->gemm(&cb);
    gather_x(r, T, b, t0, q, h0, h1);
    for (int64_t h = h0; h < h1; h++) {
        const float *X = T->Xh + (h - h0) * QP;
        float *sth = st + (h - h0) * NP;
        load_dt(r, T, b, t0, q, h);
        head_out(r, T, q, X, T->Yh + (h - h0) * QP, have ? sth : NULL);
        if (update) head_state(r, T, q, X, sth, have);
    }
    epilogue(r, T, b, t0, q, h0, h1);
}

/* A fused lane: the chunks of one segment in order, states carried in
 * the thread's tiles. */
static void run_lane(const ssd_run *r, ssd_tiles *T, const sf_ssd_segment *sg, int64_t g,
                     int64_t h0, int64_t h1) {
    const sf_ssd_problem *pr = r->pr;
    const int64_t NP = r->Np * r->Pp;
    int live = pr->has_init && sg->init >= 0;
    if (live)
        for (int64_t h = h0; h < h1; h++) state_load(r, T->st + (h - h0) * NP, sg->init, h);
    for (int64_t t0 = sg->start; t0 < sg->end; t0 += r->Q) {
        chunk_heads(r, T, sg->b, t0, sf_cpu_min(r->Q, sg->end - t0), g, h0, h1, T->st, live, 1);
        live = 1;
    }
    if (pr->has_final && sg->final >= 0)
        for (int64_t h = h0; h < h1; h++)
            state_store(r, live ? T->st + (h - h0) * NP : NULL, sg->final, h);
}

/* ------------------------------------------------------------------ */
/* Planning: lanes or three phases                                     */
/* ------------------------------------------------------------------ */

/* Relative cost per token: per head (state in, state out, L X,
 * elementwise) and per lane (C B^T). */
#define SSD_COST_HEAD(r) ((double)(2 * (r)->N * (r)->P + (r)->Q * (r)->P / 2 + 8 * (r)->P))
#define SSD_COST_LANE(r) ((double)((r)->Q * (r)->N / 2 + 2 * (r)->N))

/* Makespan of list-scheduling the lanes in order, as schedule(dynamic)
 * hands them out, for hb heads per lane, in cost units. */
static double lanes_makespan(const ssd_run *r, int64_t hb, int nt) {
    const sf_ssd_problem *pr = r->pr;
    const int64_t nhb = (r->hpg + hb - 1) / hb;
    const double ch = SSD_COST_HEAD(r), cg = SSD_COST_LANE(r);
    double load[64] = {0};
    double total = 0.0, maxl = 0.0;
    const int sim = nt <= 64 && pr->nseg * pr->ngroups * nhb <= 100000;
    for (int64_t s = 0; s < pr->nseg; s++) {
        const double len = (double)(pr->seg[s].end - pr->seg[s].start);
        for (int64_t gk = 0; gk < pr->ngroups * nhb; gk++) {
            const int64_t k = gk % nhb;
            const double w = len * ((double)sf_cpu_min(hb, r->hpg - k * hb) * ch + cg) + 1.0;
            total += w;
            if (w > maxl) maxl = w;
            if (sim) {
                int best = 0;
                for (int t = 1; t < nt; t++)
                    if (load[t] < load[best]) best = t;
                load[best] += w;
            }
        }
    }
    if (!sim) return total / nt + maxl;
    double m = 0.0;
    for (int t = 0; t < nt; t++)
        if (load[t] > m) m = load[t];
    return m;
}

typedef struct ssd_chunk {
    int64_t seg, t0, q;
} ssd_chunk;

/* The three-phase form, for when lanes cannot keep the threads busy. */
static void run_three_phase(const ssd_run *r, int nt, const ssd_chunk *ch, int64_t nch,
                            const int64_t *seg_c0, float *states, float *decay) {
    const sf_ssd_problem *pr = r->pr;
    const int64_t H = r->H, NP = r->Np * r->Pp, G = pr->ngroups;
    const int64_t nhb = (r->hpg + r->hb - 1) / r->hb;
    (void)nt;
    /* One region, three work-shared loops; each ends in a barrier. */
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        const unsigned csr = ssd_fp_enter();
        ssd_tiles T = tiles_of(r, sf_cpu_tid());

        /* 1: each chunk's own contribution S_c, per (chunk, group, head
         * block): B^T once for the block. */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t u = 0; u < nch * G * nhb; u++) {
            const int64_t ci = u / (G * nhb), g = u % (G * nhb) / nhb, k = u % nhb;
            const ssd_chunk *c = &ch[ci];
            const int64_t b = pr->seg[c->seg].b, QP = r->Qp * r->Pp;
            const int64_t h0 = g * r->hpg + k * r->hb, h1 = sf_cpu_min(h0 + r->hb, (g + 1) * r->hpg);
            load_bc(r, &T, b, c->t0, c->q, g, 0);
            gather_x(r, &T, b, c->t0, c->q, h0, h1);
            for (int64_t h = h0; h < h1; h++) {
                load_dt(r, &T, b, c->t0, c->q, h);
                head_state(r, &T, c->q, T.Xh + (h - h0) * QP, states + (ci * H + h) * NP, 0);
                decay[ci * H + h] = ssd_exp((float)T.gd[c->q - 1]);
            }
        }

        /* 2: the jump formula, in place: slot c receives the state
         * entering chunk c while H runs forward (a slot whose chunk starts
         * from zero keeps S_c; phase 3 does not read it). */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t u = 0; u < pr->nseg * H; u++) {
            const sf_ssd_segment *sg = &pr->seg[u / H];
            const int64_t h = u % H;
            float *restrict cur = T.st;
            int live = pr->has_init && sg->init >= 0;
            if (live) state_load(r, cur, sg->init, h);
            for (int64_t c = seg_c0[u / H]; c < seg_c0[u / H + 1]; c++) {
                float *restrict slot = states + (c * H + h) * NP;
                const float d = decay[c * H + h];
                if (live) {
                    for (int64_t e = 0; e < NP; e++) {
                        const float s = slot[e];
                        slot[e] = cur[e];
                        cur[e] = d * cur[e] + s;
                    }
                } else {
                    memcpy(cur, slot, (size_t)NP * sizeof(float));
                }
                live = 1;
            }
            if (pr->has_final && sg->final >= 0) state_store(r, live ? cur : NULL, sg->final, h);
        }

        /* 3: outputs per (chunk, group, head block). */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t u = 0; u < nch * G * nhb; u++) {
            const int64_t ci = u / (G * nhb), g = u % (G * nhb) / nhb, k = u % nhb;
            const ssd_chunk *c = &ch[ci];
            const sf_ssd_segment *sg = &pr->seg[c->seg];
            const int zero = c->t0 == sg->start && !(pr->has_init && sg->init >= 0);
            const int64_t h0 = g * r->hpg + k * r->hb, h1 = sf_cpu_min(h0 + r->hb, (g + 1) * r->hpg);
            chunk_heads(r, &T, sg->b, c->t0, c->q, g, h0, h1, states + (ci * H + h0) * NP, !zero,
                        0);
        }
        ssd_fp_leave(csr);
    }
}

/* ------------------------------------------------------------------ */
/* Forward entry point                                                 */
/* ------------------------------------------------------------------ */


sf_status sf_cpu_ssd_fwd(sf_ctx *ctx, const sf_ssd_problem *pr) {
    if (pr->nseg == 0) return SF_OK;
    if (pr->seg == NULL) return sf_fail(ctx, SF_ERR_INTERNAL, "ssd cpu: no host segment list");
    ssd_run r;
    memset(&r, 0, sizeof r);
    r.pr = pr;
    r.p = pr->p;
    r.Q = SSD_CPU_CHUNK > 0 && pr->chunk > SSD_CPU_CHUNK ? SSD_CPU_CHUNK : pr->chunk;
    r.Qp = sf_cpu_rup(r.Q, SSD_PAD);
    r.P = pr->headdim;
    r.Pp = sf_cpu_rup(r.P, SSD_PAD);
    r.N = pr->dstate;
    r.Np = sf_cpu_rup(r.N, SSD_PAD);
    r.H = pr->nheads;
    r.hpg = pr->heads_per_group;
    r.gemm = pick_gemm();
    int nt = ctx->nthreads > 0 ? ctx->nthreads : 1;
#ifndef _OPENMP
    nt = 1;
#endif

    /* Heads per lane: the largest (fewest C B^T recomputations) whose
     * lanes still balance over the threads. */
    const int64_t hbmax = sf_cpu_min(r.hpg, SSD_MAX_HB);
    int64_t best_hb = hbmax;
    double best = lanes_makespan(&r, hbmax, nt);
    for (int64_t hb = (hbmax + 1) / 2; nt > 1 && hbmax > 1; hb = (hb + 1) / 2) {
        const double m = lanes_makespan(&r, hb, nt);
        if (m < best * 0.98) {
            best = m;
            best_hb = hb;
        }
        if (hb == 1) break;
    }
    r.hb = best_hb;

    /* Three phases when the lanes leave threads idle: against the whole
     * work spread evenly, plus ~10% for the second pass over x and B. */
    int64_t nch = 0;
    double ideal = 0.0;
    for (int64_t s = 0; s < pr->nseg; s++) {
        const int64_t len = pr->seg[s].end - pr->seg[s].start;
        nch += (len + r.Q - 1) / r.Q;
        ideal += (double)len * ((double)r.H * SSD_COST_HEAD(&r) +
                                (double)pr->ngroups * SSD_COST_LANE(&r));
    }
    ideal = ideal * SSD_PHASE3_SLACK / nt;
    const size_t NPb = (size_t)(r.Np * r.Pp) * sizeof(float);
    const size_t phase3_bytes = (size_t)(nch * r.H) * (NPb + sizeof(float)) +
                                (size_t)nch * sizeof(ssd_chunk) +
                                (size_t)(pr->nseg + 1) * sizeof(int64_t) + 3 * 64;
    const int three = nt > 1 && best > ideal && phase3_bytes <= SSD_PHASE3_MAX_BYTES;
    if (three) { /* phase 3 units are per chunk: keep whole groups of heads */
        r.hb = hbmax;
        while (r.hb > 1 && nch * pr->ngroups * ((r.hpg + r.hb - 1) / r.hb) < 4 * nt)
            r.hb = (r.hb + 1) / 2;
    }

    /* no tiles for threads that would find no lane */
    const int64_t nlanes = pr->nseg * pr->ngroups * ((r.hpg + r.hb - 1) / r.hb);
    if (!three && nlanes < nt) nt = (int)nlanes;
    r.thread_floats = tile_floats(r.Qp, r.Pp, r.Np, r.hb);
    size_t bytes = (size_t)nt * r.thread_floats * sizeof(float) + 64;
    if (three) bytes += phase3_bytes;
    void *ws = sf_ws_get(ctx, bytes);
    if (!ws) return SF_ERR_OUT_OF_MEMORY; /* the arena set the detail */
    r.tiles = sf_cpu_align64(ws);

    if (!three) {
        const int64_t nhb = (r.hpg + r.hb - 1) / r.hb, G = pr->ngroups;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
        {
            const unsigned csr = ssd_fp_enter();
            ssd_tiles T = tiles_of(&r, sf_cpu_tid());
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (int64_t u = 0; u < nlanes; u++) {
                const int64_t s = u / (G * nhb), g = u % (G * nhb) / nhb, k = u % nhb;
                const int64_t h0 = g * r.hpg + k * r.hb, h1 = sf_cpu_min(h0 + r.hb, (g + 1) * r.hpg);
                run_lane(&r, &T, &pr->seg[s], g, h0, h1);
            }
            ssd_fp_leave(csr);
        }
        return SF_OK;
    }

    float *states = sf_cpu_align64(r.tiles + (size_t)nt * r.thread_floats);
    float *decay = states + (size_t)(nch * r.H) * (size_t)(r.Np * r.Pp);
    ssd_chunk *ch = (ssd_chunk *)(void *)sf_cpu_align64(decay + nch * r.H);
    int64_t *seg_c0 = (int64_t *)(void *)(ch + nch);
    int64_t c = 0;
    for (int64_t s = 0; s < pr->nseg; s++) {
        seg_c0[s] = c;
        for (int64_t t0 = pr->seg[s].start; t0 < pr->seg[s].end; t0 += r.Q)
            ch[c++] = (ssd_chunk){s, t0, sf_cpu_min(r.Q, pr->seg[s].end - t0)};
    }
    seg_c0[pr->nseg] = c;
    run_three_phase(&r, nt, ch, nch, seg_c0, states, decay);
    return SF_OK;
}

/* ------------------------------------------------------------------ */
/* Decode step                                                         */
/* ------------------------------------------------------------------ */
