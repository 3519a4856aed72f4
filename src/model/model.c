/* model.c - the decoder over the public ops.
 *
 * Per attention layer, for T new tokens (rows) of a batch:
 *   h = RMSNorm(x)                          (fused with the previous residual add)
 *   q, k, v = h Wq^T (+ b), h Wk^T (+ b), h Wv^T (+ b)
 *   RoPE on q and k at each token's position (sf_rope)
 *   k, v appended to the sequence's pages (sf_kv_append)
 *   prefill: causal varlen attention over the new tokens (sf_attn_fwd);
 *   decode:  paged attention over the cache (sf_attn_paged)
 *   t = att Wo^T;  x += t, h = RMSNorm(x)   (sf_add_rmsnorm, in place on x)
 *   t = (silu(h Wg^T) * h Wu^T) Wd^T        (sf_gemm or sf_gemm_wq, sf_swiglu)
 *   x += t, h = RMSNorm_next(x)             (the next layer's, or the final norm)
 * A Mamba-2 layer (mamba.c) puts its mixer in place of the attention: alone
 * in Mamba2ForCausalLM (no MLP: t = mixer(h), x += t, h = RMSNorm_next(x)),
 * followed by the MLP in the Bamba hybrid.
 * Then logits = h Wlm^T at each sequence's last row.  Activations live on the
 * context's device in `act` (f32 on the CPU); the host only writes the
 * embedding rows and the small index buffers (positions, cu_seqlens, block
 * table, lengths) before the pass, and reads the logits after it.
 */
#include "model.h"
#include "layer/dec_gemv.h"
#include "layer/gemv_norm.h"
#include "fused_ops.h"
#include "autotune.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Allocations freed with the model: device memory (sf_malloc) or host. */
struct sfm_alloc {
    void *p;
    int dev;
    sfm_alloc *next;
};

sf_status sfm_model_fail(char *err, size_t errlen, sf_status s, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return s;
}

static int track(sfm_model *m, void *p, int dev) {
    sfm_alloc *a = malloc(sizeof *a);
    if (!a) return 0;
    a->p = p, a->dev = dev, a->next = m->owned;
    m->owned = a;
    return 1;
}

static void *host_alloc(sfm_model *m, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (p && !track(m, p, 0)) {
        free(p);
        return NULL;
    }
    return p;
}

void *sfm_dev_alloc(sfm_model *m, size_t bytes) {
    void *p = NULL;
    if (sf_malloc(m->ctx, &p, bytes ? bytes : 1) != SF_OK) return NULL;
    if (!track(m, p, 1)) {
        sf_free(m->ctx, p);
        return NULL;
    }
    return p;
}

/* Host bytes as device memory: on a CPU context the host pointer itself
 * when aligned to `align` (mapped weights are read in place), else a copy. */
static void *to_device(sfm_model *m, const void *src, size_t bytes, size_t align) {
    m->weight_bytes += (int64_t)bytes;
    if (sf_ctx_device(m->ctx) == SF_DEVICE_CPU && ((uintptr_t)src % align) == 0) return (void *)(uintptr_t)src;
    void *d = sfm_dev_alloc(m, bytes);
    if (d && sf_memcpy(m->ctx, d, src, bytes) != SF_OK) return NULL;
    return d;
}

static float half_to_f32(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, f = h & 1023;
    const float v = e == 0 ? ldexpf((float)f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexpf((float)(1024 + f), e - 25);
    return s ? -v : v;
}

/* n elements of a float weight tensor to f32 (dst host). */
static void widen(const sfm_tensor *t, float *dst, int64_t n) {
    const uint16_t *h = (const uint16_t *)t->data;
    if (t->type == SFM_W_F32) {
        memcpy(dst, t->data, (size_t)n * 4);
    } else if (t->type == SFM_W_BF16) {
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)h[i] << 16;
            memcpy(&dst[i], &u, 4);
        }
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = half_to_f32(h[i]);
    }
}

/* f32 to bf16 / f16 bits, rounded to nearest even (NaN kept a NaN). */
static uint16_t to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static uint16_t to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: inf */
    if (a < 0x38800000u) {                                   /* a subnormal half: scale by 2^24 */
        const float v = fabsf(f) * 16777216.0f;              /* exact: a power of two */
        return (uint16_t)(sign | (uint32_t)nearbyintf(v));   /* default rounding: to nearest even */
    }
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* n f32 values into dt (f32, bf16 or f16) at dst (may be src itself: the
 * 16-bit results are written in order and never overtake the reads). */
void sfm_f32_to(sf_dtype dt, const float *src, void *dst, int64_t n) {
    if (dt == SF_F32) {
        if (dst != src) memmove(dst, src, (size_t)n * 4);
        return;
    }
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) {
        const float v = src[i];
        d[i] = dt == SF_BF16 ? to_bf16(v) : to_f16(v);
    }
}

static int is_block(sfm_wtype t) { return t == SFM_W_Q4_0 || t == SFM_W_Q4_1 || t == SFM_W_Q8_0; }

/* A GGUF block tensor (n, k) repacked into a host sf_qweight: the blocks'
 * f16 scales copied for the CPU (half the bytes a decode step reads beside
 * the codes), widened to f32 for the CUDA path (converted to x's dtype). */
static sf_status repack(sfm_model *m, const sfm_tensor *t, sf_qweight *q, char *err, size_t errlen) {
    const int64_t n = t->shape[0], k = t->shape[1], G = k / 32;
    const int int4 = t->type != SFM_W_Q8_0;
    const sf_dtype sdt = sf_ctx_device(m->ctx) == SF_DEVICE_CPU ? SF_F16 : SF_F32;
    const size_t ss = sf_dtype_size(sdt);
    memset(q, 0, sizeof *q);
    q->format = int4 ? SF_QW_INT4 : SF_QW_INT8;
    q->n = n, q->k = k, q->group_size = 32;
    const int64_t rb = int4 ? k / 2 : k;
    void *d = host_alloc(m, (size_t)(n * rb)), *s = host_alloc(m, (size_t)(G * n) * ss);
    void *mn = t->type == SFM_W_Q4_1 ? host_alloc(m, (size_t)(G * n) * ss) : NULL;
    if (!d || !s || (t->type == SFM_W_Q4_1 && !mn)) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of host memory repacking %s", t->name);
    q->data = sf_tensor_contiguous(d, int4 ? SF_U8 : SF_I8, SF_DEVICE_CPU, 2, (int64_t[]){n, rb});
    q->scales = sf_tensor_contiguous(s, sdt, SF_DEVICE_CPU, 2, (int64_t[]){G, n});
    if (mn) q->mins = sf_tensor_contiguous(mn, sdt, SF_DEVICE_CPU, 2, (int64_t[]){G, n});
    const sf_gguf_type gt = t->type == SFM_W_Q4_0 ? SF_GGUF_Q4_0 : t->type == SFM_W_Q4_1 ? SF_GGUF_Q4_1 : SF_GGUF_Q8_0;
    sf_ctx *hc = NULL;
    sf_status st = sf_ctx_create(&hc, SF_DEVICE_CPU);
    if (st == SF_OK) st = sf_repack_gguf(hc, gt, t->data, (size_t)t->nbytes, q);
    if (st != SF_OK) sfm_model_fail(err, errlen, st, "repacking %s: %s", t->name, hc ? sf_ctx_last_error(hc) : "no context");
    sf_ctx_destroy(hc);
    return st;
}

/* The f32 values of a weight in host memory (owned by the model), as (n, k):
 * k its last extent, n the product of the others (a conv1d weight (C, 1, W)
 * is (C, W)). */
sf_status sfm_host_f32(sfm_model *m, const sfm_tensor *t, float **out, char *err, size_t errlen) {
    int64_t n = 1;
    for (int i = 0; i + 1 < t->ndim; i++) n *= t->shape[i];
    const int64_t k = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    if (t->type == SFM_W_F32 && ((uintptr_t)t->data % 4) == 0) {
        *out = (float *)(uintptr_t)t->data;
        return SF_OK;
    }
    float *f = host_alloc(m, (size_t)(n * k) * 4);
    if (!f) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of host memory for %s", t->name);
    if (is_block(t->type)) {
        sf_qweight q;
        sf_status st = repack(m, t, &q, err, errlen);
        if (st != SF_OK) return st;
        sf_ctx *hc = NULL;
        st = sf_ctx_create(&hc, SF_DEVICE_CPU);
        const sf_tensor w = sf_tensor_contiguous(f, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){n, k});
        if (st == SF_OK) st = sf_dequantize_weights(hc, &q, &w);
        if (st != SF_OK) sfm_model_fail(err, errlen, st, "dequantising %s: %s", t->name, hc ? sf_ctx_last_error(hc) : "no context");
        sf_ctx_destroy(hc);
        if (st != SF_OK) return st;
    } else if (t->type == SFM_W_F32 || t->type == SFM_W_F16 || t->type == SFM_W_BF16) {
        widen(t, f, n * k);
    } else {
        return sfm_model_fail(err, errlen, SF_ERR_DTYPE, "%s: type %s is not a float or GGUF block type", t->name, sfm_wtype_name(t->type));
    }
    *out = f;
    return SF_OK;
}

