/*
 * test_faults.c: what the other ranks get when a rank dies, stops or never starts, or when a
 * communicator is aborted under a blocked call (issue 5: dead and stuck peers, abort, init).
 *
 *   test_faults kill shm|net N [TRIALS]   N ranks (processes, chorusCommInitEnv, CHORUS_ROOT on a
 *       port the driver picked) loop on all-reduces of mixed sizes (1 KiB .. 4 MiB of floats,
 *       in and out of place, checked bit-exact); after a random delay the driver SIGKILLs the
 *       victim (rank 0, rank N/2, rank N-1 in turn, TRIALS each). On every survivor the first
 *       call that fails (blocked at the kill, or started after the failure notice came) must
 *       return chorusRemoteError within 1 s of the kill on one host (shm), 5 s when every rank
 *       has its own CHORUS_HOSTID (net), and its chorusGetLastError must name "chorusAllReduce
 *       #<its call count>" and "rank <victim>": the user has not been told of the failure yet,
 *       so chorusInvalidUsage ("aborted after an earlier error") is not the answer.
 *   test_faults kill_p2p shm|net N [TRIALS]  the same with each call a group of 64 sends of 1024
 *       floats to the next rank and 64 receives from the previous one (bit-exact): every survivor's
 *       first failed group must return chorusRemoteError within the same bounds, naming the
 *       victim (a send/recv's wait asks after its peers' processes, one each way).
 *   test_faults sigstop shm|net [TRIALS]  4 ranks, CHORUS_TIMEOUT_MS=3000, small all-reduces; the
 *       driver SIGSTOPs one rank (1, 3, 0, 2 in turn): every other rank's call must return
 *       chorusTimeout between 0.9 and 2 deadlines after the stop, naming the stopped rank.
 *   test_faults abort blocked|race|idle|busy [TRIALS]  2 ranks as threads of this process
 *       (chorusCommInitRank). blocked: rank 0 blocks in an all-reduce rank 1 never calls, and
 *       another thread aborts rank 0's comm; race: the same with the abort 0-20 ms after the call
 *       is released, so it may come first; idle: both comms aborted between calls; busy: both
 *       ranks loop on 1 MiB all-reduces and both comms are aborted 0-20 ms into it. Each abort
 *       must return chorusSuccess within 1 s, each blocked call an error within 1 s of the abort,
 *       and then every call on the handle chorusInvalidUsage.
 *   test_faults init_missing env|id [TRIALS]  a job of 4 where rank 3 never starts
 *       (CHORUS_TIMEOUT_MS=3000); env: chorusCommInitEnv, rank 0 hosts the root; id: rank 0 makes
 *       the unique id, chorusCommInitRank. Ranks 0-2 must fail with chorusTimeout within 3 s + 2 s
 *       of their start, the text naming rank 3.
 *   test_faults init_root_dies [TRIALS]  rank 0 (env init) hosts the root and is SIGKILLed in its
 *       init once the root listens: before any other rank started (even trials), or once rank 1
 *       is connected to it (odd trials); the other ranks start after the kill. Every live rank's
 *       init must fail within 3 s + 2 s of its start.
 *
 * Survivors report through a shared page (result, call number, times on CLOCK_MONOTONIC, error
 * text) and stay alive until the driver has every report, so a survivor's exit cannot be what
 * another survivor sees. A kill or sigstop case stops after 3 failed trials, an init case after
 * the first. A rank whose init failed exits at once, as a real job's would. The driver has a
 * watchdog (SIGALRM) that kills every child; children die with the driver (PR_SET_PDEATHSIG). Exit
 * 0 pass, 1 fail.
 *
 * Trials: 20 per victim in every kill case, 4 and 8 ranks (the "20/20"): all four kill
 * cases together take about 3 minutes on 2 cores (faults.cmake lists each).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

#define MAX_RANKS 8
#define TEXT_BYTES 1536
#ifndef MAX_FAILED_TRIALS
#define MAX_FAILED_TRIALS 3 /* then the case stops: one failure is enough to see */
#endif
#define ABORT_BOUND_NS 1000000000LL

/* A rank's progress, as the driver sees it. */
enum { ST_START, ST_ENTERING, ST_INITED, ST_REPORTED, ST_DONE };

typedef struct report {
    int state;
    int calls; /* collectives completed (each checked) */
    int bad; /* completed collectives whose result was not exact */
    int res; /* result of the failed call, or of init */
    int call_no; /* 1-based number of the failed call on the communicator */
    int destroy_res;
    int64_t t_start_ns; /* init's start */
    int64_t t_end_ns; /* when the failed call (or init) returned */
    char text[TEXT_BYTES]; /* its chorusGetLastError, or what was not exact */
} report_t;

/* One anonymous shared page set, made before any fork. */
typedef struct shared {
    int go; /* survivors may destroy their communicator and exit */
    int id_ready;
    chorusUniqueId id;
    report_t rep[MAX_RANKS];
} shared_t;

