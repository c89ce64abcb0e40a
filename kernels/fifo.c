/*
 * fifo.c: counter waits of the FIFO contract: spin, then futex sleep, with abort and deadline.
 *
 * Lost wake-ups are impossible: a waiter increments the sleepers word and re-reads the counter
 * before it sleeps (FUTEX_WAIT also compares the value atomically), and the writer stores the
 * counter before it reads the sleepers word, with a full barrier between the two on each side:
 * either the waiter sees the new counter or the writer sees the sleeper.
 *
 * The barriers are asymmetric where the kernel has membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED):
 * the writer, on every publish, only keeps the compiler from reordering; the waiter, about to
 * sleep (rare: after spinning and yielding), makes every running thread of every registered
 * process pass a full barrier. A locked store on every publish stalled the writer until its
 * earlier stores (the data it publishes) had crossed to the other core: fifo_set_flag was a
 * quarter of a 2-rank 8 B broadcast's profile. Each process registers before its first publish;
 * without membarrier both sides use a full fence, as before.
 */
#define _GNU_SOURCE
#include "fifo.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdint.h>
#include <linux/futex.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#if CHORUS_HAVE_RSEQ
#include <sys/rseq.h>
#endif
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "debug.h"

/* Longest single futex sleep: bounds how late an abort or a deadline is noticed. */
#define FIFO_SLEEP_SLICE_NS (20 * 1000 * 1000)
/* How long a waiter yields the core before it sleeps on the futex. */
#define FIFO_YIELD_NS (200 * 1000)

int fifo_fence_mode; /* fifo.h */
static pthread_once_t fence_once = PTHREAD_ONCE_INIT;

/*
 * The clock and the CPU number of every wait without libc's wrappers (fifo_now_ns, fifo_cpu; the
 * yield is fifo.h's fifo_yield): clock_gettime, sched_getcpu and sched_yield each sit on a libc
 * page of their own, three pages more for a call to touch after every process switch (debug.h's
 * HOT_PATH). The vDSO's clock, found once; the CPU number from the thread's rseq area, where
 * glibc registered one (sched_getcpu reads the same word). Where either is missing (no vDSO under
 * valgrind, rseq off), libc's function.
 */
typedef int (*vdso_gettime_t)(clockid_t, struct timespec *);
static vdso_gettime_t vdso_gettime;
static int rseq_ok; /* 1: rseq_cpu_off is the offset of this thread's rseq cpu_id from %fs */
static long rseq_cpu_off;

static void fast_sys_decide(void)
{
    void *vdso = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (vdso != NULL) {
        vdso_gettime_t f = (vdso_gettime_t)(uintptr_t)dlsym(vdso, "__vdso_clock_gettime");
        struct timespec ts;
        if (f != NULL && f(CLOCK_MONOTONIC, &ts) == 0)
            __atomic_store_n(&vdso_gettime, f, __ATOMIC_RELEASE);
        dlclose(vdso); /* the vDSO stays mapped: it is never unloaded */
    }
#if defined(__x86_64__) && CHORUS_HAVE_RSEQ
    if (__rseq_size >= offsetof(struct rseq, cpu_id) + sizeof(uint32_t)) {
        rseq_cpu_off = (long)__rseq_offset + (long)offsetof(struct rseq, cpu_id);
        __atomic_store_n(&rseq_ok, 1, __ATOMIC_RELEASE);
    }
#endif
}

static void fence_decide(void)
{
    long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    int asym = q > 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
               syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
    fast_sys_decide();
    __atomic_store_n(&fifo_fence_mode, asym ? 1 : 2, __ATOMIC_RELEASE);
}

int fifo_fast_paths(void)
{
    return (__atomic_load_n(&vdso_gettime, __ATOMIC_ACQUIRE) != NULL ? 1 : 0) |
           (__atomic_load_n(&rseq_ok, __ATOMIC_ACQUIRE) ? 2 : 0);
}

