/*
 * probe.h: what the probes (plain C programs, no Chorus and no MPI) share: a spin-wait pause, a
 * monotonic clock in seconds, and a spin wait with a deadline.
 */
#ifndef CHORUS_PROBE_H
#define CHORUS_PROBE_H

#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() __asm__ __volatile__("" ::: "memory")
#endif

static inline double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Spin until *word >= want; 0 after limit_s seconds, or once *failed is set (the other process
 * died or stalled, or gave up). */
static inline int probe_wait_ge(long *word, long want, int *failed, double limit_s)
{
    double t0 = 0;
    for (long k = 0; __atomic_load_n(word, __ATOMIC_ACQUIRE) < want; k++) {
        cpu_relax();
        if ((k & 0xffff) == 0) {
            if (t0 == 0)
                t0 = now_s();
            else if (now_s() - t0 > limit_s || __atomic_load_n(failed, __ATOMIC_RELAXED))
                return 0;
        }
    }
    return 1;
}

#endif /* CHORUS_PROBE_H */
