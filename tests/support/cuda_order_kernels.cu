/*
 * cuda_order_kernels.cu: the compute kernels test_cuda_coll puts before and after each
 * collective on the caller's stream on a real GPU (issue 8: "stream ordering with a compute
 * kernel before and after"). Before: a kernel that keeps the stream busy for a while, then a
 * kernel that writes the input, element by element, from pinned host memory. After: a kernel that
 * reads the result and writes it to pinned host memory. A collective that did not wait for the
 * kernels before it would read the stale input; one whose writes landed after the kernel behind
 * it would be read stale.
 */
#include <stdint.h>

#include "cuda_order_kernels.h"

static __device__ uint64_t global_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __global__ void spin(uint64_t ns)
{
    uint64_t t0 = global_ns();
    while (global_ns() - t0 < ns) {
    }
}

static __global__ void copy_bytes(unsigned char *dst, const unsigned char *src, size_t nbytes)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nbytes; i += stride)
        dst[i] = src[i];
}

static cudaError_t launch_copy(void *dst, const void *src, size_t nbytes, cudaStream_t stream)
{
    if (nbytes == 0)
        return cudaSuccess;
    size_t blocks = (nbytes + 255) / 256;
    copy_bytes<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, stream>>>(
        (unsigned char *)dst, (const unsigned char *)src, nbytes);
    return cudaGetLastError();
}

extern "C" cudaError_t order_kernel_write(void *dst, const void *src_pinned, size_t nbytes,
                                          unsigned busy_ms, cudaStream_t stream)
{
    spin<<<1, 1, 0, stream>>>((uint64_t)busy_ms * 1000000u);
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : launch_copy(dst, src_pinned, nbytes, stream);
}

extern "C" cudaError_t order_kernel_read(void *dst_pinned, const void *src, size_t nbytes,
                                         cudaStream_t stream)
{
    return launch_copy(dst_pinned, src, nbytes, stream);
}
