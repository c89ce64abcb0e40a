/*
 * cuda_stage.c: collectives on CUDA device buffers, staged through pinned host memory.
 *
 * The first way device buffers run, before the device executor and the cuda_p2p transport
 * (issue 8): every device input is copied into a pinned host arena, in order on the caller's CUDA
 * stream (after the work queued there before the call); the operation runs on the host copies as
 * any host operation; the outputs are copied back on the same stream, and the call returns when
 * they have landed. Correct, in stream order, and slow: the calling thread blocks until the
 * stream is idle (not the asynchrony CUDA users expect), and every byte crosses PCIe twice.
 *
 * CUDA is reached through the driver the application already loaded (mem.c's rule: Chorus never
 * loads it), its functions looked up by name, so this file needs no CUDA header or library. Each
 * call runs in the context that owns the device buffer (pushed for the call's CUDA calls). Every
 * wait for a stream polls with the communicator's deadline and abort flag.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "cuda_stage.h"
#include "debug.h"
#include "memops.h"

typedef int cu_result_t;
typedef void *cu_context_t;
typedef void *cu_stream_t;
typedef unsigned long long cu_ptr_t;
#define CU_SUCCESS 0
#define CU_ERROR_NOT_READY 600
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_MEMHOSTALLOC_PORTABLE 1

static struct {
    cu_result_t (*ptr_attr)(void *data, int attribute, cu_ptr_t ptr);
    cu_result_t (*ctx_push)(cu_context_t ctx);
    cu_result_t (*ctx_pop)(cu_context_t *ctx);
    cu_result_t (*memcpy_async)(cu_ptr_t dst, cu_ptr_t src, size_t nbytes, cu_stream_t stream);
    cu_result_t (*stream_query)(cu_stream_t stream);
    cu_result_t (*host_alloc)(void **p, size_t nbytes, unsigned flags);
    cu_result_t (*host_free)(void *p);
    cu_result_t (*error_string)(cu_result_t err, const char **str);
    cu_result_t (*device_count)(int *count); /* optional: device lists only */
    cu_result_t (*ctx_device)(int *device); /* optional: chorusCommCuDevice only */
} cu;
static const char *cu_missing; /* the first function staging needs that the driver lacks */
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_resolve(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    struct {
        void **slot;
        const char *name;
        int needed; /* by staging */
    } fns[] = {
        {(void **)&cu.ptr_attr, "cuPointerGetAttribute", 1},
        {(void **)&cu.ctx_push, "cuCtxPushCurrent_v2", 1},
        {(void **)&cu.ctx_pop, "cuCtxPopCurrent_v2", 1},
        {(void **)&cu.memcpy_async, "cuMemcpyAsync", 1},
        {(void **)&cu.stream_query, "cuStreamQuery", 1},
        {(void **)&cu.host_alloc, "cuMemHostAlloc", 1},
        {(void **)&cu.host_free, "cuMemFreeHost", 1},
        {(void **)&cu.error_string, "cuGetErrorString", 1},
        {(void **)&cu.device_count, "cuDeviceGetCount", 0},
        {(void **)&cu.ctx_device, "cuCtxGetDevice", 0},
    };
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
        void *f = lib != NULL ? dlsym(lib, fns[i].name) : NULL;
        if (f == NULL && fns[i].needed && cu_missing == NULL)
            cu_missing = fns[i].name;
        memcpy(fns[i].slot, &f, sizeof(f));
    }
}

const char *cuda_stage_missing(void)
{
    pthread_once(&cu_once, cu_resolve);
    return cu_missing;
}

int cuda_device_count(void)
{
    pthread_once(&cu_once, cu_resolve);
    int n = 0;
    return cu.device_count != NULL && cu.device_count(&n) == CU_SUCCESS ? n : -1;
}

int cuda_current_device(void)
{
    int dev = -1;
    if (cuda_device_count() < 0 || cu.ctx_device == NULL || cu.ctx_device(&dev) != CU_SUCCESS)
        return -1;
    return dev;
}

static const char *cu_str(cu_result_t r)
{
    const char *s = NULL;
    if (cu.error_string == NULL || cu.error_string(r, &s) != CU_SUCCESS || s == NULL)
        return "unknown CUDA error";
    return s;
}

/* Where an operation's input and output lie, in bytes; nbytes 0 where the rank has none. */
typedef struct {
    const char *send;
    size_t send_nbytes;
    char *recv;
    size_t recv_nbytes;
} regions_t;

