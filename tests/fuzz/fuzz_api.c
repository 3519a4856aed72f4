/* fuzz_api.c - libFuzzer harness over the public C API, on the CPU (the
 * reference and CPU backends).
 *
 * The input bytes choose an op, a backend, a handful of shape variables and,
 * per tensor of the op, whether it is present, its dtype, rank, extents
 * (mostly the op's shape variables, so that consistent and nearly consistent
 * problems are common; sometimes 0, -1, 2^31 or 2^62), its strides
 * (contiguous, padded, zero or arbitrary), its device, and the contents of
 * index tensors (cu_seqlens, seq_idx, state_idx); then the op's integers,
 * flags and floats over their whole range.  Every tensor gets a buffer of
 * exactly the bytes its descriptor spans, so AddressSanitizer sees any read
 * or write the library makes outside a tensor; descriptors spanning more
 * than SPAN_CAP bytes are still validated by the descriptor helpers but the
 * op is not called (the library cannot know how large a caller's buffer
 * is).  A crash, a sanitizer report, an exit or a hang is a bug; any status
 * the library returns is fine.
 *
 * Built by -DSF_FUZZ=ON with clang (tests/run_all.sh runs it for a bounded
 * time over the seed corpus that `fuzz_api -write_seeds=DIR` derives from the
 * case table, tests/cases.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "seqfuse.h"

#define SPAN_CAP (4u << 20)
#define MAXT 14

/* ---------------------------------------------------------------- input */
typedef struct rd {
    const uint8_t *p;
    size_t n, i;
} rd;
static uint8_t rd8(rd *r) { return r->i < r->n ? r->p[r->i++] : 0; }
static uint32_t rd32(rd *r) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) v = v << 8 | rd8(r);
    return v;
}

/* A shape variable: 0..16 mostly, up to 121, and the edges of the integer
 * ranges sometimes. */
static int64_t var_value(uint8_t b) {
    static const int64_t special[] = {INT32_MAX, (int64_t)INT32_MAX + 1, -1, (int64_t)1 << 40,
                                      (int64_t)1 << 62, INT32_MIN};
    return b >= 250 ? special[b - 250] : b >= 128 ? b - 128 : b % 17;
}

/* ---------------------------------------------------------------- tensors */
enum { DT_MAIN, DT_F32, DT_IDX, DT_I32, DT_U8 };
typedef struct tmpl {
    int rank;
    int dims[5];  /* >= 0: shape variable; < 0: the constant -dims[i] - 1 */
    int dclass;   /* DT_* */
    int index;    /* contents are indices (read from the input) */
} tmpl;

typedef struct tens {
    sf_tensor t;
    void *buf;
    size_t bytes;
} tens;

static size_t span_bytes(const sf_tensor *t, int *too_big) {
    if (t->rank < 0 || t->rank > SF_MAX_RANK) return 0;
    double ext = 1.0;
    for (int i = 0; i < t->rank; i++) {
        if (t->shape[i] <= 0) return 0;
        ext += (double)(t->shape[i] - 1) * (double)(t->stride[i] < 0 ? 0 : t->stride[i]);
    }
    size_t es = (size_t)t->dtype <= SF_F8E4M3 ? sf_dtype_size(t->dtype) : 4;
    if (ext * (double)es > SPAN_CAP) {
        *too_big = 1;
        return 0;
    }
    return (size_t)ext * es;
}

