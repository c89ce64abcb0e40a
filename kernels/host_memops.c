/*
 * host_memops.c: the host memops backend table (memops.h) and the dtype/op facts every layer
 * asks for: element sizes and the short names used in logs and errors.
 *
 * copy is memcpy (the primitives move whole slices, and libc's memcpy already picks the best
 * vector width for the CPU), except where the destination lies a little past the source counted
 * in a page (copy_skewed). copy_out streams (non-temporal stores) on x86-64, memcpy elsewhere;
 * copy_dup is both from one read.
 * reduce and divide, the element arithmetic, live in host_reduce.c.
 */
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "memops.h"

/* Defined in host_reduce.c; reached only through host_memops (memops.h declares no more). */
void host_reduce(void *dst, const void *a, const void *b, size_t count, chorusDataType_t dtype,
                 chorusRedOp_t op);
void host_divide(void *dst, const void *src, size_t count, chorusDataType_t dtype,
                 uint64_t divisor);
void host_reduce_n(void *dst, const void *const *src, int nsrc, size_t count,
                   chorusDataType_t dtype, chorusRedOp_t op);

int host_cpu_avx2(void);

#if defined(__x86_64__)
/* A copy whose destination lies a little past its source, counted in a page (dst - src is 1-127
 * bytes past a multiple of 4096, and not a multiple of 32 bytes): libc's memcpy ran such copies
 * slowly on the AMD VM of 2026-12-07 (128 KiB in L2, dst - src = 16: 3.3-3.5 us against 2.3
 * aligned alike; 512 KiB 15-19 against 11), and glibc gives every buffer of 128 KiB or more 16
 * bytes past a page, the window buffers' alignment: a 2-rank 256 KiB all-gather through the window
 * into such outputs took 29-31 us against 21-22 into page-aligned ones. There a loop of 32-byte
 * loads and stores aligned on the destination runs as fast as the aligned memcpy (2.3 us, 10.4).
 * Above a few MiB libc streams; below 2 KiB the difference is small. */
#define SKEWED_MIN_NBYTES 2048
#define SKEWED_MAX_NBYTES (4u << 20)

static int skewed(const void *dst, const void *src, size_t nbytes)
{
    size_t d = ((uintptr_t)dst - (uintptr_t)src) & 4095;
    return nbytes >= SKEWED_MIN_NBYTES && nbytes <= SKEWED_MAX_NBYTES && d < 128 && (d & 31) != 0 &&
           host_cpu_avx2();
}

__attribute__((target("avx2"))) static void copy_skewed(char *d, const char *s, size_t nbytes)
{
    size_t head = (32 - ((uintptr_t)d & 31)) & 31;
    memcpy(d, s, head);
    d += head;
    s += head;
    nbytes -= head;
    size_t mid = nbytes & ~(size_t)127;
    for (size_t i = 0; i < mid; i += 128) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 32));
        __m256i x2 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 64));
        __m256i x3 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 96));
        _mm256_store_si256((__m256i *)(void *)(d + i), x0);
        _mm256_store_si256((__m256i *)(void *)(d + i + 32), x1);
        _mm256_store_si256((__m256i *)(void *)(d + i + 64), x2);
        _mm256_store_si256((__m256i *)(void *)(d + i + 96), x3);
    }
    memcpy(d + mid, s + mid, nbytes - mid);
}
#endif

/* In-place steps call copy with dst == src; memcpy on identical ranges is undefined, so skip. */
static void host_copy(void *dst, const void *src, size_t nbytes)
{
    if (dst == src || nbytes == 0)
        return;
#if defined(__x86_64__)
    if (skewed(dst, src, nbytes)) {
        copy_skewed(dst, src, nbytes);
        return;
    }
#endif
    memcpy(dst, src, nbytes);
}

#if defined(__x86_64__)
/* src into w (from its first whole line: streaming stores) and, unless plain is NULL, into plain
 * (plain stores) from the same loads; the ends with memcpy; then a store fence (the streaming
 * stores are weakly ordered: a flag published after this must not pass them). Inlined into its
 * two callers, so the test on plain leaves the loop. */
