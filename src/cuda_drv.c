/*
 * cuda_drv.c: the CUDA driver table (cuda_drv.h): functions looked up by name in the libcuda the
 * process already loaded, the context of a device pointer pushed for a call, and a stream wait
 * with the communicator's deadline.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cuda_drv.h"
#include "cuda_stage.h"
#include "debug.h"

cuda_drv_t cudrv;
static const char *cu_missing; /* the first function staging needs that the driver lacks */
static const char *cu_missing_dev; /* the first one the device path needs */
static int cu_loaded; /* the process had loaded libcuda.so.1 when the table was resolved */
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_resolve(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    cu_loaded = lib != NULL;
    struct {
        void **slot;
        const char *name;
        int needed; /* 1: by staging; 2: by the device path; 0: optional */
    } fns[] = {
        {(void **)&cudrv.ptr_attr, "cuPointerGetAttribute", 1},
        {(void **)&cudrv.ctx_push, "cuCtxPushCurrent_v2", 1},
        {(void **)&cudrv.ctx_pop, "cuCtxPopCurrent_v2", 1},
        {(void **)&cudrv.memcpy_async, "cuMemcpyAsync", 1},
        {(void **)&cudrv.stream_query, "cuStreamQuery", 1},
        {(void **)&cudrv.event_create, "cuEventCreate", 1},
        {(void **)&cudrv.event_record, "cuEventRecord", 1},
        {(void **)&cudrv.event_query, "cuEventQuery", 1},
        {(void **)&cudrv.event_destroy, "cuEventDestroy_v2", 1},
        {(void **)&cudrv.host_alloc, "cuMemHostAlloc", 1},
        {(void **)&cudrv.host_free, "cuMemFreeHost", 1},
        {(void **)&cudrv.error_string, "cuGetErrorString", 1},
        {(void **)&cudrv.device_count, "cuDeviceGetCount", 0},
        {(void **)&cudrv.ctx_device, "cuCtxGetDevice", 0},
        {(void **)&cudrv.write32, "cuStreamWriteValue32_v2", 0},
        {(void **)&cudrv.wait32, "cuStreamWaitValue32_v2", 0},
        {(void **)&cudrv.host_dptr, "cuMemHostGetDevicePointer_v2", 0},
        {(void **)&cudrv.mem_alloc, "cuMemAlloc_v2", 2},
        {(void **)&cudrv.mem_free, "cuMemFree_v2", 2},
        {(void **)&cudrv.ipc_get, "cuIpcGetMemHandle", 2},
        {(void **)&cudrv.ipc_open, "cuIpcOpenMemHandle_v2", 2},
        {(void **)&cudrv.ipc_close, "cuIpcCloseMemHandle", 2},
        {(void **)&cudrv.stream_create, "cuStreamCreate", 2},
        {(void **)&cudrv.stream_destroy, "cuStreamDestroy_v2", 2},
        {(void **)&cudrv.module_load, "cuModuleLoadData", 2},
        {(void **)&cudrv.module_unload, "cuModuleUnload", 2},
        {(void **)&cudrv.module_function, "cuModuleGetFunction", 2},
        {(void **)&cudrv.launch, "cuLaunchKernel", 2},
        {(void **)&cudrv.device_attr, "cuDeviceGetAttribute", 2},
        {(void **)&cudrv.ctx_current, "cuCtxGetCurrent", 2},
        {(void **)&cudrv.primary_retain, "cuDevicePrimaryCtxRetain", 0},
        {(void **)&cudrv.primary_release, "cuDevicePrimaryCtxRelease_v2", 0},
        {(void **)&cudrv.device_busid, "cuDeviceGetPCIBusId", 0},
        {(void **)&cudrv.device_by_busid, "cuDeviceGetByPCIBusId", 0},
        {(void **)&cudrv.can_access_peer, "cuDeviceCanAccessPeer", 0},
    };
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
        void *f = lib != NULL ? dlsym(lib, fns[i].name) : NULL;
        if (f == NULL && fns[i].needed == 1 && cu_missing == NULL)
            cu_missing = fns[i].name;
        if (f == NULL && fns[i].needed == 2 && cu_missing_dev == NULL)
            cu_missing_dev = fns[i].name;
        memcpy(fns[i].slot, &f, sizeof(f));
    }
}

const char *cuda_drv_missing(void)
{
    pthread_once(&cu_once, cu_resolve);
    return cu_missing;
}

const char *cuda_drv_missing_dev(void)
{
    pthread_once(&cu_once, cu_resolve);
    return cu_missing != NULL ? cu_missing : cu_missing_dev;
}

int cuda_drv_loaded(void)
{
    pthread_once(&cu_once, cu_resolve);
    return cu_loaded;
}

int cuda_device_count(void)
{
    pthread_once(&cu_once, cu_resolve);
    int n = 0;
    return cudrv.device_count != NULL && cudrv.device_count(&n) == CU_SUCCESS ? n : -1;
}

int cuda_current_device(void)
{
    int dev = -1;
    if (cuda_device_count() < 0 || cudrv.ctx_device == NULL || cudrv.ctx_device(&dev) != CU_SUCCESS)
        return -1;
    return dev;
}

