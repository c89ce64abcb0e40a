/*
 * cuda_memops.h: the CUDA memops backend (cuda_memops.cu), callable from C.
 *
 * The same three operations as the host backend (memops.h) on device memory, asynchronous on a
 * stream the caller names (the communicator's internal streams; NULL is the legacy default
 * stream): they return once the work is queued. Results are bit-identical to host_memops: integer
 * sums and products wrap, max/min are the plain comparisons, float16 and bfloat16 go through float
 * with round-to-nearest-even, float division is IEEE. Any byte address works (16-byte vector loads
 * where the three pointers share their alignment, element loads else, byte loads for pointers not
 * aligned to the element size). Each returns 0 or a cudaError_t value; cuda_memops_error_string
 * names it. Nothing is written for an invalid dtype or op (that returns cudaErrorInvalidValue).
 *
 * The library itself launches the same kernels through the driver API from an embedded fatbin
 * (cuda_module.h, src/cuda_dev.c); this runtime-API face serves the kernel tests and benchmark.
 */
#ifndef CHORUS_CUDA_MEMOPS_H
#define CHORUS_CUDA_MEMOPS_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst = src, nbytes bytes (device, host or peer memory: cudaMemcpyAsync with cudaMemcpyDefault). */
int cuda_memops_copy(void *dst, const void *src, size_t nbytes, void *stream);
/* dst[i] = a[i] op b[i] for count elements; avg reduces as sum; dst may equal a or b. */
int cuda_memops_reduce(void *dst, const void *a, const void *b, size_t count,
                       chorusDataType_t dtype, chorusRedOp_t op, void *stream);
/* dst[i] = src[i] / divisor (integers truncate; a zero divisor leaves integers unchanged). */
int cuda_memops_divide(void *dst, const void *src, size_t count, chorusDataType_t dtype,
                       uint64_t divisor, void *stream);
const char *cuda_memops_error_string(int err);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_CUDA_MEMOPS_H */
