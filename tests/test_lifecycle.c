/*
 * test_lifecycle.c: proves a communicator's life from init to destroy or abort leaves nothing.
 *
 * 1. 50 x (chorusCommInitAll of 4 thread ranks, a grouped all-reduce and a grouped send ring
 *    issued by one thread, destroy): afterwards the process has as many open file descriptors
 *    and threads as before (waited for with a deadline: the rendezvous root thread exits on its
 *    own), and no /dev/shm/chorus-<pid>-* segment is left.
 * 2. chorusCommAbort from another thread while rank 0 is blocked in an all-reduce that rank 1
 *    never joins: Abort returns in bounded time, the all-reduce returns an error; the same with
 *    calls queued on a host stream. To know the all-reduce is in flight (and only then abort,
 *    since the handle is freed by Abort) the test reads the communicator's count of running
 *    operations from the internal header comm.h: the public API cannot tell.
 * 3. chorusCommFinalize waits for calls queued on host streams: their results are complete when
 *    it returns, without chorusStreamSynchronize.
 * 4. chorusGetVersion is CHORUS_VERSION_CODE; chorusGetErrorString is non-empty and distinct for
 *    every code (and non-empty for an unknown one); chorusCommCount/UserRank/CuDevice give n, the
 *    rank and -1; chorusCommTuningInfo names an algorithm and a positive time, and refuses an
 *    unknown collective and a count whose bytes overflow; NULL outputs and a NULL comm are
 *    chorusInvalidArgument (Destroy/Abort of NULL may also be a no-op, as in NCCL); a 1-rank
 *    communicator runs every collective as a copy.
 * 5. The exec lock (fifo_excl_t) keeps a plain counter exact under four threads and a holder
 *    that makes the others sleep; four threads calling one communicator at once: every call
 *    right, each counted once.
 * 6. NCCL's one-thread pattern: chorusCommInitRank of ranks 0-2 of one id inside one group (one
 *    with a config) each return at once with a NULL handle, and chorusGroupEnd makes all three
 *    (before, the first init waited its whole deadline for ranks its thread had yet to start);
 *    a collective on such a handle inside the group is refused, saying it exists only after
 *    chorusGroupEnd; a grouped all-reduce over them is right; chorusCommSplit of the three inside
 *    a group likewise (sizes and ranks right); destroying or finalizing a communicator the open
 *    group holds a split or a call on is refused; a bad id is refused at once inside a group; a
 *    group whose init fails (rank 0 of 2 alone, deadline 300 ms) returns the error from
 *    chorusGroupEnd naming the init, the handle NULL.
 * 7. chorusCommInitAll of 1000 ranks in a child whose address space is capped near its size
 *    (RLIMIT_AS), CHORUS_TIMEOUT_MS 20000: it cannot start every thread and fails at once
 *    (within 10 s) with chorusSystemError naming the rank whose thread it could not start; the
 *    threads it had started waited out the deadline for the rest before. Not under a sanitizer.
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chorus.h"
#include "comm.h" /* comm_calls_running (abort) and the collective counts (5) */
#include "harness.h"

static int count_fds(void)
{
    return harness_count_dir("/proc/self/fd", 1);
}

static int count_threads(void)
{
    return harness_count_dir("/proc/self/task", 0);
}

/* /dev/shm entries of this process (shm.c names them chorus-<pid>-...). */
static int count_shm(void)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "chorus-%d-", (int)getpid());
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

/* Wait (deadline 10 s, 10 ms polls) until only want threads are left; returns the count. */
static int wait_threads(int want)
{
    double deadline = harness_now_s() + 10;
    int n;
    while ((n = count_threads()) > want && harness_now_s() < deadline) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return n;
}

/* ---- 1. init/destroy loop ---- */

