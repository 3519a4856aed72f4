/* test_graph.c - CUDA graphs: the public graph API (sf_graph_begin / end /
 * launch, sf_malloc_host, sf_memcpy_async) and the capture of the paged
 * decode (sf_attn_paged).
 *
 * Public API:
 *  a. a few ops (an upload from pinned memory, two sf_gemm, sf_swiglu, a
 *     download into pinned memory) captured once and replayed with new
 *     inputs written into the pinned buffer: each replay equals the same
 *     calls run directly, bit for bit;
 *  b. errors: sf_graph_end without sf_graph_begin, sf_graph_begin on the
 *     legacy default stream, a captured call that fails (sf_graph_end
 *     returns its status and sentence and the stream is usable after),
 *     a captured copy from pageable memory, a captured call whose
 *     workspace would have to grow (SF_ERR_OUT_OF_MEMORY), a launch during
 *     a capture.
 * Paged decode (raw CUDA capture):
 *  1. A capture on a context whose workspace is too small: the call fails
 *     with SF_ERR_OUT_OF_MEMORY (no cudaMalloc inside the capture) and the
 *     capture itself stays valid.
 *  2. Captured once after a warm-up, replayed after the lengths and the
 *     block table changed in place on the device: each replay equals a
 *     fresh call bit for bit (the split count follows the lengths on the
 *     device).
 *  3. The workspace grows after the capture: the graph's block is kept, so
 *     the replay still gives the same bits (compute-sanitizer memcheck
 *     would flag a freed block).
 * The random inputs come from a seed printed first (SF_SEED overrides).
 * Skipped (77) without a CUDA device. */
#include <cuda_runtime_api.h>


#include "gpu_test.h"

#define B 3
#define HQ 8
#define HKV 2
#define D 128
#define PS 16
#define MP 64 /* pages per sequence: up to 1024 keys */
#define NPAGES (B * MP)

static sf_ctx *gpu;

#define CU(call)                                                                                     \
    do {                                                                                             \
        cudaError_t e_ = (call);                                                                     \
        if (e_ != cudaSuccess) {                                                                     \
            printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_));                                  \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

static void *dev_fill_bf16(size_t n) {
    uint16_t *h = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = to_bf16((float)urand(-1, 1));
    void *d;
    CK(sf_malloc(gpu, &d, n * 2));
    CK(sf_memcpy(gpu, d, h, n * 2));
    free(h);
    return d;
}

/* a block table of distinct pages in a shuffled order */
static void make_table(int32_t *bt) {
    for (int i = 0; i < NPAGES; i++) bt[i] = i;
    for (int i = NPAGES - 1; i > 0; i--) {
        const int j = (int)urand(0, i + 1) % (i + 1);
        const int32_t t = bt[i];
        bt[i] = bt[j], bt[j] = t;
    }
}

/* ---- the public graph API ---- */

#define M 5    /* rows */
#define K 96   /* input width */
#define N 160  /* gate / up width */

#define EXPECT_ST(call, want, what)                                                                  \
    do {                                                                                             \
        const sf_status got_ = (call);                                                               \
        if (got_ != (want)) {                                                                        \
            printf("FAIL %s: %s gave %s (%s), want %s\n", what, #call, sf_status_string(got_),       \
                   sf_ctx_last_error(gpu), sf_status_string(want));                                  \
            failures++;                                                                              \
        }                                                                                            \
    } while (0)

typedef struct mlp_bufs {
    void *x, *wg, *wu, *bias, *g, *u, *o;
} mlp_bufs;

