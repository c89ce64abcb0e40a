/*
 * fake_cuda_stage.c: a stand-in CUDA driver (soname libcuda.so.1) with every entry point the
 * staging of device buffers uses (src/cuda_stage.c), so that a machine without a GPU runs the
 * whole staged path. "Device memory" is what fake_cuda_alloc hands out: pages kept PROT_NONE
 * except while a copy runs, so any direct access by the library is a SIGSEGV. cuMemcpyAsync only
 * queues the copy; a pump thread, playing the GPU, runs the stream's queue in order, each entry
 * no sooner than 1 ms after it was queued, so reading a copy's destination before waiting sees
 * stale bytes, as on a GPU. Every copy must name the stream the
 * test declared (fake_cuda_expect_stream) in a pushed context, or it counts as a fault.
 * cuStreamQuery answers "not ready" twice before each "done" (the library's polling runs), or
 * forever once fake_cuda_stream_stuck(1) (the pump stops too; the library's deadlines run).
 * Stream memory operations (cuStreamWriteValue32_v2, cuStreamWaitValue32_v2 on
 * cuMemHostGetDevicePointer_v2 addresses) run in stream order with the copies; a wait holds the
 * queue until its flag has the value. Test support only; never
 * installed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#define CTX ((void *)(uintptr_t)0xc0de)
#define MAX_REGIONS 64
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_READY 600

static struct {
    uintptr_t base;
    size_t nbytes;
} regions[MAX_REGIONS];
static int nregions;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the stream's queue */
static pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER; /* the device regions */
static void *expected_stream;
static int stuck, faults;

static __thread int busy_answers, ctx_depth;

/* Test side: allocate, declare, inspect. */
void *fake_cuda_alloc(size_t nbytes);
void fake_cuda_expect_stream(void *stream);
void fake_cuda_stream_stuck(int on);
int fake_cuda_faults(void);
/* The driver's entry points (their CUDA names and the ABI src/cuda_stage.c expects). */
int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr);
int cuCtxPushCurrent_v2(void *ctx);
int cuCtxPopCurrent_v2(void **ctx);
int cuMemcpyAsync(uintptr_t dst, uintptr_t src, size_t nbytes, void *stream);
int cuStreamQuery(void *stream);
int cuMemHostAlloc(void **p, size_t nbytes, unsigned flags);
int cuMemFreeHost(void *p);
int cuGetErrorString(int err, const char **str);
int cuDeviceGetCount(int *count);
int cuCtxGetDevice(int *device);
int cuStreamWriteValue32_v2(void *stream, uintptr_t addr, uint32_t value, unsigned flags);
int cuStreamWaitValue32_v2(void *stream, uintptr_t addr, uint32_t value, unsigned flags);
int cuMemHostGetDevicePointer_v2(uintptr_t *dptr, void *p, unsigned flags);