static void one_job(int n, int iter)
{
    chorusComm_t comms[8];
    chorusResult_t res = chorusCommInitAll(comms, n, NULL);
    if (res != chorusSuccess) {
        FAIL("iteration %d: chorusCommInitAll: %s: %s", iter, chorusGetErrorString(res),
             chorusGetLastError(NULL));
        return;
    }
    enum { COUNT = 4099 };
    static int32_t in[8][COUNT], out[8][COUNT], ring[8][COUNT];
    for (int r = 0; r < n; r++)
        for (int i = 0; i < COUNT; i++)
            in[r][i] = r * COUNT + i + iter;
    CHECK_OK(chorusGroupStart());
    for (int r = 0; r < n; r++)
        CHECK_OK(chorusAllReduce(in[r], out[r], COUNT, chorusInt32, chorusSum, comms[r], NULL));
    CHECK_OK(chorusGroupEnd());
    CHECK_OK(chorusGroupStart());
    for (int r = 0; r < n; r++) {
        CHECK_OK(chorusSend(in[r], COUNT, chorusInt32, (r + 1) % n, comms[r], NULL));
        CHECK_OK(chorusRecv(ring[r], COUNT, chorusInt32, (r - 1 + n) % n, comms[r], NULL));
    }
    CHECK_OK(chorusGroupEnd());
    for (int r = 0; r < n; r++) {
        int prev = (r - 1 + n) % n;
        for (int i = 0; i < COUNT; i++) {
            int32_t want = (int32_t)(COUNT * n * (n - 1) / 2 + n * (i + iter));
            if (out[r][i] != want || ring[r][i] != prev * COUNT + i + iter) {
                FAIL("iteration %d rank %d element %d: all-reduce %d (want %d), ring %d", iter, r,
                     i, out[r][i], want, ring[r][i]);
                break;
            }
        }
    }
    harness_destroy_all(comms, n);
}

static void *noop_thread(void *arg)
{
    return arg;
}

static void init_destroy_loop(void)
{
    long before = harness_failures;
    /* ThreadSanitizer's runtime starts a helper thread of its own at the process's first
     * pthread_create and keeps it: start and join one thread first, so that the baseline counts
     * it and every thread the library leaves behind, even once per process, still fails. */
    pthread_t t;
    if (pthread_create(&t, NULL, noop_thread, NULL) == 0)
        pthread_join(t, NULL);
    int threads0 = count_threads();
    one_job(4, -1); /* warm-up: anything allocated once per process happens here */
    wait_threads(threads0);
    int fds0 = count_fds(), shm0 = count_shm();
    enum { ITERS = 50 };
    for (int it = 0; it < ITERS; it++)
        one_job(4, it);
    int threads1 = wait_threads(threads0);
    int fds1 = count_fds(), shm1 = count_shm();
    if (threads1 != threads0)
        FAIL("%d threads before the loop, %d after", threads0, threads1);
    if (fds1 != fds0)
        FAIL("%d open file descriptors before the loop, %d after", fds0, fds1);
    if (shm0 != 0 || shm1 != 0)
        FAIL("/dev/shm/chorus-%d-* entries: %d before the loop, %d after", (int)getpid(), shm0,
             shm1);
    harness_report(before,
                   "%d x (init 4 thread ranks, group all-reduce, group send ring, "
                   "destroy): %d fds, %d threads and %d /dev/shm/chorus-%d-* entries "
                   "before and after",
                   ITERS, fds1, threads1, shm1, (int)getpid());
}

/* ---- 2. abort ---- */

static int comm_queued(chorusComm_t comm)
{
    return comm_calls_running(comm);
}

typedef struct blocked {
    chorusComm_t comm;
    chorusStream_t stream; /* NULL: blocking call */
    chorusResult_t res;
    float *buf;
} blocked_t;

static void *blocked_thread(void *p)
{
    blocked_t *b = p;
    b->res = chorusAllReduce(b->buf, b->buf, 1 << 20, chorusFloat32, chorusSum, b->comm, NULL);
    return NULL;
}

/* The same all-reduce issued inside a group (chorusGroupEnd runs it and waits for it). */
static void *blocked_group_thread(void *p)
{
    blocked_t *b = p;
    chorusResult_t res = chorusGroupStart();
    if (res == chorusSuccess)
        res = chorusAllReduce(b->buf, b->buf, 1 << 20, chorusFloat32, chorusSum, b->comm, NULL);
    chorusResult_t end = chorusGroupEnd();
    b->res = res != chorusSuccess ? res : end;
    return NULL;
}