/* Row r of a stacked part whose heads of hd rows have their first R rows
 * in rotary pairs: r itself, or the source row that goes there (row 2i of
 * a head takes its row i, row 2i + 1 its row i + R/2). */
static int64_t pair_row(int64_t r, int hd, int R) {
    if (!hd) return r;
    const int64_t j = r % hd;
    return j >= R ? r : r - j + (j % 2 ? R / 2 + j / 2 : j / 2);
}

/* Weights w[0..np) stacked by rows into one linear (n = the sum of ns, k)
 * when they are all 2-D (ns[i], k) of one type: *done = 1 and L loaded, the
 * biases (any of them, absent ones zero) stacked into one f32 vector; else
 * *done = 0 and nothing loaded (the caller loads them one by one, which
 * also names any mis-shaped tensor).  GGUF block rows and float rows are
 * whole rows, so stacking the bytes stacks the matrices.  rope_hd > 0: the
 * first two parts (q, k) are heads of rope_hd rows whose first rope_R rows
 * are reordered into rotary pairs (pair_row; sf_rope's GPT-J order, which
 * the decode step's fused q/k/v product rotates in place, dec_gemv.h), their
 * bias entries alike.  The stacked copy is kept only where the model reads
 * it in place (a CPU context). */
static sf_status load_stacked(sfm_model *m, const sfm_tensor *const *w, const sfm_tensor *const *b, int np,
                              const int64_t *ns, int64_t k, int rope_hd, int rope_R, int dequantize, sfm_linear *L,
                              int *done, char *err, size_t errlen) {
    *done = 0;
    int64_t n = 0;
    uint64_t bytes = 0;
    int any_bias = 0;
    for (int i = 0; i < np; i++) {
        if (w[i]->ndim != 2 || w[i]->shape[0] != ns[i] || w[i]->shape[1] != k || w[i]->type != w[0]->type) return SF_OK;
        if (b[i] && (b[i]->ndim != 1 || b[i]->shape[0] != ns[i])) return SF_OK;
        if (rope_hd && i < 2 && (ns[i] % rope_hd || w[i]->nbytes % (uint64_t)ns[i])) return SF_OK;
        n += ns[i], bytes += w[i]->nbytes, any_bias |= b[i] != NULL;
    }
    char *cat = malloc(bytes ? (size_t)bytes : 1);
    if (!cat) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of host memory stacking %s", w[0]->name);
    for (uint64_t off = 0, i = 0; i < (uint64_t)np; off += w[i]->nbytes, i++) {
        const int hd = i < 2 ? rope_hd : 0;
        const uint64_t rb = w[i]->nbytes / (uint64_t)ns[i];
        for (int64_t r = 0; hd && r < ns[i]; r++)
            memcpy(cat + off + (uint64_t)r * rb, (const char *)w[i]->data + (uint64_t)pair_row(r, hd, rope_R) * rb, (size_t)rb);
        if (!hd) memcpy(cat + off, w[i]->data, (size_t)w[i]->nbytes);
    }
    sfm_tensor t = *w[0];
    t.shape[0] = n, t.data = cat, t.nbytes = bytes;
    sfm_tensor bt = {0};
    if (any_bias) {
        float *bf = host_alloc(m, (size_t)n * 4);
        if (!bf) {
            free(cat);
            return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of host memory stacking biases");
        }
        for (int64_t i = 0, off = 0; i < np; off += ns[i], i++) {
            float *f = NULL;
            if (!b[i]) {
                memset(bf + off, 0, (size_t)ns[i] * 4);
                continue;
            }
            const sf_status st = sfm_host_f32(m, b[i], &f, err, errlen);
            if (st != SF_OK) {
                free(cat);
                return st;
            }
            for (int64_t r = 0; r < ns[i]; r++) bf[off + r] = f[pair_row(r, i < 2 ? rope_hd : 0, rope_R)];
        }
        bt.name = b[0] ? b[0]->name : w[0]->name, bt.type = SFM_W_F32, bt.ndim = 1, bt.shape[0] = n;
        bt.data = bf, bt.nbytes = (uint64_t)n * 4;
    }
    const sf_status st = sfm_load_linear(m, &t, any_bias ? &bt : NULL, n, k, dequantize, L, err, errlen);
    if (st == SF_OK && L->w.data == (void *)cat) { /* read in place: the model keeps it */
        if (!track(m, cat, 0)) {
            free(cat);
            return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of host memory");
        }
    } else {
        free(cat);
    }
    if (st == SF_OK) *done = 1;
    return st;
}

const sfm_tensor *sfm_need(const sfm_checkpoint *ck, const char *name, char *err, size_t errlen) {
    const sfm_tensor *t = sfm_checkpoint_find(ck, name);
    if (!t) sfm_model_fail(err, errlen, SF_ERR_INVALID_ARG, "the checkpoint has no tensor %s", name);
    return t;
}

/* A 1-D float vector as f32 on the device. */
sf_status sfm_load_vec(sfm_model *m, const sfm_tensor *t, int64_t n, sf_tensor *out, char *err, size_t errlen) {
    if (t->ndim != 1 || t->shape[0] != n)
        return sfm_model_fail(err, errlen, SF_ERR_SHAPE, "%s: want shape (%lld)", t->name, (long long)n);
    float *f;
    sf_status st = sfm_host_f32(m, t, &f, err, errlen);
    if (st != SF_OK) return st;
    void *d = to_device(m, f, (size_t)n * 4, 4);
    if (!d) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for %s", t->name);
    *out = sf_tensor_contiguous(d, SF_F32, sf_ctx_device(m->ctx), 1, (int64_t[]){n});
    return SF_OK;
}

sf_status sfm_load_linear(sfm_model *m, const sfm_tensor *t, const sfm_tensor *bias, int64_t n, int64_t k,
                             int dequantize, sfm_linear *L, char *err, size_t errlen) {
    memset(L, 0, sizeof *L);
    L->n = n, L->k = k;
    if (t->ndim != 2 || t->shape[0] != n || t->shape[1] != k)
        return sfm_model_fail(err, errlen, SF_ERR_SHAPE, "%s: want shape (%lld, %lld)", t->name, (long long)n, (long long)k);
    const int dev = sf_ctx_device(m->ctx);
    sf_status st;
    if (is_block(t->type) && !dequantize) {
        st = repack(m, t, &L->q, err, errlen);
        if (st != SF_OK) return st;
        sf_tensor *parts[3] = {&L->q.data, &L->q.scales, &L->q.mins};
        if (dev != SF_DEVICE_CPU && m->act != SF_F32) /* the CUDA kernels take scales in x's dtype */
            for (int i = 1; i < 3; i++)
                if (parts[i]->data) {
                    sfm_f32_to(m->act, parts[i]->data, parts[i]->data, parts[i]->shape[0] * parts[i]->shape[1]);
                    parts[i]->dtype = m->act;
                }
        for (int i = 0; i < 3; i++) {
            if (!parts[i]->data) continue;
            const size_t bytes = (size_t)(parts[i]->shape[0] * parts[i]->shape[1]) * sf_dtype_size(parts[i]->dtype);
            void *d = to_device(m, parts[i]->data, bytes, 16);
            if (!d) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for %s", t->name);
            parts[i]->data = d, parts[i]->device = dev;
        }
        L->quant = 1;
    } else if (is_block(t->type)) {
        float *f;
        st = sfm_host_f32(m, t, &f, err, errlen);
        if (st != SF_OK) return st;
        /* the host backends take any weight dtype; the CUDA one x's */
        const sf_dtype wd = dev == SF_DEVICE_CPU ? SF_F32 : m->act;
        sfm_f32_to(wd, f, f, n * k);
        void *d = to_device(m, f, (size_t)(n * k) * sf_dtype_size(wd), 4);
        if (!d) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for %s", t->name);
        L->w = sf_tensor_contiguous(d, wd, dev, 2, (int64_t[]){n, k});
    } else if (dev != SF_DEVICE_CPU && !(t->type == SFM_W_F32 && m->act == SF_F32) &&
               !(t->type == SFM_W_F16 && m->act == SF_F16) && !(t->type == SFM_W_BF16 && m->act == SF_BF16)) {
        /* a device weight in another dtype than the activations: converted */
        float *f = host_alloc(m, (size_t)(n * k) * 4);
        if (!f) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of host memory for %s", t->name);
        widen(t, f, n * k);
        sfm_f32_to(m->act, f, f, n * k);
        void *d = to_device(m, f, (size_t)(n * k) * sf_dtype_size(m->act), 4);
        if (!d) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for %s", t->name);
        L->w = sf_tensor_contiguous(d, m->act, dev, 2, (int64_t[]){n, k});
    } else if (t->type == SFM_W_F32 || t->type == SFM_W_F16 || t->type == SFM_W_BF16) {
        const sf_dtype dt = t->type == SFM_W_F32 ? SF_F32 : t->type == SFM_W_F16 ? SF_F16 : SF_BF16;
        const size_t es = sf_dtype_size(dt);
        const void *src = t->data;
        if ((uintptr_t)src % es) { /* unaligned safetensors data: an aligned copy */
            void *c = host_alloc(m, (size_t)t->nbytes);
            if (!c) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of host memory for %s", t->name);
            memcpy(c, src, (size_t)t->nbytes);
            src = c;
        }
        void *d = to_device(m, src, (size_t)t->nbytes, es);
        if (!d) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for %s", t->name);
        L->w = sf_tensor_contiguous(d, dt, dev, 2, (int64_t[]){n, k});
    } else {
        return sfm_model_fail(err, errlen, SF_ERR_DTYPE, "%s: type %s cannot be a Linear weight", t->name, sfm_wtype_name(t->type));
    }
    if (bias) return sfm_load_vec(m, bias, n, &L->bias, err, errlen);
    return SF_OK;
}

