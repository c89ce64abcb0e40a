/*
 * test_split.c: proves chorusCommSplit on 8 thread ranks (chorusCommInitAll).
 *
 * Split 1: color = rank % 3, key = -rank. The ranks of a color must come out in reverse parent
 * order: new rank = number of same-color ranks above this one, new size = how many ranks share the
 * color (3, 3, 2). An all-reduce and a broadcast from new rank 0 inside each part give the closed
 * form of that part's members. Split 2: ranks 0 and 5 pass CHORUS_SPLIT_NOCOLOR and get NULL; the
 * others split by rank % 2 with key 0, so ties keep parent order. Split 3 splits split 1's parts
 * again (color = new rank % 2, key = new rank, with a config). Split 4: everyone one color, key 0:
 * the same ranks in the same order. Afterwards the parent still all-reduces correctly, and every
 * communicator is destroyed, children first. Then, on three ranks with a 1 s deadline, a split
 * that rank 2 never calls fails on the others naming chorusCommSplit.
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "harness.h"

#define N 8
#define COUNT 4099

/* Check that the split gave parent_rank a communicator (comm not NULL), check its rank/size, then
 * all-reduce the members' parent ranks and broadcast from new rank 0 (whose parent rank is
 * members[0]). members: parent ranks in new-rank order. */
static void check_part(const char *what, chorusComm_t comm, int parent_rank, const int *members,
                       int m)
{
    if (comm == NULL) {
        FAIL("%s: parent rank %d got NULL", what, parent_rank);
        return;
    }
    int want_rank = -1;
    for (int i = 0; i < m; i++)
        if (members[i] == parent_rank)
            want_rank = i;
    int rank = -1, count = -1;
    CHECK_OK(chorusCommUserRank(comm, &rank));
    CHECK_OK(chorusCommCount(comm, &count));
    if (rank != want_rank || count != m) {
        FAIL("%s: parent rank %d is rank %d of %d, want %d of %d", what, parent_rank, rank, count,
             want_rank, m);
        return;
    }
    int64_t *buf = malloc(COUNT * sizeof(int64_t));
    for (int i = 0; i < COUNT; i++)
        buf[i] = (int64_t)(parent_rank + 1) * 100000 + i;
    CHECK_OK(chorusAllReduce(buf, buf, COUNT, chorusInt64, chorusSum, comm, NULL));
    int64_t sum_members = 0;
    for (int i = 0; i < m; i++)
        sum_members += members[i] + 1;
    for (int i = 0; i < COUNT; i++)
        if (buf[i] != sum_members * 100000 + (int64_t)m * i) {
            FAIL("%s: parent rank %d: all-reduce element %d is %lld, want %lld", what, parent_rank,
                 i, (long long)buf[i], (long long)(sum_members * 100000 + (int64_t)m * i));
            break;
        }
    for (int i = 0; i < COUNT; i++)
        buf[i] = rank == 0 ? (int64_t)parent_rank * 7 + i : -1;
    CHECK_OK(chorusBroadcast(buf, buf, COUNT, chorusInt64, 0, comm, NULL));
    for (int i = 0; i < COUNT; i++)
        if (buf[i] != (int64_t)members[0] * 7 + i) {
            FAIL("%s: parent rank %d: broadcast from new rank 0 (parent %d): element %d wrong",
                 what, parent_rank, members[0], i);
            break;
        }
    free(buf);
}

