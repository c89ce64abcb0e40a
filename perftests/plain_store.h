/*
 * plain_store.h: a copy with plain vector stores, as a compute kernel writes its output: neither
 * streaming stores nor `rep movsb`, which libc's memcpy picks by size (glibc on x86-64: `rep
 * movsb` below rep_movsb_stop_threshold, streaming stores from non_temporal_threshold). Written
 * over lines another core has just read, the two kinds cost very differently
 * (perftests/README.md, "Why: the write that takes the lines back"). Used by --rewrite 1
 * (common.c) and probes/take_back.c. x86-64: AVX2's 32-byte stores where the CPU has them, else
 * SSE2's 16-byte ones, four a turn; other CPUs: memcpy.
 */
#ifndef CHORUS_PLAIN_STORE_H
#define CHORUS_PLAIN_STORE_H

#include <stddef.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static inline void plain_store_avx2(char *d, const char *s,
                                                                    size_t n)
{
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
        __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        _mm256_storeu_si256((__m256i *)(d + i), a);
        _mm256_storeu_si256((__m256i *)(d + i + 32), b);
        _mm256_storeu_si256((__m256i *)(d + i + 64), c);
        _mm256_storeu_si256((__m256i *)(d + i + 96), e);
    }
    memcpy(d + i, s + i, n - i);
}

static inline void plain_store_sse2(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_storeu_si128((__m128i *)(d + i), a);
        _mm_storeu_si128((__m128i *)(d + i + 16), b);
        _mm_storeu_si128((__m128i *)(d + i + 32), c);
        _mm_storeu_si128((__m128i *)(d + i + 48), e);
    }
    memcpy(d + i, s + i, n - i);
}
#endif

/* dst = src, nbytes, with plain stores (a tail under one turn by memcpy). */
static inline void plain_store_copy(void *dst, const void *src, size_t nbytes)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        plain_store_avx2(dst, src, nbytes);
    } else {
        plain_store_sse2(dst, src, nbytes);
    }
#else
    memcpy(dst, src, nbytes);
#endif
}

/* What plain_store_copy writes with, for banners. */
static inline const char *plain_store_how(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx2") ? "AVX2 plain stores" : "SSE2 plain stores";
#else
    return "memcpy (no plain-store copy for this CPU)";
#endif
}

#endif /* CHORUS_PLAIN_STORE_H */