/* x (M, K) -> g = x Wg^T + b, u = x Wu^T, o = silu(g) * u (all bf16 but b). */
static sf_status mlp(sf_ctx *c, const mlp_bufs *b) {
    sf_gemm_params gp;
    sf_gemm_params_init(&gp);
    gp.x = sf_tensor_contiguous(b->x, SF_BF16, 0, 2, (int64_t[]){M, K});
    gp.w = sf_tensor_contiguous(b->wg, SF_BF16, 0, 2, (int64_t[]){N, K});
    gp.bias = sf_tensor_contiguous(b->bias, SF_F32, 0, 1, (int64_t[]){N});
    gp.y = sf_tensor_contiguous(b->g, SF_BF16, 0, 2, (int64_t[]){M, N});
    sf_status s = sf_gemm(c, &gp);
    if (s != SF_OK) return s;
    gp.w = sf_tensor_contiguous(b->wu, SF_BF16, 0, 2, (int64_t[]){N, K});
    gp.bias = (sf_tensor){0};
    gp.y = sf_tensor_contiguous(b->u, SF_BF16, 0, 2, (int64_t[]){M, N});
    if ((s = sf_gemm(c, &gp)) != SF_OK) return s;
    sf_swiglu_params sp;
    sf_swiglu_params_init(&sp);
    sp.gate = sf_tensor_contiguous(b->g, SF_BF16, 0, 2, (int64_t[]){M, N});
    sp.up = sf_tensor_contiguous(b->u, SF_BF16, 0, 2, (int64_t[]){M, N});
    sp.out = sf_tensor_contiguous(b->o, SF_BF16, 0, 2, (int64_t[]){M, N});
    return sf_swiglu(c, &sp);
}

