/* cases.c - the case table shared by the tests, the CLI and the benchmarks,
 * the ops' names and tolerances (case_run.c runs a case).  See cases.h. */
#define _POSIX_C_SOURCE 200809L
#include "cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INF_ 0.0f /* dt_max 0 in the table: unbounded */

/* The table.  Shapes that break kernels: L not a multiple of the chunk or
 * tile, L = 1, several chunks, G in {1, 2, H}, GQA ratios, windows, varlen
 * with length-1 and empty sequences, strided views, the largest head dim. */
#define SSD(nm, b_, L_, H_, P_, G_, N_, ch) \
    .name = nm, .op = SFC_SSD_FWD, .b = b_, .L = L_, .H = H_, .P = P_, .G = G_, .N = N_, .chunk = ch
#define STEP(nm, b_, H_, P_, G_, N_, slots) \
    .name = nm, .op = SFC_SSD_STEP, .b = b_, .L = 1, .H = H_, .P = P_, .G = G_, .N = N_, .nslots = slots
#define CONV(nm, b_, L_, dim_, w_) \
    .name = nm, .op = SFC_CONV1D_FWD, .b = b_, .L = L_, .dim = dim_, .width = w_
#define CONVU(nm, b_, dim_, w_, slots) \
    .name = nm, .op = SFC_CONV1D_UPDATE, .b = b_, .L = 1, .dim = dim_, .width = w_, .nslots = slots
#define RMSN(nm, rows, D_, grp) \
    .name = nm, .op = SFC_RMSNORM_GATED, .b = rows, .L = 1, .dim = D_, .group = grp
#define NORM(nm, op_, rows, D_) .name = nm, .op = op_, .b = rows, .L = 1, .dim = D_
#define SWI(nm, rows, n_, lay) .name = nm, .op = SFC_SWIGLU, .b = rows, .L = 1, .dim = n_, .layout = lay
#define ROPE(nm, T_, H_, Hkv_, d_) .name = nm, .op = SFC_ROPE, .b = 1, .L = T_, .H = H_, .Hkv = Hkv_, .d = d_
#define GWQ(nm, M_, n_, k_, bits_, g_) \
    .name = nm, .op = SFC_GEMM_WQ, .b = M_, .L = 1, .wq_n = n_, .wq_k = k_, .wq_bits = bits_, .wq_group = g_