HOT_PATH int fifo_cpu(void)
{
#if defined(__x86_64__) && CHORUS_HAVE_RSEQ
    if (__atomic_load_n(&rseq_ok, __ATOMIC_ACQUIRE)) {
        int cpu;
        __asm__ volatile("movl %%fs:(%1), %0" : "=r"(cpu) : "r"(rseq_cpu_off));
        if (cpu >= 0) /* else not registered (yet) in this thread */
            return cpu;
    }
#endif
    return sched_getcpu();
}

void fifo_fence_setup(void)
{
    pthread_once(&fence_once, fence_decide);
}

static inline int fence_asym(void)
{
    int m = __atomic_load_n(&fifo_fence_mode, __ATOMIC_ACQUIRE);
    if (__builtin_expect(m == 0, 0)) {
        fifo_fence_setup();
        m = __atomic_load_n(&fifo_fence_mode, __ATOMIC_ACQUIRE);
    }
    return m == 1;
}

void fifo_fence_light_slow(void)
{
    if (fence_asym())
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
    else
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void fifo_fence_heavy(void)
{
    if (!fence_asym() || syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) != 0)
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

HOT_PATH void fifo_excl_lock(fifo_excl_t *l)
{
    if (__atomic_exchange_n(&l->held, 1, __ATOMIC_ACQUIRE) == 0)
        return;
    for (int i = 0; i < 64; i++) {
        fifo_cpu_relax();
        if (__atomic_load_n(&l->held, __ATOMIC_RELAXED) == 0 &&
            __atomic_exchange_n(&l->held, 1, __ATOMIC_ACQUIRE) == 0)
            return;
    }
    __atomic_add_fetch(&l->waiters, 1, __ATOMIC_SEQ_CST);
    fifo_fence_heavy();
    while (__atomic_exchange_n(&l->held, 1, __ATOMIC_ACQUIRE) != 0) {
        struct timespec ts = {0, FIFO_SLEEP_SLICE_NS};
        syscall(SYS_futex, &l->held, FUTEX_WAIT_PRIVATE, 1, &ts, NULL, 0);
    }
    __atomic_sub_fetch(&l->waiters, 1, __ATOMIC_SEQ_CST);
}

HOT_PATH void fifo_excl_unlock(fifo_excl_t *l)
{
    __atomic_store_n(&l->held, 0, __ATOMIC_RELEASE);
    fifo_fence_light();
    if (__atomic_load_n(&l->waiters, __ATOMIC_RELAXED) != 0)
        syscall(SYS_futex, &l->held, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

#if defined(__x86_64__) || defined(__i386__)
static int prefetchw_state; /* 0: not asked yet; 1: the CPU has PREFETCHW; 2: it has not */

static int has_prefetchw(void)
{
    int st = __atomic_load_n(&prefetchw_state, __ATOMIC_RELAXED);
    if (__builtin_expect(st == 0, 0)) {
        unsigned a, b, c, d; /* CPUID 0x80000001: ECX bit 8, PRFCHW (3DNowPrefetch) */
        st = __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & (1u << 8)) ? 1 : 2;
        __atomic_store_n(&prefetchw_state, st, __ATOMIC_RELAXED);
    }
    return st == 1;
}
#endif

void fifo_prefetch_read(const void *p, size_t nbytes)
{
    const char *end = (const char *)p + nbytes;
    for (const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63); c < end; c += 64)
        __builtin_prefetch(c, 0, 3);
}

void fifo_prefetch_write(const void *p, size_t nbytes)
{
    const char *end = (const char *)p + nbytes;
    const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63);
#if defined(__x86_64__) || defined(__i386__)
    if (!has_prefetchw())
        return;
    for (; c < end; c += 64)
        __asm__ volatile("prefetchw %0" ::"m"(*c));
#else
    for (; c < end; c += 64)
        __builtin_prefetch(c, 1, 3);
#endif
}

