/*
 * cuda_drv.h: the CUDA driver as Chorus reaches it: functions looked up by name in the libcuda
 * the application already loaded (Chorus never loads it: mem.c's rule), so no CUDA header or
 * library is needed to build. Shared by the staged path (cuda_stage.c), the device path
 * (cuda_dev.c) and the cuda_p2p transport.
 */
#ifndef CHORUS_CUDA_DRV_H
#define CHORUS_CUDA_DRV_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"

typedef int cu_result_t;
typedef void *cu_context_t;
typedef void *cu_stream_t;
typedef void *cu_event_t;
typedef void *cu_module_t;
typedef void *cu_function_t;
typedef unsigned long long cu_ptr_t;
typedef struct {
    char reserved[64];
} cu_ipc_handle_t;

#define CU_SUCCESS 0
#define CU_ERROR_NOT_READY 600
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMHOSTALLOC_PORTABLE 1
#define CU_MEMHOSTALLOC_DEVICEMAP 2
#define CU_STREAM_WAIT_VALUE_EQ 1
#define CU_STREAM_NON_BLOCKING 1
#define CU_EVENT_DISABLE_TIMING 2
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 1
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16

typedef struct cuda_drv {
    cu_result_t (*ptr_attr)(void *data, int attribute, cu_ptr_t ptr);
    cu_result_t (*ctx_push)(cu_context_t ctx);
    cu_result_t (*ctx_pop)(cu_context_t *ctx);
    cu_result_t (*memcpy_async)(cu_ptr_t dst, cu_ptr_t src, size_t nbytes, cu_stream_t stream);
    cu_result_t (*stream_query)(cu_stream_t stream);
    cu_result_t (*event_create)(cu_event_t *event, unsigned flags);
    cu_result_t (*event_record)(cu_event_t event, cu_stream_t stream);
    cu_result_t (*event_query)(cu_event_t event);
    cu_result_t (*event_destroy)(cu_event_t event);
    cu_result_t (*host_alloc)(void **p, size_t nbytes, unsigned flags);
    cu_result_t (*host_free)(void *p);
    cu_result_t (*error_string)(cu_result_t err, const char **str);
    cu_result_t (*device_count)(int *count); /* optional: device lists only */
    cu_result_t (*ctx_device)(int *device); /* optional: chorusCommCuDevice only */
    /* optional: the asynchronous path */
    cu_result_t (*write32)(cu_stream_t stream, cu_ptr_t addr, uint32_t value, unsigned flags);
    cu_result_t (*wait32)(cu_stream_t stream, cu_ptr_t addr, uint32_t value, unsigned flags);
    cu_result_t (*host_dptr)(cu_ptr_t *dptr, void *p, unsigned flags);
    /* optional: the device path (cuda_dev.c, cuda_p2p.c) and device chorusMemAlloc */
    cu_result_t (*mem_alloc)(cu_ptr_t *dptr, size_t nbytes);
    cu_result_t (*mem_free)(cu_ptr_t dptr);
    cu_result_t (*ipc_get)(cu_ipc_handle_t *handle, cu_ptr_t dptr);
    cu_result_t (*ipc_open)(cu_ptr_t *dptr, cu_ipc_handle_t handle, unsigned flags);
    cu_result_t (*ipc_close)(cu_ptr_t dptr);
    cu_result_t (*stream_create)(cu_stream_t *stream, unsigned flags);
    cu_result_t (*stream_destroy)(cu_stream_t stream);
    cu_result_t (*module_load)(cu_module_t *module, const void *image);
    cu_result_t (*module_unload)(cu_module_t module);
    cu_result_t (*module_function)(cu_function_t *fn, cu_module_t module, const char *name);
    cu_result_t (*launch)(cu_function_t fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shmem, cu_stream_t stream,
                          void **params, void **extra);
    cu_result_t (*device_attr)(int *value, int attribute, int device);
    cu_result_t (*ctx_current)(cu_context_t *ctx);
    /* optional: buffers that belong to no context (cuMemCreate memory, cudaMallocAsync pools) */
    cu_result_t (*primary_retain)(cu_context_t *ctx, int device);
    cu_result_t (*primary_release)(int device);
    /* optional: which GPUs the device path may pair (cuda_dev_decide) */
    cu_result_t (*device_busid)(char *busid, int len, int device);
    cu_result_t (*device_by_busid)(int *device, const char *busid);
    cu_result_t (*can_access_peer)(int *can, int device, int peer_device);
} cuda_drv_t;

extern cuda_drv_t cudrv;

/* Resolve the table (once); NULL when the loaded driver has every function staging needs, else
 * the name of the first missing one. */
const char *cuda_drv_missing(void);
/* NULL when the device path's functions are all there too, else the first missing one. */
const char *cuda_drv_missing_dev(void);
/* 1 when the process had loaded the driver (the table's functions come from it). */
int cuda_drv_loaded(void);
/* The driver's text for r. */
const char *cuda_drv_str(cu_result_t r);
/* The context that owns device pointer p (for memory that belongs to none, its device's primary
 * context, retained until the pop), pushed current and returned in *ctx_p; fn names the call in
 * the error. One at a time per thread: every push is popped before the next. */
chorusResult_t cuda_push_ctx(const char *fn, int rank, const void *p, cu_context_t *ctx_p);
void cuda_pop_ctx(void);
/* Wait until the work queued on stream so far has run: an event recorded there now, polled with
 * the communicator's deadline and abort flag (the context current). */
chorusResult_t cuda_wait_stream(chorusComm_t comm, const char *fn, cu_stream_t stream);
/* Wait until event has completed, polling the same way; what names the wait in an error. */
chorusResult_t cuda_wait_event(chorusComm_t comm, const char *fn, cu_event_t event,
                               const char *what);

#endif /* CHORUS_CUDA_DRV_H */
