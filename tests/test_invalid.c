/*
 * test_invalid.c: proves that invalid calls are refused cleanly and leave everything usable.
 *
 * The invalid-argument table, on a 2-rank communicator (thread ranks): NULL comm; NULL sendbuff or
 * recvbuff with count > 0 for every collective and send/recv (NULL with count 0 is accepted);
 * datatype and op out of range (42, -1, chorusNumTypes/chorusNumOps); root -1 and nranks for
 * Broadcast/Reduce; peer -1 and nranks for Send/Recv; count * datatype size (* nranks for
 * AllGather/ReduceScatter/AlltoAll) overflowing size_t; a bogus stream. Every entry must return
 * chorusInvalidArgument, leave both buffers bit-for-bit as they were, leave a last-error text that
 * names the function and the argument, and leave the communicator usable: a valid all-reduce right
 * after it gives the right result. Overlapping sendbuff and recvbuff not laid out in place
 * (every collective, 16 floats; on rank 1 an all-gather's and a reduce-scatter's sendbuff ==
 * recvbuff) are refused the same way, naming the overlap; a send to self or
 * a receive from self outside a group with chorusInvalidUsage. Count 0 alone
 * (outside a group, the quick way): accepted with NULL buffers, a bad datatype/op/root still
 * refused by name, the next valid call clears the thread's error text. An invalid call inside a
 * group is refused at once and the group's valid calls still run. Also chorusInvalidUsage for
 * chorusGroupEnd without chorusGroupStart; chorusInvalidArgument for a config not made by
 * CHORUS_CONFIG_INITIALIZER, bad config fields, nranks < 1, rank outside 0..nranks-1, a NULL
 * output, an id with a bad magic, and bad chorusCommInitAll/Split arguments. Aborted communicator:
 * rank 0 of a 2-rank communicator with config timeoutMs = 300 all-reduces 4 MiB alone; it must get
 * chorusTimeout or chorusRemoteError in bounded time (not hang), the async error must report it,
 * the next call (and a count-0 one) must be refused with chorusInvalidUsage naming the abort
 * (buffers untouched), and both ranks then destroy without hanging; again with 8 floats and rank 1
 * calling after rank 0 failed, which must fail too once rank 0's notice reached it. A CHORUS_ROOT
 * that answers junk fails env init with chorusInvalidUsage saying so. chorusMemAlloc/chorusMemFree:
 * NULL ptr and 0 bytes refused; freeing a pointer inside a buffer but not its start refused with
 * chorusInvalidArgument (the buffer stays usable and is freed), and so are a second free, a stack
 * buffer and malloc's memory (also of memory made without a memfd, no descriptor left);
 * chorusMemAllocDevice in a process without CUDA is chorusInvalidUsage naming CUDA. Malformed
 * environment: each bad CHORUS_* value makes init (and chorusGetUniqueId, and chorusCommInitAll)
 * fail with chorusInvalidArgument and a message naming the variable; once unset, init with the same
 * id succeeds. Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

#define NRANKS 2
#define BUF_BYTES 65536

/* ---- the valid call that proves the communicator still works ---- */

static chorusComm_t comms[NRANKS];

/* One thread issues both ranks' all-reduce in one group (NCCL's single-thread pattern). */
static void valid_allreduce(const char *after)
{
    enum { COUNT = 1031 };
    static int32_t in[NRANKS][COUNT], out[NRANKS][COUNT];
    for (int r = 0; r < NRANKS; r++)
        for (int i = 0; i < COUNT; i++) {
            in[r][i] = (r + 1) * 1000 + i;
            out[r][i] = -7;
        }
    chorusResult_t res = chorusGroupStart();
    for (int r = 0; r < NRANKS && res == chorusSuccess; r++)
        res = chorusAllReduce(in[r], out[r], COUNT, chorusInt32, chorusSum, comms[r], NULL);
    chorusResult_t end = chorusGroupEnd();
    if (res != chorusSuccess || end != chorusSuccess) {
        FAIL("valid all-reduce after \"%s\" failed: %s / %s: %s", after, chorusGetErrorString(res),
             chorusGetErrorString(end), chorusGetLastError(NULL));
        return;
    }
    for (int r = 0; r < NRANKS; r++)
        for (int i = 0; i < COUNT; i++)
            if (out[r][i] != 3000 + 2 * i) { /* (1000 + i) + (2000 + i) */
                FAIL("valid all-reduce after \"%s\": rank %d element %d is %d, want %d", after, r,
                     i, out[r][i], 3000 + 2 * i);
                return;
            }
}

/* ---- the table ---- */

typedef enum {
    F_ALLREDUCE,
    F_BROADCAST,
    F_REDUCE,
    F_ALLGATHER,
    F_REDUCESCATTER,
    F_ALLTOALL,
    F_SEND,
    F_RECV
} fn_t;
static const char *fn_names[] = {"chorusAllReduce", "chorusBroadcast",     "chorusReduce",
                                 "chorusAllGather", "chorusReduceScatter", "chorusAlltoAll",
                                 "chorusSend",      "chorusRecv"};

typedef struct bad {
    const char *what;
    fn_t fn;
    int null_comm, null_send, null_recv, bogus_stream;
    size_t count;
    int dtype, op, root; /* root: Broadcast/Reduce root, Send/Recv peer */
    const char *word; /* the argument the error must name */
} bad_t;

#define F32 chorusFloat32
#define SUM chorusSum
#define HALF_MAX (SIZE_MAX / 2)
/* count * 4 fits in size_t, count * 4 * 2 ranks does not. */
#define F32_TIMES_N_OVERFLOW (SIZE_MAX / 8 + 1)

