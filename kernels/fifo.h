/*
 * fifo.h: the FIFO contract every connection follows (DESIGN section 5).
 *
 * A directed connection is CHORUS_STEPS slots of slot_nbytes each plus two 64-bit counters:
 * tail (slots filled, written only by the producer) and head (slots freed, written only by the
 * consumer), and sizes[slot]. Producer: wait until tail - head < steps, write slot tail % steps,
 * store its size, release-store tail + 1. Consumer: acquire-load until tail > head, use the slot,
 * release-store head + 1. Waits spin, then sleep on a futex on the counter's low 32-bit word
 * (shared futexes work across processes on one shm mapping); the writer wakes only when a waiter
 * said it sleeps. Every wait checks the abort flag and a deadline.
 */
#ifndef CHORUS_FIFO_H
#define CHORUS_FIFO_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>

#include "chorus.h"

#define FIFO_MAX_STEPS 64

/* The shared control block; lives at the start of the receiver-owned segment. */
typedef struct fifo_ctrl {
    _Alignas(64) uint64_t tail; /* written by the producer */
    uint32_t tail_sleepers; /* consumers asleep on tail */
    uint32_t error; /* set by a proxy whose connection failed: waiters on it give up */
    _Alignas(64) uint64_t head; /* written by the consumer */
    uint32_t head_sleepers; /* producers asleep on head */
    _Alignas(64) uint32_t sizes[FIFO_MAX_STEPS];
} fifo_ctrl_t;

/* What stopped an operation first, as its waits saw it (the communicator turns it into the error
 * every rank reports: the culprit rank, the transport, and for a timeout who is missing). */
enum { FAIL_NONE = 0, FAIL_DEAD = 1, FAIL_CONN = 2, FAIL_TIMEOUT = 3 };
typedef struct fail_record {
    uint32_t kind; /* FAIL_*; set once (the first failure wins) */
    int peer;
    const char *transport;
    int64_t waited_ns;
} fail_record_t;

/* How often a sleeping wait asks whether the peer it waits on is still alive. */
#define FIFO_LIVENESS_NS (100LL * 1000 * 1000)

/*
 * A wait's gate to the scheduler (optional). When ranks outnumber cores, a wait that stops
 * spinning hands the core over with sched_yield, so that a rank sharing the core can run. A
 * process switch costs about 5 us on a VM, and a yield 1 us even when nothing else runs, so a
 * yield is worth it only when a rank that shares this core can move on: park publishes that this
 * rank waits (its CPU, and on what), yield_useful says whether a rank last seen on this CPU is
 * runnable or waits for something that has come, and unpark ends the wait. A wait whose gate says
 * no spins instead, yet yields at least every FIFO_GATE_YIELD_NS (a rank may have moved to this
 * CPU since it last said where it was).
 */
typedef struct fifo_gate {
    void (*park)(void *arg);
    int (*yield_useful)(void *arg);
    void (*unpark)(void *arg);
    void *arg;
} fifo_gate_t;
#define FIFO_GATE_YIELD_NS (50 * 1000)

/* Everything a wait needs besides the counter: where to look for abort, and how long to wait. */
typedef struct wait_ctx {
    const volatile uint32_t *abort_flag; /* non-zero: give up with chorusRemoteError/abort */
    int64_t timeout_ns; /* deadline of one wait */
    int64_t spin; /* polls before sleeping */
    int peer; /* for error messages */
    /* Optional: 0 when peer's process is known to be gone (asked every FIFO_LIVENESS_NS while
     * the wait sleeps; a peer on another machine counts as alive). */
    int (*peer_alive)(void *arg, int peer);
    void *arg;
    fail_record_t *fail; /* optional: where the operation's first failure is recorded */
    /* Optional, for collectives (where any rank's death stops the call): a rank other than peer
     * whose process is known to be gone, or -1; asked with peer_alive. A rank that waits on a
     * live peer which left the call for that death learns of it here even when that peer's
     * failure notice does not reach it. */
    int (*other_gone)(void *arg, int peer);
    const fifo_gate_t *gate; /* optional: NULL yields whenever the spin is over */
} wait_ctx_t;