void sfm_model_destroy(sfm_model *m) {
    if (!m) return;
    sfm_step_destroy(m);
    for (sfm_alloc *a = m->owned; a;) {
        sfm_alloc *nx = a->next;
        if (a->dev) sf_free(m->ctx, a->p);
        else free(a->p);
        free(a);
        a = nx;
    }
    for (int l = 0; m->layers && l < m->cfg->num_layers; l++) free(m->layers[l].mamba);
    free(m->layers);
    free(m->kpool);
    free(m->vpool);
    free(m);
}

/* Frees one tracked allocation now (the activation buffers when they grow). */
static void release(sfm_model *m, void *p) {
    for (sfm_alloc **pp = &m->owned; *pp; pp = &(*pp)->next)
        if ((*pp)->p == p) {
            sfm_alloc *a = *pp;
            *pp = a->next;
            if (a->dev) sf_free(m->ctx, a->p);
            else free(a->p);
            free(a);
            return;
        }
}

/* Activation buffers for `rows` token rows (grown, never per token). */
static sf_status ensure_rows(sfm_model *m, int64_t rows, char *err, size_t errlen) {
    if (rows <= m->cap_rows) return SF_OK;
    const sfm_config *c = m->cfg;
    const int64_t D = c->hidden_size, QD = (int64_t)c->num_heads * c->head_dim;
    const int64_t KD = (int64_t)c->num_kv_heads * c->head_dim, F = c->intermediate_size;
    const size_t es = sf_dtype_size(m->act);
    const int64_t E = c->ssm_inner, CD = E + 2 * (int64_t)c->ssm_groups * c->ssm_state;
    void **bufs[] = {&m->x, &m->h, &m->q, &m->k, &m->v, &m->att, &m->tmp, &m->g, &m->u, &m->a,
                     &m->zxd, &m->xbc, &m->y, &m->yn, &m->qkv};
    const int64_t width[] = {D, D, QD, KD, KD, QD, D > F ? D : F, 2 * F, F, F, E ? E + CD + c->ssm_heads : 0,
                             E ? CD : 0, E, E, QD + 2 * KD};
    for (int i = 0; i < 15; i++) {
        if (*bufs[i]) release(m, *bufs[i]);
        /* the residual stream x stays f32 (one rounding per layer less) */
        *bufs[i] = sfm_dev_alloc(m, (size_t)(rows * width[i]) * (i == 0 ? 4 : es));
        if (!*bufs[i]) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for %lld activation rows", (long long)rows);
    }
    void **hb[] = {(void **)&m->stage, (void **)&m->pos_h};
    const size_t hsz[] = {(size_t)(rows * D) * 4, (size_t)(rows + m->max_seqs * (m->max_pages_per_seq + 5) + 8) * 4};
    for (int i = 0; i < 2; i++) {
        if (*hb[i]) release(m, *hb[i]);
        *hb[i] = host_alloc(m, hsz[i]);
        if (!*hb[i]) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no host memory for %lld rows", (long long)rows);
    }
    if (m->pos_d) release(m, m->pos_d);
    if (m->ids_d) release(m, m->ids_d);
    m->pos_d = sfm_dev_alloc(m, (size_t)rows * 4);
    m->ids_d = sfm_dev_alloc(m, (size_t)rows * 4);
    if (!m->pos_d || !m->ids_d) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for positions");
    m->cap_rows = rows;
    m->rows_gen++;
    return SF_OK;
}

/* The rotary definition of attention layer ly (sf_rope's frequencies; the
 * pairs' order its rows were loaded in), tensors left to the caller. */
static void rope_params(const sfm_model *m, const sfm_layer *ly, sf_rope_params *rp) {
    const sfm_config *c = m->cfg;
    sf_rope_params_init(rp);
    rp->rotary_dim = c->rope_dim;
    rp->style = ly && ly->rope_pairs ? SF_ROPE_GPTJ : SF_ROPE_NEOX;
    rp->theta = (float)c->rope_theta;
    if (c->rope_scaling == SFM_ROPE_LLAMA3) {
        rp->scaling = SF_ROPE_LLAMA3;
        rp->factor = (float)c->rope_factor;
        rp->low_freq_factor = (float)c->rope_low_freq_factor;
        rp->high_freq_factor = (float)c->rope_high_freq_factor;
        rp->original_max_position = c->rope_original_max_position;
    }
}