static const bad_t table[] = {
    {"comm NULL", F_ALLREDUCE, 1, 0, 0, 0, 16, F32, SUM, 0, "comm"},
    {"comm NULL", F_BROADCAST, 1, 0, 0, 0, 16, F32, SUM, 0, "comm"},
    {"comm NULL", F_REDUCE, 1, 0, 0, 0, 16, F32, SUM, 0, "comm"},
    {"comm NULL", F_ALLGATHER, 1, 0, 0, 0, 16, F32, SUM, 0, "comm"},
    {"comm NULL", F_REDUCESCATTER, 1, 0, 0, 0, 16, F32, SUM, 0, "comm"},
    {"comm NULL", F_ALLTOALL, 1, 0, 0, 0, 16, F32, SUM, 0, "comm"},
    {"comm NULL", F_SEND, 1, 0, 0, 0, 16, F32, SUM, 1, "comm"},
    {"comm NULL", F_RECV, 1, 0, 0, 0, 16, F32, SUM, 1, "comm"},
    {"sendbuff NULL", F_ALLREDUCE, 0, 1, 0, 0, 16, F32, SUM, 0, "sendbuff"},
    {"recvbuff NULL", F_ALLREDUCE, 0, 0, 1, 0, 16, F32, SUM, 0, "recvbuff"},
    {"sendbuff NULL at the root", F_BROADCAST, 0, 1, 0, 0, 16, F32, SUM, 0, "sendbuff"},
    {"recvbuff NULL", F_BROADCAST, 0, 0, 1, 0, 16, F32, SUM, 0, "recvbuff"},
    {"sendbuff NULL", F_REDUCE, 0, 1, 0, 0, 16, F32, SUM, 0, "sendbuff"},
    {"recvbuff NULL at the root", F_REDUCE, 0, 0, 1, 0, 16, F32, SUM, 0, "recvbuff"},
    {"sendbuff NULL", F_ALLGATHER, 0, 1, 0, 0, 16, F32, SUM, 0, "sendbuff"},
    {"recvbuff NULL", F_ALLGATHER, 0, 0, 1, 0, 16, F32, SUM, 0, "recvbuff"},
    {"sendbuff NULL", F_REDUCESCATTER, 0, 1, 0, 0, 16, F32, SUM, 0, "sendbuff"},
    {"recvbuff NULL", F_REDUCESCATTER, 0, 0, 1, 0, 16, F32, SUM, 0, "recvbuff"},
    {"sendbuff NULL", F_ALLTOALL, 0, 1, 0, 0, 16, F32, SUM, 0, "sendbuff"},
    {"recvbuff NULL", F_ALLTOALL, 0, 0, 1, 0, 16, F32, SUM, 0, "recvbuff"},
    {"sendbuff NULL", F_SEND, 0, 1, 0, 0, 16, F32, SUM, 1, "sendbuff"},
    {"recvbuff NULL", F_RECV, 0, 0, 1, 0, 16, F32, SUM, 1, "recvbuff"},
    {"datatype 42", F_ALLREDUCE, 0, 0, 0, 0, 16, 42, SUM, 0, "datatype"},
    {"datatype -1", F_ALLREDUCE, 0, 0, 0, 0, 16, -1, SUM, 0, "datatype"},
    {"datatype chorusNumTypes", F_ALLREDUCE, 0, 0, 0, 0, 16, chorusNumTypes, SUM, 0, "datatype"},
    {"datatype 42", F_BROADCAST, 0, 0, 0, 0, 16, 42, SUM, 0, "datatype"},
    {"datatype -1", F_REDUCE, 0, 0, 0, 0, 16, -1, SUM, 0, "datatype"},
    {"datatype 42", F_ALLGATHER, 0, 0, 0, 0, 16, 42, SUM, 0, "datatype"},
    {"datatype -1", F_REDUCESCATTER, 0, 0, 0, 0, 16, -1, SUM, 0, "datatype"},
    {"datatype 42", F_ALLTOALL, 0, 0, 0, 0, 16, 42, SUM, 0, "datatype"},
    {"datatype 42", F_SEND, 0, 0, 0, 0, 16, 42, SUM, 1, "datatype"},
    {"datatype -1", F_RECV, 0, 0, 0, 0, 16, -1, SUM, 1, "datatype"},
    {"op 42", F_ALLREDUCE, 0, 0, 0, 0, 16, F32, 42, 0, "op 42"},
    {"op -1", F_ALLREDUCE, 0, 0, 0, 0, 16, F32, -1, 0, "op -1"},
    {"op chorusNumOps", F_ALLREDUCE, 0, 0, 0, 0, 16, F32, chorusNumOps, 0, "op 5"},
    {"op 42", F_REDUCE, 0, 0, 0, 0, 16, F32, 42, 0, "op 42"},
    {"op -1", F_REDUCESCATTER, 0, 0, 0, 0, 16, F32, -1, 0, "op -1"},
    {"root -1", F_BROADCAST, 0, 0, 0, 0, 16, F32, SUM, -1, "root"},
    {"root nranks", F_BROADCAST, 0, 0, 0, 0, 16, F32, SUM, NRANKS, "root"},
    {"root -1", F_REDUCE, 0, 0, 0, 0, 16, F32, SUM, -1, "root"},
    {"root nranks", F_REDUCE, 0, 0, 0, 0, 16, F32, SUM, NRANKS, "root"},
    {"peer -1", F_SEND, 0, 0, 0, 0, 16, F32, SUM, -1, "peer"},
    {"peer nranks", F_SEND, 0, 0, 0, 0, 16, F32, SUM, NRANKS, "peer"},
    {"peer -1", F_RECV, 0, 0, 0, 0, 16, F32, SUM, -1, "peer"},
    {"peer nranks", F_RECV, 0, 0, 0, 0, 16, F32, SUM, NRANKS, "peer"},
    {"count SIZE_MAX/2 float32", F_ALLREDUCE, 0, 0, 0, 0, HALF_MAX, F32, SUM, 0, "count"},
    {"count SIZE_MAX/2 float32", F_BROADCAST, 0, 0, 0, 0, HALF_MAX, F32, SUM, 0, "count"},
    {"count SIZE_MAX/2 float32", F_REDUCE, 0, 0, 0, 0, HALF_MAX, F32, SUM, 0, "count"},
    {"count SIZE_MAX/2+1 int8 (count*nranks overflows)", F_ALLGATHER, 0, 0, 0, 0, HALF_MAX + 1,
     chorusInt8, SUM, 0, "count"},
    {"count SIZE_MAX/8+1 float32 (count*4 fits, *nranks overflows)", F_ALLGATHER, 0, 0, 0, 0,
     F32_TIMES_N_OVERFLOW, F32, SUM, 0, "count"},
    {"count SIZE_MAX/8+1 float32 (count*4 fits, *nranks overflows)", F_REDUCESCATTER, 0, 0, 0, 0,
     F32_TIMES_N_OVERFLOW, F32, SUM, 0, "count"},
    {"count SIZE_MAX/8+1 float32 (count*4 fits, *nranks overflows)", F_ALLTOALL, 0, 0, 0, 0,
     F32_TIMES_N_OVERFLOW, F32, SUM, 0, "count"},
    {"count SIZE_MAX/4 float64", F_SEND, 0, 0, 0, 0, SIZE_MAX / 4, chorusFloat64, SUM, 1, "count"},
    {"count SIZE_MAX/2 float32", F_RECV, 0, 0, 0, 0, HALF_MAX, F32, SUM, 1, "count"},
    {"bogus stream", F_ALLREDUCE, 0, 0, 0, 1, 16, F32, SUM, 0, "stream"},
    {"bogus stream", F_BROADCAST, 0, 0, 0, 1, 16, F32, SUM, 0, "stream"},
    {"bogus stream", F_ALLTOALL, 0, 0, 0, 1, 16, F32, SUM, 0, "stream"},
    {"bogus stream", F_SEND, 0, 0, 0, 1, 16, F32, SUM, 1, "stream"},
};

