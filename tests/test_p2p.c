/*
 * test_p2p.c: proves point-to-point and all-to-all bit-exact, on thread ranks or MPI processes.
 *
 * Every byte a rank sends is a hash of (sender, receiver, tag, byte index), so a receiver knows in
 * closed form what must arrive and from whom; a guard after every receive buffer must stay intact.
 * Grouped send/recv (chorusGroupStart/End): ring shift both ways round; a pairwise exchange of
 * 3 MiB with every peer in one group (three times the 1 MiB P2P FIFO, so it only completes when
 * the group progresses all peers together); self send/recv in either order; several sends to one
 * peer in one group, matched in issue order; 20000 sends and receives in one group; count-0 sends
 * with NULL buffers. chorusAlltoAll for
 * int8/int32/int64/float16/bfloat16/float32/float64 x count {0, 1, 1031, 100003} x in-place and
 * out-of-place. On thread ranks also NCCL's single-thread pattern: one thread issues every rank's
 * call between GroupStart and GroupEnd (all-reduce, all-reduce then broadcast, a 3 MiB send ring).
 *
 *   test_p2p N        N ranks as threads of this process (chorusCommInitAll)
 *   test_p2p N mixed  only groups {send, all-reduce or all-to-all, recv}: a send and its
 *                     receive separated by a collective in one group (4 KiB, then 3 MiB)
 *   test_p2p 2 timeout  after one exchange, a receive, then a 4 MiB send (more than the FIFO
 *                     holds), whose peer never posts the match, then a receive on a fresh
 *                     communicator: each returns chorusTimeout naming the peer 0.9-3 deadlines
 *                     (CHORUS_TIMEOUT_MS=1000) after it started, not saying it waited 0 ms
 *   test_p2p_mpi      one rank per MPI process (built with -DTEST_P2P_MPI, run under mpirun)
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chorus.h"
#include "harness.h"
#if TEST_P2P_MPI
#include "harness_mpi.h"
#endif

#define GUARD 64
#define GUARD_BYTE 0xa5
#define MIB (1024 * 1024)

static uint64_t seed_of(int src, int dst, int tag)
{
    return harness_splitmix(((uint64_t)(uint32_t)src << 40) ^ ((uint64_t)(uint32_t)dst << 20) ^
                            (uint64_t)(uint32_t)tag);
}

/* A receive buffer of nbytes followed by GUARD guard bytes; the payload is pre-filled with junk. */
static void *recv_alloc(size_t nbytes)
{
    unsigned char *p = malloc(nbytes + GUARD);
    if (p == NULL) {
        printf("FAIL: out of memory for %zu bytes\n", nbytes);
        exit(1);
    }
    memset(p, 0x5a, nbytes);
    memset(p + nbytes, GUARD_BYTE, GUARD);
    return p;
}

static void *send_alloc(size_t nbytes, uint64_t seed)
{
    void *p = malloc(nbytes > 0 ? nbytes : 1);
    if (p == NULL) {
        printf("FAIL: out of memory for %zu bytes\n", nbytes);
        exit(1);
    }
    harness_fill(p, nbytes, seed);
    return p;
}

static void expect_guard(const char *what, int rank, const void *buf, size_t nbytes)
{
    const unsigned char *g = (const unsigned char *)buf + nbytes;
    for (int i = 0; i < GUARD; i++)
        if (g[i] != GUARD_BYTE) {
            FAIL("rank %d %s: guard byte %d after the %zu-byte buffer was overwritten", rank, what,
                 i, nbytes);
            break;
        }
}

static void expect_msg(const char *what, int rank, const void *buf, size_t nbytes, uint64_t seed)
{
    long long d = harness_first_diff(buf, nbytes, seed);
    if (d >= 0)
        FAIL("rank %d %s: byte %lld of %zu differs", rank, what, d, nbytes);
    expect_guard(what, rank, buf, nbytes);
}

/* ---- one rank's checks (the same on threads and on MPI processes) ---- */

/* One group of rank r: a send of message (r -> to, tag) and a receive of message (from -> r,
 * tag), the receive issued first when recv_first; then the received message is checked. */
