/*
 * test_stream.c: proves host streams: calls queued on one run in issue order and all complete.
 *
 * Every rank (a thread; chorusCommInitAll) makes its own host stream and queues 200 calls on it
 * without waiting: 40 steps of two dependency chains (an in-place uint32 all-reduce chain that
 * alternates sum and prod, where any reordering changes the result; and an int64 chain that
 * ping-pongs between two buffers, each step reading the previous step's output), 10 grouped
 * send/recv rings, and 150 independent all-reduce / broadcast / reduce / all-gather /
 * reduce-scatter / all-to-all calls over int32/float32/float64/int64 and counts {1, 7, 1031, 4099},
 * each with its own buffers. chorusStreamQuery answers chorusInProgress or chorusSuccess while they
 * run; after chorusStreamSynchronize every result is checked bit-exact against its closed form and
 * the query answers chorusSuccess. Also: NULL-stream calls have finished when they return; work
 * still queued when chorusStreamDestroy is called is not lost (chorusCommFinalize then sees it
 * finished); a pointer that is not a live host stream is refused with chorusInvalidArgument by the
 * collectives and by every stream call, and a destroyed stream is refused the same way.
 *
 *   test_stream N     N thread ranks (default 4)
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "harness.h"

#define NCALLS 200

/* ---- typed element access: every value used is an integer exact in every dtype used ---- */

static void put(void *buf, chorusDataType_t t, size_t i, int64_t v)
{
    switch (t) {
    case chorusInt32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case chorusFloat32:
        ((float *)buf)[i] = (float)v;
        break;
    case chorusFloat64:
        ((double *)buf)[i] = (double)v;
        break;
    default:
        ((int64_t *)buf)[i] = v;
        break;
    }
}

/* 1 when element i holds exactly v (bit-exact for the float types: v is exact there). */
static int holds(const void *buf, chorusDataType_t t, size_t i, int64_t v)
{
    switch (t) {
    case chorusInt32:
        return ((const int32_t *)buf)[i] == (int32_t)v;
    case chorusFloat32: {
        float f = (float)v, g = ((const float *)buf)[i];
        return memcmp(&f, &g, 4) == 0;
    }
    case chorusFloat64: {
        double f = (double)v, g = ((const double *)buf)[i];
        return memcmp(&f, &g, 8) == 0;
    }
    default:
        return ((const int64_t *)buf)[i] == v;
    }
}

/* Input of rank r, element i, call j: small, increasing in r. */
static int64_t v_in(int r, size_t i, int j)
{
    return (int64_t)(r + 1) * 3 + (int64_t)((i + (size_t)j) % 11);
}

/* ---- one independent call ---- */

typedef enum {
    K_ALLREDUCE,
    K_BROADCAST,
    K_REDUCE,
    K_ALLGATHER,
    K_REDUCESCATTER,
    K_ALLTOALL
} kind_t;
static const char *kind_names[] = {"allreduce", "broadcast",     "reduce",
                                   "allgather", "reducescatter", "alltoall"};

typedef struct call {
    kind_t kind;
    chorusDataType_t t;
    size_t count;
    int root;
    void *send, *recv;
} call_t;

static void call_setup(call_t *c, int j, int r, int n)
{
    static const chorusDataType_t types[] = {chorusInt32, chorusFloat32, chorusFloat64,
                                             chorusInt64};
    static const size_t counts[] = {1, 7, 1031, 4099};
    c->kind = (kind_t)(j % 6);
    c->t = types[(j / 6) % 4];
    c->count = counts[(j / 3) % 4];
    c->root = j % n;
    size_t es = harness_dtype_nbytes(c->t), ns = c->count, nr = c->count;
    if (c->kind == K_ALLGATHER)
        nr = c->count * n;
    if (c->kind == K_REDUCESCATTER)
        ns = c->count * n;
    if (c->kind == K_ALLTOALL)
        ns = nr = c->count * n;
    c->send = malloc(ns * es);
    c->recv = malloc(nr * es);
    memset(c->recv, 0xee, nr * es);
    for (size_t i = 0; i < ns; i++)
        put(c->send, c->t, i, c->kind == K_ALLTOALL ? r * 1000 + (int64_t)i : v_in(r, i, j));
}