static chorusResult_t issue(fn_t fn, const void *s, void *r, size_t count, int dtype, int op,
                            int root, chorusComm_t comm, chorusStream_t stream)
{
    chorusDataType_t t = (chorusDataType_t)dtype;
    chorusRedOp_t o = (chorusRedOp_t)op;
    switch (fn) {
    case F_ALLREDUCE:
        return chorusAllReduce(s, r, count, t, o, comm, stream);
    case F_BROADCAST:
        return chorusBroadcast(s, r, count, t, root, comm, stream);
    case F_REDUCE:
        return chorusReduce(s, r, count, t, o, root, comm, stream);
    case F_ALLGATHER:
        return chorusAllGather(s, r, count, t, comm, stream);
    case F_REDUCESCATTER:
        return chorusReduceScatter(s, r, count, t, o, comm, stream);
    case F_ALLTOALL:
        return chorusAlltoAll(s, r, count, t, comm, stream);
    case F_SEND:
        return chorusSend(s, count, t, root, comm, stream);
    default:
        return chorusRecv(r, count, t, root, comm, stream);
    }
}

static unsigned char sbuf[BUF_BYTES], rbuf[BUF_BYTES];

/* chorusGetLastError(comm) read on a fresh thread (no error text of its own): the comm's. */
static char other_text[1024];

static void *read_comm_error(void *comm)
{
    snprintf(other_text, sizeof(other_text), "%s", chorusGetLastError((chorusComm_t)comm));
    return NULL;
}

static void run_table(void)
{
    int bogus = 0;
    int n = (int)(sizeof(table) / sizeof(table[0]));
    for (int i = 0; i < n; i++) {
        const bad_t *b = &table[i];
        char what[160];
        snprintf(what, sizeof(what), "%s %s", fn_names[b->fn], b->what);
        harness_fill(sbuf, BUF_BYTES, (uint64_t)i);
        harness_fill(rbuf, BUF_BYTES, (uint64_t)i + 1000000);
        chorusComm_t comm = b->null_comm ? NULL : comms[0];
        chorusResult_t res =
            issue(b->fn, b->null_send ? NULL : sbuf, b->null_recv ? NULL : rbuf, b->count, b->dtype,
                  b->op, b->root, comm, b->bogus_stream ? (chorusStream_t)&bogus : NULL);
        harness_expect_refused(what, res, chorusInvalidArgument, chorusGetLastError(comm),
                               fn_names[b->fn], b->word);
        if (comm != NULL) {
            pthread_t t;
            other_text[0] = '\0';
            pthread_create(&t, NULL, read_comm_error, comm);
            pthread_join(t, NULL);
            char what2[200];
            snprintf(what2, sizeof(what2), "%s (error read from another thread)", what);
            harness_expect_refused(what2, res, chorusInvalidArgument, other_text, fn_names[b->fn],
                                   b->word);
        }
        if (harness_first_diff(sbuf, BUF_BYTES, (uint64_t)i) >= 0 ||
            harness_first_diff(rbuf, BUF_BYTES, (uint64_t)i + 1000000) >= 0)
            FAIL("%s: a buffer changed although the call was refused", what);
        valid_allreduce(what);
    }
    harness_report(0,
                   "%d invalid collective/send/recv calls refused with chorusInvalidArgument, "
                   "buffers unchanged, error naming function and argument, communicator still "
                   "usable",
                   n);
}

/* Buffers that overlap without NCCL's in-place layout are refused (they were run as in place and
 * lost data): one rank alone, 16 floats; the buffers unchanged, the communicator usable. On rank
 * 1, sendbuff == recvbuff is not an all-gather's or reduce-scatter's in-place layout (a 2-rank
 * all-gather so by cross-memory attach returned rank 0's slice on both). */
static void run_overlap(void)
{
    long before = harness_failures;
    struct {
        fn_t fn;
        size_t send_off, recv_off; /* bytes into sbuf */
        int rank;
    } cases[] = {
        {F_ALLREDUCE, 0, 4, 0},      {F_ALLREDUCE, 32, 0, 0},    {F_BROADCAST, 0, 60, 0},
        {F_REDUCE, 8, 0, 0},         {F_ALLGATHER, 4, 0, 0},     {F_ALLGATHER, 64, 0, 0},
        {F_REDUCESCATTER, 0, 64, 0}, {F_ALLTOALL, 0, 4, 0},      {F_ALLTOALL, 100, 0, 0},
        {F_ALLGATHER, 0, 0, 1},      {F_REDUCESCATTER, 0, 0, 1},
    };
    int n = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int i = 0; i < n; i++) {
        char what[160];
        chorusComm_t comm = comms[cases[i].rank];
        snprintf(what, sizeof(what), "%s on rank %d with recvbuff at sendbuff %+ld bytes",
                 fn_names[cases[i].fn], cases[i].rank,
                 (long)cases[i].recv_off - (long)cases[i].send_off);
        harness_fill(sbuf, BUF_BYTES, (uint64_t)i);
        chorusResult_t res = issue(cases[i].fn, sbuf + cases[i].send_off, sbuf + cases[i].recv_off,
                                   16, F32, SUM, 0, comm, NULL);
        harness_expect_refused(what, res, chorusInvalidArgument, chorusGetLastError(comm),
                               fn_names[cases[i].fn], "overlap");
        if (harness_first_diff(sbuf, BUF_BYTES, (uint64_t)i) >= 0)
            FAIL("%s: the buffer changed although the call was refused", what);
        valid_allreduce(what);
    }
    harness_report(before,
                   "%d calls with overlapping buffers not laid out in place refused, naming the "
                   "overlap; buffers unchanged, communicator usable",
                   n);
}

/* A send to this rank itself, or a receive from it, outside a group can never match: refused
 * (chorusInvalidUsage, naming the group) before it runs, the communicator usable (it ran, failed
 * and aborted the communicator on every rank). */
static void run_self_alone(void)
{
    long before = harness_failures;
    for (int k = 0; k < 2; k++) {
        const char *what =
            k == 0 ? "chorusSend to self outside a group" : "chorusRecv from self outside a group";
        harness_fill(sbuf, BUF_BYTES, 77);
        harness_fill(rbuf, BUF_BYTES, 78);
        chorusResult_t res =
            issue(k == 0 ? F_SEND : F_RECV, sbuf, rbuf, 16, F32, SUM, 0, comms[0], NULL);
        harness_expect_refused(what, res, chorusInvalidUsage, chorusGetLastError(comms[0]),
                               fn_names[k == 0 ? F_SEND : F_RECV], "group");
        if (harness_first_diff(sbuf, BUF_BYTES, 77) >= 0 ||
            harness_first_diff(rbuf, BUF_BYTES, 78) >= 0)
            FAIL("%s: a buffer changed although the call was refused", what);
        valid_allreduce(what);
    }
    harness_report(before, "a send to self and a receive from self outside a group refused "
                           "(chorusInvalidUsage naming the group), the communicator usable");
}

