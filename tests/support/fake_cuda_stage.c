/*
 * fake_cuda_stage.c: a stand-in CUDA driver (soname libcuda.so.1) with every entry point the
 * library's device-buffer paths use (src/cuda_drv.c: staging, the device path, cuda_p2p), so
 * that a machine without a GPU runs them, across mpirun ranks on one machine too. This file holds
 * the contexts, the streams, the events and the pump thread that plays the GPU, and the fault
 * counter; fake_cuda_mem.c the memory (device, pinned host, IPC), fake_cuda_kernels.c the modules
 * and kernel launches, fake_cuda_dev.c the GPUs and device facts, fake_cuda_int.h what they
 * share.
 *
 * Device memory faults on any direct access: fake_cuda_alloc (test side) and cuMemAlloc_v2 hand
 * out pages kept PROT_NONE except while the pump runs an operation on them. cuMemAlloc_v2 memory
 * is a memfd mapped MAP_SHARED; cuIpcGetMemHandle puts its owner's pid, fd number, size and id
 * in the handle, and cuIpcOpenMemHandle_v2 in another process opens /proc/<pid>/fd/<fd> and maps
 * it (opening one's own handle is refused, as the real driver does). A per-thread context, pushed
 * (cuCtxPushCurrent_v2) or current (cuCtxSetCurrent), is needed to allocate, load a module,
 * create a stream or queue work.
 *
 * Streams: the test's declared one (fake_cuda_expect_stream) and up to 63 from cuStreamCreate,
 * each with its own queue of copies (cuMemcpyAsync, between memory of any kind), 32-bit memory
 * operations (cuStreamWriteValue32_v2, cuStreamWaitValue32_v2), event records (cuEventRecord;
 * cuEventQuery says whether the last record has run) and kernel launches. A pump
 * thread, playing the GPU, runs each queue in order and the queues independently (a wait holds
 * only its own stream). An entry on the declared stream runs no sooner than 1 ms after it was
 * queued (20 us on created streams), so reading a copy's destination before waiting for the
 * stream sees stale bytes, as on a GPU. cuStreamQuery answers for its stream: "not ready" twice
 * before each "done" (the library's polling runs), or forever once fake_cuda_stream_stuck(1)
 * (the pump stops every stream; the library's deadlines run).
 *
 * GPUs: one by default (bus id 0000:01:00.0); fake_cuda_gpus (test side) sets the bus ids this
 * process sees, its current one and whether two distinct GPUs have peer access, so that ranks can
 * play separate GPUs, GPUs hidden from each other (CUDA_VISIBLE_DEVICES per rank) or GPUs without
 * peer access. An IPC handle carries its GPU's bus id, and opening it fails as the real driver's
 * would where that GPU has no peer access from the opener's (visible to it or not).
 *
 * Kernels: cuModuleLoadData accepts any image and cuModuleGetFunction knows the names of
 * kernels/cuda_module.h (chorus_map_<dtype>_<op>_<mode>); a launch copies its parameters and,
 * in stream order, computes with the host backend (kernels/host_reduce.c, built in with hidden
 * symbols), so results are the host's bit for bit; fake_cuda_launches counts the launches and
 * fake_cuda_fail_launch makes a later one fail (the library's error path).
 *
 * Faults (fake_cuda_faults; the first ten are also printed on stderr): work queued with no
 * context or on a stream that is neither the declared one nor a live created one; a launch whose
 * block is not CUDA_MODULE_THREADS x 1 x 1 or whose grid is empty; a vec-mode launch with a
 * pointer not aligned to the element size, or packs that are not 16-byte aligned or run past
 * count; an operation that reaches device or pinned host memory freed (or an IPC mapping closed)
 * after it was queued: it is skipped, where a GPU would fault or write freed memory; module or
 * kernel loading, stream creation, cuMemAlloc or an IPC open while a stream waits on a flag that
 * does not hold (the real driver may synchronize the context there: a deadlock). A process
 * forked (without exec) after its first queued operation has no pump. Test support only; never
 * installed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda_int.h"
#include "memops.h"

#define MAX_STREAMS 64 /* slot 0: the test's declared stream */
#define MAX_PENDING 4096 /* per stream */