static void rank_thread(chorusComm_t comm, int r, int n)
{
    (void)n; /* N */
    int members[N], m;
    char what[96];

    /* Split 1: color r % 3, key -r: members in decreasing parent rank. */
    chorusComm_t s1 = NULL;
    CHECK_OK(chorusCommSplit(comm, r % 3, -r, &s1, NULL));
    m = 0;
    for (int q = N - 1; q >= 0; q--)
        if (q % 3 == r % 3)
            members[m++] = q;
    snprintf(what, sizeof(what), "split color=rank%%3 key=-rank (color %d)", r % 3);
    check_part(what, s1, r, members, m);

    /* Split 2: ranks 0 and 5 opt out; the others by parity, key 0 (ties keep parent order). */
    chorusComm_t s2 = (chorusComm_t)&members; /* must be overwritten */
    int out = r == 0 || r == 5;
    CHECK_OK(chorusCommSplit(comm, out ? CHORUS_SPLIT_NOCOLOR : r % 2, 0, &s2, NULL));
    if (out) {
        if (s2 != NULL)
            FAIL("parent rank %d split with CHORUS_SPLIT_NOCOLOR got a communicator", r);
        s2 = NULL;
    } else {
        m = 0;
        for (int q = 0; q < N; q++)
            if (q != 0 && q != 5 && q % 2 == r % 2)
                members[m++] = q;
        snprintf(what, sizeof(what), "split with NOCOLOR for 0 and 5 (color %d)", r % 2);
        check_part(what, s2, r, members, m);
    }

    /* Split 3: split 1's parts split again by their new rank's parity, with a config. */
    chorusComm_t s3 = NULL;
    if (s1 != NULL) {
        int r1 = -1;
        CHECK_OK(chorusCommUserRank(s1, &r1));
        chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
        cfg.timeoutMs = 60000;
        CHECK_OK(chorusCommSplit(s1, r1 % 2, r1, &s3, &cfg));
        /* s1's members (decreasing parent rank) at even / odd positions. */
        int all[N], na = 0;
        for (int q = N - 1; q >= 0; q--)
            if (q % 3 == r % 3)
                all[na++] = q;
        m = 0;
        for (int i = r1 % 2; i < na; i += 2)
            members[m++] = all[i];
        snprintf(what, sizeof(what), "split of a split (color %d, parity %d)", r % 3, r1 % 2);
        check_part(what, s3, r, members, m);
    }

    /* Split 4: one color, key 0 for all: the parent's ranks in the parent's order. */
    chorusComm_t s4 = NULL;
    CHECK_OK(chorusCommSplit(comm, 7, 0, &s4, NULL));
    for (int q = 0; q < N; q++)
        members[q] = q;
    check_part("split into one color, key 0", s4, r, members, N);

    /* The parent still works, after children are destroyed too. */
    if (s3)
        CHECK_OK(chorusCommDestroy(s3));
    if (s2)
        CHECK_OK(chorusCommDestroy(s2));
    if (s1)
        CHECK_OK(chorusCommDestroy(s1));
    if (s4)
        CHECK_OK(chorusCommDestroy(s4));
    for (int q = 0; q < N; q++)
        members[q] = q;
    check_part("the parent after the splits", comm, r, members, N);
}

/* Three thread ranks, deadline 1 s; rank 2 never splits: the others' splits fail naming the
 * split and asking whether every rank calls it (the exchange blamed a neighbour alone). */
static void missing_rank(chorusComm_t comm, int r, int n)
{
    (void)n;
    if (r == 2)
        return;
    chorusComm_t part = NULL;
    chorusResult_t res = chorusCommSplit(comm, 0, r, &part, NULL);
    const char *text = chorusGetLastError(comm);
    if (res == chorusSuccess)
        CHECK_OK(chorusCommDestroy(part));
    harness_expect_refused("a split rank 2 never calls", res, chorusTimeout, text,
                           "chorusCommSplit", "do all 3 ranks");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("test_split: chorusCommSplit on %d thread ranks\n", N);
    chorusComm_t comms[N];
    if (harness_init_all(comms, N) != 0 || harness_run_ranks(comms, N, rank_thread) != 0)
        return 1;
    harness_destroy_all(comms, N);
    harness_report(0, "split by rank%%3 with reversed keys (sizes 3,3,2), NOCOLOR gives NULL, "
                      "ties keep parent order, split of a split, one-color split; rank/count, "
                      "all-reduce and broadcast in every part; the parent still works");
    long before = harness_failures;
    setenv("CHORUS_TIMEOUT_MS", "1000", 1);
    chorusComm_t three[3];
    if (harness_init_all(three, 3) == 0) {
        harness_run_ranks(three, 3, missing_rank);
        for (int r = 0; r < 3; r++)
            chorusCommDestroy(three[r]); /* the two that failed may be aborted: either way */
    }
    unsetenv("CHORUS_TIMEOUT_MS");
    harness_report(before, "a split that rank 2 of 3 never calls fails on the others with "
                           "chorusTimeout naming chorusCommSplit and asking whether all ranks "
                           "call it");
    return harness_finish("test_split");
}
