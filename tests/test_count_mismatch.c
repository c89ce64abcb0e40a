/*
 * test_count_mismatch.c: ranks that call one collective with different counts fail cleanly, and
 * no byte past any rank's buffers changes.
 *
 * Run with mpirun -np 2 (processes; CHORUS_CMA_MIN=16K in the ctest): rank 0 passes one count,
 * rank 1 another, to an all-reduce, an all-gather and a broadcast large enough to move data by
 * cross-memory attach, each both ways round, and to an all-reduce whose two counts take
 * different paths (16384 and 4096 floats); and to all-gathers into chorusMemAlloc outputs, where
 * the ranks write each input straight into the others' outputs (the zero-copy push). (Where the
 * node-local windows carry the data, as with more ranks than cores, a mismatch may give wrong
 * results or a timeout, as NCCL's and MPI's do: CHORUS_CHECK_ARGS=1 catches it there.) Each buffer
 * is followed by a 1 MiB guard of a known byte. Proves, for each case on a communicator of its own:
 * every rank's call returns an error, at least one rank's error text asks whether the ranks call
 * with the same count (or says they did not), and every guard is intact. Before the attach's peers
 * checked the size a rank published with its address, process_vm_writev wrote up to 1 MiB past the
 * smaller call's buffers in its process and both calls returned success (all-reduce, all-gather),
 * and a broadcast wrote past them and then failed "please report"; the push wrote 512 KiB past the
 * smaller call's output in its chorusMemAlloc memory, and both returned success. Last, rank 0
 * all-reduces 2 floats where rank 1 broadcasts them (deadline 2 s): both fail, and the timeout's
 * text suggests CHORUS_CHECK_ARGS=1.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus_mpi.h"
#include "harness.h"

#define GUARD (1u << 20)
#define GUARD_BYTE 0xA5

enum coll { C_ALLREDUCE, C_ALLGATHER, C_BROADCAST };
static const char *const names[] = {"all-reduce", "all-gather", "broadcast"};

static int me, nranks;

/* Bytes of [p + nbytes, p + nbytes + GUARD) that are not GUARD_BYTE. */
static size_t guard_damage(const unsigned char *p, size_t nbytes)
{
    size_t bad = 0;
    for (size_t i = 0; i < GUARD; i++)
        bad += p[nbytes + i] != GUARD_BYTE;
    return bad;
}

/* nbytes of host memory: chorusMemAlloc's (memalloc) or malloc's; NULL when there is none. */
static unsigned char *get(size_t nbytes, int memalloc)
{
    void *p = NULL;
    if (memalloc)
        CHECK_OK(chorusMemAlloc(&p, nbytes));
    else
        p = malloc(nbytes);
    return p;
}

static void put(void *p, int memalloc)
{
    if (memalloc && p != NULL)
        CHECK_OK(chorusMemFree(p));
    else
        free(p);
}

/* One case on a fresh communicator: rank 0 calls with count0 floats, rank 1 with count1. */
static void run_case(enum coll c, size_t count0, size_t count1, int memalloc)
{
    long before = harness_failures;
    size_t count = me == 0 ? count0 : count1;
    size_t in_nbytes = count * sizeof(float);
    size_t out_nbytes = c == C_ALLGATHER ? in_nbytes * (size_t)nranks : in_nbytes;
    unsigned char *in = get(in_nbytes + GUARD, memalloc), *out = get(out_nbytes + GUARD, memalloc);
    if (in == NULL || out == NULL) {
        FAIL("rank %d: out of memory", me);
        put(in, memalloc);
        put(out, memalloc);
        return;
    }
    for (size_t i = 0; i < count; i++)
        ((float *)in)[i] = (float)(me + 1);
    memset(in + in_nbytes, GUARD_BYTE, GUARD);
    memset(out, GUARD_BYTE, out_nbytes + GUARD);
    chorusComm_t comm = NULL;
    CHECK_OK(chorusCommInitMPI(&comm, MPI_COMM_WORLD));
    chorusResult_t res = chorusInternalError;
    char text[1024] = "";
    if (comm != NULL) {
        if (c == C_ALLREDUCE)
            res = chorusAllReduce(in, out, count, chorusFloat32, chorusSum, comm, NULL);
        else if (c == C_ALLGATHER)
            res = chorusAllGather(in, out, count, chorusFloat32, comm, NULL);
        else
            res = chorusBroadcast(in, out, count, chorusFloat32, 0, comm, NULL);
        snprintf(text, sizeof(text), "%s", chorusGetLastError(comm));
    }
    if (res == chorusSuccess)
        FAIL("%s, rank %d with %zu floats (rank 0: %zu, rank 1: %zu): returned success", names[c],
             me, count, count0, count1);
    size_t bad_in = guard_damage(in, in_nbytes), bad_out = guard_damage(out, out_nbytes);
    if (bad_in != 0 || bad_out != 0)
        FAIL(
            "%s, rank %d with %zu floats: %zu bytes past its input and %zu past its output changed",
            names[c], me, count, bad_in, bad_out);
    int said = strstr(text, "same count") != NULL || strstr(text, "different counts") != NULL;
    int any_said = 0;
    MPI_Allreduce(&said, &any_said, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any_said)
        FAIL("%s: no rank's error asks whether the counts agree (rank %d: %s)", names[c], me, text);
    if (comm != NULL)
        CHECK_OK(chorusCommDestroy(comm));
    put(in, memalloc);
    put(out, memalloc);
    long mine = harness_failures - before, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0)
        printf("%s %s, rank 0 %zu floats, rank 1 %zu, %s buffers: %s\n", all ? "FAIL" : "PASS",
               names[c], count0, count1, memalloc ? "chorusMemAlloc" : "malloc",
               all ? "see the failures above"
                   : "both failed, the error asks about the counts, guards intact");
}