static void send_recv_group(const char *what, chorusComm_t comm, int r, int to, int from,
                            size_t count, chorusDataType_t t, int tag, int recv_first)
{
    size_t nbytes = count * harness_dtype_nbytes(t);
    void *sb = send_alloc(nbytes, seed_of(r, to, tag));
    void *rb = recv_alloc(nbytes);
    CHECK_OK(chorusGroupStart());
    if (recv_first)
        CHECK_OK(chorusRecv(rb, count, t, from, comm, NULL));
    CHECK_OK(chorusSend(sb, count, t, to, comm, NULL));
    if (!recv_first)
        CHECK_OK(chorusRecv(rb, count, t, from, comm, NULL));
    CHECK_OK(chorusGroupEnd());
    expect_msg(what, r, rb, nbytes, seed_of(from, r, tag));
    free(sb);
    free(rb);
}

/* Ring shift: send to r+1, receive from r-1 (dir 1), or the other way round (dir -1). */
static void ring_shift(chorusComm_t comm, int r, int n, size_t count, int dir, int recv_first)
{
    int next = (r + dir + n) % n, prev = (r - dir + n) % n;
    char what[96];
    snprintf(what, sizeof(what), "ring shift dir %d count %zu from rank %d", dir, count, prev);
    send_recv_group(what, comm, r, next, prev, count, chorusInt32, 100 + dir, recv_first);
}

/* 3 MiB to and from every other peer in one group, issued in a rank-dependent order. */
static void pairwise(chorusComm_t comm, int r, int n)
{
    size_t nbytes = 3 * MIB + 3; /* odd on purpose: the tail is not a whole word */
    void **sb = calloc(n, sizeof(void *)), **rb = calloc(n, sizeof(void *));
    for (int p = 0; p < n; p++) {
        if (p == r)
            continue;
        sb[p] = send_alloc(nbytes, seed_of(r, p, 200));
        rb[p] = recv_alloc(nbytes);
    }
    CHECK_OK(chorusGroupStart());
    for (int k = 1; k < n; k++) {
        int p = (r + k) % n;
        if (r % 2) {
            CHECK_OK(chorusRecv(rb[p], nbytes, chorusUint8, p, comm, NULL));
            CHECK_OK(chorusSend(sb[p], nbytes, chorusUint8, p, comm, NULL));
        } else {
            CHECK_OK(chorusSend(sb[p], nbytes, chorusUint8, p, comm, NULL));
            CHECK_OK(chorusRecv(rb[p], nbytes, chorusUint8, p, comm, NULL));
        }
    }
    CHECK_OK(chorusGroupEnd());
    for (int p = 0; p < n; p++) {
        if (p == r)
            continue;
        char what[96];
        snprintf(what, sizeof(what), "pairwise 3 MiB from rank %d", p);
        expect_msg(what, r, rb[p], nbytes, seed_of(p, r, 200));
        free(sb[p]);
        free(rb[p]);
    }
    free(sb);
    free(rb);
}

/* Send to and receive from this rank itself in one group (either order). */
static void self_send(chorusComm_t comm, int r, size_t count, int recv_first)
{
    char what[96];
    snprintf(what, sizeof(what), "self send/recv count %zu (recv first %d)", count, recv_first);
    send_recv_group(what, comm, r, r, r, count, chorusFloat32, 300, recv_first);
}

/* Three sends of different sizes and dtypes to the same peer in one group: the k-th send meets
 * the k-th receive. Odd ranks post their receives before their sends. */
