/*
 * cuda_stage.c: collectives on CUDA device buffers, staged through pinned host memory.
 *
 * The way device buffers run where GPU to GPU (cuda_dev.c, cuda_p2p) does not: across hosts,
 * send/recv and all-to-all, or CHORUS_CUDA_P2P=0. Every device input is copied into pinned host
 * memory, in order on the caller's CUDA stream (after the work queued there before the call); the
 * operation runs on the host copies as any host operation; the outputs are copied back on the
 * same stream. Every byte crosses PCIe twice. Two ways to order it with the stream (the device
 * path uses the same two, without the copies):
 *
 * - Asynchronous (where the driver has stream memory operations, CHORUS_CUDA_ASYNC=1): the call
 *   queues on the stream  [inputs D->H] [write ready=seq] [wait done==seq] [outputs H->D]
 *   [write freed=seq]  and hands the operation to the communicator's CUDA worker thread, then
 *   returns at once. The worker waits for `ready`, runs the operation on the staging slot, and
 *   writes `done`, which lets the stream go on. The flags live in mapped pinned memory. A slot is
 *   reused once the stream wrote its `freed`. A failure is the communicator's async error
 *   (chorusCommGetAsyncError) and still writes `done`, so the stream never waits for ever.
 *   Host calls on the same communicator wait for the worker's queue first: every rank then runs
 *   its operations in issue order.
 * - Blocking (otherwise): the caller polls the stream idle after the input copies and after the
 *   output copies, and the call returns when the outputs have landed.
 *
 * CUDA is reached through the driver the application already loaded (cuda_drv.c: Chorus never
 * loads it), its functions looked up by name, so this file needs no CUDA header or library. Each
 * call runs in the context that owns the device buffer (pushed for the call's CUDA calls). Every
 * wait for a stream polls with the communicator's deadline and abort flag.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "cuda_drv.h"
#include "cuda_stage.h"
#include "debug.h"
#include "memops.h"

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

static void arena_free(chorusComm_t comm);

/* The pinned arena: at least nbytes, allocated in ctx (pushed current by the caller). */
static chorusResult_t arena_reserve(chorusComm_t comm, const char *fn, size_t nbytes,
                                    cu_context_t ctx)
{
    if (comm->stage_nbytes >= nbytes)
        return chorusSuccess;
    size_t want = 1 << 20;
    while (want < nbytes)
        want *= 2;
    arena_free(comm);
    void *p = NULL;
    cu_result_t r = cudrv.host_alloc(&p, want, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CU_SUCCESS)
        return ERR(chorusUnhandledCudaError, SUB_ALLOC,
                   "%s (rank %d): pinned staging buffer of %zu bytes (cuMemHostAlloc): %s", fn,
                   comm->rank, want, cuda_drv_str(r));
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

/* Bytes of staging the device operations of ops need; *any_p: one of their device buffers (the
 * context owner), NULL when there is nothing to move. */
static size_t staged_nbytes(chorusComm_t comm, const comm_op_t *ops, int n, const void **any_p)
{
    size_t total = 0;
    const void *any = NULL;
    for (int i = 0; i < n; i++) {
        if (!ops[i].on_device)
            continue;
        regions_t g = regions_of(&ops[i], comm->rank, comm->nranks);
        total += round_up(g.recv_nbytes) + round_up(g.send_nbytes);
        any = g.recv_nbytes ? (const void *)g.recv : g.send_nbytes ? (const void *)g.send : any;
    }
    *any_p = any;
    return total;
}

/* Point the device operations of ops at staging in base and queue their input copies. */
static chorusResult_t copy_in(chorusComm_t comm, comm_op_t *ops, int n, const char *fn, char *base)
{
    char *at = base;
    for (int i = 0; i < n; i++) {
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
            cu_result_t r =
                cudrv.memcpy_async((cu_ptr_t)(uintptr_t)send, (cu_ptr_t)(uintptr_t)g.send,
                                   g.send_nbytes, op->cuda_stream);
            if (r != CU_SUCCESS)
                return ERR(chorusUnhandledCudaError, SUB_COLL,
                           "%s (rank %d): copying sendbuff %p (%zu bytes) to pinned memory on "
                           "stream %p: %s",
                           fn, comm->rank, (const void *)g.send, g.send_nbytes, op->cuda_stream,
                           cuda_drv_str(r));
        }
        op->args.sendbuff = g.send_nbytes ? send : NULL;
        op->args.recvbuff = recv;
    }
    return chorusSuccess;
}