/* NULL buffers with count 0 are accepted by every call (both ranks, one group). */
static void run_count0(void)
{
    long before = harness_failures;
    CHECK_OK(chorusGroupStart());
    for (int r = 0; r < NRANKS; r++) {
        CHECK_OK(chorusAllReduce(NULL, NULL, 0, chorusFloat32, chorusSum, comms[r], NULL));
        CHECK_OK(chorusBroadcast(NULL, NULL, 0, chorusFloat32, 1, comms[r], NULL));
        CHECK_OK(chorusReduce(NULL, NULL, 0, chorusFloat32, chorusMax, 0, comms[r], NULL));
        CHECK_OK(chorusAllGather(NULL, NULL, 0, chorusInt8, comms[r], NULL));
        CHECK_OK(chorusReduceScatter(NULL, NULL, 0, chorusInt64, chorusProd, comms[r], NULL));
        CHECK_OK(chorusAlltoAll(NULL, NULL, 0, chorusFloat64, comms[r], NULL));
        CHECK_OK(chorusSend(NULL, 0, chorusInt32, 1 - r, comms[r], NULL));
        CHECK_OK(chorusRecv(NULL, 0, chorusInt32, 1 - r, comms[r], NULL));
    }
    CHECK_OK(chorusGroupEnd());
    valid_allreduce("count-0 calls with NULL buffers");
    harness_report(before, "NULL buffers with count 0 are accepted by every collective and "
                           "send/recv");
}

/* Count 0 outside a group (each call alone, comm already used by this thread: the quick way):
 * accepted with NULL buffers, yet a bad datatype, op or root is still refused by name, and a
 * call after a refused one clears the thread's error text. */
static void run_count0_alone(void)
{
    long before = harness_failures;
    static const bad_t bad0[] = {
        {"count 0, datatype 42", F_ALLREDUCE, 0, 0, 0, 0, 0, 42, SUM, 0, "datatype"},
        {"count 0, datatype -1", F_ALLGATHER, 0, 0, 0, 0, 0, -1, SUM, 0, "datatype"},
        {"count 0, op 42", F_ALLREDUCE, 0, 0, 0, 0, 0, F32, 42, 0, "op 42"},
        {"count 0, op -1", F_REDUCESCATTER, 0, 0, 0, 0, 0, F32, -1, 0, "op -1"},
        {"count 0, root -1", F_BROADCAST, 0, 0, 0, 0, 0, F32, SUM, -1, "root"},
        {"count 0, root nranks", F_BROADCAST, 0, 0, 0, 0, 0, F32, SUM, NRANKS, "root"},
        {"count 0, root nranks", F_REDUCE, 0, 0, 0, 0, 0, F32, SUM, NRANKS, "root"},
    };
    for (int round = 0; round < 3; round++)
        for (int r = 0; r < NRANKS; r++) {
            CHECK_OK(chorusAllReduce(NULL, NULL, 0, chorusFloat32, chorusSum, comms[r], NULL));
            CHECK_OK(chorusBroadcast(NULL, NULL, 0, chorusFloat32, NRANKS - 1, comms[r], NULL));
            CHECK_OK(chorusReduce(NULL, NULL, 0, chorusBfloat16, chorusAvg, 0, comms[r], NULL));
            CHECK_OK(chorusAllGather(NULL, NULL, 0, chorusUint8, comms[r], NULL));
            CHECK_OK(chorusReduceScatter(NULL, NULL, 0, chorusInt64, chorusMin, comms[r], NULL));
        }
    for (size_t i = 0; i < sizeof(bad0) / sizeof(bad0[0]); i++) {
        const bad_t *b = &bad0[i];
        char what[160];
        snprintf(what, sizeof(what), "%s %s (alone, after a valid one)", fn_names[b->fn], b->what);
        CHECK_OK(chorusAllReduce(NULL, NULL, 0, chorusFloat32, chorusSum, comms[0], NULL));
        chorusResult_t res = issue(b->fn, NULL, NULL, 0, b->dtype, b->op, b->root, comms[0], NULL);
        harness_expect_refused(what, res, chorusInvalidArgument, chorusGetLastError(comms[0]),
                               fn_names[b->fn], b->word);
        CHECK_OK(chorusAllGather(NULL, NULL, 0, chorusFloat32, comms[0], NULL));
        if (chorusGetLastError(NULL)[0] != '\0') /* the thread's own text */
            FAIL("after %s, a valid count-0 call left the thread's error text \"%s\"", what,
                 chorusGetLastError(NULL));
    }
    valid_allreduce("count-0 calls alone");
    harness_report(before, "count-0 collectives alone: accepted with NULL buffers; bad datatype, "
                           "op and root still refused by name; the next call clears the error");
}

/* An invalid call inside a group is refused at once; the group's valid calls still run. */
static void run_group(void)
{
    long before = harness_failures;
    enum { COUNT = 513 };
    int64_t in[NRANKS][COUNT], out[NRANKS][COUNT];
    for (int r = 0; r < NRANKS; r++)
        for (int i = 0; i < COUNT; i++) {
            in[r][i] = (int64_t)(r + 1) << 33 | i;
            out[r][i] = 0;
        }
    CHECK_OK(chorusGroupStart());
    chorusResult_t res =
        chorusAllReduce(in[0], out[0], COUNT, (chorusDataType_t)42, chorusSum, comms[0], NULL);
    harness_expect_refused("chorusAllReduce datatype 42 inside a group", res, chorusInvalidArgument,
                           chorusGetLastError(comms[0]), "chorusAllReduce", "datatype");
    for (int r = 0; r < NRANKS; r++)
        CHECK_OK(chorusAllReduce(in[r], out[r], COUNT, chorusInt64, chorusMax, comms[r], NULL));
    /* Destroying a communicator the open group holds calls on is refused (it hung: the other
     * ranks' calls waited for its part until their deadline); the group then runs. */
    res = chorusCommDestroy(comms[1]);
    harness_expect_refused("chorusCommDestroy inside a group holding its calls", res,
                           chorusInvalidUsage, chorusGetLastError(NULL), "chorusGroupEnd",
                           "holds 1 call");
    CHECK_OK(chorusGroupEnd());
    for (int r = 0; r < NRANKS; r++)
        for (int i = 0; i < COUNT; i++)
            if (out[r][i] != ((int64_t)NRANKS << 33 | i)) {
                FAIL("group with a refused call: rank %d element %d wrong", r, i);
                break;
            }
    res = chorusGroupEnd();
    harness_expect_refused("chorusGroupEnd without chorusGroupStart", res, chorusInvalidUsage,
                           chorusGetLastError(NULL), "chorusGroupEnd", "chorusGroupStart");
    valid_allreduce("chorusGroupEnd without chorusGroupStart");
    chorusResult_t async = chorusSuccess;
    CHECK_OK(chorusCommGetAsyncError(comms[0], &async));
    if (async != chorusSuccess)
        FAIL("refused calls left an async error on the communicator: %d", (int)async);
    harness_report(before, "an invalid call inside a group is refused and the group still runs; "
                           "so is destroying a communicator it holds calls on; chorusGroupEnd "
                           "without chorusGroupStart is chorusInvalidUsage; no async error "
                           "afterwards");
}

