/*
 * cuda_bufs.c: device buffers for --device cuda, through the CUDA runtime (CUDA builds).
 */
#include "cuda_bufs.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

const char *perf_cuda_init(int rank, char *name, size_t name_nbytes)
{
    static char why[160];
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, sizeof(why), "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return why;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaSetDevice(rank % n)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, rank % n)) != cudaSuccess) {
        snprintf(why, sizeof(why), "device %d: %s", rank % n, cudaGetErrorString(e));
        return why;
    }
    snprintf(name, name_nbytes, "cuda:%d %s", rank % n, prop.name);
    return NULL;
}

void *perf_cuda_alloc(size_t nbytes)
{
    void *p = NULL;
    return cudaMalloc(&p, nbytes) == cudaSuccess ? p : NULL;
}

void perf_cuda_free(void *p)
{
    cudaFree(p);
}

int perf_cuda_copy(void *dst, const void *src, size_t nbytes)
{
    return cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault) != cudaSuccess;
}

void *perf_cuda_stream_create(void)
{
    cudaStream_t s = NULL;
    return cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess ? (void *)s : NULL;
}

int perf_cuda_stream_sync(void *stream)
{
    return cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess;
}

void perf_cuda_stream_destroy(void *stream)
{
    cudaStreamDestroy((cudaStream_t)stream);
}