/* Queue the output copies of the device operations (user: as called; staged: after copy_in). */
static chorusResult_t copy_out(chorusComm_t comm, const comm_op_t *user, const comm_op_t *staged,
                               int n, const char *fn)
{
    for (int i = 0; i < n; i++) {
        regions_t g = regions_of(&user[i], comm->rank, comm->nranks);
        if (!user[i].on_device || g.recv_nbytes == 0)
            continue;
        cu_result_t r = cudrv.memcpy_async((cu_ptr_t)(uintptr_t)g.recv,
                                           (cu_ptr_t)(uintptr_t)staged[i].args.recvbuff,
                                           g.recv_nbytes, user[i].cuda_stream);
        if (r != CU_SUCCESS)
            return ERR(chorusUnhandledCudaError, SUB_COLL,
                       "%s (rank %d): copying the result to recvbuff %p (%zu bytes) on stream %p: "
                       "%s",
                       fn, comm->rank, (void *)g.recv, g.recv_nbytes, user[i].cuda_stream,
                       cuda_drv_str(r));
    }
    return chorusSuccess;
}

chorusResult_t cuda_stage_in(chorusComm_t comm, comm_op_t *ops, int n, const char *fn)
{
    /* on_device ops passed check_buffer, which found the driver complete (cuda_stage_missing). */
    const void *any;
    size_t total = staged_nbytes(comm, ops, n, &any); /* one arena for the whole batch */
    if (any == NULL)
        return chorusSuccess; /* device operations with nothing to move (count 0) */
    cu_context_t ctx;
    CHECK(cuda_push_ctx(fn, comm->rank, any, &ctx));
    chorusResult_t res = arena_reserve(comm, fn, total, ctx);
    if (res == chorusSuccess)
        res = copy_in(comm, ops, n, fn, comm->stage_base);
    for (int i = 0; i < n && res == chorusSuccess; i++)
        if (ops[i].on_device &&
            (res = cuda_wait_stream(comm, fn, ops[i].cuda_stream)) != chorusSuccess)
            comm->stage_busy = ops[i].cuda_stream;
    cuda_pop_ctx();
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
    CHECK(cuda_push_ctx(fn, comm->rank, any, &ctx));
    chorusResult_t res = copy_out(comm, user, staged, n, fn);
    /* The arena is reused by the next call: wait until the copies have read it. */
    for (int i = 0; i < n && res == chorusSuccess; i++)
        if (user[i].on_device &&
            (res = cuda_wait_stream(comm, fn, user[i].cuda_stream)) != chorusSuccess)
            comm->stage_busy = user[i].cuda_stream;
    cuda_pop_ctx();
    return res;
}

static void arena_free(chorusComm_t comm)
{
    if (comm->stage_base == NULL)
        return;
    int pushed = comm->stage_ctx != NULL && cudrv.ctx_push(comm->stage_ctx) == CU_SUCCESS;
    if (comm->stage_busy != NULL) {
        /* A call gave up waiting for this stream: its copies may still come. */
        int64_t deadline = fifo_now_ns() + 10000000000ll;
        cu_result_t q;
        while ((q = cudrv.stream_query(comm->stage_busy)) == CU_ERROR_NOT_READY &&
               fifo_now_ns() < deadline)
            sched_yield();
        if (q == CU_ERROR_NOT_READY) {
            WARN(SUB_ALLOC,
                 "CUDA stream %p still busy 10 s after a call gave up on it: its "
                 "staging buffer is left allocated",
                 comm->stage_busy);
            if (pushed)
                cuda_pop_ctx();
            comm->stage_base = NULL;
            comm->stage_nbytes = 0;
            return;
        }
        comm->stage_busy = NULL;
    }
    if (cudrv.host_free(comm->stage_base) != CU_SUCCESS)
        WARN(SUB_ALLOC, "freeing the pinned staging buffer failed (was CUDA torn down first?)");
    if (pushed)
        cuda_pop_ctx();
    comm->stage_base = NULL;
    comm->stage_nbytes = 0;
}

/* ---- the asynchronous path ---- */

#define ASYNC_SLOTS 8

typedef struct cuda_task {
    struct cuda_task *next;
    int slot;
    uint32_t seq;
    int n;
    comm_op_t ops[]; /* staged: host pointers into the slot, on_device 0 */
} cuda_task_t;

/* Flags the stream writes (ready, freed) and the worker writes (done), in mapped pinned memory. */
typedef struct {
    uint32_t ready[ASYNC_SLOTS];
    uint32_t done[ASYNC_SLOTS];
    uint32_t freed[ASYNC_SLOTS];
} async_flags_t;