sf_status sfm_model_create(sf_ctx *ctx, const sfm_checkpoint *ck, sf_dtype act, int dequantize, int page_size,
                           int64_t num_pages, int max_seqs, int max_pages_per_seq, sfm_model **out,
                           char *err, size_t errlen) {
    *out = NULL;
    const sfm_config *c = sfm_checkpoint_config(ck);
    if (c->arch != SFM_ARCH_LLAMA && c->arch != SFM_ARCH_QWEN2 && c->arch != SFM_ARCH_MAMBA2 && c->arch != SFM_ARCH_HYBRID)
        return sfm_model_fail(err, errlen, SF_ERR_UNSUPPORTED, "architecture %s is not supported by the engine", sfm_arch_name(c->arch));
    sfm_model *m = calloc(1, sizeof *m);
    if (!m) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory");
    m->ctx = ctx, m->cfg = c, m->act = act;
    if (act != SF_F32 && act != SF_F16 && act != SF_BF16) {
        free(m);
        return sfm_model_fail(err, errlen, SF_ERR_DTYPE, "activation dtype %s is not f32, f16 or bf16", sf_dtype_name(act));
    }
    m->page_size = page_size, m->num_pages = num_pages, m->max_seqs = max_seqs, m->max_pages_per_seq = max_pages_per_seq;
    const int L = c->num_layers, dev = sf_ctx_device(ctx);
    const int64_t D = c->hidden_size, V = c->vocab_size, F = c->intermediate_size, hd = c->head_dim;
    const int64_t QD = (int64_t)c->num_heads * hd, KD = (int64_t)c->num_kv_heads * hd;
    m->layers = calloc((size_t)L, sizeof *m->layers);
    m->kpool = calloc((size_t)L, sizeof *m->kpool);
    m->vpool = calloc((size_t)L, sizeof *m->vpool);
    sf_status st = SF_OK;
    if (!m->layers || !m->kpool || !m->vpool) {
        st = sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory");
        goto bad;
    }
#define NEED(var, name)                                      \
    const sfm_tensor *var = sfm_need(ck, name, err, errlen);     \
    if (!var) {                                              \
        st = SF_ERR_INVALID_ARG;                             \
        goto bad;                                            \
    }
#define TRY(call)                    \
    if ((st = (call)) != SF_OK) goto bad
    {
        const int mamba2 = c->arch == SFM_ARCH_MAMBA2;
        NEED(emb, mamba2 ? "backbone.embeddings.weight" : "model.embed_tokens.weight");
        float *ef;
        TRY(sfm_host_f32(m, emb, &ef, err, errlen));
        m->embed = ef;
        m->weight_bytes += V * D * 4;
        NEED(fn, mamba2 ? "backbone.norm_f.weight" : c->arch == SFM_ARCH_HYBRID ? "model.final_layernorm.weight" : "model.norm.weight");
        TRY(sfm_load_vec(m, fn, D, &m->final_norm, err, errlen));
        if (c->tie_embeddings) {
            if (dev == SF_DEVICE_CPU && (!is_block(emb->type) || dequantize)) {
                /* the f32 lookup table serves as the head (quantised tables
                 * are kept quantised for it unless asked otherwise) */
                m->lm_head.n = V, m->lm_head.k = D;
                m->lm_head.w = sf_tensor_contiguous((void *)ef, SF_F32, dev, 2, (int64_t[]){V, D});
            } else {
                TRY(sfm_load_linear(m, emb, NULL, V, D, dequantize, &m->lm_head, err, errlen));
            }
        } else {
            NEED(lm, "lm_head.weight");
            TRY(sfm_load_linear(m, lm, NULL, V, D, dequantize, &m->lm_head, err, errlen));
        }
    }
    for (int l = 0; l < L; l++) {
        sfm_layer *ly = &m->layers[l];
        char nm[160];
        if (c->arch == SFM_ARCH_MAMBA2) {
            snprintf(nm, sizeof nm, "backbone.layers.%d.norm.weight", l);
            NEED(mn, nm);
            TRY(sfm_load_vec(m, mn, D, &ly->in_norm, err, errlen));
            snprintf(nm, sizeof nm, "backbone.layers.%d.mixer", l);
            TRY(sfm_mamba_load(m, ck, nm, dequantize, &ly->mamba, err, errlen));
            continue;
        }
        /* Llama / Qwen2, and the hybrid (Bamba: pre_ff_layernorm, feed_forward,
         * a Mamba-2 mixer in place of attention outside attn_layer_indices) */
        const int hybrid = c->arch == SFM_ARCH_HYBRID, attn = !hybrid || c->layer_is_attn[l];
#define NAME(suffix) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix), nm)
        NEED(in, NAME("input_layernorm.weight"));
        TRY(sfm_load_vec(m, in, D, &ly->in_norm, err, errlen));
        NEED(post, NAME(hybrid ? "pre_ff_layernorm.weight" : "post_attention_layernorm.weight"));
        TRY(sfm_load_vec(m, post, D, &ly->post_norm, err, errlen));
        if (!attn) {
            snprintf(nm, sizeof nm, "model.layers.%d.mamba", l);
            TRY(sfm_mamba_load(m, ck, nm, dequantize, &ly->mamba, err, errlen));
        }
        const char *mlp = hybrid ? "feed_forward" : "mlp";
        const char *proj[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                               "gate_proj", "up_proj", "down_proj"};
        sfm_linear *lins[7] = {&ly->q, &ly->k, &ly->v, &ly->o, &ly->gate, &ly->up, &ly->down};
        const int64_t ns[7] = {QD, KD, KD, D, F, F, D}, ks[7] = {D, D, D, QD, D, D, F};
        const sfm_tensor *ws[7] = {0}, *bs[7] = {0};
        for (int i = attn ? 0 : 4; i < 7; i++) {
            char wn[160], bn[160];
            snprintf(wn, sizeof wn, "model.layers.%d.%s%s%s.weight", l, i < 4 ? "" : mlp, i < 4 ? "" : ".", proj[i]);
            snprintf(bn, sizeof bn, "model.layers.%d.%s.bias", l, proj[i]);
            NEED(w, wn);
            ws[i] = w;
            bs[i] = i < 3 && c->attn_bias ? sfm_checkpoint_find(ck, bn) : NULL;
        }
        int stacked_qkv = 0, stacked_gu = 0;
        if (attn) TRY(load_stacked(m, ws, bs, 3, ns, D, (int)hd, c->rope_dim, dequantize, &ly->qkv, &stacked_qkv, err, errlen));
        ly->rope_pairs = stacked_qkv;
        TRY(load_stacked(m, ws + 4, bs + 4, 2, ns + 4, D, 0, 0, dequantize, &ly->gate_up, &stacked_gu, err, errlen));
        for (int i = attn ? 0 : 4; i < 7; i++) {
            if ((i < 3 && stacked_qkv) || ((i == 4 || i == 5) && stacked_gu)) continue;
            TRY(sfm_load_linear(m, ws[i], bs[i], ns[i], ks[i], dequantize, lins[i], err, errlen));
        }
#undef NAME
    }
    /* KV pools, f32 on the CPU */
    {
        /* one page past num_pages: the scratch page of padding rows (step.c) */
        const int64_t pool_elems = (num_pages + 1) * page_size * KD;
        m->scratch_page = (int32_t)num_pages;
        for (int l = 0; l < L; l++) {
            if (m->layers[l].mamba) continue; /* no KV pages in a Mamba layer */
            void *kp = sfm_dev_alloc(m, (size_t)pool_elems * sf_dtype_size(m->act));
            void *vp = sfm_dev_alloc(m, (size_t)pool_elems * sf_dtype_size(m->act));
            if (!kp || !vp) {
                st = sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for the KV cache (%lld pages)", (long long)num_pages);
                goto bad;
            }
            const int64_t shp[4] = {num_pages + 1, page_size, c->num_kv_heads, hd};
            m->kpool[l] = sf_tensor_contiguous(kp, m->act, dev, 4, shp);
            m->vpool[l] = sf_tensor_contiguous(vp, m->act, dev, 4, shp);
        }
        for (int l = 0; l < L; l++)
            if (!m->layers[l].mamba) m->kv_bytes += 2 * pool_elems * (int64_t)sf_dtype_size(m->act);
        m->logits = sfm_dev_alloc(m, (size_t)(max_seqs * V) * sf_dtype_size(act));
        m->logits_h = host_alloc(m, (size_t)(max_seqs * V) * sf_dtype_size(act));
        m->slots_d = sfm_dev_alloc(m, (size_t)max_seqs * 4);
        m->cu_d = sfm_dev_alloc(m, (size_t)(max_seqs + 1) * 4);
        m->bt_d = sfm_dev_alloc(m, (size_t)max_seqs * max_pages_per_seq * 4);
        m->len_d = sfm_dev_alloc(m, (size_t)max_seqs * 4);
        m->clen_d = sfm_dev_alloc(m, (size_t)max_seqs * 4);
        if (!m->logits || !m->logits_h || !m->slots_d || !m->cu_d || !m->bt_d || !m->len_d || !m->clen_d) {
            st = sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for the step buffers");
            goto bad;
        }
    }
#ifdef SF_WITH_CUDA
    /* the decode step's fused product + norm: its scratch, zeroed; pinned
     * off by SF_AUTOTUNE_FORCE=gemv_norm:apart (to time the two ways) */
    const char *force = getenv("SF_AUTOTUNE_FORCE");
    /* likewise the gate/up product with SwiGLU in its epilogue (one launch,
     * the 2I-wide product never written); SF_AUTOTUNE_FORCE=gemm_swiglu:apart
     * runs sf_gemm and sf_swiglu instead */
    m->fused_mlp = dev != SF_DEVICE_CPU && (m->act == SF_BF16 || m->act == SF_F16) &&
                   !(force && strstr(force, "gemm_swiglu:apart"));
    /* and the attention layers' decode products with their norms and
     * residual adds fused in, each launched as a programmatic dependent of
     * the kernel ahead; SF_AUTOTUNE_FORCE=dec_gemv:apart keeps the
     * launches above, dec_gemv:nopdl launches them plainly */
    m->dec_fuse = m->fused_mlp && !(force && strstr(force, "dec_gemv:apart"));
    m->dec_pdl = !(force && strstr(force, "dec_gemv:nopdl"));
    /* the rotary frequencies (turns a position) of the fused q/k/v product,
     * made as sf_rope makes its own; dec_gemv:norope keeps sf_rope and
     * sf_kv_append apart */
    int any_pairs = 0;
    for (int l = 0; l < L; l++) any_pairs |= m->layers[l].rope_pairs;
    if (m->dec_fuse && any_pairs && !(force && strstr(force, "dec_gemv:norope"))) {
        const int R = c->rope_dim;
        double *t = calloc((size_t)(R / 2), sizeof *t);
        sf_rope_params rp;
        rope_params(m, NULL, &rp);
        for (int i = 0; t && i < R / 2; i++) t[i] = sf_rope_freq(&rp, R, i) * (0.5 / 3.14159265358979323846);
        m->rope_turns = t ? sfm_dev_alloc(m, (size_t)(R / 2) * sizeof *t) : NULL;
        const sf_status ts = m->rope_turns ? sf_memcpy(ctx, m->rope_turns, t, (size_t)(R / 2) * sizeof *t) : SF_ERR_OUT_OF_MEMORY;
        free(t);
        if (ts != SF_OK) {
            st = sfm_model_fail(err, errlen, ts, "no device memory for the rotary frequencies");
            goto bad;
        }
    }
    if (dev != SF_DEVICE_CPU && !(force && strstr(force, "gemv_norm:apart"))) {
        const size_t gb = sf_gemv_norm_scratch_bytes((int)D);
        void *z = calloc(1, gb);
        m->gn_scratch = z ? sfm_dev_alloc(m, gb) : NULL;
        const sf_status zs = m->gn_scratch ? sf_memcpy(ctx, m->gn_scratch, z, gb) : SF_ERR_OUT_OF_MEMORY;
        free(z);
        if (zs != SF_OK) {
            st = sfm_model_fail(err, errlen, zs, "no device memory for the decode scratch");
            goto bad;
        }
    }
#endif
    TRY(ensure_rows(m, max_seqs > 64 ? max_seqs : 64, err, errlen)); /* a decode step's rows at least */
#undef NEED
#undef TRY
    *out = m;
    return SF_OK;
bad:
    sfm_model_destroy(m);
    return st;
}