static void same_peer(chorusComm_t comm, int r, int n)
{
    static const size_t counts[3] = {5, 1031, 300007};
    static const chorusDataType_t types[3] = {chorusInt8, chorusFloat64, chorusInt32};
    int next = (r + 1) % n, prev = (r - 1 + n) % n;
    void *sb[3], *rb[3];
    for (int k = 0; k < 3; k++) {
        size_t nbytes = counts[k] * harness_dtype_nbytes(types[k]);
        sb[k] = send_alloc(nbytes, seed_of(r, next, 400 + k));
        rb[k] = recv_alloc(nbytes);
    }
    CHECK_OK(chorusGroupStart());
    for (int half = 0; half < 2; half++) {
        int recvs = (half == 0) == (r % 2 == 1);
        for (int k = 0; k < 3; k++) {
            if (recvs)
                CHECK_OK(chorusRecv(rb[k], counts[k], types[k], prev, comm, NULL));
            else
                CHECK_OK(chorusSend(sb[k], counts[k], types[k], next, comm, NULL));
        }
    }
    CHECK_OK(chorusGroupEnd());
    for (int k = 0; k < 3; k++) {
        char what[96];
        snprintf(what, sizeof(what), "send #%d of 3 to the same peer, from rank %d", k, prev);
        expect_msg(what, r, rb[k], counts[k] * harness_dtype_nbytes(types[k]),
                   seed_of(prev, r, 400 + k));
        free(sb[k]);
        free(rb[k]);
    }
}

/* One group of MANY_OPS 8-byte sends and as many receives, alternating between the two
 * neighbours (one peer at 2 ranks, self at 1); odd ranks post all receives first. Each op's
 * payload names its sender and index. The ops to a peer used to be progressed each checking every
 * earlier one: 2000 pairs took 115 us each, and this group minutes (ctest's TIMEOUT). */
#define MANY_OPS 20000
static void many_ops(chorusComm_t comm, int r, int n)
{
    int next = (r + 1) % n, prev = (r - 1 + n) % n;
    int32_t *sb = malloc(sizeof(int32_t) * 2 * MANY_OPS);
    int32_t *rb = recv_alloc(sizeof(int32_t) * 2 * MANY_OPS);
    if (sb == NULL) {
        printf("FAIL: out of memory\n");
        exit(1);
    }
    for (int k = 0; k < MANY_OPS; k++) {
        sb[2 * k] = r * 1000003 + k;
        sb[2 * k + 1] = ~(r * 1000003 + k);
    }
    CHECK_OK(chorusGroupStart());
    for (int half = 0; half < 2; half++) {
        int recvs = (half == 0) == (r % 2 == 1);
        for (int k = 0; k < MANY_OPS; k++) {
            if (recvs)
                CHECK_OK(chorusRecv(rb + 2 * k, 2, chorusInt32, k % 2 ? next : prev, comm, NULL));
            else
                CHECK_OK(chorusSend(sb + 2 * k, 2, chorusInt32, k % 2 ? prev : next, comm, NULL));
        }
    }
    CHECK_OK(chorusGroupEnd());
    for (int k = 0; k < MANY_OPS; k++) {
        int from = k % 2 ? next : prev;
        if (rb[2 * k] != from * 1000003 + k || rb[2 * k + 1] != ~(from * 1000003 + k)) {
            FAIL("rank %d: receive #%d of %d in one group (from rank %d): %d %d, want %d %d", r, k,
                 MANY_OPS, from, rb[2 * k], rb[2 * k + 1], from * 1000003 + k,
                 ~(from * 1000003 + k));
            break;
        }
    }
    expect_guard("many ops in one group", r, rb, sizeof(int32_t) * 2 * MANY_OPS);
    free(sb);
    free(rb);
}

/* Count-0 sends and receives (NULL buffers) beside a real one in a group, and alone. */
static void zero_count(chorusComm_t comm, int r, int n)
{
    int next = (r + 1) % n, prev = (r - 1 + n) % n;
    size_t count = 777;
    void *sb = send_alloc(count * 8, seed_of(r, next, 500));
    void *rb = recv_alloc(count * 8);
    CHECK_OK(chorusGroupStart());
    CHECK_OK(chorusSend(NULL, 0, chorusFloat64, next, comm, NULL));
    CHECK_OK(chorusRecv(NULL, 0, chorusFloat64, prev, comm, NULL));
    CHECK_OK(chorusSend(sb, count, chorusFloat64, next, comm, NULL));
    CHECK_OK(chorusSend(NULL, 0, chorusFloat64, next, comm, NULL));
    CHECK_OK(chorusRecv(rb, count, chorusFloat64, prev, comm, NULL));
    CHECK_OK(chorusRecv(NULL, 0, chorusFloat64, prev, comm, NULL));
    CHECK_OK(chorusGroupEnd());
    expect_msg("count-0 sends beside a real send", r, rb, count * 8, seed_of(prev, r, 500));
    /* Alone, outside a group: nothing to move, so nothing to wait for. */
    CHECK_OK(chorusSend(NULL, 0, chorusInt32, next, comm, NULL));
    CHECK_OK(chorusRecv(NULL, 0, chorusInt32, prev, comm, NULL));
    CHECK_OK(chorusGroupStart());
    CHECK_OK(chorusGroupEnd());
    free(sb);
    free(rb);
}

