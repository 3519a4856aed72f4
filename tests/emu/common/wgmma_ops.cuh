// wgmma_ops.cuh (emulation) - the generated wgmma wrappers of the real file
// are replaced by the generic Wg<T, N> of common/wgmma.cuh: nothing here.
#ifndef SF_WGMMA_OPS_CUH
#define SF_WGMMA_OPS_CUH
#endif
