/*
 * test_two_jobs.c: two independent jobs on one host at the same time do not talk to each other.
 *
 * Jobs A and B, 4 ranks each, every rank a forked process; each job gets its own unique id (two
 * roots in the parent, made at the same moment) and both start together. Job A contributes
 * 1 * (rank + 1) + i % 7 to its all-reduces, job B 100 * (rank + 1) + i % 7, so the sums (10 and
 * 1000 per element, plus 4 * (i % 7)) tell the jobs apart; an all-gather of job * 1000 + rank
 * gives each rank exactly its own job's 4 ranks, in order. All 8 ranks finish init before any
 * all-reduces, so the collectives of the two jobs overlap in time: 5 rounds of 1, 4099 and 2^20
 * int32 elements.
 *
 *   test_two_jobs shm   every rank on this host as it is: the jobs' shm transports side by side
 *   test_two_jobs net   rank r of either job has CHORUS_HOSTID=twojobs-host<r>: every connection
 *                       is a net (TCP) one, and both jobs use the same four host ids
 * The ranks' CHORUS_DEBUG=INFO (INIT) logs must show the transport the mode calls for ("conn ...
 * via shm|net") and no other. Exit 0 pass, 1 fail; each job must finish within 60 s.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

#define NJOBS 2
#define NRANKS 4
#define LIMIT_S 60.0

typedef struct shared {
    chorusUniqueId id[NJOBS];
    int ids_ready;
    int inited; /* ranks of both jobs past init */
    int failed;
} shared_t;

static shared_t *sh;
static int net;
static char logdir[256];

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static int wait_for(int *p, int want, double deadline_s)
{
    while (__atomic_load_n(p, __ATOMIC_ACQUIRE) < want) {
        if (harness_now_s() > deadline_s || __atomic_load_n(&sh->failed, __ATOMIC_ACQUIRE))
            return 0;
        sleep_ms(2);
    }
    return 1;
}

static void check_allreduce(chorusComm_t comm, int job, int rank, size_t count, int round)
{
    int32_t scale = job == 0 ? 1 : 100;
    int32_t *buf = malloc(count * sizeof(int32_t));
    for (size_t i = 0; i < count; i++)
        buf[i] = scale * (rank + 1) + (int32_t)((i + round) % 7);
    CHECK_OK(chorusAllReduce(buf, buf, count, chorusInt32, chorusSum, comm, NULL));
    for (size_t i = 0; i < count; i++) {
        int32_t want = scale * NRANKS * (NRANKS + 1) / 2 + NRANKS * (int32_t)((i + round) % 7);
        if (buf[i] != want) {
            FAIL("job %c rank %d: all-reduce of %zu (round %d): element %zu is %d, want %d%s",
                 'A' + job, rank, count, round, i, buf[i], want,
                 buf[i] == (job ? 1 : 100) * 10 + NRANKS * (int32_t)((i + round) % 7)
                     ? " (the other job's sum)"
                     : "");
            break;
        }
    }
    free(buf);
}

static int rank_main(int job, int rank)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/job%c.rank%d.log", logdir, 'A' + job, rank);
    setenv("CHORUS_DEBUG", "INFO", 1);
    setenv("CHORUS_DEBUG_SUBSYS", "INIT", 1);
    setenv("CHORUS_DEBUG_FILE", path, 1);
    if (net) {
        char host[64];
        snprintf(host, sizeof(host), "twojobs-host%d", rank);
        setenv("CHORUS_HOSTID", host, 1);
    }
    if (!wait_for(&sh->ids_ready, 1, harness_now_s() + 10)) {
        FAIL("job %c rank %d: no unique id", 'A' + job, rank);
        return 1;
    }
    chorusUniqueId id = sh->id[job];
    chorusComm_t comm = NULL;
    chorusResult_t res = chorusCommInitRank(&comm, NRANKS, id, rank);
    if (res != chorusSuccess) {
        FAIL("job %c rank %d: chorusCommInitRank: %s: %s", 'A' + job, rank,
             chorusGetErrorString(res), chorusGetLastError(NULL));
        return 1;
    }
    __atomic_add_fetch(&sh->inited, 1, __ATOMIC_ACQ_REL);
    /* Both jobs' collectives at once. */
    if (!wait_for(&sh->inited, NJOBS * NRANKS, harness_now_s() + LIMIT_S))
        FAIL("job %c rank %d: the other ranks never finished init", 'A' + job, rank);
    int32_t mine = job * 1000 + rank, all[NRANKS];
    CHECK_OK(chorusAllGather(&mine, all, 1, chorusInt32, comm, NULL));
    for (int r = 0; r < NRANKS; r++)
        if (all[r] != job * 1000 + r)
            FAIL("job %c rank %d: all-gather slot %d is %d, want %d", 'A' + job, rank, r, all[r],
                 job * 1000 + r);
    for (int round = 0; round < 5; round++) {
        check_allreduce(comm, job, rank, 1, round);
        check_allreduce(comm, job, rank, 4099, round);
        check_allreduce(comm, job, rank, 1 << 20, round);
    }
    CHECK_OK(chorusCommDestroy(comm));
    return harness_failures != 0;
}