/* One tensor from its template and the input; returns 0 when absent. */
static void make_tensor(rd *r, const tmpl *tp, const int64_t *v, sf_dtype main_dt, tens *out, int *too_big,
                        int64_t index_hi) {
    memset(out, 0, sizeof *out);
    const uint8_t m = rd8(r);
    if (m == 0xff) return; /* absent */
    sf_tensor *t = &out->t;
    static const sf_dtype any[] = {SF_F32, SF_F16, SF_BF16, SF_I32, SF_I64, SF_U8, SF_I8, SF_F8E4M3};
    sf_dtype dt = tp->dclass == DT_MAIN ? main_dt
                  : tp->dclass == DT_F32 ? SF_F32
                  : tp->dclass == DT_I32 ? SF_I32
                  : tp->dclass == DT_U8  ? SF_U8
                                         : ((m & 0x80) ? SF_I64 : SF_I32);
    if ((m & 0x0e) == 0x0e) dt = (m & 0x10) ? (sf_dtype)(40 + (m >> 5)) : any[(m >> 5) % 8];
    int rank = tp->rank;
    if ((m & 0x30) == 0x30 && (m & 0x0e) != 0x0e) rank = (m >> 6) + tp->rank - 1; /* off by one or two */
    if (rank > SF_MAX_RANK) rank = SF_MAX_RANK;
    int64_t shape[SF_MAX_RANK] = {0};
    for (int i = 0; i < rank; i++) {
        const int d = i < tp->rank ? tp->dims[i] : 0;
        shape[i] = d >= 0 ? v[d] : (int64_t)(-d - 1);
    }
    if (m & 0x01) { /* one extent replaced */
        const uint8_t which = rd8(r), val = rd8(r);
        if (rank > 0) shape[which % rank] = var_value(val);
    }
    *t = sf_tensor_contiguous(NULL, dt, SF_DEVICE_CPU, rank, shape);
    if (t->rank < 0) { /* a product past int64: keep the extents, strides 1 */
        t->rank = rank;
        for (int i = 0; i < rank; i++) t->shape[i] = shape[i], t->stride[i] = 1;
    }
    const uint8_t sm = rd8(r);
    switch (sm & 3) {
    case 1: /* padded outer strides */
        for (int i = 0; i + 1 < rank; i++) /* saturating: a stride may be near INT64_MAX already */
            t->stride[i] = t->stride[i] > INT64_MAX - 16 ? INT64_MAX : t->stride[i] + 1 + (sm >> 4);
        break;
    case 2: /* a zero stride */
        if (rank > 0) t->stride[(sm >> 2) % rank] = 0;
        break;
    case 3: /* arbitrary */
        for (int i = 0; i < rank; i++) t->stride[i] = (int64_t)(int8_t)rd8(r);
        break;
    default: break;
    }
    if ((sm & 0xc0) == 0xc0) t->device = (int)(int8_t)rd8(r);
    const size_t bytes = span_bytes(t, too_big);
    out->bytes = bytes;
    out->buf = malloc(bytes ? bytes : 1);
    t->data = out->buf;
    if (!out->buf) {
        *too_big = 1;
        return;
    }
    /* contents: indices from the input (a monotone run ending at index_hi
     * when asked), floats from a generator seeded by the input */
    uint32_t seed = rd32(r) | 1u;
    const int64_t n = (int64_t)(bytes / (sf_dtype_size(dt) ? sf_dtype_size(dt) : 4));
    if (tp->index && (dt == SF_I32 || dt == SF_I64)) {
        const int mono = !(seed & 2);
        int64_t acc = 0;
        for (int64_t i = 0; i < n; i++) {
            const uint8_t c = rd8(r);
            int64_t x = c < 200 ? c % 7 : (int64_t)(int32_t)rd32(r);
            if (mono) x = i == 0 ? 0 : i == n - 1 ? index_hi : (acc += c % 5);
            if (dt == SF_I32) ((int32_t *)out->buf)[i] = (int32_t)x;
            else ((int64_t *)out->buf)[i] = x;
        }
    } else {
        unsigned char *b = (unsigned char *)out->buf;
        for (size_t i = 0; i < bytes; i++) {
            seed = seed * 1664525u + 1013904223u;
            b[i] = (unsigned char)(seed >> 24);
        }
        if (dt == SF_F32) /* mostly moderate values: sign, small exponent */
            for (int64_t i = 0; i < n; i++) {
                float *f = (float *)out->buf + i;
                if (!(seed & 4)) *f = (float)((int)(((unsigned char *)f)[0]) - 128) / 64.0f;
            }
    }
}

static void free_tensors(tens *t, int n) {
    for (int i = 0; i < n; i++) free(t[i].buf);
}

/* page_size * max_pages - minus, without overflow (the shape variables
 * reach 2^62): an index bound for the fuzzed length tensors */
static int64_t capacity(int64_t ps, int64_t pages, int64_t minus) {
    const int64_t lim = (int64_t)1 << 31;
    if (ps < -lim || ps > lim || pages < -lim || pages > lim || minus < -lim || minus > lim) return INT32_MAX;
    return ps * pages - minus;
}

/* ---------------------------------------------------------------- ops */
enum { OP_SSD, OP_STEP, OP_ATTN, OP_ATTN_VARLEN, OP_CONV, OP_CONV_UPD, OP_RMS, OP_MERGE, OP_COMBINE, OP_DESC,
       OP_ALLOC, OP_PAGED, OP_APPEND, OP_NORM, OP_SWIGLU, OP_ROPE, OP_GEMM_WQ, OP_QWEIGHT, OP_COUNT };

static sf_ctx *ctx_get(void) {
    static sf_ctx *ctx;
    if (!ctx) {
        if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) abort();
        sf_ctx_set_threads(ctx, 2);
    }
    return ctx;
}

static float rdf(rd *r) {
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-6f, 1e30f, INFINITY, -INFINITY, NAN};
    const uint8_t b = rd8(r);
    return b < 9 ? special[b] : (float)((int)b - 128) / 16.0f;
}