typedef struct job {
    int nranks;
    int net; /* each rank its own CHORUS_HOSTID: TCP between every pair */
    int timeout_ms; /* CHORUS_TIMEOUT_MS */
    int port; /* CHORUS_ROOT=127.0.0.1:port */
    int max_log2; /* largest all-reduce: 2^max_log2 floats */
    int use_id; /* init by a unique id rank 0 makes, not by the environment */
    int p2p; /* grouped sends and receives round the ring instead of all-reduces */
    uint64_t seed; /* the all-reduce sizes */
} job_t;

static shared_t *sh;
static job_t job;
static pid_t pids[MAX_RANKS];
static int exit_status[MAX_RANKS]; /* of the children reaped so far */
static pid_t driver_pid;
static uint64_t rng;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int load(const int *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void store(int *p, int v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static int rand_below(int n)
{
    return (int)(harness_uniform01(&rng) * n);
}

/* ---- children: start, kill, reap ---- */

static void kill_children(void)
{
    for (int r = 0; r < MAX_RANKS; r++)
        if (pids[r] > 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
            pids[r] = 0;
        }
}

static void on_exit_cleanup(void)
{
    if (getpid() == driver_pid)
        kill_children();
}

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL test_faults: watchdog expired (a case hung); killing every "
                              "child\n";
    if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0) {
    }
    for (int r = 0; r < MAX_RANKS; r++)
        if (pids[r] > 0)
            kill(pids[r], SIGKILL);
    _exit(1);
}

/* Fork rank r running fn; the child exits with fn's value and never returns here. */
static void spawn(int r, int (*fn)(int))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        FAIL("fork for rank %d: %s", r, strerror(errno));
        return;
    }
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != driver_pid)
            _exit(1);
        alarm(300); /* last resort, should the driver's watchdog not fire */
        _exit(fn(r));
    }
    pids[r] = pid;
}

/* Nonzero once rank r's process has exited (reaped here, status in exit_status[r]). */
static int child_gone(int r)
{
    if (pids[r] <= 0)
        return 1;
    if (waitpid(pids[r], &exit_status[r], WNOHANG) == pids[r]) {
        pids[r] = 0;
        return 1;
    }
    return 0;
}

/* Let the survivors destroy their communicators and reap everyone; SIGKILL what is left after
 * 30 s. Returns the number of ranks that did not end cleanly (destroy failed, crashed, hung). */
static int end_job(int skip)
{
    store(&sh->go, 1);
    int64_t deadline = now_ns() + 30000000000LL;
    int bad = 0;
    for (int r = 0; r < job.nranks; r++) {
        while (!child_gone(r) && now_ns() < deadline)
            sleep_ms(5);
        if (pids[r] > 0) {
            FAIL("rank %d did not exit within 30 s of the go to destroy (killed)", r);
            bad++;
        } else if (r != skip && load(&sh->rep[r].state) == ST_DONE &&
                   sh->rep[r].destroy_res != chorusSuccess) {
            FAIL("rank %d: chorusCommDestroy after the failure returned %s", r,
                 chorusGetErrorString((chorusResult_t)sh->rep[r].destroy_res));
            bad++;
        } else if (r != skip && WIFSIGNALED(exit_status[r])) {
            FAIL("rank %d died of signal %d", r, WTERMSIG(exit_status[r]));
            bad++;
        }
    }
    kill_children();
    return bad;
}

static void new_job(void)
{
    memset(sh, 0, sizeof(*sh));
    memset(exit_status, 0, sizeof(exit_status));
    job.port = harness_free_port();
    if (job.port == 0)
        FAIL("no free loopback port");
    job.seed = harness_splitmix(rng++);
}

/* ---- what a rank does ---- */

static void set_env_int(const char *name, int v)
{
    char s[32];
    snprintf(s, sizeof(s), "%d", v);
    setenv(name, s, 1);
}

static void set_job_env(int rank)
{
    char s[64];
    set_env_int("CHORUS_RANK", rank);
    set_env_int("CHORUS_NRANKS", job.nranks);
    set_env_int("CHORUS_TIMEOUT_MS", job.timeout_ms);
    snprintf(s, sizeof(s), "127.0.0.1:%d", job.port);
    setenv("CHORUS_ROOT", s, 1);
    snprintf(s, sizeof(s), "faults%d", job.net ? rank : 0);
    setenv("CHORUS_HOSTID", s, 1);
}

static void record(report_t *me, int state, chorusResult_t res, const char *text)
{
    me->t_end_ns = now_ns();
    me->res = res;
    snprintf(me->text, sizeof(me->text), "%s", text ? text : "(null)");
    store(&me->state, state);
}

