/*
 * switch_cost [CPU] [ROUNDS]: what handing a CPU from one waiter to another costs on this
 * machine, the floor of a collective whose ranks outnumber the cores (perftests/README.md,
 * "4 ranks on 2 cores"). Three numbers, each the mean over ROUNDS (default 200000):
 *   - a bare system call (getppid), and a sched_yield with nobody else to run;
 *   - a hand-over between two threads of one process pinned to CPU (default 0), each waiting for
 *     its turn on a shared word with sched_yield;
 *   - the same between two processes (a shared anonymous mapping), which also switches the
 *     address space.
 * Plain C, no Chorus and no MPI.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

static long rounds = 200000;

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        perror("sched_setaffinity");
        exit(1);
    }
}

/* Take turns on *turn: party me (0 or 1) runs turn 2i + me, then hands over. */
static void take_turns(volatile long *turn, int me)
{
    for (long i = 0; i < rounds; i++) {
        long mine = 2 * i + me;
        while (__atomic_load_n(turn, __ATOMIC_ACQUIRE) != mine)
            sched_yield();
        __atomic_store_n(turn, mine + 1, __ATOMIC_RELEASE);
    }
}

static volatile long thread_turn;

static void *thread_party(void *arg)
{
    take_turns(&thread_turn, (int)(long)arg);
    return NULL;
}

int main(int argc, char **argv)
{
    int cpu = argc > 1 ? atoi(argv[1]) : 0;
    if (argc > 2)
        rounds = atol(argv[2]);
    if (rounds <= 0) {
        fprintf(stderr, "switch_cost: ROUNDS must be positive\n");
        return 2;
    }
    pin(cpu);

    double t0 = now_s();
    for (long i = 0; i < rounds; i++)
        syscall(SYS_getppid);
    double t_sys = now_s() - t0;
    t0 = now_s();
    for (long i = 0; i < rounds; i++)
        sched_yield();
    double t_yield = now_s() - t0;

    pthread_t th;
    t0 = now_s();
    if (pthread_create(&th, NULL, thread_party, (void *)1L) != 0) {
        fprintf(stderr, "switch_cost: pthread_create failed\n");
        return 1;
    }
    thread_party((void *)0L);
    pthread_join(th, NULL);
    double t_thread = now_s() - t0;

    volatile long *turn =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (turn == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    t0 = now_s();
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    take_turns(turn, child == 0);
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    double t_proc = now_s() - t0;

    printf("CPU %d, %ld rounds: syscall %.3f us, lone sched_yield %.3f us, hand-over between "
           "threads %.3f us, between processes %.3f us\n",
           cpu, rounds, t_sys / rounds * 1e6, t_yield / rounds * 1e6,
           t_thread / (2.0 * rounds) * 1e6, t_proc / (2.0 * rounds) * 1e6);
    return 0;
}
