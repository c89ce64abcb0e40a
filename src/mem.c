/*
 * mem.c: chorusMemAlloc/Free and memory-type detection.
 *
 * A CUDA device pointer can only exist in a process where the CUDA driver (libcuda.so.1) is
 * loaded, so detection asks the driver only then: dlopen with RTLD_NOLOAD never loads it, and a
 * process without CUDA pays one cheap check every 100 ms at most. This build has no CUDA support,
 * so a device pointer is refused with a clear error rather than read as host memory.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "debug.h"

typedef int (*cu_pointer_get_attribute_t)(void *data, int attribute, uintptr_t ptr);
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_MEMORYTYPE_DEVICE 2

static cu_pointer_get_attribute_t cu_get_attr;
static int64_t next_probe_ns;

int mem_is_device(const void *ptr)
{
    cu_pointer_get_attribute_t fn = __atomic_load_n(&cu_get_attr, __ATOMIC_ACQUIRE);
    if (fn == NULL) {
        /* The coarse clock: every call asks (twice), and the precise one costs a VM exit on
         * some hypervisors; a probe every 100 ms needs no precision. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        if (now < __atomic_load_n(&next_probe_ns, __ATOMIC_RELAXED))
            return 0;
        __atomic_store_n(&next_probe_ns, now + 100000000, __ATOMIC_RELAXED);
        void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (lib == NULL)
            return 0;
        fn = (cu_pointer_get_attribute_t)(uintptr_t)dlsym(lib, "cuPointerGetAttribute");
        if (fn == NULL)
            return 0;
        __atomic_store_n(&cu_get_attr, fn, __ATOMIC_RELEASE);
    }
    unsigned type = 0, managed = 0;
    if (fn(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (uintptr_t)ptr) != 0)
        return 0; /* not known to CUDA: host memory */
    if (fn(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (uintptr_t)ptr) == 0 && managed)
        return 0; /* managed memory is host accessible */
    return type == CU_MEMORYTYPE_DEVICE;
}

chorusResult_t chorusMemAlloc(void **ptr, size_t nbytes)
{
    debug_clear_error();
    if (ptr == NULL)
        return ERR(chorusInvalidArgument, SUB_ALLOC, "chorusMemAlloc: ptr is NULL");
    if (nbytes == 0)
        return ERR(chorusInvalidArgument, SUB_ALLOC, "chorusMemAlloc: nbytes is 0");
    void *p = NULL;
    int rc = posix_memalign(&p, 4096, nbytes);
    if (rc != 0)
        return ERR(chorusSystemError, SUB_ALLOC, "chorusMemAlloc of %zu bytes failed: %s", nbytes,
                   strerror(rc));
    *ptr = p;
    return chorusSuccess;
}

chorusResult_t chorusMemFree(void *ptr)
{
    debug_clear_error();
    free(ptr);
    return chorusSuccess;
}
