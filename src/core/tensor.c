/* tensor.c - tensor descriptors. */
#include "internal.h"

sf_tensor sf_tensor_contiguous(void *data, sf_dtype dtype, int device, int rank,
                               const int64_t *shape) {
    sf_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    if (rank < 0 || rank > SF_MAX_RANK || (rank > 0 && !shape)) {
        t.rank = -1; /* rejected by every op as a shape error */
        return t;
    }
    t.rank = rank;
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.stride[i] = s;
        /* a product past int64 has no strides: rejected as a shape error */
        if (__builtin_mul_overflow(s, shape[i] > 0 ? shape[i] : 1, &s)) {
            t.rank = -1;
            return t;
        }
    }
    return t;
}

int64_t sf_tensor_numel(const sf_tensor *t) {
    if (!t || !t->data) return 0;
    if (t->rank < 0 || t->rank > SF_MAX_RANK) return -1;
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        if (t->shape[i] < 0 || __builtin_mul_overflow(n, t->shape[i], &n)) return -1;
    return n;
}