/* Test side: declare, inspect. */
#pragma GCC visibility push(default)
void fake_cuda_expect_stream(void *stream);
void fake_cuda_stream_stuck(int on);
int fake_cuda_faults(void);
/* The driver's entry points (their CUDA names and the ABI src/cuda_drv.c expects). */
int cuCtxPushCurrent_v2(void *ctx);
int cuCtxPopCurrent_v2(void **ctx);
int cuCtxGetCurrent(void **ctx);
int cuCtxSetCurrent(void *ctx);
int cuCtxGetDevice(int *device);
int cuCtxSynchronize(void);
int cuMemcpyAsync(uintptr_t dst, uintptr_t src, size_t nbytes, void *stream);
int cuStreamCreate(void **stream, unsigned flags);
int cuStreamDestroy_v2(void *stream);
int cuStreamQuery(void *stream);
int cuStreamWriteValue32_v2(void *stream, uintptr_t addr, uint32_t value, unsigned flags);
int cuStreamWaitValue32_v2(void *stream, uintptr_t addr, uint32_t value, unsigned flags);
int cuEventCreate(void **event, unsigned flags);
int cuEventRecord(void *event, void *stream);
int cuEventQuery(void *event);
int cuEventDestroy_v2(void *event);
#pragma GCC visibility pop

static void *expected_stream;
static int stuck, faults;
static __thread int ctx_depth;
static __thread void *ctx_current;

/* Count a fault; the first few also say what it was, on stderr. */
void fault(const char *what)
{
    if (__atomic_add_fetch(&faults, 1, __ATOMIC_RELAXED) <= 10)
        fprintf(stderr, "fake libcuda (pid %d): fault: %s\n", (int)getpid(), what);
}