static inline __attribute__((always_inline)) void copy_streamed(char *plain, char *w, const char *s,
                                                                size_t nbytes)
{
    size_t head = (64 - ((uintptr_t)w & 63)) & 63;
    if (head > nbytes)
        head = nbytes;
    if (plain != NULL) {
        memcpy(plain, s, head);
        plain += head;
    }
    memcpy(w, s, head);
    w += head;
    s += head;
    nbytes -= head;
    size_t mid = nbytes & ~(size_t)63;
    for (size_t i = 0; i < mid; i += 64) {
        __m128i x0 = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
        __m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
        __m128i x3 = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));
        if (plain != NULL) {
            _mm_storeu_si128((__m128i *)(void *)(plain + i), x0);
            _mm_storeu_si128((__m128i *)(void *)(plain + i + 16), x1);
            _mm_storeu_si128((__m128i *)(void *)(plain + i + 32), x2);
            _mm_storeu_si128((__m128i *)(void *)(plain + i + 48), x3);
        }
        _mm_stream_si128((__m128i *)(void *)(w + i), x0);
        _mm_stream_si128((__m128i *)(void *)(w + i + 16), x1);
        _mm_stream_si128((__m128i *)(void *)(w + i + 32), x2);
        _mm_stream_si128((__m128i *)(void *)(w + i + 48), x3);
    }
    _mm_sfence();
    if (plain != NULL)
        memcpy(plain + mid, s + mid, nbytes - mid);
    memcpy(w + mid, s + mid, nbytes - mid);
}
#endif

/*
 * A copy into a large output with streaming stores: the line-aligned middle with SSE2's
 * non-temporal 16-byte stores (every x86-64 has them; the write-combining buffers merge them
 * into whole lines, so the width does not limit the rate), the ends with memcpy, then a store
 * fence. libc's memcpy streams only above a large threshold (about the LLC), and the primitives
 * copy slices far smaller than that. 64 MiB in 256 KiB pieces to a buffer out of the caches, one
 * core of this VM: 18-28 GB/s against memcpy's 17-18.
 */
static void host_copy_out(void *dst, const void *src, size_t nbytes)
{
#if defined(__x86_64__)
    if (dst != src && nbytes != 0)
        copy_streamed(NULL, dst, src, nbytes);
#else
    host_copy(dst, src, nbytes);
#endif
}

/*
 * copy and copy_out of one source at once: each 64 bytes loaded once, stored plainly into dst
 * and streamed into dst_stream. One core of this VM, a 2 MiB input in 512 KiB pieces into an
 * output and a 1 MiB window: 67-85 us against 83-108 for memcpy then the streaming copy (five
 * runs of each).
 */
static void host_copy_dup(void *dst, void *dst_stream, const void *src, size_t nbytes)
{
#if defined(__x86_64__)
    copy_streamed(dst, dst_stream, src, nbytes);
#else
    host_copy(dst, src, nbytes);
    host_copy(dst_stream, src, nbytes);
#endif
}

const memops_ops_t host_memops = {
    .name = "host",
    .copy = host_copy,
    .copy_out = host_copy_out,
    .copy_dup = host_copy_dup,
    .reduce = host_reduce,
    .divide = host_divide,
    .reduce_n = host_reduce_n,
};

const char *dtype_name(chorusDataType_t dtype)
{
    switch (dtype) {
    case chorusInt8:
        return "int8";
    case chorusUint8:
        return "uint8";
    case chorusInt32:
        return "int32";
    case chorusUint32:
        return "uint32";
    case chorusInt64:
        return "int64";
    case chorusUint64:
        return "uint64";
    case chorusFloat16:
        return "float16";
    case chorusFloat32:
        return "float32";
    case chorusFloat64:
        return "float64";
    case chorusBfloat16:
        return "bfloat16";
    default:
        return "?";
    }
}

const char *redop_name(chorusRedOp_t op)
{
    switch (op) {
    case chorusSum:
        return "sum";
    case chorusProd:
        return "prod";
    case chorusMax:
        return "max";
    case chorusMin:
        return "min";
    case chorusAvg:
        return "avg";
    default:
        return "?";
    }
}
