/*
 * fake_cuda_int.h: what the files of the stand-in CUDA driver share (fake_cuda_stage.c:
 * contexts, streams, events, the pump and faults; fake_cuda_mem.c: the region table and memory;
 * fake_cuda_kernels.c: modules and launches; fake_cuda_dev.c: the GPUs). Everything here is
 * internal: the library is built with hidden visibility, and only the cu* and fake_cuda_* entry
 * points, declared in each file under `#pragma GCC visibility push(default)`, are exported.
 */
#ifndef FAKE_CUDA_INT_H
#define FAKE_CUDA_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CTX ((void *)(uintptr_t)0xc0de)
#define MAX_REGIONS 1024
#define OP_DIV 4 /* op_t.redop of the div kernels, after chorusRedOp_t's sum prod max min */
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_PEER_ACCESS_UNSUPPORTED 217
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600

/* ---- Regions: memory the driver knows (fake_cuda_mem.c) ---- */

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
extern region_t regions[MAX_REGIONS];
extern pthread_mutex_t region_lock; /* the region table */
/* Held by the pump while it runs an operation and by whoever unmaps a region, so that no
 * operation runs on memory being unmapped. Taken before region_lock. */
extern pthread_mutex_t exec_lock;

/* The region holding [p, p + n) (its generation and kind in *gen_p, *kind_p where not NULL), or
 * -1: memory the driver does not know (host memory). */
int region_of(uintptr_t p, size_t n, uint64_t *gen_p, int *kind_p);
/* Device pages open for an operation, closed after it; the test side copies the same way. */
void set_access(uintptr_t p, size_t n, int prot);

/* ---- GPUs (fake_cuda_dev.c) ---- */

#define BUSID_BYTES 16
/* The device number of this process's current GPU. */
int gpu_current(void);
/* The PCI bus id of this process's current GPU. */
const char *gpu_busid(void);
/* 0 when this process can open memory of the GPU with that bus id (visible here or not, as CUDA
 * IPC since 10.1), or the CUDA error: it has no peer access from the current one. */
int gpu_reach(const char *busid);

/* ---- Stream operations (fake_cuda_stage.c) ----
 * Each operation names the memory it touches as spans, with the device region of each (found
 * when queued; checked again when run). */

enum { OP_COPY, OP_WRITE32, OP_WAIT32, OP_KERNEL, OP_EVENT };
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
    uint32_t value; /* write32/wait32: the flag's; event: the record's number */
    uint32_t *event; /* event: where the completed record's number goes */
    unsigned flags;
    int dtype, redop; /* kernel: chorusDataType_t, chorusRedOp_t or OP_DIV */
    size_t count;
    uint64_t divisor;
    int64_t queued_ns;
} op_t;
extern pthread_mutex_t lock; /* the streams and modules */

/* Count a fault; the first few also say what it was, on stderr. */
void fault(const char *what);
/* Whether this thread has a context, pushed or current. */
int has_ctx(void);
/* The span of [p, p + nbytes), with its region as it is now. */
span_t span_of(uintptr_t p, size_t nbytes);
/* A fault when a stream waits on a flag that does not hold (what: the call made meanwhile). */
void no_parked_stream(const char *what);
/* Queue op on stream; 0 or a CUDA error (a full queue). */
int queue_op(op_t *op, void *stream);

#endif
