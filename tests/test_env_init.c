/*
 * test_env_init.c: one rank of a job joined by chorusCommInitEnv; driven by tests/env_init.sh.
 *
 *   test_env_init run         join by the environment (CHORUS_RANK/CHORUS_NRANKS/CHORUS_ROOT or
 *                             torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), then prove the
 *                             rank and size are the environment's, and an all-reduce and an
 *                             all-gather give their closed forms
 *   test_env_init bad WORD    chorusCommInitEnv must fail with chorusInvalidArgument and a last
 *                             error that contains WORD (the variable at fault)
 *   test_env_init expect RESULT SECONDS WORD  chorusCommInitEnv must fail with result code
 *                             RESULT within SECONDS, its last error containing WORD
 * Before joining, `run` prints "rank R: joining" so the driver can start another rank late.
 * Exit 0: passed; 1: failed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "harness.h"

/* The rank and size the environment names (the test reads it to know what to expect). */
static int env_int(const char *chorus_name, const char *torch_name)
{
    const char *v = getenv(chorus_name);
    if (v == NULL || v[0] == '\0')
        v = getenv(torch_name);
    return v ? atoi(v) : -1;
}

static int run(void)
{
    int want_rank = env_int("CHORUS_RANK", "RANK"), want_n = env_int("CHORUS_NRANKS", "WORLD_SIZE");
    printf("rank %d: joining\n", want_rank);
    fflush(stdout);
    chorusComm_t comm = NULL;
    chorusResult_t res = chorusCommInitEnv(&comm);
    if (res != chorusSuccess) {
        FAIL("rank %d: chorusCommInitEnv: %s: %s", want_rank, chorusGetErrorString(res),
             chorusGetLastError(NULL));
        return 1;
    }
    int rank = -1, n = -1;
    chorusCommUserRank(comm, &rank);
    chorusCommCount(comm, &n);
    if (rank != want_rank || n != want_n)
        FAIL("communicator says rank %d of %d, the environment %d of %d", rank, n, want_rank,
             want_n);
    enum { COUNT = 100003 };
    int32_t *buf = malloc(COUNT * sizeof(int32_t));
    for (int i = 0; i < COUNT; i++)
        buf[i] = (rank + 1) * 1000 + i % 1000;
    res = chorusAllReduce(buf, buf, COUNT, chorusInt32, chorusSum, comm, NULL);
    if (res != chorusSuccess)
        FAIL("chorusAllReduce: %s: %s", chorusGetErrorString(res), chorusGetLastError(comm));
    for (int i = 0; i < COUNT && res == chorusSuccess; i++)
        if (buf[i] != 1000 * n * (n + 1) / 2 + n * (i % 1000)) {
            FAIL("all-reduce element %d is %d, want %d", i, buf[i],
                 1000 * n * (n + 1) / 2 + n * (i % 1000));
            break;
        }
    int64_t mine[2] = {rank, (int64_t)rank * rank}, *all = calloc(2 * (size_t)n, sizeof(int64_t));
    res = chorusAllGather(mine, all, 2, chorusInt64, comm, NULL);
    if (res != chorusSuccess)
        FAIL("chorusAllGather: %s: %s", chorusGetErrorString(res), chorusGetLastError(comm));
    for (int q = 0; q < n && res == chorusSuccess; q++)
        if (all[2 * q] != q || all[2 * q + 1] != (int64_t)q * q) {
            FAIL("all-gather block %d is {%lld, %lld}", q, (long long)all[2 * q],
                 (long long)all[2 * q + 1]);
            break;
        }
    res = chorusCommDestroy(comm);
    if (res != chorusSuccess)
        FAIL("chorusCommDestroy: %s", chorusGetErrorString(res));
    free(buf);
    free(all);
    return harness_finish("rank %d of %d: joined by environment, all-reduce and all-gather exact",
                          rank, n);
}

static int bad(const char *word)
{
    chorusComm_t comm = NULL;
    chorusResult_t res = chorusCommInitEnv(&comm);
    char text[1024]; /* copied: chorusCommDestroy may replace the last error */
    snprintf(text, sizeof(text), "%s", chorusGetLastError(NULL));
    if (res == chorusSuccess)
        chorusCommDestroy(comm);
    harness_expect_refused("chorusCommInitEnv", res, chorusInvalidArgument, text, word, NULL);
    return harness_finish("refused with chorusInvalidArgument: \"%s\"", text);
}

/* chorusCommInitEnv must fail with result code want, within limit_s seconds, its last error
 * containing word. */
static int expect(int want, double limit_s, const char *word)
{
    double took;
    char text[1024];
    chorusResult_t res = harness_init_env_timed(&took, text, sizeof(text));
    harness_expect_refused("chorusCommInitEnv", res, (chorusResult_t)want, text, word, NULL);
    CHECK(took <= limit_s, "chorusCommInitEnv failed after %.1f s, want %.1f s at most", took,
          limit_s);
    return harness_finish("failed with %d after %.1f s: \"%s\"", (int)res, took, text);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "run") == 0)
        return run();
    if (argc == 3 && strcmp(argv[1], "bad") == 0)
        return bad(argv[2]);
    if (argc == 5 && strcmp(argv[1], "expect") == 0)
        return expect(atoi(argv[2]), atof(argv[3]), argv[4]);
    printf("usage: test_env_init run | test_env_init bad WORD | test_env_init expect RESULT "
           "SECONDS WORD\n");
    return 1;
}
