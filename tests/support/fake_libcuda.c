/*
 * fake_libcuda.c: a stand-in for the CUDA driver (soname libcuda.so.1) with one entry point,
 * cuPointerGetAttribute, that calls a fixed address range "device memory". It lets a machine
 * without a GPU test that a build of Chorus without CUDA refuses a device pointer (instead of
 * reading it as host memory). Test support only; never installed.
 */
#include <stdint.h>

#define FAKE_DEVICE_BASE ((uintptr_t)0x7e0000000000ull)
#define FAKE_DEVICE_BYTES ((uintptr_t)1 << 30)

int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr);

int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr)
{
    if (ptr < FAKE_DEVICE_BASE || ptr >= FAKE_DEVICE_BASE + FAKE_DEVICE_BYTES)
        return 1; /* CUDA_ERROR_INVALID_VALUE: not memory the driver knows */
    if (attribute == 2) { /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
        *(unsigned *)data = 2; /* CU_MEMORYTYPE_DEVICE */
        return 0;
    }
    if (attribute == 8) { /* CU_POINTER_ATTRIBUTE_IS_MANAGED */
        *(unsigned *)data = 0;
        return 0;
    }
    return 1;
}
