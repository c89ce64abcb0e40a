/*
 * fake_cuda_mem.c: the memory of the stand-in CUDA driver (fake_cuda_stage.c says what the
 * whole driver does). It keeps the table of regions the driver knows, so that an operation can
 * open a device region's pages while it runs (they are PROT_NONE at rest) and can tell that its
 * memory was freed after it was queued, and hands out memory of every kind: the test's device
 * buffers (fake_cuda_alloc), pinned host memory (cuMemHostAlloc), device memory as memfds
 * (cuMemAlloc_v2) and IPC handles that other processes map through /proc/<pid>/fd/<fd>.
 * Allocating or opening a handle while a stream waits on a flag that does not hold is a fault.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda_int.h"

#define IPC_MAGIC 0x66616b6563756970ull /* "fakecuip" */

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
    char busid[BUSID_BYTES]; /* the GPU it is on: an importer must be able to reach it */
} ipc_payload_t;
_Static_assert(sizeof(ipc_payload_t) <= sizeof(cu_ipc_handle_t), "IPC payload fits the handle");

/* Test side: allocate. */
#pragma GCC visibility push(default)
void *fake_cuda_alloc(size_t nbytes);
/* The driver's entry points (their CUDA names and the ABI src/cuda_drv.c expects). */
int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr);
int cuMemHostAlloc(void **p, size_t nbytes, unsigned flags);
int cuMemFreeHost(void *p);
int cuMemHostGetDevicePointer_v2(uintptr_t *dptr, void *p, unsigned flags);
int cuMemAlloc_v2(uintptr_t *dptr, size_t nbytes);
int cuMemFree_v2(uintptr_t dptr);
int cuIpcGetMemHandle(cu_ipc_handle_t *handle, uintptr_t dptr);
int cuIpcOpenMemHandle_v2(uintptr_t *dptr, cu_ipc_handle_t handle, unsigned flags);
int cuIpcCloseMemHandle(uintptr_t dptr);
#pragma GCC visibility pop

static size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) & ~(page - 1);
}

/* ---- Regions: memory the driver knows ----
 * Device regions (test, mem, ipc) are page aligned and PROT_NONE at rest; pinned host memory
 * (cuMemHostAlloc) is tracked too, so that an operation queued on it but run after it was freed
 * is a fault rather than a write into the heap. The entry, region_t, is in fake_cuda_int.h. */
region_t regions[MAX_REGIONS];
static int nregions; /* slots ever used */
static uint64_t next_gen = 1, next_id = 1;
pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER; /* the region table */
/* Held by the pump while it runs an operation and by whoever unmaps a region, so that no
 * operation runs on memory being unmapped. Taken before region_lock. */
pthread_mutex_t exec_lock = PTHREAD_MUTEX_INITIALIZER;
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
int region_of(uintptr_t p, size_t n, uint64_t *gen_p, int *kind_p)
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
void set_access(uintptr_t p, size_t n, int prot)
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
    ipc_payload_t pl = {IPC_MAGIC, r.owner, r.fd, r.nbytes, r.id, ""};
    snprintf(pl.busid, sizeof(pl.busid), "%s", gpu_busid());
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
    pl.busid[sizeof(pl.busid) - 1] = '\0';
    int res = gpu_reach(pl.busid), found = -1;
    if (res != 0)
        return res;
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