/* Count "conn ... via shm" and "via net" lines in one job's logs. */
static void count_transports(int job, int *shm, int *netc)
{
    *shm = *netc = 0;
    for (int r = 0; r < NRANKS; r++) {
        char path[300], line[1024];
        snprintf(path, sizeof(path), "%s/job%c.rank%d.log", logdir, 'A' + job, r);
        FILE *f = fopen(path, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            if (strstr(line, " conn ") == NULL)
                continue;
            *shm += strstr(line, " via shm") != NULL;
            *netc += strstr(line, " via net") != NULL;
        }
        if (f != NULL)
            fclose(f);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "shm";
    if (strcmp(mode, "shm") != 0 && strcmp(mode, "net") != 0) {
        fprintf(stderr, "usage: %s [shm|net]\n", argv[0]);
        return 2;
    }
    net = strcmp(mode, "net") == 0;
    printf("test_two_jobs %s\n", mode);
    setenv("CHORUS_TIMEOUT_MS", "30000", 1);
    if (harness_mkdtemp(logdir, sizeof(logdir), "two_jobs") != 0 ||
        (sh = harness_shared(sizeof(*sh))) == NULL)
        return 1;
    /* Fork before any thread exists (chorusGetUniqueId starts the roots'). */
    pid_t pids[NJOBS * NRANKS];
    for (int i = 0; i < NJOBS * NRANKS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            int rc = rank_main(i / NRANKS, i % NRANKS);
            if (rc != 0)
                __atomic_add_fetch(&sh->failed, 1, __ATOMIC_ACQ_REL);
            fflush(stdout);
            _exit(rc);
        }
    }
    double t0 = harness_now_s();
    for (int j = 0; j < NJOBS; j++)
        CHECK_OK(chorusGetUniqueId(&sh->id[j]));
    if (memcmp(&sh->id[0], &sh->id[1], sizeof(chorusUniqueId)) == 0)
        FAIL("the two jobs got the same unique id");
    __atomic_store_n(&sh->ids_ready, 1, __ATOMIC_RELEASE);

    int left = NJOBS * NRANKS, killed = 0;
    while (left > 0) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p == 0) {
            if (!killed && harness_now_s() - t0 > LIMIT_S) {
                FAIL("the jobs did not finish within %.0f s: killing them", LIMIT_S);
                for (int i = 0; i < NJOBS * NRANKS; i++)
                    kill(pids[i], SIGKILL);
                killed = 1;
            }
            sleep_ms(20);
            continue;
        }
        if (p < 0)
            break;
        left--;
        for (int i = 0; i < NJOBS * NRANKS; i++)
            if (pids[i] == p && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
                FAIL("job %c rank %d %s %d", 'A' + i / NRANKS, i % NRANKS,
                     WIFEXITED(status) ? "exited with" : "was killed by signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    printf("     both jobs done in %.2f s\n", harness_now_s() - t0);
    for (int j = 0; j < NJOBS; j++) {
        int shm, netc;
        count_transports(j, &shm, &netc);
        printf("     job %c: %d connections via shm, %d via net\n", 'A' + j, shm, netc);
        if (net ? (netc == 0 || shm != 0) : (shm == 0 || netc != 0))
            FAIL("job %c: %d shm and %d net connections where the mode wants only %s", 'A' + j, shm,
                 netc, net ? "net" : "shm");
    }
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", logdir);
    (void)!system(cmd);
    return harness_finish(
        "test_two_jobs %s: two 4-rank jobs at once on one host (own ids, %s) "
        "each get exactly their own sums and all-gather",
        mode, net ? "every rank its own CHORUS_HOSTID, the same ids in both jobs" : "shm");
}