/* Wait (deadline 10 s) until comm has at least want operations queued or running. */
static int wait_queued(chorusComm_t comm, int want)
{
    double deadline = harness_now_s() + 10;
    while (comm_queued(comm) < want) {
        if (harness_now_s() > deadline)
            return 0;
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 1;
}

/* Rank 0 of a fresh 2-rank communicator blocks in an all-reduce (in a group when grouped) that
 * rank 1 never joins; this thread aborts rank 0 once the call is running. */
static void abort_one(int grouped, int verbose)
{
    chorusComm_t comms[2];
    chorusResult_t res = chorusCommInitAll(comms, 2, NULL);
    if (res != chorusSuccess) {
        FAIL("chorusCommInitAll: %s: %s", chorusGetErrorString(res), chorusGetLastError(NULL));
        return;
    }
    blocked_t b = {comms[0], NULL, chorusSuccess, calloc(1 << 20, sizeof(float))};
    pthread_t t;
    pthread_create(&t, NULL, grouped ? blocked_group_thread : blocked_thread, &b);
    if (!wait_queued(comms[0], 1)) {
        FAIL("the all-reduce did not start within 10 s");
        pthread_join(t, NULL);
        return;
    }
    double t0 = harness_now_s();
    CHECK_OK(chorusCommAbort(comms[0]));
    double dt = harness_now_s() - t0;
    pthread_join(t, NULL);
    double dj = harness_now_s() - t0;
    if (b.res == chorusSuccess)
        FAIL("the %sall-reduce rank 1 never joined returned success after the abort",
             grouped ? "grouped " : "");
    if (dt > 10.0 || dj > 10.0) /* a hang check, not a performance bound */
        FAIL("chorusCommAbort took %.2f s, the all-reduce returned after %.2f s", dt, dj);
    if (verbose)
        printf("     abort of a blocked %sall-reduce: Abort returned after %.3f s, the call "
               "after %.3f s with %s\n",
               grouped ? "grouped " : "", dt, dj, chorusGetErrorString(b.res));
    CHECK_OK(chorusCommDestroy(comms[1]));
    free(b.buf);
}

static void abort_blocked(void)
{
    long before = harness_failures;
    chorusComm_t comms[2];
    double t0, dt;
    /* Repeated: the call's thread returns while Abort frees the communicator, a race that a
     * sanitizer build (lifecycle_asan) sees only when it happens. */
    for (int k = 0; k < 10; k++) {
        abort_one(0, k == 0);
        abort_one(1, k == 0);
    }

    /* Calls queued on a host stream that rank 1 never joins. */
    if (chorusCommInitAll(comms, 2, NULL) != chorusSuccess) {
        FAIL("chorusCommInitAll: %s", chorusGetLastError(NULL));
        return;
    }
    chorusStream_t s = NULL;
    CHECK_OK(chorusStreamCreate(&s));
    float *bufs[5];
    for (int k = 0; k < 5; k++) {
        bufs[k] = calloc(1 << 18, sizeof(float));
        CHECK_OK(chorusAllReduce(bufs[k], bufs[k], 1 << 18, chorusFloat32, chorusSum, comms[0], s));
    }
    if (!wait_queued(comms[0], 1))
        FAIL("the queued all-reduces are not counted as running");
    t0 = harness_now_s();
    CHECK_OK(chorusCommAbort(comms[0]));
    dt = harness_now_s() - t0;
    chorusResult_t sync = chorusStreamSynchronize(s);
    if (sync == chorusSuccess)
        FAIL("chorusStreamSynchronize after aborting its communicator returned success");
    if (dt > 10.0)
        FAIL("chorusCommAbort with 5 queued calls took %.2f s", dt);
    printf("     abort with 5 calls queued on a stream: Abort returned after %.3f s; "
           "chorusStreamSynchronize: %s\n",
           dt, chorusGetErrorString(sync));
    CHECK_OK(chorusStreamDestroy(s));
    CHECK_OK(chorusCommDestroy(comms[1]));
    for (int k = 0; k < 5; k++)
        free(bufs[k]);
    harness_report(before, "chorusCommAbort from another thread stops a blocked all-reduce (10x "
                           "plain, 10x in a group) and queued stream calls in bounded time");
}

/* ---- 3. finalize ---- */

static void fin_rank(chorusComm_t comm, int rank, int n)
{
    enum { CALLS = 20, COUNT = 10007 };
    chorusStream_t s = NULL;
    CHECK_OK(chorusStreamCreate(&s));
    int64_t *bufs[CALLS];
    for (int k = 0; k < CALLS; k++) {
        bufs[k] = malloc(COUNT * sizeof(int64_t));
        for (int i = 0; i < COUNT; i++)
            bufs[k][i] = (int64_t)rank * k + i;
        CHECK_OK(chorusAllReduce(bufs[k], bufs[k], COUNT, chorusInt64, chorusSum, comm, s));
    }
    CHECK_OK(chorusCommFinalize(comm));
    int64_t tri = (int64_t)n * (n - 1) / 2;
    for (int k = 0; k < CALLS; k++) {
        for (int i = 0; i < COUNT; i++)
            if (bufs[k][i] != tri * k + (int64_t)n * i) {
                FAIL("rank %d: all-reduce #%d queued before chorusCommFinalize: element %d is "
                     "%lld, want %lld",
                     rank, k, i, (long long)bufs[k][i], (long long)(tri * k + (int64_t)n * i));
                break;
            }
        free(bufs[k]);
    }
    CHECK_OK(chorusStreamDestroy(s));
}

static void finalize(void)
{
    long before = harness_failures;
    enum { N = 3 };
    chorusComm_t comms[N];
    if (harness_init_all(comms, N) == 0 && harness_run_ranks(comms, N, fin_rank) == 0)
        harness_destroy_all(comms, N);
    harness_report(before, "chorusCommFinalize returns after every call queued on host streams "
                           "finished");
}

/* ---- 5. one communicator, several threads ---- */

enum { SHARED_THREADS = 4, SHARED_CALLS = 20000 };

typedef struct shared_caller {
    chorusComm_t comm;
    int id, bad;
} shared_caller_t;

static void *shared_thread(void *arg)
{
    shared_caller_t *c = arg;
    for (int i = 0; i < SHARED_CALLS && c->bad == 0; i++) {
        int32_t in[2] = {c->id * SHARED_CALLS + i, -i}, out[2] = {0, 0};
        if (chorusAllReduce(in, out, 2, chorusInt32, chorusSum, c->comm, NULL) != chorusSuccess ||
            out[0] != in[0] || out[1] != in[1])
            c->bad = i + 1;
    }
    return NULL;
}

typedef struct excl_user {
    fifo_excl_t *lock;
    pthread_barrier_t *start;
    long *count;
    int hold_ms; /* > 0: take the lock once and hold it this long (a waiter must sleep) */
} excl_user_t;

static void *excl_thread(void *arg)
{
    excl_user_t *u = arg;
    pthread_barrier_wait(u->start);
    if (u->hold_ms > 0) {
        fifo_excl_lock(u->lock);
        struct timespec ts = {0, u->hold_ms * 1000000L};
        nanosleep(&ts, NULL);
        (*u->count)++;
        fifo_excl_unlock(u->lock);
        return NULL;
    }
    for (int i = 0; i < SHARED_CALLS * 5; i++) {
        fifo_excl_lock(u->lock);
        long v = *(volatile long *)u->count; /* a plain read and write: only the lock orders them */
        *(volatile long *)u->count = v + 1;
        fifo_excl_unlock(u->lock);
    }
    return NULL;
}

/* The exec lock itself (fifo_excl_t): threads adding to a plain counter under it lose nothing,
 * also while one of them holds it 50 ms at a time (the others sleep on the futex and are woken). */
static void excl_lock(void)
{
    long before = harness_failures, count = 0;
    fifo_excl_t lock = {0, 0};
    pthread_t t[SHARED_THREADS + 1];
    excl_user_t u[SHARED_THREADS + 1];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, SHARED_THREADS + 1);
    for (int k = 0; k <= SHARED_THREADS; k++) {
        u[k] = (excl_user_t){&lock, &start, &count, k == SHARED_THREADS ? 50 : 0};
        pthread_create(&t[k], NULL, excl_thread, &u[k]);
    }
    for (int k = 0; k <= SHARED_THREADS; k++)
        pthread_join(t[k], NULL);
    pthread_barrier_destroy(&start);
    long want = (long)SHARED_THREADS * SHARED_CALLS * 5 + 1;
    if (count != want)
        FAIL("fifo_excl_t: %ld increments under the lock, want %ld", count, want);
    if (lock.held != 0 || lock.waiters != 0)
        FAIL("fifo_excl_t left held %u, waiters %u", lock.held, lock.waiters);
    harness_report(before,
                   "fifo_excl_t: %d threads x %d increments of a plain counter, and one "
                   "holder of 50 ms, lose nothing",
                   SHARED_THREADS, SHARED_CALLS * 5);
}