static chorusResult_t call_issue(const call_t *c, chorusComm_t comm, chorusStream_t s)
{
    switch (c->kind) {
    case K_ALLREDUCE:
        return chorusAllReduce(c->send, c->recv, c->count, c->t, chorusSum, comm, s);
    case K_BROADCAST:
        return chorusBroadcast(c->send, c->recv, c->count, c->t, c->root, comm, s);
    case K_REDUCE:
        return chorusReduce(c->send, c->recv, c->count, c->t, chorusMax, c->root, comm, s);
    case K_ALLGATHER:
        return chorusAllGather(c->send, c->recv, c->count, c->t, comm, s);
    case K_REDUCESCATTER:
        return chorusReduceScatter(c->send, c->recv, c->count, c->t, chorusSum, comm, s);
    default:
        return chorusAlltoAll(c->send, c->recv, c->count, c->t, comm, s);
    }
}

/* Check the result against the closed form; returns 0 when it matches. */
static int call_check(const call_t *c, int j, int r, int n)
{
    size_t nr = c->kind == K_ALLGATHER || c->kind == K_ALLTOALL ? c->count * n : c->count;
    if (c->kind == K_REDUCE && r != c->root)
        return 0; /* recvbuff matters only at the root */
    for (size_t e = 0; e < nr; e++) {
        int64_t want;
        size_t i = e % c->count;
        int q = (int)(e / c->count);
        switch (c->kind) {
        case K_ALLREDUCE: /* sum over r of 3(r+1) + (i+j)%11 */
            want = 3LL * n * (n + 1) / 2 + (int64_t)n * (int64_t)((i + (size_t)j) % 11);
            break;
        case K_BROADCAST:
            want = v_in(c->root, i, j);
            break;
        case K_REDUCE:
            want = v_in(n - 1, i, j);
            break; /* max: the input grows with r */
        case K_ALLGATHER:
            want = v_in(q, i, j);
            break;
        case K_REDUCESCATTER:
            want = 0;
            for (int s = 0; s < n; s++)
                want += v_in(s, (size_t)r * c->count + i, j);
            break;
        default: /* block q came from rank q: its elements r*count .. r*count+count-1 */
            want = (int64_t)q * 1000 + (int64_t)r * (int64_t)c->count + (int64_t)i;
            break;
        }
        if (!holds(c->recv, c->t, e, want)) {
            FAIL("rank %d call #%d (%s dtype %d count %zu root %d): element %zu wrong, want %lld",
                 r, j, kind_names[c->kind], (int)c->t, c->count, c->root, e, (long long)want);
            return 1;
        }
    }
    return 0;
}

/* ---- one rank ---- */

#define CHAIN_COUNT 1031
#define PING_COUNT 4099
#define RING_COUNT 100003

#define MAX_RANKS 64

/* Rank r saw chorusStreamQuery answer chorusInProgress while its calls were queued. */
static int saw_in_progress[MAX_RANKS];