static int api_tests(void) {
    int failures = 0;
    sf_graph *g = NULL;
    /* b: the legacy default stream cannot be captured; end without begin */
    CK(sf_ctx_create(&gpu, 0));
    EXPECT_ST(sf_graph_begin(gpu), SF_ERR_UNSUPPORTED, "begin on the legacy stream");
    EXPECT_ST(sf_graph_end(gpu, &g), SF_ERR_INVALID_ARG, "end without begin");
    EXPECT_ST(sf_graph_launch(gpu, NULL), SF_ERR_NULL_POINTER, "launch of NULL");
    sf_graph_destroy(NULL);
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(sf_ctx_set_stream(gpu, s));

    /* a: capture, replay with new inputs, compare with direct calls */
    const size_t nx = (size_t)M * K, nw = (size_t)N * K, no = (size_t)M * N;
    mlp_bufs b, d; /* the graph's buffers and the direct calls' */
    b.wg = dev_fill_bf16(nw), b.wu = dev_fill_bf16(nw);
    float hb[N];
    for (int i = 0; i < N; i++) hb[i] = (float)urand(-1, 1);
    CK(sf_malloc(gpu, &b.bias, sizeof hb));
    CK(sf_memcpy(gpu, b.bias, hb, sizeof hb));
    CK(sf_malloc(gpu, &b.x, nx * 2));
    CK(sf_malloc(gpu, &b.g, no * 2));
    CK(sf_malloc(gpu, &b.u, no * 2));
    CK(sf_malloc(gpu, &b.o, no * 2));
    d = b;
    CK(sf_malloc(gpu, &d.x, nx * 2));
    CK(sf_malloc(gpu, &d.g, no * 2));
    CK(sf_malloc(gpu, &d.u, no * 2));
    CK(sf_malloc(gpu, &d.o, no * 2));
    uint16_t *pin_x, *pin_o, *hd = xmalloc(no * 2);
    CK(sf_malloc_host(gpu, (void **)&pin_x, nx * 2));
    CK(sf_malloc_host(gpu, (void **)&pin_o, no * 2));
    for (size_t i = 0; i < nx; i++) pin_x[i] = to_bf16((float)urand(-1, 1));
    CK(sf_memcpy(gpu, b.x, pin_x, nx * 2));
    CK(mlp(gpu, &b)); /* warm-up: cuBLAS's handle, the workspace */
    CK(sf_ctx_synchronize(gpu));
    CK(sf_graph_begin(gpu));
    CK(sf_memcpy_async(gpu, b.x, pin_x, nx * 2));
    CK(mlp(gpu, &b));
    CK(sf_memcpy_async(gpu, pin_o, b.o, no * 2));
    CK(sf_graph_end(gpu, &g));
    for (int round = 0; round < 4; round++) {
        for (size_t i = 0; i < nx; i++) pin_x[i] = to_bf16((float)urand(-2, 2));
        for (size_t i = 0; i < no; i++) pin_o[i] = 0x7fc0; /* NaN: a replay must overwrite every element */
        CK(sf_graph_launch(gpu, g));
        CK(sf_ctx_synchronize(gpu));
        CK(sf_memcpy(gpu, d.x, pin_x, nx * 2));
        CK(mlp(gpu, &d));
        CK(sf_memcpy(gpu, hd, d.o, no * 2));
        size_t diff = 0, nan = 0;
        for (size_t i = 0; i < no; i++) diff += pin_o[i] != hd[i], nan += (pin_o[i] & 0x7fffu) > 0x7f80u;
        if (diff || nan) {
            printf("FAIL replay %d of the captured MLP: %zu of %zu elements differ from direct calls, %zu NaN\n",
                   round, diff, no, nan);
            failures++;
        }
    }
    EXPECT_ST(sf_graph_launch(gpu, g), SF_OK, "another replay");
    CK(sf_ctx_synchronize(gpu));

    /* b: a captured call that fails: the capture is abandoned with its status */
    CK(sf_graph_begin(gpu));
    EXPECT_ST(sf_graph_launch(gpu, g), SF_ERR_INVALID_ARG, "launch inside a capture");
    CK(sf_memcpy_async(gpu, b.x, pin_x, nx * 2));
    sf_swiglu_params bad;
    sf_swiglu_params_init(&bad);
    bad.gate = sf_tensor_contiguous(b.g, SF_BF16, 0, 2, (int64_t[]){M, N});
    bad.up = sf_tensor_contiguous(b.u, SF_BF16, 0, 2, (int64_t[]){M, N - 1});
    bad.out = sf_tensor_contiguous(b.o, SF_BF16, 0, 2, (int64_t[]){M, N});
    const sf_status bs = sf_swiglu(gpu, &bad);
    CK(mlp(gpu, &b)); /* later calls still record; the end reports the failure */
    sf_graph *g2 = (sf_graph *)&g2; /* must come back NULL */
    const sf_status es = sf_graph_end(gpu, &g2);
    if (bs == SF_OK || es != bs || g2 != NULL || !strstr(sf_ctx_last_error(gpu), "sf_swiglu")) {
        printf("FAIL a failing captured call: call %s, end %s (%s), graph %p\n", sf_status_string(bs),
               sf_status_string(es), sf_ctx_last_error(gpu), (void *)g2);
        failures++;
    }
    enum cudaStreamCaptureStatus cs;
    CU(cudaStreamIsCapturing(s, &cs));
    if (cs != cudaStreamCaptureStatusNone) {
        printf("FAIL the stream is still captured after an abandoned capture\n");
        failures++;
    }
    EXPECT_ST(mlp(gpu, &d), SF_OK, "a call after an abandoned capture");
    EXPECT_ST(sf_ctx_synchronize(gpu), SF_OK, "sync after an abandoned capture");

    /* b: a copy from pageable memory cannot be captured */
    CK(sf_graph_begin(gpu));
    EXPECT_ST(sf_memcpy_async(gpu, b.x, hd, nx * 2), SF_ERR_INVALID_ARG, "captured copy from pageable memory");
    g2 = NULL;
    EXPECT_ST(sf_graph_end(gpu, &g2), SF_ERR_INVALID_ARG, "end after a pageable copy");
    if (g2) failures++, printf("FAIL a graph came back from an abandoned capture\n");

    /* b: a call whose workspace would have to grow inside the capture */
    sf_ctx *fresh;
    CK(sf_ctx_create(&fresh, 0));
    CK(sf_ctx_set_stream(fresh, s));
    CK(sf_graph_begin(fresh));
    sf_swiglu_params ok;
    sf_swiglu_params_init(&ok);
    ok.gate = bad.gate, ok.out = bad.out;
    ok.up = sf_tensor_contiguous(b.u, SF_BF16, 0, 2, (int64_t[]){M, N});
    EXPECT_ST(sf_swiglu(fresh, &ok), SF_OK, "a workspace-free call in a capture");
    /* cuBLAS's handle cannot be made inside a capture either */
    const sf_status gs = mlp(fresh, &b);
    g2 = NULL;
    const sf_status es2 = sf_graph_end(fresh, &g2);
    if (gs == SF_OK || es2 != gs || g2) {
        printf("FAIL a first sf_gemm inside a capture: call %s, end %s (%s)\n", sf_status_string(gs),
               sf_status_string(es2), sf_ctx_last_error(fresh));
        failures++;
    }
    sf_graph_destroy(g2);
    /* the handle exists now (a direct call, which also sizes the arena for
     * 5 rows); 4096 rows with a bias need a bigger f32 buffer there */
    CK(sf_ctx_synchronize(fresh));
    EXPECT_ST(mlp(fresh, &b), SF_OK, "a direct call after the abandoned capture");
    const int64_t BIG = 4096;
    void *bx, *by;
    CK(sf_malloc(gpu, &bx, (size_t)BIG * K * 2));
    CK(sf_malloc(gpu, &by, (size_t)BIG * N * 2));
    CK(sf_memcpy(gpu, bx, pin_x, nx * 2)); /* the rest stays garbage: only the status matters */
    sf_gemm_params gp;
    sf_gemm_params_init(&gp);
    gp.x = sf_tensor_contiguous(bx, SF_BF16, 0, 2, (int64_t[]){BIG, K});
    gp.w = sf_tensor_contiguous(b.wg, SF_BF16, 0, 2, (int64_t[]){N, K});
    gp.bias = sf_tensor_contiguous(b.bias, SF_F32, 0, 1, (int64_t[]){N});
    gp.y = sf_tensor_contiguous(by, SF_BF16, 0, 2, (int64_t[]){BIG, N});
    CK(sf_graph_begin(fresh));
    const sf_status ws = sf_gemm(fresh, &gp);
    g2 = NULL;
    const sf_status es3 = sf_graph_end(fresh, &g2);
    if (ws != SF_ERR_OUT_OF_MEMORY || es3 != ws || g2 || !strstr(sf_ctx_last_error(fresh), "captured")) {
        printf("FAIL a captured call whose workspace must grow: call %s, end %s (%s)\n", sf_status_string(ws),
               sf_status_string(es3), sf_ctx_last_error(fresh));
        failures++;
    }
    EXPECT_ST(sf_gemm(fresh, &gp), SF_OK, "the same call outside the capture (the arena grows)");
    CK(sf_ctx_synchronize(fresh));
    sf_free(gpu, bx), sf_free(gpu, by);
    sf_ctx_destroy(fresh);

    sf_graph_destroy(g);
    CK(sf_free_host(gpu, pin_x));
    CK(sf_free_host(gpu, pin_o));
    CK(sf_free_host(gpu, NULL));
    free(hd);
    void *bufs[] = {b.x, b.wg, b.wu, b.bias, b.g, b.u, b.o, d.x, d.g, d.u, d.o};
    for (int i = 0; i < 11; i++) sf_free(gpu, bufs[i]);
    sf_ctx_destroy(gpu);
    gpu = NULL;
    CU(cudaStreamDestroy(s));
    printf("%s test_graph: API: 5 replays of a captured MLP equal direct calls; capture errors\n",
           failures ? "FAIL" : "PASS");
    return failures;
}