static inline int64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    vdso_gettime_t f = __atomic_load_n(&vdso_gettime, __ATOMIC_ACQUIRE);
    if (f == NULL || f(clock, &ts) != 0)
        clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

HOT_PATH int64_t fifo_now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

HOT_PATH int64_t fifo_coarse_now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC_COARSE);
}

static inline uint32_t *low_word(uint64_t *counter)
{
    /* The low 32 bits of a little-endian 64-bit counter. */
    return (uint32_t *)(void *)counter;
}

static void futex_wake_all(uint64_t *counter)
{
    syscall(SYS_futex, low_word(counter), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void fifo_note_failure(const wait_ctx_t *w, uint32_t kind, int peer, const char *transport,
                       int64_t waited_ns)
{
    if (w->fail == NULL)
        return;
    uint32_t none = FAIL_NONE;
    /* Claim with a placeholder, fill, then publish the kind: readers see all or nothing. */
    if (!__atomic_compare_exchange_n(&w->fail->kind, &none, UINT32_MAX, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    w->fail->peer = peer;
    w->fail->transport = transport;
    w->fail->waited_ns = waited_ns;
    __atomic_store_n(&w->fail->kind, kind, __ATOMIC_RELEASE);
}

int fifo_peer_gone(const wait_ctx_t *w, int peer, const char *transport, int64_t *last_ns,
                   int64_t waited_ns)
{
    if (w->peer_alive == NULL || peer < 0)
        return 0;
    int64_t now = fifo_now_ns();
    if (now - *last_ns < FIFO_LIVENESS_NS)
        return 0;
    *last_ns = now;
    if (w->peer_alive(w->arg, peer))
        return 0;
    fifo_note_failure(w, FAIL_DEAD, peer, transport, waited_ns);
    return 1;
}

/* The wait of wait_word once its spin is over. */
HOT_PATH static chorusResult_t wait_word_slow(uint64_t *counter, uint32_t *sleepers,
                                              const uint32_t *error, const char *transport,
                                              uint64_t target, const wait_ctx_t *w,
                                              const char *what)
{
    int64_t start = fifo_now_ns();
    int64_t last_check = start;
    /* Then yield for a while: when ranks outnumber cores, the peer we wait for may need this
     * core, and sched_yield hands it over at once where a futex round trip costs a wake-up. A
     * gate that sees no rank here able to move on spins instead (fifo_gate_t). */
    const fifo_gate_t *g = w->gate;
    int64_t now = start, yielded = start;
    while (now - start < FIFO_YIELD_NS && !__atomic_load_n(error, __ATOMIC_ACQUIRE)) {
        if (__atomic_load_n(counter, __ATOMIC_ACQUIRE) >= target)
            return chorusSuccess;
        int yield = g == NULL || now - yielded >= FIFO_GATE_YIELD_NS || g->yield_useful(g->arg);
        if (yield)
            fifo_yield();
        else
            fifo_cpu_relax();
        now = fifo_now_ns();
        if (yield)
            yielded = now;
    }
    for (;;) {
        uint64_t v = __atomic_load_n(counter, __ATOMIC_ACQUIRE);
        if (v >= target)
            return chorusSuccess;
        now = fifo_now_ns();
        /* The counter again after the flag: the proxy publishes the last slot the wire finished
         * before it fails the connection (a peer that closed after its last send), and that
         * slot may be the one awaited here. */
        if (__atomic_load_n(error, __ATOMIC_ACQUIRE) &&
            __atomic_load_n(counter, __ATOMIC_ACQUIRE) < target) {
            fifo_note_failure(w, FAIL_CONN, w->peer, transport, now - start);
            return ERR(chorusRemoteError, SUB_COLL,
                       "wait for %s of peer rank %d stopped: the %s connection failed", what,
                       w->peer, transport ? transport : "");
        }
        if (w->abort_flag && __atomic_load_n(w->abort_flag, __ATOMIC_ACQUIRE))
            return ERR(chorusRemoteError, SUB_COLL,
                       "wait for %s of peer rank %d stopped: the communicator was aborted", what,
                       w->peer);
        if (now - start >= w->timeout_ns) {
            fifo_note_failure(w, FAIL_TIMEOUT, w->peer, transport, now - start);
            return ERR(chorusTimeout, SUB_COLL,
                       "peer rank %d did not advance the %s within %lld ms (CHORUS_TIMEOUT_MS); "
                       "is it stuck or not calling the same collective?",
                       w->peer, what, (long long)(w->timeout_ns / 1000000));
        }
        int64_t asked = last_check;
        if (fifo_peer_gone(w, w->peer, transport, &last_check, now - start))
            return ERR(chorusRemoteError, SUB_COLL,
                       "peer rank %d's process is gone: it died while this rank waited for the %s "
                       "(%s connection)",
                       w->peer, what, transport ? transport : "");
        if (last_check != asked && w->other_gone != NULL) { /* peer was just asked about */
            int dead = w->other_gone(w->arg, w->peer);
            if (dead >= 0) {
                fifo_note_failure(w, FAIL_DEAD, dead, transport, now - start);
                return ERR(chorusRemoteError, SUB_COLL,
                           "rank %d's process is gone: it died while this rank waited for the %s "
                           "of peer rank %d (%s connection)",
                           dead, what, w->peer, transport ? transport : "");
            }
        }
        int64_t left = w->timeout_ns - (now - start);
        if (left > FIFO_SLEEP_SLICE_NS)
            left = FIFO_SLEEP_SLICE_NS;
        struct timespec ts = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
        __atomic_add_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
        fifo_fence_heavy();
        v = __atomic_load_n(counter, __ATOMIC_SEQ_CST);
        if (v < target)
            syscall(SYS_futex, low_word(counter), FUTEX_WAIT, (uint32_t)v, &ts, NULL, 0);
        __atomic_sub_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
    }
}

/* Wait until the counter reaches target (>=); error (optional) is a failed connection's flag. */
HOT_PATH static chorusResult_t wait_word(uint64_t *counter, uint32_t *sleepers,
                                         const uint32_t *error, const char *transport,
                                         uint64_t target, const wait_ctx_t *w, const char *what)
{
    static uint32_t no_error; /* never written; .bss, beside words every call reads, not a
                               * .rodata page of its own (debug.h's HOT_PATH) */
    if (error == NULL)
        error = &no_error;
    for (int64_t i = 0; i < w->spin; i++) {
        if (__atomic_load_n(counter, __ATOMIC_ACQUIRE) >= target)
            return chorusSuccess;
        fifo_cpu_relax();
    }
    if (w->gate == NULL)
        return wait_word_slow(counter, sleepers, error, transport, target, w, what);
    w->gate->park(w->gate->arg);
    chorusResult_t res = wait_word_slow(counter, sleepers, error, transport, target, w, what);
    w->gate->unpark(w->gate->arg);
    return res;
}

/* Wait until the counter reaches target (>=) on connection c. */
static chorusResult_t wait_counter(const conn_t *c, uint64_t *counter, uint32_t *sleepers,
                                   uint64_t target, const wait_ctx_t *w, const char *what)
{
    return wait_word(counter, sleepers, &c->ctrl->error, c->transport, target, w, what);
}

HOT_PATH chorusResult_t fifo_wait_word(uint64_t *counter, uint32_t *sleepers, uint64_t target,
                                       const wait_ctx_t *w, const char *transport, const char *what)
{
    if (__atomic_load_n(counter, __ATOMIC_ACQUIRE) >= target)
        return chorusSuccess;
    return wait_word(counter, sleepers, NULL, transport, target, w, what);
}

chorusResult_t fifo_wait_flag(fifo_flag_t *f, uint64_t target, const wait_ctx_t *w,
                              const char *transport, const char *what)
{
    return fifo_wait_word(&f->value, &f->sleepers, target, w, transport, what);
}

void fifo_wake(uint64_t *counter)
{
    futex_wake_all(counter);
}

HOT_PATH static void publish(uint64_t *counter, uint32_t *sleepers, uint64_t value)
{
    __atomic_store_n(counter, value, __ATOMIC_RELEASE);
    fifo_fence_light();
    if (__atomic_load_n(sleepers, __ATOMIC_RELAXED) != 0)
        futex_wake_all(counter);
}

HOT_PATH void fifo_set_flag(fifo_flag_t *f, uint64_t value)
{
    publish(&f->value, &f->sleepers, value);
}

chorusResult_t fifo_wait_send(conn_t *c, const wait_ctx_t *w, void **slot_p)
{
    /* Free slot when tail - head < steps, i.e. head >= tail - steps + 1. */
    if (c->step >= (uint64_t)c->steps && c->head_seen < c->step - c->steps + 1) {
        CHECK(wait_counter(c, &c->ctrl->head, &c->ctrl->head_sleepers, c->step - c->steps + 1, w,
                           "FIFO head (slot freed)"));
        c->head_seen = __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE);
    }
    *slot_p = c->slots + (c->step % c->steps) * c->slot_nbytes;
    return chorusSuccess;
}

void fifo_post_send(conn_t *c, uint32_t nbytes)
{
    c->ctrl->sizes[c->step % c->steps] = nbytes;
    c->step++;
    publish(&c->ctrl->tail, &c->ctrl->tail_sleepers, c->step);
    if (c->bell != NULL)
        fifo_bell_ring(c->bell);
}

chorusResult_t fifo_wait_recv(conn_t *c, const wait_ctx_t *w, void **slot_p, uint32_t *nbytes_p)
{
    CHECK(wait_counter(c, &c->ctrl->tail, &c->ctrl->tail_sleepers, c->step + 1, w,
                       "FIFO tail (slot filled)"));
    *slot_p = c->slots + (c->step % c->steps) * c->slot_nbytes;
    *nbytes_p = c->ctrl->sizes[c->step % c->steps];
    return chorusSuccess;
}

void fifo_post_recv(conn_t *c)
{
    c->step++;
    publish(&c->ctrl->head, &c->ctrl->head_sleepers, c->step);
    if (c->bell != NULL)
        fifo_bell_ring(c->bell);
}

void fifo_bell_ring(fifo_bell_t *bell)
{
    if (__atomic_load_n(&bell->sleeping, __ATOMIC_SEQ_CST)) {
        uint64_t one = 1;
        ssize_t n = write(bell->fd, &one, sizeof(one));
        (void)n; /* EAGAIN: the counter is saturated, the sleeper wakes anyway */
    }
}

void fifo_publish_head(fifo_ctrl_t *ctrl, uint64_t value)
{
    publish(&ctrl->head, &ctrl->head_sleepers, value);
}

void fifo_publish_tail(fifo_ctrl_t *ctrl, uint64_t value)
{
    publish(&ctrl->tail, &ctrl->tail_sleepers, value);
}

void fifo_fail(fifo_ctrl_t *ctrl)
{
    __atomic_store_n(&ctrl->error, 1, __ATOMIC_SEQ_CST);
    futex_wake_all(&ctrl->tail);
    futex_wake_all(&ctrl->head);
}

int fifo_failed(const conn_t *c)
{
    return __atomic_load_n(&c->ctrl->error, __ATOMIC_ACQUIRE) != 0;
}

int fifo_can_send(conn_t *c)
{
    if (c->step < (uint64_t)c->steps || c->head_seen >= c->step - c->steps + 1)
        return 1;
    c->head_seen = __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE);
    return c->head_seen >= c->step - c->steps + 1;
}

int fifo_can_recv(const conn_t *c)
{
    return __atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE) >= c->step + 1;
}
