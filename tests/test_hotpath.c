/*
 * test_hotpath.c: proves issue 6's "no allocation or page fault on the hot path": once a
 * collective has run a few times with given buffers and size, further calls of it allocate no
 * memory, map or unmap nothing and take no page fault on the calling thread.
 *
 * Every rank is one MPI process. This program defines malloc, calloc, realloc, the aligned
 * allocators, mmap and munmap itself (forwarding to glibc's), so the library's calls land here
 * and are counted while a call is being measured; page faults are getrusage(RUSAGE_THREAD)'s
 * minor and major faults around each call. Both count the calling thread only, where the
 * blocking calls (NULL stream) run: MPI's own threads would otherwise be counted. Calls on a host
 * stream run on its worker thread, so that case counts the whole process (RUSAGE_SELF).
 *
 * Cases: all-reduce, broadcast and reduce (the root moves every call), all-gather,
 * reduce-scatter, all-to-all, a send/recv pair around the ring (a group), two all-reduces in one
 * group, and an all-reduce queued on a host stream and waited for; float32 sum; 64 B, 4 KiB,
 * 256 KiB, 4 MiB and 32 MiB (so the one-shot, two-shot and ring paths, and the zero-copy votes
 * from 16 MiB, all run); out of place and in place (but send/recv); buffers from malloc
 * (touched) and from chorusMemAlloc (touched). Each case: WARM calls (rooted ones: at least one
 * with each root), a barrier, then CALLS measured calls; every output of the last one is checked
 * (inputs are rank+1, exact).
 *
 *   mpirun -np N test_hotpath    (any N >= 2; CHORUS_ALGO may force an algorithm)
 * Exit 0: all passed; 1: a check failed; 77: SKIP (a sanitizer build: its allocator is the one
 * that must run, so this program cannot count allocations).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "chorus_mpi.h"
#include "harness.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HOTPATH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HOTPATH_SANITIZED 1
#endif
#endif

#ifndef HOTPATH_SANITIZED
/* Counted on the thread that set armed, or on every thread while armed_all is set (calls on a
 * host stream run on its worker); glibc's allocator does the work. */
static __thread int armed;
static __thread long allocs, maps;
static int armed_all;
static long allocs_all, maps_all;

static inline void count(long *mine, long *all)
{
    *mine += armed;
    if (__atomic_load_n(&armed_all, __ATOMIC_RELAXED))
        __atomic_add_fetch(all, 1, __ATOMIC_RELAXED);
}

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

void *malloc(size_t n)
{
    count(&allocs, &allocs_all);
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size)
{
    count(&allocs, &allocs_all);
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n)
{
    count(&allocs, &allocs_all);
    return __libc_realloc(p, n);
}
void free(void *p)
{
    __libc_free(p);
}
void *memalign(size_t align, size_t n)
{
    count(&allocs, &allocs_all);
    return __libc_memalign(align, n);
}
void *aligned_alloc(size_t align, size_t n)
{
    count(&allocs, &allocs_all);
    return __libc_memalign(align, n);
}
int posix_memalign(void **p, size_t align, size_t n)
{
    count(&allocs, &allocs_all);
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    void *q = __libc_memalign(align, n);
    if (q == NULL)
        return ENOMEM;
    *p = q;
    return 0;
}
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    count(&maps, &maps_all);
    long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    return (void *)r; /* the kernel's MAP_FAILED is -errno; glibc's wrapper sets errno */
}
int munmap(void *addr, size_t len)
{
    count(&maps, &maps_all);
    return (int)syscall(SYS_munmap, addr, len);
}
#endif

#define WARM 3
#define CALLS 10
#define MAXBYTES (32u << 20)

enum coll { AR, BC, RED, AG, RS, A2A, SENDRECV, GROUP2, STREAM_AR, NCOLL };
static const char *const coll_names[NCOLL] = {
    "all-reduce", "broadcast",           "reduce",
    "all-gather", "reduce-scatter",      "all-to-all",
    "send/recv",  "grouped all-reduces", "all-reduce on a host stream"};