/* Calls on one communicator from several threads (one at a time under the exec lock): every call
 * succeeds with its own result, and the communicator counted each collective once. */
static void shared_comm(void)
{
    long before = harness_failures;
    chorusComm_t comm;
    chorusResult_t res = chorusCommInitAll(&comm, 1, NULL);
    if (res != chorusSuccess) {
        FAIL("chorusCommInitAll(1): %s: %s", chorusGetErrorString(res), chorusGetLastError(NULL));
        return;
    }
    pthread_t t[SHARED_THREADS];
    shared_caller_t c[SHARED_THREADS];
    for (int k = 0; k < SHARED_THREADS; k++) {
        c[k] = (shared_caller_t){comm, k, 0};
        pthread_create(&t[k], NULL, shared_thread, &c[k]);
    }
    for (int k = 0; k < SHARED_THREADS; k++) {
        pthread_join(t[k], NULL);
        if (c[k].bad)
            FAIL("thread %d: call %d failed or gave a wrong result", k, c[k].bad - 1);
    }
    uint64_t entered = __atomic_load_n(&comm->coll_entered, __ATOMIC_ACQUIRE);
    uint64_t completed = __atomic_load_n(&comm->coll_completed, __ATOMIC_ACQUIRE);
    if (entered != (uint64_t)SHARED_THREADS * SHARED_CALLS || completed != entered)
        FAIL("%d threads x %d all-reduces: the communicator counted %llu entered, %llu completed",
             SHARED_THREADS, SHARED_CALLS, (unsigned long long)entered,
             (unsigned long long)completed);
    CHECK_OK(chorusCommDestroy(comm));
    harness_report(before,
                   "%d threads x %d all-reduces on one communicator: each right, each "
                   "counted once",
                   SHARED_THREADS, SHARED_CALLS);
}

