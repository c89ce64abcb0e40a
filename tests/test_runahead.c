/*
 * test_runahead.c: proves that the ranks that only write (broadcast root, reduce non-roots) may
 * run ahead of the readers without a reader ever seeing a later call's data, on the direct
 * algorithms (CHORUS_ALGO=oneshot): LL words up to 128 bytes, slotted window buffers above that
 * (algorithms/algo.h: up to 256 pieces ahead), the whole buffers from a quarter of them,
 * and every change between those, where a piece's region may overlap an earlier piece's still
 * being read.
 *
 * Calls come in blocks of BURST with one size, one root and one collective (broadcast or reduce,
 * sum of int32), so the writers can run as far ahead as the slots let them; the blocks go
 * through SIZES (every cut of the window, and changes between them both ways), twice (broadcast,
 * then reduce), with the root moving each block. Every 7th call is an all-reduce of 32 bytes
 * (tagged lines: no buffer), and the middle call of a block an all-reduce of the block's size
 * (every rank writes its buffers whole). Every element rank r contributes to call i is
 * value(i, r, j), so an element from another call or another rank is caught; every output is
 * checked on every rank that has one, every call. Every rank sleeps 1 ms once every 61 calls (at
 * its own phase), long enough for the others to fill every slot meanwhile.
 *
 *   test_runahead N [ITERS]   N ranks as threads of this process
 *   test_runahead_mpi [ITERS] one rank per MPI process (built with -DTEST_RUNAHEAD_MPI)
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chorus.h"
#include "harness.h"
#if TEST_RUNAHEAD_MPI
#include "harness_mpi.h"
#endif

/* Bytes per call: LL (4 and 8 in the ring of small pieces, 12, 100 and 128 in the other, with
 * changes between the two both ways: algo.h's DIRECT_LL_SMALL_NBYTES), slots of 4 KiB (132,
 * 4096), 8 KiB (4100), 64 KiB (40000), 256 KiB (200000), the whole 512 KiB buffers (300000: more
 * than a quarter of them), two pieces (700000). */
static const size_t sizes[] = {8,  4096, 132,    40000, 128,    4,     100,    8,
                               12, 4100, 200000, 4096,  300000, 40000, 700000, 132};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define BURST 300
static int iters = 2 * NSIZES * BURST;

static int32_t value(int i, int r, size_t j)
{
    return (int32_t)((uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u) ^ (uint32_t)j) & 0xffff;
}

static void pause_1ms(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

static void rank_body(chorusComm_t comm, int me, int n)
{
    size_t max = 0;
    for (size_t k = 0; k < NSIZES; k++)
        max = sizes[k] > max ? sizes[k] : max;
    int32_t *in = malloc(max), *out = malloc(max);
    if (in == NULL || out == NULL) {
        FAIL("rank %d: out of memory", me);
        free(in);
        free(out);
        return;
    }
    /* A rank goes on after a wrong result (its calls still match the others'); FAIL prints the
     * first few. */
    for (int i = 0; i < iters; i++) {
        int block = i / BURST;
        size_t count = sizes[block % NSIZES] / sizeof(int32_t);
        int root = block % n, kind = (block / NSIZES) % 2; /* 0 broadcast, 1 reduce, 2 all-reduce */
        if (i % BURST == BURST / 2) {
            kind = 2;
        } else if (i % 7 == 6) {
            kind = 2;
            count = 8;
        }
        for (size_t j = 0; j < count; j++)
            in[j] = value(i, me, j);
        memset(out, 0x5a, count * sizeof(int32_t));
        chorusResult_t res;
        const char *what = kind == 0 ? "Broadcast" : kind == 1 ? "Reduce" : "AllReduce";
        if (kind == 0)
            res = chorusBroadcast(in, out, count, chorusInt32, root, comm, NULL);
        else if (kind == 1)
            res = chorusReduce(in, out, count, chorusInt32, chorusSum, root, comm, NULL);
        else
            res = chorusAllReduce(in, out, count, chorusInt32, chorusSum, comm, NULL);
        if (res != chorusSuccess) {
            FAIL("rank %d: call %d: %s of %zu elements: %s: %s", me, i, what, count,
                 chorusGetErrorString(res), chorusGetLastError(NULL));
            break; /* the communicator may be unusable: the others time out (CHORUS_TIMEOUT_MS) */
        }
        int has = kind == 0 || kind == 2 || me == root;
        for (size_t j = 0; has && j < count; j++) {
            int32_t want = 0;
            if (kind == 0) {
                want = value(i, root, j);
            } else {
                for (int r = 0; r < n; r++)
                    want += value(i, r, j);
            }
            if (out[j] != want) {
                FAIL("rank %d: call %d: %s of %zu elements, root %d: element %zu is %d, "
                     "expected %d",
                     me, i, what, count, root, j, out[j], want);
                break;
            }
        }
        if (i % 61 == 17 * me % 61)
            pause_1ms();
    }
    free(in);
    free(out);
}

#if !TEST_RUNAHEAD_MPI
static void rank_thread(chorusComm_t comm, int rank, int nranks)
{
    rank_body(comm, rank, nranks);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2)
        iters = atoi(argv[2]);
    if (n < 1 || n > 64 || iters < 1) {
        printf("usage: test_runahead NRANKS (1..64) [ITERS]\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    chorusComm_t *comms = calloc(n, sizeof(chorusComm_t));
    if (comms == NULL || harness_init_all(comms, n) != 0 ||
        harness_run_ranks(comms, n, rank_thread) != 0)
        return 1;
    harness_destroy_all(comms, n);
    free(comms);
    return harness_finish("test_runahead: %d calls of broadcast, reduce and all-reduce, 8 B to "
                          "700000 B, on %d thread ranks",
                          iters, n);
}
#else
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc > 1)
        iters = atoi(argv[1]);
    int r, n;
    long total = harness_mpi_run(rank_body, &r, &n);
    if (r == 0)
        printf("%s test_runahead_mpi: %d calls of broadcast, reduce and all-reduce, 8 B to "
               "700000 B, on %d MPI ranks (%ld failures)\n",
               total ? "FAIL" : "PASS", iters, n, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
#endif