/* ---- init and config arguments ---- */

static void run_init_args(void)
{
    long before = harness_failures;
    chorusUniqueId id;
    CHECK_OK(chorusGetUniqueId(&id));
    chorusComm_t c = NULL;
    chorusResult_t res;

    chorusConfig_t raw;
    memset(&raw, 0, sizeof(raw));
    raw.timeoutMs = 1000;
    res = chorusCommInitRankConfig(&c, 1, id, 0, &raw);
    harness_expect_refused("config not made by CHORUS_CONFIG_INITIALIZER", res,
                           chorusInvalidArgument, chorusGetLastError(NULL),
                           "CHORUS_CONFIG_INITIALIZER", NULL);
    chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
    cfg.timeoutMs = -5;
    res = chorusCommInitRankConfig(&c, 1, id, 0, &cfg);
    harness_expect_refused("config timeoutMs -5", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "timeoutMs", NULL);
    chorusConfig_t cfg2 = CHORUS_CONFIG_INITIALIZER;
    cfg2.minChannels = 0;
    res = chorusCommInitRankConfig(&c, 1, id, 0, &cfg2);
    harness_expect_refused("config minChannels 0", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "minChannels", NULL);
    chorusConfig_t cfg3 = CHORUS_CONFIG_INITIALIZER;
    cfg3.blocking = 7;
    res = chorusCommInitRankConfig(&c, 1, id, 0, &cfg3);
    harness_expect_refused("config blocking 7", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "blocking", NULL);
    chorusConfig_t cfg4 = CHORUS_CONFIG_INITIALIZER;
    cfg4.netName = "bogus"; /* was accepted and ignored */
    res = chorusCommInitRankConfig(&c, 1, id, 0, &cfg4);
    harness_expect_refused("config netName \"bogus\"", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "netName", NULL);
    cfg4.netName = "socket"; /* a plugin's name, in any case (an id of its own: init uses it) */
    chorusUniqueId id_net;
    CHECK_OK(chorusGetUniqueId(&id_net));
    res = chorusCommInitRankConfig(&c, 1, id_net, 0, &cfg4);
    if (res != chorusSuccess)
        FAIL("config netName \"socket\" refused: %s", chorusGetLastError(NULL));
    else
        chorusCommDestroy(c);

    res = chorusCommInitRank(&c, 0, id, 0);
    harness_expect_refused("chorusCommInitRank nranks 0", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "nranks", NULL);
    res = chorusCommInitRank(&c, -3, id, 0);
    harness_expect_refused("chorusCommInitRank nranks -3", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "nranks", NULL);
    res = chorusCommInitRank(&c, 2, id, 2);
    harness_expect_refused("chorusCommInitRank rank 2 of 2", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "rank", NULL);
    res = chorusCommInitRank(&c, 2, id, -1);
    harness_expect_refused("chorusCommInitRank rank -1", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "rank", NULL);
    res = chorusCommInitRank(NULL, 1, id, 0);
    harness_expect_refused("chorusCommInitRank comm NULL", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "comm", NULL);
    chorusUniqueId zero;
    memset(&zero, 0, sizeof(zero));
    res = chorusCommInitRank(&c, 1, zero, 0);
    harness_expect_refused("chorusCommInitRank with an all-zero id", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "unique id", NULL);
    res = chorusGetUniqueId(NULL);
    harness_expect_refused("chorusGetUniqueId(NULL)", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "uniqueId", NULL);

    chorusComm_t two[2];
    res = chorusCommInitAll(two, 0, NULL);
    harness_expect_refused("chorusCommInitAll ndev 0", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "ndev", NULL);
    res = chorusCommInitAll(NULL, 2, NULL);
    harness_expect_refused("chorusCommInitAll comms NULL", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "comms", NULL);
    res = chorusCommSplit(comms[0], 0, 0, NULL, NULL);
    harness_expect_refused("chorusCommSplit newcomm NULL", res, chorusInvalidArgument,
                           chorusGetLastError(comms[0]), "newcomm", NULL);
    valid_allreduce("chorusCommSplit newcomm NULL");

    /* The id is still good after all that: a 1-rank communicator joins it. */
    c = NULL;
    res = chorusCommInitRankConfig(&c, 1, id, 0, NULL);
    if (res != chorusSuccess)
        FAIL("1-rank init with the id after the refused calls: %s: %s", chorusGetErrorString(res),
             chorusGetLastError(NULL));
    else
        CHECK_OK(chorusCommDestroy(c));
    harness_report(before, "init/config/InitAll/Split argument errors are chorusInvalidArgument "
                           "naming the argument");
}

/* ---- ranks whose configs differ in what decides how they talk ---- */

typedef struct mismatch_rank {
    int rank;
    chorusUniqueId id;
    int min_channels, max_channels;
    chorusResult_t res;
    double seconds;
    char error[1024];
} mismatch_rank_t;

static void *mismatch_rank_thread(void *p)
{
    mismatch_rank_t *a = p;
    chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
    cfg.timeoutMs = 10000;
    cfg.minChannels = a->min_channels;
    cfg.maxChannels = a->max_channels;
    chorusComm_t c = NULL;
    double t0 = harness_now_s();
    a->res = chorusCommInitRankConfig(&c, 2, a->id, a->rank, &cfg);
    a->seconds = harness_now_s() - t0;
    snprintf(a->error, sizeof(a->error), "%s", chorusGetLastError(NULL));
    if (a->res == chorusSuccess)
        chorusCommDestroy(c);
    return NULL;
}

/* Two thread ranks initialized with the given minChannels and maxChannels each. */
static void init_two(mismatch_rank_t r[2], const int min[2], const int max[2])
{
    chorusUniqueId id;
    CHECK_OK(chorusGetUniqueId(&id));
    pthread_t t[2];
    int started[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        memset(&r[i], 0, sizeof(r[i]));
        r[i].rank = i;
        r[i].id = id;
        r[i].min_channels = min[i];
        r[i].max_channels = max[i];
        r[i].res = chorusInternalError;
        started[i] = pthread_create(&t[i], NULL, mismatch_rank_thread, &r[i]) == 0;
        if (!started[i])
            FAIL("pthread_create");
    }
    for (int i = 0; i < 2; i++)
        if (started[i])
            pthread_join(t[i], NULL);
}

/* Two ranks whose chorusConfig_t minChannels differ (1 and 3) built 1 and 3 channels and waited
 * in the bootstrap for timeoutMs (init.c, channels_alike): both must fail init with
 * chorusInvalidUsage naming minChannels, at once (well inside the 10 s). maxChannels 2 and 4
 * build one channel each on one host: that runs. */