/* A doorbell for a thread that serves FIFOs from the other side (the net transport's proxy): it
 * sleeps in poll() on fd with sleeping set, and every post on a FIFO with this bell writes fd
 * while sleeping is set. Posting stores the counter, then reads sleeping (the light fence
 * between); the sleeper sets sleeping, then (the heavy fence between) looks at the counters once
 * more before it polls. */
typedef struct fifo_bell {
    uint32_t sleeping;
    int fd; /* eventfd */
} fifo_bell_t;

/* One end of a directed connection, as the executor sees it (any transport). */
typedef struct conn {
    fifo_ctrl_t *ctrl;
    char *slots; /* slot i at slots + i * slot_nbytes */
    size_t slot_nbytes; /* multiple of 64 */
    int steps;
    uint64_t step; /* producer: next tail to publish; consumer: next head */
    /* Producer: the consumer's head when last read, a lower bound of it. While it shows a free
     * slot the producer posts without reading head again: that read is a cache line the
     * consumer wrote after every slot, one transfer between cores on each post's path. */
    uint64_t head_seen;
    /* Send/recv over shm (set by comm_connect on both ends): each slot's first 64 bytes are a
     * fifo_slot_hdr_t, and the consumer polls it rather than tail (see there). */
    int slot_hdr;
    int peer; /* the rank at the other end */
    const char *transport;
    fifo_bell_t *bell; /* NULL unless a proxy serves the other side */
} conn_t;

/* A slot's first line on a connection with slot headers (conn_t.slot_hdr): the producer writes
 * the slice (up to FIFO_SLOT_INLINE bytes in data, more from the slot's second line), then its
 * size, then seq = its step + 1 with release; the consumer that sees seq finds a small slice and
 * its size in the same cache line: one transfer between cores, where tail, sizes[] and the slot
 * took two in a row. Tail and sizes[] are not written; head is, as always. A slice holds up to
 * slot_nbytes - 64 bytes; slot headers need slots of 128 bytes or more. */
#define FIFO_SLOT_INLINE 48
typedef struct fifo_slot_hdr {
    uint64_t seq;
    uint32_t nbytes;
    uint32_t reserved;
    unsigned char data[FIFO_SLOT_INLINE];
} fifo_slot_hdr_t;

