/*
 * sched_model [NPROC] [ROUNDS] [PIN] [RULE]: a bare model of a small all-reduce's schedule when
 * ranks outnumber cores, with no library and no data (perftests/README.md, "4 ranks on 2 cores").
 * NPROC processes (default 4) each, per round, post the round number in their own cache line and
 * wait until every other has posted it. A waiter yields its CPU only when a process last seen on
 * that CPU can move on (it is not waiting, or what it waits for has come), else it spins: the
 * rule Chorus' direct waits follow (algorithms/direct_win.c, the gate). RULE 1 also spins where
 * that process waits for this round or a later one (moving on, it would only wait beside this
 * one). PIN 1 pins process i to CPU i % ncpus; 0 (default) leaves placement to the scheduler.
 * Prints, per process, the time per round and the user and system time and scheduler switches
 * (voluntary + involuntary) per round. Plain C, no Chorus and no MPI.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

#define MAX_PROC 64

static int rule; /* RULE: 0 or 1 */

typedef struct {
    _Alignas(64) long posted; /* the last round this process posted */
    int waiting; /* 1 while it waits for waited_for to post round */
    int cpu; /* the CPU it last saw itself on */
    int waited_for;
    long round;
    double us, user_us, sys_us, switches; /* per round, filled when the process is done */
} slot_t;

/* 1 when a process last seen on this CPU could run now. */
static int yield_useful(slot_t *s, int n, int me)
{
    int cpu = sched_getcpu();
    __atomic_store_n(&s[me].cpu, cpu, __ATOMIC_RELAXED);
    for (int q = 0; q < n; q++) {
        if (q == me || __atomic_load_n(&s[q].cpu, __ATOMIC_RELAXED) != cpu)
            continue;
        if (!__atomic_load_n(&s[q].waiting, __ATOMIC_ACQUIRE))
            return 1;
        if (rule == 1 && __atomic_load_n(&s[q].round, __ATOMIC_RELAXED) >= s[me].round)
            continue;
        int w = __atomic_load_n(&s[q].waited_for, __ATOMIC_RELAXED);
        if (__atomic_load_n(&s[w].posted, __ATOMIC_ACQUIRE) >=
            __atomic_load_n(&s[q].round, __ATOMIC_RELAXED))
            return 1;
    }
    return 0;
}

static void run(slot_t *s, int n, int me, long rounds)
{
    for (long k = 1; k <= rounds; k++) {
        __atomic_store_n(&s[me].posted, k, __ATOMIC_RELEASE);
        for (int j = 0; j < n; j++) {
            if (__atomic_load_n(&s[j].posted, __ATOMIC_ACQUIRE) >= k)
                continue;
            s[me].waited_for = j;
            s[me].round = k;
            __atomic_store_n(&s[me].cpu, sched_getcpu(), __ATOMIC_RELAXED);
            __atomic_store_n(&s[me].waiting, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&s[j].posted, __ATOMIC_ACQUIRE) < k) {
                if (yield_useful(s, n, me))
                    sched_yield();
                else
                    cpu_relax();
            }
            __atomic_store_n(&s[me].waiting, 0, __ATOMIC_RELEASE);
        }
    }
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    long rounds = argc > 2 ? atol(argv[2]) : 100000;
    int pin = argc > 3 ? atoi(argv[3]) : 0;
    rule = argc > 4 ? atoi(argv[4]) : 0;
    if (n < 2 || n > MAX_PROC || rounds <= 0 || rule < 0 || rule > 1) {
        fprintf(stderr, "sched_model: NPROC must be 2-%d, ROUNDS positive, RULE 0 or 1\n",
                MAX_PROC);
        return 2;
    }
    slot_t *s = mmap(NULL, sizeof(slot_t) * MAX_PROC, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (int q = 0; q < n; q++)
        s[q].cpu = -1;
    int me = 0;
    pid_t kids[MAX_PROC];
    for (int q = 1; q < n; q++) {
        kids[q] = fork();
        if (kids[q] < 0) {
            perror("fork");
            return 1;
        }
        if (kids[q] == 0) {
            me = q;
            break;
        }
    }
    if (pin) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET((int)(me % (ncpu > 0 ? ncpu : 1)), &set);
        sched_setaffinity(0, sizeof(set), &set);
    }
    struct rusage u0, u1;
    getrusage(RUSAGE_SELF, &u0);
    double t0 = now_s();
    run(s, n, me, rounds);
    double t = now_s() - t0;
    getrusage(RUSAGE_SELF, &u1);
    double user = (double)(u1.ru_utime.tv_sec - u0.ru_utime.tv_sec) * 1e6 +
                  (double)(u1.ru_utime.tv_usec - u0.ru_utime.tv_usec);
    double sys = (double)(u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) * 1e6 +
                 (double)(u1.ru_stime.tv_usec - u0.ru_stime.tv_usec);
    long sw = (u1.ru_nvcsw - u0.ru_nvcsw) + (u1.ru_nivcsw - u0.ru_nivcsw);
    s[me].us = t / (double)rounds * 1e6;
    s[me].user_us = user / (double)rounds;
    s[me].sys_us = sys / (double)rounds;
    s[me].switches = (double)sw / (double)rounds;
    if (me != 0)
        return 0;
    for (int q = 1; q < n; q++)
        waitpid(kids[q], NULL, 0);
    for (int q = 0; q < n; q++)
        printf("process %d of %d: %.3f us a round; user %.2f us, system %.2f us, %.2f switches a "
               "round\n",
               q, n, s[q].us, s[q].user_us, s[q].sys_us, s[q].switches);
    return 0;
}