typedef struct cuda_async {
    cu_context_t ctx; /* where the flags and slots were allocated */
    async_flags_t *flags;
    cu_ptr_t dflags; /* the same memory as the device sees it */
    struct {
        char *base;
        size_t nbytes;
        uint32_t seq; /* of its last use; free again once freed[] says so */
    } slot[ASYNC_SLOTS];
    uint32_t next_seq;
    int next_slot;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* work queued, or the queue drained */
    cuda_task_t *head, *tail;
    int busy, stop;
} cuda_async_t;

static __thread int is_worker TLS_HOT;

int cuda_stage_is_worker(void)
{
    return is_worker;
}

static uint32_t flag_load(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Wait until *p == want (written by the stream) with the communicator's deadline and abort. */
static chorusResult_t wait_flag(chorusComm_t comm, const char *what, const uint32_t *p,
                                uint32_t want)
{
    int64_t start = fifo_now_ns(), deadline = start + comm->timeout_ms * 1000000;
    while (flag_load(p) != want) {
        if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE))
            return ERR(chorusInvalidUsage, SUB_COLL, "rank %d: aborted while waiting for %s",
                       comm->rank, what);
        int64_t now = fifo_now_ns();
        if (now >= deadline)
            return ERR(chorusTimeout, SUB_COLL,
                       "rank %d: %s did not come within %lld ms (the CUDA stream is stuck "
                       "behind earlier work; timeout CHORUS_TIMEOUT_MS)",
                       comm->rank, what, (long long)comm->timeout_ms);
        if (now - start < 200000) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
    return chorusSuccess;
}

