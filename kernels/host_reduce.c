/*
 * host_reduce.c: the host backend's arithmetic: reduce (dst = a op b) and divide (avg's last step)
 * for every dtype and op, and the float16/bfloat16 <-> float conversions they go through.
 *
 * Integer, float32 and float64 kernels are plain loops that gcc -O3 vectorizes (the host SIMD).
 * Each runs in one of four aliasing cases (dst distinct, dst == a, dst == b, all three equal) so
 * every loop has restrict pointers, because the contract lets dst be a or b. float16 and bfloat16
 * are converted a block at a time to float, reduced by the float32 loop and converted back with
 * round-to-nearest-even. On x86 with F16C the half conversions use the hardware instructions,
 * which give the same bits as the portable code here (tests/test_reduce.c checks every value),
 * and with AVX2 the bf16 loops run as an AVX2 build of the same C (SSE2 has no cheap 32->16-bit
 * pack, which made bf16 the slowest dtype).
 * Pointers not aligned to their element size are bounced through aligned blocks, so any byte
 * address works; the primitives normally pass aligned slices and never take that path.
 */
#include <string.h>

#include "memops.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define HOST_HAVE_X86_PATHS 1
#else
#define HOST_HAVE_X86_PATHS 0
#endif

/* Elements per conversion block: two float blocks (2 KiB) live on the stack. */
#define FLOAT_BLOCK 256
/* uint64_t words per bounce block for misaligned pointers: two blocks (8 KiB) on the stack. */
#define BOUNCE_WORDS 512

/* ---- Scalar conversions (portable, bit manipulation only) ---- */

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* float16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Every half is exact in float; a NaN is
 * returned quiet with its payload kept, as F16C's vcvtph2ps does. */
float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0x1f) /* Inf, or NaN made quiet */
        return bits_float(sign | 0x7f800000 | (mant ? 0x400000 | (mant << 13) : 0));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0)
        return bits_float(sign);
    /* Subnormal mant * 2^-24: shift the leading one up to the implicit bit (bit 10). */
    int shift = __builtin_clz(mant) - 21;
    mant = (mant << shift) & 0x3ff;
    return bits_float(sign | ((uint32_t)(113 - shift) << 23) | (mant << 13));
}

/* Round to nearest, ties to even. Overflow (>= 65520) gives Inf, |f| <= 2^-25 gives a signed zero;
 * a NaN stays NaN (quiet bit set, top payload bits kept), as F16C's vcvtps2ph does. */
