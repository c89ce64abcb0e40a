/*
 * cuda_order_kernels.h: compute kernels on a caller's stream around a collective
 * (cuda_order_kernels.cu), for test_cuda_coll on a real GPU.
 */
#ifndef CHORUS_TEST_CUDA_ORDER_KERNELS_H
#define CHORUS_TEST_CUDA_ORDER_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Queue on stream: a kernel busy for busy_ms, then a kernel copying nbytes from src_pinned
 * (pinned host memory) into device memory dst. */
cudaError_t order_kernel_write(void *dst, const void *src_pinned, size_t nbytes, unsigned busy_ms,
                               cudaStream_t stream);
/* Queue on stream: a kernel copying nbytes of device memory src into dst_pinned (pinned host
 * memory). */
cudaError_t order_kernel_read(void *dst_pinned, const void *src, size_t nbytes,
                              cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_TEST_CUDA_ORDER_KERNELS_H */