static void run_config_mismatch(void)
{
    long before = harness_failures;
    mismatch_rank_t r[2];
    init_two(r, (const int[]){1, 3}, (const int[]){32, 32});
    for (int i = 0; i < 2; i++) {
        char what[64];
        snprintf(what, sizeof(what), "rank %d of 2 with minChannels %d", i, i == 0 ? 1 : 3);
        harness_expect_refused(what, r[i].res, chorusInvalidUsage, r[i].error, "minChannels", NULL);
        if (r[i].seconds > 5)
            FAIL("%s: init took %.1f s to fail (timeoutMs 10000: a wait, not a check)", what,
                 r[i].seconds);
    }
    init_two(r, (const int[]){1, 1}, (const int[]){2, 4});
    for (int i = 0; i < 2; i++)
        if (r[i].res != chorusSuccess)
            FAIL("rank %d of 2 with maxChannels %d (one channel either way): init %s: %s", i,
                 i == 0 ? 2 : 4, chorusGetErrorString(r[i].res), r[i].error);
    harness_report(before, "ranks whose chorusConfig_t minChannels differ (1, 3) both fail init "
                           "at once, naming minChannels; maxChannels 2 and 4 (one channel each) "
                           "run");
}

/* ---- an aborted communicator ---- */

typedef struct abort_rank {
    int rank;
    chorusUniqueId id;
    chorusComm_t comm;
    chorusResult_t init_res;
} abort_rank_t;

static int late_mode; /* run_aborted's second run: rank 1 calls after rank 0's failure */
static pthread_mutex_t abort_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t abort_cv = PTHREAD_COND_INITIALIZER;
static int rank0_done;
static int last_attempt; /* an init failure counts only on the last attempt (run_aborted) */

static void *abort_rank_thread(void *p)
{
    abort_rank_t *a = p;
    chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
    cfg.timeoutMs = 300;
    a->init_res = chorusCommInitRankConfig(&a->comm, 2, a->id, a->rank, &cfg);
    if (a->init_res != chorusSuccess) {
        if (last_attempt)
            FAIL("aborted-communicator setup: rank %d init: %s: %s", a->rank,
                 chorusGetErrorString(a->init_res), chorusGetLastError(NULL));
        pthread_mutex_lock(&abort_mu);
        rank0_done = 1; /* let the other rank go on */
        pthread_cond_broadcast(&abort_cv);
        pthread_mutex_unlock(&abort_mu);
        return NULL;
    }
    if (a->rank == 0) {
        size_t count = late_mode ? 8 : 1 << 20; /* 4 MiB of float32, or 8 floats */
        float *buf = malloc(count * 4);
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)(i % 100);
        double t0 = harness_now_s();
        chorusResult_t res =
            chorusAllReduce(buf, buf, count, chorusFloat32, chorusSum, a->comm, NULL);
        double dt = harness_now_s() - t0;
        if (res != chorusTimeout && res != chorusRemoteError)
            FAIL("all-reduce that rank 1 never joins returned %d (%s), want chorusTimeout or "
                 "chorusRemoteError",
                 (int)res, chorusGetErrorString(res));
        else
            printf("     all-reduce alone: %s after %.2f s (timeoutMs 300): %s\n",
                   chorusGetErrorString(res), dt, chorusGetLastError(a->comm));
        if (dt > 20.0) /* a hang check, not a performance bound */
            FAIL("the failed all-reduce took %.1f s with timeoutMs 300", dt);
        chorusResult_t async = chorusSuccess;
        CHECK_OK(chorusCommGetAsyncError(a->comm, &async));
        if (async != res)
            FAIL("chorusCommGetAsyncError reports %d (%s) after the call failed with %d",
                 (int)async, chorusGetErrorString(async), (int)res);
        /* The next call is refused: the communicator is aborted. */
        int32_t s[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r[8] = {9, 9, 9, 9, 9, 9, 9, 9};
        res = chorusAllReduce(s, r, 8, chorusInt32, chorusSum, a->comm, NULL);
        harness_expect_refused("a collective issued on the aborted communicator", res,
                               chorusInvalidUsage, chorusGetLastError(a->comm), "abort", NULL);
        for (int i = 0; i < 8; i++)
            if (s[i] != i + 1 || r[i] != 9) {
                FAIL("the refused call on the aborted communicator changed a buffer");
                break;
            }
        /* chorusCommCount succeeds and clears this thread's error text: the count-0 calls
         * below take the quick way, which must see the abort too. */
        int count_n = 0;
        CHECK_OK(chorusCommCount(a->comm, &count_n));
        res = chorusAllReduce(NULL, NULL, 0, chorusInt32, chorusSum, a->comm, NULL);
        harness_expect_refused("a count-0 collective issued on the aborted communicator", res,
                               chorusInvalidUsage, chorusGetLastError(a->comm), "abort", NULL);
        CHECK_OK(chorusCommCount(a->comm, &count_n));
        res = chorusBroadcast(NULL, NULL, 0, chorusInt32, 1, a->comm, NULL);
        harness_expect_refused("a count-0 broadcast issued on the aborted communicator", res,
                               chorusInvalidUsage, chorusGetLastError(a->comm), "abort", NULL);
        res = chorusSend(s, 8, chorusInt32, 1, a->comm, NULL);
        harness_expect_refused("a send issued on the aborted communicator", res, chorusInvalidUsage,
                               chorusGetLastError(a->comm), "abort", NULL);
        free(buf);
        pthread_mutex_lock(&abort_mu);
        rank0_done = 1;
        pthread_cond_broadcast(&abort_cv);
        pthread_mutex_unlock(&abort_mu);
    } else {
        /* Rank 1 never joins; it waits (with a deadline) until rank 0 has seen the failure. */
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 60;
        pthread_mutex_lock(&abort_mu);
        while (!rank0_done)
            if (pthread_cond_timedwait(&abort_cv, &abort_mu, &dl) != 0)
                break;
        int done = rank0_done;
        pthread_mutex_unlock(&abort_mu);
        if (!done)
            FAIL("rank 0 did not finish its failed all-reduce within 60 s");
        /* late_mode: rank 1 enters the same all-reduce after rank 0 gave up. Rank 0's 8 floats
         * are published, so it could complete; rank 0's failure notice must reach it (the
         * async error) and fail it instead (it returned success where rank 0 timed out: the
         * notice went to every rank but the one it named). The notice travels on its own: a
         * call made before it lands can still complete. */
        chorusResult_t async = chorusSuccess;
        for (int ms = 0; late_mode && done && async == chorusSuccess && ms < 5000; ms++) {
            struct timespec one = {0, 1000000};
            nanosleep(&one, NULL);
            CHECK_OK(chorusCommGetAsyncError(a->comm, &async));
        }
        if (late_mode && done && async == chorusSuccess)
            FAIL("rank 0's failure notice did not reach rank 1 (the rank it named) within 5 s");
        float x[8], y[8];
        for (int i = 0; i < 8 && late_mode && done; i++)
            x[i] = (float)(i % 100);
        chorusResult_t res = late_mode && done
                                 ? chorusAllReduce(x, y, 8, chorusFloat32, chorusSum, a->comm, NULL)
                                 : chorusTimeout;
        if (res == chorusSuccess)
            FAIL("rank 1's all-reduce, entered after rank 0's had timed out, returned success");
        else if (late_mode && done)
            printf("     the late rank's all-reduce: %s: %s\n", chorusGetErrorString(res),
                   chorusGetLastError(a->comm));
    }
    double t0 = harness_now_s();
    chorusResult_t res = chorusCommDestroy(a->comm);
    if (res != chorusSuccess)
        FAIL("rank %d: chorusCommDestroy after the abort: %s", a->rank, chorusGetErrorString(res));
    if (harness_now_s() - t0 > 20.0)
        FAIL("rank %d: chorusCommDestroy took %.1f s", a->rank, harness_now_s() - t0);
    return NULL;
}