void cuda_device_busid(int dev, char *busid, size_t len)
{
    busid[0] = '\0';
    if (dev >= 0 && cuda_device_count() >= 0 && cudrv.device_busid != NULL &&
        cudrv.device_busid(busid, (int)len, dev) != CU_SUCCESS)
        busid[0] = '\0'; /* a failed call may leave part of a string */
    busid[len - 1] = '\0';
}

const char *cuda_drv_str(cu_result_t r)
{
    const char *s = NULL;
    if (cudrv.error_string == NULL || cudrv.error_string(r, &s) != CU_SUCCESS || s == NULL)
        return "unknown CUDA error";
    return s;
}

/* The device whose primary context cuda_push_ctx retained for the pushed one, or -1. */
static __thread int retained_dev = -1;

/* The context that owns device pointer p, pushed current and returned in *ctx_p. */
chorusResult_t cuda_push_ctx(const char *fn, int rank, const void *p, cu_context_t *ctx_p)
{
    cu_context_t ctx = NULL;
    cu_ptr_t ptr = (cu_ptr_t)(uintptr_t)p;
    int dev = -1;
    cu_result_t r = cudrv.ptr_attr(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, ptr);
    if (r == CU_SUCCESS && ctx == NULL) {
        /* Memory with no owning context (cuMemCreate/cuMemMap, cudaMallocAsync pools): the
         * primary context of its device, as the runtime would use. */
        if (cudrv.primary_retain == NULL || cudrv.primary_release == NULL)
            return ERR(chorusUnhandledCudaError, SUB_COLL,
                       "%s (rank %d): the device buffer %p belongs to no CUDA context and the "
                       "driver lacks cuDevicePrimaryCtxRetain",
                       fn, rank, p);
        r = cudrv.ptr_attr(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr);
        if (r == CU_SUCCESS)
            r = cudrv.primary_retain(&ctx, dev);
        if (r != CU_SUCCESS)
            dev = -1;
    }
    if (r == CU_SUCCESS && (r = cudrv.ctx_push(ctx)) != CU_SUCCESS && dev >= 0)
        cudrv.primary_release(dev);
    if (r != CU_SUCCESS)
        return ERR(chorusUnhandledCudaError, SUB_COLL,
                   "%s (rank %d): no CUDA context for the device buffer %p: %s", fn, rank, p,
                   cuda_drv_str(r));
    retained_dev = dev;
    *ctx_p = ctx;
    return chorusSuccess;
}

void cuda_pop_ctx(void)
{
    cu_context_t ctx;
    cudrv.ctx_pop(&ctx);
    if (retained_dev >= 0)
        cudrv.primary_release(retained_dev);
    retained_dev = -1;
}

chorusResult_t cuda_wait_event(chorusComm_t comm, const char *fn, cu_event_t event,
                               const char *what)
{
    int64_t start = fifo_now_ns(), deadline = start + comm->timeout_ms * 1000000;
    for (;;) {
        cu_result_t r = cudrv.event_query(event);
        if (r == CU_SUCCESS)
            return chorusSuccess;
        if (r != CU_ERROR_NOT_READY)
            return ERR(chorusUnhandledCudaError, SUB_COLL, "%s (rank %d): %s: %s", fn, comm->rank,
                       what, cuda_drv_str(r));
        if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE))
            return ERR(chorusInvalidUsage, SUB_COLL, "%s (rank %d): aborted while waiting for %s",
                       fn, comm->rank, what);
        int64_t now = fifo_now_ns();
        if (now >= deadline)
            return ERR(chorusTimeout, SUB_COLL,
                       "%s (rank %d): %s still busy after %lld ms (the work queued before it does "
                       "not finish; timeout CHORUS_TIMEOUT_MS)",
                       fn, comm->rank, what, (long long)comm->timeout_ms);
        /* Yield for the first 200 us (a copy of a few bytes takes a few us; a sleep, with the
         * default 50 us timer slack, cost 230 us per 8-byte call on the H200 machine), then
         * sleep 100 us at a time: a long kernel ahead costs little CPU. */
        if (now - start < 200000) {
            sched_yield();
        } else {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
}

chorusResult_t cuda_wait_stream(chorusComm_t comm, const char *fn, cu_stream_t stream)
{
    cu_event_t ev = NULL;
    cu_result_t r = cudrv.event_create(&ev, CU_EVENT_DISABLE_TIMING);
    if (r == CU_SUCCESS && (r = cudrv.event_record(ev, stream)) != CU_SUCCESS)
        cudrv.event_destroy(ev);
    if (r != CU_SUCCESS)
        return ERR(chorusUnhandledCudaError, SUB_COLL,
                   "%s (rank %d): an event on CUDA stream %p (cuEventCreate/cuEventRecord): %s "
                   "(the stream must belong to the device buffers' context)",
                   fn, comm->rank, stream, cuda_drv_str(r));
    char what[64];
    snprintf(what, sizeof(what), "CUDA stream %p", stream);
    chorusResult_t res = cuda_wait_event(comm, fn, ev, what);
    cudrv.event_destroy(ev); /* a pending event's resources are freed once it completes */
    return res;
}