/* The size of collective number call, the same on every rank: 2^k + a little, 256 floats up. */
static size_t pick_count(int call)
{
    uint64_t x = harness_splitmix(job.seed + (uint64_t)call);
    int k = 8 + (int)(x % (uint64_t)(job.max_log2 - 8 + 1));
    size_t count = ((size_t)1 << k) + (x >> 32) % 97;
    size_t max = (size_t)1 << job.max_log2;
    return count > max ? max : count;
}

/* Small integers: every summation order gives the same float. */
static float input(int rank, size_t i, int call)
{
    return (float)(rank + 1 + (int)((i + (size_t)call) % 61));
}

static float expected(size_t i, int call)
{
    int n = job.nranks;
    return (float)(n * (n + 1) / 2 + n * (int)((i + (size_t)call) % 61));
}

/* The index of the first element that is not bit-exact, or -1. */
static long first_wrong(const float *out, size_t count, int call)
{
    for (size_t i = 0; i < count; i++) {
        float want = expected(i, call);
        if (memcmp(&out[i], &want, sizeof(float)) != 0)
            return (long)i;
    }
    return -1;
}

static void wait_go(void)
{
    int64_t deadline = now_ns() + 120000000000LL;
    while (!load(&sh->go) && now_ns() < deadline)
        sleep_ms(5);
}

/* kill_p2p's call: one group of P2P_OPS sends of count floats to the next rank and as many
 * receives from the previous one (a chain of ops a peer each way); 0 or the failed result. */
#define P2P_OPS 64
static chorusResult_t ring_group(chorusComm_t comm, int rank, const float *send, float *recv,
                                 size_t count, int call)
{
    int n = job.nranks, next = (rank + 1) % n, prev = (rank + n - 1) % n;
    chorusResult_t res = chorusGroupStart();
    for (int k = 0; k < P2P_OPS && res == chorusSuccess; k++) {
        res = chorusSend(send + k * count, count, chorusFloat32, next, comm, NULL);
        if (res == chorusSuccess)
            res = chorusRecv(recv + k * count, count, chorusFloat32, prev, comm, NULL);
    }
    chorusResult_t end = chorusGroupEnd();
    (void)call;
    return res != chorusSuccess ? res : end;
}

/* Join, then all-reduce (or ring_group) until a call fails; report it, wait for the go, destroy. */
static int rank_loop(int rank)
{
    report_t *me = &sh->rep[rank];
    set_job_env(rank);
    chorusComm_t comm = NULL;
    me->t_start_ns = now_ns();
    chorusResult_t res = chorusCommInitEnv(&comm);
    if (res != chorusSuccess) {
        record(me, ST_REPORTED, res, chorusGetLastError(NULL));
        return 1;
    }
    store(&me->state, ST_INITED);
    size_t max = (size_t)1 << job.max_log2;
    float *send = malloc((max + 97) * sizeof(float)), *recv = malloc((max + 97) * sizeof(float));
    for (int call = 1; job.p2p; call++) {
        size_t count = max / P2P_OPS, prev = (size_t)((rank + job.nranks - 1) % job.nranks);
        for (size_t i = 0; i < count * P2P_OPS; i++)
            send[i] = input(rank, i, call);
        res = ring_group(comm, rank, send, recv, count, call);
        if (res != chorusSuccess) {
            me->call_no = call;
            record(me, ST_REPORTED, res, chorusGetLastError(comm));
            break;
        }
        for (size_t i = 0; i < count * P2P_OPS; i++)
            if (recv[i] != input((int)prev, i, call) && me->bad++ == 0) {
                snprintf(me->text, sizeof(me->text),
                         "group #%d: element %zu from rank %zu is %g, want %g", call, i, prev,
                         recv[i], input((int)prev, i, call));
                break;
            }
        store(&me->calls, call);
    }
    for (int call = 1; !job.p2p; call++) {
        size_t count = pick_count(call);
        float *out = call % 2 ? send : recv; /* odd calls in place */
        for (size_t i = 0; i < count; i++)
            send[i] = input(rank, i, call);
        res = chorusAllReduce(send, out, count, chorusFloat32, chorusSum, comm, NULL);
        if (res != chorusSuccess) {
            me->call_no = call;
            record(me, ST_REPORTED, res, chorusGetLastError(comm));
            break;
        }
        long bad = first_wrong(out, count, call);
        if (bad >= 0 && me->bad++ == 0)
            snprintf(me->text, sizeof(me->text),
                     "call #%d (%zu floats): element %ld is %g, want %g", call, count, bad,
                     out[bad], expected((size_t)bad, call));
        store(&me->calls, call);
    }
    wait_go();
    me->destroy_res = chorusCommDestroy(comm);
    store(&me->state, ST_DONE);
    free(send);
    free(recv);
    return 0;
}