static void run_aborted(void)
{
    long before = harness_failures;
    /* timeoutMs 300 bounds the init too, and on a loaded machine (ctest -j, sanitizers) a rank's
     * thread may start later than that: a failed init is tried again, up to 5 times. */
    enum { ATTEMPTS = 5 };
    for (int attempt = 1; attempt <= ATTEMPTS; attempt++) {
        abort_rank_t ranks[2];
        pthread_t threads[2];
        chorusUniqueId id;
        CHECK_OK(chorusGetUniqueId(&id));
        rank0_done = 0;
        last_attempt = attempt == ATTEMPTS;
        for (int r = 0; r < 2; r++) {
            ranks[r] = (abort_rank_t){.rank = r, .id = id};
            pthread_create(&threads[r], NULL, abort_rank_thread, &ranks[r]);
        }
        for (int r = 0; r < 2; r++)
            pthread_join(threads[r], NULL);
        if (ranks[0].init_res == chorusSuccess && ranks[1].init_res == chorusSuccess)
            break;
        if (!last_attempt)
            printf("     init with timeoutMs 300 failed (attempt %d of %d): trying again\n",
                   attempt, ATTEMPTS);
    }
    harness_report(before,
                   "a collective that a peer %s fails with timeout (config timeoutMs "
                   "300), the async error reports it, the next calls are "
                   "chorusInvalidUsage naming the abort, both ranks destroy",
                   late_mode ? "joins only after its deadline (8 floats) fails on both ranks:"
                             : "never joins (4 MiB)");
}

/* ---- a stranger at CHORUS_ROOT ---- */

/* Accepts one connection on *(int *)arg, reads what comes, answers 64 bytes of '0' (as another
 * program on the port might), closes. */
static void *junk_root(void *arg)
{
    int lfd = *(int *)arg;
    int fd = accept(lfd, NULL, NULL);
    if (fd >= 0) {
        char in[256], junk[64];
        memset(junk, '0', sizeof(junk));
        struct timeval tv = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        (void)!read(fd, in, sizeof(in));
        (void)!write(fd, junk, sizeof(junk));
        close(fd);
    }
    return NULL;
}

/* Rank 1 of an env-init job whose CHORUS_ROOT answers junk: init fails at once with
 * chorusInvalidUsage saying it is not a Chorus reply (it put "answered for 808464928 ranks"
 * first, the junk read as a rank count). */
static void run_junk_root(void)
{
    long before = harness_failures;
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 4) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &alen) != 0) {
        FAIL("cannot listen on loopback for the junk root");
        return;
    }
    pthread_t t;
    pthread_create(&t, NULL, junk_root, &lfd);
    char root[64];
    snprintf(root, sizeof(root), "127.0.0.1:%d", ntohs(a.sin_port));
    setenv("CHORUS_RANK", "1", 1);
    setenv("CHORUS_NRANKS", "2", 1);
    setenv("CHORUS_ROOT", root, 1);
    setenv("CHORUS_TIMEOUT_MS", "5000", 1);
    double took;
    char text[1024];
    chorusResult_t res = harness_init_env_timed(&took, text, sizeof(text));
    unsetenv("CHORUS_RANK");
    unsetenv("CHORUS_NRANKS");
    unsetenv("CHORUS_ROOT");
    unsetenv("CHORUS_TIMEOUT_MS");
    CHECK(res == chorusInvalidUsage && strstr(text, "not a Chorus bootstrap reply") != NULL &&
              strstr(text, "answered for") == NULL,
          "init against a junk root: %d (%s): %s", res, chorusGetErrorString(res), text);
    CHECK(took < 4.0, "init against a junk root took %.1f s (deadline 5 s)", took);
    pthread_join(t, NULL);
    close(lfd);
    harness_report(before, "a CHORUS_ROOT that answers junk fails init at once with "
                           "chorusInvalidUsage saying it is not a Chorus reply");
}

/* ---- malformed environment ---- */

static void run_env(void)
{
    long before = harness_failures;
    static const char *bad[][3] = {
        /* variable, value, what the message must name (besides the variable) */
        {"CHORUS_BUFFSIZE", "abc", NULL},     {"CHORUS_BUFFSIZE", "4Q", NULL},
        {"CHORUS_NCHANNELS", "-3", NULL},     {"CHORUS_NCHANNELS", "33", NULL},
        {"CHORUS_TIMEOUT_MS", "0", NULL},     {"CHORUS_TIMEOUT_MS", "12x", NULL},
        {"CHORUS_STEPS", "1", NULL},          {"CHORUS_SPIN", "fast", NULL},
        {"CHORUS_P2P_BUFFSIZE", "100", NULL}, {"CHORUS_MIN_NCHANNELS", "0", NULL},
        {"CHORUS_NCHANNELS", "033", NULL}, /* 33 (decimal: no octal), above 32 */
    };
    chorusUniqueId id;
    CHECK_OK(chorusGetUniqueId(&id)); /* made while the environment is clean */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char what[160];
        snprintf(what, sizeof(what), "%s=%s", bad[i][0], bad[i][1]);
        setenv(bad[i][0], bad[i][1], 1);
        chorusComm_t c = NULL;
        chorusResult_t res = chorusCommInitRank(&c, 1, id, 0);
        char text[1024];
        snprintf(text, sizeof(text), "%s", chorusGetLastError(NULL));
        if (res == chorusSuccess)
            chorusCommDestroy(c);
        harness_expect_refused(what, res, chorusInvalidArgument, text, bad[i][0], NULL);
        if (i < 2) { /* the other entry points read the same table */
            chorusUniqueId other;
            res = chorusGetUniqueId(&other);
            snprintf(text, sizeof(text), "%s", chorusGetLastError(NULL));
            snprintf(what, sizeof(what), "chorusGetUniqueId with %s=%s", bad[i][0], bad[i][1]);
            harness_expect_refused(what, res, chorusInvalidArgument, text, bad[i][0], NULL);
            chorusComm_t two[2] = {NULL, NULL};
            res = chorusCommInitAll(two, 2, NULL);
            snprintf(text, sizeof(text), "%s", chorusGetLastError(NULL));
            if (res == chorusSuccess) {
                chorusCommDestroy(two[0]);
                chorusCommDestroy(two[1]);
            }
            snprintf(what, sizeof(what), "chorusCommInitAll with %s=%s", bad[i][0], bad[i][1]);
            harness_expect_refused(what, res, chorusInvalidArgument, text, bad[i][0], NULL);
        }
        unsetenv(bad[i][0]);
    }
    setenv("CHORUS_TIMEOUT_MS", "10000", 1); /* main's value, unset by the loop */
    /* Both bounds named when they contradict each other. */
    setenv("CHORUS_MIN_NCHANNELS", "4", 1);
    setenv("CHORUS_MAX_NCHANNELS", "2", 1);
    chorusComm_t c = NULL;
    chorusResult_t res = chorusCommInitRank(&c, 1, id, 0);
    harness_expect_refused("CHORUS_MIN_NCHANNELS=4 CHORUS_MAX_NCHANNELS=2", res,
                           chorusInvalidArgument, chorusGetLastError(NULL), "CHORUS_MIN_NCHANNELS",
                           "CHORUS_MAX_NCHANNELS");
    if (res == chorusSuccess)
        chorusCommDestroy(c);
    unsetenv("CHORUS_MIN_NCHANNELS");
    unsetenv("CHORUS_MAX_NCHANNELS");
    /* Clean again: the same id still serves. */
    c = NULL;
    res = chorusCommInitRank(&c, 1, id, 0);
    if (res != chorusSuccess) {
        FAIL("init after unsetting the malformed variables: %s: %s", chorusGetErrorString(res),
             chorusGetLastError(NULL));
    } else {
        int32_t x = 5, y = 0;
        CHECK_OK(chorusAllReduce(&x, &y, 1, chorusInt32, chorusSum, c, NULL));
        if (y != 5)
            FAIL("1-rank all-reduce gave %d, want 5", y);
        CHECK_OK(chorusCommDestroy(c));
    }
    harness_report(before, "malformed CHORUS_* values fail init with chorusInvalidArgument "
                           "naming the variable; init works once they are unset");
}