int has_ctx(void)
{
    return ctx_depth > 0 || ctx_current != NULL;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void fake_cuda_expect_stream(void *stream)
{
    __atomic_store_n(&expected_stream, stream, __ATOMIC_RELAXED);
}

void fake_cuda_stream_stuck(int on)
{
    __atomic_store_n(&stuck, on, __ATOMIC_RELAXED);
}

int fake_cuda_faults(void)
{
    return __atomic_load_n(&faults, __ATOMIC_RELAXED);
}

/* ---- Contexts: one, pushed or current per thread ---- */

int cuCtxPushCurrent_v2(void *ctx)
{
    if (ctx != CTX)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_depth++;
    return 0;
}

int cuCtxPopCurrent_v2(void **ctx)
{
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_depth--;
    *ctx = CTX;
    return 0;
}

int cuCtxGetCurrent(void **ctx)
{
    *ctx = has_ctx() ? CTX : NULL;
    return 0;
}

int cuCtxSetCurrent(void *ctx)
{
    if (ctx != NULL && ctx != CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx_current = ctx;
    return 0;
}

int cuCtxGetDevice(int *device)
{
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = gpu_current();
    return 0;
}

/* ---- Streams: a queue each, run in order by the pump thread ---- */

/* An operation runs only once it has waited its stream's delay in the queue, so a caller that
 * reads a copy's destination before waiting for the stream sees the old bytes; a wait holds its
 * stream until the flag holds the value. Each operation names the memory it touches as spans,
 * with the device region of each (found when queued; checked again when run): op_t and span_t,
 * in fake_cuda_int.h. */
enum { STREAM_FREE, STREAM_LIVE, STREAM_DRAINING }; /* draining: destroyed, work still queued */
#define DECLARED_DELAY_NS 1000000
#define CREATED_DELAY_NS 20000
typedef struct {
    int state;
    int64_t delay_ns;
    unsigned head, tail; /* ops[head % MAX_PENDING] runs next; only the pump moves head */
    op_t *ops;
} stream_t;
static op_t declared_ops[MAX_PENDING];
static stream_t streams[MAX_STREAMS] = {{STREAM_LIVE, DECLARED_DELAY_NS, 0, 0, declared_ops}};
pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the streams and modules */
static pthread_cond_t work_cond = PTHREAD_COND_INITIALIZER; /* work queued, for an idle pump */
static int pump_started;
static __thread unsigned char busy_answers[MAX_STREAMS];

/* The slot of a live stream (lock held): a created one, else the declared one; -1 if neither. */
static int stream_slot(void *stream)
{
    for (int i = 1; i < MAX_STREAMS; i++)
        if (streams[i].state == STREAM_LIVE && stream == (void *)&streams[i])
            return i;
    return stream == __atomic_load_n(&expected_stream, __ATOMIC_RELAXED) ? 0 : -1;
}

span_t span_of(uintptr_t p, size_t nbytes)
{
    span_t s = {p, nbytes, -1, 0, 0};
    int kind = REGION_FREE;
    if (nbytes > 0)
        s.region = region_of(p, nbytes, &s.gen, &kind);
    s.device = s.region >= 0 && kind != REGION_HOST;
    return s;
}

/* Open (prot RW) or close (PROT_NONE) the device pages of the op's spans. */
static void op_access(const op_t *op, int prot)
{
    for (int i = 0; i < 3; i++)
        if (op->span[i].nbytes > 0 && op->span[i].device)
            set_access(op->span[i].p, op->span[i].nbytes, prot);
}

static int wait_holds(uint32_t v, uint32_t value, unsigned flags)
{
    switch (flags & 3) {
    case 0: /* CU_STREAM_WAIT_VALUE_GEQ */
        return (int32_t)(v - value) >= 0;
    case 1: /* CU_STREAM_WAIT_VALUE_EQ */
        return v == value;
    case 2: /* CU_STREAM_WAIT_VALUE_AND */
        return (v & value) != 0;
    default: /* CU_STREAM_WAIT_VALUE_NOR */
        return ~(v | value) != 0;
    }
}

/* Calls after which the real driver may synchronize the context (module and kernel loading,
 * which is lazy since CUDA 12.2; stream creation; allocation and IPC mapping): made while a
 * stream waits on a flag that does not hold, they could wait for that stream, and the stream for
 * the caller, for ever. The library makes them before it queues such a wait (or after the flag
 * was written); here they are a fault. */
void no_parked_stream(const char *what)
{
    int parked = 0;
    pthread_mutex_lock(&lock);
    for (int s = 0; s < MAX_STREAMS && !parked; s++) {
        stream_t *q = &streams[s];
        for (unsigned k = q->head; q->state != STREAM_FREE && k != q->tail && !parked; k++) {
            const op_t *op = &q->ops[k % MAX_PENDING];
            parked = op->kind == OP_WAIT32 &&
                     !wait_holds(__atomic_load_n((uint32_t *)op->span[0].p, __ATOMIC_ACQUIRE),
                                 op->value, op->flags);
        }
    }
    pthread_mutex_unlock(&lock);
    if (parked) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s while a stream waits on a flag that does not hold", what);
        fault(msg);
    }
}

/* Run one operation; 0 when it is a wait whose flag does not hold yet. Only the pump calls it. */
static int run_op(const op_t *op)
{
    pthread_mutex_lock(&exec_lock);
    int gone = 0;
    pthread_mutex_lock(&region_lock);
    for (int i = 0; i < 3; i++)
        if (op->span[i].nbytes > 0 && op->span[i].region >= 0 &&
            regions[op->span[i].region].gen != op->span[i].gen)
            gone = 1;
    pthread_mutex_unlock(&region_lock);
    if (gone) { /* freed or closed after the op was queued: a real GPU would fault or scribble */
        pthread_mutex_unlock(&exec_lock);
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "an operation (kind %d, %zu bytes) reached memory freed or closed after it was "
                 "queued",
                 op->kind, op->span[0].nbytes);
        fault(msg);
        return 1;
    }
    int done = 1;
    uint32_t *flag = (uint32_t *)op->span[0].p;
    op_access(op, PROT_READ | PROT_WRITE);
    switch (op->kind) {
    case OP_COPY:
        if (op->span[0].nbytes > 0)
            memmove((void *)op->span[0].p, (const void *)op->span[1].p, op->span[0].nbytes);
        break;
    case OP_WRITE32:
        __atomic_store_n(flag, op->value, __ATOMIC_RELEASE);
        break;
    case OP_WAIT32:
        done = wait_holds(__atomic_load_n(flag, __ATOMIC_ACQUIRE), op->value, op->flags);
        break;
    case OP_EVENT:
        __atomic_store_n(op->event, op->value, __ATOMIC_RELEASE);
        break;
    default: /* OP_KERNEL */
        if (op->count == 0)
            break;
        if (op->redop == OP_DIV)
            host_memops.divide((void *)op->span[0].p, (const void *)op->span[1].p, op->count,
                               (chorusDataType_t)op->dtype, op->divisor);
        else
            host_memops.reduce((void *)op->span[0].p, (const void *)op->span[1].p,
                               (const void *)op->span[2].p, op->count, (chorusDataType_t)op->dtype,
                               (chorusRedOp_t)op->redop);
        break;
    }
    op_access(op, PROT_NONE);
    pthread_mutex_unlock(&exec_lock);
    return done;
}