/* Join (and nothing else): report how init ended. */
static int rank_init(int rank)
{
    report_t *me = &sh->rep[rank];
    set_job_env(rank);
    chorusComm_t comm = NULL;
    chorusUniqueId id;
    chorusResult_t res;
    if (job.use_id && rank == 0) {
        res = chorusGetUniqueId(&id);
        if (res != chorusSuccess) {
            record(me, ST_REPORTED, res, chorusGetLastError(NULL));
            return 1;
        }
        sh->id = id;
        store(&sh->id_ready, 1);
    } else if (job.use_id) {
        int64_t deadline = now_ns() + 10000000000LL;
        while (!load(&sh->id_ready) && now_ns() < deadline)
            sleep_ms(2);
        id = sh->id;
    }
    store(&me->state, ST_ENTERING);
    me->t_start_ns = now_ns();
    if (job.use_id)
        res = chorusCommInitRank(&comm, job.nranks, id, rank);
    else
        res = chorusCommInitEnv(&comm);
    record(me, ST_REPORTED, res, res == chorusSuccess ? "" : chorusGetLastError(NULL));
    if (res == chorusSuccess)
        chorusCommDestroy(comm);
    return 0;
}

/* ---- what the driver checks ---- */

/* Nonzero when text names rank r: "rank r", "rank(s) r", or r in a list "ranks a, b, r". */
static int names_rank(const char *text, int r)
{
    for (const char *p = strstr(text, "rank"); p != NULL; p = strstr(p + 1, "rank")) {
        const char *q = p + 4;
        if (*q == 's')
            q++;
        else if (strncmp(q, "(s)", 3) == 0)
            q += 3;
        if (*q++ != ' ')
            continue;
        while (isdigit((unsigned char)*q)) {
            char *end;
            if (strtol(q, &end, 10) == r)
                return 1;
            q = end;
            if (q[0] != ',' || q[1] != ' ' || !isdigit((unsigned char)q[2]))
                break;
            q += 2;
        }
    }
    return 0;
}

/* Nonzero when text holds "chorusAllReduce #n" (and not #n0...). */
static int names_call(const char *text, int n)
{
    char want[64];
    int len = snprintf(want, sizeof(want), "chorusAllReduce #%d", n);
    for (const char *p = strstr(text, want); p != NULL; p = strstr(p + 1, want))
        if (!isdigit((unsigned char)p[len]))
            return 1;
    return 0;
}

/* Wait until every rank is past init and has completed at least `calls` exact collectives. */
static int wait_healthy(int calls)
{
    int64_t deadline = now_ns() + 60000000000LL;
    for (;;) {
        int ready = 0;
        for (int r = 0; r < job.nranks; r++) {
            report_t *p = &sh->rep[r];
            if (load(&p->state) == ST_REPORTED || p->bad || child_gone(r)) {
                FAIL("rank %d failed before the fault (after %d calls, %d inexact): %s: %s", r,
                     load(&p->calls), p->bad, chorusGetErrorString((chorusResult_t)p->res),
                     p->text);
                return 0;
            }
            ready += load(&p->state) == ST_INITED && load(&p->calls) >= calls;
        }
        if (ready == job.nranks)
            return 1;
        if (now_ns() > deadline) {
            FAIL("the job was not up and running within 60 s");
            return 0;
        }
        sleep_ms(2);
    }
}

/* Wait until every rank but skip has reported (or its process is gone), or until deadline. */
static void wait_reports(int skip, int64_t deadline)
{
    for (;;) {
        int left = 0;
        for (int r = 0; r < job.nranks; r++) {
            if (r != skip && load(&sh->rep[r].state) < ST_REPORTED && !child_gone(r))
                left++;
        }
        if (left == 0 || now_ns() > deadline)
            return;
        sleep_ms(2);
    }
}

/* Check rank r's report after the fault at t_fault; returns its latency in ms (-1: none). */
static int check_survivor(int r, int64_t t_fault, int want_res, int lo_ms, int hi_ms, int culprit,
                          int want_call)
{
    report_t *p = &sh->rep[r];
    if (load(&p->state) < ST_REPORTED) {
        if (pids[r] <= 0)
            FAIL("rank %d: its process ended (status 0x%x) without a report", r, exit_status[r]);
        else
            FAIL("rank %d: no error within %d ms of the fault (hung; %d calls done)", r,
                 (int)((now_ns() - t_fault) / 1000000), load(&p->calls));
        return -1;
    }
    int ms = (int)((p->t_end_ns - t_fault) / 1000000);
    int ok = p->res == want_res && ms >= lo_ms && ms <= hi_ms && p->bad == 0 &&
             names_rank(p->text, culprit) && (!want_call || names_call(p->text, p->call_no));
    if (!ok)
        FAIL("rank %d: call #%d returned %s %d ms after the fault (want %s in %d..%d ms, naming "
             "rank %d%s; %d inexact results before): %s",
             r, p->call_no, chorusGetErrorString((chorusResult_t)p->res), ms,
             chorusGetErrorString((chorusResult_t)want_res), lo_ms, hi_ms, culprit,
             want_call ? " and the call" : "", p->bad, p->text);
    return ms;
}

