/*
 * test_adapt_plans.c: the run-time choices between plain and streaming stores decide end to end
 * (src/slot_adapt.c: the ring's send slots, CHORUS_SLOT_ADAPT; the direct algorithms' copies into
 * a rank's window, CHORUS_WINDOW_ADAPT, enqueue.c run_direct), on times made up by
 * CHORUS_ADAPT_TIMED_PCT. test_slot_adapt feeds the plan's arithmetic numbers; here real calls
 * feed it their clocks.
 *
 * Three thread ranks, the process held to one CPU (the ranks outnumber its cores, where the
 * window's copies are chosen at run time rather than always streamed), CALLS out-of-place float
 * all-reduces of 64 KiB, one-shot (the window plan) and then over the ring (the slot plan, turned
 * on by CHORUS_SLOT_ADAPT=1, off by default where ranks share cores):
 *   - CHORUS_ADAPT_TIMED_PCT=1 (a streamed call counted at a hundredth of its time): every rank's
 *     plan switches to streaming at its first trial and keeps it; most calls stream.
 *   - CHORUS_ADAPT_TIMED_PCT=10000 (at a hundred times): no rank's plan switches; its trials (a
 *     few calls) streamed, the rest plain.
 * Every result is checked bit for bit (integer-valued floats). Exit 0: all passed; 1: a check
 * failed.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "chorus.h"
#include "comm.h"
#include "harness.h"

#define NR 3
#define COUNT (16 * 1024) /* 64 KiB of floats: past SLOT_ADAPT_MIN_NBYTES */
#define CALLS 120

static int ring; /* 0: the window plan (one-shot); 1: the slot plan (ring) */

static void body(chorusComm_t comm, int rank, int nranks)
{
    float *in = malloc(COUNT * sizeof(float)), *out = malloc(COUNT * sizeof(float));
    if (in == NULL || out == NULL) {
        FAIL("rank %d: out of memory", rank);
        free(in);
        free(out);
        return;
    }
    long wrong = 0;
    for (int c = 0; c < CALLS; c++) {
        for (int i = 0; i < COUNT; i++)
            in[i] = (float)((i + c * 7 + rank * 13) % 1000);
        if (chorusAllReduce(in, out, COUNT, chorusFloat32, chorusSum, comm, NULL) !=
            chorusSuccess) {
            FAIL("rank %d, call %d: %s", rank, c, chorusGetLastError(comm));
            break;
        }
        for (int i = 0; i < COUNT; i++) {
            float want = 0;
            for (int r = 0; r < nranks; r++)
                want += (float)((i + c * 7 + r * 13) % 1000);
            wrong += out[i] != want;
        }
    }
    CHECK(wrong == 0, "rank %d: %ld elements wrong over %d calls", rank, wrong, CALLS);
    free(in);
    free(out);
}

/* One run of CALLS all-reduces with the plans' streamed times scaled by pct; stream_wins: what
 * every rank's plan must have chosen. */
static void run(int pct, int stream_wins)
{
    long before = harness_failures;
    char v[16];
    snprintf(v, sizeof(v), "%d", pct);
    setenv("CHORUS_ADAPT_TIMED_PCT", v, 1);
    setenv("CHORUS_ALGO", ring ? "ring" : "oneshot", 1);
    chorusComm_t comms[NR];
    if (harness_init_all(comms, NR) != 0)
        return;
    for (int r = 0; r < NR; r++)
        CHECK(comms[r]->over,
              "rank %d: the ranks do not outnumber the cores (the process is held "
              "to one CPU)",
              r);
    harness_run_ranks(comms, NR, body);
    const char *what = ring ? "slot plan (ring)" : "window plan (one-shot)";
    for (int r = 0; r < NR; r++) {
        const slot_adapt_t *sa = ring ? &comms[r]->slot_plan : &comms[r]->win_plan;
        unsigned long long plain = sa->calls[0], stream = sa->calls[1], sw = sa->switches;
        CHECK(plain + stream == CALLS,
              "%s, rank %d: %llu plain and %llu streamed calls counted, "
              "want %d in all",
              what, r, plain, stream, CALLS);
        if (stream_wins) {
            CHECK(sw >= 1 && stream > plain,
                  "%s, rank %d, streamed times at %d%%: %llu "
                  "switches, %llu plain and %llu streamed calls (want streaming chosen)",
                  what, r, pct, sw, plain, stream);
        } else {
            CHECK(sw == 0 && stream > 0 && stream < plain,
                  "%s, rank %d, streamed times at %d%%: "
                  "%llu switches, %llu plain and %llu streamed calls (want trials streamed, plain "
                  "kept)",
                  what, r, pct, sw, plain, stream);
        }
    }
    harness_destroy_all(comms, NR);
    harness_report(before, "%s, streamed calls timed at %d%%: every rank chose %s; results right",
                   what, pct, stream_wins ? "streaming after its first trial" : "plain stores");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("test_adapt_plans (pid %d)\n", (int)getpid());
    cpu_set_t mine, one;
    int cpu = -1;
    if (sched_getaffinity(0, sizeof(mine), &mine) == 0)
        for (int c = 0; c < CPU_SETSIZE && cpu < 0; c++)
            if (CPU_ISSET(c, &mine))
                cpu = c;
    CPU_ZERO(&one);
    if (cpu >= 0)
        CPU_SET(cpu, &one);
    if (cpu < 0 || sched_setaffinity(0, sizeof(one), &one) != 0) {
        FAIL("cannot hold the process to one CPU");
        return harness_finish("test_adapt_plans");
    }
    setenv("CHORUS_SLOT_ADAPT", "1", 1);
    for (ring = 0; ring < 2; ring++) {
        run(1, 1);
        run(10000, 0);
    }
    return harness_finish("test_adapt_plans");
}