#define ALL_OPTS .z = 1, .dt_bias = 1, .softplus = 1, .init = 1, .final = 1
const sfc_case sfc_cases[] = {
    {SSD("ssd_basic", 2, 200, 4, 16, 1, 16, 64), .D = 1},
    /* L 1: the output is dt x (B . C) per head, one short dot product for all
     * heads of a group; D keeps its relative error from hinging on that sum */
    {SSD("ssd_L1", 1, 1, 2, 8, 1, 16, 64), .D = 1},
    {SSD("ssd_full", 2, 300, 4, 32, 2, 32, 128), .D = 2, ALL_OPTS, .dt_min = 0.001f, .dt_max = 0.2f},
    {SSD("ssd_g_eq_h", 1, 129, 4, 16, 4, 16, 64), .D = 1, ALL_OPTS},
    {SSD("ssd_chunk256", 1, 700, 2, 64, 1, 64, 256), .D = 1, .z = 1, .dt_bias = 1, .softplus = 1, .final = 1},
    {SSD("ssd_cu_seqlens", 1, 330, 4, 16, 2, 16, 64), .D = 1, ALL_OPTS, .varlen = 2,
     .seqlens = {100, 1, 0, 165, 64}, .nseq = 5},
    {SSD("ssd_seq_idx", 2, 250, 2, 16, 1, 32, 64), .D = 1, .init = 1, .final = 1, .varlen = 1,
     .seqlens = {70, 1, 179}, .nseq = 3},
    {SSD("ssd_strided", 2, 150, 4, 16, 2, 16, 64), .D = 2, ALL_OPTS, .strided = 1},
    /* sequences that start exactly on chunk boundaries after the first chunk */
    {SSD("ssd_cu_on_chunk", 1, 200, 2, 16, 1, 16, 64), .D = 1, ALL_OPTS, .varlen = 2,
     .seqlens = {64, 64, 72}, .nseq = 3},
    {SSD("ssd_seq_idx_on_chunk", 2, 256, 2, 16, 2, 16, 64), .D = 1, .init = 1, .final = 1,
     .varlen = 1, .seqlens = {128, 64, 64}, .nseq = 3},
    /* shapes the sm_90a path serves (16-bit, dense, chunk 128 / 256, P % 64 == 0,
     * N % 8 == 0): two P tiles, two groups of 3 heads, N 40 (zero-padded
     * columns), partial last chunk, every option; and 20 heads of one group
     * (runs of 8, 8 and 4 heads per block) without z, with initial states */
    {SSD("ssd_wg_full", 2, 333, 6, 128, 2, 40, 128), .D = 2, ALL_OPTS, .dt_min = 0.001f, .dt_max = 0.3f},
    /* the f32 split32 output kernel (ssd_out_sc32) at chunk 256: two P tiles,
     * two groups of 3 heads, N 40 (zero-padded), a partial last chunk of 88
     * tokens (a partial second row block), every option */
    {SSD("ssd_sc32_full", 2, 600, 6, 128, 2, 40, 256), .D = 2, ALL_OPTS, .dt_min = 0.001f, .dt_max = 0.3f},
    {SSD("ssd_wg_heads", 1, 300, 20, 64, 1, 128, 256), .D = 1, .init = 1, .final = 1, .dt_bias = 1, .softplus = 1},
    /* the sm_90a paths (16-bit, and f32 on TF32 wgmma: fs32 / fo32 / fq32) on
     * padded-stride views: two groups of 2 heads (head pairs), N 32, a
     * partial last chunk, every option */
    {SSD("ssd_wg_strided", 2, 300, 4, 64, 2, 32, 128), .D = 2, ALL_OPTS, .strided = 1},
    /* enough chunks for the segmented f32 state pass (fg32: segments of 8
     * chunks): 14 chunks of 128 (segments 8 + 6, a partial last chunk),
     * every option; 12 chunks of 256 (8 + 4, a partial last chunk of 84
     * tokens), two P tiles, N 128,
     * initial states but no final states (the last segment's state is not
     * made then) */
    /* empty: no tokens (final states = initial states), no batch rows */
    {SSD("ssd_empty_L", 2, 0, 4, 16, 2, 8, 64), .init = 1, .final = 1},
    {SSD("ssd_empty_b", 0, 40, 4, 16, 2, 8, 64), .final = 1},
    {SSD("ssd_seg128", 2, 1701, 4, 64, 2, 64, 128), .D = 2, ALL_OPTS, .dt_min = 0.001f, .dt_max = 0.3f},
    {SSD("ssd_seg256", 1, 2900, 3, 128, 1, 128, 256), .D = 1, .z = 1, .init = 1, .dt_bias = 1, .softplus = 1},
    /* mamba_ssm's mixed inputs: dt, B, C in f32 with 16-bit x (in the f32
     * run they are x's dtype anyway).  Varlen with every option and all
     * three in f32; the sm_90a shape (B, C rounded to x's dtype on the GPU,
     * N 40, odd heads per group); seq_idx with f32 dt and C; strided f32 B
     * and dt; chunk 256 dense with even heads per group (the split paths and
     * wgq, whose TMA map then reads the rounded copy of B) with an f32 B */
    {SSD("ssd_mix_cu_seqlens", 1, 330, 4, 16, 2, 16, 64), .D = 1, ALL_OPTS, .varlen = 2,
     .seqlens = {100, 1, 0, 165, 64}, .nseq = 5, .f32_in = SFC_F32_DT | SFC_F32_B | SFC_F32_C},
    {SSD("ssd_mix_wg", 2, 333, 6, 128, 2, 40, 128), .D = 2, ALL_OPTS, .dt_min = 0.001f, .dt_max = 0.3f,
     .f32_in = SFC_F32_DT | SFC_F32_B | SFC_F32_C},
    {SSD("ssd_mix_seq_idx", 2, 250, 2, 16, 1, 32, 64), .D = 2, .z = 1, .init = 1, .final = 1, .varlen = 1,
     .seqlens = {70, 1, 179}, .nseq = 3, .f32_in = SFC_F32_DT | SFC_F32_C},
    {SSD("ssd_mix_strided", 2, 150, 4, 16, 2, 16, 64), .D = 2, ALL_OPTS, .strided = 1,
     .f32_in = SFC_F32_DT | SFC_F32_B},
    {SSD("ssd_mix_b_chunk256", 2, 600, 4, 64, 1, 64, 256), .D = 1, .z = 1, .dt_bias = 1, .softplus = 1,
     .final = 1, .f32_in = SFC_F32_B},
    {SSD("ssd_2p7b_small", 1, 512, 8, 64, 1, 128, 256), .D = 1, .z = 1, .dt_bias = 1, .softplus = 1, .final = 1},
    {SSD("ssd_2p7b", 1, 4096, 80, 64, 1, 128, 256), .D = 1, .z = 1, .dt_bias = 1, .softplus = 1, .big = 1},

    {STEP("step_basic", 3, 4, 16, 1, 16, 3), .D = 1},
    {STEP("step_full", 5, 4, 32, 2, 16, 9), .D = 2, .z = 1, .dt_bias = 1, .softplus = 1,
     .dt_min = 0.001f, .dt_max = 0.5f},
    {STEP("step_strided", 4, 6, 16, 3, 8, 4), .D = 1, .z = 1, .dt_bias = 1, .softplus = 1, .strided = 1},
    /* mixed dtypes: f32 B and C with x's dt (mamba_ssm's own tests); 16-bit
     * state caches (vLLM keeps the model dtype) at N 128 and 256 (the
     * vector paths); everything mixed; an odd N on padded strides (the
     * scalar path) */
    {STEP("step_mix_f32_bc", 5, 4, 32, 2, 16, 9), .D = 2, .z = 1, .dt_bias = 1, .softplus = 1,
     .f32_in = SFC_F32_B | SFC_F32_C},
    {STEP("step_state_bf16", 4, 6, 64, 2, 128, 7), .D = 1, .z = 1, .dt_bias = 1, .softplus = 1,
     .state_dtype = SF_BF16},
    {STEP("step_state_f16", 3, 4, 16, 1, 256, 3), .D = 1, .state_dtype = SF_F16},
    {STEP("step_mix_all", 5, 4, 32, 2, 48, 9), .D = 2, .z = 1, .dt_bias = 1, .softplus = 1,
     .dt_min = 0.001f, .dt_max = 0.5f, .f32_in = SFC_F32_DT | SFC_F32_B | SFC_F32_C, .state_dtype = SF_BF16},
    {STEP("step_mix_odd_strided", 4, 6, 16, 3, 30, 4), .D = 1, .z = 1, .strided = 1,
     .f32_in = SFC_F32_C | SFC_F32_DT, .state_dtype = SF_F16},
    {STEP("step_2p7b", 64, 80, 64, 1, 128, 64), .D = 1, .z = 1, .dt_bias = 1, .softplus = 1, .big = 1},

    /* attention: b, H, then .Lq/.Lk/.Hkv/.d/... */
    {"attn_basic", SFC_ATTN_FWD, 2, .H = 4, .Lq = 77, .Lk = 77, .Hkv = 4, .d = 64},
    {"attn_causal_gqa", SFC_ATTN_FWD, 1, .H = 8, .Lq = 130, .Lk = 130, .Hkv = 2, .d = 64, .causal = 1},
    {"attn_causal_lq_lt_lk", SFC_ATTN_FWD, 2, .H = 4, .Lq = 33, .Lk = 100, .Hkv = 1, .d = 32, .causal = 1},
    {"attn_causal_lq_gt_lk", SFC_ATTN_FWD, 1, .H = 2, .Lq = 90, .Lk = 40, .Hkv = 2, .d = 16, .causal = 1},
    {"attn_L1", SFC_ATTN_FWD, 3, .H = 2, .Lq = 1, .Lk = 1, .Hkv = 1, .d = 8},
    {"attn_decode", SFC_ATTN_FWD, 2, .H = 8, .Lq = 1, .Lk = 300, .Hkv = 2, .d = 128, .causal = 1},
    {"attn_window", SFC_ATTN_FWD, 1, .H = 4, .Lq = 200, .Lk = 200, .Hkv = 4, .d = 64, .wl = 17, .wr = 5},
    {"attn_window_causal", SFC_ATTN_FWD, 1, .H = 2, .Lq = 150, .Lk = 180, .Hkv = 1, .d = 40, .causal = 1, .wl = 31, .wr = -1},
    {"attn_d96", SFC_ATTN_FWD, 1, .H = 3, .Lq = 65, .Lk = 97, .Hkv = 3, .d = 96, .wl = -1, .wr = -1},
    {"attn_d256", SFC_ATTN_FWD, 1, .H = 2, .Lq = 70, .Lk = 130, .Hkv = 1, .d = 256, .causal = 1, .wl = -1, .wr = -1},
    {"attn_d192", SFC_ATTN_FWD, 2, .H = 2, .Lq = 100, .Lk = 150, .Hkv = 2, .d = 192, .wl = -1, .wr = -1},
    /* several key tiles (attn_fwd_ws: 80 keys at d 256, 112 at d 192), so
     * the 2-stage K/V ring wraps and its mbarrier phases flip */
    {"attn_d256_long", SFC_ATTN_FWD, 2, .H = 4, .Lq = 333, .Lk = 333, .Hkv = 2, .d = 256, .causal = 1, .wl = -1, .wr = -1},
    {"attn_d256_window", SFC_ATTN_FWD, 1, .H = 2, .Lq = 300, .Lk = 300, .Hkv = 1, .d = 256, .wl = 100, .wr = 7},
    {"attn_d192_long", SFC_ATTN_FWD, 1, .H = 2, .Lq = 257, .Lk = 400, .Hkv = 1, .d = 192, .wl = -1, .wr = -1},
    {"attn_varlen", SFC_ATTN_FWD, 5, .H = 4, .Hkv = 2, .d = 64, .causal = 1, .wl = -1, .wr = -1,
     .attn_varlen = 1, .qlens = {1, 0, 70, 129, 5}, .klens = {1, 3, 70, 150, 0}},
    {"attn_varlen_window", SFC_ATTN_FWD, 3, .H = 2, .Hkv = 1, .d = 32, .wl = 8, .wr = 8,
     .attn_varlen = 1, .qlens = {33, 1, 64}, .klens = {33, 17, 64}},
    /* score modifiers and head dims that are not multiples of 8 (served by
     * the mma kernel on the GPU, padded on chip); ascale 4 makes scores
     * large enough for the cap to bite */
    {"attn_softcap", SFC_ATTN_FWD, 2, .H = 4, .Lq = 150, .Lk = 150, .Hkv = 2, .d = 64, .causal = 1,
     .ascale = 4.f, .softcap = 2.f},
    {"attn_alibi_gqa", SFC_ATTN_FWD, 2, .H = 8, .Lq = 100, .Lk = 160, .Hkv = 2, .d = 128, .causal = 1, .alibi = 1},
    {"attn_alibi_bh_window", SFC_ATTN_FWD, 3, .H = 4, .Lq = 90, .Lk = 90, .Hkv = 4, .d = 64, .wl = 20, .wr = 10,
     .alibi = 2, .softcap = 10.f},
    {"attn_varlen_alibi_cap", SFC_ATTN_FWD, 4, .H = 4, .Hkv = 2, .d = 96, .causal = 1, .wl = -1, .wr = -1,
     .attn_varlen = 1, .qlens = {30, 0, 65, 7}, .klens = {30, 5, 90, 40}, .alibi = 1, .softcap = 3.f},
    {"attn_d59", SFC_ATTN_FWD, 2, .H = 4, .Lq = 80, .Lk = 80, .Hkv = 2, .d = 59, .causal = 1},
    {"attn_d111_window", SFC_ATTN_FWD, 1, .H = 3, .Lq = 70, .Lk = 100, .Hkv = 1, .d = 111, .wl = 25, .wr = 3},
    {"attn_d1", SFC_ATTN_FWD, 2, .H = 2, .Lq = 17, .Lk = 33, .Hkv = 1, .d = 1},
    {"attn_d250_alibi", SFC_ATTN_FWD, 1, .H = 2, .Lq = 70, .Lk = 70, .Hkv = 2, .d = 250, .alibi = 1},
    {"attn_d59_strided", SFC_ATTN_FWD, 2, .H = 4, .Lq = 40, .Lk = 50, .Hkv = 4, .d = 59, .strided = 1,
     .alibi = 2, .softcap = 5.f},
    {"attn_strided", SFC_ATTN_FWD, 2, .H = 4, .Lq = 65, .Lk = 65, .Hkv = 2, .d = 64, .causal = 1, .strided = 1},
    /* more queries than keys under the causal mask: whole query tiles see no
     * key (0 output, lse -inf), and more work tiles than H200 SMs, so each
     * CTA of the persistent kernel (attn_fwd_wsp) runs several tiles */
    {"attn_causal_nokey_tiles", SFC_ATTN_FWD, 6, .H = 8, .Lq = 400, .Lk = 100, .Hkv = 2, .d = 64, .causal = 1},
    {"attn_causal_nokey_d128", SFC_ATTN_FWD, 6, .H = 8, .Lq = 300, .Lk = 200, .Hkv = 4, .d = 128, .causal = 1},
    {"attn_causal_nokey_d256", SFC_ATTN_FWD, 4, .H = 12, .Lq = 260, .Lk = 180, .Hkv = 4, .d = 256, .causal = 1},
    /* causal with more tiles than SMs and 21 (batch, head) pairs: the
     * persistent kernel's masked sections of 4 pairs end with a short one */
    {"attn_causal_sections", SFC_ATTN_FWD, 3, .H = 7, .Lq = 800, .Lk = 800, .Hkv = 7, .d = 64, .causal = 1},
    /* sharp softmax (12 / sqrt(d): scores of ~17 log2 units' spread): row
     * maxima grow by more than 2^8 from one key tile to the next, so the
     * GPU kernels' lazy rescaling takes its rescale branch mid-row, not only
     * on the first tile */
    {"attn_sharp_d64", SFC_ATTN_FWD, 2, .H = 4, .Lq = 700, .Lk = 700, .Hkv = 2, .d = 64, .ascale = 12.f},
    {"attn_sharp_d128_causal", SFC_ATTN_FWD, 1, .H = 4, .Lq = 600, .Lk = 600, .Hkv = 4, .d = 128, .causal = 1,
     .ascale = 12.f},
    {"attn_sharp_d256", SFC_ATTN_FWD, 1, .H = 2, .Lq = 333, .Lk = 400, .Hkv = 1, .d = 256, .ascale = 12.f},
    /* full attention at d 128 with an even number of query tiles: the
     * clustered persistent kernel (wsp128c2) pairs neighbouring query tiles
     * of one (batch, head) pair and multicasts their K/V; GQA, a partial
     * last query and key tile, and (the second) more tiles than H200 SMs */
    {"attn_full_d128_pairs", SFC_ATTN_FWD, 2, .H = 4, .Lq = 500, .Lk = 330, .Hkv = 2, .d = 128},
    {"attn_full_d128_tiles", SFC_ATTN_FWD, 2, .H = 34, .Lq = 250, .Lk = 140, .Hkv = 17, .d = 128},
    {"attn_llm", SFC_ATTN_FWD, 1, .H = 32, .Lq = 2048, .Lk = 2048, .Hkv = 8, .d = 128, .causal = 1, .big = 1},
    {"attn_vit", SFC_ATTN_FWD, 16, .H = 12, .Lq = 196, .Lk = 196, .Hkv = 12, .d = 64, .big = 1},

    /* paged KV cache: attention over shuffled block tables (pages handed
     * out in a random order, unused pages between them), page sizes 1 to
     * 256, ragged lengths with 0 and lengths not a multiple of the page,
     * GQA 1/4/8, decode (Lq 1) and chunked prefill (Lq 4, 16), causal rows
     * that see no key (Lq > length), a window, softcap, d 64/96/128,
     * padded-stride views */
#define PAGED(nm, b_, H_, Hkv_, d_, Lq_, ps) \
    .name = nm, .op = SFC_ATTN_PAGED, .b = b_, .H = H_, .Hkv = Hkv_, .d = d_, .Lq = Lq_, .page_size = ps, .spare = 3
    {PAGED("paged_decode_ps16_gqa4", 4, 8, 2, 128, 1, 16), .causal = 1, .klens = {1, 0, 37, 300}},
    {PAGED("paged_decode_ps1_mha", 3, 4, 4, 64, 1, 1), .causal = 1, .klens = {5, 17, 0}},
    {PAGED("paged_prefill16_ps64_gqa8", 3, 8, 1, 64, 16, 64), .causal = 1, .klens = {16, 200, 130}},
    {PAGED("paged_lq4_ps256_gqa4", 2, 4, 1, 128, 4, 256), .causal = 1, .klens = {700, 3}},
    {PAGED("paged_lq4_full_d96", 3, 4, 2, 96, 4, 16), .klens = {50, 2, 0}},
    {PAGED("paged_causal_nokey_rows", 2, 2, 1, 64, 16, 16), .causal = 1, .klens = {5, 16}},
    {PAGED("paged_window", 2, 4, 1, 64, 16, 16), .causal = 1, .wl = 20, .wr = -1, .klens = {100, 40}},
    {PAGED("paged_softcap", 2, 8, 2, 128, 1, 16), .causal = 1, .ascale = 4.f, .softcap = 2.f,
     .klens = {90, 513}},
    {PAGED("paged_strided", 3, 4, 2, 64, 4, 16), .causal = 1, .strided = 1, .klens = {33, 64, 5}},
    /* ALiBi: a slope per query row of a GQA tile (H), per (b, H) with a
     * window and page size 1, with softcap on chunked prefill */
    {PAGED("paged_alibi_decode_gqa8", 3, 16, 2, 128, 1, 16), .causal = 1, .alibi = 1, .klens = {300, 0, 41}},
    {PAGED("paged_alibi_bh_ps1", 2, 8, 2, 64, 4, 1), .causal = 1, .alibi = 2, .wl = 30, .wr = -1,
     .klens = {70, 4}},
    {PAGED("paged_alibi_softcap_lq16", 2, 4, 1, 128, 16, 64), .causal = 1, .alibi = 1, .softcap = 3.f,
     .ascale = 2.f, .klens = {600, 20}},
    {PAGED("paged_alibi_full", 2, 4, 4, 96, 4, 16), .alibi = 2, .klens = {50, 9}},
    {PAGED("paged_decode_llm", 8, 32, 8, 128, 1, 16), .causal = 1, .big = 1,
     .klens = {4000, 3000, 2048, 1, 4096, 100, 2500, 3333}},
    /* d 256 with pages of 8 (a 16-key tile spans two pages), and one long
     * sequence split across many blocks */
    {PAGED("paged_decode_d256_ps8", 2, 8, 2, 256, 1, 8), .causal = 1, .klens = {500, 77}},
    {PAGED("paged_decode_long_b1", 1, 32, 8, 128, 1, 32), .causal = 1, .klens = {20011}},
    /* head dims that are not whole 16-byte chunks (rows of 118 / 72 / 200
     * bytes): the CUDA kernel's element loads */
    {PAGED("paged_decode_d59", 3, 8, 2, 59, 1, 16), .causal = 1, .klens = {40, 0, 333}},
    {PAGED("paged_lq4_d36_ps1_softcap", 2, 4, 1, 36, 4, 1), .causal = 1, .softcap = 2.f, .klens = {70, 9}},
    {PAGED("paged_alibi_d100_split", 2, 8, 2, 100, 1, 16), .causal = 1, .alibi = 1, .klens = {1500, 31}},
    /* append: new tokens through the block table into poisoned pools; every
     * slot not written must stay poisoned.  Decode (1 token) crossing a page
     * boundary, page size 1, chunks that straddle pages, a chunk longer than
     * a page of 256, padded-stride views */
#define APPEND(nm, b_, Hkv_, d_, Ln, ps) \
    .name = nm, .op = SFC_KV_APPEND, .b = b_, .H = Hkv_, .Hkv = Hkv_, .d = d_, .Lq = Ln, .page_size = ps, .spare = 3
    {APPEND("append_decode_ps16", 4, 2, 128, 1, 16), .klens = {0, 15, 16, 100}},
    {APPEND("append_ps1", 3, 4, 64, 5, 1), .klens = {0, 3, 10}},
    {APPEND("append_chunk_ps64_d96", 3, 1, 96, 16, 64), .klens = {60, 0, 128}},
    {APPEND("append_ps256", 2, 2, 64, 300, 256), .klens = {200, 0}},
    {APPEND("append_strided", 3, 2, 64, 4, 16), .strided = 1, .klens = {14, 0, 33}},
    /* append with K rotated (sf_kv_append's rope): NeoX and GPT-J, partial
     * rotary dims (vector and element paths of the kernel), llama3 scaling
     * at positions past 2^14, cos/sin tables whose last row is the last
     * position written, several kv heads, chunks that straddle pages,
     * padded-stride views of everything, tables included */
    {APPEND("append_rope_neox", 3, 2, 64, 4, 16), .rope = 1, .klens = {0, 15, 40}},
    {APPEND("append_rope_gptj_partial", 2, 4, 128, 3, 16), .rope = 1, .gptj = 1, .rot_dim = 64,
     .klens = {5, 31}},
    {APPEND("append_rope_llama3_far", 2, 1, 64, 2, 256), .rope = 1, .llama3 = 1,
     .klens = {20000, 3}},
    {APPEND("append_rope_tables_gqa", 3, 4, 96, 5, 8), .rope = 1, .tables = 1, .rot_dim = 32,
     .npos = 64, .klens = {0, 7, 50}},
    {APPEND("append_rope_tables_gptj_edge", 2, 1, 64, 16, 16), .rope = 1, .tables = 1, .gptj = 1,
     .npos = 40, .klens = {3, 24}},
    {APPEND("append_rope_neox_d40_partial", 2, 2, 40, 3, 4), .rope = 1, .rot_dim = 24,
     .klens = {9, 0}},
    {APPEND("append_rope_strided_tables", 3, 2, 64, 4, 16), .rope = 1, .strided = 1, .tables = 1,
     .rot_dim = 48, .npos = 80, .klens = {14, 0, 33}},
    {APPEND("append_rope_decode_llm", 64, 8, 128, 1, 16), .rope = 1, .llama3 = 1, .big = 1,
     .klens = {4000, 3000, 2048, 1, 4096, 100, 2500, 3333}},

    /* conv1d prefill: widths 2-4, L = 1 and L < W-1 with an initial state,
     * channels not a multiple of the vector width, cu_seqlens with length-1
     * and empty sequences, strided views, the Mamba-2 2.7B conv (dim
     * 5376 = 2 * 2560 + 2 * 128) */
    {CONV("conv_basic", 2, 100, 64, 4), .bias = 1, .silu = 1},
    {CONV("conv_L1_init", 3, 1, 40, 4), .init = 1, .final = 1, .silu = 1},
    {CONV("conv_L2_w4_init", 2, 2, 24, 4), .bias = 1, .init = 1, .final = 1},
    {CONV("conv_L1_noinit", 2, 1, 16, 3), .final = 1},
    {CONV("conv_w2", 2, 77, 96, 2), .bias = 1, .silu = 1, .init = 1, .final = 1},
    {CONV("conv_w3_dim100", 1, 130, 100, 3), .init = 1, .final = 1},
    {CONV("conv_cu_seqlens", 1, 290, 72, 4), .bias = 1, .silu = 1, .init = 1, .final = 1,
     .varlen = 2, .seqlens = {50, 1, 0, 2, 200, 37}, .nseq = 6},
    {CONV("conv_cu_noinit_w3", 1, 103, 36, 3), .silu = 1, .final = 1, .varlen = 2,
     .seqlens = {1, 99, 3}, .nseq = 3},
    {CONV("conv_strided", 2, 65, 128, 4), .bias = 1, .silu = 1, .init = 1, .final = 1, .strided = 1},
    {CONV("conv_2p7b_small", 1, 256, 5376, 4), .bias = 1, .silu = 1, .final = 1},
    {CONV("conv_2p7b", 8, 4096, 5376, 4), .bias = 1, .silu = 1, .big = 1},

    /* conv1d decode update: in-place state, shuffled slots with a pad */
    {CONVU("convupd_basic", 4, 64, 4, 4), .bias = 1, .silu = 1},
    {CONVU("convupd_idx_w3", 5, 100, 3, 9), .bias = 1, .silu = 1},
    {CONVU("convupd_w2", 3, 48, 2, 3)},
    {CONVU("convupd_strided", 4, 64, 4, 6), .bias = 1, .silu = 1, .strided = 1},
    {CONVU("convupd_2p7b", 64, 5376, 4, 80), .bias = 1, .silu = 1},

    /* gated RMSNorm: both gate orders, no gate, groups smaller than D
     * (warp slices, odd sizes on the scalar path), long rows that stream,
     * strided views, the Mamba-2 2.7B norm (D 5120, one group) */
    {RMSN("rms_gate_first", 37, 256, 0), .z = 1},
    {RMSN("rms_norm_first", 37, 256, 0), .z = 1, .norm_before_gate = 1},
    {RMSN("rms_noz", 20, 200, 0)},
    {RMSN("rms_group64", 9, 512, 64), .z = 1},
    {RMSN("rms_group8_nbg", 7, 96, 8), .z = 1, .norm_before_gate = 1},
    {RMSN("rms_group12_odd", 5, 96, 12), .z = 1},
    {RMSN("rms_dim100", 3, 100, 0), .z = 1, .norm_before_gate = 1},
    {RMSN("rms_long_rows", 4, 20480, 0), .z = 1},
    {RMSN("rms_strided", 6, 256, 128), .z = 1, .strided = 1},
    {RMSN("rms_2p7b", 64, 5120, 5120), .z = 1},
    {RMSN("rms_2p7b_g8", 16, 5120, 640), .z = 1, .norm_before_gate = 1},
    {RMSN("rms_2p7b_big", 32768, 5120, 5120), .z = 1, .big = 1},

    /* the default workload of `seqfuse`: sized so the double reference (the
     * oracle of both the fused and the naive run) takes seconds on a small
     * CPU (1), and at the real shapes on a GPU (2) */
    {SSD("mamba2_2.7b_layer", 1, 1024, 80, 64, 1, 128, 256), .D = 1, .z = 1, .dt_bias = 1,
     .softplus = 1, .big = 1, .workload = 1},
    {"llm_gqa_causal", SFC_ATTN_FWD, 1, .H = 32, .Lq = 512, .Lk = 512, .Hkv = 8, .d = 128,
     .causal = 1, .big = 1, .workload = 1},
    {"vit_b16", SFC_ATTN_FWD, 8, .H = 12, .Lq = 196, .Lk = 196, .Hkv = 12, .d = 64, .big = 1,
     .workload = 1},
    /* on a GPU the oracle still runs on the CPU: shapes that keep it to seconds */
    {SSD("mamba2_2.7b_layer", 1, 2048, 80, 64, 1, 128, 256), .D = 1, .z = 1, .dt_bias = 1,
     .softplus = 1, .big = 1, .workload = 2},
    {"llm_gqa_causal", SFC_ATTN_FWD, 1, .H = 32, .Lq = 1024, .Lk = 1024, .Hkv = 8, .d = 128,
     .causal = 1, .big = 1, .workload = 2},
    {"vit_b16", SFC_ATTN_FWD, 32, .H = 12, .Lq = 196, .Lk = 196, .Hkv = 12, .d = 64, .big = 1,
     .workload = 2},
    /* (fused layer ops at the end: the seeds of the rows above stay as they were) */
    /* fused norms: row lengths 1, 7, 4097 (odd, past any vector width),
     * with and without the residual and the h output, weights in the
     * activation dtype, strided rows, eps */
    {NORM("add_rms_d1", SFC_ADD_RMSNORM, 5, 1), .residual = 1, .hout = 1},
    {NORM("rms_d7", SFC_ADD_RMSNORM, 3, 7), .eps = 1e-6f},
    {NORM("add_rms_d4097", SFC_ADD_RMSNORM, 4, 4097), .residual = 1, .hout = 1, .wlow = 1},
    {NORM("add_rms_strided", SFC_ADD_RMSNORM, 33, 256), .residual = 1, .hout = 1, .strided = 1, .eps = 1e-2f},
    {NORM("add_rms_bias_no_h", SFC_ADD_RMSNORM, 6, 130), .residual = 1, .bias = 1},
    {NORM("add_ln_d1", SFC_ADD_LAYERNORM, 4, 1), .residual = 1, .hout = 1, .bias = 1},
    {NORM("ln_d7", SFC_ADD_LAYERNORM, 3, 7), .bias = 1, .eps = 1e-6f},
    {NORM("add_ln_d4097", SFC_ADD_LAYERNORM, 3, 4097), .residual = 1, .hout = 1, .bias = 1, .wlow = 1},
    {NORM("add_ln_strided", SFC_ADD_LAYERNORM, 21, 320), .residual = 1, .hout = 1, .strided = 1},
    /* the CUDA kernel's paths: warp slices sharing a block (D 64), a block
     * per row with 2-8 vectors per thread (4096 .. 16384), the element path
     * (odd D up to 8191), rows that stream (40000; 9001 on the element
     * path), decode (1 row), h over the residual, a residual and h in f32 */
    {NORM("add_rms_d64_slices", SFC_ADD_RMSNORM, 37, 64), .residual = 1, .hout = 1},
    {NORM("add_rms_decode_d4096", SFC_ADD_RMSNORM, 1, 4096), .residual = 1, .hout = 1},
    {NORM("add_rms_d8192_inplace", SFC_ADD_RMSNORM, 24, 8192), .residual = 1, .h_inplace = 1},
    {NORM("add_rms_d16384_wlow", SFC_ADD_RMSNORM, 5, 16384), .residual = 1, .hout = 1, .wlow = 1},
    {NORM("add_rms_d8191", SFC_ADD_RMSNORM, 3, 8191), .residual = 1, .hout = 1},
    {NORM("rms_d40000_stream", SFC_ADD_RMSNORM, 2, 40000), .bias = 1},
    {NORM("add_rms_res32", SFC_ADD_RMSNORM, 17, 1024), .residual = 1, .hout = 1, .res_f32 = 1},
    {NORM("add_rms_res32_inplace_strided", SFC_ADD_RMSNORM, 9, 512), .residual = 1, .res_f32 = 1,
     .h_inplace = 1, .strided = 1},
    {NORM("add_ln_d2048_bias", SFC_ADD_LAYERNORM, 40, 2048), .residual = 1, .hout = 1, .bias = 1},
    {NORM("add_ln_d8192_res32_inplace", SFC_ADD_LAYERNORM, 6, 8192), .residual = 1, .res_f32 = 1,
     .h_inplace = 1, .bias = 1, .wlow = 1},
    {NORM("add_ln_d9001_stream", SFC_ADD_LAYERNORM, 2, 9001), .residual = 1, .hout = 1, .bias = 1},
    {NORM("ln_decode_d4096", SFC_ADD_LAYERNORM, 1, 4096), .bias = 1},
    /* SwiGLU: the three layouts, odd widths, strided rows */
    {SWI("swiglu_sep_n7", 9, 7, SF_SWIGLU_SEPARATE)},
    {SWI("swiglu_sep_strided", 17, 300, SF_SWIGLU_SEPARATE), .strided = 1},
    {SWI("swiglu_concat_n4097", 3, 4097, SF_SWIGLU_CONCAT)},
    {SWI("swiglu_concat_strided", 11, 96, SF_SWIGLU_CONCAT), .strided = 1},
    {SWI("swiglu_inter_n1", 4, 1, SF_SWIGLU_INTERLEAVED)},
    {SWI("swiglu_inter_strided", 13, 333, SF_SWIGLU_INTERLEAVED), .strided = 1},
    /* the CUDA kernel's paths: 16-byte vectors with 1 and (past ~1M
     * vectors) 4 per thread, decode rows */
    {SWI("swiglu_sep_d8192_u4", 1100, 8192, SF_SWIGLU_SEPARATE)},
    {SWI("swiglu_inter_d8192_u4", 1100, 8192, SF_SWIGLU_INTERLEAVED)},
    {SWI("swiglu_concat_decode", 1, 14336, SF_SWIGLU_CONCAT)},
    {SWI("swiglu_inter_vec", 33, 512, SF_SWIGLU_INTERLEAVED)},
    {SWI("swiglu_concat_vec_strided", 40, 1024, SF_SWIGLU_CONCAT), .strided = 1},
    /* RoPE: NeoX and GPT-J, partial rotary dims, shuffled and absent
     * position ids, llama3 scaling over positions past the original
     * context, cos/sin tables, GQA, in place and out of place */
    {ROPE("rope_neox", 9, 4, 2, 64), .pos_ids = 1, .npos = 50},
    {ROPE("rope_gptj_partial", 7, 3, 1, 80), .gptj = 1, .rot_dim = 32},
    {ROPE("rope_neox_partial_oop", 5, 8, 2, 128), .rot_dim = 64, .pos_ids = 1, .npos = 4000, .out_of_place = 1},
    {ROPE("rope_llama3", 12, 4, 1, 128), .llama3 = 1, .pos_ids = 1, .npos = 60000},
    {ROPE("rope_tables_gptj", 10, 2, 2, 48), .gptj = 1, .tables = 1, .pos_ids = 1, .npos = 37},
    {ROPE("rope_tables_nopos_oop", 6, 4, 4, 64), .tables = 1, .rot_dim = 16, .npos = 8, .out_of_place = 1},
    {ROPE("rope_strided", 8, 6, 2, 32), .pos_ids = 1, .npos = 100, .strided = 1, .out_of_place = 1},
    {ROPE("rope_d2", 3, 1, 1, 2), .gptj = 1},
    /* the CUDA kernel's paths: 16-byte vectors (NeoX halves, GPT-J pairs,
     * pass-through copies), q without k, decode, GQA at d 128, frequencies
     * past the 128 the launcher precomputes (R 512) */
    {ROPE("rope_llama3_gqa_d128", 300, 32, 8, 128), .llama3 = 1, .pos_ids = 1, .npos = 100000},
    {ROPE("rope_gptj_vec_oop", 64, 8, 2, 64), .gptj = 1, .out_of_place = 1},
    {ROPE("rope_partial_vec_oop", 40, 4, 2, 128), .rot_dim = 64, .out_of_place = 1, .pos_ids = 1, .npos = 3000},
    {ROPE("rope_q_only", 33, 5, 0, 128), .no_k = 1, .pos_ids = 1, .npos = 500},
    {ROPE("rope_q_only_tables_oop", 17, 3, 0, 96), .no_k = 1, .tables = 1, .rot_dim = 64, .npos = 20, .out_of_place = 1},
    {ROPE("rope_decode", 1, 32, 8, 128), .pos_ids = 1, .npos = 5000},
    {ROPE("rope_d512_llama3", 4, 2, 1, 512), .llama3 = 1, .pos_ids = 1, .npos = 9000},
    {ROPE("rope_gptj_d512_partial_oop", 5, 2, 2, 512), .gptj = 1, .rot_dim = 400, .out_of_place = 1},
    /* weight-only quantised product: int4 and int8, groups 32 / 64 / 128,
     * with and without mins; M in {1, 3, 16} (the decode path), 17, 64, 200
     * (the tiled path: partial row tiles); odd N and N = 1 (partial column
     * tiles), K of one to 32 groups (a partial last K tile), bias, strided x
     * and y (padded rows) */
    {GWQ("gwq4_g128_m1", 1, 257, 512, 4, 128)},
    {GWQ("gwq4_g32_min_m3", 3, 129, 96, 4, 32), .wq_min = 1},
    {GWQ("gwq4_g64_m16_bias", 16, 300, 320, 4, 64), .bias = 1},
    {GWQ("gwq4_g128_m16_k4096", 16, 96, 4096, 4, 128), .wq_min = 1},
    {GWQ("gwq4_g128_min_m17_str", 17, 77, 384, 4, 128), .wq_min = 1, .strided = 1},
    {GWQ("gwq4_g64_m3_n1", 3, 1, 64, 4, 64)},
    {GWQ("gwq4_g128_m64", 64, 512, 1024, 4, 128), .wq_min = 1, .bias = 1},
    {GWQ("gwq4_g32_m200_str", 200, 255, 160, 4, 32), .bias = 1, .strided = 1},
    {GWQ("gwq8_g32_m1", 1, 131, 256, 8, 32)},
    {GWQ("gwq4_g32_min_m1", 1, 101, 192, 4, 32), .wq_min = 1}, /* two groups in a CPU rows-kernel run of 64 */
    {GWQ("gwq4_g32_m1_k96", 1, 37, 96, 4, 32), .bias = 1},    /* K not a multiple of 64: the CPU's other path */
    {GWQ("gwq8_g64_min_m3_str", 3, 70, 448, 8, 64), .wq_min = 1, .strided = 1},
    {GWQ("gwq8_g128_m16", 16, 33, 128, 8, 128), .bias = 1},
    {GWQ("gwq8_g32_m17_str", 17, 65, 64, 8, 32), .strided = 1},
    {GWQ("gwq8_g128_min_m64_bias", 64, 96, 512, 8, 128), .wq_min = 1, .bias = 1},
    {GWQ("gwq8_g64_m200", 200, 133, 192, 8, 64)},
    /* many rows without a bias: the slab path (dequantised slabs + cuBLAS) */
    {GWQ("gwq4_g128_min_m300_str", 300, 257, 1024, 4, 128), .wq_min = 1, .strided = 1},
    {GWQ("gwq4_g32_m64", 64, 96, 320, 4, 32)},
    {GWQ("gwq8_g128_min_m129", 129, 40, 256, 8, 128), .wq_min = 1},
    /* the codes tiled (SF_QW_TILED): every CUDA path reads them */
    {GWQ("gwq4_g128_m1_tl", 1, 257, 512, 4, 128), .wq_tiled = 1},
    {GWQ("gwq4_g128_min_m5_tl", 5, 133, 384, 4, 128), .wq_min = 1, .bias = 1, .wq_tiled = 1},
    {GWQ("gwq4_g128_m16_k4096_tl", 16, 96, 4096, 4, 128), .wq_tiled = 1},
    {GWQ("gwq4_g32_min_m3_tl", 3, 129, 96, 4, 32), .wq_min = 1, .wq_tiled = 1},
    {GWQ("gwq4_g64_m16_bias_tl", 16, 300, 320, 4, 64), .bias = 1, .wq_tiled = 1},
    {GWQ("gwq4_g128_m64_bias_tl", 64, 200, 1024, 4, 128), .wq_min = 1, .bias = 1, .wq_tiled = 1},
    {GWQ("gwq4_g32_m40_k96_tl", 40, 37, 96, 4, 32), .wq_tiled = 1},
    {GWQ("gwq8_g64_min_m3_tl", 3, 70, 448, 8, 64), .wq_min = 1, .strided = 1, .wq_tiled = 1},
    {GWQ("gwq8_g128_m16_bias_tl", 16, 33, 128, 8, 128), .bias = 1, .wq_tiled = 1},
    {GWQ("gwq8_g32_m17_tl", 17, 65, 64, 8, 32), .wq_tiled = 1},
    {GWQ("gwq8_g64_m200_tl", 200, 133, 192, 8, 64), .wq_tiled = 1},
};
const int sfc_ncases = (int)(sizeof sfc_cases / sizeof sfc_cases[0]);