#undef M
#undef K
#undef N

/* ---- the paged decode under a raw capture ---- */

static int paged_tests(void) {
    CK(sf_ctx_create(&gpu, 0));
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(sf_ctx_set_stream(gpu, s));

    const size_t nq = (size_t)B * HQ * D, npool = (size_t)NPAGES * PS * HKV * D;
    void *q = dev_fill_bf16(nq), *kc = dev_fill_bf16(npool), *vc = dev_fill_bf16(npool);
    void *out, *fresh, *bt_d, *lens_d;
    CK(sf_malloc(gpu, &out, nq * 2));
    CK(sf_malloc(gpu, &fresh, nq * 2));
    CK(sf_malloc(gpu, &bt_d, sizeof(int32_t) * NPAGES));
    CK(sf_malloc(gpu, &lens_d, sizeof(int32_t) * B));
    int32_t bt[NPAGES], lens[B] = {1, 300, 1000};
    make_table(bt);
    CK(sf_memcpy(gpu, bt_d, bt, sizeof bt));
    CK(sf_memcpy(gpu, lens_d, lens, sizeof lens));

    sf_attn_paged_params p;
    sf_attn_paged_params_init(&p);
    p.q = sf_tensor_contiguous(q, SF_BF16, 0, 4, (int64_t[]){B, 1, HQ, D});
    p.k_cache = sf_tensor_contiguous(kc, SF_BF16, 0, 4, (int64_t[]){NPAGES, PS, HKV, D});
    p.v_cache = sf_tensor_contiguous(vc, SF_BF16, 0, 4, (int64_t[]){NPAGES, PS, HKV, D});
    p.block_table = sf_tensor_contiguous(bt_d, SF_I32, 0, 2, (int64_t[]){B, MP});
    p.seqlens = sf_tensor_contiguous(lens_d, SF_I32, 0, 1, (int64_t[]){B});
    p.out = sf_tensor_contiguous(out, SF_BF16, 0, 4, (int64_t[]){B, 1, HQ, D});
    p.causal = 1;
    sf_attn_paged_params fp = p;
    fp.out = sf_tensor_contiguous(fresh, SF_BF16, 0, 4, (int64_t[]){B, 1, HQ, D});
    int failures = 0;

    /* 1: an empty arena cannot grow inside a capture */
    cudaGraph_t g;
    CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const sf_status st = sf_attn_paged(gpu, &p);
    const cudaError_t ce = cudaStreamEndCapture(s, &g);
    if (st != SF_ERR_OUT_OF_MEMORY || !strstr(sf_ctx_last_error(gpu), "captured") || ce != cudaSuccess) {
        printf("FAIL capture with an empty workspace: %s (%s), end capture: %s\n", sf_status_string(st),
               sf_ctx_last_error(gpu), cudaGetErrorString(ce));
        failures++;
    }
    if (ce == cudaSuccess) CU(cudaGraphDestroy(g));

    /* 2: warm-up, capture, replays with new lengths and tables */
    CK(sf_attn_paged(gpu, &p));
    CK(sf_ctx_synchronize(gpu));
    CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(sf_attn_paged(gpu, &p));
    CU(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    CU(cudaGraphInstantiate(&ge, g, 0));
    const int32_t new_lens[4][B] = {{700, 17, 0}, {1024, 1, 513}, {256, 1000, 1}, {5, 5, 1024}};
    uint16_t *ho = xmalloc(nq * 2), *hf = xmalloc(nq * 2);
    for (int round = 0; round < 5; round++) {
        if (round == 4) /* 3: the arena grows; the graph's block must survive */
            CK(sf_ctx_reserve_workspace(gpu, sf_ctx_workspace_size(gpu) * 4 + (1 << 20)));
        const int32_t *nl = new_lens[round % 4];
        if (round % 2 == 1) make_table(bt);
        CU(cudaMemcpyAsync(lens_d, nl, sizeof lens, cudaMemcpyHostToDevice, s));
        CU(cudaMemcpyAsync(bt_d, bt, sizeof bt, cudaMemcpyHostToDevice, s));
        CU(cudaGraphLaunch(ge, s));
        CK(sf_ctx_synchronize(gpu));
        CK(sf_attn_paged(gpu, &fp));
        CK(sf_ctx_synchronize(gpu));
        CK(sf_memcpy(gpu, ho, out, nq * 2));
        CK(sf_memcpy(gpu, hf, fresh, nq * 2));
        size_t diff = 0;
        for (size_t i = 0; i < nq; i++) diff += ho[i] != hf[i];
        /* a sequence of length 0 gives zeros; every other row has values */
        size_t zeros = 0;
        for (size_t i = 0; i < nq; i++) zeros += (ho[i] & 0x7fffu) == 0;
        size_t want_zeros = 0;
        for (int b = 0; b < B; b++) want_zeros += nl[b] == 0 ? (size_t)HQ * D : 0;
        if (diff || zeros < want_zeros || zeros > want_zeros + nq / 100) {
            printf("FAIL replay %d (lengths %d %d %d): %zu elements differ from a fresh call, %zu zeros "
                   "(%zu expected)\n", round, nl[0], nl[1], nl[2], diff, zeros, want_zeros);
            failures++;
        }
    }
    CU(cudaGraphExecDestroy(ge));
    CU(cudaGraphDestroy(g));
    free(ho);
    free(hf);
    sf_free(gpu, q), sf_free(gpu, kc), sf_free(gpu, vc), sf_free(gpu, out), sf_free(gpu, fresh);
    sf_free(gpu, bt_d), sf_free(gpu, lens_d);
    sf_ctx_destroy(gpu);
    CU(cudaStreamDestroy(s));
    printf("%s test_graph: paged decode: capture refusal, 5 replays with new lengths/tables\n", failures ? "FAIL" : "PASS");
    return failures;
}

int main(void) {
    const int start = gpu_test_start("test_graph");
    if (start) return start;
    int failures = api_tests();
    failures += paged_tests();
    return failures ? 1 : 0;
}
