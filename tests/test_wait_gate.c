/*
 * test_wait_gate.c: proves the gate of one-host waits (fifo_gate_t, direct_win.c) yields the core
 * exactly where that may let another rank move on, and that a gated wait still sleeps.
 *
 * 1. Decisions, on window headers made here (4 ranks, this thread pinned to one CPU, as rank 0):
 *    no other rank seen on this CPU: spin; a rank seen here and not parked (runnable): yield; a
 *    rank parked here whose awaited flag has not come: spin, and once it has: yield, unless it
 *    waits as far on as this rank or further (the same piece's flags, or a later kind: spin);
 *    the same rank on another CPU: spin; a torn record (a flag offset that is no flag): yield. park
 *    publishes this rank's CPU and what it waits on; unpark clears parked.
 * 2. A gated wait that lasts: two thread ranks, rank 1 joins an 8-byte all-reduce 300 ms late;
 *    rank 0's result is right, and its thread used under 60 ms of CPU meanwhile (it spins and
 *    yields for at most FIFO_YIELD_NS, then sleeps on the futex).
 * 3. The clock and CPU number the waits read without libc (fifo.c): fifo_cpu equals sched_getcpu
 *    on every CPU this thread can be pinned to, fifo_now_ns and fifo_coarse_now_ns agree with
 *    clock_gettime's clocks and never go back; the vDSO's clock is the one used wherever the
 *    process has a vDSO.
 * Exit 0: all passed; 1: a check failed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

#include "algo.h"
#include "chorus.h"
#include "harness.h"

#define NR 4

static direct_hdr_t *hdr_of(char *const *base, int r)
{
    return (direct_hdr_t *)(void *)base[r];
}

static void decisions(void)
{
    long before = harness_failures;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) {
        FAIL("cannot pin the test thread to CPU 0");
        return;
    }
    char *base[NR];
    for (int r = 0; r < NR; r++) {
        base[r] = aligned_alloc(4096, DIRECT_HDR_NBYTES);
        if (base[r] == NULL) {
            FAIL("out of memory");
            return;
        }
        memset(base[r], 0, DIRECT_HDR_NBYTES);
        hdr_of(base, r)->sched.cpu = -1;
    }
    uint64_t seq = 0, done_seen[NR] = {0};
    direct_done_t done = {0, 0};
    direct_gate_t g;
    direct_view_t v = {.nranks = NR,
                       .rank = 0,
                       .base = base,
                       .buf_nbytes = 0,
                       .seq = &seq,
                       .done_seen = done_seen,
                       .done = &done,
                       .gate = &g};
    direct_gate_init(&g, &v, 0);
    int (*useful)(void *) = g.gate.yield_useful;
    int cpu = sched_getcpu();
    CHECK(cpu == 0, "pinned to CPU 0, running on %d", cpu);

    CHECK(hdr_of(base, 0)->sched.cpu == -1, "direct_gate_init: own CPU %d, want -1",
          hdr_of(base, 0)->sched.cpu);
    CHECK(useful(g.gate.arg) == 0, "no other rank seen on this CPU, yet the gate yields");
    CHECK(hdr_of(base, 0)->sched.cpu == cpu, "the gate did not note this rank's CPU");

    direct_sched_t *o = &hdr_of(base, 2)->sched;
    o->cpu = cpu;
    o->parked = 0;
    CHECK(useful(g.gate.arg) == 1, "rank 2 is runnable on this CPU, yet the gate spins");

    /* This rank waits for rank 3's ready flag of piece 6; rank 2 for rank 1's of piece 5. */
    g.rank = 3;
    g.off = (uint32_t)(offsetof(direct_hdr_t, ready) + offsetof(fifo_flag_t, value));
    g.s = 6;
    o->rank = 1;
    o->off = (uint32_t)(offsetof(direct_hdr_t, ready) + sizeof(fifo_flag_t) +
                        offsetof(fifo_flag_t, value));
    o->s = 5;
    o->parked = 1;
    hdr_of(base, 1)->ready[1].value = 4;
    CHECK(useful(g.gate.arg) == 0,
          "rank 2 waits for a flag that has not come, yet the gate yields");
    hdr_of(base, 1)->ready[1].value = 5;
    CHECK(useful(g.gate.arg) == 1, "rank 2's flag has come, yet the gate spins");
    /* Rank 2 as far on as this rank (piece 6's ready flags) or further (piece 6's done flags):
     * moving on, it would only wait beside this one. Behind (piece 6's ready flag while this rank
     * waits for a done flag of piece 6): it may yet publish what this rank waits for. */
    uint32_t ready1 = o->off;
    o->s = 6;
    o->off = (uint32_t)(offsetof(direct_hdr_t, ready) + offsetof(fifo_flag_t, value));
    hdr_of(base, 1)->ready[0].value = 6;
    CHECK(useful(g.gate.arg) == 0, "rank 2 waits for piece 6's ready flags as this rank does, yet "
                                   "the gate yields");
    o->off = (uint32_t)(offsetof(direct_hdr_t, done) + offsetof(fifo_flag_t, value));
    hdr_of(base, 1)->done.value = 6;
    CHECK(useful(g.gate.arg) == 0,
          "rank 2 waits for piece 6's done flags, further on, yet the gate yields");
    g.off = (uint32_t)(offsetof(direct_hdr_t, done) + offsetof(fifo_flag_t, value));
    o->off = (uint32_t)(offsetof(direct_hdr_t, ready) + offsetof(fifo_flag_t, value));
    CHECK(useful(g.gate.arg) == 1, "rank 2 waits for piece 6's ready flag, behind this rank's done "
                                   "flag of piece 6, and it has come, yet the gate spins");
    g.off = (uint32_t)(offsetof(direct_hdr_t, ready) + offsetof(fifo_flag_t, value));
    o->s = 5;
    o->off = ready1;
    o->cpu = cpu + 1;
    CHECK(useful(g.gate.arg) == 0, "rank 2 is on another CPU, yet the gate yields");
    o->cpu = cpu;
    hdr_of(base, 1)->ready[1].value = 4;
    o->off += 4;
    CHECK(useful(g.gate.arg) == 1, "a torn record (no flag at its offset), yet the gate spins");
    o->off -= 4;
    o->rank = NR;
    CHECK(useful(g.gate.arg) == 1, "a torn record (rank %d of %d), yet the gate spins", NR, NR);

    /* park and unpark: what this rank waits on, for the others. */
    g.rank = 3;
    g.off = (uint32_t)offsetof(direct_hdr_t, done);
    g.s = 77;
    g.gate.park(g.gate.arg);
    direct_sched_t *me = &hdr_of(base, 0)->sched;
    CHECK(me->parked == 1 && me->cpu == cpu && me->rank == 3 && me->off == g.off && me->s == 77,
          "park published parked %u cpu %d rank %d off %u s %llu", me->parked, me->cpu, me->rank,
          me->off, (unsigned long long)me->s);
    g.gate.unpark(g.gate.arg);
    CHECK(me->parked == 0, "unpark left parked %u", me->parked);

    for (int r = 0; r < NR; r++)
        free(base[r]);
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; c++)
        CPU_SET(c, &all);
    sched_setaffinity(0, sizeof(all), &all);
    harness_report(before, "the gate yields only to a rank on this CPU that is runnable, or behind "
                           "this one and whose flag has come (or when it cannot tell); park/unpark "
                           "publish the wait");
}