const char *sfc_op_name(sfc_op op) {
    switch (op) {
    case SFC_SSD_FWD: return "ssd_fwd";
    case SFC_SSD_STEP: return "ssd_step";
    case SFC_ATTN_FWD: return "attn_fwd";
    case SFC_CONV1D_FWD: return "conv1d_fwd";
    case SFC_CONV1D_UPDATE: return "conv1d_update";
    case SFC_RMSNORM_GATED: return "rmsnorm_gated";
    case SFC_KV_APPEND: return "kv_append";
    case SFC_ATTN_PAGED: return "attn_paged";
    case SFC_ADD_RMSNORM: return "add_rmsnorm";
    case SFC_ADD_LAYERNORM: return "add_layernorm";
    case SFC_SWIGLU: return "swiglu";
    case SFC_ROPE: return "rope";
    case SFC_GEMM_WQ: return "gemm_wq";
    }
    return "?";
}

int sfc_op_from_name(const char *s) {
    for (int i = 0; i <= (int)SFC_GEMM_WQ; i++)
        if (strcmp(s, sfc_op_name((sfc_op)i)) == 0) return i;
    return -1;
}

double sfc_tolerance(sfc_op op, sf_dtype dt, sf_backend be) {
    /* The output's own rounding costs ~2e-4 (f16) and ~1.7e-3 (bf16); the
     * CPU computes in f32 after converting, the GPU multiplies in the input
     * precision (TF32 for f32) with f32 accumulation. */
    int gpu = be == SF_BACKEND_CUDA;
    if (op == SFC_KV_APPEND) return 0.0; /* a copy: exact on every backend */
    /* f32: the CPU measured <= 6e-7 on most cases, 7.4e-6 once on ssd_L1
     * (16 outputs, each a short cancelling sum); on the GPU only the SSD
     * forward multiplies in TF32 (measured <= 3e-4), the rest is f32 */
    switch (dt) {
    case SF_F32: return !gpu ? 2e-5 : op == SFC_SSD_FWD ? 1e-3 : 2e-5;
    case SF_F16: return gpu ? 5e-3 : 1e-3;
    default: return gpu ? 1.5e-2 : 5e-3;
    }
}

double sfc_tolerance1(const sfc_case *c, sf_dtype dt, sf_backend be) {
    return sfc_tolerance(c->op == SFC_KV_APPEND && c->rope ? SFC_ROPE : c->op, dt, be);
}

double sfc_tolerance2(const sfc_case *c, sf_dtype dt, sf_backend be) {
    const double tol = sfc_tolerance(c->op, dt, be);
    if (c->op != SFC_SSD_STEP || c->state_dtype == SF_F32) return tol;
    const double ts = sfc_tolerance(c->op, c->state_dtype, be);
    return ts > tol ? ts : tol;
}

double sfc_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