static void *async_main(void *arg)
{
    chorusComm_t comm = arg;
    cuda_async_t *a = comm->cuda_async;
    is_worker = 1;
    debug_set_rank(comm->rank);
    pthread_mutex_lock(&a->lock);
    for (;;) {
        while (a->head == NULL && !a->stop)
            pthread_cond_wait(&a->cond, &a->lock);
        if (a->head == NULL)
            break;
        cuda_task_t *t = a->head;
        a->head = t->next;
        if (a->head == NULL)
            a->tail = NULL;
        a->busy = 1;
        pthread_mutex_unlock(&a->lock);
        debug_clear_error();
        char what[64];
        snprintf(what, sizeof(what), "the inputs of a device-buffer call (stream slot %d)",
                 t->slot);
        chorusResult_t res = wait_flag(comm, what, &a->flags->ready[t->slot], t->seq);
        if (res == chorusSuccess)
            res = comm_exec(comm, t->ops, t->n);
        /* Failed or not, the stream may go on: its outputs are then stale, and the error is the
         * communicator's (comm_op_finished), for chorusCommGetAsyncError. */
        __atomic_store_n(&a->flags->done[t->slot], t->seq, __ATOMIC_RELEASE);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        comm_op_finished(comm, res);
        free(t);
        pthread_mutex_lock(&a->lock);
        a->busy = 0;
        pthread_cond_broadcast(&a->cond);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

/* The worker, its flags, in the context of the first device call (pushed by the caller). */
static chorusResult_t async_start(chorusComm_t comm, const char *fn, cu_context_t ctx)
{
    cuda_async_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return ERR(chorusSystemError, SUB_ALLOC, "out of memory");
    void *p = NULL;
    cu_result_t r = cudrv.host_alloc(&p, sizeof(async_flags_t),
                                     CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    if (r == CU_SUCCESS && (r = cudrv.host_dptr(&a->dflags, p, 0)) != CU_SUCCESS)
        cudrv.host_free(p);
    if (r != CU_SUCCESS) {
        free(a);
        return ERR(chorusUnhandledCudaError, SUB_ALLOC,
                   "%s (rank %d): mapped pinned memory for stream flags: %s", fn, comm->rank,
                   cuda_drv_str(r));
    }
    memset(p, 0, sizeof(async_flags_t));
    a->flags = p;
    a->ctx = ctx;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    comm->cuda_async = a;
    int err = pthread_create(&a->thread, NULL, async_main, comm);
    if (err != 0) {
        comm->cuda_async = NULL;
        pthread_cond_destroy(&a->cond);
        pthread_mutex_destroy(&a->lock);
        cudrv.host_free(p);
        free(a);
        return ERR(chorusSystemError, SUB_COLL, "%s (rank %d): CUDA worker thread: %s", fn,
                   comm->rank, strerror(err));
    }
    return chorusSuccess;
}

/* 1 when the batch goes the asynchronous way: every operation on device buffers, one stream. */
static int async_wanted(chorusComm_t comm, const comm_op_t *ops, int n)
{
    if (!comm->params.cuda_async || cudrv.write32 == NULL || cudrv.wait32 == NULL ||
        cudrv.host_dptr == NULL)
        return 0;
    for (int i = 0; i < n; i++)
        if (!ops[i].on_device || ops[i].cuda_stream != ops[0].cuda_stream)
            return 0;
    /* GPU to GPU behind a wait on the legacy default stream hung on the H200 (1 rank, driver
     * 580): its copies on the communicator's non-blocking stream never finished. Such calls run
     * the blocking way. */
    if (n > 0 && ops[0].cuda_stream == NULL && cuda_dev_wanted(comm, ops, n))
        return 0;
    return n > 0;
}

static cu_ptr_t flag_dptr(const cuda_async_t *a, const uint32_t *p)
{
    return a->dflags + (cu_ptr_t)((const char *)p - (const char *)a->flags);
}

/* Queue the stream's part of one batch on slot k with sequence number seq. */
static chorusResult_t async_enqueue(chorusComm_t comm, cuda_async_t *a, int k, uint32_t seq,
                                    const comm_op_t *user, comm_op_t *staged, int n, const char *fn,
                                    int direct)
{
    cu_stream_t stream = user[0].cuda_stream;
    if (!direct)
        CHECK(copy_in(comm, staged, n, fn, a->slot[k].base));
    cu_result_t r = cudrv.write32(stream, flag_dptr(a, &a->flags->ready[k]), seq, 0);
    if (r == CU_SUCCESS)
        r = cudrv.wait32(stream, flag_dptr(a, &a->flags->done[k]), seq, CU_STREAM_WAIT_VALUE_EQ);
    if (r != CU_SUCCESS)
        return ERR(chorusUnhandledCudaError, SUB_COLL,
                   "%s (rank %d): stream memory operation on stream %p: %s", fn, comm->rank, stream,
                   cuda_drv_str(r));
    if (!direct)
        CHECK(copy_out(comm, user, staged, n, fn));
    r = cudrv.write32(stream, flag_dptr(a, &a->flags->freed[k]), seq, 0);
    if (r != CU_SUCCESS)
        return ERR(chorusUnhandledCudaError, SUB_COLL,
                   "%s (rank %d): stream memory operation on stream %p: %s", fn, comm->rank, stream,
                   cuda_drv_str(r));
    return chorusSuccess;
}

static __attribute__((noinline)) chorusResult_t stage_async(chorusComm_t comm, comm_op_t *ops,
                                                            int n, const char *fn);

chorusResult_t cuda_stage_async(chorusComm_t comm, comm_op_t *ops, int n, const char *fn,
                                int *taken_p)
{
    *taken_p = 0;
    cuda_drv_missing();
    if (!async_wanted(comm, ops, n))
        return chorusSuccess;
    *taken_p = 1;
    return stage_async(comm, ops, n, fn);
}

/* cuda_stage_async once it takes the operations. */
static chorusResult_t stage_async(chorusComm_t comm, comm_op_t *ops, int n, const char *fn)
{
    const void *any;
    size_t total = staged_nbytes(comm, ops, n, &any);
    int direct = cuda_dev_wanted(comm, ops, n); /* GPU to GPU: nothing to stage */
    if (direct)
        total = 0;
    cuda_task_t *t = malloc(sizeof(*t) + sizeof(comm_op_t) * (size_t)n);
    if (t == NULL)
        return ERR(chorusSystemError, SUB_COLL, "out of memory");
    memcpy(t->ops, ops, sizeof(comm_op_t) * (size_t)n);
    t->next = NULL;
    t->n = n;
    cu_context_t ctx;
    chorusResult_t res = any != NULL ? cuda_push_ctx(fn, comm->rank, any, &ctx) : chorusSuccess;
    if (res != chorusSuccess) {
        free(t);
        return res;
    }
    if (any == NULL) { /* count 0: nothing to move, but still in stream order: no-op here */
        free(t);
        return chorusSuccess;
    }
    /* The device path's setup never runs on the worker: see cuda_dev_prepare. */
    if (direct)
        res = cuda_dev_prepare(comm, fn, ctx);
    if (res == chorusSuccess && comm->cuda_async == NULL)
        res = async_start(comm, fn, ctx);
    cuda_async_t *a = comm->cuda_async;
    int k = 0;
    if (res == chorusSuccess) {
        k = a->next_slot;
        a->next_slot = (k + 1) % ASYNC_SLOTS;
        /* The stream has copied the slot's last outputs out (or it was never used). */
        res = wait_flag(comm, "a free staging slot", &a->flags->freed[k], a->slot[k].seq);
    }
    if (res == chorusSuccess && a->slot[k].nbytes < total) {
        size_t want = 1 << 20;
        while (want < total)
            want *= 2;
        if (a->slot[k].base != NULL)
            cudrv.host_free(a->slot[k].base);
        a->slot[k].base = NULL;
        a->slot[k].nbytes = 0;
        void *p = NULL;
        cu_result_t r = cudrv.host_alloc(&p, want, CU_MEMHOSTALLOC_PORTABLE);
        if (r != CU_SUCCESS)
            res = ERR(chorusUnhandledCudaError, SUB_ALLOC,
                      "%s (rank %d): pinned staging slot of %zu bytes (cuMemHostAlloc): %s", fn,
                      comm->rank, want, cuda_drv_str(r));
        else
            a->slot[k].base = p, a->slot[k].nbytes = want;
    }
    uint32_t seq = 0;
    if (res == chorusSuccess) {
        seq = ++a->next_seq;
        if (seq == 0) /* 0 is every flag's first value: never a sequence number */
            seq = ++a->next_seq;
        res = async_enqueue(comm, a, k, seq, ops, t->ops, n, fn, direct);
        for (int i = 0; i < n; i++) {
            if (direct)
                t->ops[i].cuda_ordered = 1; /* device buffers still: run by cuda_dev.c */
            else
                t->ops[i].on_device = 0, t->ops[i].cuda_stream = NULL;
        }
    }
    cuda_pop_ctx();
    if (res == chorusSuccess)
        res = comm_op_started(comm, fn); /* finished by the worker */
    if (res != chorusSuccess) {
        free(t);
        return res;
    }
    a->slot[k].seq = seq;
    t->slot = k;
    t->seq = seq;
    pthread_mutex_lock(&a->lock);
    if (a->tail)
        a->tail->next = t;
    else
        a->head = t;
    a->tail = t;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
    return chorusSuccess;
}

chorusResult_t cuda_stage_drain(chorusComm_t comm)
{
    cuda_async_t *a = comm->cuda_async;
    if (a == NULL || is_worker)
        return chorusSuccess;
    int64_t deadline = fifo_now_ns() + comm->timeout_ms * 1000000;
    pthread_mutex_lock(&a->lock);
    while (a->head != NULL || a->busy) {
        if (fifo_now_ns() > deadline) {
            pthread_mutex_unlock(&a->lock);
            return ERR(chorusTimeout, SUB_COLL,
                       "rank %d: device-buffer calls queued before this host call did not run "
                       "within %lld ms",
                       comm->rank, (long long)comm->timeout_ms);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20000000;
        if (ts.tv_nsec >= 1000000000)
            ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&a->cond, &a->lock, &ts);
    }
    pthread_mutex_unlock(&a->lock);
    return chorusSuccess;
}

/* Stop the worker (its queue has run: comm_wait_idle came first), wait until every stream has
 * copied its outputs out of the slots, and free them. */
static void async_free(chorusComm_t comm)
{
    cuda_async_t *a = comm->cuda_async;
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->lock);
    a->stop = 1;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
    int pushed = cudrv.ctx_push(a->ctx) == CU_SUCCESS;
    int64_t deadline = fifo_now_ns() + 10000000000ll; /* for all slots together */
    int leaked = 0;
    for (int k = 0; k < ASYNC_SLOTS; k++) {
        if (a->slot[k].seq == 0)
            continue; /* never used (a GPU-to-GPU batch uses a slot's flags, not its memory) */
        while (flag_load(&a->flags->freed[k]) != a->slot[k].seq && fifo_now_ns() < deadline)
            sched_yield();
        if (flag_load(&a->flags->freed[k]) != a->slot[k].seq) {
            WARN(SUB_ALLOC,
                 "a CUDA stream still holds staging slot %d after 10 s: left "
                 "allocated",
                 k);
            leaked = 1;
            continue;
        }
        if (a->slot[k].base != NULL)
            cudrv.host_free(a->slot[k].base);
    }
    if (!leaked) /* a stream may still write a slot's freed flag */
        cudrv.host_free(a->flags);
    if (pushed)
        cuda_pop_ctx();
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->lock);
    free(a);
    comm->cuda_async = NULL;
}

void cuda_stage_free(chorusComm_t comm)
{
    async_free(comm);
    arena_free(comm);
}