/* chorusAlltoAll: block p of rank s's send buffer is message (s -> p); after the call block p of
 * rank r's receive buffer must be message (p -> r). */
static void alltoall(chorusComm_t comm, int r, int n, chorusDataType_t t, size_t count, int inplace)
{
    size_t block = count * harness_dtype_nbytes(t), total = block * n;
    int tag = 600 + (int)t * 4 + inplace;
    void *sb = NULL, *rb = recv_alloc(total);
    for (int p = 0; p < n; p++)
        harness_fill((char *)rb + block * p, block, seed_of(r, p, tag));
    if (!inplace) {
        sb = send_alloc(total, 0);
        memcpy(sb, rb, total);
        memset(rb, 0x5a, total);
    }
    CHECK_OK(chorusAlltoAll(inplace ? rb : sb, rb, count, t, comm, NULL));
    for (int p = 0; p < n; p++) {
        char what[128];
        snprintf(what, sizeof(what), "alltoall dtype %d count %zu %s, block from rank %d", (int)t,
                 count, inplace ? "in place" : "out of place", p);
        long long d = harness_first_diff((char *)rb + block * p, block, seed_of(p, r, tag));
        if (d >= 0)
            FAIL("rank %d %s: byte %lld of the %zu-byte block differs", r, what, d, block);
    }
    expect_guard("alltoall", r, rb, total);
    if (!inplace) {
        for (int p = 0; p < n; p++)
            if (harness_first_diff((char *)sb + block * p, block, seed_of(r, p, tag)) >= 0)
                FAIL("rank %d alltoall dtype %d count %zu: the send buffer changed", r, (int)t,
                     count);
    }
    free(sb);
    free(rb);
}

static void rank_body(chorusComm_t comm, int r, int n)
{
    static const size_t shift_counts[] = {1, 1031, 3 * MIB / 4 + 1};
    for (size_t i = 0; i < sizeof(shift_counts) / sizeof(shift_counts[0]); i++) {
        ring_shift(comm, r, n, shift_counts[i], 1, 0);
        ring_shift(comm, r, n, shift_counts[i], -1, 1);
    }
    pairwise(comm, r, n);
    self_send(comm, r, 1031, 0);
    self_send(comm, r, 3 * MIB / 4 + 1, 1);
    same_peer(comm, r, n);
    many_ops(comm, r, n);
    zero_count(comm, r, n);
    static const chorusDataType_t types[] = {chorusInt8,    chorusInt32,    chorusInt64,
                                             chorusFloat16, chorusBfloat16, chorusFloat32,
                                             chorusFloat64};
    static const size_t counts[] = {0, 1, 1031, 100003};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
            for (int inplace = 0; inplace < 2; inplace++)
                alltoall(comm, r, n, types[t], counts[c], inplace);
}

#if !TEST_P2P_MPI
/* ---- ranks as threads ---- */

/* A collective between a send and its receive in one group: the group's calls are issued
 * together, so the send must progress together with the receive that follows the collective (an
 * all-reduce, or with a2a an all-to-all of 4 int32 a peer: through the send/recv loop or, with
 * CHORUS_ALLTOALL_DIRECT_MAX, the direct windows as a collective). Returns 0 when the group
 * completed. */
