/*
 * take_back [NBYTES] [ITERS]: what a write costs when another core has just read the memory it
 * writes: the price a read in place (zero-copy) leaves for the input's owner, paid on its next
 * write of the input (perftests/README.md, "chorusMemAlloc buffers").
 * Two processes pinned to CPUs 0 and 1 share NBYTES (default 1 MiB). In each round the owner (CPU
 * 0) writes the shared buffer from a private copy of its values, one way per turn, and the reader
 * (CPU 1) then copies the buffer out, so before every write the reader holds its lines. The ways:
 * plain vector stores into a private buffer no one else reads (the baseline: the same write with
 * nothing to take back; the reader still copies the shared buffer that turn), then into the shared
 * one with plain vector stores (AVX2 where the CPU has it, else SSE2: what a compute kernel
 * writes with), with `rep movsb` (x86-64), with libc's memcpy (which picks one of those, or
 * streaming stores, by size), and with streaming stores (x86-64: what Chorus' copy_out and ring
 * slots past CHORUS_NT_MIN_BYTES write with). Turns alternate within each round, so a change in the
 * machine mid-run touches all ways alike. Prints each way's median and least time over ITERS rounds
 * (default 200, after 10 untimed) and the median over the baseline's. Plain C, no Chorus and no
 * MPI; waits give up after 10 s.
 */
#define _GNU_SOURCE
#include <sched.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../plain_store.h"
#include "probe.h"

#define WAIT_S 10.0
#define WARMUP 10

enum { W_PRIVATE, W_PLAIN, W_MOVSB, W_MEMCPY, W_STREAM, W_WAYS };
static const char *const way_name[W_WAYS] = {
    "plain stores, private buffer", "plain stores, reader's lines", "rep movsb, reader's lines",
    "libc memcpy, reader's lines", "streaming, reader's lines"};

typedef struct {
    _Alignas(64) long written; /* turns the owner has written */
    _Alignas(64) long read; /* turns the reader has copied */
    int failed;
} shared_t;

static shared_t *sh;

/* Spin until *word >= want; 0 after WAIT_S seconds (the other process died or stalled). */
static int wait_ge(long *word, long want)
{
    return probe_wait_ge(word, want, &sh->failed, WAIT_S);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t nbytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)1 << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 200;
    if (iters <= 0 || nbytes < 128 || nbytes % 128 != 0) {
        fprintf(stderr, "take_back: NBYTES must be a positive multiple of 128, ITERS positive\n");
        return 2;
    }
    int ways = W_WAYS; /* W_MOVSB and W_STREAM write and print nothing where not x86-64 */
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char *shared = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED || shared == MAP_FAILED) {
        perror("take_back: mmap");
        return 1;
    }
    memset(shared, 0, nbytes);
    pid_t kid = fork();
    if (kid < 0) {
        perror("take_back: fork");
        return 1;
    }
    int me = kid == 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(me % (int)(sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 2 : 1), &set);
    sched_setaffinity(0, sizeof(set), &set);
    long turns = (long)(WARMUP + iters) * ways;
    char *mine = aligned_alloc(4096, nbytes), *values = aligned_alloc(4096, nbytes);
    double *us = malloc(sizeof(double) * (size_t)iters * W_WAYS);
    if (mine == NULL || values == NULL || us == NULL) {
        fprintf(stderr, "take_back: out of memory for 2 x %zu bytes\n", nbytes);
        __atomic_store_n(&sh->failed, 1, __ATOMIC_RELAXED);
        return 1;
    }
    memset(mine, 0, nbytes);
    for (size_t i = 0; i < nbytes; i++)
        values[i] = (char)(i * 7 + 1);
    if (me == 1) { /* the reader: copy each turn's buffer out */
        for (long t = 1; t <= turns; t++) {
            if (!wait_ge(&sh->written, t))
                return 1;
            memcpy(mine, shared, nbytes);
            __asm__ volatile("" : : "r"(mine) : "memory");
            __atomic_store_n(&sh->read, t, __ATOMIC_RELEASE);
        }
        return memcmp(mine, values, nbytes) != 0;
    }
    long t = 0;
    for (int it = -WARMUP; it < iters; it++) {
        for (int w = 0; w < ways; w++) {
            double t0 = now_s();
            switch (w) {
            case W_PRIVATE:
                plain_store_copy(mine, values, nbytes);
                break;
            case W_PLAIN:
                plain_store_copy(shared, values, nbytes);
                break;
            case W_MOVSB: {
#if defined(__x86_64__)
                void *d = shared;
                const void *s = values;
                size_t n = nbytes;
                __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
#endif
                break;
            }
            case W_STREAM:
#if defined(__x86_64__)
                for (size_t i = 0; i < nbytes; i += 16)
                    _mm_stream_si128((__m128i *)(shared + i),
                                     _mm_load_si128((const __m128i *)(values + i)));
                _mm_sfence();
#endif
                break;
            default:
                memcpy(shared, values, nbytes);
                break;
            }
            double dt = now_s() - t0;
            if (it >= 0)
                us[(size_t)w * iters + it] = dt * 1e6;
            __atomic_store_n(&sh->written, ++t, __ATOMIC_RELEASE);
            if (!wait_ge(&sh->read, t)) {
                fprintf(stderr, "take_back: the reader stopped answering\n");
                __atomic_store_n(&sh->failed, 1, __ATOMIC_RELAXED);
                return 1;
            }
        }
    }
    int status = 0;
    waitpid(kid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "take_back: the reader's last copy differs from the values written\n");
        return 1;
    }
    printf("# take_back: %zu bytes, %d rounds; the owner on CPU 0 writes, a reader on CPU 1 has "
           "just read them\n",
           nbytes, iters);
    printf("# %-30s %10s %10s %10s %12s\n", "write", "median us", "least us", "GB/s", "x private");
    double base = 0;
    for (int w = 0; w < ways; w++) {
#if !defined(__x86_64__)
        if (w == W_MOVSB || w == W_STREAM)
            continue;
#endif
        double *v = us + (size_t)w * iters;
        qsort(v, (size_t)iters, sizeof(double), cmp_double);
        double med = v[iters / 2];
        if (w == W_PRIVATE)
            base = med;
        printf("  %-30s %10.2f %10.2f %10.2f %12.2f\n", way_name[w], med, v[0],
               (double)nbytes / med * 1e-3, med / base);
    }
    return 0;
}