static void rank_thread(chorusComm_t comm, int r, int n)
{
    chorusStream_t s = NULL;
    CHECK_OK(chorusStreamCreate(&s));
    if (s == NULL)
        return;

    /* Chain A, in place, uint32: x -> sum over ranks (= n x), then x -> prod over ranks (= x^n),
     * alternating. Any two steps swapped give a different value. */
    uint32_t *chain = malloc(CHAIN_COUNT * 4);
    for (size_t i = 0; i < CHAIN_COUNT; i++)
        chain[i] = (uint32_t)(r + 1 + i % 13);
    /* Chain B, int64 ping-pong: step k sums buffer k%2 into buffer (k+1)%2 (wraps: exact). */
    int64_t *ping[2] = {malloc(PING_COUNT * 8), malloc(PING_COUNT * 8)};
    for (size_t i = 0; i < PING_COUNT; i++) {
        ping[0][i] = (r + 1) * (int64_t)(1 + i % 5);
        ping[1][i] = -1;
    }
    /* Grouped rings: rank r sends {r*100003 + i + 7g} to r+1. */
    int32_t *ring_s = malloc(RING_COUNT * 4), *ring_r[10];
    for (size_t i = 0; i < RING_COUNT; i++)
        ring_s[i] = (int32_t)((size_t)r * RING_COUNT + i);
    call_t calls[NCALLS];
    int ncalls = 0, chain_steps = 0, ping_steps = 0, rings = 0;
    for (int j = 0; j < NCALLS; j++) {
        if (j % 5 == 0) {
            chorusRedOp_t op = chain_steps++ % 2 == 0 ? chorusSum : chorusProd;
            CHECK_OK(chorusAllReduce(chain, chain, CHAIN_COUNT, chorusUint32, op, comm, s));
        } else if (j % 5 == 1) {
            int k = ping_steps++;
            CHECK_OK(chorusAllReduce(ping[k % 2], ping[(k + 1) % 2], PING_COUNT, chorusInt64,
                                     chorusSum, comm, s));
        } else if (j % 20 == 2) {
            ring_r[rings] = malloc(RING_COUNT * 4);
            CHECK_OK(chorusGroupStart());
            CHECK_OK(chorusSend(ring_s, RING_COUNT, chorusInt32, (r + 1) % n, comm, s));
            CHECK_OK(chorusRecv(ring_r[rings], RING_COUNT, chorusInt32, (r - 1 + n) % n, comm, s));
            CHECK_OK(chorusGroupEnd());
            rings++;
        } else {
            call_setup(&calls[ncalls], j, r, n);
            CHECK_OK(call_issue(&calls[ncalls], comm, s));
            ncalls++;
        }
        chorusResult_t q = chorusStreamQuery(s);
        if (q == chorusInProgress)
            saw_in_progress[r] = 1;
        else if (q != chorusSuccess)
            FAIL("rank %d: chorusStreamQuery while calls are queued returned %d (%s)", r, (int)q,
                 chorusGetErrorString(q));
    }
    CHECK_OK(chorusStreamSynchronize(s));
    CHECK_RES(chorusStreamQuery(s), chorusSuccess);

    /* Chain A reference, in uint32 (wrap-around is exact): first sum of (r+1+i%13) over ranks. */
    int bad = 0;
    for (size_t i = 0; i < CHAIN_COUNT && !bad; i++) {
        uint32_t x = (uint32_t)(n * (n + 1) / 2 + n * (int)(i % 13));
        for (int k = 1; k < chain_steps; k++) {
            if (k % 2 == 0) {
                x = x * (uint32_t)n;
            } else {
                uint32_t p = 1;
                for (int m = 0; m < n; m++)
                    p *= x;
                x = p;
            }
        }
        if (chain[i] != x) {
            FAIL("rank %d: in-place sum/prod chain of %d steps: element %zu is %u, want %u", r,
                 chain_steps, i, chain[i], x);
            bad = 1;
        }
    }
    /* Chain B: after step k buffer (k+1)%2 holds n^k * (n(n+1)/2) * (1 + i%5) mod 2^64. */
    for (int last = ping_steps - 2; last < ping_steps; last++) {
        uint64_t scale = (uint64_t)n * (uint64_t)(n + 1) / 2;
        for (int k = 0; k < last; k++)
            scale *= (uint64_t)n;
        const int64_t *b = ping[(last + 1) % 2];
        for (size_t i = 0; i < PING_COUNT; i++)
            if ((uint64_t)b[i] != scale * (uint64_t)(1 + i % 5)) {
                FAIL("rank %d: ping-pong chain step %d: element %zu is %lld, want %llu", r, last, i,
                     (long long)b[i], (unsigned long long)(scale * (uint64_t)(1 + i % 5)));
                break;
            }
    }
    for (int g = 0; g < rings; g++) {
        int prev = (r - 1 + n) % n;
        for (size_t i = 0; i < RING_COUNT; i++)
            if (ring_r[g][i] != (int32_t)((size_t)prev * RING_COUNT + i)) {
                FAIL("rank %d: grouped send/recv ring #%d on the stream: element %zu wrong", r, g,
                     i);
                break;
            }
        free(ring_r[g]);
    }
    for (int c = 0, j = 0; j < NCALLS; j++) {
        if (j % 5 == 0 || j % 5 == 1 || j % 20 == 2)
            continue;
        call_check(&calls[c], j, r, n);
        free(calls[c].send);
        free(calls[c].recv);
        c++;
    }

    /* A NULL-stream call has finished when it returns. */
    int64_t x[3] = {r, 10 * r, -r}, y[3] = {0, 0, 0};
    CHECK_OK(chorusAllReduce(x, y, 3, chorusInt64, chorusSum, comm, NULL));
    int64_t tri = (int64_t)n * (n - 1) / 2;
    if (y[0] != tri || y[1] != 10 * tri || y[2] != -tri)
        FAIL("rank %d: NULL-stream all-reduce had not finished when it returned: %lld %lld %lld", r,
             (long long)y[0], (long long)y[1], (long long)y[2]);
    CHECK_OK(chorusStreamSynchronize(NULL));
    CHECK_OK(chorusStreamQuery(NULL));

    /* A pointer that is not a live host stream is refused and nothing runs. */
    int not_a_stream = 12345;
    int64_t z = 99;
    CHECK_RES(chorusAllReduce(x, &z, 1, chorusInt64, chorusSum, comm, &not_a_stream),
              chorusInvalidArgument);
    if (strstr(chorusGetLastError(comm), "stream") == NULL)
        FAIL("rank %d: bogus stream: chorusGetLastError does not name the stream: \"%s\"", r,
             chorusGetLastError(comm));
    if (z != 99)
        FAIL("rank %d: a refused call with a bogus stream wrote its recvbuff", r);
    CHECK_RES(chorusStreamSynchronize(&not_a_stream), chorusInvalidArgument);
    CHECK_RES(chorusStreamQuery(&not_a_stream), chorusInvalidArgument);
    CHECK_RES(chorusStreamDestroy(&not_a_stream), chorusInvalidArgument);

    /* Destroy with calls still queued: they are not lost. Finalize waits for them. */
    int32_t *late[10];
    for (int k = 0; k < 10; k++) {
        late[k] = malloc(PING_COUNT * 4);
        for (size_t i = 0; i < PING_COUNT; i++)
            late[k][i] = (int32_t)(r + k + (int)i);
        CHECK_OK(chorusAllReduce(late[k], late[k], PING_COUNT, chorusInt32, chorusSum, comm, s));
    }
    CHECK_OK(chorusStreamDestroy(s));
    CHECK_OK(chorusCommFinalize(comm));
    for (int k = 0; k < 10; k++) {
        for (size_t i = 0; i < PING_COUNT; i++)
            if (late[k][i] != (int32_t)(n * (n - 1) / 2 + n * (k + (int)i))) {
                FAIL("rank %d: all-reduce #%d queued before chorusStreamDestroy: element %zu is "
                     "%d, want %d",
                     r, k, i, late[k][i], n * (n - 1) / 2 + n * (k + (int)i));
                break;
            }
        free(late[k]);
    }
    free(chain);
    free(ping[0]);
    free(ping[1]);
    free(ring_s);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (n < 1 || n > MAX_RANKS) {
        printf("usage: test_stream NRANKS (1..64)\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("test_stream: %d thread ranks, %d calls queued per rank on its host stream\n", n,
           NCALLS);
    CHECK_RES(chorusStreamCreate(NULL), chorusInvalidArgument);
    chorusComm_t *comms = calloc(n, sizeof(chorusComm_t));
    if (harness_init_all(comms, n) != 0 || harness_run_ranks(comms, n, rank_thread) != 0)
        return 1;
    int in_progress = 0;
    for (int i = 0; i < n; i++)
        in_progress += saw_in_progress[i];
    harness_report(0,
                   "%d queued calls per rank (2 dependency chains, grouped rings, 6 "
                   "collectives x 4 dtypes x 4 counts) ran in order; chorusStreamQuery said "
                   "InProgress on %d of %d ranks while queued, Success after "
                   "chorusStreamSynchronize",
                   NCALLS, in_progress, n);
    harness_report(0, "NULL-stream calls complete on return; queued work survives "
                      "chorusStreamDestroy; bogus streams are refused with chorusInvalidArgument");

    /* A destroyed stream is no longer accepted (no other stream exists now, so its address
     * cannot have been reused by a live one). */
    long before = harness_failures;
    chorusStream_t dead = NULL;
    CHECK_OK(chorusStreamCreate(&dead));
    CHECK_OK(chorusStreamDestroy(dead));
    CHECK_RES(chorusStreamQuery(dead), chorusInvalidArgument);
    CHECK_RES(chorusStreamSynchronize(dead), chorusInvalidArgument);
    CHECK_RES(chorusStreamDestroy(dead), chorusInvalidArgument);
    harness_report(before, "a destroyed stream is refused with chorusInvalidArgument");
    harness_destroy_all(comms, n);
    free(comms);
    return harness_finish("test_stream %d ranks", n);
}