static int mixed_group(chorusComm_t comm, int r, int n, size_t nbytes, int a2a)
{
    int next = (r + 1) % n, prev = (r - 1 + n) % n, tag = 800 + (nbytes > MIB);
    void *sb = send_alloc(nbytes, seed_of(r, next, tag)), *rb = recv_alloc(nbytes);
    int32_t x[3] = {r, 1, -r}, y[3] = {0, 0, 0};
    int32_t *xs = calloc((size_t)n * 4, sizeof(int32_t)),
            *ys = calloc((size_t)n * 4, sizeof(int32_t));
    if (xs == NULL || ys == NULL) {
        FAIL("rank %d: out of memory", r);
        free(xs);
        free(ys);
        free(sb);
        free(rb);
        return 1;
    }
    for (int i = 0; i < n * 4; i++)
        xs[i] = r * 1000 + i; /* block p (4 values) goes to rank p */
    chorusResult_t res = chorusGroupStart();
    if (res == chorusSuccess)
        res = chorusSend(sb, nbytes, chorusUint8, next, comm, NULL);
    if (res == chorusSuccess)
        res = a2a ? chorusAlltoAll(xs, ys, 4, chorusInt32, comm, NULL)
                  : chorusAllReduce(x, y, 3, chorusInt32, chorusSum, comm, NULL);
    if (res == chorusSuccess)
        res = chorusRecv(rb, nbytes, chorusUint8, prev, comm, NULL);
    chorusResult_t end = chorusGroupEnd();
    if (res == chorusSuccess)
        res = end;
    char what[96];
    snprintf(what, sizeof(what), "group {send %zu bytes to rank %d, %s, recv}", nbytes, next,
             a2a ? "all-to-all" : "all-reduce");
    if (res != chorusSuccess) {
        FAIL("rank %d: %s: %s: %s", r, what, chorusGetErrorString(res), chorusGetLastError(NULL));
    } else {
        expect_msg(what, r, rb, nbytes, seed_of(prev, r, tag));
        if (!a2a && (y[0] != n * (n - 1) / 2 || y[1] != n || y[2] != -(n * (n - 1) / 2)))
            FAIL("rank %d: %s: all-reduce gave %d %d %d", r, what, y[0], y[1], y[2]);
        for (int i = 0; a2a && i < n * 4; i++) {
            int32_t want = (i / 4) * 1000 + r * 4 + i % 4; /* block i / 4 from rank i / 4 */
            if (ys[i] != want) {
                FAIL("rank %d: %s: all-to-all element %d is %d, want %d", r, what, i, ys[i], want);
                break;
            }
        }
    }
    free(xs);
    free(ys);
    free(sb);
    free(rb);
    return res != chorusSuccess;
}

static int mixed_mode, timeout_mode;

/* After one exchange (the connections exist), or with fresh set (none: the wait is in their
 * setup, whose error said "after 0 ms" until 2026-12-07), rank 0 calls what (chorusRecv or
 * chorusSend, 4 MiB) with rank 1, which posts nothing for 3.5 deadlines. */
static void no_match(chorusComm_t comm, int r, const char *what, int fresh)
{
    int32_t one = r, got = -1;
    if (!fresh) {
        CHECK_OK(chorusGroupStart());
        CHECK_OK(chorusSend(&one, 1, chorusInt32, 1 - r, comm, NULL));
        CHECK_OK(chorusRecv(&got, 1, chorusInt32, 1 - r, comm, NULL));
        CHECK_OK(chorusGroupEnd());
        CHECK(got == 1 - r, "rank %d: the first exchange brought %d, want %d", r, got, 1 - r);
    }
    if (r != 0) {
        struct timespec ts = {3, 500000000};
        nanosleep(&ts, NULL);
        return;
    }
    size_t count = 1 << 20; /* 4 MiB of int32: more than the 1 MiB FIFO, so a send blocks too */
    int32_t *buf = calloc(count, sizeof(int32_t));
    double t0 = harness_now_s();
    chorusResult_t res = strcmp(what, "chorusRecv") == 0
                             ? chorusRecv(buf, count, chorusInt32, 1, comm, NULL)
                             : chorusSend(buf, count, chorusInt32, 1, comm, NULL);
    double took = harness_now_s() - t0;
    const char *text = chorusGetLastError(comm);
    CHECK(res == chorusTimeout, "%s with no match: result %d (%s), want chorusTimeout: %s", what,
          res, chorusGetErrorString(res), text);
    CHECK(took >= 0.9 && took <= 3.0, "%s with no match returned after %.2f s, want 0.9-3 s", what,
          took);
    CHECK(strstr(text, "rank 1") != NULL, "%s's error does not name rank 1: %s", what, text);
    CHECK(strstr(text, "after 0 ms") == NULL, "%s's error says it waited 0 ms: %s", what, text);
    free(buf);
}

