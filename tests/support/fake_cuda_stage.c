/*
 * fake_cuda_stage.c: a stand-in CUDA driver (soname libcuda.so.1) with every entry point the
 * library's device-buffer paths use (src/cuda_drv.c: staging, the device path, cuda_p2p), so
 * that a machine without a GPU runs them, across mpirun ranks on one machine too.
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
 * operations (cuStreamWriteValue32_v2, cuStreamWaitValue32_v2) and kernel launches. A pump
 * thread, playing the GPU, runs each queue in order and the queues independently (a wait holds
 * only its own stream). An entry on the declared stream runs no sooner than 1 ms after it was
 * queued (20 us on created streams), so reading a copy's destination before waiting for the
 * stream sees stale bytes, as on a GPU. cuStreamQuery answers for its stream: "not ready" twice
 * before each "done" (the library's polling runs), or forever once fake_cuda_stream_stuck(1)
 * (the pump stops every stream; the library's deadlines run).
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
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_module.h"
#include "memops.h"

#define CTX ((void *)(uintptr_t)0xc0de)
#define MAX_REGIONS 1024
#define MAX_STREAMS 64 /* slot 0: the test's declared stream */
#define MAX_MODULES 64
#define MAX_PENDING 4096 /* per stream */
#define NDTYPES 10
#define NOPS 5 /* sum prod max min (chorusRedOp_t values) and div */
#define OP_DIV 4
#define KERNELS_PER_MODULE (NDTYPES * NOPS * 2)
#define IPC_MAGIC 0x66616b6563756970ull /* "fakecuip" */
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600

typedef struct {
    char reserved[64];
} cu_ipc_handle_t;

/* What a cuIpcGetMemHandle handle holds. */
typedef struct {
    uint64_t magic;
    int32_t pid;
    int32_t fd;
    uint64_t nbytes;
    uint64_t id; /* the allocation's, also in the memfd's name: a reused fd number is caught */
} ipc_payload_t;
_Static_assert(sizeof(ipc_payload_t) <= sizeof(cu_ipc_handle_t), "IPC payload fits the handle");

/* Test side: allocate, declare, inspect. */
#pragma GCC visibility push(default)
void *fake_cuda_alloc(size_t nbytes);
void fake_cuda_expect_stream(void *stream);
void fake_cuda_stream_stuck(int on);
int fake_cuda_faults(void);
int fake_cuda_launches(void);
void fake_cuda_fail_launch(int nth);
/* The driver's entry points (their CUDA names and the ABI src/cuda_drv.c expects). */
int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr);
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
int cuMemHostAlloc(void **p, size_t nbytes, unsigned flags);
int cuMemFreeHost(void *p);
int cuMemHostGetDevicePointer_v2(uintptr_t *dptr, void *p, unsigned flags);
int cuMemAlloc_v2(uintptr_t *dptr, size_t nbytes);
int cuMemFree_v2(uintptr_t dptr);
int cuIpcGetMemHandle(cu_ipc_handle_t *handle, uintptr_t dptr);
int cuIpcOpenMemHandle_v2(uintptr_t *dptr, cu_ipc_handle_t handle, unsigned flags);
int cuIpcCloseMemHandle(uintptr_t dptr);
int cuModuleLoadData(void **module, const void *image);
int cuModuleUnload(void *module);
int cuModuleGetFunction(void **fn, void *module, const char *name);
int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
int cuGetErrorString(int err, const char **str);
int cuDeviceGetCount(int *count);
int cuDeviceGetAttribute(int *value, int attribute, int device);
#pragma GCC visibility pop

static void *expected_stream;
static int stuck, faults, launches, fail_at;
static __thread int ctx_depth;
static __thread void *ctx_current;

/* Count a fault; the first few also say what it was, on stderr. */
static void fault(const char *what)
{
    if (__atomic_add_fetch(&faults, 1, __ATOMIC_RELAXED) <= 10)
        fprintf(stderr, "fake libcuda (pid %d): fault: %s\n", (int)getpid(), what);
}

static int has_ctx(void)
{
    return ctx_depth > 0 || ctx_current != NULL;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) & ~(page - 1);
}

/* ---- Regions: memory the driver knows ----
 * Device regions (test, mem, ipc) are page aligned and PROT_NONE at rest; pinned host memory
 * (cuMemHostAlloc) is tracked too, so that an operation queued on it but run after it was freed
 * is a fault rather than a write into the heap. */