void *fake_cuda_alloc(size_t nbytes)
{
    void *p = mmap(NULL, nbytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    pthread_mutex_lock(&region_lock);
    if (nregions == MAX_REGIONS) {
        pthread_mutex_unlock(&region_lock);
        munmap(p, nbytes);
        return NULL;
    }
    regions[nregions].base = (uintptr_t)p;
    regions[nregions++].nbytes = nbytes;
    pthread_mutex_unlock(&region_lock);
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

/* The region holding [p, p + n), or -1. */
static int region_of(uintptr_t p, size_t n)
{
    int found = -1;
    pthread_mutex_lock(&region_lock);
    for (int i = 0; i < nregions && found < 0; i++)
        if (p >= regions[i].base && n <= regions[i].nbytes &&
            p - regions[i].base <= regions[i].nbytes - n)
            found = i;
    pthread_mutex_unlock(&region_lock);
    return found;
}

int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr)
{
    if (region_of(ptr, 1) < 0)
        return CUDA_ERROR_INVALID_VALUE; /* not memory the driver knows: host memory */
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

/* Device pages open for the copy, closed after it; the test side copies the same way. */
static void set_access(uintptr_t p, size_t n, int prot)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = p & ~(uintptr_t)(page - 1), hi = (p + n + page - 1) & ~(uintptr_t)(page - 1);
    mprotect((void *)lo, hi - lo, prot);
}

/* The (one) stream: a queue of copies and 32-bit memory operations that a pump thread runs in
 * order, as a GPU runs its stream on its own. An operation runs only once it has waited
 * OP_DELAY_NS in the queue, so a caller that reads a copy's destination before waiting for the
 * stream sees the old bytes; a wait stops the queue until its flag holds the value. */
#define MAX_PENDING 4096
#define OP_DELAY_NS 1000000
enum { OP_COPY, OP_WRITE32, OP_WAIT32 };
typedef struct {
    int kind;
    uintptr_t dst, src; /* OP_WRITE32/OP_WAIT32: dst is the flag */
    size_t nbytes;
    uint32_t value;
    unsigned flags;
    int64_t queued_ns;
} op_t;
static op_t pending[MAX_PENDING];
static unsigned phead, ptail; /* pending[phead % MAX_PENDING] runs next; only the pump moves it */
static int pump_started;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void run_copy(uintptr_t dst, uintptr_t src, size_t nbytes)
{
    int d = region_of(dst, nbytes) >= 0, s = region_of(src, nbytes) >= 0;
    if (d)
        set_access(dst, nbytes, PROT_READ | PROT_WRITE);
    if (s)
        set_access(src, nbytes, PROT_READ | PROT_WRITE);
    memmove((void *)dst, (const void *)src, nbytes);
    if (d)
        set_access(dst, nbytes, PROT_NONE);
    if (s)
        set_access(src, nbytes, PROT_NONE);
}

/* Run the head operation if it may run now; 1 when it did. Only the pump thread calls it. */
static int pump_one(void)
{
    pthread_mutex_lock(&lock);
    int have = phead != ptail && !__atomic_load_n(&stuck, __ATOMIC_RELAXED);
    op_t op;
    if (have)
        op = pending[phead % MAX_PENDING];
    pthread_mutex_unlock(&lock);
    if (!have || now_ns() - op.queued_ns < OP_DELAY_NS)
        return 0;
    uint32_t *flag = (uint32_t *)op.dst;
    if (op.kind == OP_COPY) {
        if (op.nbytes > 0)
            run_copy(op.dst, op.src, op.nbytes);
    } else if (op.kind == OP_WRITE32) {
        __atomic_store_n(flag, op.value, __ATOMIC_RELEASE);
    } else {
        uint32_t v = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
        int ok = (op.flags & 3) == 1 ? v == op.value /* EQ */
                                     : (int32_t)(v - op.value) >= 0; /* GEQ */
        if (!ok)
            return 0;
    }
    pthread_mutex_lock(&lock);
    phead++;
    pthread_mutex_unlock(&lock);
    return 1;
}

static void *pump_main(void *arg)
{
    (void)arg;
    for (;;) {
        int ran = 0;
        while (pump_one())
            ran = 1;
        if (!ran) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

static int queue_op(int kind, uintptr_t dst, uintptr_t src, size_t nbytes, uint32_t value,
                    unsigned flags, void *stream)
{
    if (ctx_depth == 0 || stream != __atomic_load_n(&expected_stream, __ATOMIC_RELAXED))
        __atomic_add_fetch(&faults, 1, __ATOMIC_RELAXED); /* no context, or another stream */
    pthread_mutex_lock(&lock);
    if (!pump_started) {
        pthread_t pump;
        if (pthread_create(&pump, NULL, pump_main, NULL) == 0) {
            pthread_detach(pump);
            pump_started = 1;
        }
    }
    int full = ptail - phead == MAX_PENDING;
    if (!full)
        pending[ptail++ % MAX_PENDING] = (op_t){kind, dst, src, nbytes, value, flags, now_ns()};
    pthread_mutex_unlock(&lock);
    return full ? 2 : 0; /* CUDA_ERROR_OUT_OF_MEMORY */
}

int cuMemcpyAsync(uintptr_t dst, uintptr_t src, size_t nbytes, void *stream)
{
    return queue_op(OP_COPY, dst, src, nbytes, 0, 0, stream);
}

int cuStreamWriteValue32_v2(void *stream, uintptr_t addr, uint32_t value, unsigned flags)
{
    return queue_op(OP_WRITE32, addr, 0, 0, value, flags, stream);
}

int cuStreamWaitValue32_v2(void *stream, uintptr_t addr, uint32_t value, unsigned flags)
{
    return queue_op(OP_WAIT32, addr, 0, 0, value, flags, stream);
}

int cuMemHostGetDevicePointer_v2(uintptr_t *dptr, void *p, unsigned flags)
{
    (void)flags;
    *dptr = (uintptr_t)p; /* unified addressing: the host address is the device's */
    return 0;
}

int cuStreamQuery(void *stream)
{
    (void)stream;
    if (__atomic_load_n(&stuck, __ATOMIC_RELAXED))
        return CUDA_ERROR_NOT_READY;
    if (busy_answers < 2) {
        busy_answers++;
        return CUDA_ERROR_NOT_READY;
    }
    pthread_mutex_lock(&lock);
    int idle = phead == ptail;
    pthread_mutex_unlock(&lock);
    if (!idle)
        return CUDA_ERROR_NOT_READY;
    busy_answers = 0;
    return 0;
}

int cuMemHostAlloc(void **p, size_t nbytes, unsigned flags)
{
    (void)flags;
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return posix_memalign(p, 4096, nbytes) == 0 ? 0 : 2; /* 2: CUDA_ERROR_OUT_OF_MEMORY */
}

int cuMemFreeHost(void *p)
{
    free(p);
    return 0;
}

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

int cuCtxGetDevice(int *device)
{
    if (ctx_depth == 0)
        return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    *device = 0;
    return 0;
}