/* ------------------------------------------------------------------ */
/* the forward pass                                                    */
/* ------------------------------------------------------------------ */

/* A view of `rank` dims with the given element strides. */
static sf_tensor strided(void *p, sf_dtype dt, int dev, int rank, const int64_t *shape, const int64_t *stride) {
    sf_tensor t = sf_tensor_contiguous(p, dt, dev, rank, shape);
    for (int i = 0; i < rank; i++) t.stride[i] = stride[i];
    return t;
}

static sf_tensor t2(void *p, sf_dtype dt, int dev, int64_t r, int64_t c) {
    return sf_tensor_contiguous(p, dt, dev, 2, (int64_t[]){r, c});
}

/* y (M, L->n) = x (M, L->k) W^T (+ bias). */
sf_status sfm_linear_apply(sfm_model *m, const sfm_linear *L, void *x, int64_t M, void *y) {
    const int dev = sf_ctx_device(m->ctx);
    if (L->quant) {
        sf_gemm_wq_params p;
        sf_gemm_wq_params_init(&p);
        p.x = t2(x, m->act, dev, M, L->k);
        p.w = L->q;
        p.bias = L->bias;
        p.y = t2(y, m->act, dev, M, L->n);
        return sf_gemm_wq(m->ctx, &p);
    }
    sf_gemm_params p;
    sf_gemm_params_init(&p);
    p.x = t2(x, m->act, dev, M, L->k);
    p.w = L->w;
    p.bias = L->bias;
    p.y = t2(y, m->act, dev, M, L->n);
    return sf_gemm(m->ctx, &p);
}

/* x += r (x = r when first), h = RMSNorm(x) */
static sf_status norm(sfm_model *m, void *r, const sf_tensor *w, int64_t T, int first) {
    const int dev = sf_ctx_device(m->ctx);
    const int64_t D = m->cfg->hidden_size;
    sf_norm_params p;
    sf_norm_params_init(&p);
    p.eps = (float)m->cfg->norm_eps;
    p.weight = *w;
    p.out = t2(m->h, m->act, dev, T, D);
    p.x = t2(r, m->act, dev, T, D);
    p.residual_out = t2(m->x, SF_F32, dev, T, D);
    if (first) return sf_add_rmsnorm(m->ctx, &p); /* x = the embeddings; the stream starts */
    p.residual = p.residual_out;
    return sf_add_rmsnorm(m->ctx, &p);
}

/* m->tmp = x W^T (the layer's output), then the residual add and the next
 * RMSNorm (norm with first = 0); on the GPU at a decode step's few rows one
 * fused launch (layer/gemv_norm.h), which adds the product to the f32
 * stream unrounded. */
static sf_status linear_norm(sfm_model *m, const sfm_linear *L, void *x, int64_t T, const sf_tensor *w) {
#ifdef SF_WITH_CUDA
    /* K <= 2048: at K 8192 (down_proj) cuBLAS's split-K product and the norm
     * apart measured faster (14.6 + 4.0 us against 20.3, bench/RESULTS.md) */
    if (m->gn_scratch && !L->quant && !L->bias.data && T <= SF_GEMV_NORM_MAX_ROWS && L->k <= 2048) {
        sf_gemv_norm_args a = {0};
        a.dt = m->act, a.x = x, a.w = L->w.data, a.res = (float *)m->x, a.nw = (const float *)w->data, a.out = m->h;
        a.ldx = L->k, a.ldw = L->w.stride[0], a.ldr = L->n, a.ldo = L->n;
        a.M = (int)T, a.N = (int)L->n, a.K = (int)L->k;
        a.eps = (float)m->cfg->norm_eps, a.scratch = m->gn_scratch;
        if (L->w.dtype == m->act && w->dtype == SF_F32 && w->stride[0] == 1 && !sf_gemv_norm_supports(&a))
            return sf_cuda_gemv_add_rmsnorm(m->ctx, &a);
    }
#endif
    const sf_status s = sfm_linear_apply(m, L, x, T, m->tmp);
    return s != SF_OK ? s : norm(m, m->tmp, w, T, 0);
}

#ifdef SF_WITH_CUDA
/* The arguments of a decode-step product on layer/dec_gemv.h: y = x W^T
 * (+ bias), with x NULL x = RMSNorm(m->x) * nw (the layer's norm, from the
 * f32 residual stream); SF_DEC_RES: m->x += x W^T. */
static void dec_args(const sfm_model *m, const sfm_linear *L, sf_dec_out out, const void *x, const sf_tensor *nw,
                     int64_t T, void *y, sf_dec_gemv_args *a) {
    memset(a, 0, sizeof *a);
    a->dt = m->act, a->out = out;
    a->x = x, a->ldx = L->k;
    if (!x) a->nres = (const float *)m->x, a->ldn = m->cfg->hidden_size, a->nw = (const float *)nw->data;
    a->eps = (float)m->cfg->norm_eps;
    a->w = L->w.data, a->ldw = L->w.stride[0];
    a->bias = L->bias.data;
    if (out == SF_DEC_RES) a->res = (float *)m->x, a->ldr = L->n;
    else a->y = y, a->ldy = L->n;
    a->M = (int)T, a->N = (int)L->n, a->K = (int)L->k;
    a->pdl = m->dec_pdl;
}
/* the gate/up product with SwiGLU, x = RMSNorm(m->x) * post_norm -> m->a */
static void dec_mlp_args(const sfm_model *m, const sfm_layer *ly, int64_t T, sf_dec_gemv_args *a) {
    const int64_t F = m->cfg->intermediate_size;
    const sfm_linear *L = ly->gate_up.n ? &ly->gate_up : &ly->gate;
    dec_args(m, L, SF_DEC_SWIGLU, NULL, &ly->post_norm, T, m->a, a);
    a->N = (int)F, a->ldy = F;
    if (ly->gate_up.n) {
        a->w_up = (const char *)L->w.data + (size_t)F * (size_t)L->w.stride[0] * sf_dtype_size(m->act);
        a->ldu = L->w.stride[0];
    } else {
        a->w_up = ly->up.w.data, a->ldu = ly->up.w.stride[0];
    }
}
static int dec_weight_ok(const sfm_model *m, const sfm_linear *L, int bias_ok) {
    return !L->quant && L->w.dtype == m->act && L->w.rank == 2 && L->w.stride[1] == 1 &&
           (!L->bias.data || (bias_ok && L->bias.dtype == m->act && L->bias.stride[0] == 1));
}
static int dec_norm_ok(const sf_tensor *w) { return w->data && w->dtype == SF_F32 && w->stride[0] == 1; }
#endif

/* Whether attention layer ly's decode step (T rows) runs on the fused
 * products of layer/dec_gemv.h: q/k/v with the input norm in the prologue,
 * o_proj adding into the residual stream, gate/up with the post-attention
 * norm and SwiGLU, down_proj adding into the stream.  The next layer's
 * norm is then in that layer's prologue, so the layer after one that runs
 * this way must too (or down_proj takes the old way, which writes m->h). */
