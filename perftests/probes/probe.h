/*
 * probe.h: what the probes (plain C programs, no Chorus and no MPI) share: a spin-wait pause and
 * a monotonic clock in seconds.
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

#endif /* CHORUS_PROBE_H */