uint16_t float_to_half(float f)
{
    uint32_t u = float_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t mag = u & 0x7fffffff;

    if (mag > 0x7f800000)
        return sign | 0x7e00 | (uint16_t)((mag & 0x7fffff) >> 13);
    if (mag >= 0x477ff000) /* 65520 = halfway between 65504 (odd mantissa) and 2^16: rounds up */
        return sign | 0x7c00;
    if (mag >= 0x38800000) {
        /* Normal half (>= 2^-14): rebias 127 -> 15, then round away the 13 low mantissa bits; a
         * carry out of the mantissa correctly bumps the exponent. */
        uint32_t r = mag - 0x38000000;
        r += 0xfff + ((r >> 13) & 1);
        return sign | (uint16_t)(r >> 13);
    }
    if (mag <= 0x33000000) /* <= 2^-25, half of the smallest subnormal: the tie goes to even 0 */
        return sign;
    /* Subnormal half: the value is m * 2^(e - 150); in units of 2^-24 that is m >> (126 - e). A
     * result of 0x400 (rounded up to 2^-14) is the right encoding of the smallest normal. */
    uint32_t e = mag >> 23;
    uint32_t m = (mag & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    q += rem > halfway || (rem == halfway && (q & 1));
    return sign | (uint16_t)q;
}

/* bfloat16 is the top half of a float, so widening is exact. */
float bf16_to_float(uint16_t b)
{
    return bits_float((uint32_t)b << 16);
}

/* Round to nearest, ties to even, by adding 0x7fff plus the lowest kept bit; the carry handles
 * subnormals, the binade step and overflow to Inf alike. A NaN keeps its top payload bits and gets
 * the quiet bit so that truncation cannot turn it into Inf. */
uint16_t float_to_bf16(float f)
{
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* ---- Block conversions: a codec turns n 16-bit values into floats and back ---- */

typedef struct {
    void (*to_float)(float *dst, const uint16_t *src, size_t n);
    void (*from_float)(uint16_t *dst, const float *src, size_t n);
} codec16_t;

static void half_to_float_portable(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = half_to_float(src[i]);
}

static void half_from_float_portable(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = float_to_half(src[i]);
}

/* The bf16 loops are branch-free (the NaN test is a select), so gcc vectorizes them. */
static void bf16_to_float_block(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_to_float(src[i]);
}

static void bf16_from_float_block(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = float_to_bf16(src[i]);
}

static const codec16_t half_portable = {half_to_float_portable, half_from_float_portable};
static const codec16_t bf16_portable = {bf16_to_float_block, bf16_from_float_block};

enum { CPU_F16C = 1, CPU_AVX2 = 2 };

#if HOST_HAVE_X86_PATHS
/* vcvtph2ps/vcvtps2ph, 8 values per instruction; the tail uses the scalar forms of the same
 * instructions so every element gets the hardware's result. Immediate 0: round to nearest even,
 * whatever the MXCSR rounding mode says. */
__attribute__((target("avx,f16c"))) static void half_to_float_f16c(float *dst, const uint16_t *src,
                                                                   size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = _cvtsh_ss(src[i]);
}

__attribute__((target("avx,f16c"))) static void half_from_float_f16c(uint16_t *dst,
                                                                     const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
    for (; i < n; i++)
        dst[i] = _cvtss_sh(src[i], 0);
}

/* The portable bf16 loops again, compiled for AVX2 (the scalar functions inline into them). */
__attribute__((target("avx2"))) static void bf16_to_float_avx2(float *dst, const uint16_t *src,
                                                               size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_to_float(src[i]);
}

__attribute__((target("avx2"))) static void bf16_from_float_avx2(uint16_t *dst, const float *src,
                                                                 size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = float_to_bf16(src[i]);
}

static const codec16_t half_f16c = {half_to_float_f16c, half_from_float_f16c};
static const codec16_t bf16_avx2 = {bf16_to_float_avx2, bf16_from_float_avx2};
#define HALF_FAST (&half_f16c)
#define BF16_FAST (&bf16_avx2)

/* -1 until the first 16-bit float call looks; CPUID can cost microseconds in a VM, so look once.
 * Two threads racing here store the same answer. */
static int cpu_state = -1;

static int cpu_features(void)
{
    int state = __atomic_load_n(&cpu_state, __ATOMIC_RELAXED);
    if (state < 0) {
        /* __builtin_cpu_supports knows "avx" and "avx2" in gcc and clang (and checks that the OS
         * saves the YMM registers) but "f16c" only in gcc >= 11, so F16C comes from CPUID leaf
         * 1. The init call makes the checks valid even before constructors ran. */
        unsigned eax, ebx, ecx, edx;
        __builtin_cpu_init();
        int f16c = __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
                   (ecx & bit_F16C) != 0;
        state = (f16c ? CPU_F16C : 0) | (__builtin_cpu_supports("avx2") ? CPU_AVX2 : 0);
        __atomic_store_n(&cpu_state, state, __ATOMIC_RELAXED);
    }
    return state;
}
#else
/* No hardware paths on this architecture: the portable loops are the only ones. */
#define HALF_FAST (&half_portable)
#define BF16_FAST (&bf16_portable)

static int cpu_features(void)
{
    return 0;
}
#endif

/* For host_memops.c's copies. */
int host_cpu_avx2(void)
{
    return (cpu_features() & CPU_AVX2) != 0;
}

/* Set only by tests (host_reduce_force_portable) to run the portable loops on capable hosts. */
static int force_portable;

/* Test hook, not part of memops.h: nonzero makes float16 and bfloat16 use the portable loops. */
void host_reduce_force_portable(int on)
{
    __atomic_store_n(&force_portable, on != 0, __ATOMIC_RELAXED);
}

static int use_portable(void)
{
    return __atomic_load_n(&force_portable, __ATOMIC_RELAXED);
}

static const codec16_t *half_codec(void)
{
    return !use_portable() && (cpu_features() & CPU_F16C) ? HALF_FAST : &half_portable;
}

static const codec16_t *bf16_codec(void)
{
    return !use_portable() && (cpu_features() & CPU_AVX2) ? BF16_FAST : &bf16_portable;
}

/* ---- Reduce ---- */

/*
 * Element ops. Integer sum and prod go through the unsigned type UT so that overflow wraps (two's
 * complement) instead of being undefined; converting back to a signed T is modulo in gcc and
 * clang. No dtype is 16 bits wide, so no unsigned operand promotes to int and overflows there.
 * Floats pass UT = T, where the casts change nothing.
 * max/min are the plain comparisons, which the compiler maps to maxps/minps: when either operand
 * is a NaN the comparison is false and the result is the second operand, so max(NaN, 1) = 1 but
 * max(1, NaN) = NaN; likewise max(-0, +0) = +0 and max(+0, -0) = -0. NCCL promises no more.
 */
#define OP_SUM(T, UT, x, y) ((T)((UT)(x) + (UT)(y)))
#define OP_PROD(T, UT, x, y) ((T)((UT)(x) * (UT)(y)))
#define OP_MAX(T, UT, x, y) ((x) > (y) ? (x) : (y))
#define OP_MIN(T, UT, x, y) ((x) < (y) ? (x) : (y))

/* dst[i] = OP(X[i], Y[i]) for count elements of T; X and Y name the pointers read (dst, a, b). */
#define REDUCE_LOOP(T, UT, OP, X, Y)                                                               \
    do {                                                                                           \
        T *d_ = dst;                                                                               \
        const T *x_ = X;                                                                           \
        const T *y_ = Y;                                                                           \
        for (size_t i = 0; i < count; i++)                                                         \
            d_[i] = OP(T, UT, x_[i], y_[i]);                                                       \
    } while (0)

/* One dtype: pick the loop for op (avg reduces as sum; its division comes later). LOOP is
 * REDUCE_LOOP here, or reduce_n's below. */
#define REDUCE_OPS(LOOP, T, UT, X, Y)                                                              \
    do {                                                                                           \
        switch (op) {                                                                              \
        case chorusSum:                                                                            \
        case chorusAvg:                                                                            \
            LOOP(T, UT, OP_SUM, X, Y);                                                             \
            break;                                                                                 \
        case chorusProd:                                                                           \
            LOOP(T, UT, OP_PROD, X, Y);                                                            \
            break;                                                                                 \
        case chorusMax:                                                                            \
            LOOP(T, UT, OP_MAX, X, Y);                                                             \
            break;                                                                                 \
        case chorusMin:                                                                            \
            LOOP(T, UT, OP_MIN, X, Y);                                                             \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)
#define REDUCE_TYPE(T, UT, X, Y) REDUCE_OPS(REDUCE_LOOP, T, UT, X, Y)

/* Every dtype held natively in C (all but float16 and bfloat16): TYPE(T, UT, X, Y) for dtype. */
#define NATIVE_DTYPES(TYPE, X, Y)                                                                  \
    do {                                                                                           \
        switch (dtype) {                                                                           \
        case chorusInt8:                                                                           \
            TYPE(int8_t, uint8_t, X, Y);                                                           \
            break;                                                                                 \
        case chorusUint8:                                                                          \
            TYPE(uint8_t, uint8_t, X, Y);                                                          \
            break;                                                                                 \
        case chorusInt32:                                                                          \
            TYPE(int32_t, uint32_t, X, Y);                                                         \
            break;                                                                                 \
        case chorusUint32:                                                                         \
            TYPE(uint32_t, uint32_t, X, Y);                                                        \
            break;                                                                                 \
        case chorusInt64:                                                                          \
            TYPE(int64_t, uint64_t, X, Y);                                                         \
            break;                                                                                 \
        case chorusUint64:                                                                         \
            TYPE(uint64_t, uint64_t, X, Y);                                                        \
            break;                                                                                 \
        case chorusFloat32:                                                                        \
            TYPE(float, float, X, Y);                                                              \
            break;                                                                                 \
        case chorusFloat64:                                                                        \
            TYPE(double, double, X, Y);                                                            \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)
#define REDUCE_NATIVE(X, Y) NATIVE_DTYPES(REDUCE_TYPE, X, Y)

/*
 * One function per aliasing case the contract allows, so that every pointer the loop reads is
 * either dst itself or a restrict parameter: gcc then vectorizes without a runtime overlap check
 * (it ignores restrict on block-scope pointers, so parameters it must be). a == b with a distinct
 * dst needs no case of its own: restrict only forbids writing through one pointer what another
 * one reads.
 */
/* On x86 each is built three times, for AVX-512, AVX2 and the baseline, and the loader picks the
 * widest the CPU has (an ifunc). Every loop is element-wise, so the width changes how many
 * elements one instruction takes, never a result bit. Not under TSan: the loader runs the
 * clones' resolver before TSan's runtime is up, and gcc instruments it (a crash at start). */
#if HOST_HAVE_X86_PATHS && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define HOST_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOST_SIMD_CLONES
#endif

HOST_SIMD_CLONES
static void reduce_distinct(void *restrict dst, const void *restrict a, const void *restrict b,
                            size_t count, chorusDataType_t dtype, chorusRedOp_t op)
{
    REDUCE_NATIVE(a, b);
}

HOST_SIMD_CLONES
static void reduce_into_a(void *restrict dst, const void *restrict b, size_t count,
                          chorusDataType_t dtype, chorusRedOp_t op)
{
    REDUCE_NATIVE(dst, b);
}

HOST_SIMD_CLONES
static void reduce_into_b(void *restrict dst, const void *restrict a, size_t count,
                          chorusDataType_t dtype, chorusRedOp_t op)
{
    REDUCE_NATIVE(a, dst);
}

HOST_SIMD_CLONES
static void reduce_self(void *dst, size_t count, chorusDataType_t dtype, chorusRedOp_t op)
{
    REDUCE_NATIVE(dst, dst);
}

/* float16/bfloat16: widen a block of each input, reduce in float, narrow into dst. Each block is
 * read completely before its dst block is written, so dst may be a or b. A sum or product rounded
 * to float and then to half or bf16 equals the correctly rounded one: float keeps at least 2p+2
 * bits of a p-bit format, and double rounding is harmless then (the same holds for division). */
static void reduce_16bit_float(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t count,
                               chorusRedOp_t op, const codec16_t *codec)
{
    float fa[FLOAT_BLOCK], fb[FLOAT_BLOCK];
    for (size_t done = 0; done < count; done += FLOAT_BLOCK) {
        size_t n = count - done < FLOAT_BLOCK ? count - done : FLOAT_BLOCK;
        codec->to_float(fa, a + done, n);
        codec->to_float(fb, b + done, n);
        reduce_into_a(fa, fb, n, chorusFloat32, op);
        codec->from_float(dst + done, fa, n);
    }
}

/* The reduction proper; every pointer is aligned to the element size. */
static void reduce_aligned(void *dst, const void *a, const void *b, size_t count,
                           chorusDataType_t dtype, chorusRedOp_t op)
{
    if (dtype == chorusFloat16)
        reduce_16bit_float(dst, a, b, count, op, half_codec());
    else if (dtype == chorusBfloat16)
        reduce_16bit_float(dst, a, b, count, op, bf16_codec());
    else if (dst == a && dst == b)
        reduce_self(dst, count, dtype, op);
    else if (dst == a)
        reduce_into_a(dst, b, count, dtype, op);
    else if (dst == b)
        reduce_into_b(dst, a, count, dtype, op);
    else
        reduce_distinct(dst, a, b, count, dtype, op);
}

static int is_aligned(const void *p, size_t nbytes)
{
    return ((uintptr_t)p & (nbytes - 1)) == 0;
}

/* Misaligned pointers: copy blocks of a and b into aligned buffers, reduce there, copy out. */
static void reduce_bounced(void *dst, const void *a, const void *b, size_t count,
                           chorusDataType_t dtype, chorusRedOp_t op, size_t esize)
{
    uint64_t ta[BOUNCE_WORDS], tb[BOUNCE_WORDS];
    size_t per_block = sizeof(ta) / esize;
    for (size_t done = 0; done < count; done += per_block) {
        size_t n = count - done < per_block ? count - done : per_block;
        memcpy(ta, (const char *)a + done * esize, n * esize);
        memcpy(tb, (const char *)b + done * esize, n * esize);
        reduce_aligned(ta, ta, tb, n, dtype, op);
        memcpy((char *)dst + done * esize, ta, n * esize);
    }
}

/* memops_ops_t.reduce for host memory (host_memops.c puts it in the table). Invalid dtype or op:
 * nothing is written; callers validate arguments before any data moves. */
__attribute__((hot)) void host_reduce(void *dst, const void *a, const void *b, size_t count,
                                      chorusDataType_t dtype, chorusRedOp_t op)
{
    size_t esize = dtype_nbytes(dtype);
    if (esize == 0 || (unsigned)op >= chorusNumOps || count == 0)
        return;
    if (is_aligned(dst, esize) && is_aligned(a, esize) && is_aligned(b, esize))
        reduce_aligned(dst, a, b, count, dtype, op);
    else
        reduce_bounced(dst, a, b, count, dtype, op, esize);
}

/*
 * Several sources at once (memops_ops_t.reduce_n). A small all-reduce reduces every rank's few
 * elements in one call: one dispatch and one pass, each element accumulated left to right in a
 * register, where a chain of reduce calls paid a dispatch and an aliasing case per source
 * (4 ranks, 8 B: about 90 instructions each of three). Each step is the same operation on the
 * same operands as reduce's, so the bits are the same. Up to REDUCE_N_INLINE_NBYTES of a native
 * dtype, aligned; anything else is the chain of reduce calls.
 */
#define REDUCE_N_INLINE_NBYTES 256

/* (X and Y: REDUCE_OPS's slots, unused: the sources are src[0, nsrc).) */
#define REDUCE_N_LOOP(T, UT, OP, X, Y)                                                             \
    do {                                                                                           \
        T *d_ = dst;                                                                               \
        for (size_t i = 0; i < count; i++) {                                                       \
            T acc_ = ((const T *)src[0])[i];                                                       \
            for (int k = 1; k < nsrc; k++)                                                         \
                acc_ = OP(T, UT, acc_, ((const T *)src[k])[i]);                                    \
            d_[i] = acc_;                                                                          \
        }                                                                                          \
    } while (0)
#define REDUCE_N_TYPE(T, UT, X, Y) REDUCE_OPS(REDUCE_N_LOOP, T, UT, X, Y)

__attribute__((hot)) void host_reduce_n(void *dst, const void *const *src, int nsrc, size_t count,
                                        chorusDataType_t dtype, chorusRedOp_t op)
{
    size_t esize = dtype_nbytes(dtype);
    if (esize == 0 || (unsigned)op >= chorusNumOps || count == 0 || nsrc < 1)
        return;
    int inline_ok = count * esize <= REDUCE_N_INLINE_NBYTES && dtype != chorusFloat16 &&
                    dtype != chorusBfloat16 && is_aligned(dst, esize);
    for (int k = 0; k < nsrc && inline_ok; k++)
        inline_ok = is_aligned(src[k], esize);
    if (!inline_ok || nsrc == 1) {
        if (nsrc == 1)
            memmove(dst, src[0], count * esize);
        else
            host_reduce(dst, src[0], src[1], count, dtype, op);
        for (int k = 2; k < nsrc; k++)
            host_reduce(dst, dst, src[k], count, dtype, op);
        return;
    }
    NATIVE_DTYPES(REDUCE_N_TYPE, 0, 0);
}

/* ---- Divide ---- */

/*
 * Signed values divide as signed, truncating toward zero. The quotient is computed in int64_t,
 * where it always fits; a divisor above INT64_MAX gives 0 except for INT64_MIN / 2^63 = -1.
 */
#define DIVIDE_SIGNED(T, S)                                                                        \
    do {                                                                                           \
        T *d_ = dst;                                                                               \
        const T *s_ = S;                                                                           \
        if (divisor > (uint64_t)INT64_MAX) {                                                       \
            for (size_t i = 0; i < count; i++)                                                     \
                d_[i] = (T)((int64_t)s_[i] == INT64_MIN && divisor == (1ull << 63) ? -1 : 0);      \
        } else {                                                                                   \
            int64_t q_ = (int64_t)divisor;                                                         \
            for (size_t i = 0; i < count; i++)                                                     \
                d_[i] = (T)((int64_t)s_[i] / q_);                                                  \
        }                                                                                          \
    } while (0)

#define DIVIDE_UNSIGNED(T, S)                                                                      \
    do {                                                                                           \
        T *d_ = dst;                                                                               \
        const T *s_ = S;                                                                           \
        for (size_t i = 0; i < count; i++)                                                         \
            d_[i] = (T)((uint64_t)s_[i] / divisor);                                                \
    } while (0)

/* Floats divide in their own precision by the divisor converted to that precision. */
#define DIVIDE_FLOAT(T, S)                                                                         \
    do {                                                                                           \
        T *d_ = dst;                                                                               \
        const T *s_ = S;                                                                           \
        T q_ = (T)divisor;                                                                         \
        for (size_t i = 0; i < count; i++)                                                         \
            d_[i] = s_[i] / q_;                                                                    \
    } while (0)

#define DIVIDE_NATIVE(S)                                                                           \
    do {                                                                                           \
        switch (dtype) {                                                                           \
        case chorusInt8:                                                                           \
            DIVIDE_SIGNED(int8_t, S);                                                              \
            break;                                                                                 \
        case chorusUint8:                                                                          \
            DIVIDE_UNSIGNED(uint8_t, S);                                                           \
            break;                                                                                 \
        case chorusInt32:                                                                          \
            DIVIDE_SIGNED(int32_t, S);                                                             \
            break;                                                                                 \
        case chorusUint32:                                                                         \
            DIVIDE_UNSIGNED(uint32_t, S);                                                          \
            break;                                                                                 \
        case chorusInt64:                                                                          \
            DIVIDE_SIGNED(int64_t, S);                                                             \
            break;                                                                                 \
        case chorusUint64:                                                                         \
            DIVIDE_UNSIGNED(uint64_t, S);                                                          \
            break;                                                                                 \
        case chorusFloat32:                                                                        \
            DIVIDE_FLOAT(float, S);                                                                \
            break;                                                                                 \
        case chorusFloat64:                                                                        \
            DIVIDE_FLOAT(double, S);                                                               \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

/* In place (avg's usual case) and out of place, for the same reason as the reduce cases. */
static void divide_in_place(void *dst, size_t count, chorusDataType_t dtype, uint64_t divisor)
{
    DIVIDE_NATIVE(dst);
}

static void divide_distinct(void *restrict dst, const void *restrict src, size_t count,
                            chorusDataType_t dtype, uint64_t divisor)
{
    DIVIDE_NATIVE(src);
}

/* float16/bfloat16: widen a block, divide in float, narrow back (dst may equal src). */
static void divide_16bit_float(uint16_t *dst, const uint16_t *src, size_t count, uint64_t divisor,
                               const codec16_t *codec)
{
    float f[FLOAT_BLOCK];
    for (size_t done = 0; done < count; done += FLOAT_BLOCK) {
        size_t n = count - done < FLOAT_BLOCK ? count - done : FLOAT_BLOCK;
        codec->to_float(f, src + done, n);
        divide_in_place(f, n, chorusFloat32, divisor);
        codec->from_float(dst + done, f, n);
    }
}

static void divide_aligned(void *dst, const void *src, size_t count, chorusDataType_t dtype,
                           uint64_t divisor)
{
    if (dtype == chorusFloat16)
        divide_16bit_float(dst, src, count, divisor, half_codec());
    else if (dtype == chorusBfloat16)
        divide_16bit_float(dst, src, count, divisor, bf16_codec());
    else if (dst == src)
        divide_in_place(dst, count, dtype, divisor);
    else
        divide_distinct(dst, src, count, dtype, divisor);
}

/* memops_ops_t.divide for host memory. Integer division by 0 would trap (SIGFPE) inside the
 * library, so a zero divisor leaves integers unchanged (copied to dst); floats divide by 0.0 as
 * IEEE says (Inf or NaN). Callers pass nranks, never 0. */
void host_divide(void *dst, const void *src, size_t count, chorusDataType_t dtype, uint64_t divisor)
{
    size_t esize = dtype_nbytes(dtype);
    if (esize == 0 || count == 0)
        return;
    int is_int = dtype != chorusFloat16 && dtype != chorusFloat32 && dtype != chorusFloat64 &&
                 dtype != chorusBfloat16;
    if (is_int && divisor == 0) {
        if (dst != src)
            memcpy(dst, src, count * esize);
        return;
    }
    if (is_aligned(dst, esize) && is_aligned(src, esize)) {
        divide_aligned(dst, src, count, dtype, divisor);
        return;
    }
    uint64_t t[BOUNCE_WORDS];
    size_t per_block = sizeof(t) / esize;
    for (size_t done = 0; done < count; done += per_block) {
        size_t n = count - done < per_block ? count - done : per_block;
        memcpy(t, (const char *)src + done * esize, n * esize);
        divide_aligned(t, t, n, dtype, divisor);
        memcpy((char *)dst + done * esize, t, n * esize);
    }
}