/* ---- 4. queries ---- */

static void queries(void)
{
    long before = harness_failures;
    int version = -1;
    CHECK_OK(chorusGetVersion(&version));
    if (version != CHORUS_VERSION_CODE)
        FAIL("chorusGetVersion gives %d, want %d", version, CHORUS_VERSION_CODE);
    CHECK_RES(chorusGetVersion(NULL), chorusInvalidArgument);
    for (int c = 0; c <= chorusNumResults; c++) {
        const char *s = chorusGetErrorString((chorusResult_t)c);
        if (s == NULL || s[0] == '\0') {
            FAIL("chorusGetErrorString(%d) is empty", c);
            continue;
        }
        for (int d = 0; d < c && c < chorusNumResults; d++)
            if (strcmp(s, chorusGetErrorString((chorusResult_t)d)) == 0)
                FAIL("chorusGetErrorString(%d) equals chorusGetErrorString(%d): \"%s\"", c, d, s);
    }
    const char *unknown = chorusGetErrorString((chorusResult_t)42);
    if (unknown == NULL || unknown[0] == '\0')
        FAIL("chorusGetErrorString(42) is empty");

    enum { N = 3 };
    chorusComm_t comms[N];
    CHECK_OK(chorusCommInitAll(comms, N, NULL));
    for (int r = 0; r < N; r++) {
        int count = -5, rank = -5, dev = -5;
        CHECK_OK(chorusCommCount(comms[r], &count));
        CHECK_OK(chorusCommUserRank(comms[r], &rank));
        CHECK_OK(chorusCommCuDevice(comms[r], &dev));
        if (count != N || rank != r || dev != -1)
            FAIL("comm %d: count %d rank %d device %d, want %d %d -1", r, count, rank, dev, N, r);
        chorusResult_t async = chorusInternalError;
        CHECK_OK(chorusCommGetAsyncError(comms[r], &async));
        if (async != chorusSuccess)
            FAIL("comm %d: async error %d on a fresh communicator", r, (int)async);
    }
    int x;
    CHECK_RES(chorusCommCount(comms[0], NULL), chorusInvalidArgument);
    CHECK_RES(chorusCommUserRank(comms[0], NULL), chorusInvalidArgument);
    CHECK_RES(chorusCommCuDevice(comms[0], NULL), chorusInvalidArgument);
    CHECK_RES(chorusCommGetAsyncError(comms[0], NULL), chorusInvalidArgument);
    CHECK_RES(chorusCommCount(NULL, &x), chorusInvalidArgument);
    CHECK_RES(chorusCommUserRank(NULL, &x), chorusInvalidArgument);
    CHECK_RES(chorusCommCuDevice(NULL, &x), chorusInvalidArgument);
    CHECK_RES(chorusCommFinalize(NULL), chorusInvalidArgument);
    const char *algo = NULL;
    double us = -1;
    CHECK_OK(chorusCommTuningInfo(comms[0], "allreduce", 1024, chorusFloat32, &algo, &us));
    if (algo == NULL || algo[0] == '\0' || !(us > 0))
        FAIL("chorusCommTuningInfo: algo %s, predicted %g us", algo ? algo : "(null)", us);
    CHECK_RES(chorusCommTuningInfo(comms[0], "allsum", 1024, chorusFloat32, &algo, &us),
              chorusInvalidArgument);
    harness_expect_refused(
        "chorusCommTuningInfo with count SIZE_MAX / 2 floats",
        chorusCommTuningInfo(comms[0], "allreduce", SIZE_MAX / 2, chorusFloat32, &algo, &us),
        chorusInvalidArgument, chorusGetLastError(comms[0]), "count", "overflows");
    /* NCCL accepts a NULL comm in Destroy/Abort as a no-op; refusing it is fine too. */
    chorusResult_t rd = chorusCommDestroy(NULL), ra = chorusCommAbort(NULL);
    if ((rd != chorusSuccess && rd != chorusInvalidArgument) ||
        (ra != chorusSuccess && ra != chorusInvalidArgument))
        FAIL("chorusCommDestroy(NULL) / chorusCommAbort(NULL) returned %d / %d", (int)rd, (int)ra);
    harness_destroy_all(comms, N);

    /* One rank: every collective is a copy (or the identity in place). */
    chorusComm_t one;
    CHECK_OK(chorusCommInitAll(&one, 1, NULL));
    enum { COUNT = 1031 };
    int32_t in[COUNT], out[6][COUNT];
    for (int i = 0; i < COUNT; i++)
        in[i] = i * 3 - 500;
    memset(out, 0, sizeof(out));
    CHECK_OK(chorusAllReduce(in, out[0], COUNT, chorusInt32, chorusProd, one, NULL));
    CHECK_OK(chorusBroadcast(in, out[1], COUNT, chorusInt32, 0, one, NULL));
    CHECK_OK(chorusReduce(in, out[2], COUNT, chorusInt32, chorusMin, 0, one, NULL));
    CHECK_OK(chorusAllGather(in, out[3], COUNT, chorusInt32, one, NULL));
    CHECK_OK(chorusReduceScatter(in, out[4], COUNT, chorusInt32, chorusSum, one, NULL));
    CHECK_OK(chorusAlltoAll(in, out[5], COUNT, chorusInt32, one, NULL));
    for (int k = 0; k < 6; k++)
        if (memcmp(in, out[k], sizeof(in)) != 0)
            FAIL("1-rank collective #%d is not a copy", k);
    int32_t self[COUNT];
    CHECK_OK(chorusGroupStart());
    CHECK_OK(chorusSend(in, COUNT, chorusInt32, 0, one, NULL));
    CHECK_OK(chorusRecv(self, COUNT, chorusInt32, 0, one, NULL));
    CHECK_OK(chorusGroupEnd());
    if (memcmp(in, self, sizeof(in)) != 0)
        FAIL("1-rank self send/recv is not a copy");
    CHECK_OK(chorusCommDestroy(one));
    harness_report(before, "chorusGetVersion, chorusGetErrorString for every code, "
                           "Count/UserRank/CuDevice(-1), TuningInfo (a name, an overflowing count "
                           "refused), NULL arguments refused, 1-rank collectives are copies");
}

