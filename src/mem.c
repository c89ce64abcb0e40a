/*
 * mem.c: chorusMemAlloc/Free and memory-type detection.
 *
 * A CUDA device pointer can only exist in a process where the CUDA driver (libcuda.so.1) is
 * loaded, so detection asks the driver only then: at every call, a process without it looks
 * whether a library was loaded since the last look (dl_iterate_phdr's count of loads) and only
 * then for a libcuda.so* among them, which dlopen with RTLD_NOLOAD then takes without loading
 * anything. (A failing RTLD_NOLOAD dlopen, the way until 2026-12-06, allocates its error text.
 * A look every 100 ms, the way until 2026-12-07, read a device pointer from a driver loaded in
 * those 100 ms as host memory: test_device_ptr late.) This build has no CUDA support, so a device
 * pointer is refused with a clear error rather than read as host memory.
 *
 * chorusMemAlloc memory is a memfd mapped shared and kept in a list of regions: the direct
 * algorithms let local peers map it (window.c opens /proc/<pid>/fd/<fd>) and read a rank's input
 * in place instead of copying it through the window (zero-copy). Where memfd_create fails it is
 * plain page-aligned memory, in the list without a memfd (fd -1: never zero-copy), and copied as
 * any buffer. chorusMemFree frees only what the list holds (or a chorusMemAllocDevice pointer):
 * any other pointer, one freed already included, is refused rather than handed to free().
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "cuda_stage.h"
#include "debug.h"

typedef int (*cu_pointer_get_attribute_t)(void *data, int attribute, uintptr_t ptr);
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_MEMORYTYPE_DEVICE 2

static cu_pointer_get_attribute_t cu_get_attr;
static unsigned long long seen_adds; /* dl_iterate_phdr's dlpi_adds at the last look */

/* dl_iterate_phdr's callback: stops (1) at a libcuda.so* (libcuda.so.1, or a name it links to),
 * or (2) at the first object when no library was loaded since the last look. */
static int find_libcuda(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    int *first = arg;
    if (*first) {
        *first = 0;
        if (info->dlpi_adds == __atomic_load_n(&seen_adds, __ATOMIC_RELAXED))
            return 2;
        __atomic_store_n(&seen_adds, info->dlpi_adds, __ATOMIC_RELAXED);
    }
    const char *slash = strrchr(info->dlpi_name, '/');
    return strncmp(slash != NULL ? slash + 1 : info->dlpi_name, "libcuda.so", 10) == 0;
}

int mem_is_device(const void *ptr)
{
    if (!mem_cuda_possible())
        return 0;
    cu_pointer_get_attribute_t fn = __atomic_load_n(&cu_get_attr, __ATOMIC_ACQUIRE);
    unsigned type = 0, managed = 0;
    if (fn(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (uintptr_t)ptr) != 0)
        return 0; /* not known to CUDA: host memory */
    if (fn(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (uintptr_t)ptr) == 0 && managed)
        return 0; /* managed memory is host accessible */
    return type == CU_MEMORYTYPE_DEVICE;
}

HOT_PATH int mem_cuda_possible(void)
{
    cu_pointer_get_attribute_t fn = __atomic_load_n(&cu_get_attr, __ATOMIC_ACQUIRE);
    if (fn == NULL) {
        /* Every call looks: a pointer from a driver loaded since the last look must not pass
         * for host memory. The look stops at the first object when nothing was loaded since
         * (about 11 ns with 70 objects loaded, the loader's lock taken and dropped). */
        int first = 1;
        if (dl_iterate_phdr(find_libcuda, &first) != 1)
            return 0;
        void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (lib == NULL)
            return 0;
        fn = (cu_pointer_get_attribute_t)(uintptr_t)dlsym(lib, "cuPointerGetAttribute");
        if (fn == NULL)
            return 0;
        __atomic_store_n(&cu_get_attr, fn, __ATOMIC_RELEASE);
    }
    return 1;
}

typedef struct mem_region {
    char *base;
    size_t nbytes; /* mapped: nbytes asked for, rounded up to pages */
    int fd;
    uint64_t id;
    uint64_t ino; /* the memfd's inode number: peers check what they opened */
    struct mem_region *next;
} mem_region_t;

static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_region_t *regions;
static uint64_t last_region_id;