/* ---- kill and sigstop ---- */

/* One trial: start the job, let it run, send sig to victim, check the others. */
static int fault_trial(const char *trial, int victim, int sig, int want_res, int lo_ms, int hi_ms,
                       int *worst_ms)
{
    long before = harness_failures;
    new_job();
    for (int r = 0; r < job.nranks; r++)
        spawn(r, rank_loop);
    if (wait_healthy(sig == SIGKILL ? 2 : 5)) {
        sleep_ms(rand_below(sig == SIGKILL ? 500 : 200));
        int64_t t_fault = now_ns();
        kill(pids[victim], sig);
        wait_reports(victim, t_fault + (int64_t)(hi_ms + 10000) * 1000000);
        int calls_before = load(&sh->rep[victim].calls);
        int lo = 1 << 30, hi = -1;
        for (int r = 0; r < job.nranks; r++) {
            if (r == victim)
                continue;
            int ms = check_survivor(r, t_fault, want_res, lo_ms, hi_ms, victim,
                                    want_res == chorusRemoteError && !job.p2p);
            lo = ms < lo ? ms : lo;
            hi = ms > hi ? ms : hi;
        }
        *worst_ms = hi > *worst_ms ? hi : *worst_ms;
        printf("  %s: victim %d (after %d calls): survivors returned %d..%d ms after the %s\n",
               trial, victim, calls_before, lo, hi, sig == SIGKILL ? "kill" : "stop");
        if (sig == SIGSTOP) {
            kill(pids[victim], SIGKILL);
            kill(pids[victim], SIGCONT);
        }
    }
    end_job(victim);
    return harness_failures == before;
}

static int run_faults(const char *what, int sig, const int *victims, int nvictims, int trials,
                      int want_res, int lo_ms, int hi_ms)
{
    int failed = 0, worst = -1, t;
    for (t = 0; t < trials * nvictims && failed < MAX_FAILED_TRIALS; t++) {
        char trial[32];
        snprintf(trial, sizeof(trial), "trial %d/%d", t + 1, trials * nvictims);
        failed += !fault_trial(trial, victims[t % nvictims], sig, want_res, lo_ms, hi_ms, &worst);
    }
    if (failed >= MAX_FAILED_TRIALS)
        printf("  stopped after %d failed trials\n", failed);
    return harness_finish("%s: %d ranks over %s, %d of %d trials passed (of %d planned, %d per "
                          "victim), slowest survivor %d ms (bound %d..%d ms)",
                          what, job.nranks, job.net ? "net" : "shm", t - failed, t,
                          trials * nvictims, trials, worst, lo_ms, hi_ms);
}

static int case_kill(int trials)
{
    int n = job.nranks, victims[3] = {0, n / 2, n - 1};
    job.timeout_ms = 10000; /* a missed death shows as a late timeout, not a 10-minute hang */
    job.max_log2 = 20; /* up to 4 MiB of floats */
    return run_faults("kill -9 mid-AllReduce", SIGKILL, victims, 3, trials, chorusRemoteError, 0,
                      job.net ? 5000 : 1000);
}

/* kill_p2p: the same, the ranks in groups of sends round the ring (each survivor's first failed
 * group need not name a call number). */
static int case_kill_p2p(int trials)
{
    int n = job.nranks, victims[3] = {0, n / 2, n - 1};
    job.timeout_ms = 10000;
    job.max_log2 = 16; /* 64 sends of 1024 floats each way */
    job.p2p = 1;
    return run_faults("kill -9 mid-group of sends", SIGKILL, victims, 3, trials, chorusRemoteError,
                      0, job.net ? 5000 : 1000);
}

static int case_sigstop(int trials)
{
    int victims[4] = {1, 3, 0, 2};
    job.nranks = 4;
    job.timeout_ms = 3000;
    job.max_log2 = 14;
    int t = job.timeout_ms;
    return run_faults("SIGSTOP mid-AllReduce", SIGSTOP, victims, 4, trials, chorusTimeout,
                      t * 9 / 10, 2 * t);
}

/* ---- init failures ---- */