/* ---- 6. initializations inside a group ---- */

static void group_inits(void)
{
    long before = harness_failures;
    enum { N = 3, COUNT = 1000 };
    chorusComm_t comms[N] = {NULL, NULL, NULL};
    chorusUniqueId id;
    CHECK_OK(chorusGetUniqueId(&id));
    chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
    cfg.timeoutMs = 5000; /* an init that waits for the others fails in 5 s, not 10 minutes */
    CHECK_OK(chorusGroupStart());
    for (int r = 0; r < N; r++) {
        comms[r] = (chorusComm_t)(uintptr_t)1; /* a NULL handle must come back */
        chorusResult_t res = chorusCommInitRankConfig(&comms[r], N, id, r, &cfg);
        if (res != chorusSuccess || comms[r] != NULL)
            FAIL("chorusCommInitRank of rank %d inside a group: %d, handle %p (want success, "
                 "NULL until chorusGroupEnd): %s",
                 r, (int)res, (void *)comms[r], chorusGetLastError(NULL));
    }
    float x = 1, y = 0;
    harness_expect_refused("an all-reduce on a handle its group initializes",
                           chorusAllReduce(&x, &y, 1, chorusFloat32, chorusSum, comms[0], NULL),
                           chorusInvalidArgument, chorusGetLastError(NULL), "NULL",
                           "chorusGroupEnd");
    CHECK_OK(chorusGroupEnd());
    int ok = 1;
    for (int r = 0; r < N; r++) {
        int rank = -1, count = -1;
        ok &= comms[r] != NULL && chorusCommUserRank(comms[r], &rank) == chorusSuccess &&
              chorusCommCount(comms[r], &count) == chorusSuccess && rank == r && count == N;
    }
    if (!ok)
        FAIL("the group's inits did not make ranks 0-%d of %d", N - 1, N);
    /* One thread drives all three: a grouped all-reduce, then splits in a group. */
    float in[N][COUNT], out[N][COUNT];
    for (int r = 0; ok && r < N; r++)
        for (int i = 0; i < COUNT; i++)
            in[r][i] = (float)(r * 1000 + i);
    CHECK_OK(chorusGroupStart());
    for (int r = 0; ok && r < N; r++)
        CHECK_OK(chorusAllReduce(in[r], out[r], COUNT, chorusFloat32, chorusSum, comms[r], NULL));
    CHECK_OK(chorusGroupEnd());
    for (int r = 0; ok && r < N; r++)
        for (int i = 0; i < COUNT; i++)
            if (out[r][i] != (float)(3000 + 3 * i)) {
                FAIL("rank %d: the grouped all-reduce's element %d is %g, want %g", r, i,
                     (double)out[r][i], (double)(3000 + 3 * i));
                break;
            }
    chorusComm_t halves[N] = {NULL, NULL, NULL};
    CHECK_OK(chorusGroupStart());
    for (int r = 0; ok && r < N; r++)
        CHECK_OK(chorusCommSplit(comms[r], r % 2, -r, &halves[r], NULL));
    harness_expect_refused("destroying a communicator the open group splits",
                           chorusCommDestroy(comms[0]), chorusInvalidUsage,
                           chorusGetLastError(NULL), "open group", "chorusGroupEnd");
    CHECK_OK(chorusGroupEnd());
    for (int r = 0; ok && r < N; r++) {
        int rank = -1, count = -1, want_count = r % 2 ? 1 : 2, want_rank = r == 0 ? 1 : 0;
        if (halves[r] == NULL || chorusCommUserRank(halves[r], &rank) != chorusSuccess ||
            chorusCommCount(halves[r], &count) != chorusSuccess || rank != want_rank ||
            count != want_count)
            FAIL("split in a group: parent rank %d got rank %d of %d, want %d of %d", r, rank,
                 count, want_rank, want_count);
    }
    for (int r = 0; r < N; r++)
        if (halves[r] != NULL)
            CHECK_OK(chorusCommDestroy(halves[r]));
    CHECK_OK(chorusGroupStart());
    float ys[N] = {0, 0, 0}; /* one output a rank: the group runs them at once */
    CHECK_OK(chorusAllReduce(&x, &ys[0], 1, chorusFloat32, chorusSum, comms[0], NULL));
    harness_expect_refused("finalizing a communicator the open group holds a call on",
                           chorusCommFinalize(comms[0]), chorusInvalidUsage,
                           chorusGetLastError(comms[0]), "open group", "chorusGroupEnd");
    for (int r = 1; r < N; r++)
        CHECK_OK(chorusAllReduce(&x, &ys[r], 1, chorusFloat32, chorusSum, comms[r], NULL));
    CHECK_OK(chorusGroupEnd());
    for (int r = 0; r < N; r++)
        if (ys[r] != (float)N)
            FAIL("rank %d: the grouped all-reduce after the refused finalize gave %g, want %d", r,
                 (double)ys[r], N);
    for (int r = 0; r < N; r++)
        if (comms[r] != NULL)
            CHECK_OK(chorusCommDestroy(comms[r]));

    /* A bad id inside a group: refused at once. An init that fails: at chorusGroupEnd. */
    chorusUniqueId bad;
    memset(&bad, 0x5a, sizeof(bad));
    chorusComm_t lone = NULL;
    CHECK_OK(chorusGroupStart());
    harness_expect_refused("an init inside a group with a bad id",
                           chorusCommInitRank(&lone, 2, bad, 0), chorusInvalidArgument,
                           chorusGetLastError(NULL), "commId", "magic");
    CHECK_OK(chorusGetUniqueId(&id));
    cfg.timeoutMs = 300;
    CHECK_OK(chorusCommInitRankConfig(&lone, 2, id, 0, &cfg));
    chorusResult_t res = chorusGroupEnd();
    if (res == chorusSuccess || lone != NULL)
        FAIL("a group whose init of rank 0 of 2 could not finish: chorusGroupEnd %d, handle %p",
             (int)res, (void *)lone);
    else if (strstr(chorusGetLastError(NULL), "chorusCommInitRank of rank 0 of 2") == NULL)
        FAIL("chorusGroupEnd's error does not name the init: %s", chorusGetLastError(NULL));
    harness_report(before, "one thread initializes 3 ranks inside a group, splits them in a "
                           "group, and runs a grouped all-reduce over them; handles NULL until "
                           "chorusGroupEnd; destroy and finalize of held communicators and a bad "
                           "id refused; a failed init reported by chorusGroupEnd");
}

