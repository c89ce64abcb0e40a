/*
 * cuda_bufs_none.c: --device cuda in a build without CUDA: refused with the reason.
 */
#include "cuda_bufs.h"

const char *perf_cuda_init(int rank, char *name, size_t name_nbytes)
{
    (void)rank, (void)name, (void)name_nbytes;
    return "these perftests were built without CUDA (configure with -DCHORUS_ENABLE_CUDA=ON)";
}

void *perf_cuda_alloc(size_t nbytes)
{
    (void)nbytes;
    return NULL;
}

void perf_cuda_free(void *p)
{
    (void)p;
}

int perf_cuda_copy(void *dst, const void *src, size_t nbytes)
{
    (void)dst, (void)src, (void)nbytes;
    return 1;
}

void *perf_cuda_stream_create(void)
{
    return NULL;
}

int perf_cuda_stream_sync(void *stream)
{
    (void)stream;
    return 1;
}

void perf_cuda_stream_destroy(void *stream)
{
    (void)stream;
}