static int dec_layer_ok(const sfm_model *m, const sfm_layer *ly, int64_t T) {
#ifdef SF_WITH_CUDA
    if (!m->dec_fuse || T > SF_DEC_NORM_MAX_ROWS || ly->mamba) return 0;
    if (!dec_norm_ok(&ly->in_norm) || !dec_norm_ok(&ly->post_norm)) return 0;
    const sfm_linear *qkv[3] = {&ly->qkv, NULL, NULL};
    void *out[3] = {m->qkv, NULL, NULL};
    if (!ly->qkv.n) qkv[0] = &ly->q, qkv[1] = &ly->k, qkv[2] = &ly->v, out[0] = m->q, out[1] = m->k, out[2] = m->v;
    sf_dec_gemv_args a;
    for (int i = 0; i < 3 && qkv[i]; i++) {
        if (!dec_weight_ok(m, qkv[i], 1)) return 0;
        dec_args(m, qkv[i], SF_DEC_PLAIN, NULL, &ly->in_norm, T, out[i], &a);
        if (sf_dec_gemv_supports(&a)) return 0;
    }
    if (!dec_weight_ok(m, &ly->o, 0) || !dec_weight_ok(m, &ly->down, 0)) return 0;
    if (ly->gate_up.n ? !dec_weight_ok(m, &ly->gate_up, 0) : !dec_weight_ok(m, &ly->gate, 0) || !dec_weight_ok(m, &ly->up, 0))
        return 0;
    dec_args(m, &ly->o, SF_DEC_RES, m->att, NULL, T, NULL, &a);
    if (sf_dec_gemv_supports(&a)) return 0;
    dec_args(m, &ly->down, SF_DEC_RES, m->a, NULL, T, NULL, &a);
    if (sf_dec_gemv_supports(&a)) return 0;
    dec_mlp_args(m, ly, T, &a);
    return sf_dec_gemv_supports(&a) == NULL;
#else
    (void)m, (void)ly, (void)T;
    return 0;
#endif
}

/* One product of a layer that dec_layer_ok accepted (on the GPU). */
static sf_status dec_linear(sfm_model *m, const sfm_linear *L, sf_dec_out out, const void *x, const sf_tensor *nw,
                            int64_t T, void *y) {
#ifdef SF_WITH_CUDA
    sf_dec_gemv_args a;
    dec_args(m, L, out, x, nw, T, y, &a);
    return sf_cuda_dec_gemv(m->ctx, &a);
#else
    (void)m, (void)L, (void)out, (void)x, (void)nw, (void)T, (void)y;
    return SF_ERR_UNSUPPORTED;
#endif
}
static sf_status dec_mlp(sfm_model *m, const sfm_layer *ly, int64_t T) {
#ifdef SF_WITH_CUDA
    sf_dec_gemv_args a;
    dec_mlp_args(m, ly, T, &a);
    return sf_cuda_dec_gemv(m->ctx, &a);
#else
    (void)m, (void)ly, (void)T;
    return SF_ERR_UNSUPPORTED;
#endif
}