/* ---- 7. chorusCommInitAll that cannot start every thread ---- */

static void initall_no_threads(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    printf("     (part 7 left out under a sanitizer: its allocator cannot live under "
           "RLIMIT_AS)\n");
#else
    long before = harness_failures;
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        FAIL("pipe");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f == NULL || fscanf(f, "%ld", &pages) != 1)
            _exit(3);
        fclose(f);
        struct rlimit lim = {(rlim_t)pages * 4096 + (512u << 20), RLIM_INFINITY};
        lim.rlim_max = lim.rlim_cur;
        setrlimit(RLIMIT_AS, &lim);
        setenv("CHORUS_TIMEOUT_MS", "20000", 1);
        static chorusComm_t many[1000];
        double t0 = harness_now_s();
        chorusResult_t res = chorusCommInitAll(many, 1000, NULL);
        char line[1200];
        snprintf(line, sizeof(line), "%d %.2f %s", (int)res, harness_now_s() - t0,
                 chorusGetLastError(NULL));
        if (write(pipefd[1], line, strlen(line)) < 0)
            _exit(4);
        _exit(0);
    }
    close(pipefd[1]);
    char line[1200] = "";
    size_t got = 0;
    ssize_t n;
    while (got < sizeof(line) - 1 && (n = read(pipefd[0], line + got, sizeof(line) - 1 - got)) > 0)
        got += (size_t)n;
    line[got] = '\0';
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int res = -1;
    double took = -1;
    if (sscanf(line, "%d %lf", &res, &took) != 2 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL("the child's InitAll did not report (status %d): %s", status, line);
    else if (res != chorusSystemError || took > 10.0 ||
             strstr(line, "cannot start the thread of rank") == NULL)
        FAIL("InitAll of 1000 ranks without room for their threads: %s", line);
    harness_report(before, "chorusCommInitAll that cannot start every thread fails at once "
                           "naming the rank (the started ones do not wait for the rest)");
#endif
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("test_lifecycle (pid %d)\n", (int)getpid());
    init_destroy_loop();
    abort_blocked();
    finalize();
    queries();
    excl_lock();
    shared_comm();
    group_inits();
    initall_no_threads();
    return harness_finish("test_lifecycle");
}
