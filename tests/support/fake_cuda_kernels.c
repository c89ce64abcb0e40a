/*
 * fake_cuda_kernels.c: the modules and kernel launches of the stand-in CUDA driver
 * (fake_cuda_stage.c says what the whole driver does). Any image loads; the functions are the
 * kernels/cuda_module.h names, and a launch checks its shape (grid, block, the alignment its
 * mode promises), copies its parameters and queues an operation that the pump computes, in
 * stream order, with the host backend. The test counts launches (fake_cuda_launches) and makes
 * one fail (fake_cuda_fail_launch).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda_module.h"
#include "fake_cuda_int.h"
#include "memops.h"

#define MAX_MODULES 64
#define NDTYPES 10
#define NOPS 5 /* sum prod max min (chorusRedOp_t values) and div */
#define KERNELS_PER_MODULE (NDTYPES * NOPS * 2)

/* Test side: inspect and fail launches. */
#pragma GCC visibility push(default)
int fake_cuda_launches(void);
void fake_cuda_fail_launch(int nth);
/* The driver's entry points (their CUDA names and the ABI src/cuda_drv.c expects). */
int cuModuleLoadData(void **module, const void *image);
int cuModuleUnload(void *module);
int cuModuleGetFunction(void **fn, void *module, const char *name);
int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
#pragma GCC visibility pop

static int launches, fail_at;

/* Make this process's nth launch from now fail with CUDA_ERROR_LAUNCH_FAILED (0: none). */
void fake_cuda_fail_launch(int nth)
{
    __atomic_store_n(&fail_at, nth > 0 ? __atomic_load_n(&launches, __ATOMIC_RELAXED) + nth : 0,
                     __ATOMIC_RELAXED);
}

/* Kernel launches this process queued (the test tells the GPU-to-GPU path by them). */
int fake_cuda_launches(void)
{
    return __atomic_load_n(&launches, __ATOMIC_RELAXED);
}

/* ---- Modules and kernels (kernels/cuda_module.h) ---- */

/* A module handle is &module_handles[m]; a function handle is &kernel_handles[k] with
 * k = m * KERNELS_PER_MODULE + (dtype * NOPS + op) * 2 + byte_mode. */
static unsigned char module_handles[MAX_MODULES], module_live[MAX_MODULES];
static unsigned char kernel_handles[MAX_MODULES * KERNELS_PER_MODULE];
static const char *const op_names[NOPS] = {"sum", "prod", "max", "min", "div"};

/* The index of handle h in an array of n bytes at base, or -1. */
static int handle_index(const void *h, const unsigned char *base, size_t n)
{
    uintptr_t p = (uintptr_t)h, b = (uintptr_t)base;
    return p >= b && p - b < n ? (int)(p - b) : -1;
}

int cuModuleLoadData(void **module, const void *image)
{
    no_parked_stream("cuModuleLoadData");
    (void)image; /* any image: the kernels are the host backend's */
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    int res = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    for (int m = 0; m < MAX_MODULES && res != 0; m++)
        if (!module_live[m]) {
            module_live[m] = 1;
            *module = &module_handles[m];
            res = 0;
        }
    pthread_mutex_unlock(&lock);
    return res;
}

int cuModuleUnload(void *module)
{
    int m = handle_index(module, module_handles, MAX_MODULES), res = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    if (m >= 0 && module_live[m]) {
        module_live[m] = 0;
        res = 0;
    }
    pthread_mutex_unlock(&lock);
    return res;
}

int cuModuleGetFunction(void **fn, void *module, const char *name)
{
    no_parked_stream("cuModuleGetFunction");
    int m = handle_index(module, module_handles, MAX_MODULES);
    pthread_mutex_lock(&lock);
    int live = m >= 0 && module_live[m];
    pthread_mutex_unlock(&lock);
    if (!live)
        return CUDA_ERROR_INVALID_HANDLE;
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (int k = 0; k < KERNELS_PER_MODULE; k++) {
        char want[64];
        snprintf(want, sizeof(want), "chorus_map_%s_%s_%s",
                 dtype_name((chorusDataType_t)(k / (NOPS * 2))), op_names[k / 2 % NOPS],
                 k % 2 ? "byte" : "vec");
        if (strcmp(name, want) == 0) {
            *fn = &kernel_handles[m * KERNELS_PER_MODULE + k];
            return 0;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

/* Whether the launch's pointers and packs are what its mode promises (cuda_module.h): in vec
 * mode every pointer the kernel reads is aligned to the element size; packs, in either mode,
 * start 16-byte aligned in every operand and end within count. */
static int launch_shape_ok(const op_t *op, int byte_mode, size_t head, size_t npacks)
{
    size_t esize = dtype_nbytes((chorusDataType_t)op->dtype), per_pack = 16 / esize;
    int operands = op->redop == OP_DIV ? 2 : 3; /* div reads a only */
    for (int i = 0; i < operands; i++) {
        if (!byte_mode && op->span[i].p % esize != 0)
            return 0;
        if (npacks > 0 && (op->span[i].p + head * esize) % 16 != 0)
            return 0;
    }
    return npacks == 0 || (head <= op->count && npacks <= (op->count - head) / per_pack);
}

int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra)
{
    (void)shmem;
    int k = handle_index(fn, kernel_handles, sizeof(kernel_handles));
    pthread_mutex_lock(&lock);
    int live = k >= 0 && module_live[k / KERNELS_PER_MODULE];
    pthread_mutex_unlock(&lock);
    if (!live)
        return CUDA_ERROR_INVALID_HANDLE;
    if (params == NULL || extra != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int fail = __atomic_load_n(&fail_at, __ATOMIC_RELAXED);
    if (fail > 0 && __atomic_load_n(&launches, __ATOMIC_RELAXED) + 1 >= fail) {
        __atomic_store_n(&fail_at, 0, __ATOMIC_RELAXED);
        return 719; /* CUDA_ERROR_LAUNCH_FAILED */
    }
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) {
        fault("a launch with an empty grid or block");
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (bx != CUDA_MODULE_THREADS || by != 1 || bz != 1)
        fault("a launch whose block is not CUDA_MODULE_THREADS x 1 x 1");
    /* The parameters are copied now, as CUDA does: the caller may reuse them at once. */
    uintptr_t dst, a, b;
    size_t count, head, npacks;
    uint64_t divisor;
    memcpy(&dst, params[0], sizeof(dst));
    memcpy(&a, params[1], sizeof(a));
    memcpy(&b, params[2], sizeof(b));
    memcpy(&count, params[3], sizeof(count));
    memcpy(&head, params[4], sizeof(head));
    memcpy(&npacks, params[5], sizeof(npacks));
    memcpy(&divisor, params[6], sizeof(divisor));
    k %= KERNELS_PER_MODULE;
    op_t op = {.kind = OP_KERNEL, .dtype = k / (NOPS * 2), .redop = k / 2 % NOPS};
    size_t nbytes = count * dtype_nbytes((chorusDataType_t)op.dtype);
    op.span[0] = span_of(dst, nbytes);
    op.span[1] = span_of(a, nbytes);
    op.span[2] = span_of(b, op.redop == OP_DIV ? 0 : nbytes);
    op.count = count;
    op.divisor = divisor;
    if (count > 0 && !launch_shape_ok(&op, k % 2, head, npacks))
        fault("a launch whose pointers or packs break its mode's alignment");
    int res = queue_op(&op, stream);
    if (res == 0)
        __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
    return res;
}