/* chorusMemAlloc and chorusMemFree: bad arguments are refused, the buffer is not harmed. */
static void run_memalloc(void)
{
    void *p = NULL;
    if (chorusMemAlloc(NULL, 64) != chorusInvalidArgument)
        FAIL("chorusMemAlloc(NULL, 64) was not refused with chorusInvalidArgument");
    /* No CUDA in this process (and maybe none in the build): device memory is refused, saying
     * why; bad arguments first. */
    if (chorusMemAllocDevice(NULL, 64) != chorusInvalidArgument ||
        chorusMemAllocDevice(&p, 0) != chorusInvalidArgument)
        FAIL("chorusMemAllocDevice with a NULL ptr or 0 bytes was not chorusInvalidArgument");
    if (chorusMemAllocDevice(&p, 64) != chorusInvalidUsage ||
        strstr(chorusGetLastError(NULL), "CUDA") == NULL)
        FAIL("chorusMemAllocDevice without CUDA: not chorusInvalidUsage naming CUDA: \"%s\"",
             chorusGetLastError(NULL));
    if (chorusMemAlloc(&p, 0) != chorusInvalidArgument)
        FAIL("chorusMemAlloc(&p, 0) was not refused with chorusInvalidArgument");
    if (chorusMemAlloc(&p, 8192) != chorusSuccess || p == NULL) {
        FAIL("chorusMemAlloc(&p, 8192): %s", chorusGetLastError(NULL));
        return;
    }
    memset(p, 0x5a, 8192);
    chorusResult_t res = chorusMemFree((char *)p + 16);
    if (res != chorusInvalidArgument || strstr(chorusGetLastError(NULL), "chorusMemFree") == NULL)
        FAIL("chorusMemFree(p + 16) returned %s (want chorusInvalidArgument naming "
             "chorusMemFree): %s",
             chorusGetErrorString(res), chorusGetLastError(NULL));
    if (((unsigned char *)p)[8191] != 0x5a)
        FAIL("the buffer changed after the refused chorusMemFree");
    if (chorusMemFree(p) != chorusSuccess)
        FAIL("chorusMemFree(p): %s", chorusGetLastError(NULL));
    /* Pointers chorusMemAlloc did not return (or no longer holds) are refused, not freed: a
     * second free, a stack buffer, malloc's memory (free() crashed on the first two). */
    char on_stack[64];
    void *from_malloc = malloc(64);
    void *bad[3] = {p, on_stack, from_malloc};
    const char *bad_name[3] = {"a pointer freed already", "a stack buffer", "malloc'd memory"};
    for (int i = 0; i < 3; i++) {
        res = chorusMemFree(bad[i]);
        if (res != chorusInvalidArgument ||
            strstr(chorusGetLastError(NULL), "not a pointer chorusMemAlloc returned") == NULL)
            FAIL("chorusMemFree of %s returned %s (want chorusInvalidArgument): %s", bad_name[i],
                 chorusGetErrorString(res), chorusGetLastError(NULL));
    }
    free(from_malloc);
    if (chorusMemFree(NULL) != chorusSuccess)
        FAIL("chorusMemFree(NULL): %s", chorusGetLastError(NULL));
    /* Without a memfd (no descriptor left) it is plain memory, freed and refused the same way. */
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
        struct rlimit none = {3, lim.rlim_max};
        void *plain = NULL;
        setrlimit(RLIMIT_NOFILE, &none);
        res = chorusMemAlloc(&plain, 100);
        setrlimit(RLIMIT_NOFILE, &lim);
        if (res != chorusSuccess || plain == NULL) {
            FAIL("chorusMemAlloc without a descriptor left: %s", chorusGetLastError(NULL));
        } else {
            memset(plain, 1, 100);
            if (chorusMemFree(plain) != chorusSuccess)
                FAIL("chorusMemFree of plain chorusMemAlloc memory: %s", chorusGetLastError(NULL));
            if (chorusMemFree(plain) != chorusInvalidArgument)
                FAIL("a second chorusMemFree of plain chorusMemAlloc memory was not refused");
        }
    }
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    harness_fail_limit = 30;
    /* A wrongly accepted call would wait for a peer that never comes: keep that wait short. */
    setenv("CHORUS_TIMEOUT_MS", "10000", 1);
    printf("test_invalid: argument checks on a %d-rank communicator (thread ranks)\n", NRANKS);
    if (harness_init_all(comms, NRANKS) != 0)
        return 1;
    valid_allreduce("init");
    run_table();
    run_overlap();
    run_self_alone();
    run_count0();
    run_count0_alone();
    run_group();
    run_init_args();
    run_config_mismatch();
    run_memalloc();
    harness_destroy_all(comms, NRANKS);
    run_aborted();
    late_mode = 1;
    run_aborted();
    run_env();
    run_junk_root();
    return harness_finish("test_invalid");
}