int mem_find_region(const void *ptr, size_t nbytes, mem_ref_t *ref)
{
    const char *p = ptr;
    int found = 0;
    pthread_mutex_lock(&regions_lock);
    for (mem_region_t *r = regions; r != NULL && !found; r = r->next) {
        if (r->fd >= 0 && p >= r->base && nbytes <= r->nbytes &&
            (size_t)(p - r->base) <= r->nbytes - nbytes) {
            *ref = (mem_ref_t){.id = r->id,
                               .offset = (uint64_t)(p - r->base),
                               .addr = (uint64_t)(uintptr_t)p,
                               .ino = r->ino,
                               .fd = r->fd,
                               .span = nbytes};
            found = 1;
        }
    }
    pthread_mutex_unlock(&regions_lock);
    return found;
}

chorusResult_t chorusMemAlloc(void **ptr, size_t nbytes)
{
    debug_clear_error();
    if (ptr == NULL)
        return ERR(chorusInvalidArgument, SUB_ALLOC, "chorusMemAlloc: ptr is NULL");
    if (nbytes == 0)
        return ERR(chorusInvalidArgument, SUB_ALLOC, "chorusMemAlloc: nbytes is 0");
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (nbytes > SIZE_MAX - page)
        return ERR(chorusInvalidArgument, SUB_ALLOC, "chorusMemAlloc: nbytes %zu is too large",
                   nbytes);
    size_t mapped = (nbytes + page - 1) / page * page;
    mem_region_t *r = calloc(1, sizeof(*r));
    int fd = r != NULL ? memfd_create("chorus-mem", MFD_CLOEXEC) : -1;
    struct stat st;
    if (fd >= 0 && ftruncate(fd, (off_t)mapped) == 0 && fstat(fd, &st) == 0) {
        void *base = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base != MAP_FAILED) {
            *r = (mem_region_t){base, mapped, fd, 0, (uint64_t)st.st_ino, NULL};
            pthread_mutex_lock(&regions_lock);
            r->id = ++last_region_id;
            r->next = regions;
            regions = r;
            pthread_mutex_unlock(&regions_lock);
            *ptr = base;
            return chorusSuccess;
        }
    }
    /* No shareable memory (no memfd, a size limit): plain memory, copied like any buffer. */
    INFO(SUB_ALLOC, "chorusMemAlloc of %zu bytes: no shareable memory (%s), plain memory instead",
         nbytes, strerror(errno));
    if (fd >= 0)
        close(fd);
    void *p = NULL;
    int rc = r != NULL ? posix_memalign(&p, page, nbytes) : ENOMEM;
    if (rc != 0) {
        free(r);
        return ERR(chorusSystemError, SUB_ALLOC, "chorusMemAlloc of %zu bytes failed: %s", nbytes,
                   strerror(rc));
    }
    *r = (mem_region_t){p, nbytes, -1, 0, 0, NULL};
    pthread_mutex_lock(&regions_lock);
    r->id = ++last_region_id;
    r->next = regions;
    regions = r;
    pthread_mutex_unlock(&regions_lock);
    *ptr = p;
    return chorusSuccess;
}

chorusResult_t chorusMemFree(void *ptr)
{
    debug_clear_error();
    mem_region_t *found = NULL;
    int inside = 0;
    pthread_mutex_lock(&regions_lock);
    for (mem_region_t **pp = &regions; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->base == ptr) {
            found = *pp;
            *pp = found->next;
            break;
        }
        inside |= (char *)ptr > (*pp)->base && (char *)ptr < (*pp)->base + (*pp)->nbytes;
    }
    pthread_mutex_unlock(&regions_lock);
    if (found == NULL && inside)
        return ERR(chorusInvalidArgument, SUB_ALLOC,
                   "chorusMemFree: %p lies inside a chorusMemAlloc buffer but is not its start "
                   "(pass the pointer chorusMemAlloc returned)",
                   ptr);
    if (found == NULL && ptr == NULL)
        return chorusSuccess; /* as free(NULL) */
    if (found == NULL && CHORUS_HAVE_CUDA && mem_is_device(ptr))
        return cuda_mem_free(ptr); /* chorusMemAllocDevice's (cuda_dev.c) */
    if (found == NULL)
        return ERR(chorusInvalidArgument, SUB_ALLOC,
                   "chorusMemFree: %p is not a pointer chorusMemAlloc returned, or it was freed "
                   "already (memory from malloc goes to free)",
                   ptr);
    if (found->fd >= 0) {
        munmap(found->base, found->nbytes);
        close(found->fd);
    } else {
        free(found->base); /* the plain memory of a chorusMemAlloc without a memfd */
    }
    free(found);
    return chorusSuccess;
}