#define STEP(call)                                                                                   \
    do {                                                                                             \
        sf_status s_ = (call);                                                                       \
        if (s_ != SF_OK)                                                                             \
            return sfm_model_fail(err, errlen, s_, "layer %d: %s: %s", l, #call, sf_ctx_last_error(m->ctx));  \
    } while (0)

/* Rows of x up to which the MLP takes sf_gemm_swiglu: the decode kernel's
 * range (one pass over the weights per 16 rows).  H200, llama-1b b1: 1.137
 * ms a step against 1.159 with sf_gemm + sf_swiglu (bench/RESULTS.md).
 * Prefill keeps cuBLAS, which serves every GPU. */
#define SFM_FUSED_MLP_MAX_ROWS 16

/* Whether layer ly's gate/up product and SwiGLU run as one sf_gemm_swiglu:
 * on the GPU in f16 / bf16, a decode step's few rows, dense weights of the
 * activations' dtype with unit stride along K and no bias. */
static int dense_like_act(const sfm_model *m, const sfm_linear *L) {
    return !L->quant && !L->bias.data && L->w.dtype == m->act && L->w.rank == 2 && L->w.stride[1] == 1;
}
static int fused_mlp_ok(const sfm_model *m, const sfm_layer *ly, int64_t T) {
    if (!m->fused_mlp || T > SFM_FUSED_MLP_MAX_ROWS) return 0;
    return ly->gate_up.n ? dense_like_act(m, &ly->gate_up) : dense_like_act(m, &ly->gate) && dense_like_act(m, &ly->up);
}

/* m->a (T, F) = silu(h Wg^T) * (h Wu^T): the stacked [gate; up] weight as
 * two row views, or the two weights. */
static sf_status fused_mlp(sfm_model *m, const sfm_layer *ly, int64_t T) {
    const int dev = sf_ctx_device(m->ctx);
    const int64_t F = m->cfg->intermediate_size, D = m->cfg->hidden_size;
    sf_gemm_swiglu_params p;
    sf_gemm_swiglu_params_init(&p);
    p.x = t2(m->h, m->act, dev, T, D);
    if (ly->gate_up.n) {
        p.w_gate = ly->gate_up.w;
        p.w_gate.shape[0] = F;
        p.w_up = p.w_gate;
        p.w_up.data = (char *)p.w_gate.data + (size_t)F * (size_t)p.w_gate.stride[0] * sf_dtype_size(m->act);
    } else {
        p.w_gate = ly->gate.w;
        p.w_up = ly->up.w;
    }
    p.y = t2(m->a, m->act, dev, T, F);
    return sf_gemm_swiglu(m->ctx, &p);
}

/* A decode step's paged attention of layer l: q (n, 1, H, d) from m->q
 * over the layer's pages, into m->att. */
static sf_status paged_decode(sfm_model *m, int l, int n, sf_tensor bt, sf_tensor lens_t) {
    const sfm_config *c = m->cfg;
    const int dev = sf_ctx_device(m->ctx);
    sf_attn_paged_params pp;
    sf_attn_paged_params_init(&pp);
    const int64_t sq[4] = {n, 1, c->num_heads, c->head_dim};
    pp.q = sf_tensor_contiguous(m->q, m->act, dev, 4, sq);
    pp.out = sf_tensor_contiguous(m->att, m->act, dev, 4, sq);
    pp.k_cache = m->kpool[l], pp.v_cache = m->vpool[l];
    pp.block_table = bt, pp.seqlens = lens_t;
    pp.causal = 1;
    return sf_attn_paged(m->ctx, &pp);
}

#ifdef SF_WITH_CUDA
/* The decode step's q/k/v product of attention layer l with the rotation
 * and the append in its epilogue (dec_gemv.h SF_DEC_QKV): the input norm
 * in its prologue, q into m->q, k and v into slot clen of each row's
 * pages. */
static void dec_qkv_args(const sfm_model *m, const sfm_layer *ly, int l, int n, const sfm_index *ix, sf_dec_gemv_args *a) {
    const sfm_config *c = m->cfg;
    dec_args(m, &ly->qkv, SF_DEC_QKV, NULL, &ly->in_norm, n, NULL, a);
    sf_dec_rope *r = &a->rope;
    r->q = m->q, r->k_cache = m->kpool[l].data, r->v_cache = m->vpool[l].data;
    r->cache_page_stride = m->kpool[l].stride[0], r->cache_row_stride = m->kpool[l].stride[1];
    if (m->vpool[l].stride[0] != r->cache_page_stride || m->vpool[l].stride[1] != r->cache_row_stride) r->v_cache = NULL;
    r->num_pages = (int)m->kpool[l].shape[0], r->page_size = m->page_size;
    r->pos = ix->pos, r->lens = ix->clen, r->block_table = ix->bt;
    r->bt_stride = m->max_pages_per_seq, r->max_pages = m->max_pages_per_seq;
    r->turns = m->rope_turns;
    r->qd = c->num_heads * c->head_dim, r->kd = c->num_kv_heads * c->head_dim, r->hd = c->head_dim, r->R = c->rope_dim;
}
#endif

/* How a prefill's causal attention is called: the GPU's warp-specialised
 * kernels take dense batches only, varlen ones run the slower cp.async
 * kernel.  Prompts of one length (a single prompt among them) go as one
 * dense batch; prompts of several lengths one dense call each when every
 * one fills the GPU alone (its 128-row query tiles times the heads: at
 * least PREFILL_FULL_TILES blocks, about one wave on 132 SMs; H100,
 * llama-1b, prompts of 4096 to 2560 tokens: 259k prefill tok/s against
 * 237k varlen); else one varlen call.  SF_AUTOTUNE_FORCE=
 * engine_prefill:varlen or :perseq pins the last two (a measuring aid). */
enum { PREFILL_DENSE, PREFILL_PER_SEQ, PREFILL_VARLEN };
#define PREFILL_FULL_TILES 128
static int prefill_attn_layout(const int32_t *cu, int n, int heads) {
    const int64_t L0 = cu[1] - cu[0];
    int same = L0 > 0, full = 1;
    for (int i = 0; i < n; i++) {
        const int64_t L = cu[i + 1] - cu[i];
        same = same && L == L0;
        full = full && L > 0 && (L + 127) / 128 * heads >= PREFILL_FULL_TILES;
    }
    if (same) return PREFILL_DENSE;
    char buf[16];
    const char *f = sf_autotune_forced_name("engine_prefill", buf, sizeof buf);
    if (f && !strcmp(f, "varlen")) return PREFILL_VARLEN;
    if (f && !strcmp(f, "perseq")) return PREFILL_PER_SEQ;
    return full ? PREFILL_PER_SEQ : PREFILL_VARLEN;
}

/* The layers over T rows of n sequences (m->tmp holds the embeddings), up
 * to the final norm's output in m->h; the index tensors are in ix (device),
 * cu and slots on the host too (a prefill's per-sequence calls).  Nothing
 * here allocates, synchronises or reads back: the decode step is
 * capturable. */
sf_status sfm_model_layers(sfm_model *m, int n, int64_t T, int decode, const sfm_index *ix, const int32_t *cu,
                           const int32_t *slots, char *err, size_t errlen) {
    const sfm_config *c = m->cfg;
    const int dev = sf_ctx_device(m->ctx);
    const int64_t hd = c->head_dim;
    const int H = c->num_heads, Hkv = c->num_kv_heads;
    const int MP = m->max_pages_per_seq;
    sf_status st;
    int l = 0;
    const sf_tensor bt = t2(ix->bt, SF_I32, dev, n, MP);
    const sf_tensor lens_t = sf_tensor_contiguous(ix->len, SF_I32, dev, 1, (int64_t[]){n});
    const sf_tensor clens_t = sf_tensor_contiguous(ix->clen, SF_I32, dev, 1, (int64_t[]){n});
    const sf_tensor cu_t = sf_tensor_contiguous(ix->cu, SF_I32, dev, 1, (int64_t[]){n + 1});
    const int64_t q3[3] = {T, H, hd}, k3[3] = {T, Hkv, hd};
    const sf_tensor qt = sf_tensor_contiguous(m->q, m->act, dev, 3, q3);
    const sf_tensor kt = sf_tensor_contiguous(m->k, m->act, dev, 3, k3);
    const sf_tensor vt = sf_tensor_contiguous(m->v, m->act, dev, 3, k3);
    const sf_tensor at = sf_tensor_contiguous(m->att, m->act, dev, 3, q3);

    l = 0;
    STEP(norm(m, m->tmp, &m->layers[0].in_norm, T, 1));
    int dec = decode && dec_layer_ok(m, &m->layers[0], T);
    for (l = 0; l < c->num_layers; l++) {
        const sfm_layer *ly = &m->layers[l];
        const sf_tensor *next_norm = l + 1 < c->num_layers ? &m->layers[l + 1].in_norm : &m->final_norm;
        /* this layer on the fused decode products (dec), and the next one */
        const int dec_next = decode && l + 1 < c->num_layers && dec_layer_ok(m, &m->layers[l + 1], T);
        if (ly->mamba) {
            if ((st = sfm_mamba_mixer(m, ly->mamba, n, T, cu, slots, ix->slots, decode, err, errlen)) != SF_OK) return st;
            if (c->arch == SFM_ARCH_MAMBA2) { /* no MLP: straight to the next layer's norm */
                STEP(linear_norm(m, &ly->mamba->out_proj, m->yn, T, next_norm));
                dec = dec_next;
                continue;
            }
            STEP(linear_norm(m, &ly->mamba->out_proj, m->yn, T, &ly->post_norm));
            goto mlp;
        }
        sf_rope_params rp;
        rope_params(m, ly, &rp);
#ifdef SF_WITH_CUDA
        if (dec && decode && ly->rope_pairs && m->rope_turns) {
            /* q/k/v, the rotation and the append in one launch (dec_gemv.h
             * SF_DEC_QKV), where it takes this layer's arguments */
            sf_dec_gemv_args a;
            dec_qkv_args(m, ly, l, n, ix, &a);
            if (!sf_dec_gemv_supports(&a)) {
                STEP(sf_cuda_dec_gemv(m->ctx, &a));
                STEP(paged_decode(m, l, n, bt, lens_t));
                goto attn_out;
            }
        }
#endif
        /* v: its own buffer, or its columns of the stacked product */
        sf_tensor vin = vt;
        if (ly->qkv.n) {
            /* one product; the rotation splits it: q and k rotated into their
             * buffers, v read in place from its columns */
            STEP(dec ? dec_linear(m, &ly->qkv, SF_DEC_PLAIN, NULL, &ly->in_norm, T, m->qkv)
                     : sfm_linear_apply(m, &ly->qkv, m->h, T, m->qkv));
            const int64_t QD = (int64_t)H * hd, KD = (int64_t)Hkv * hd, W = QD + 2 * KD;
            const size_t es = sf_dtype_size(m->act);
            rp.q = strided(m->qkv, m->act, dev, 3, q3, (int64_t[]){W, hd, 1});
            rp.k = strided((char *)m->qkv + (size_t)QD * es, m->act, dev, 3, k3, (int64_t[]){W, hd, 1});
            vin = strided((char *)m->qkv + (size_t)(QD + KD) * es, m->act, dev, 3, k3, (int64_t[]){W, hd, 1});
            rp.q_out = qt, rp.k_out = kt;
        } else {
            if (dec) {
                STEP(dec_linear(m, &ly->q, SF_DEC_PLAIN, NULL, &ly->in_norm, T, m->q));
                STEP(dec_linear(m, &ly->k, SF_DEC_PLAIN, NULL, &ly->in_norm, T, m->k));
                STEP(dec_linear(m, &ly->v, SF_DEC_PLAIN, NULL, &ly->in_norm, T, m->v));
            } else {
                STEP(sfm_linear_apply(m, &ly->q, m->h, T, m->q));
                STEP(sfm_linear_apply(m, &ly->k, m->h, T, m->k));
                STEP(sfm_linear_apply(m, &ly->v, m->h, T, m->v));
            }
            rp.q = qt, rp.k = kt;
        }
        rp.positions = sf_tensor_contiguous(ix->pos, SF_I32, dev, 1, (int64_t[]){T});
        STEP(sf_rope(m->ctx, &rp));
        sf_kv_append_params ap;
        sf_kv_append_params_init(&ap);
        ap.k_cache = m->kpool[l], ap.v_cache = m->vpool[l];
        if (decode) {
            const int64_t s4[4] = {n, 1, Hkv, hd};
            ap.k = sf_tensor_contiguous(m->k, m->act, dev, 4, s4);
            ap.v = strided(vin.data, m->act, dev, 4, s4,
                                     (int64_t[]){vin.stride[0], vin.stride[0], hd, 1});
            ap.block_table = bt, ap.cache_seqlens = clens_t;
            STEP(sf_kv_append(m->ctx, &ap));
            STEP(paged_decode(m, l, n, bt, lens_t));
        } else {
            /* each prompt's K/V into its pages (a call per sequence: lengths differ) */
            for (int i = 0; i < n; i++) {
                const int64_t s4[4] = {1, cu[i + 1] - cu[i], Hkv, hd};
                const size_t es = sf_dtype_size(m->act);
                const size_t off = (size_t)cu[i] * (size_t)(Hkv * hd) * es;
                ap.k = sf_tensor_contiguous((char *)m->k + off, m->act, dev, 4, s4);
                ap.v = strided((char *)vin.data + (size_t)cu[i] * (size_t)vin.stride[0] * es, m->act, dev, 4,
                                         s4, (int64_t[]){s4[1] * vin.stride[0], vin.stride[0], hd, 1});
                ap.block_table = t2((int32_t *)ix->bt + (int64_t)i * MP, SF_I32, dev, 1, MP);
                ap.cache_seqlens = sf_tensor_contiguous((int32_t *)ix->clen + i, SF_I32, dev, 1, (int64_t[]){1});
                STEP(sf_kv_append(m->ctx, &ap));
            }
            sf_attn_fwd_params fp;
            sf_attn_fwd_params_init(&fp);
            fp.causal = 1;
            const int layout = prefill_attn_layout(cu, n, H);
            if (layout == PREFILL_VARLEN) {
                fp.q = qt, fp.k = kt, fp.v = vin, fp.out = at;
                fp.cu_seqlens_q = cu_t, fp.cu_seqlens_k = cu_t;
                STEP(sf_attn_fwd(m->ctx, &fp));
            } else {
                /* a dense batch of b prompts of L0 tokens from token t0: all
                 * of them at once, or one a call */
                const size_t es = sf_dtype_size(m->act);
                const int64_t ws = vin.stride[0];
                for (int i = 0; i < n; i += layout == PREFILL_DENSE ? n : 1) {
                    const int64_t b = layout == PREFILL_DENSE ? n : 1, L0 = cu[i + 1] - cu[i], t0 = cu[i];
                    fp.q = sf_tensor_contiguous((char *)m->q + (size_t)(t0 * H * hd) * es, m->act, dev, 4,
                                                (int64_t[]){b, L0, H, hd});
                    fp.k = sf_tensor_contiguous((char *)m->k + (size_t)(t0 * Hkv * hd) * es, m->act, dev, 4,
                                                (int64_t[]){b, L0, Hkv, hd});
                    fp.v = strided((char *)vin.data + (size_t)(t0 * ws) * es, m->act, dev, 4,
                                   (int64_t[]){b, L0, Hkv, hd}, (int64_t[]){L0 * ws, ws, vin.stride[1], vin.stride[2]});
                    fp.out = sf_tensor_contiguous((char *)m->att + (size_t)(t0 * H * hd) * es, m->act, dev, 4,
                                                  (int64_t[]){b, L0, H, hd});
                    STEP(sf_attn_fwd(m->ctx, &fp));
                }
            }
        }
#ifdef SF_WITH_CUDA
    attn_out:; /* the fused q/k/v product above did the rotation and the append */
#endif
        sf_swiglu_params sp;
        if (dec) {
            STEP(dec_linear(m, &ly->o, SF_DEC_RES, m->att, NULL, T, NULL));
            STEP(dec_mlp(m, ly, T));
            if (dec_next) STEP(dec_linear(m, &ly->down, SF_DEC_RES, m->a, NULL, T, NULL));
            else STEP(linear_norm(m, &ly->down, m->a, T, next_norm));
            dec = dec_next;
            continue;
        }
        STEP(linear_norm(m, &ly->o, m->att, T, &ly->post_norm));
    mlp:
        dec = dec_next;
        if (fused_mlp_ok(m, ly, T)) {
            STEP(fused_mlp(m, ly, T));
            STEP(linear_norm(m, &ly->down, m->a, T, next_norm));
            continue;
        }
        sf_swiglu_params_init(&sp);
        if (ly->gate_up.n) { /* one product, [gate | up] a row */
            STEP(sfm_linear_apply(m, &ly->gate_up, m->h, T, m->g));
            sp.layout = SF_SWIGLU_CONCAT;
            sp.gate = t2(m->g, m->act, dev, T, 2 * c->intermediate_size);
        } else {
            STEP(sfm_linear_apply(m, &ly->gate, m->h, T, m->g));
            STEP(sfm_linear_apply(m, &ly->up, m->h, T, m->u));
            sp.gate = t2(m->g, m->act, dev, T, c->intermediate_size);
            sp.up = t2(m->u, m->act, dev, T, c->intermediate_size);
        }
        sp.out = t2(m->a, m->act, dev, T, c->intermediate_size);
        STEP(sf_swiglu(m->ctx, &sp));
        STEP(linear_norm(m, &ly->down, m->a, T, next_norm));
    }
    return SF_OK;
}

sf_status sfm_model_forward(sfm_model *m, int n, const int32_t *ids, const int64_t *lens,
                            const int64_t *start, const int32_t *block_table, const int32_t *slots,
                            float *logits, char *err, size_t errlen) {
    const sfm_config *c = m->cfg;
    const int64_t D = c->hidden_size, V = c->vocab_size;
    const int MP = m->max_pages_per_seq;
    if (n < 1 || n > m->max_seqs) return sfm_model_fail(err, errlen, SF_ERR_INVALID_ARG, "batch of %d sequences (1 to %d)", n, m->max_seqs);
    int64_t T = 0;
    int decode = 1;
    for (int i = 0; i < n; i++) {
        if (lens[i] < 1 || start[i] < 0 || start[i] + lens[i] > (int64_t)MP * m->page_size)
            return sfm_model_fail(err, errlen, SF_ERR_INVALID_ARG, "sequence %d: %lld new tokens at %lld do not fit", i, (long long)lens[i],
                        (long long)start[i]);
        /* a one-token prompt (start 0) is a prefill: a decode step reads the
         * Mamba layers' states, which a prompt's prefill writes first */
        if (lens[i] != 1 || start[i] == 0) decode = 0;
        T += lens[i];
    }
    if (!decode)
        for (int i = 0; i < n; i++)
            if (start[i] != 0) return sfm_model_fail(err, errlen, SF_ERR_INVALID_ARG, "a prefill starts at position 0 (sequence %d at %lld)", i, (long long)start[i]);
    sf_status st = ensure_rows(m, T, err, errlen);
    if (st != SF_OK) return st;
    /* host side: embedding rows and index buffers */
    for (int64_t t = 0; t < T; t++) {
        if (ids[t] < 0 || ids[t] >= V) return sfm_model_fail(err, errlen, SF_ERR_INDEX, "token id %d is outside the vocabulary (%lld)", ids[t], (long long)V);
        if (!m->table.data) memcpy(m->stage + t * D, m->embed + (int64_t)ids[t] * D, (size_t)D * 4);
    }
    int32_t *pos = m->pos_h, *cu = pos + T, *len = cu + n + 1, *clen = len + n;
    cu[0] = 0;
    for (int i = 0, t = 0; i < n; i++) {
        for (int64_t j = 0; j < lens[i]; j++) pos[t++] = (int32_t)(start[i] + j);
        cu[i + 1] = cu[i] + (int32_t)lens[i];
        clen[i] = (int32_t)start[i];
        len[i] = (int32_t)(start[i] + lens[i]);
    }
    int l = -1;
    if (m->table.data) { /* the lookup on the device (step.c made the table) */
        STEP(sf_memcpy(m->ctx, m->ids_d, ids, (size_t)T * 4));
        const sf_tensor it = sf_tensor_contiguous(m->ids_d, SF_I32, sf_ctx_device(m->ctx), 1, (int64_t[]){T});
        const sf_tensor ot = sf_tensor_contiguous(m->tmp, m->act, sf_ctx_device(m->ctx), 2, (int64_t[]){T, D});
        STEP(sf_embed(m->ctx, &m->table, &it, &ot));
    } else {
        sfm_f32_to(m->act, m->stage, m->stage, T * D);
        STEP(sf_memcpy(m->ctx, m->tmp, m->stage, (size_t)(T * D) * sf_dtype_size(m->act)));
    }
    STEP(sf_memcpy(m->ctx, m->pos_d, pos, (size_t)T * 4));
    STEP(sf_memcpy(m->ctx, m->cu_d, cu, (size_t)(n + 1) * 4));
    STEP(sf_memcpy(m->ctx, m->len_d, len, (size_t)n * 4));
    STEP(sf_memcpy(m->ctx, m->clen_d, clen, (size_t)n * 4));
    STEP(sf_memcpy(m->ctx, m->bt_d, block_table, (size_t)n * MP * 4));
    for (int i = 0; i < n; i++)
        if (slots[i] < 0 || slots[i] >= m->max_seqs) return sfm_model_fail(err, errlen, SF_ERR_INDEX, "state slot %d of sequence %d", slots[i], i);
    STEP(sf_memcpy(m->ctx, m->slots_d, slots, (size_t)n * 4));

    const sfm_index ix = {m->pos_d, m->cu_d, m->len_d, m->clen_d, m->slots_d, m->bt_d};
    if ((st = sfm_model_layers(m, n, T, decode, &ix, cu, slots, err, errlen)) != SF_OK) return st;
    l = c->num_layers;
    const size_t es = sf_dtype_size(m->act);
    if (decode) {
        STEP(sfm_linear_apply(m, &m->lm_head, m->h, n, m->logits));
    } else {
        for (int i = 0; i < n; i++)
            STEP(sfm_linear_apply(m, &m->lm_head, (char *)m->h + (size_t)(cu[i + 1] - 1) * (size_t)D * es, 1,
                        (char *)m->logits + (size_t)i * (size_t)V * es));
    }
    if (!logits) return SF_OK; /* the caller samples on the device */
    return sfm_model_logits_host(m, n, logits, err, errlen);
}

sf_status sfm_model_logits_host(sfm_model *m, int n, float *logits, char *err, size_t errlen) {
    const int64_t V = m->cfg->vocab_size;
    const size_t es = sf_dtype_size(m->act);
    int l = m->cfg->num_layers;
    STEP(sf_memcpy(m->ctx, m->logits_h, m->logits, (size_t)(n * V) * es));
    const uint16_t *lh = m->logits_h;
    if (m->act == SF_F32) {
        memcpy(logits, m->logits_h, (size_t)(n * V) * 4);
    } else {
        for (int64_t i = 0; i < n * V; i++) {
            uint32_t u = (uint32_t)lh[i] << 16;
            if (m->act == SF_F16) logits[i] = half_to_f32(lh[i]);
            else memcpy(&logits[i], &u, 4);
        }
    }
    return SF_OK;
}
