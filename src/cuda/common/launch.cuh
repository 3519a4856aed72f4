/* launch.cuh - a kernel launch with the Hopper launch attributes as
 * arguments: programmatic stream serialization (the kernel may launch
 * while the one ahead in the stream finishes; it must call sf_pdl_wait,
 * common/ptx.cuh, before touching what that kernel writes) and a cluster
 * size.  Attributes rather than __cluster_dims__, which an sm_80 pass of
 * the same kernel would reject. */
#ifndef SF_CUDA_LAUNCH_CUH
#define SF_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>
#include <string.h>

/* kern<<<grid, block, smem, stream>>>(args...), as a programmatic dependent
 * when pdl, in clusters of `cluster` blocks along x when cluster > 1. */
template <typename... KA, typename... A>
static cudaError_t sf_launch_ex(void (*kern)(KA...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                bool pdl, unsigned cluster, A &&...args) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute at[2];
    memset(at, 0, sizeof at);
    unsigned n = 0;
    if (pdl) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = cluster, at[n].val.clusterDim.y = 1, at[n].val.clusterDim.z = 1;
        n++;
    }
    cfg.attrs = at;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, kern, static_cast<A &&>(args)...);
}

#endif