enum { REGION_FREE, REGION_TEST, REGION_MEM, REGION_IPC, REGION_HOST };
typedef struct {
    int kind;
    uintptr_t base;
    size_t nbytes; /* as asked; the mapping is whole pages */
    uint64_t gen; /* unique per registration (0: free): a queued op checks it still holds */
    int fd; /* REGION_MEM: the memfd */
    int owner; /* REGION_MEM, REGION_IPC: the exporting pid */
    uint64_t id; /* REGION_MEM, REGION_IPC: the allocation's id */
    int refs; /* REGION_IPC: opens of the handle */
} region_t;
static region_t regions[MAX_REGIONS];
static int nregions; /* slots ever used */
static uint64_t next_gen = 1, next_id = 1;
static pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER; /* the region table */
/* Held by the pump while it runs an operation and by whoever unmaps a region, so that no
 * operation runs on memory being unmapped. Taken before region_lock. */
static pthread_mutex_t exec_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER; /* IPC opens and closes */

/* Register a region; 0, or -1 when the table is full. */
static int region_add(region_t r)
{
    int found = -1;
    pthread_mutex_lock(&region_lock);
    for (int i = 0; i < MAX_REGIONS && found < 0; i++)
        if (regions[i].kind == REGION_FREE)
            found = i;
    if (found >= 0) {
        r.gen = next_gen++;
        regions[found] = r;
        if (found >= nregions)
            nregions = found + 1;
    }
    pthread_mutex_unlock(&region_lock);
    return found < 0 ? -1 : 0;
}

/* The region holding [p, p + n) (its generation and kind in *gen_p, *kind_p where not NULL), or
 * -1: memory the driver does not know (host memory). */
static int region_of(uintptr_t p, size_t n, uint64_t *gen_p, int *kind_p)
{
    int found = -1;
    pthread_mutex_lock(&region_lock);
    for (int i = 0; i < nregions && found < 0; i++)
        if (regions[i].kind != REGION_FREE && p >= regions[i].base && n <= regions[i].nbytes &&
            p - regions[i].base <= regions[i].nbytes - n)
            found = i;
    if (found >= 0 && gen_p != NULL)
        *gen_p = regions[found].gen;
    if (found >= 0 && kind_p != NULL)
        *kind_p = regions[found].kind;
    pthread_mutex_unlock(&region_lock);
    return found;
}

/* A copy of the region of this kind that starts at base; -1 when there is none. */
static int region_at(uintptr_t base, int kind, region_t *r_p)
{
    int found = -1;
    pthread_mutex_lock(&region_lock);
    for (int i = 0; i < nregions && found < 0; i++)
        if (regions[i].kind == kind && regions[i].base == base)
            found = i;
    if (found >= 0)
        *r_p = regions[found];
    pthread_mutex_unlock(&region_lock);
    return found;
}

/* Unregister the region of this kind at base and unmap (free) it once no operation runs; 0, or -1
 * when there is none. */
static int region_remove(uintptr_t base, int kind)
{
    region_t r;
    pthread_mutex_lock(&exec_lock);
    int i = region_at(base, kind, &r);
    if (i < 0) {
        pthread_mutex_unlock(&exec_lock);
        return -1;
    }
    pthread_mutex_lock(&region_lock);
    regions[i].kind = REGION_FREE;
    regions[i].gen = 0;
    pthread_mutex_unlock(&region_lock);
    if (r.kind == REGION_HOST)
        free((void *)r.base);
    else
        munmap((void *)r.base, page_round(r.nbytes));
    if (r.kind == REGION_MEM)
        close(r.fd);
    pthread_mutex_unlock(&exec_lock);
    return 0;
}

/* Device pages open for an operation, closed after it; the test side copies the same way. */
static void set_access(uintptr_t p, size_t n, int prot)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = p & ~(uintptr_t)(page - 1), hi = (p + n + page - 1) & ~(uintptr_t)(page - 1);
    mprotect((void *)lo, hi - lo, prot);
}

