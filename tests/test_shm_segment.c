/*
 * test_shm_segment.c: proves that ranks of one process share one mapping of each shm segment
 * (transports/shm.c), counted, and that the mapping goes only with its last user.
 *
 * 1. A segment created here and mapped twice more by name: the same address each time; after
 *    two unmaps it is still mapped and holds what was written; after the third it is gone
 *    (msync says ENOMEM). Another segment, or the same name at another size, gets its own
 *    mapping, and unmapping that one leaves the first alone.
 * 2. Two thread ranks after an 8-byte all-reduce (which maps the direct windows): each rank's
 *    window is at one address in both (window.c maps them through shm_segment_map), and the
 *    result is right. Once rank 0 is destroyed both windows stay mapped (rank 1 uses them); once
 *    rank 1 is too, neither is.
 * Exit 0: all passed; 1: a check failed; 77: the direct windows are off here (SKIP).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "chorus.h"
#include "comm.h"
#include "harness.h"
#include "transport.h"

#define NB (64 * 1024)

static int mapped(void *p, size_t n)
{
    return msync(p, n, MS_ASYNC) == 0 || errno != ENOMEM;
}

static void one_process(void)
{
    long before = harness_failures;
    char name[96], other[96];
    shm_segment_name(name, sizeof(name), 0, 0, 0x7465);
    shm_segment_name(other, sizeof(other), 0, 1, 0x7465);
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *f = NULL;
    CHECK_OK(shm_segment_map(name, NB, 1, 0, 1, &a));
    CHECK_OK(shm_segment_map(other, NB, 1, 1, 1, &e));
    if (a == NULL || e == NULL) {
        FAIL("no segments to test");
        if (a != NULL)
            shm_segment_unmap(a, NB);
        if (e != NULL)
            shm_segment_unmap(e, NB);
        shm_unlink(name);
        shm_unlink(other);
        return;
    }
    memset(a, 0x5a, NB);
    CHECK_OK(shm_segment_map(name, NB, 0, 0, 1, &b));
    CHECK_OK(shm_segment_map(name, NB, 0, 0, 1, &c));
    CHECK(b == a && c == a, "the same name mapped at %p and %p, created at %p", b, c, a);
    CHECK(e != a, "another segment shares the first's mapping (%p)", e);
    CHECK_OK(shm_segment_map(name, NB / 2, 0, 0, 1, &d));
    CHECK(d != NULL && d != a, "the same name at half the size got %p, created at %p", d, a);
    if (d != NULL)
        CHECK(((unsigned char *)d)[NB / 2 - 1] == 0x5a, "a second mapping shows other bytes");
    CHECK(shm_segment_unmap(d, NB / 2) == 0, "unmap of the second mapping: %s", strerror(errno));
    CHECK(shm_segment_unmap(b, NB) == 0 && shm_segment_unmap(c, NB) == 0,
          "unmap of two counted uses failed: %s", strerror(errno));
    CHECK(mapped(a, NB), "the creator's mapping went with its other users' unmaps");
    if (mapped(a, NB))
        CHECK(((unsigned char *)a)[NB - 1] == 0x5a, "the mapping lost its bytes");
    CHECK(shm_segment_unmap(a, NB) == 0, "the last unmap failed: %s", strerror(errno));
    CHECK(!mapped(a, NB), "the mapping stayed after its last user unmapped it");
    /* The name answers no more once unmapped: a new map opens the file (still named here). */
    CHECK_OK(shm_segment_map(name, NB, 0, 0, 1, &f));
    CHECK(f != NULL && mapped(f, NB), "the segment could not be mapped again by name");
    if (f != NULL)
        shm_segment_unmap(f, NB);
    CHECK(mapped(e, NB), "unmapping one segment unmapped another");
    shm_segment_unmap(e, NB);
    shm_unlink(name);
    shm_unlink(other);
    harness_report(before, "one process: a name maps to its creator's mapping, counted, and goes "
                           "with the last unmap");
}

static void sum8(chorusComm_t comm, int rank, int nranks)
{
    (void)nranks;
    float in[2] = {1.0f + (float)rank, 2.0f}, out[2] = {0, 0};
    CHECK_OK(chorusAllReduce(in, out, 2, chorusFloat32, chorusSum, comm, NULL));
    CHECK(out[0] == 3.0f && out[1] == 4.0f, "rank %d: %g %g, want 3 4", rank, (double)out[0],
          (double)out[1]);
}

static int thread_ranks(void)
{
    long before = harness_failures;
    chorusComm_t comms[2];
    if (harness_init_all(comms, 2) != 0)
        return 0;
    harness_run_ranks(comms, 2, sum8);
    if (comms[0]->win_base == NULL || comms[1]->win_base == NULL) {
        printf("SKIP: the direct windows are off here (CHORUS_DEBUG=INFO says why)\n");
        harness_destroy_all(comms, 2);
        return 77;
    }
    for (int r = 0; r < 2; r++)
        CHECK(comms[0]->win_base[r] == comms[1]->win_base[r],
              "rank %d's window at %p in rank 0 and %p in rank 1", r, (void *)comms[0]->win_base[r],
              (void *)comms[1]->win_base[r]);
    /* Rank 0 created its window; rank 1 still maps it after rank 0 is gone. */
    char *w0 = comms[1]->win_base[0], *w1 = comms[1]->win_base[1];
    CHECK_OK(chorusCommDestroy(comms[0]));
    CHECK(mapped(w0, 4096) && mapped(w1, 4096),
          "rank 0's destroy unmapped a window rank 1 still uses (rank 0's: %d, rank 1's: %d)",
          mapped(w0, 4096), mapped(w1, 4096));
    CHECK_OK(chorusCommDestroy(comms[1]));
    CHECK(!mapped(w0, 4096) && !mapped(w1, 4096), "the windows stayed after both destroys");
    harness_report(before, "two thread ranks: each window at one address in both, mapped until "
                           "the last destroy");
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("test_shm_segment (pid %d)\n", (int)getpid());
    one_process();
    if (thread_ranks() == 77 && harness_failures == 0)
        return 77;
    return harness_finish("test_shm_segment");
}
