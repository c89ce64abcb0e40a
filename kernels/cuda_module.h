/*
 * cuda_module.h: the CUDA memops kernels as one fatbin image, for cuModuleLoadData.
 *
 * CUDA builds compile kernels/cuda_memops.cu a second time to a fatbin (every architecture of
 * CMAKE_CUDA_ARCHITECTURES, plus PTX of the highest) and embed it here, so the library launches
 * its kernels through the driver API (cuLaunchKernel) with no CUDA runtime linked in. Builds
 * without CUDA link kernels/cuda_module_none.c: a NULL image of 0 bytes.
 *
 * The kernels are extern "C", one per dtype x operation x access mode:
 *   chorus_map_<dtype>_<op>_<mode>
 *   dtype: int8 uint8 int32 uint32 int64 uint64 float16 float32 float64 bfloat16 (dtype_name())
 *   op:    sum prod max min div      (avg reduces as sum; div is avg's last step)
 *   mode:  vec   every pointer aligned to the element size: elements [0, head) and
 *                [head + npacks * (16 / esize), count) one by one, the npacks 16-byte packs
 *                between as vectors (a, b and dst then share their alignment modulo 16)
 *          byte  some pointer is not aligned to the element size: element by element, each
 *                loaded and stored a byte at a time (head = count, npacks = 0)
 * with the parameters, in this order:
 *   (unsigned char *dst, const unsigned char *a, const unsigned char *b, size_t count,
 *    size_t head, size_t npacks, uint64_t divisor)
 * computing dst[i] = a[i] op b[i] for i < count (div: dst[i] = a[i] / divisor, b unused; as
 * host_reduce.c, integers truncate, and a zero divisor leaves integers unchanged), with blocks of
 * CUDA_MODULE_THREADS threads striding over the work (any grid size is correct).
 */
#ifndef CHORUS_CUDA_MODULE_H
#define CHORUS_CUDA_MODULE_H

#include <stddef.h>

#define CUDA_MODULE_THREADS 256

extern const unsigned char *const chorus_cuda_fatbin;
extern const size_t chorus_cuda_fatbin_nbytes;

#endif /* CHORUS_CUDA_MODULE_H */