/* Rank 0 all-reduces 2 floats where rank 1 broadcasts them, deadline 2 s: each waits for flags
 * the other's call does not set; both time out, and the error suggests CHORUS_CHECK_ARGS (it said
 * only "slow or deadlocked"). */
static void run_kinds_apart(void)
{
    long before = harness_failures;
    chorusUniqueId id;
    if (me == 0)
        CHECK_OK(chorusGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
    cfg.timeoutMs = 2000;
    chorusComm_t comm = NULL;
    CHECK_OK(chorusCommInitRankConfig(&comm, nranks, id, me, &cfg));
    float in[2] = {1, 2}, out[2] = {0, 0};
    chorusResult_t res = chorusInternalError;
    char text[1024] = "";
    if (comm != NULL) {
        res = me == 0 ? chorusAllReduce(in, out, 2, chorusFloat32, chorusSum, comm, NULL)
                      : chorusBroadcast(in, out, 2, chorusFloat32, 0, comm, NULL);
        snprintf(text, sizeof(text), "%s", chorusGetLastError(comm));
    }
    if (res == chorusSuccess)
        FAIL("rank %d: an all-reduce against a broadcast returned success", me);
    int said = strstr(text, "CHORUS_CHECK_ARGS=1") != NULL, any_said = 0;
    MPI_Allreduce(&said, &any_said, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any_said)
        FAIL("rank %d: no rank's error suggests CHORUS_CHECK_ARGS: %s", me, text);
    if (comm != NULL)
        chorusCommDestroy(comm); /* aborted by the failure: either way */
    long mine = harness_failures - before, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0)
        printf("%s an all-reduce on rank 0 against a broadcast on rank 1: %s\n",
               all ? "FAIL" : "PASS",
               all ? "see the failures above" : "both failed, suggesting CHORUS_CHECK_ARGS=1");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (nranks != 2) {
        if (me == 0)
            printf("FAIL test_count_mismatch: run it with mpirun -np 2\n");
        MPI_Finalize();
        return 1;
    }
    run_case(C_ALLREDUCE, 1048576, 65536, 0);
    run_case(C_ALLREDUCE, 65536, 1048576, 0);
    run_case(C_ALLGATHER, 262144, 65536, 0);
    run_case(C_ALLGATHER, 65536, 262144, 0);
    run_case(C_BROADCAST, 1048576, 262144, 0);
    run_case(C_BROADCAST, 262144, 1048576, 0);
    run_case(C_ALLREDUCE, 16384, 4096, 0);
    run_case(C_ALLGATHER, 262144, 65536, 1);
    run_case(C_ALLGATHER, 65536, 262144, 1);
    run_kinds_apart();
    long total = 0;
    MPI_Allreduce(&harness_failures, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0)
        printf("%s test_count_mismatch: 10 calls with the counts of 2 ranks apart refused, nothing "
               "written past a buffer\n",
               total ? "FAIL" : "PASS");
    MPI_Finalize();
    return total ? 1 : 0;
}