/* Check every started rank's init failed within T + 2 s of its start (naming rank `missing`). */
static void check_init_failures(const int *ranks, int n, int want_res, int missing)
{
    int64_t bound_ns = (int64_t)(job.timeout_ms + 2000) * 1000000;
    wait_reports(-1, now_ns() + bound_ns + 10000000000LL);
    for (int i = 0; i < n; i++) {
        report_t *p = &sh->rep[ranks[i]];
        if (load(&p->state) < ST_REPORTED) {
            FAIL("rank %d: init still running %lld ms after it started (hung)", ranks[i],
                 (long long)((now_ns() - p->t_start_ns) / 1000000));
            continue;
        }
        int ms = (int)((p->t_end_ns - p->t_start_ns) / 1000000);
        int ok = p->res != chorusSuccess && (want_res < 0 || p->res == want_res) &&
                 ms <= job.timeout_ms + 2000 && p->text[0] != '\0' &&
                 (missing < 0 || names_rank(p->text, missing));
        printf("     rank %d: %s after %d ms\n", ranks[i],
               chorusGetErrorString((chorusResult_t)p->res), ms);
        if (!ok)
            FAIL("rank %d: init returned %s after %d ms (want %s within %d ms%s): %s", ranks[i],
                 chorusGetErrorString((chorusResult_t)p->res), ms,
                 want_res < 0 ? "an error" : chorusGetErrorString((chorusResult_t)want_res),
                 job.timeout_ms + 2000, missing < 0 ? "" : ", naming the missing rank", p->text);
    }
}

static int case_init_missing(int use_id, int trials)
{
    int ranks[3] = {0, 1, 2};
    job.nranks = 4;
    job.timeout_ms = 3000;
    job.use_id = use_id;
    for (int t = 0; t < trials && harness_failures == 0; t++) {
        printf("  trial %d/%d: ranks 0-2 of 4 start, rank 3 never does\n", t + 1, trials);
        new_job();
        for (int i = 0; i < 3; i++)
            spawn(ranks[i], rank_init);
        check_init_failures(ranks, 3, chorusTimeout, 3);
        end_job(-1);
    }
    return harness_finish("init with rank 3 of 4 missing (%s): ranks 0-2 fail within %d ms naming "
                          "rank 3, %d trials",
                          use_id ? "unique id" : "env", job.timeout_ms + 2000, trials);
}

/* Nonzero when /proc/net/tcp has a socket on port in state st (0A listen, 01 established). */
static int port_in_state(int port, unsigned st)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    int found = 0;
    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof(line), f)) {
        unsigned lport, rport, state;
        if (sscanf(line, " %*d: %*x:%x %*x:%x %x", &lport, &rport, &state) == 3)
            found = state == st && ((int)lport == port || (st == 1 && (int)rport == port));
    }
    fclose(f);
    return found;
}

static int wait_port(int port, unsigned st, const char *what)
{
    int64_t deadline = now_ns() + 10000000000LL;
    while (!port_in_state(port, st)) {
        if (now_ns() > deadline) {
            FAIL("%s within 10 s", what);
            return 0;
        }
        sleep_ms(2);
    }
    return 1;
}

static int case_init_root_dies(int trials)
{
    job.nranks = 4;
    job.timeout_ms = 3000;
    for (int t = 0; t < trials && harness_failures == 0; t++) {
        int early = t % 2; /* rank 1 is connected to the root when it dies */
        printf("  trial %d/%d: rank 0 killed in init, %s\n", t + 1, trials,
               early ? "rank 1 connected to its root" : "before any other rank started");
        new_job();
        spawn(0, rank_init);
        if (!wait_port(job.port, 0x0A, "the root did not listen"))
            break;
        if (early) {
            spawn(1, rank_init);
            if (!wait_port(job.port, 0x01, "rank 1 did not connect to the root"))
                break;
        }
        kill(pids[0], SIGKILL);
        for (int r = 1 + early; r < 4; r++)
            spawn(r, rank_init);
        int ranks[3] = {1, 2, 3};
        check_init_failures(ranks, 3, -1, -1);
        end_job(0);
    }
    kill_children();
    return harness_finish("the root's process killed during init: ranks 1-3 fail within %d ms, "
                          "%d trials",
                          job.timeout_ms + 2000, trials);
}

/* ---- abort (ranks as threads of this process) ---- */

typedef struct caller {
    chorusComm_t comm;
    int go; /* start calling */
    int loop; /* call until one fails (busy) */
    int calls; /* calls that succeeded */
    int done;
    chorusResult_t res;
    int64_t t_done;
    pthread_t thread;
} caller_t;

static void *caller_main(void *arg)
{
    caller_t *c = arg;
    enum { COUNT = 1 << 18 };
    float *buf = calloc(COUNT, sizeof(float));
    while (!load(&c->go))
        sleep_ms(1);
    do {
        c->res = chorusAllReduce(buf, buf, c->loop ? COUNT : 1024, chorusFloat32, chorusSum,
                                 c->comm, NULL);
        if (c->res == chorusSuccess)
            store(&c->calls, load(&c->calls) + 1);
    } while (c->loop && c->res == chorusSuccess);
    c->t_done = now_ns();
    store(&c->done, 1);
    free(buf);
    return NULL;
}

typedef struct init_arg {
    chorusComm_t *comm;
    chorusUniqueId id;
    int rank;
    chorusResult_t res;
} init_arg_t;

