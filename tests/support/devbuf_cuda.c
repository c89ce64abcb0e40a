/*
 * devbuf_cuda.c: devbuf.h on a real GPU, with the CUDA runtime: cudaMalloc'd buffers and a
 * stream of the test's own (cudaStreamCreate: the calls on it return at once). Copies in are
 * cudaMemcpy on the legacy stream (a pageable source may return before the DMA lands; the calls'
 * stream, a blocking one, still runs after it); copies out first wait for the stream, so that no
 * synchronous copy ever waits behind a collective in flight.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "cuda_skip.h"
#include "devbuf.h"

static cudaStream_t stream;

static int ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        fprintf(stderr, "devbuf: %s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess;
}

int devbuf_setup(int rank, const char *driver, const char **why)
{
    (void)driver;
    int n = cuda_devices(why);
    if (n > 0 && (!ok(cudaSetDevice(rank % n), "cudaSetDevice") ||
                  !ok(cudaStreamCreate(&stream), "cudaStreamCreate"))) {
        *why = "cudaSetDevice or cudaStreamCreate failed";
        return 0;
    }
    return n;
}

void *devbuf_stream(void)
{
    return stream;
}

void *devbuf_alloc(size_t nbytes)
{
    void *p = NULL;
    return ok(cudaMalloc(&p, nbytes), "cudaMalloc") ? p : NULL;
}

void devbuf_free(void *p)
{
    cudaFree(p);
}

int devbuf_put(void *dev, const void *host, size_t nbytes)
{
    return ok(cudaMemcpy(dev, host, nbytes, cudaMemcpyHostToDevice), "copy in");
}

int devbuf_get(void *host, const void *dev, size_t nbytes)
{
    return ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize") &&
           ok(cudaMemcpy(host, dev, nbytes, cudaMemcpyDeviceToHost), "copy out");
}

int devbuf_faults(void)
{
    return 0;
}