static void run_one(rd *r) {
    sf_ctx *ctx = ctx_get();
    const int op = rd8(r) % OP_COUNT;
    const uint8_t beb = rd8(r);
    const sf_backend be = beb < 120 ? SF_BACKEND_CPU : beb < 240 ? SF_BACKEND_REF : beb < 250 ? SF_BACKEND_AUTO
                                                                                       : (sf_backend)(int8_t)beb;
    static const sf_dtype mains[] = {SF_F32, SF_F16, SF_BF16};
    const sf_dtype main_dt = mains[rd8(r) % 3];
    int64_t v[10];
    for (int i = 0; i < 8; i++) v[i] = var_value(rd8(r));
    tens T[MAXT];
    memset(T, 0, sizeof T);
    int nt = 0, too_big = 0;
#define MK(...)                                                                                        \
    do {                                                                                               \
        const tmpl tp_ = __VA_ARGS__;                                                                  \
        make_tensor(r, &tp_, v, main_dt, &T[nt++], &too_big, index_hi);                                \
    } while (0)
    int64_t index_hi = 0;
    sf_status st = SF_OK;
    switch (op) {
    case OP_SSD: { /* b0 L1 H2 P3 G4 N5 ns6 ns+1 7 */
        v[7] = v[6] + 1, index_hi = v[1];
        sf_ssd_fwd_params p;
        sf_ssd_fwd_params_init(&p);
        MK({4, {0, 1, 2, 3}, DT_MAIN, 0});
        MK({3, {0, 1, 2}, DT_MAIN, 0});
        MK({1, {2}, DT_F32, 0});
        MK({4, {0, 1, 4, 5}, DT_MAIN, 0});
        MK({4, {0, 1, 4, 5}, DT_MAIN, 0});
        MK({1, {2, 3}, DT_F32, 0});
        MK({4, {0, 1, 2, 3}, DT_MAIN, 0});
        MK({1, {2}, DT_F32, 0});
        MK({4, {6, 2, 3, 5}, DT_F32, 0});
        MK({2, {0, 1}, DT_I32, 1});
        MK({1, {7}, DT_IDX, 1});
        MK({4, {0, 1, 2, 3}, DT_MAIN, 0});
        MK({4, {6, 2, 3, 5}, DT_F32, 0});
        p.x = T[0].t, p.dt = T[1].t, p.A = T[2].t, p.B = T[3].t, p.C = T[4].t, p.D = T[5].t, p.z = T[6].t;
        p.dt_bias = T[7].t, p.initial_states = T[8].t, p.seq_idx = T[9].t, p.cu_seqlens = T[10].t;
        p.out = T[11].t, p.final_states = T[12].t;
        const uint8_t cs = rd8(r);
        p.chunk_size = cs < 200 ? (int[]){64, 128, 256, 32}[cs % 4] : (int)rd32(r);
        p.dt_softplus = (int)(rd8(r) % 3);
        p.dt_min = rdf(r), p.dt_max = rdf(r);
        p.backend = be;
        if (!too_big) st = sf_ssd_fwd(ctx, &p);
        break;
    }
    case OP_STEP: { /* b0 H1 P2 G3 N4 slots5 */
        index_hi = v[5] - 1;
        sf_ssd_step_params p;
        sf_ssd_step_params_init(&p);
        MK({4, {5, 1, 2, 4}, DT_F32, 0});
        MK({3, {0, 1, 2}, DT_MAIN, 0});
        MK({2, {0, 1}, DT_MAIN, 0});
        MK({1, {1}, DT_F32, 0});
        MK({3, {0, 3, 4}, DT_MAIN, 0});
        MK({3, {0, 3, 4}, DT_MAIN, 0});
        MK({1, {1}, DT_F32, 0});
        MK({3, {0, 1, 2}, DT_MAIN, 0});
        MK({1, {1}, DT_F32, 0});
        MK({1, {0}, DT_I32, 1});
        MK({3, {0, 1, 2}, DT_MAIN, 0});
        p.state = T[0].t, p.x = T[1].t, p.dt = T[2].t, p.A = T[3].t, p.B = T[4].t, p.C = T[5].t, p.D = T[6].t;
        p.z = T[7].t, p.dt_bias = T[8].t, p.state_idx = T[9].t, p.out = T[10].t;
        p.dt_softplus = (int)(rd8(r) % 3);
        p.dt_min = rdf(r), p.dt_max = rdf(r);
        p.backend = be;
        if (!too_big) st = sf_ssd_step(ctx, &p);
        break;
    }
    case OP_ATTN:
    case OP_ATTN_VARLEN: { /* b0 Lq1 Lk2 H3 Hkv4 d5 ns6 ns+1 7 */
        v[7] = v[6] + 1;
        sf_attn_fwd_params p;
        sf_attn_fwd_params_init(&p);
        if (op == OP_ATTN) {
            MK({4, {0, 1, 3, 5}, DT_MAIN, 0});
            MK({4, {0, 2, 4, 5}, DT_MAIN, 0});
            MK({4, {0, 2, 4, 5}, DT_MAIN, 0});
            MK({4, {0, 1, 3, 5}, DT_MAIN, 0});
            MK({3, {0, 3, 1}, DT_F32, 0});
        } else {
            MK({3, {1, 3, 5}, DT_MAIN, 0});
            MK({3, {2, 4, 5}, DT_MAIN, 0});
            MK({3, {2, 4, 5}, DT_MAIN, 0});
            MK({3, {1, 3, 5}, DT_MAIN, 0});
            MK({2, {3, 1}, DT_F32, 0});
            index_hi = v[1];
            MK({1, {7}, DT_I32, 1});
            index_hi = v[2];
            MK({1, {7}, DT_I32, 1});
            p.cu_seqlens_q = T[5].t, p.cu_seqlens_k = T[6].t;
        }
        p.q = T[0].t, p.k = T[1].t, p.v = T[2].t, p.out = T[3].t, p.lse = T[4].t;
        p.softmax_scale = rdf(r);
        p.causal = (int)(rd8(r) % 3);
        p.window_left = (int)(int8_t)rd8(r), p.window_right = (int)(int8_t)rd8(r);
        /* the score modifiers last, so older inputs keep their meaning:
         * a softcap (any float, bad ones included) and ALiBi slopes (H) or
         * (b, H) */
        const uint8_t mods = rd8(r);
        if (mods & 1) p.softcap = rdf(r);
        if (mods & 2) {
            if (mods & 4) MK({2, {0, 3}, DT_F32, 0});
            else MK({1, {3}, DT_F32, 0});
            p.alibi_slopes = T[nt - 1].t;
        }
        p.backend = be;
        if (!too_big) st = sf_attn_fwd(ctx, &p);
        break;
    }
    case OP_CONV: { /* b0 L1 dim2 W3 ns4 W-1 5 ns+1 6 */
        v[5] = v[3] - 1, v[6] = v[4] + 1, index_hi = v[1];
        sf_conv1d_params p;
        sf_conv1d_params_init(&p);
        MK({3, {0, 1, 2}, DT_MAIN, 0});
        MK({2, {2, 3}, DT_MAIN, 0});
        MK({1, {2}, DT_MAIN, 0});
        MK({3, {4, 2, 5}, DT_F32, 0});
        MK({3, {4, 2, 5}, DT_F32, 0});
        MK({1, {6}, DT_IDX, 1});
        MK({3, {0, 1, 2}, DT_MAIN, 0});
        p.x = T[0].t, p.weight = T[1].t, p.bias = T[2].t, p.initial_state = T[3].t, p.final_state = T[4].t;
        p.cu_seqlens = T[5].t, p.out = T[6].t;
        p.silu = (int)(rd8(r) % 3);
        p.backend = be;
        if (!too_big) st = sf_conv1d_fwd(ctx, &p);
        break;
    }
    case OP_CONV_UPD: { /* b0 dim1 W2 slots3 W-1 4 */
        v[4] = v[2] - 1, index_hi = v[3] - 1;
        sf_conv1d_update_params p;
        sf_conv1d_update_params_init(&p);
        MK({3, {3, 1, 4}, DT_F32, 0});
        MK({2, {0, 1}, DT_MAIN, 0});
        MK({2, {1, 2}, DT_MAIN, 0});
        MK({1, {1}, DT_MAIN, 0});
        MK({1, {0}, DT_I32, 1});
        MK({2, {0, 1}, DT_MAIN, 0});
        p.conv_state = T[0].t, p.x = T[1].t, p.weight = T[2].t, p.bias = T[3].t, p.state_idx = T[4].t;
        p.out = T[5].t;
        p.silu = (int)(rd8(r) % 3);
        p.backend = be;
        if (!too_big) st = sf_conv1d_update(ctx, &p);
        break;
    }
    case OP_RMS: { /* rows0 D1 */
        sf_rmsnorm_gated_params p;
        sf_rmsnorm_gated_params_init(&p);
        MK({2, {0, 1}, DT_MAIN, 0});
        MK({2, {0, 1}, DT_MAIN, 0});
        MK({1, {1}, DT_F32, 0});
        MK({2, {0, 1}, DT_MAIN, 0});
        p.x = T[0].t, p.z = T[1].t, p.weight = T[2].t, p.out = T[3].t;
        const uint8_t g = rd8(r);
        p.group_size = g < 200 ? g % 5 : (int)rd32(r);
        p.norm_before_gate = (int)(rd8(r) % 3);
        p.eps = rdf(r);
        p.backend = be;
        if (!too_big) st = sf_rmsnorm_gated(ctx, &p);
        break;
    }
    case OP_MERGE: { /* b0 L1 H2 d3 */
        MK({4, {0, 1, 2, 3}, DT_MAIN, 0});
        MK({3, {0, 2, 1}, DT_F32, 0});
        MK({4, {0, 1, 2, 3}, DT_MAIN, 0});
        MK({3, {0, 2, 1}, DT_F32, 0});
        if (!too_big) st = sf_attn_merge(ctx, T[0].t, T[1].t, T[2].t, T[3].t);
        break;
    }
    case OP_COMBINE: { /* R0 b1 H2 P3 N4 */
        MK({5, {0, 1, 2, 3, 4}, DT_F32, 0});
        MK({3, {0, 1, 2}, DT_F32, 0});
        MK({4, {1, 2, 3, 4}, DT_F32, 0});
        const int rank = (int)(int8_t)rd8(r);
        if (!too_big) st = sf_ssd_cp_combine(ctx, T[0].t, T[1].t, rank, T[2].t);
        break;
    }
    case OP_PAGED: { /* b0 Lq1 H2 Hkv3 d4 pages5 page_size6 max_pages7 */
        sf_attn_paged_params p;
        sf_attn_paged_params_init(&p);
        MK({4, {0, 1, 2, 4}, DT_MAIN, 0});
        MK({4, {5, 6, 3, 4}, DT_MAIN, 0});
        MK({4, {5, 6, 3, 4}, DT_MAIN, 0});
        index_hi = v[5] - 1; /* a run of pages 0 .. pages - 1 */
        MK({2, {0, 7}, DT_I32, 1});
        index_hi = capacity(v[6], v[7], 0); /* a run of lengths up to the table's capacity */
        MK({1, {0}, DT_I32, 1});
        MK({4, {0, 1, 2, 4}, DT_MAIN, 0});
        MK({3, {0, 2, 1}, DT_F32, 0});
        p.q = T[0].t, p.k_cache = T[1].t, p.v_cache = T[2].t, p.block_table = T[3].t, p.seqlens = T[4].t;
        p.out = T[5].t, p.lse = T[6].t;
        p.softmax_scale = rdf(r);
        p.causal = (int)(rd8(r) % 3);
        p.window_left = (int)(int8_t)rd8(r), p.window_right = (int)(int8_t)rd8(r);
        if (rd8(r) & 1) p.softcap = rdf(r);
        p.backend = be;
        if (!too_big) st = sf_attn_paged(ctx, &p);
        break;
    }
    case OP_APPEND: { /* b0 Lnew1 Hkv2 d3 pages4 page_size5 max_pages6 npos7 d/2 8 */
        sf_kv_append_params p;
        sf_kv_append_params_init(&p);
        MK({4, {4, 5, 2, 3}, DT_MAIN, 0});
        MK({4, {4, 5, 2, 3}, DT_MAIN, 0});
        MK({4, {0, 1, 2, 3}, DT_MAIN, 0});
        MK({4, {0, 1, 2, 3}, DT_MAIN, 0});
        index_hi = v[4] - 1;
        MK({2, {0, 6}, DT_I32, 1});
        index_hi = capacity(v[5], v[6], v[1]);
        MK({1, {0}, DT_I32, 1});
        p.k_cache = T[0].t, p.v_cache = T[1].t, p.k = T[2].t, p.v = T[3].t, p.block_table = T[4].t;
        p.cache_seqlens = T[5].t;
        p.backend = be;
        /* rope, when the input says so: cos and sin of npos7 rows by d3 / 2
         * pairs, the q and positions the append must refuse, every scalar
         * over its range */
        sf_rope_params rp;
        if (rd8(r) & 1) {
            sf_rope_params_init(&rp);
            v[8] = v[3] / 2;
            MK({2, {7, 8}, DT_F32, 0});
            MK({2, {7, 8}, DT_F32, 0});
            index_hi = v[7] > 0 ? v[7] - 1 : 0;
            MK({1, {1}, DT_IDX, 1});
            MK({3, {1, 2, 3}, DT_MAIN, 0});
            rp.cos = T[6].t, rp.sin = T[7].t, rp.positions = T[8].t, rp.q = T[9].t;
            rp.rotary_dim = (int)(int8_t)rd8(r);
            rp.style = (sf_rope_style)(int8_t)rd8(r);
            rp.theta = rdf(r);
            rp.scaling = (sf_rope_scaling)(int8_t)rd8(r);
            rp.factor = rdf(r), rp.low_freq_factor = rdf(r), rp.high_freq_factor = rdf(r);
            rp.original_max_position = (int)(int16_t)rd32(r);
            p.rope = &rp;
        }
        if (!too_big) st = sf_kv_append(ctx, &p);
        break;
    }
    case OP_NORM: { /* rows0 D1: the four norm entry points, residual and h optional */
        sf_norm_params p;
        sf_norm_params_init(&p);
        MK({2, {0, 1}, DT_MAIN, 0});
        MK({2, {0, 1}, DT_MAIN, 0});
        MK({1, {1}, DT_F32, 0});
        MK({1, {1}, DT_F32, 0});
        MK({2, {0, 1}, DT_MAIN, 0});
        MK({2, {0, 1}, DT_MAIN, 0});
        p.x = T[0].t, p.residual = T[1].t, p.weight = T[2].t, p.bias = T[3].t, p.out = T[4].t;
        p.residual_out = rd8(r) & 1 ? T[1].t : T[5].t; /* in place, or a tensor of its own */
        p.eps = rdf(r);
        p.backend = be;
        const uint8_t which = rd8(r) % 4;
        if (!too_big)
            st = which == 0 ? sf_add_rmsnorm(ctx, &p) : which == 1 ? sf_add_layernorm(ctx, &p)
                 : which == 2 ? sf_rmsnorm(ctx, &p) : sf_layernorm(ctx, &p);
        break;
    }
    case OP_SWIGLU: { /* rows0 n1 2n2 */
        v[2] = capacity(v[1], 2, 0);
        sf_swiglu_params p;
        sf_swiglu_params_init(&p);
        p.layout = (sf_swiglu_layout)(int8_t)rd8(r);
        MK({2, {0, p.layout == SF_SWIGLU_SEPARATE ? 1 : 2}, DT_MAIN, 0});
        MK({2, {0, 1}, DT_MAIN, 0});
        MK({2, {0, 1}, DT_MAIN, 0});
        p.gate = T[0].t, p.up = T[1].t, p.out = T[2].t;
        p.backend = be;
        if (!too_big) st = sf_swiglu(ctx, &p);
        break;
    }
    case OP_ROPE: { /* T0 H1 Hkv2 d3 npos4 R/2 5 */
        sf_rope_params p;
        sf_rope_params_init(&p);
        MK({3, {0, 1, 3}, DT_MAIN, 0});
        MK({3, {0, 2, 3}, DT_MAIN, 0});
        MK({3, {0, 1, 3}, DT_MAIN, 0});
        MK({3, {0, 2, 3}, DT_MAIN, 0});
        index_hi = v[4] > 0 ? v[4] - 1 : 0;
        MK({1, {0}, DT_IDX, 1});
        MK({2, {4, 5}, DT_F32, 0});
        MK({2, {4, 5}, DT_F32, 0});
        p.q = T[0].t, p.k = T[1].t, p.q_out = T[2].t, p.k_out = T[3].t, p.positions = T[4].t;
        p.cos = T[5].t, p.sin = T[6].t;
        p.rotary_dim = (int)(int8_t)rd8(r);
        p.style = (sf_rope_style)(int8_t)rd8(r);
        p.theta = rdf(r);
        p.scaling = (sf_rope_scaling)(int8_t)rd8(r);
        p.factor = rdf(r), p.low_freq_factor = rdf(r), p.high_freq_factor = rdf(r);
        p.original_max_position = (int)(int16_t)rd32(r);
        p.backend = be;
        if (!too_big) st = sf_rope(ctx, &p);
        break;
    }
    case OP_GEMM_WQ:   /* M0 N1 K2, groups3 and bytes per row4 derived */
    case OP_QWEIGHT: { /* the same weight: quantise, dequantise or repack */
        const uint8_t fb = rd8(r), gb = rd8(r);
        sf_qweight q;
        memset(&q, 0, sizeof q);
        q.format = fb < 250 ? (sf_qw_format)(fb & 1) : (sf_qw_format)(int8_t)fb;
        q.group_size = gb < 240 ? (int[]){32, 64, 128}[gb % 3] : (int)(int8_t)gb;
        v[3] = q.group_size > 0 && v[2] >= 0 ? v[2] / q.group_size : 1;
        v[4] = q.format == SF_QW_INT4 && v[2] >= 0 ? v[2] / 2 : v[2];
        /* the tiled layout's padded shape: rows to 128, row bytes to 64 */
        v[8] = v[1] >= 0 && v[1] < ((int64_t)1 << 40) ? (v[1] + 127) / 128 * 128 : v[1];
        v[9] = v[4] >= 0 && v[4] < ((int64_t)1 << 40) ? (v[4] + 63) / 64 * 64 : v[4];
        const uint8_t lb = rd8(r); /* layout: rows, tiled, or past the enum */
        q.layout = lb < 250 ? (sf_qw_layout)(lb & 1) : (sf_qw_layout)(int8_t)lb;
        const int tiled = q.layout == SF_QW_TILED, dr = tiled ? 8 : 1, dc = tiled ? 9 : 4;
        MK({2, {dr, dc}, DT_U8, 0});
        MK({2, {3, 1}, DT_MAIN, 0});
        MK({2, {3, 1}, DT_MAIN, 0});
        q.data = T[0].t, q.scales = T[1].t, q.mins = T[2].t;
        q.n = v[1], q.k = v[2];
        const uint8_t nk = rd8(r); /* n or k off the tensors' */
        if (nk == 1) q.n = var_value(rd8(r));
        if (nk == 2) q.k = var_value(rd8(r));
        if (op == OP_GEMM_WQ) {
            sf_gemm_wq_params p;
            sf_gemm_wq_params_init(&p);
            MK({2, {0, 2}, DT_MAIN, 0});
            MK({1, {1}, DT_MAIN, 0});
            MK({2, {0, 1}, DT_MAIN, 0});
            p.w = q, p.x = T[3].t, p.bias = T[4].t, p.y = T[5].t;
            if (rd8(r) == 7) p.y = T[3].t; /* the output over the input */
            p.backend = be;
            if (!too_big) st = sf_gemm_wq(ctx, &p);
            break;
        }
        MK({2, {1, 2}, DT_MAIN, 0});
        const uint8_t which = rd8(r) % 4;
        if (which == 3) { /* rows into a tiled tensor of the padded shape */
            MK({2, {8, 9}, DT_U8, 0});
            if (!too_big) st = sf_tile_qweight(ctx, &q, &T[4].t);
        }
        if (which == 0 && !too_big) st = sf_quantize_weights(ctx, &T[3].t, &q);
        if (which == 1 && !too_big) st = sf_dequantize_weights(ctx, &q, &T[3].t);
        if (which == 2) {
            const uint8_t tb = rd8(r);
            const sf_gguf_type type = tb < 250 ? (sf_gguf_type)(int[]){2, 3, 8}[tb % 3] : (sf_gguf_type)(int8_t)tb;
            const int bs = type == SF_GGUF_Q4_1 ? 20 : type == SF_GGUF_Q8_0 ? 34 : 18;
            /* the blocks the weight needs, or a count off by a few bytes */
            const int64_t nb = q.n > 0 && q.k > 0 && q.n < (1 << 20) && q.k < (1 << 20) ? q.n * (q.k / 32) : 1;
            int64_t bytes = nb * bs + (int64_t)(int8_t)rd8(r) % 3;
            if (bytes < 1) bytes = 1;
            if (bytes <= (int64_t)SPAN_CAP && !too_big) {
                uint8_t *blk = (uint8_t *)malloc((size_t)bytes);
                if (blk) {
                    for (int64_t i = 0; i < bytes; i++) blk[i] = (uint8_t)(i * 131 + 7);
                    st = sf_repack_gguf(ctx, type, blk, (size_t)bytes, &q);
                    free(blk);
                }
            }
        }
        break;
    }
    case OP_DESC: { /* descriptor helpers on raw 64-bit extents */
        int64_t shape[SF_MAX_RANK];
        const int rank = (int)(int8_t)rd8(r);
        for (int i = 0; i < SF_MAX_RANK; i++) shape[i] = (int64_t)((uint64_t)rd32(r) << 32 | rd32(r));
        sf_tensor t = sf_tensor_contiguous(&shape, SF_F32, SF_DEVICE_CPU, rank, shape);
        (void)sf_tensor_numel(&t);
        t.rank = (int)(int8_t)rd8(r);
        (void)sf_tensor_numel(&t);
        break;
    }
    case OP_ALLOC: {
        void *p = NULL;
        const uint64_t bytes = (uint64_t)rd32(r) << 32 | rd32(r);
        if (sf_malloc(ctx, &p, bytes > ((uint64_t)1 << 26) && bytes < ((uint64_t)1 << 48) ? 64 : bytes) == SF_OK)
            sf_free(ctx, p);
        const int threads = (int)rd32(r);
        if (sf_ctx_set_threads(ctx, threads) == SF_OK) sf_ctx_set_threads(ctx, 2);
        break;
    }
    default: break;
    }
#undef MK
    static int verbose = -1; /* FUZZ_API_VERBOSE=1: each call's status (checking the seeds) */
    if (verbose < 0) verbose = getenv("FUZZ_API_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "op %d: %s%s %s\n", op, too_big ? "not called (too big) " : "", sf_status_string(st),
                st != SF_OK ? sf_ctx_last_error(ctx) : "");
    free_tensors(T, nt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rd r = {data, size, 0};
    run_one(&r);
    return 0;
}

/* ---------------------------------------------------------------- seeds
 * `fuzz_api -write_seeds=DIR` (handled before libFuzzer sees the flags):
 * one input per case of the case table, encoding that case's valid problem
 * (contiguous tensors, monotone index tensors), so the fuzzer starts from
 * calls that pass validation and mutates them outward. */
typedef struct wr {
    uint8_t b[512];
    size_t n;
} wr;
static void w8(wr *w, int v) {
    if (w->n < sizeof w->b) w->b[w->n++] = (uint8_t)v;
}
static void w32(wr *w, uint32_t v) {
    for (int k = 3; k >= 0; k--) w8(w, (int)(v >> (8 * k)));
}
static void wtensor(wr *w, int present, int nindex) {
    if (!present) {
        w8(w, 0xff);
        return;
    }
    w8(w, 0x00); /* default dtype / rank, no extent replaced */
    w8(w, 0x00); /* contiguous */
    w32(w, 0x12345679u); /* seed: odd, bit 1 clear = monotone indices */
    for (int i = 0; i < nindex; i++) w8(w, 1);
}

static int encode_case(const sfc_case *c, wr *w) {
    w->n = 0;
    int vars[8] = {0};
    int op;
    switch (c->op) {
    case SFC_SSD_FWD: op = OP_SSD; break;
    case SFC_SSD_STEP: op = OP_STEP; break;
    case SFC_ATTN_FWD: op = c->attn_varlen ? OP_ATTN_VARLEN : OP_ATTN; break;
    case SFC_CONV1D_FWD: op = OP_CONV; break;
    case SFC_CONV1D_UPDATE: op = OP_CONV_UPD; break;
    case SFC_RMSNORM_GATED: op = OP_RMS; break;
    case SFC_GEMM_WQ: op = OP_GEMM_WQ; break;
    default: return 0;
    }
    w8(w, op);
    w8(w, 0);   /* cpu backend */
    w8(w, 0);   /* f32 */
    const int ns = c->varlen == 2 ? c->nseq : c->b;
    switch (op) {
    case OP_SSD: vars[0] = c->b, vars[1] = c->L, vars[2] = c->H, vars[3] = c->P, vars[4] = c->G, vars[5] = c->N;
        vars[6] = ns; break;
    case OP_STEP: vars[0] = c->b, vars[1] = c->H, vars[2] = c->P, vars[3] = c->G, vars[4] = c->N;
        vars[5] = c->nslots > c->b ? c->nslots : c->b; break;
    case OP_ATTN: vars[0] = c->b, vars[1] = c->Lq, vars[2] = c->Lk, vars[3] = c->H, vars[4] = c->Hkv;
        vars[5] = c->d; break;
    case OP_ATTN_VARLEN: {
        int tq = 0, tk = 0;
        for (int i = 0; i < c->b; i++) tq += c->qlens[i], tk += c->klens[i];
        vars[0] = c->b, vars[1] = tq, vars[2] = tk, vars[3] = c->H, vars[4] = c->Hkv, vars[5] = c->d;
        vars[6] = c->b;
        break;
    }
    case OP_CONV: vars[0] = c->b, vars[1] = c->L, vars[2] = c->dim, vars[3] = c->width, vars[4] = ns; break;
    case OP_CONV_UPD: vars[0] = c->b, vars[1] = c->dim, vars[2] = c->width;
        vars[3] = c->nslots > c->b ? c->nslots : c->b; break;
    case OP_RMS: vars[0] = c->b * c->L, vars[1] = c->dim; break;
    case OP_GEMM_WQ: vars[0] = c->b, vars[1] = c->wq_n, vars[2] = c->wq_k; break;
    }
    for (int i = 0; i < 8; i++) {
        if (vars[i] > 121 || vars[i] < 0) return 0; /* what var_value can give */
        w8(w, vars[i] <= 16 ? vars[i] : 128 + vars[i]);
    }
    switch (op) {
    case OP_SSD:
        for (int i = 0; i < 5; i++) wtensor(w, 1, 0);
        wtensor(w, c->D != 0, 0), wtensor(w, c->z, 0), wtensor(w, c->dt_bias, 0), wtensor(w, c->init, 0);
        wtensor(w, c->varlen == 1, c->b * c->L), wtensor(w, c->varlen == 2, ns + 1);
        wtensor(w, 1, 0), wtensor(w, c->final, 0);
        w8(w, c->chunk == 128 ? 1 : c->chunk == 256 ? 2 : 0);
        w8(w, c->softplus), w8(w, 0), w8(w, 6);
        break;
    case OP_STEP:
        for (int i = 0; i < 6; i++) wtensor(w, 1, 0);
        wtensor(w, c->D != 0, 0), wtensor(w, c->z, 0), wtensor(w, c->dt_bias, 0);
        wtensor(w, c->nslots > c->b, c->b), wtensor(w, 1, 0);
        w8(w, c->softplus), w8(w, 0), w8(w, 6);
        break;
    case OP_ATTN:
    case OP_ATTN_VARLEN:
        for (int i = 0; i < 4; i++) wtensor(w, 1, 0);
        wtensor(w, 1, 0);
        if (op == OP_ATTN_VARLEN) wtensor(w, 1, c->b + 1), wtensor(w, 1, c->b + 1);
        w8(w, 0), w8(w, c->causal), w8(w, (uint8_t)(int8_t)(c->wl ? c->wl : -1));
        w8(w, (uint8_t)(int8_t)(c->wr ? c->wr : -1));
        w8(w, (uint8_t)((c->softcap > 0.f) | (c->alibi ? 2 : 0) | (c->alibi == 2 ? 4 : 0)));
        if (c->softcap > 0.f) /* rdf: (byte - 128) / 16 */
            w8(w, (uint8_t)(c->softcap * 16.f + 128.f < 255.f ? c->softcap * 16.f + 128.f : 255.f));
        if (c->alibi) wtensor(w, 1, 0);
        break;
    case OP_CONV:
        wtensor(w, 1, 0), wtensor(w, 1, 0), wtensor(w, c->bias, 0), wtensor(w, c->init, 0);
        wtensor(w, c->final, 0), wtensor(w, c->varlen == 2, ns + 1), wtensor(w, 1, 0);
        w8(w, c->silu);
        break;
    case OP_CONV_UPD:
        wtensor(w, 1, 0), wtensor(w, 1, 0), wtensor(w, 1, 0), wtensor(w, c->bias, 0);
        wtensor(w, c->nslots > c->b, c->b), wtensor(w, 1, 0);
        w8(w, c->silu);
        break;
    case OP_RMS:
        wtensor(w, 1, 0), wtensor(w, c->z, 0), wtensor(w, 1, 0), wtensor(w, 1, 0);
        w8(w, c->group), w8(w, c->norm_before_gate), w8(w, 4); /* eps 1e-6 */
        break;
    case OP_GEMM_WQ:
        w8(w, c->wq_bits == 8), w8(w, c->wq_group == 32 ? 0 : c->wq_group == 64 ? 1 : 2);
        wtensor(w, 1, 0), wtensor(w, 1, 0), wtensor(w, c->wq_min, 0);
        w8(w, 0); /* n and k as the tensors' */
        wtensor(w, 1, 0), wtensor(w, c->bias, 0), wtensor(w, 1, 0);
        w8(w, 0);
        break;
    }
    return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (int i = 1; i < *argc; i++) {
        if (strncmp((*argv)[i], "-write_seeds=", 13)) continue;
        const char *dir = (*argv)[i] + 13;
        int n = 0;
        for (int ci = 0; ci < sfc_ncases; ci++) {
            wr w;
            if (sfc_cases[ci].big || !encode_case(&sfc_cases[ci], &w)) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/case_%03d", dir, ci);
            FILE *f = fopen(path, "wb");
            if (!f) {
                fprintf(stderr, "fuzz_api: cannot write %s\n", path);
                exit(1);
            }
            fwrite(w.b, 1, w.n, f);
            fclose(f);
            n++;
        }
        printf("fuzz_api: %d seeds from the case table in %s\n", n, dir);
        exit(0);
    }
    return 0;
}