static regions_t regions_of(const comm_op_t *op, int rank, int nranks)
{
    const coll_args_t *a = &op->args;
    size_t one = a->count * dtype_nbytes(a->dtype), all = one * (size_t)nranks;
    regions_t g = {a->sendbuff, 0, a->recvbuff, 0};
    switch (a->kind) {
    case COLL_ALLREDUCE:
        g.send_nbytes = g.recv_nbytes = one;
        break;
    case COLL_BROADCAST:
        g.send_nbytes = rank == a->root ? one : 0;
        g.recv_nbytes = one;
        break;
    case COLL_REDUCE:
        g.send_nbytes = one;
        g.recv_nbytes = rank == a->root ? one : 0;
        break;
    case COLL_ALLGATHER:
        g.send_nbytes = one;
        g.recv_nbytes = all;
        break;
    case COLL_REDUCESCATTER:
        g.send_nbytes = all;
        g.recv_nbytes = one;
        break;
    case COLL_ALLTOALL:
        g.send_nbytes = g.recv_nbytes = all;
        break;
    case COLL_SEND:
        g.send_nbytes = one;
        break;
    case COLL_RECV:
        g.recv_nbytes = one;
        break;
    }
    return g;
}

/* The context that owns device pointer p, pushed current and returned in *ctx_p. */
static chorusResult_t push_ctx(const char *fn, int rank, const void *p, cu_context_t *ctx_p)
{
    cu_context_t ctx = NULL;
    cu_result_t r = cu.ptr_attr(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (cu_ptr_t)(uintptr_t)p);
    if (r == CU_SUCCESS && ctx != NULL)
        r = cu.ctx_push(ctx);
    if (r != CU_SUCCESS)
        return ERR(chorusUnhandledCudaError, SUB_COLL,
                   "%s (rank %d): no CUDA context for the device buffer %p: %s", fn, rank, p,
                   cu_str(r));
    *ctx_p = ctx;
    return chorusSuccess;
}

static void pop_ctx(void)
{
    cu_context_t ctx;
    cu.ctx_pop(&ctx);
}

/* Wait until everything queued on stream has run, polling with the communicator's deadline. */
static chorusResult_t wait_stream(chorusComm_t comm, const char *fn, cu_stream_t stream)
{
    int64_t start = fifo_now_ns(), deadline = start + comm->timeout_ms * 1000000;
    for (;;) {
        cu_result_t r = cu.stream_query(stream);
        if (r == CU_SUCCESS)
            return chorusSuccess;
        if (r != CU_ERROR_NOT_READY)
            return ERR(chorusUnhandledCudaError, SUB_COLL, "%s (rank %d): CUDA stream %p: %s", fn,
                       comm->rank, stream, cu_str(r));
        if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE))
            return ERR(chorusInvalidUsage, SUB_COLL,
                       "%s (rank %d): aborted while waiting for CUDA stream %p", fn, comm->rank,
                       stream);
        int64_t now = fifo_now_ns();
        if (now >= deadline)
            return ERR(chorusTimeout, SUB_COLL,
                       "%s (rank %d): CUDA stream %p still busy after %lld ms (the work queued "
                       "before the call does not finish; timeout CHORUS_TIMEOUT_MS)",
                       fn, comm->rank, stream, (long long)comm->timeout_ms);
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

/* The pinned arena: at least nbytes, allocated in ctx (pushed current by the caller). */
static chorusResult_t arena_reserve(chorusComm_t comm, const char *fn, size_t nbytes,
                                    cu_context_t ctx)
{
    if (comm->stage_nbytes >= nbytes)
        return chorusSuccess;
    size_t want = 1 << 20;
    while (want < nbytes)
        want *= 2;
    cuda_stage_free(comm);
    void *p = NULL;
    cu_result_t r = cu.host_alloc(&p, want, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CU_SUCCESS)
        return ERR(chorusUnhandledCudaError, SUB_ALLOC,
                   "%s (rank %d): pinned staging buffer of %zu bytes (cuMemHostAlloc): %s", fn,
                   comm->rank, want, cu_str(r));
    comm->stage_base = p;
    comm->stage_nbytes = want;
    comm->stage_ctx = ctx;
    return chorusSuccess;
}

#define ARENA_ALIGN 256