static void *init_main(void *arg)
{
    init_arg_t *a = arg;
    a->res = chorusCommInitRank(a->comm, 2, a->id, a->rank);
    return NULL;
}

static int init_pair(chorusComm_t comms[2])
{
    init_arg_t a[2];
    pthread_t t;
    chorusUniqueId id;
    CHECK_OK(chorusGetUniqueId(&id));
    for (int r = 0; r < 2; r++)
        a[r] = (init_arg_t){&comms[r], id, r, chorusInternalError};
    pthread_create(&t, NULL, init_main, &a[1]);
    init_main(&a[0]);
    pthread_join(t, NULL);
    for (int r = 0; r < 2; r++)
        if (a[r].res != chorusSuccess)
            FAIL("rank %d: chorusCommInitRank: %s", r, chorusGetErrorString(a[r].res));
    return a[0].res == chorusSuccess && a[1].res == chorusSuccess;
}

/* Every call on an aborted handle: chorusInvalidUsage, and nothing else happens. */
static void check_refused(chorusComm_t comm)
{
    float x = 1;
    int v;
    chorusResult_t async;
    CHECK_RES(chorusAllReduce(&x, &x, 1, chorusFloat32, chorusSum, comm, NULL), chorusInvalidUsage);
    CHECK_RES(chorusBroadcast(&x, &x, 1, chorusFloat32, 0, comm, NULL), chorusInvalidUsage);
    CHECK_RES(chorusSend(&x, 1, chorusFloat32, 1, comm, NULL), chorusInvalidUsage);
    CHECK_RES(chorusCommCount(comm, &v), chorusInvalidUsage);
    CHECK_RES(chorusCommUserRank(comm, &v), chorusInvalidUsage);
    CHECK_RES(chorusCommCuDevice(comm, &v), chorusInvalidUsage);
    CHECK_RES(chorusCommGetAsyncError(comm, &async), chorusInvalidUsage);
    CHECK_RES(chorusCommFinalize(comm), chorusInvalidUsage);
    CHECK_RES(chorusCommAbort(comm), chorusInvalidUsage);
    CHECK_RES(chorusCommDestroy(comm), chorusInvalidUsage);
    const char *text = chorusGetLastError(comm);
    CHECK(text != NULL, "chorusGetLastError of an aborted comm returned NULL");
}

static int64_t abort_worst_ns, woken_worst_ns; /* the slowest abort and woken call so far */

/* Abort comm from this thread: chorusSuccess within 1 s. Returns when it started. */
static int64_t timed_abort(chorusComm_t comm, int rank)
{
    int64_t t0 = now_ns();
    chorusResult_t res = chorusCommAbort(comm);
    int64_t ns = now_ns() - t0;
    abort_worst_ns = ns > abort_worst_ns ? ns : abort_worst_ns;
    if (res != chorusSuccess || ns > ABORT_BOUND_NS)
        FAIL("rank %d: chorusCommAbort returned %s after %lld ms (want success within 1 s): %s",
             rank, chorusGetErrorString(res), (long long)(ns / 1000000), chorusGetLastError(NULL));
    return t0;
}

/* Join c's thread once its call returned; a thread stuck for 5 s ends the test (it cannot be
 * stopped, and its comm may be gone). */
static void join_caller(caller_t *c, int rank, const char *what)
{
    int64_t deadline = now_ns() + 5 * ABORT_BOUND_NS;
    while (!load(&c->done) && now_ns() < deadline)
        sleep_ms(1);
    if (!load(&c->done)) {
        FAIL("rank %d: %s did not return within 5 s; giving up", rank, what);
        harness_finish("abort: a thread is stuck in a call");
        fflush(stdout);
        _exit(1);
    }
    pthread_join(c->thread, NULL);
}

/* The call c was making ended with an error within 1 s of the abort at t_abort. */
static void check_woken(caller_t *c, int rank, int64_t t_abort)
{
    join_caller(c, rank, "the call blocked when chorusCommAbort was called");
    int64_t ns = c->t_done - t_abort;
    woken_worst_ns = ns > woken_worst_ns ? ns : woken_worst_ns;
    if (c->res == chorusSuccess || ns > ABORT_BOUND_NS)
        FAIL("rank %d: the call returned %s %lld ms after chorusCommAbort (want an error within "
             "1 s)",
             rank, chorusGetErrorString(c->res), (long long)(ns / 1000000));
}

