/*
 * cuda_bufs.h: device buffers for --device cuda (cuda_bufs.c in CUDA builds, cuda_bufs_none.c
 * elsewhere). The benchmark keeps its host buffers for filling and checking and mirrors them to
 * and from the device outside the timed loop.
 */
#ifndef CHORUS_PERF_CUDA_BUFS_H
#define CHORUS_PERF_CUDA_BUFS_H

#include <stddef.h>

/* Pick device rank % count; NULL on success, else why device buffers cannot be used. */
const char *perf_cuda_init(int rank, char *name, size_t name_nbytes);
void *perf_cuda_alloc(size_t nbytes); /* NULL on failure */
void perf_cuda_free(void *p);
/* A synchronous copy in any direction; 0 on success. */
int perf_cuda_copy(void *dst, const void *src, size_t nbytes);
void *perf_cuda_stream_create(void); /* NULL on failure */
int perf_cuda_stream_sync(void *stream); /* 0 on success */
void perf_cuda_stream_destroy(void *stream);

#endif /* CHORUS_PERF_CUDA_BUFS_H */
