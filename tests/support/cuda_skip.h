/*
 * cuda_skip.h: the GPU tests' rule for a machine without a CUDA device: they print SKIP with the
 * reason and exit 77 (CTest's SKIP_RETURN_CODE).
 */
#ifndef CHORUS_TEST_CUDA_SKIP_H
#define CHORUS_TEST_CUDA_SKIP_H

#include <cuda_runtime_api.h>

/* The number of CUDA devices (> 0); 0 with the reason in *why when there is none. */
static inline int cuda_devices(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        *why = e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0";
        return 0;
    }
    return n;
}

#endif /* CHORUS_TEST_CUDA_SKIP_H */
