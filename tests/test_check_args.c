/*
 * test_check_args.c: with CHORUS_CHECK_ARGS=1, collectives whose arguments differ across the
 * ranks are refused on every rank, and the communicator stays usable.
 *
 * Two thread ranks (chorusCommInitAll). Each case has rank 1 call something that differs from
 * rank 0's all-reduce of 8 float32 (sum) in one argument: the count, the datatype, the op, the
 * collective (an all-gather), the root of a broadcast, one case inside a group (the batch path).
 * Both ranks must get chorusInvalidUsage whose text names CHORUS_CHECK_ARGS and both calls, their
 * receive buffers untouched; then a matching all-reduce must be bit-exact. Without the check the
 * first case returned success with rank 1's last 4 elements its own input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "harness.h"

#define COUNT 8

typedef struct mismatch {
    const char *what;
    const char *want0, *want1; /* in the text: rank 0's call and rank 1's */
} mismatch_t;

static const mismatch_t cases[] = {
    {"count 8 against 4", "of 8 float32", "of 4 float32"},
    {"float32 against int32", "of 8 float32", "of 8 int32"},
    {"sum against max", "(sum)", "(max)"},
    {"all-reduce against all-gather", "chorusAllReduce of 8", "chorusAllGather of 8"},
    {"broadcast from root 0 against root 1", "from root 0", "from root 1"},
    {"count 8 against 4 in a group", "of 8 float32", "of 4 float32"},
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

static chorusResult_t call(int c, int r, const float *in, float *out, chorusComm_t comm)
{
    int other = r == 1; /* rank 1 makes the call that differs */
    switch (c) {
    case 0:
        return chorusAllReduce(in, out, other ? 4 : COUNT, chorusFloat32, chorusSum, comm, NULL);
    case 1:
        return chorusAllReduce(in, out, COUNT, other ? chorusInt32 : chorusFloat32, chorusSum, comm,
                               NULL);
    case 2:
        return chorusAllReduce(in, out, COUNT, chorusFloat32, other ? chorusMax : chorusSum, comm,
                               NULL);
    case 3:
        return other ? chorusAllGather(in, out, COUNT, chorusFloat32, comm, NULL)
                     : chorusAllReduce(in, out, COUNT, chorusFloat32, chorusSum, comm, NULL);
    case 4:
        return chorusBroadcast(in, out, COUNT, chorusFloat32, other, comm, NULL);
    default: {
        chorusResult_t res = chorusGroupStart();
        chorusResult_t inner =
            chorusAllReduce(in, out, other ? 4 : COUNT, chorusFloat32, chorusSum, comm, NULL);
        chorusResult_t end = chorusGroupEnd();
        return res != chorusSuccess ? res : inner != chorusSuccess ? inner : end;
    }
    }
}

static void rank_body(chorusComm_t comm, int r, int n)
{
    (void)n;
    float in[2 * COUNT], out[2 * COUNT];
    for (int c = 0; c < NCASES; c++) {
        for (int i = 0; i < 2 * COUNT; i++) {
            in[i] = (float)(r * 100 + i);
            out[i] = -1.0f;
        }
        chorusResult_t res = call(c, r, in, out, comm);
        const char *text = chorusGetLastError(comm);
        CHECK(res == chorusInvalidUsage, "rank %d, %s: result %d (%s), want chorusInvalidUsage: %s",
              r, cases[c].what, res, chorusGetErrorString(res), text);
        CHECK(strstr(text, "CHORUS_CHECK_ARGS") != NULL && strstr(text, cases[c].want0) != NULL &&
                  strstr(text, cases[c].want1) != NULL,
              "rank %d, %s: the error does not name both calls (\"%s\", \"%s\"): %s", r,
              cases[c].what, cases[c].want0, cases[c].want1, text);
        for (int i = 0; i < 2 * COUNT; i++)
            if (out[i] != -1.0f) {
                FAIL("rank %d, %s: the refused call wrote element %d of its output", r,
                     cases[c].what, i);
                break;
            }
        /* Usable afterwards: the same all-reduce on both ranks, exact. */
        CHECK_OK(chorusAllReduce(in, out, COUNT, chorusFloat32, chorusSum, comm, NULL));
        for (int i = 0; i < COUNT; i++)
            if (out[i] != (float)(100 + 2 * i)) {
                FAIL("rank %d, after %s: element %d is %g, want %g", r, cases[c].what, i,
                     (double)out[i], (double)(100 + 2 * i));
                break;
            }
    }
}

int main(void)
{
    setenv("CHORUS_CHECK_ARGS", "1", 1);
    setenv("CHORUS_TIMEOUT_MS", "20000", 0); /* a check that hangs fails, well before ctest's */
    chorusComm_t comms[2];
    if (harness_init_all(comms, 2) != 0 || harness_run_ranks(comms, 2, rank_body) != 0)
        return 1;
    harness_destroy_all(comms, 2);
    return harness_finish("CHORUS_CHECK_ARGS=1: %d mismatched calls refused on both ranks, naming "
                          "both calls, outputs untouched, the communicator usable after each",
                          NCASES);
}