typedef struct late {
    chorusComm_t comm;
    int rank;
    float in[2], out[2];
    double cpu_s;
    chorusResult_t res;
} late_t;

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *late_rank(void *arg)
{
    late_t *l = arg;
    /* One call first: both windows mapped, both ranks past their first touch. */
    l->res = chorusAllReduce(l->in, l->out, 2, chorusFloat32, chorusSum, l->comm, NULL);
    if (l->res != chorusSuccess)
        return NULL;
    if (l->rank == 1) {
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    double c0 = thread_cpu_s();
    l->res = chorusAllReduce(l->in, l->out, 2, chorusFloat32, chorusSum, l->comm, NULL);
    l->cpu_s = thread_cpu_s() - c0;
    return NULL;
}

static void late_peer(void)
{
    long before = harness_failures;
    chorusComm_t comms[2];
    if (chorusCommInitAll(comms, 2, NULL) != chorusSuccess) {
        FAIL("chorusCommInitAll: %s", chorusGetLastError(NULL));
        return;
    }
    late_t l[2];
    pthread_t t[2];
    for (int r = 0; r < 2; r++) {
        l[r] = (late_t){comms[r], r, {1.0f + (float)r, 2.0f * (float)r}, {0, 0}, 0, chorusSuccess};
        pthread_create(&t[r], NULL, late_rank, &l[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(t[r], NULL);
    for (int r = 0; r < 2; r++) {
        CHECK_OK(l[r].res);
        CHECK(l[r].out[0] == 3.0f && l[r].out[1] == 2.0f, "rank %d: %g %g, want 3 2", r,
              (double)l[r].out[0], (double)l[r].out[1]);
    }
    CHECK(l[0].cpu_s < 0.060, "rank 0 used %.3f s of CPU waiting 0.3 s for rank 1", l[0].cpu_s);
    printf("rank 0 waited 0.3 s on %.4f s of CPU\n", l[0].cpu_s);
    harness_destroy_all(comms, 2);
    harness_report(before, "a gated wait for a rank 300 ms late is right and sleeps (under 60 ms "
                           "of CPU)");
}

/* A rank that sleeps waiting on a tagged line is woken by the writer (direct_lines_write), not
 * by its sleep's time slice running out (20 ms): 2 ranks, 8 B and 128 B (three lines; the
 * reader sleeps on the last) all-reduces where rank 1 comes 30 ms late; rank 0's call must
 * return soon after rank 1's starts (median of 6 rounds of each size under 5 ms; a lost wake-up
 * makes it about 10). */
#define WAKE_ROUNDS 12

typedef struct wake {
    chorusComm_t comm;
    int rank;
    pthread_barrier_t *bar;
    double t[WAKE_ROUNDS]; /* rank 1: when its call started; rank 0: when its call returned */
    int bad;
    chorusResult_t res;
} wake_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *wake_rank(void *arg)
{
    wake_t *w = arg;
    float in[32], out[32];
    for (int i = 0; i < 32; i++)
        in[i] = (float)(i + 100 * w->rank);
    w->res = chorusAllReduce(in, out, 32, chorusFloat32, chorusSum, w->comm, NULL);
    for (int k = 0; k < WAKE_ROUNDS && w->res == chorusSuccess; k++) {
        size_t count = k % 2 ? 32 : 2;
        pthread_barrier_wait(w->bar);
        if (w->rank == 1) {
            struct timespec ts = {0, 30 * 1000 * 1000};
            nanosleep(&ts, NULL);
            w->t[k] = now_s();
        }
        w->res = chorusAllReduce(in, out, count, chorusFloat32, chorusSum, w->comm, NULL);
        if (w->rank == 0)
            w->t[k] = now_s();
        for (size_t i = 0; i < count; i++)
            w->bad += out[i] != (float)(2 * i + 100);
    }
    /* the other rank must not wait at a barrier this one left */
    for (int k = 0; k < WAKE_ROUNDS && w->res != chorusSuccess; k++)
        pthread_barrier_wait(w->bar);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void lines_wake(void)
{
    long before = harness_failures;
    chorusComm_t comms[2];
    if (chorusCommInitAll(comms, 2, NULL) != chorusSuccess) {
        FAIL("chorusCommInitAll: %s", chorusGetLastError(NULL));
        return;
    }
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    wake_t w[2];
    pthread_t t[2];
    for (int r = 0; r < 2; r++) {
        w[r] = (wake_t){.comm = comms[r], .rank = r, .bar = &bar, .res = chorusSuccess};
        pthread_create(&t[r], NULL, wake_rank, &w[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(t[r], NULL);
    pthread_barrier_destroy(&bar);
    for (int r = 0; r < 2; r++) {
        CHECK_OK(w[r].res);
        CHECK(w[r].bad == 0, "rank %d: %d wrong elements", r, w[r].bad);
    }
    for (int size = 0; size < 2 && w[0].res == chorusSuccess && w[1].res == chorusSuccess; size++) {
        double lag[WAKE_ROUNDS / 2];
        for (int k = 0; k < WAKE_ROUNDS / 2; k++)
            lag[k] = (w[0].t[2 * k + size] - w[1].t[2 * k + size]) * 1e3;
        qsort(lag, WAKE_ROUNDS / 2, sizeof(double), cmp_double);
        double med = (lag[WAKE_ROUNDS / 4 - 1] + lag[WAKE_ROUNDS / 4]) / 2;
        printf("%s: rank 0 returned %.3f ms (median; least %.3f, most %.3f) after rank 1's late "
               "call started\n",
               size ? "128 B" : "8 B", med, lag[0], lag[WAKE_ROUNDS / 2 - 1]);
        CHECK(med < 5.0,
              "%s: rank 0 returned %.3f ms (median) after rank 1's call started: its sleep on "
              "the tagged line was not woken",
              size ? "128 B" : "8 B", med);
    }
    harness_destroy_all(comms, 2);
    harness_report(before, "a rank asleep on a tagged line is woken by its writer (8 B and 128 B "
                           "all-reduce, the peer 30 ms late)");
}

static int64_t libc_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void cpu_and_clock(void)
{
    long before = harness_failures;
    fifo_fence_setup();
    int fast = fifo_fast_paths();
    if (getauxval(AT_SYSINFO_EHDR) != 0)
        CHECK(fast & 1, "the process has a vDSO, but fifo_now_ns reads libc's clock_gettime");
    cpu_set_t saved, one;
    CHECK(sched_getaffinity(0, sizeof(saved), &saved) == 0, "sched_getaffinity failed");
    int cpus = 0;
    for (int c = 0; c < CPU_SETSIZE && cpus < 64; c++) {
        if (!CPU_ISSET(c, &saved))
            continue;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        if (sched_setaffinity(0, sizeof(one), &one) != 0)
            continue;
        cpus++;
        CHECK(fifo_cpu() == c && sched_getcpu() == c,
              "pinned to CPU %d: fifo_cpu %d, sched_getcpu %d", c, fifo_cpu(), sched_getcpu());
    }
    sched_setaffinity(0, sizeof(saved), &saved);
    CHECK(cpus >= 1, "could not pin this thread to any CPU");
    int64_t last = 0, last_coarse = 0;
    for (int i = 0; i < 100000; i++) {
        int64_t a = libc_ns(CLOCK_MONOTONIC), t = fifo_now_ns(), b = libc_ns(CLOCK_MONOTONIC);
        int64_t ca = libc_ns(CLOCK_MONOTONIC_COARSE), ct = fifo_coarse_now_ns();
        int64_t cb = libc_ns(CLOCK_MONOTONIC_COARSE);
        if (t < a || t > b || t < last || ct < ca || ct > cb || ct < last_coarse) {
            FAIL("clocks: monotonic %lld not within [%lld, %lld] or before %lld; coarse %lld not "
                 "within [%lld, %lld] or before %lld",
                 (long long)t, (long long)a, (long long)b, (long long)last, (long long)ct,
                 (long long)ca, (long long)cb, (long long)last_coarse);
            break;
        }
        last = t;
        last_coarse = ct;
    }
    char what[160];
    snprintf(what, sizeof(what),
             "fifo_cpu = sched_getcpu on %d CPU(s) (%s), fifo_now_ns and fifo_coarse_now_ns "
             "within libc's clocks (%s)",
             cpus, fast & 2 ? "rseq" : "libc", fast & 1 ? "vDSO" : "libc");
    harness_report(before, what);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("test_wait_gate (pid %d)\n", (int)getpid());
    decisions();
    late_peer();
    lines_wake();
    cpu_and_clock();
    return harness_finish("test_wait_gate");
}