static void abort_trial(const char *mode)
{
    chorusComm_t comms[2];
    caller_t c[2];
    memset(c, 0, sizeof(c));
    if (!init_pair(comms))
        return;
    int busy = !strcmp(mode, "busy"), idle = !strcmp(mode, "idle");
    int ncallers = busy || idle ? 2 : 1;
    for (int r = 0; r < ncallers; r++) {
        c[r] = (caller_t){.comm = comms[r], .loop = busy};
        pthread_create(&c[r].thread, NULL, caller_main, &c[r]);
        store(&c[r].go, 1);
    }
    if (idle) {
        for (int r = 0; r < 2; r++)
            join_caller(&c[r], r, "the all-reduce before the abort"); /* one, then idle */
        for (int r = 0; r < 2; r++)
            CHECK(c[r].res == chorusSuccess, "rank %d: the all-reduce before the abort: %s", r,
                  chorusGetErrorString(c[r].res));
        for (int r = 0; r < 2; r++)
            timed_abort(comms[r], r);
    } else if (busy) {
        int64_t deadline = now_ns() + 10 * ABORT_BOUND_NS;
        while ((load(&c[0].calls) < 2 || load(&c[1].calls) < 2) && now_ns() < deadline &&
               !load(&c[0].done) && !load(&c[1].done))
            sleep_ms(1);
        CHECK(!load(&c[0].done) && !load(&c[1].done), "a busy all-reduce failed before the abort");
        sleep_ms(rand_below(21));
        for (int r = 0; r < 2; r++)
            check_woken(&c[r], r, timed_abort(comms[r], r));
    } else {
        /* blocked: rank 1 never calls; race: the abort may come before the call starts */
        sleep_ms(!strcmp(mode, "race") ? rand_below(21) : 50);
        check_woken(&c[0], 0, timed_abort(comms[0], 0));
        timed_abort(comms[1], 1);
    }
    for (int r = 0; r < 2; r++)
        check_refused(comms[r]);
}

static int case_abort(const char *mode, int trials)
{
    if (strcmp(mode, "blocked") && strcmp(mode, "race") && strcmp(mode, "idle") &&
        strcmp(mode, "busy")) {
        fprintf(stderr, "test_faults abort: mode is blocked, race, idle or busy, not %s\n", mode);
        return 2;
    }
    int failed = 0;
    alarm(60 + 3 * trials); /* a stuck chorusCommAbort would hang this process */
    for (int t = 0; t < trials && failed < MAX_FAILED_TRIALS; t++) {
        long before = harness_failures;
        abort_trial(mode);
        failed += harness_failures != before;
    }
    return harness_finish("abort (%s): abort and the woken call within 1 s (slowest %.1f and %.1f "
                          "ms), then chorusInvalidUsage; %d of %d trials passed",
                          mode, abort_worst_ns / 1e6, woken_worst_ns / 1e6, trials - failed,
                          trials);
}

/* ---- main ---- */

static int usage(void)
{
    fprintf(stderr, "usage: test_faults kill|kill_p2p shm|net N [TRIALS] | sigstop shm|net "
                    "[TRIALS] |\n"
                    "       abort blocked|race|idle|busy [TRIALS] | init_missing env|id "
                    "[TRIALS] | init_root_dies [TRIALS]\n");
    return 2;
}

static int arg_int(int argc, char **argv, int i, int dflt)
{
    return argc > i ? atoi(argv[i]) : dflt;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    driver_pid = getpid();
    rng = (uint64_t)now_ns();
    printf("test_faults %s: seed %llu\n", argv[1], (unsigned long long)rng);
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        printf("FAIL mmap: %s\n", strerror(errno));
        return 1;
    }
    atexit(on_exit_cleanup);
    signal(SIGALRM, watchdog);
    alarm(1500); /* above every ctest TIMEOUT: ctest's own limit names the case first */
    const char *c = argv[1], *a2 = argc > 2 ? argv[2] : "";
    job.net = !strcmp(a2, "net");
    if (!strcmp(c, "kill") && argc > 3 && (job.net || !strcmp(a2, "shm"))) {
        job.nranks = atoi(argv[3]);
        if (job.nranks < 2 || job.nranks > MAX_RANKS)
            return usage();
        return case_kill(arg_int(argc, argv, 4, 20));
    }
    if (!strcmp(c, "kill_p2p") && argc > 3 && (job.net || !strcmp(a2, "shm"))) {
        job.nranks = atoi(argv[3]);
        if (job.nranks < 2 || job.nranks > MAX_RANKS)
            return usage();
        return case_kill_p2p(arg_int(argc, argv, 4, 10));
    }
    if (!strcmp(c, "sigstop") && (job.net || !strcmp(a2, "shm")))
        return case_sigstop(arg_int(argc, argv, 3, 2));
    if (!strcmp(c, "abort") && argc > 2)
        return case_abort(a2, arg_int(argc, argv, 3, 100));
    if (!strcmp(c, "init_missing") && (!strcmp(a2, "env") || !strcmp(a2, "id")))
        return case_init_missing(!strcmp(a2, "id"), arg_int(argc, argv, 3, 5));
    if (!strcmp(c, "init_root_dies"))
        return case_init_root_dies(arg_int(argc, argv, 2, 4));
    return usage();
}
