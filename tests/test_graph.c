/* test_graph.c - CUDA graph capture of the paged decode (sf_attn_paged).
 *
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

int main(void) {
    if (sf_cuda_device_count() < 1) {
        printf("SKIP test_graph: no CUDA device\n");
        return 77;
    }
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
    printf("%s test_graph: capture refusal, 5 replays with new lengths/tables\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