/* Run the ready operations at the head of stream s (a bounded number, so that every stream
 * moves); how many ran. */
static int pump_stream(int s)
{
    int ran = 0;
    while (ran < 64) {
        pthread_mutex_lock(&lock);
        stream_t *q = &streams[s];
        int have = q->state != STREAM_FREE && q->head != q->tail;
        op_t op;
        if (have)
            op = q->ops[q->head % MAX_PENDING];
        int64_t delay = q->delay_ns;
        pthread_mutex_unlock(&lock);
        if (!have || now_ns() - op.queued_ns < delay || !run_op(&op))
            break;
        pthread_mutex_lock(&lock);
        if (++q->head == q->tail && q->state == STREAM_DRAINING)
            q->state = STREAM_FREE;
        pthread_mutex_unlock(&lock);
        ran++;
    }
    return ran;
}

/* Which streams have work queued (lock held): bit 0 the declared one, bit 1 a created one. */
static int streams_busy(void)
{
    int busy = 0;
    for (int s = 0; s < MAX_STREAMS; s++)
        if (streams[s].state != STREAM_FREE && streams[s].head != streams[s].tail)
            busy |= s == 0 ? 1 : 2;
    return busy;
}

/* The GPU: runs every stream's queue; sleeps on work_cond while all are empty. */
static void *pump_main(void *arg)
{
    (void)arg;
    for (;;) {
        int ran = 0;
        if (!__atomic_load_n(&stuck, __ATOMIC_RELAXED))
            for (int s = 0; s < MAX_STREAMS; s++)
                ran += pump_stream(s);
        if (ran > 0)
            continue;
        pthread_mutex_lock(&lock);
        int busy = streams_busy();
        if (busy == 0)
            pthread_cond_wait(&work_cond, &lock); /* queue_op signals */
        pthread_mutex_unlock(&lock);
        if (busy != 0) { /* work waits for its delay, a flag or the stuck switch */
            struct timespec ts = {0, busy & 2 ? 20000 : 100000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* Queue op on stream; a fault without a context or on a stream the fake does not know (queued
 * on the declared stream then, as the fake did before it had streams of its own). */
int queue_op(op_t *op, void *stream)
{
    if (!has_ctx())
        fault("work queued with no context pushed or current");
    op->queued_ns = now_ns();
    pthread_mutex_lock(&lock);
    if (!pump_started) {
        pthread_t pump;
        if (pthread_create(&pump, NULL, pump_main, NULL) == 0) {
            pthread_detach(pump);
            pump_started = 1;
        }
    }
    int s = stream_slot(stream);
    if (s < 0) {
        fault("work queued on a stream that is neither the test's nor a live created one");
        s = 0;
    }
    stream_t *q = &streams[s];
    int full = q->tail - q->head == MAX_PENDING;
    if (!full)
        q->ops[q->tail++ % MAX_PENDING] = *op;
    pthread_cond_signal(&work_cond);
    pthread_mutex_unlock(&lock);
    return full ? CUDA_ERROR_OUT_OF_MEMORY : 0;
}

int cuMemcpyAsync(uintptr_t dst, uintptr_t src, size_t nbytes, void *stream)
{
    op_t op = {.kind = OP_COPY, .span = {span_of(dst, nbytes), span_of(src, nbytes)}};
    return queue_op(&op, stream);
}

int cuStreamWriteValue32_v2(void *stream, uintptr_t addr, uint32_t value, unsigned flags)
{
    op_t op = {.kind = OP_WRITE32, .span = {span_of(addr, 4)}, .value = value, .flags = flags};
    return queue_op(&op, stream);
}

int cuStreamWaitValue32_v2(void *stream, uintptr_t addr, uint32_t value, unsigned flags)
{
    op_t op = {.kind = OP_WAIT32, .span = {span_of(addr, 4)}, .value = value, .flags = flags};
    return queue_op(&op, stream);
}

/* Events: a record is an operation on its stream that, when the stream reaches it, sets the
 * event's completed number to the record's. */
#define MAX_EVENTS 256
typedef struct {
    int live;
    uint32_t recorded, completed;
} event_t;
static event_t events[MAX_EVENTS];

static event_t *event_of(void *event)
{
    event_t *e = event;
    return e >= events && e < events + MAX_EVENTS && e->live ? e : NULL;
}

int cuEventCreate(void **event, unsigned flags)
{
    (void)flags;
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    int res = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock); /* a destroyed event's slot is reused once its record ran */
    for (int i = 0; i < MAX_EVENTS && res != 0; i++)
        if (!events[i].live &&
            __atomic_load_n(&events[i].completed, __ATOMIC_ACQUIRE) == events[i].recorded) {
            events[i] = (event_t){1, 0, 0};
            *event = &events[i];
            res = 0;
        }
    pthread_mutex_unlock(&lock);
    return res;
}

int cuEventRecord(void *event, void *stream)
{
    pthread_mutex_lock(&lock);
    event_t *e = event_of(event);
    uint32_t n = e != NULL ? ++e->recorded : 0;
    pthread_mutex_unlock(&lock);
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    op_t op = {.kind = OP_EVENT, .value = n, .event = &e->completed};
    return queue_op(&op, stream);
}

int cuEventQuery(void *event)
{
    pthread_mutex_lock(&lock);
    event_t *e = event_of(event);
    int done = e != NULL && __atomic_load_n(&e->completed, __ATOMIC_ACQUIRE) == e->recorded;
    pthread_mutex_unlock(&lock);
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return done && !__atomic_load_n(&stuck, __ATOMIC_RELAXED) ? 0 : CUDA_ERROR_NOT_READY;
}

/* As the real driver: a pending record still completes, into the slot, which cuEventCreate
 * does not hand out again until then. */
int cuEventDestroy_v2(void *event)
{
    pthread_mutex_lock(&lock);
    event_t *e = event_of(event);
    if (e != NULL)
        e->live = 0;
    pthread_mutex_unlock(&lock);
    return e == NULL ? CUDA_ERROR_INVALID_HANDLE : 0;
}

int cuStreamCreate(void **stream, unsigned flags)
{
    no_parked_stream("cuStreamCreate");
    (void)flags;
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    int res = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    for (int i = 1; i < MAX_STREAMS && res != 0; i++) {
        stream_t *q = &streams[i];
        if (q->state != STREAM_FREE)
            continue;
        if (q->ops == NULL && (q->ops = calloc(MAX_PENDING, sizeof(op_t))) == NULL)
            break;
        q->state = STREAM_LIVE;
        q->delay_ns = CREATED_DELAY_NS;
        q->head = q->tail = 0;
        *stream = q;
        res = 0;
    }
    pthread_mutex_unlock(&lock);
    return res;
}

int cuStreamDestroy_v2(void *stream)
{
    int res = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    int s = stream_slot(stream);
    if (s > 0) { /* queued work still runs, as on a GPU */
        streams[s].state = streams[s].head == streams[s].tail ? STREAM_FREE : STREAM_DRAINING;
        res = 0;
    }
    pthread_mutex_unlock(&lock);
    return res;
}

int cuStreamQuery(void *stream)
{
    pthread_mutex_lock(&lock);
    int s = stream_slot(stream);
    int idle = s >= 0 && streams[s].head == streams[s].tail;
    pthread_mutex_unlock(&lock);
    if (s < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    if (__atomic_load_n(&stuck, __ATOMIC_RELAXED))
        return CUDA_ERROR_NOT_READY;
    if (busy_answers[s] < 2) {
        busy_answers[s]++;
        return CUDA_ERROR_NOT_READY;
    }
    if (!idle)
        return CUDA_ERROR_NOT_READY;
    busy_answers[s] = 0;
    return 0;
}

int cuCtxSynchronize(void)
{
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    for (;;) {
        pthread_mutex_lock(&lock);
        int busy = streams_busy();
        pthread_mutex_unlock(&lock);
        if (busy == 0)
            return 0;
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}