void *fake_cuda_alloc(size_t nbytes)
{
    void *p = mmap(NULL, nbytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (region_add((region_t){.kind = REGION_TEST, .base = (uintptr_t)p, .nbytes = nbytes}) < 0) {
        munmap(p, nbytes);
        return NULL;
    }
    return p;
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

int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr)
{
    int kind = REGION_FREE;
    if (region_of(ptr, 1, NULL, &kind) < 0 || kind == REGION_HOST)
        return CUDA_ERROR_INVALID_VALUE; /* host memory (the fake has no pinned attributes) */
    switch (attribute) {
    case 1: /* CU_POINTER_ATTRIBUTE_CONTEXT */
        *(void **)data = CTX;
        return 0;
    case 2: /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
        *(unsigned *)data = 2; /* CU_MEMORYTYPE_DEVICE */
        return 0;
    case 8: /* CU_POINTER_ATTRIBUTE_IS_MANAGED */
        *(unsigned *)data = 0;
        return 0;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
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
    *device = 0;
    return 0;
}

/* ---- Streams: a queue each, run in order by the pump thread ---- */

/* An operation runs only once it has waited its stream's delay in the queue, so a caller that
 * reads a copy's destination before waiting for the stream sees the old bytes; a wait holds its
 * stream until the flag holds the value. Each operation names the memory it touches as spans,
 * with the device region of each (found when queued; checked again when run). */
enum { OP_COPY, OP_WRITE32, OP_WAIT32, OP_KERNEL };
enum { STREAM_FREE, STREAM_LIVE, STREAM_DRAINING }; /* draining: destroyed, work still queued */
#define DECLARED_DELAY_NS 1000000
#define CREATED_DELAY_NS 20000
typedef struct {
    uintptr_t p;
    size_t nbytes;
    int region; /* -1: unknown host memory; only where nbytes > 0 */
    uint64_t gen;
    int device; /* in a device region: pages to open */
} span_t;
typedef struct {
    int kind;
    span_t span[3]; /* copy: dst, src; write32/wait32: the flag; kernel: dst, a, b */
    uint32_t value;
    unsigned flags;
    int dtype, redop; /* kernel: chorusDataType_t, chorusRedOp_t or OP_DIV */
    size_t count;
    uint64_t divisor;
    int64_t queued_ns;
} op_t;
typedef struct {
    int state;
    int64_t delay_ns;
    unsigned head, tail; /* ops[head % MAX_PENDING] runs next; only the pump moves head */
    op_t *ops;
} stream_t;
static op_t declared_ops[MAX_PENDING];
static stream_t streams[MAX_STREAMS] = {{STREAM_LIVE, DECLARED_DELAY_NS, 0, 0, declared_ops}};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the streams and modules */
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

static span_t span_of(uintptr_t p, size_t nbytes)
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
static void no_parked_stream(const char *what)
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
static int queue_op(op_t *op, void *stream)
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

/* ---- Memory: pinned host, device (memfd) and IPC ---- */

int cuMemHostAlloc(void **p, size_t nbytes, unsigned flags)
{
    (void)flags;
    if (!has_ctx())
        return CUDA_ERROR_INVALID_VALUE;
    void *q;
    if (posix_memalign(&q, 4096, nbytes) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (region_add((region_t){.kind = REGION_HOST, .base = (uintptr_t)q, .nbytes = nbytes}) < 0) {
        free(q);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = q;
    return 0;
}

int cuMemFreeHost(void *p)
{
    /* Operations still queued on it become faults. */
    return region_remove((uintptr_t)p, REGION_HOST) == 0 ? 0 : CUDA_ERROR_INVALID_VALUE;
}

int cuMemHostGetDevicePointer_v2(uintptr_t *dptr, void *p, unsigned flags)
{
    (void)flags;
    *dptr = (uintptr_t)p; /* unified addressing: the host address is the device's */
    return 0;
}

/* The memfd's name, which /proc/<pid>/fd/<fd> shows as "/memfd:<name> (deleted)". */
static void mem_name(char *name, size_t n, int pid, uint64_t id)
{
    snprintf(name, n, "fake_cuda_mem_%d_%llu", pid, (unsigned long long)id);
}

int cuMemAlloc_v2(uintptr_t *dptr, size_t nbytes)
{
    no_parked_stream("cuMemAlloc_v2");
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (nbytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    char name[64];
    uint64_t id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    mem_name(name, sizeof(name), (int)getpid(), id);
    region_t r = {.kind = REGION_MEM, .nbytes = nbytes, .owner = (int)getpid(), .id = id};
    r.fd = memfd_create(name, MFD_CLOEXEC);
    if (r.fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = MAP_FAILED;
    if (ftruncate(r.fd, (off_t)page_round(nbytes)) != 0)
        goto err_close;
    p = mmap(NULL, page_round(nbytes), PROT_NONE, MAP_SHARED, r.fd, 0);
    if (p == MAP_FAILED)
        goto err_close;
    r.base = (uintptr_t)p;
    if (region_add(r) < 0)
        goto err_unmap;
    *dptr = (uintptr_t)p;
    return 0;
err_unmap:
    munmap(p, page_round(nbytes));
err_close:
    close(r.fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

int cuMemFree_v2(uintptr_t dptr)
{
    /* Other processes' mappings keep the memfd's pages. */
    return region_remove(dptr, REGION_MEM) == 0 ? 0 : CUDA_ERROR_INVALID_VALUE;
}

int cuIpcGetMemHandle(cu_ipc_handle_t *handle, uintptr_t dptr)
{
    region_t r;
    if (region_at(dptr, REGION_MEM, &r) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    ipc_payload_t pl = {IPC_MAGIC, r.owner, r.fd, r.nbytes, r.id};
    memset(handle, 0, sizeof(*handle));
    memcpy(handle->reserved, &pl, sizeof(pl));
    return 0;
}

/* Map the memfd behind a handle of another live process; 0 or a CUDA error. */
static int ipc_map(const ipc_payload_t *pl, uintptr_t *dptr)
{
    char path[64], link[PATH_MAX], name[64], want[80];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pl->pid, (int)pl->fd);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    if (n < 0)
        return CUDA_ERROR_INVALID_VALUE; /* the owner exited, or freed and closed it */
    link[n] = '\0';
    mem_name(name, sizeof(name), pl->pid, pl->id);
    int len = snprintf(want, sizeof(want), "/memfd:%s", name);
    if (strncmp(link, want, (size_t)len) != 0 || (link[len] != '\0' && link[len] != ' '))
        return CUDA_ERROR_INVALID_VALUE; /* the fd number now holds another file */
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap(NULL, page_round(pl->nbytes), PROT_NONE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    region_t r = {.kind = REGION_IPC, .base = (uintptr_t)p, .nbytes = pl->nbytes, .fd = -1};
    r.owner = pl->pid;
    r.id = pl->id;
    r.refs = 1;
    if (region_add(r) < 0) {
        munmap(p, page_round(pl->nbytes));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (uintptr_t)p;
    return 0;
}

int cuIpcOpenMemHandle_v2(uintptr_t *dptr, cu_ipc_handle_t handle, unsigned flags)
{
    no_parked_stream("cuIpcOpenMemHandle_v2");
    (void)flags;
    ipc_payload_t pl;
    memcpy(&pl, handle.reserved, sizeof(pl));
    if (pl.magic != IPC_MAGIC || pl.nbytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!has_ctx() || pl.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* the real driver refuses the process's own memory */
    int res = 0, found = -1;
    pthread_mutex_lock(&ipc_lock);
    pthread_mutex_lock(&region_lock);
    for (int i = 0; i < nregions && found < 0; i++)
        if (regions[i].kind == REGION_IPC && regions[i].owner == pl.pid && regions[i].id == pl.id)
            found = i;
    if (found >= 0) { /* opened before: the same mapping, counted */
        regions[found].refs++;
        *dptr = regions[found].base;
    }
    pthread_mutex_unlock(&region_lock);
    if (found < 0)
        res = ipc_map(&pl, dptr);
    pthread_mutex_unlock(&ipc_lock);
    return res;
}

int cuIpcCloseMemHandle(uintptr_t dptr)
{
    region_t r;
    pthread_mutex_lock(&ipc_lock);
    int i = region_at(dptr, REGION_IPC, &r);
    if (i >= 0) {
        pthread_mutex_lock(&region_lock);
        int last = --regions[i].refs == 0;
        pthread_mutex_unlock(&region_lock);
        if (last)
            region_remove(dptr, REGION_IPC);
    }
    pthread_mutex_unlock(&ipc_lock);
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : 0;
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

/* ---- Device facts and errors ---- */

int cuGetErrorString(int err, const char **str)
{
    *str = err == CUDA_ERROR_NOT_READY ? "fake: not ready" : "fake: error";
    return 0;
}

int cuDeviceGetCount(int *count)
{
    *count = 1;
    return 0;
}

int cuDeviceGetAttribute(int *value, int attribute, int device)
{
    if (device != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *value = attribute == 16 ? 4 : 0; /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 4 */
    return 0;
}
