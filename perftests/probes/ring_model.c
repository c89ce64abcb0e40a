/*
 * ring_model [NBYTES] [ITERS] [SLOT]: a bare model of the 2-rank ring all-reduce Chorus runs for
 * large float32 sums (algorithms/ring_allreduce.c over kernels/prims.c), with no library
 * (perftests/HISTORY.md, "The 64 MiB all-reduce against its own schedule").
 * Two processes pinned to CPUs 0 and 1 share one FIFO per direction of 8 slots of SLOT bytes
 * (default 512 KiB, Chorus' CHORUS_BUFFSIZE 4M / CHORUS_STEPS 8). Each loop iteration covers two
 * chunks of half a FIFO; per iteration a process copies the chunk its peer finishes into its send
 * slots, adds its own input to the peer's slots into its output and copies the sums into its send
 * slots, then copies the peer's sums from the slots into its output: four passes over the data,
 * as Chorus does. Timed out of place and in place (output = input), then rank 0's single-core
 * memcpy of NBYTES (default 64 MiB) with the peer idle. Prints the time a call, busbw
 * (nccl-tests: NBYTES / time at 2 ranks) and busbw as a share of the memcpy bandwidth, issue 6's
 * yardstick, after checking the out-of-place sums. Plain C, no Chorus and no MPI; spin waits give
 * up after 10 s.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

#define STEPS 8
#define WAIT_S 10.0

typedef struct {
    _Alignas(64) long head; /* slots the sender has filled */
    _Alignas(64) long tail; /* slots the receiver has emptied */
} fifo_ctl_t;

typedef struct {
    fifo_ctl_t fifo[2]; /* fifo[r]: sent by rank r */
    _Alignas(64) long go; /* rounds both ranks started */
    int failed;
    double us[2][2]; /* [rank][in place] microseconds a call */
} shared_t;

static shared_t *sh;
static char *slots; /* 2 x STEPS x slot bytes */
static size_t slot;
static int me;
static long sent, recvd;

/* Spin until *word >= want; 0 after WAIT_S seconds (the other process died or stalled). */
static int wait_ge(long *word, long want)
{
    return probe_wait_ge(word, want, &sh->failed, WAIT_S);
}

static char *send_slot(void)
{
    if (!wait_ge(&sh->fifo[me].tail, sent + 1 - STEPS))
        return NULL;
    return slots + ((size_t)me * STEPS + (size_t)(sent % STEPS)) * slot;
}

static void post_send(void)
{
    __atomic_store_n(&sh->fifo[me].head, ++sent, __ATOMIC_RELEASE);
}

static const float *recv_slot(void)
{
    if (!wait_ge(&sh->fifo[1 - me].head, recvd + 1))
        return NULL;
    return (const float *)(slots + ((size_t)(1 - me) * STEPS + (size_t)(recvd % STEPS)) * slot);
}

static void post_recv(void)
{
    __atomic_store_n(&sh->fifo[1 - me].tail, ++recvd, __ATOMIC_RELEASE);
}

static void add(float *restrict d, const float *restrict a, const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] + b[i];
}

/* One all-reduce of n floats (a multiple of the iteration); 0 when a wait gave up. */
static int allreduce(const float *in, float *out, size_t n)
{
    size_t per = slot / sizeof(float), chunk = per * STEPS / 2;
    for (size_t off = 0; off < n; off += 2 * chunk) {
        size_t theirs = off + (size_t)(1 - me) * chunk, mine = off + (size_t)me * chunk;
        for (size_t o = 0; o < chunk; o += per) {
            char *d = send_slot();
            if (d == NULL)
                return 0;
            memcpy(d, in + theirs + o, slot);
            post_send();
        }
        for (size_t o = 0; o < chunk; o += per) {
            const float *r = recv_slot();
            char *d = send_slot();
            if (r == NULL || d == NULL)
                return 0;
            add(out + mine + o, in + mine + o, r, per);
            memcpy(d, out + mine + o, slot);
            post_send();
            post_recv();
        }
        for (size_t o = 0; o < chunk; o += per) {
            const float *r = recv_slot();
            if (r == NULL)
                return 0;
            memcpy(out + theirs + o, r, slot);
            post_recv();
        }
    }
    return 1;
}

