/* append.cuh - sf_kv_append on the GPU: each new token's K and V rows
 * copied into their page slots through the block table.  One thread moves
 * one 16-byte chunk of a row (or one element where rows are not 16-byte
 * aligned); a row whose position or page is out of range is skipped and
 * recorded in the context's error word.
 */
#ifndef SF_PAGED_APPEND_CUH
#define SF_PAGED_APPEND_CUH

#include "paged/decode.cuh"

namespace sf_paged {

struct AppendParams {
    void *kc, *vc;
    const void *k, *v;
    int64_t k_sp, k_sr, k_sh;   /* k_cache: page, row, head strides */
    int64_t v_sp, v_sr, v_sh;
    int64_t nk_sb, nk_sr, nk_sh; /* new k: batch, token, head strides */
    int64_t nv_sb, nv_sr, nv_sh;
    const int32_t *bt;
    int64_t bt_sb, bt_sp;
    const int32_t *lens;        /* cache_seqlens */
    int64_t lens_s;
    int batch, lnew, nkv, page_shift, max_pages, num_pages;
    int units;                  /* copy units a row: d/8 chunks or d elements */
    unsigned int *err;
};

/* U: the copy unit (uint4 for 16-byte chunks, else the element type);
 * EPU: elements per unit. */
template <typename E, typename U, int EPU>
__global__ void __launch_bounds__(256) kv_append(const AppendParams p) {
    const int64_t total = (int64_t)p.batch * p.lnew * p.nkv * p.units;
    for (int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; id < total;
         id += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = id;
        const int c = (int)(r % p.units);
        r /= p.units;
        const int h = (int)(r % p.nkv);
        r /= p.nkv;
        const int j = (int)(r % p.lnew);
        const int b = (int)(r / p.lnew);
        const int64_t pos = (int64_t)p.lens[(int64_t)b * p.lens_s] + j;
        const int64_t cap = (int64_t)p.max_pages << p.page_shift;
        if (pos < j || pos >= cap) { /* a negative length, or past the table */
            if (c == 0 && h == 0) record_error(p.err, b);
            continue;
        }
        const int64_t pg = p.bt[(int64_t)b * p.bt_sb + (pos >> p.page_shift) * p.bt_sp];
        if (pg < 0 || pg >= p.num_pages) {
            if (c == 0 && h == 0) record_error(p.err, b);
            continue;
        }
        const int64_t row = pos & (((int64_t)1 << p.page_shift) - 1);
        const int64_t e = (int64_t)c * EPU;
        const E *ks = reinterpret_cast<const E *>(p.k) + (int64_t)b * p.nk_sb + (int64_t)j * p.nk_sr + (int64_t)h * p.nk_sh + e;
        const E *vs = reinterpret_cast<const E *>(p.v) + (int64_t)b * p.nv_sb + (int64_t)j * p.nv_sr + (int64_t)h * p.nv_sh + e;
        E *kd = reinterpret_cast<E *>(p.kc) + pg * p.k_sp + row * p.k_sr + (int64_t)h * p.k_sh + e;
        E *vd = reinterpret_cast<E *>(p.vc) + pg * p.v_sp + row * p.v_sr + (int64_t)h * p.v_sh + e;
        *reinterpret_cast<U *>(kd) = *reinterpret_cast<const U *>(ks);
        *reinterpret_cast<U *>(vd) = *reinterpret_cast<const U *>(vs);
    }
}

} /* namespace sf_paged */

#endif