static size_t round_up(size_t n)
{
    return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

chorusResult_t cuda_stage_in(chorusComm_t comm, comm_op_t *ops, int n, const char *fn)
{
    /* on_device ops passed check_buffer, which found the driver complete (cuda_stage_missing). */
    /* Sizes first: one arena for every device operation of the batch. */
    size_t total = 0;
    const void *any = NULL;
    for (int i = 0; i < n; i++) {
        if (!ops[i].on_device)
            continue;
        regions_t g = regions_of(&ops[i], comm->rank, comm->nranks);
        total += round_up(g.recv_nbytes) + round_up(g.send_nbytes);
        any = g.recv_nbytes ? (const void *)g.recv : g.send_nbytes ? (const void *)g.send : any;
    }
    if (any == NULL)
        return chorusSuccess; /* device operations with nothing to move (count 0) */
    cu_context_t ctx;
    CHECK(push_ctx(fn, comm->rank, any, &ctx));
    chorusResult_t res = arena_reserve(comm, fn, total, ctx);
    char *at = comm->stage_base;
    for (int i = 0; i < n && res == chorusSuccess; i++) {
        if (!ops[i].on_device)
            continue;
        comm_op_t *op = &ops[i];
        regions_t g = regions_of(op, comm->rank, comm->nranks);
        char *recv = g.recv_nbytes ? at : NULL;
        at += round_up(g.recv_nbytes);
        const char *send = NULL;
        if (g.send_nbytes && recv != NULL && g.send >= g.recv &&
            g.send + g.send_nbytes <= g.recv + g.recv_nbytes) {
            send = recv + (g.send - g.recv); /* in place: the input inside the output */
        } else if (g.send_nbytes) {
            send = at;
            at += round_up(g.send_nbytes);
        }
        if (g.send_nbytes) {
            cu_result_t r = cu.memcpy_async((cu_ptr_t)(uintptr_t)send, (cu_ptr_t)(uintptr_t)g.send,
                                            g.send_nbytes, op->cuda_stream);
            if (r != CU_SUCCESS)
                res = ERR(chorusUnhandledCudaError, SUB_COLL,
                          "%s (rank %d): copying sendbuff %p (%zu bytes) to pinned memory on "
                          "stream %p: %s",
                          fn, comm->rank, (const void *)g.send, g.send_nbytes, op->cuda_stream,
                          cu_str(r));
        }
        op->args.sendbuff = g.send_nbytes ? send : NULL;
        op->args.recvbuff = recv;
    }
    for (int i = 0; i < n && res == chorusSuccess; i++)
        if (ops[i].on_device)
            res = wait_stream(comm, fn, ops[i].cuda_stream);
    pop_ctx();
    return res;
}

chorusResult_t cuda_stage_out(chorusComm_t comm, const comm_op_t *user, const comm_op_t *staged,
                              int n, const char *fn)
{
    const void *any = NULL;
    for (int i = 0; i < n && any == NULL; i++)
        if (user[i].on_device && regions_of(&user[i], comm->rank, comm->nranks).recv_nbytes)
            any = user[i].args.recvbuff;
    if (any == NULL)
        return chorusSuccess;
    cu_context_t ctx;
    CHECK(push_ctx(fn, comm->rank, any, &ctx));
    chorusResult_t res = chorusSuccess;
    for (int i = 0; i < n && res == chorusSuccess; i++) {
        regions_t g = regions_of(&user[i], comm->rank, comm->nranks);
        if (!user[i].on_device || g.recv_nbytes == 0)
            continue;
        cu_result_t r = cu.memcpy_async((cu_ptr_t)(uintptr_t)g.recv,
                                        (cu_ptr_t)(uintptr_t)staged[i].args.recvbuff, g.recv_nbytes,
                                        user[i].cuda_stream);
        if (r != CU_SUCCESS)
            res =
                ERR(chorusUnhandledCudaError, SUB_COLL,
                    "%s (rank %d): copying the result to recvbuff %p (%zu bytes) on stream %p: "
                    "%s",
                    fn, comm->rank, (void *)g.recv, g.recv_nbytes, user[i].cuda_stream, cu_str(r));
    }
    /* The arena is reused by the next call: wait until the copies have read it. */
    for (int i = 0; i < n && res == chorusSuccess; i++)
        if (user[i].on_device)
            res = wait_stream(comm, fn, user[i].cuda_stream);
    pop_ctx();
    return res;
}

void cuda_stage_free(chorusComm_t comm)
{
    if (comm->stage_base == NULL)
        return;
    int pushed = comm->stage_ctx != NULL && cu.ctx_push(comm->stage_ctx) == CU_SUCCESS;
    if (cu.host_free(comm->stage_base) != CU_SUCCESS)
        WARN(SUB_ALLOC, "freeing the pinned staging buffer failed (was CUDA torn down first?)");
    if (pushed)
        pop_ctx();
    comm->stage_base = NULL;
    comm->stage_nbytes = 0;
}