int main(int argc, char **argv)
{
    size_t nbytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)64 << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 20;
    slot = argc > 3 ? strtoull(argv[3], NULL, 0) : (size_t)512 << 10;
    size_t iter_bytes = slot * STEPS; /* two chunks of half a FIFO */
    if (iters <= 0 || slot < 64 || slot % 64 != 0 || nbytes < iter_bytes ||
        nbytes % iter_bytes != 0) {
        fprintf(stderr,
                "ring_model: NBYTES must be a positive multiple of 8 x SLOT (%zu), SLOT a "
                "multiple of 64, ITERS positive\n",
                iter_bytes);
        return 2;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    slots = mmap(NULL, 2 * STEPS * slot, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED || slots == MAP_FAILED) {
        perror("ring_model: mmap");
        return 1;
    }
    memset(slots, 0, 2 * STEPS * slot);
    pid_t kid = fork();
    if (kid < 0) {
        perror("ring_model: fork");
        return 1;
    }
    me = kid == 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(me % (int)(sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 2 : 1), &set);
    sched_setaffinity(0, sizeof(set), &set);

    size_t n = nbytes / sizeof(float);
    float *in = malloc(nbytes), *out = malloc(nbytes);
    if (in == NULL || out == NULL) {
        fprintf(stderr, "ring_model: out of memory for 2 x %zu bytes\n", nbytes);
        __atomic_store_n(&sh->failed, 1, __ATOMIC_RELAXED);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        in[i] = (float)(i % 1024);
    memset(out, 0, nbytes);
    for (int ip = 0; ip < 2; ip++) {
        float *o = ip ? in : out;
        for (int it = -3; it < iters; it++) {
            if (it == 0) {
                /* Both start the timed calls together. */
                __atomic_fetch_add(&sh->go, 1, __ATOMIC_ACQ_REL);
                if (!wait_ge(&sh->go, 2 * (ip + 1)))
                    goto fail;
                sh->us[me][ip] = now_s();
            }
            if (!allreduce(in, o, n))
                goto fail;
        }
        sh->us[me][ip] = (now_s() - sh->us[me][ip]) / iters * 1e6;
        /* Out of place, every call left 2 x in (small integers: exact). */
        for (size_t i = 0; ip == 0 && i < n; i++)
            if (out[i] != 2 * in[i]) {
                fprintf(stderr, "ring_model: rank %d: element %zu is %g, not %g\n", me, i,
                        (double)out[i], 2 * (double)in[i]);
                __atomic_store_n(&sh->failed, 1, __ATOMIC_RELAXED);
                return 1;
            }
    }
    if (me == 1)
        return 0;
    waitpid(kid, NULL, 0);
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        double t0 = now_s();
        memcpy(out, in, nbytes);
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    double memcpy_gbs = (double)nbytes / best / 1e9;
    printf("ring_model: %zu bytes, slots of %zu, %d calls; single-core memcpy %.2f GB/s\n", nbytes,
           slot, iters, memcpy_gbs);
    for (int ip = 0; ip < 2; ip++) {
        double us = sh->us[0][ip] > sh->us[1][ip] ? sh->us[0][ip] : sh->us[1][ip];
        double busbw = (double)nbytes / us / 1e3;
        printf("  %-12s %9.1f us  busbw %6.2f GB/s  %3.0f%% of memcpy\n",
               ip ? "in place" : "out of place", us, busbw, busbw / memcpy_gbs * 100);
    }
    return 0;
fail:
    __atomic_store_n(&sh->failed, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "ring_model: rank %d: the other process stopped answering for %.0f s\n", me,
            WAIT_S);
    return 1;
}
