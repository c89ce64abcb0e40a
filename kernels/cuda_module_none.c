/*
 * cuda_module_none.c: the CUDA kernels' fatbin (cuda_module.h) in builds without CUDA.
 *
 * CUDA builds link the image that the build compiles from cuda_memops.cu and embeds instead
 * (cuda_module_fatbin.c in the build tree), and CMake leaves this file out of them. Here there is
 * no image: a NULL pointer of 0 bytes, which no caller reaches, since a build without CUDA never
 * finds a device to load it on; the symbols exist so that the code that loads it links the same.
 */
#include "cuda_module.h"

const unsigned char *const chorus_cuda_fatbin = NULL;
const size_t chorus_cuda_fatbin_nbytes = 0;