/* One poll's pause in a spin loop. */
static inline void fifo_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* A sequence flag in shared memory (the direct algorithms' windows): one writer publishes
 * increasing values, any number of readers wait for a value, spinning then sleeping on the
 * futex like the FIFO counters (and with the same abort, deadline and liveness checks). */
typedef struct fifo_flag {
    _Alignas(64) uint64_t value;
    uint32_t sleepers;
    uint32_t reserved;
    /* A writer's small data, written before the value: a reader that sees the value finds it in
     * the same cache line (one transfer between cores instead of two). */
    unsigned char payload[48];
} fifo_flag_t;

/* Wait until f reaches target; w->peer names the writer in errors. */
chorusResult_t fifo_wait_flag(fifo_flag_t *f, uint64_t target, const wait_ctx_t *w,
                              const char *transport, const char *what);
/* Publish value (release) and wake its sleepers. */
void fifo_set_flag(fifo_flag_t *f, uint64_t value);
/* The same wait on any counter whose writer checks sleepers after each store (fifo_set_flag's
 * order: store, fifo_fence_light, then the sleepers word) and calls fifo_wake when it is not 0. */
chorusResult_t fifo_wait_word(uint64_t *counter, uint32_t *sleepers, uint64_t target,
                              const wait_ctx_t *w, const char *transport, const char *what);
/* Wake every waiter sleeping on counter. */
void fifo_wake(uint64_t *counter);

/* Producer: wait for a free slot, return its address. */
chorusResult_t fifo_wait_send(conn_t *c, const wait_ctx_t *w, void **slot_p);
/* Producer: publish the slot just written with nbytes of payload. */
void fifo_post_send(conn_t *c, uint32_t nbytes);
/* Consumer: wait for a filled slot, return its address and payload bytes. */
chorusResult_t fifo_wait_recv(conn_t *c, const wait_ctx_t *w, void **slot_p, uint32_t *nbytes_p);
/* Consumer: free the slot just used. */
void fifo_post_recv(conn_t *c);
/* For a proxy playing the far end of a local FIFO (net transport): publish head (slots freed) or
 * tail (slots filled; sizes[] written first) and wake the executor if it sleeps on it. */
void fifo_publish_head(fifo_ctrl_t *ctrl, uint64_t value);
void fifo_publish_tail(fifo_ctrl_t *ctrl, uint64_t value);
/* Wake the bell's sleeper if it sleeps. */
void fifo_bell_ring(fifo_bell_t *bell);
/* Mark the connection failed (net transport's proxy) and wake every waiter on it. */
void fifo_fail(fifo_ctrl_t *ctrl);
/* 1 once fifo_fail was called on c's control block. */
int fifo_failed(const conn_t *c);
/* Non-blocking probes for progress loops that drive several connections at once. */
int fifo_can_send(conn_t *c);
int fifo_can_recv(const conn_t *c);
/* Record the operation's first failure in w->fail (no-op without one). */
void fifo_note_failure(const wait_ctx_t *w, uint32_t kind, int peer, const char *transport,
                       int64_t waited_ns);
/* For progress loops that wait on several peers: 1 (and the failure recorded) when at least
 * FIFO_LIVENESS_NS passed since *last_ns and w says peer's process is gone. */
int fifo_peer_gone(const wait_ctx_t *w, int peer, const char *transport, int64_t *last_ns,
                   int64_t waited_ns);
/* Monotonic clock in ns; the coarse one (a tick's precision, no TSC read) for rare checks. */
int64_t fifo_now_ns(void);
int64_t fifo_coarse_now_ns(void);
/* The CPU this thread runs on (sched_getcpu), from the rseq area where there is one (fifo.c). */
int fifo_cpu(void);
/* Which of fifo.c's ways around libc fifo_fence_setup found (tests): 1 the vDSO's clock, 2 the
 * rseq CPU number. */
int fifo_fast_paths(void);
/* sched_yield, as the system call itself on x86-64 (fifo.c's fast_sys_decide says why). */
static inline void fifo_yield(void)
{
#if defined(__x86_64__)
    long ret = SYS_sched_yield;
    __asm__ volatile("syscall" : "+a"(ret) : : "rcx", "r11", "memory");
#else
    sched_yield();
#endif
}
/* The two sides of a store-then-load handshake (fifo.c): a publisher stores, calls the light
 * fence, then loads; a sleeper stores, calls the heavy fence, then loads. Setup registers the
 * process for the heavy fence; it runs on first use, and init calls it early. */
void fifo_fence_setup(void);
/* 0: not decided yet; 1: asymmetric (membarrier); 2: a full fence on both sides. */
extern int fifo_fence_mode;
void fifo_fence_light_slow(void); /* decides first, then fences */
/* Inline: every call passes it several times. */
static inline void fifo_fence_light(void)
{
    int m = __atomic_load_n(&fifo_fence_mode, __ATOMIC_ACQUIRE);
    if (__builtin_expect(m == 1, 1))
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
    else if (m == 2)
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    else
        fifo_fence_light_slow();
}
void fifo_fence_heavy(void);
/* A lock held for a whole operation (a communicator's exec lock): one locked exchange takes it
 * and a plain store gives it back (a pthread mutex costs a locked instruction each way). A
 * waiter counts itself, passes the heavy fence, and sleeps on the futex in slices; the holder
 * stores, passes the light fence, then reads the count: either the waiter sees the lock free or
 * the holder sees the waiter and wakes it. Zeroed memory is an unlocked lock. */
typedef struct fifo_excl {
    uint32_t held;
    uint32_t waiters;
} fifo_excl_t;
void fifo_excl_lock(fifo_excl_t *l);
void fifo_excl_unlock(fifo_excl_t *l);
/* Ask for the cache lines of [p, p + nbytes) ahead of use, without waiting: to be read, or to be
 * written (PREFETCHW where the CPU has it: the line arrives exclusive, so later stores to it do
 * not wait for another core to give it up). Hints only. */
void fifo_prefetch_read(const void *p, size_t nbytes);
void fifo_prefetch_write(const void *p, size_t nbytes);

#endif /* CHORUS_FIFO_H */