static void rank_thread(chorusComm_t comm, int r, int n)
{
    if (timeout_mode) {
        no_match(comm, r, timeout_mode == 2 ? "chorusSend" : "chorusRecv", timeout_mode == 3);
    } else if (mixed_mode) {
        /* 4 KiB fits the FIFO; 3 MiB does not. After a failure the communicator is aborted. */
        int failed = 0;
        for (int a2a = 0; a2a < 2 && !failed; a2a++)
            failed = mixed_group(comm, r, n, 4096, a2a) || mixed_group(comm, r, n, 3 * MIB, a2a);
    } else {
        rank_body(comm, r, n);
    }
}

/* NCCL's single-process pattern: this one thread issues the call of every rank in one group. */
static void single_thread(chorusComm_t *comms, int n)
{
    size_t count = 100003;
    int32_t **sb = calloc(n, sizeof(int32_t *)), **rb = calloc(n, sizeof(int32_t *));
    int32_t **bb = calloc(n, sizeof(int32_t *));
    for (int i = 0; i < n; i++) {
        sb[i] = malloc(count * 4);
        rb[i] = malloc(count * 4);
        bb[i] = malloc(count * 4);
        for (size_t k = 0; k < count; k++) {
            sb[i][k] = (int32_t)(i * 1000 + k % 1000);
            bb[i][k] = i == n - 1 ? (int32_t)(7 * k) : -1;
        }
    }
    /* Sum over i of (1000 i + k % 1000) = 1000 n(n-1)/2 + n (k % 1000). */
    CHECK_OK(chorusGroupStart());
    for (int i = 0; i < n; i++)
        CHECK_OK(chorusAllReduce(sb[i], rb[i], count, chorusInt32, chorusSum, comms[i], NULL));
    CHECK_OK(chorusGroupEnd());
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < count; k++) {
            int32_t want = (int32_t)(1000 * n * (n - 1) / 2 + n * (int)(k % 1000));
            if (rb[i][k] != want) {
                FAIL("single-thread group all-reduce: rank %d element %zu is %d, want %d", i, k,
                     rb[i][k], want);
                break;
            }
        }
    /* Two collectives per communicator in one group: each comm's calls run in issue order. */
    CHECK_OK(chorusGroupStart());
    for (int i = 0; i < n; i++) {
        CHECK_OK(chorusAllReduce(sb[i], sb[i], count, chorusInt32, chorusMax, comms[i], NULL));
        CHECK_OK(chorusBroadcast(bb[i], bb[i], count, chorusInt32, n - 1, comms[i], NULL));
    }
    CHECK_OK(chorusGroupEnd());
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < count; k++) {
            int32_t want_max = (int32_t)((n - 1) * 1000 + k % 1000);
            if (sb[i][k] != want_max || bb[i][k] != (int32_t)(7 * k)) {
                FAIL("single-thread group max+broadcast: rank %d element %zu is %d/%d, want %d/%d",
                     i, k, sb[i][k], bb[i][k], want_max, (int32_t)(7 * k));
                break;
            }
        }
    for (int i = 0; i < n; i++) {
        free(sb[i]);
        free(rb[i]);
        free(bb[i]);
    }
    /* A 3 MiB send ring, every rank's send and recv issued by this thread in one group. */
    size_t nbytes = 3 * MIB;
    void **s = calloc(n, sizeof(void *)), **d = calloc(n, sizeof(void *));
    for (int i = 0; i < n; i++) {
        s[i] = send_alloc(nbytes, seed_of(i, (i + 1) % n, 700));
        d[i] = recv_alloc(nbytes);
    }
    CHECK_OK(chorusGroupStart());
    for (int i = 0; i < n; i++) {
        CHECK_OK(chorusSend(s[i], nbytes, chorusUint8, (i + 1) % n, comms[i], NULL));
        CHECK_OK(chorusRecv(d[i], nbytes, chorusUint8, (i - 1 + n) % n, comms[i], NULL));
    }
    CHECK_OK(chorusGroupEnd());
    for (int i = 0; i < n; i++) {
        expect_msg("single-thread group 3 MiB send ring", i, d[i], nbytes,
                   seed_of((i - 1 + n) % n, i, 700));
        free(s[i]);
        free(d[i]);
    }
    free(s);
    free(d);
    free(sb);
    free(rb);
    free(bb);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    mixed_mode = argc > 2 && strcmp(argv[2], "mixed") == 0;
    int timeout = argc > 2 && strcmp(argv[2], "timeout") == 0;
    if (n < 1 || n > 64 || (argc > 2 && !mixed_mode && !timeout) || (timeout && n != 2)) {
        printf("usage: test_p2p NRANKS (1..64) [mixed], or test_p2p 2 timeout\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (timeout) {
        setenv("CHORUS_TIMEOUT_MS", "1000", 1);
        for (timeout_mode = 1; timeout_mode <= 3; timeout_mode++) {
            long before = harness_failures;
            chorusComm_t comms[2];
            if (harness_init_all(comms, 2) != 0 || harness_run_ranks(comms, 2, rank_thread) != 0)
                return 1;
            for (int i = 0; i < 2; i++)
                chorusCommDestroy(comms[i]); /* rank 0's is aborted: it may say so */
            harness_report(before,
                           "%s whose peer never posts the match: chorusTimeout naming "
                           "it, after 0.9-3 s (CHORUS_TIMEOUT_MS=1000)",
                           timeout_mode == 1   ? "a receive"
                           : timeout_mode == 2 ? "a 4 MiB send"
                                               : "a receive before any connection to the peer");
        }
        return harness_failures ? 1 : 0;
    }
    if (mixed_mode) /* a deadlock shows as a timeout failure, well before ctest's TIMEOUT */
        setenv("CHORUS_TIMEOUT_MS", "10000", 0);
    printf("test_p2p: %d thread ranks%s\n", n,
           mixed_mode ? ", groups mixing send/recv and "
                        "a collective"
                      : "");
    chorusComm_t *comms = calloc(n, sizeof(chorusComm_t));
    if (harness_init_all(comms, n) != 0 || harness_run_ranks(comms, n, rank_thread) != 0)
        return 1;
    if (mixed_mode) {
        harness_report(0,
                       "groups {send, all-reduce or all-to-all, recv} of 4 KiB and 3 MiB on %d "
                       "thread ranks",
                       n);
        for (int i = 0; i < n; i++)
            chorusCommDestroy(comms[i]); /* an aborted communicator may report its abort */
        free(comms);
        return harness_failures ? 1 : 0;
    }
    harness_report(0,
                   "grouped send/recv (ring shift, pairwise 3 MiB, self, same peer, count 0) "
                   "and alltoall on %d thread ranks",
                   n);
    long before = harness_failures;
    single_thread(comms, n);
    harness_report(before,
                   "single-thread group over %d communicators (all-reduce, "
                   "max+broadcast, 3 MiB send ring)",
                   n);
    harness_destroy_all(comms, n);
    free(comms);
    return harness_finish("test_p2p %d ranks", n);
}

#else
/* ---- one rank per MPI process ---- */

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, n;
    long total = harness_mpi_run(rank_body, &r, &n);
    if (r == 0)
        printf("%s test_p2p_mpi: grouped send/recv (ring shift, pairwise 3 MiB, self, same peer, "
               "count 0) and alltoall on %d MPI ranks (%ld failures)\n",
               total ? "FAIL" : "PASS", n, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
#endif