static chorusStream_t stream;
static const size_t sizes[] = {64, 4096, 256 << 10, 4 << 20, 32 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static int me, nranks;

static void fill(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        p[i] = v;
}

/* Inputs of call `call` of case c into send (and recv where in place); count: elements a rank
 * has (per rank for the gathers and scatters). */
static void prepare(enum coll c, int inplace, float *send, float *recv, size_t count, int root)
{
    float v = (float)(me + 1);
    switch (c) {
    case AR:
    case RED:
    case GROUP2:
    case STREAM_AR:
        fill(inplace ? recv : send, c == GROUP2 ? 2 * count : count, v);
        break;
    case BC:
        if (me == root)
            fill(inplace ? recv : send, count, v);
        break;
    case AG:
        fill(recv, count * (size_t)nranks, 0);
        fill(inplace ? recv + count * (size_t)me : send, count, v);
        break;
    case RS:
        fill(send, count * (size_t)nranks, v);
        break;
    case A2A:
        fill(inplace ? recv : send, count * (size_t)nranks, v);
        break;
    case SENDRECV:
        fill(send, count, v);
        break;
    default:
        break;
    }
}

static chorusResult_t call(enum coll c, int inplace, float *send, float *recv, size_t count,
                           int root, chorusComm_t comm)
{
    const chorusDataType_t f = chorusFloat32;
    switch (c) {
    case AR:
        return chorusAllReduce(inplace ? recv : send, recv, count, f, chorusSum, comm, NULL);
    case BC:
        return chorusBroadcast(inplace ? recv : send, recv, count, f, root, comm, NULL);
    case RED:
        return chorusReduce(inplace ? recv : send, recv, count, f, chorusSum, root, comm, NULL);
    case AG:
        return chorusAllGather(inplace ? recv + count * (size_t)me : send, recv, count, f, comm,
                               NULL);
    case RS:
        return chorusReduceScatter(send, inplace ? send + count * (size_t)me : recv, count, f,
                                   chorusSum, comm, NULL);
    case A2A:
        return chorusAlltoAll(inplace ? recv : send, recv, count, f, comm, NULL);
    case SENDRECV: {
        chorusGroupStart();
        chorusResult_t r1 = chorusSend(send, count, f, (me + 1) % nranks, comm, NULL);
        chorusResult_t r2 = chorusRecv(recv, count, f, (me + nranks - 1) % nranks, comm, NULL);
        chorusResult_t r3 = chorusGroupEnd();
        return r1 != chorusSuccess ? r1 : r2 != chorusSuccess ? r2 : r3;
    }
    case GROUP2: {
        float *a = inplace ? recv : send, *b = (inplace ? recv : send) + count;
        chorusGroupStart();
        chorusResult_t r1 = chorusAllReduce(a, recv, count, f, chorusSum, comm, NULL);
        chorusResult_t r2 = chorusAllReduce(b, recv + count, count, f, chorusSum, comm, NULL);
        chorusResult_t r3 = chorusGroupEnd();
        return r1 != chorusSuccess ? r1 : r2 != chorusSuccess ? r2 : r3;
    }
    case STREAM_AR: {
        chorusResult_t r1 =
            chorusAllReduce(inplace ? recv : send, recv, count, f, chorusSum, comm, stream);
        chorusResult_t r2 = chorusStreamSynchronize(stream);
        return r1 != chorusSuccess ? r1 : r2;
    }
    default:
        return chorusInvalidArgument;
    }
}

/* Index of the first wrong element of the last call's output, or -1; *want_p: what it should be. */
static long long first_wrong(enum coll c, int inplace, const float *send, const float *recv,
                             size_t count, int root, float *want_p)
{
    const float sum = (float)(nranks * (nranks + 1) / 2);
    const float *out = recv;
    size_t n = count;
    switch (c) {
    case RED:
        if (me != root)
            return -1;
        break;
    case GROUP2:
        n = 2 * count;
        break;
    case AG:
    case A2A:
        n = count * (size_t)nranks;
        break;
    case RS:
        out = inplace ? send + count * (size_t)me : recv;
        break;
    default:
        break;
    }
    for (size_t i = 0; i < n; i++) {
        float want = sum;
        if (c == BC)
            want = (float)(root + 1);
        else if (c == AG || c == A2A)
            want = (float)(i / count + 1);
        else if (c == SENDRECV)
            want = (float)((me + nranks - 1) % nranks + 1);
        if (out[i] != want) {
            *want_p = want;
            return (long long)i;
        }
    }
    return -1;
}

#ifndef HOTPATH_SANITIZED
/* Page faults of this thread, or of the whole process (all). */
static long faults(int all)
{
    struct rusage ru;
    if (getrusage(all ? RUSAGE_SELF : RUSAGE_THREAD, &ru) != 0)
        return -1;
    return ru.ru_minflt + ru.ru_majflt;
}

/* One case: WARM calls, a barrier, CALLS counted; 1 when it failed (printed). */
static int run_case(chorusComm_t comm, enum coll c, size_t nbytes, int inplace, int kind,
                    float *send, float *recv)
{
    size_t per = nbytes / sizeof(float);
    size_t count = (c == AG || c == RS || c == A2A) ? per / (size_t)nranks
                   : c == GROUP2                    ? per / 2
                                                    : per;
    if (count == 0)
        return 0;
    long n_allocs = 0, n_maps = 0, n_faults = 0;
    int root = 0, bad_call = 0;
    /* Rooted calls warm up with every root: a peer reads a root's chorusMemAlloc input in
     * place, and maps it (and faults its pages in) the first time it reads it. */
    int warm = (c == BC || c == RED) && nranks > WARM ? nranks : WARM;
    for (int i = 0; i < warm + CALLS; i++) {
        if (i == warm)
            MPI_Barrier(MPI_COMM_WORLD);
        root = (c == BC || c == RED) ? i % nranks : 0;
        prepare(c, inplace, send, recv, count, root);
        /* A host stream's calls run on its worker: counted on every thread. */
        int all = c == STREAM_AR;
        long f0 = faults(all);
        long a0 = all ? allocs_all : allocs, m0 = all ? maps_all : maps;
        armed = 1;
        __atomic_store_n(&armed_all, all, __ATOMIC_RELAXED);
        chorusResult_t res = call(c, inplace, send, recv, count, root, comm);
        __atomic_store_n(&armed_all, 0, __ATOMIC_RELAXED);
        armed = 0;
        long f1 = faults(all);
        long a1 = all ? allocs_all : allocs, m1 = all ? maps_all : maps;
        if (res != chorusSuccess) {
            FAIL("rank %d: %s of %zu B: %s: %s", me, coll_names[c], nbytes,
                 chorusGetErrorString(res), chorusGetLastError(comm));
            return 1;
        }
        if (i >= warm) {
            n_allocs += a1 - a0;
            n_maps += m1 - m0;
            n_faults += f1 - f0;
            if (bad_call == 0 && (a1 != a0 || m1 != m0 || f1 != f0))
                bad_call = i - warm + 1;
        }
    }
    const char *where = kind ? "chorusMemAlloc" : "malloc";
    const char *how = inplace ? "in place" : "out of place";
    int failed = 0;
    if (n_allocs || n_maps || n_faults) {
        FAIL("rank %d of %d: %s of %zu B, %s, %s buffers: %ld allocations, %ld mmap/munmap, "
             "%ld page faults in %d calls after %d (first in call %d)",
             me, nranks, coll_names[c], nbytes, how, where, n_allocs, n_maps, n_faults, CALLS, warm,
             bad_call);
        failed = 1;
    }
    float want = 0;
    long long at = first_wrong(c, inplace, send, recv, count, root, &want);
    if (at >= 0) {
        FAIL("rank %d: %s of %zu B, %s, %s buffers: element %lld is %g, want %g", me, coll_names[c],
             nbytes, how, where, at,
             (double)((c == RS && inplace) ? send[(size_t)me * count + (size_t)at] : recv[at]),
             (double)want);
        failed = 1;
    }
    return failed;
}
#endif

#ifndef HOTPATH_SANITIZED
/* Writes 256 KiB of this thread's stack, as a running application has: a call that first runs
 * deeper than the calls before it (a slow wait's checks) then faults no new stack page in. The
 * library's own threads touch theirs (stream.c). */
static __attribute__((noinline)) void touch_stack(void)
{
    volatile char pad[256 * 1024];
    for (size_t i = 0; i < sizeof(pad); i += 4096)
        pad[i] = 0;
    pad[sizeof(pad) - 1] = 0;
}
#endif

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    setvbuf(stdout, NULL, _IOLBF, 0);
#ifdef HOTPATH_SANITIZED
    if (me == 0)
        printf("SKIP: test_hotpath: a sanitizer build; allocations are counted by replacing "
               "malloc, which the sanitizer's allocator must be\n");
    MPI_Finalize();
    return 77;
#else
    if (nranks < 2) {
        if (me == 0)
            printf("FAIL test_hotpath: run it with mpirun -np N, N >= 2\n");
        MPI_Finalize();
        return 1;
    }
    touch_stack();
    chorusComm_t comm = NULL;
    CHECK_OK(chorusCommInitMPI(&comm, MPI_COMM_WORLD));
    CHECK_OK(chorusStreamCreate(&stream));
    float *bufs[2][2] = {{NULL, NULL}, {NULL, NULL}};
    int ok = comm != NULL && stream != NULL;
    for (int b = 0; b < 2 && ok; b++) {
        ok = ok && posix_memalign((void **)&bufs[0][b], 4096, MAXBYTES) == 0;
        CHECK_OK(chorusMemAlloc((void **)&bufs[1][b], MAXBYTES));
        ok = ok && bufs[0][b] != NULL && bufs[1][b] != NULL;
        if (ok) {
            memset(bufs[0][b], 0, MAXBYTES);
            memset(bufs[1][b], 0, MAXBYTES);
        }
    }
    int ncases = 0, nfailed = 0;
    for (int c = 0; c < NCOLL && ok; c++)
        for (size_t s = 0; s < NSIZES; s++)
            for (int kind = 0; kind < 2; kind++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    if (c == SENDRECV && inplace)
                        continue;
                    ncases++;
                    nfailed += run_case(comm, (enum coll)c, sizes[s], inplace, kind, bufs[kind][0],
                                        bufs[kind][1]);
                }
    for (int b = 0; b < 2; b++) {
        free(bufs[0][b]);
        if (bufs[1][b] != NULL)
            CHECK_OK(chorusMemFree(bufs[1][b]));
    }
    if (stream != NULL)
        CHECK_OK(chorusStreamDestroy(stream));
    if (comm != NULL)
        CHECK_OK(chorusCommDestroy(comm));
    long total = 0;
    MPI_Allreduce(&harness_failures, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0)
        printf(
            "%s test_hotpath: %d cases (9 kinds of call, 64 B-32 MiB, malloc and chorusMemAlloc, "
            "in and out of place) x %d calls after %d on %d MPI ranks: no allocation, mapping "
            "or page fault on the calling thread (the process for the host stream), outputs "
            "exact (%d cases failed on rank 0; %ld failures in all)\n",
            total ? "FAIL" : "PASS", ncases, CALLS, WARM, nranks, nfailed, total);
    MPI_Finalize();
    return total ? 1 : 0;
#endif
}
