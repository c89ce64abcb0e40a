/*
 * test_reduce.c: proves the host memops backend (kernels/host_memops.c, host_reduce.c) bit-exact.
 *
 * Every expectation is computed here from the definitions, never by the code under test: integer
 * results as wrap-around arithmetic, floats in double from exact inputs, float16/bfloat16 values
 * decoded and rounded by a reference built on ldexp and rint (IEEE round-to-nearest-even). It
 * proves: names and sizes; copy, copy_out and copy_dup; reduce for every dtype x op x count
 * {0,1,7,300,1031} x aliasing (dst==a, dst==b, a==b, all three) x element and byte misalignment,
 * with guard bytes untouched; signed overflow wraps; half and bf16 conversions exhaustively (all
 * 65536 patterns, NaN stays NaN), RNE ties, and against the reference on a structured float sweep;
 * half/bf16 reduce and divide over all 65536 values against the reference, through F16C and through
 * the portable path; F16C hardware conversions equal the portable ones; integer and float divide.
 * `test_reduce --exhaustive` also compares float_to_half with F16C on all 2^32 floats (slow).
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "memops.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define TEST_HAVE_X86 1
#else
#define TEST_HAVE_X86 0
#endif

/* Test hook in host_reduce.c (not in memops.h): nonzero forces the portable float16/bf16 loops. */
void host_reduce_force_portable(int on);

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- Reference 16-bit float formats ---- */

/* ebits exponent bits and mbits stored mantissa bits after the sign bit. */
typedef struct {
    int ebits, mbits;
} fmt16_t;
static const fmt16_t HALF = {5, 10}, BF16 = {8, 7};

static uint16_t inf16(fmt16_t f)
{
    return (uint16_t)(((1u << f.ebits) - 1) << f.mbits);
}

static int is_nan16(uint16_t h, fmt16_t f)
{
    return (h & inf16(f)) == inf16(f) && (h & ((1u << f.mbits) - 1));
}

/* NaN with the quiet bit (the top mantissa bit) set, as every conversion returns it. */
static uint16_t quiet16(uint16_t h, fmt16_t f)
{
    return h | (uint16_t)(1u << (f.mbits - 1));
}

/* The value a pattern denotes, from the IEEE definition. */
static double ref_value(uint16_t h, fmt16_t f)
{
    int bias = (1 << (f.ebits - 1)) - 1;
    int e = (h & inf16(f)) >> f.mbits;
    int m = h & ((1 << f.mbits) - 1);
    double sign = (h >> (f.ebits + f.mbits)) ? -1.0 : 1.0;
    if (e == (1 << f.ebits) - 1)
        return m ? NAN : sign * INFINITY;
    if (e == 0)
        return sign * ldexp(m, 1 - bias - f.mbits);
    return sign * ldexp(m + (1 << f.mbits), e - bias - f.mbits);
}

/* Round to nearest even with rint on the significand scaled to an integer; exact in double. */
static uint16_t ref_encode(double v, fmt16_t f)
{
    int bias = (1 << (f.ebits - 1)) - 1;
    uint16_t sign = signbit(v) ? (uint16_t)(1u << (f.ebits + f.mbits)) : 0;
    double a = fabs(v);
    if (isnan(v))
        return quiet16(sign | inf16(f), f);
    if (isinf(v))
        return sign | inf16(f);
    int e;
    frexp(a, &e);
    e -= 1; /* a in [2^e, 2^(e+1)) */
    if (a == 0 || e < 1 - bias)
        e = 1 - bias; /* subnormal: quantum 2^(emin - mbits) */
    double q = rint(ldexp(a, f.mbits - e));
    if (q >= ldexp(1, f.mbits + 1)) { /* rounded up into the next binade */
        q /= 2;
        e++;
    }
    if (e > bias)
        return sign | inf16(f);
    if (q < ldexp(1, f.mbits))
        return sign | (uint16_t)q;
    return sign | (uint16_t)((e + bias) << f.mbits) | (uint16_t)(q - ldexp(1, f.mbits));
}

/* ---- Names, sizes, copy ---- */

enum { KIND_SIGNED, KIND_UNSIGNED, KIND_FLOAT, KIND_HALF, KIND_BF16 };

static const struct {
    chorusDataType_t dtype;
    const char *name;
    size_t nbytes;
    int kind;
} types[] = {
    {.dtype = chorusInt8, .name = "int8", .nbytes = 1, .kind = KIND_SIGNED},
    {.dtype = chorusUint8, .name = "uint8", .nbytes = 1, .kind = KIND_UNSIGNED},
    {.dtype = chorusInt32, .name = "int32", .nbytes = 4, .kind = KIND_SIGNED},
    {.dtype = chorusUint32, .name = "uint32", .nbytes = 4, .kind = KIND_UNSIGNED},
    {.dtype = chorusInt64, .name = "int64", .nbytes = 8, .kind = KIND_SIGNED},
    {.dtype = chorusUint64, .name = "uint64", .nbytes = 8, .kind = KIND_UNSIGNED},
    {.dtype = chorusFloat16, .name = "float16", .nbytes = 2, .kind = KIND_HALF},
    {.dtype = chorusFloat32, .name = "float32", .nbytes = 4, .kind = KIND_FLOAT},
    {.dtype = chorusFloat64, .name = "float64", .nbytes = 8, .kind = KIND_FLOAT},
    {.dtype = chorusBfloat16, .name = "bfloat16", .nbytes = 2, .kind = KIND_BF16},
};
#define NTYPES (sizeof(types) / sizeof(types[0]))
static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};

static void test_names_and_copy(void)
{
    long before = harness_failures;
    CHECK(strcmp(host_memops.name, "host") == 0, "name %s", host_memops.name);
    for (size_t t = 0; t < NTYPES; t++) {
        CHECK(dtype_nbytes(types[t].dtype) == types[t].nbytes, "nbytes %s", types[t].name);
        CHECK(strcmp(dtype_name(types[t].dtype), types[t].name) == 0, "name %s", types[t].name);
    }
    for (int op = 0; op < chorusNumOps; op++)
        CHECK(strcmp(redop_name((chorusRedOp_t)op), op_names[op]) == 0, "op %d", op);
    int bad[] = {-1, chorusNumTypes, 99};
    for (int i = 0; i < 3; i++) {
        CHECK(dtype_nbytes((chorusDataType_t)bad[i]) == 0, "nbytes of %d", bad[i]);
        CHECK(strcmp(dtype_name((chorusDataType_t)bad[i]), "?") == 0, "name of %d", bad[i]);
        CHECK(strcmp(redop_name((chorusRedOp_t)(bad[i] == chorusNumTypes ? chorusNumOps : bad[i])),
                     "?") == 0,
              "op name of %d", bad[i]);
    }
    unsigned char src[1100], dst[1100];
    size_t lens[] = {0, 1, 7, 1031};
    for (size_t l = 0; l < 4; l++) {
        for (size_t off = 0; off < 4; off++) {
            for (size_t i = 0; i < sizeof(src); i++) {
                src[i] = (unsigned char)(i * 7 + 3);
                dst[i] = 0xa5;
            }
            host_memops.copy(dst + off, src + 3, lens[l]);
            for (size_t i = 0; i < sizeof(dst); i++) {
                int inside = i >= off && i < off + lens[l];
                CHECK(dst[i] == (inside ? src[i - off + 3] : 0xa5), "copy len %zu off %zu byte %zu",
                      lens[l], off, i);
            }
        }
    }
    host_memops.copy(src, src, sizeof(src)); /* dst == src: a no-op */
    CHECK(src[1000] == (unsigned char)(1000 * 7 + 3), "copy in place changed data");
    harness_report(before, "names, sizes, copy (lengths 0/1/7/1031, byte offsets 0-3, dst == src)");
}

/* copy_out and copy_dup: lengths around the 64-byte blocks, six alignments of the streamed
 * destination within a line, byte offsets of the plain one, guard bytes around both. */
static void test_copy_out_dup(void)
{
    long before = harness_failures;
    enum { CAP = 5000, PAD = 80 };
    static unsigned char src[CAP + PAD], dst[CAP + 2 * PAD], win[CAP + 2 * PAD];
    size_t lens[] = {0, 1, 15, 63, 64, 65, 127, 200, 1031, 4133};
    size_t woffs[] = {0, 1, 16, 37, 48, 63};
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (unsigned char)(i * 13 + 5);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        for (size_t wo = 0; wo < sizeof(woffs) / sizeof(woffs[0]); wo++) {
            for (int dup = 0; dup < 2; dup++) {
                size_t n = lens[l], doff = PAD + (l + wo) % 4, woff = PAD + woffs[wo];
                /* w: win from its first 64-byte line; woff % 64: the offset in a line */
                unsigned char *w = (unsigned char *)(((uintptr_t)win + 63) & ~(uintptr_t)63);
                memset(dst, 0xa5, sizeof(dst));
                memset(win, 0x5a, sizeof(win));
                if (dup)
                    host_memops.copy_dup(dst + doff, w + woff, src + 3, n);
                else
                    host_memops.copy_out(w + woff, src + 3, n);
                for (size_t i = 0; i + 64 < sizeof(win); i++) {
                    int inside = i >= woff && i < woff + n;
                    if (w[i] != (inside ? src[i - woff + 3] : 0x5a)) {
                        FAIL("%s len %zu streamed offset %zu: byte %zu is %u",
                             dup ? "copy_dup" : "copy_out", n, woff % 64, i, w[i]);
                        break;
                    }
                }
                for (size_t i = 0; dup && i < sizeof(dst); i++) {
                    int inside = i >= doff && i < doff + n;
                    if (dst[i] != (inside ? src[i - doff + 3] : 0xa5)) {
                        FAIL("copy_dup len %zu offset %zu: plain byte %zu is %u", n, doff, i,
                             dst[i]);
                        break;
                    }
                }
            }
        }
    }
    harness_report(before, "copy_out and copy_dup (lengths 0-4133 around 64-byte blocks, six "
                           "alignments of the streamed destination, guards)");
}

/* copy where the destination lies 1-127 bytes past the source counted in a page and not a
 * multiple of 32 (host_memops.c's skewed copies, with AVX2 a loop of its own): lengths around the
 * 2 KiB and 4 MiB bounds and the loop's 128-byte blocks, destinations at several such distances
 * and line offsets, guard bytes on both sides. */
static void test_copy_skewed(void)
{
    long before = harness_failures;
    enum { PAGE = 4096 };
    size_t lens[] = {2047, 2048, 2049, 2048 + 127, 4096 + 13, 131072 + 7, 4u << 20, (4u << 20) + 1};
    size_t dists[] = {16, 48, 8, 100, 127, 64, PAGE + 16};
    size_t cap = (4u << 20) + 1 + 2 * PAGE;
    unsigned char *src = NULL, *dst = NULL;
    if (posix_memalign((void **)&src, PAGE, cap) != 0 ||
        posix_memalign((void **)&dst, PAGE, cap + 2 * PAGE) != 0) {
        FAIL("out of memory");
        free(src);
        return;
    }
    for (size_t i = 0; i < cap; i++)
        src[i] = (unsigned char)(i * 31 + 7 + (i >> 12));
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        for (size_t k = 0; k < sizeof(dists) / sizeof(dists[0]); k++) {
            size_t soff = (l * 16 + k * 48) % 256, doff = soff + dists[k];
            size_t n = lens[l];
            memset(dst, 0xa5, cap + 2 * PAGE);
            host_memops.copy(dst + doff, src + soff, n);
            if (memcmp(dst + doff, src + soff, n) != 0) {
                size_t i = 0;
                while (dst[doff + i] == src[soff + i])
                    i++;
                FAIL("copy len %zu, dst - src %zu (source at +%zu): byte %zu is %u, want %u", n,
                     dists[k], soff, i, dst[doff + i], src[soff + i]);
                continue;
            }
            for (size_t i = 0; i < doff; i++)
                if (dst[i] != 0xa5) {
                    FAIL("copy len %zu, dst - src %zu: wrote byte %zu before the destination", n,
                         dists[k], i);
                    break;
                }
            for (size_t i = doff + n; i < doff + n + PAGE; i++)
                if (dst[i] != 0xa5) {
                    FAIL("copy len %zu, dst - src %zu: wrote byte %zu past the destination", n,
                         dists[k], i - doff - n);
                    break;
                }
        }
    }
    free(src);
    free(dst);
    harness_report(before, "copy with the destination 8-127 bytes past the source in a page "
                           "(lengths 2047 B-4 MiB + 1, guards)");
}

/* ---- Reduce matrix with exact values ---- */

typedef struct {
    int64_t i;
    uint64_t u;
    double f;
} val_t;

/* Input k of buffer `which`: full-range integers (with extremes mixed in, so sums and products
 * overflow), and floats k/4 or k/2 small enough that sum and prod are exact in every format. */
static val_t gen(size_t t, int which, size_t k)
{
    val_t v = {0, 0, 0};
    uint64_t r = harness_splitmix(k * 2 + (uint64_t)which + t * 1000003);
    int bits = (int)types[t].nbytes * 8;
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    static const int64_t extremes[] = {0, 1, -1, 2, INT64_MAX, INT64_MIN};
    if (k % 5 == 0)
        r = (uint64_t)extremes[(k / 5 + (size_t)which) % 6];
    if (types[t].kind == KIND_SIGNED) {
        uint64_t u = r & mask;
        /* sign-extend from bits without relying on conversions */
        v.i = (bits < 64 && (u >> (bits - 1))) ? -(int64_t)((mask - u) + 1) : (int64_t)u;
        if (k % 5 == 0) /* clamp the extremes into the type's range */
            v.i = r == (uint64_t)INT64_MAX   ? (int64_t)(mask >> 1)
                  : r == (uint64_t)INT64_MIN ? -(int64_t)(mask >> 1) - 1
                                             : (int64_t)r;
    } else if (types[t].kind == KIND_UNSIGNED) {
        v.u = r & mask;
    } else {
        int k8 = (int)(r % 81) - 40, k4 = (int)(r % 31) - 15;
        v.f = types[t].kind == KIND_FLOAT  ? k8 / 4.0
              : types[t].kind == KIND_HALF ? k8 / 2.0
                                           : k4 / 2.0;
    }
    return v;
}

/* x mod 2^bits read as a signed bits-wide integer. */
static int64_t wrap_signed(uint64_t x, int bits)
{
    if (bits < 64)
        x &= (1ull << bits) - 1;
    if (x >> (bits - 1)) /* negative: -(2^bits - x) */
        return bits == 64 ? -(int64_t)(~x) - 1 : -(int64_t)((1ull << bits) - x);
    return (int64_t)x;
}

static val_t expect(size_t t, int op, val_t x, val_t y)
{
    val_t r = {0, 0, 0};
    int bits = (int)types[t].nbytes * 8;
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    if (op == chorusAvg)
        op = chorusSum;
    if (types[t].kind == KIND_SIGNED) {
        uint64_t s = (uint64_t)x.i + (uint64_t)y.i, p = (uint64_t)x.i * (uint64_t)y.i;
        r.i = op == chorusSum    ? wrap_signed(s, bits)
              : op == chorusProd ? wrap_signed(p, bits)
              : op == chorusMax  ? (x.i > y.i ? x.i : y.i)
                                 : (x.i < y.i ? x.i : y.i);
    } else if (types[t].kind == KIND_UNSIGNED) {
        r.u = op == chorusSum    ? (x.u + y.u) & mask
              : op == chorusProd ? (x.u * y.u) & mask
              : op == chorusMax  ? (x.u > y.u ? x.u : y.u)
                                 : (x.u < y.u ? x.u : y.u);
    } else {
        r.f = op == chorusSum    ? x.f + y.f
              : op == chorusProd ? x.f * y.f
              : op == chorusMax  ? (x.f > y.f ? x.f : y.f)
                                 : (x.f < y.f ? x.f : y.f);
    }
    return r;
}

/* Element v of dtype t in memory: integers through their own width (no endianness assumed). */
static void store(size_t t, unsigned char *p, val_t v)
{
    int kind = types[t].kind;
    uint64_t u = kind == KIND_SIGNED ? (uint64_t)v.i : v.u;
    uint8_t u8 = (uint8_t)u;
    uint32_t u32 = (uint32_t)u;
    float f = (float)v.f;
    uint16_t h = ref_encode(v.f, kind == KIND_HALF ? HALF : BF16);
    size_t n = types[t].nbytes;
    if (kind == KIND_SIGNED || kind == KIND_UNSIGNED)
        memcpy(p, n == 1 ? (void *)&u8 : n == 4 ? (void *)&u32 : (void *)&u, n);
    else
        memcpy(p, n == 2 ? (void *)&h : n == 4 ? (void *)&f : (void *)&v.f, n);
}

enum { MAXCOUNT = 1031, GUARD = 64, BUF = MAXCOUNT * 8 + 2 * GUARD };

static void test_reduce_matrix(void)
{
    long before = harness_failures, calls = 0;
    static unsigned char abuf[BUF], bbuf[BUF], dbuf[BUF], want[BUF];
    size_t counts[] = {0, 1, 7, 300, MAXCOUNT};
    /* alias: 0 distinct, 1 dst==a, 2 dst==b, 3 a==b (dst distinct), 4 dst==a==b */
    for (size_t t = 0; t < NTYPES; t++) {
        size_t es = types[t].nbytes;
        /* byte offsets of dst, a, b past the guard: aligned, element-shifted, misaligned */
        size_t offs[4][3] = {{0, 0, 0}, {es, 0, 3 * es}, {1, es + 1, 3}, {5, 2, 7}};
        for (int op = 0; op < chorusNumOps; op++)
            for (size_t c = 0; c < 5; c++)
                for (int alias = 0; alias < 5; alias++)
                    for (int o = 0; o < 4; o++) {
                        size_t n = counts[c];
                        unsigned char *d = dbuf + GUARD + offs[o][0];
                        unsigned char *a = abuf + GUARD + offs[o][1];
                        unsigned char *b = bbuf + GUARD + offs[o][2];
                        memset(dbuf, 0xa5, BUF);
                        memcpy(want, dbuf, BUF);
                        for (size_t k = 0; k < n; k++) {
                            val_t x = gen(t, 0, k), y = gen(t, 1, k);
                            if (alias == 3 || alias == 4)
                                y = x;
                            store(t, a + k * es, x);
                            store(t, b + k * es, y);
                            if (alias == 1 || alias == 4)
                                store(t, d + k * es, x);
                            if (alias == 2)
                                store(t, d + k * es, y);
                            store(t, want + (d - dbuf) + k * es, expect(t, op, x, y));
                        }
                        const void *pa = alias == 1 || alias == 4 ? d : a;
                        const void *pb = alias == 2 || alias == 4 ? d : alias == 3 ? a : b;
                        host_memops.reduce(d, pa, pb, n, types[t].dtype, (chorusRedOp_t)op);
                        calls++;
                        for (size_t i = 0; i < BUF; i++) {
                            if (dbuf[i] != want[i]) {
                                CHECK(0, "reduce %s %s count %zu alias %d offsets %d: byte %zd",
                                      types[t].name, op_names[op], n, alias, o,
                                      (ptrdiff_t)i - (d - dbuf));
                                break;
                            }
                        }
                    }
    }
    printf("  %ld reduce calls checked\n", calls);
    harness_report(before,
                   "reduce: 10 dtypes x 5 ops x counts 0/1/7/300/1031 x aliasing x misalignment");
}

/* ---- Overflow and float min/max corner cases ---- */

/* reduce_n against reduce applied nsrc - 1 times (its contract: the same bits), on inputs that
 * include, for float32/float64, NaNs and zeros of both signs in different sources (max/min then
 * depend on the order of the operands). Counts cross the inline limit (256 bytes); offsets cover
 * aligned, element-shifted and misaligned sources; dst apart or dst == src[0]. */
enum { RN_MAXSRC = 8, RN_MAXCOUNT = 300 };

static void test_reduce_n(void)
{
    long before = harness_failures, calls = 0;
    static unsigned char srcbuf[RN_MAXSRC][RN_MAXCOUNT * 8 + 2 * GUARD], dbuf[BUF], want[BUF];
    size_t counts[] = {1, 2, 7, 14, 31, 32, 33, 63, 64, 65, 129, 257, RN_MAXCOUNT};
    int nsrcs[] = {1, 2, 3, 4, 7, 8};
    for (size_t t = 0; t < NTYPES; t++) {
        size_t es = types[t].nbytes;
        for (int op = 0; op < chorusNumOps; op++)
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (size_t ns = 0; ns < sizeof(nsrcs) / sizeof(nsrcs[0]); ns++)
                    for (int o = 0; o < 3; o++)
                        for (int in_place = 0; in_place < 2; in_place++) {
                            size_t n = counts[c];
                            int nsrc = nsrcs[ns];
                            const void *src[RN_MAXSRC];
                            /* o 0: all aligned; 1: sources shifted by whole elements; 2: one
                             * source misaligned by a byte (the chain's bounce path) */
                            size_t doff = o == 2 ? 1 : 0;
                            unsigned char *d = dbuf + GUARD + doff;
                            memset(dbuf, 0x5a, BUF);
                            for (int k = 0; k < nsrc; k++) {
                                size_t off = o == 0 ? 0 : o == 1 ? (size_t)k * es : (k == 1);
                                unsigned char *sp = srcbuf[k] + GUARD + off;
                                for (size_t i = 0; i < n; i++) {
                                    store(t, sp + i * es, gen(t, k, i));
                                    if (types[t].dtype == chorusFloat32 && i % 13 == 3 && k == 1) {
                                        float f = NAN;
                                        memcpy(sp + i * es, &f, 4);
                                    } else if (types[t].dtype == chorusFloat64 && i % 11 == 2 &&
                                               k == nsrc - 1) {
                                        double x = NAN;
                                        memcpy(sp + i * es, &x, 8);
                                    } else if ((types[t].kind == KIND_FLOAT) && i % 7 == 1) {
                                        double z = (k % 2) ? 0.0 : -0.0;
                                        float zf = (float)z;
                                        memcpy(sp + i * es, es == 4 ? (void *)&zf : (void *)&z, es);
                                    }
                                }
                                src[k] = sp;
                            }
                            if (in_place) {
                                memcpy(d, src[0], n * es);
                                src[0] = d;
                            }
                            /* Expected: the chain of reduce calls, into want at the same place */
                            memcpy(want, dbuf, BUF);
                            unsigned char *w = want + (d - dbuf);
                            if (nsrc == 1) {
                                memcpy(w, src[0], n * es);
                            } else {
                                host_memops.reduce(w, src[0], src[1], n, types[t].dtype,
                                                   (chorusRedOp_t)op);
                                for (int k = 2; k < nsrc; k++)
                                    host_memops.reduce(w, w, src[k], n, types[t].dtype,
                                                       (chorusRedOp_t)op);
                            }
                            host_memops.reduce_n(d, src, nsrc, n, types[t].dtype,
                                                 (chorusRedOp_t)op);
                            calls++;
                            if (memcmp(dbuf, want, BUF) != 0) {
                                size_t i = 0;
                                while (dbuf[i] == want[i])
                                    i++;
                                CHECK(0,
                                      "reduce_n %s %s count %zu nsrc %d offsets %d in place %d: "
                                      "byte %zd differs from the chain of reduce calls",
                                      types[t].name, op_names[op], n, nsrc, o, in_place,
                                      (ptrdiff_t)i - (d - dbuf));
                            }
                        }
    }
    printf("  %ld reduce_n calls checked\n", calls);
    harness_report(before, "reduce_n: the same bits as chained reduce calls (10 dtypes x 5 ops x "
                           "1-8 sources x counts 1-300 x alignment x dst == src[0]; NaNs, +-0)");
}

static void test_corners(void)
{
    long before = harness_failures;
    int8_t a8[] = {127, -128, -128, 100}, b8[] = {1, -1, -128, 100}, d8[4];
    host_memops.reduce(d8, a8, b8, 4, chorusInt8, chorusSum);
    CHECK(d8[0] == -128 && d8[1] == 127 && d8[2] == 0 && d8[3] == -56, "int8 sum wrap");
    host_memops.reduce(d8, a8, b8, 4, chorusInt8, chorusProd);
    CHECK(d8[0] == 127 && d8[1] == -128 && d8[2] == 0 && d8[3] == 16, "int8 prod wrap");
    int32_t a32[] = {INT32_MAX, INT32_MIN, 65536}, b32[] = {1, -1, 65536}, d32[3];
    host_memops.reduce(d32, a32, b32, 3, chorusInt32, chorusSum);
    CHECK(d32[0] == INT32_MIN && d32[1] == INT32_MAX && d32[2] == 131072, "int32 sum wrap");
    host_memops.reduce(d32, a32, b32, 3, chorusInt32, chorusProd);
    CHECK(d32[0] == INT32_MAX && d32[1] == INT32_MIN && d32[2] == 0, "int32 prod wrap");
    int64_t a64[] = {INT64_MAX, INT64_MIN}, b64[] = {1, -1}, d64[2];
    host_memops.reduce(d64, a64, b64, 2, chorusInt64, chorusSum);
    CHECK(d64[0] == INT64_MIN && d64[1] == INT64_MAX, "int64 sum wrap");
    host_memops.reduce(d64, a64, b64, 2, chorusInt64, chorusProd);
    CHECK(d64[0] == INT64_MAX && d64[1] == INT64_MIN, "int64 prod wrap");
    uint64_t u[] = {UINT64_MAX}, du[1];
    host_memops.reduce(du, u, u, 1, chorusUint64, chorusProd);
    CHECK(du[0] == 1, "uint64 max*max = 1");
    harness_report(before, "signed sum/prod wrap two's complement (int8/int32/int64 at MIN/MAX)");

    /* Documented semantics: max = a > b ? a : b, min = a < b ? a : b; a NaN picks b. */
    before = harness_failures;
    float fa[] = {NAN, 1.0f, -0.0f, 0.0f}, fb[] = {1.0f, NAN, 0.0f, -0.0f}, fd[4];
    host_memops.reduce(fd, fa, fb, 4, chorusFloat32, chorusMax);
    CHECK(fd[0] == 1.0f && isnan(fd[1]) && fbits(fd[2]) == 0 && fbits(fd[3]) == 0x80000000u,
          "float32 max NaN/zero semantics");
    host_memops.reduce(fd, fa, fb, 4, chorusFloat32, chorusMin);
    CHECK(fd[0] == 1.0f && isnan(fd[1]) && fbits(fd[2]) == 0 && fbits(fd[3]) == 0x80000000u,
          "float32 min NaN/zero semantics");
    double da[] = {NAN, 2.0}, db[] = {2.0, NAN}, dd[2];
    host_memops.reduce(dd, da, db, 2, chorusFloat64, chorusMin);
    CHECK(dd[0] == 2.0 && isnan(dd[1]), "float64 min NaN semantics");
    harness_report(before, "float max/min: a NaN or an equal zero yields the second operand");
}

/* ---- Conversions ---- */

static void test_conversions(void)
{
    long before = harness_failures;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = half_to_float((uint16_t)h);
        uint16_t back = float_to_half(f);
        if (is_nan16((uint16_t)h, HALF)) {
            CHECK(isnan(f) && (fbits(f) >> 31) == (h >> 15), "half %04x -> NaN", h);
            CHECK(back == (h | 0x200), "half NaN %04x -> %04x, want quiet %04x", h, back,
                  h | 0x200);
        } else {
            CHECK(fbits(f) == fbits((float)ref_value((uint16_t)h, HALF)), "half %04x -> %08x", h,
                  fbits(f));
            CHECK(back == h, "half round trip %04x -> %04x", h, back);
        }
        float g = bf16_to_float((uint16_t)h);
        CHECK(fbits(g) == h << 16, "bf16 %04x widens to %08x", h, fbits(g));
        uint16_t gb = float_to_bf16(g);
        CHECK(gb == (is_nan16((uint16_t)h, BF16) ? (h | 0x40) : h), "bf16 round trip %04x -> %04x",
              h, gb);
    }
    harness_report(
        before, "half and bf16: all 65536 patterns decode exactly and round-trip (NaN stays NaN)");

    before = harness_failures;
    static const uint32_t half_cases[][2] = {
        {0x3f801000, 0x3c00}, /* 1 + 2^-11: tie, stays even 1.0 */
        {0x3f803000, 0x3c02}, /* 1 + 3*2^-11: tie, up to even */
        {0x3f801001, 0x3c01}, {0x3f800fff, 0x3c00}, {0xbf801000, 0xbc00},
        {0x44fff000, 0x6800}, /* 2047.5 -> 2048 */
        {0x44ffd000, 0x67fe}, /* 2046.5 -> 2046 */
        {0x477fe000, 0x7bff}, /* 65504, the largest half */
        {0x477fefff, 0x7bff}, {0x477ff000, 0x7c00}, /* 65520: tie rounds to Inf */
        {0x501502f9, 0x7c00}, {0x7f800000, 0x7c00}, {0xff800000, 0xfc00},
        {0x33800000, 0x0001}, /* 2^-24, smallest subnormal */
        {0x33000000, 0x0000}, /* 2^-25: tie, to even 0 */
        {0x33000001, 0x0001}, {0x33c00000, 0x0002}, /* 3*2^-25: tie, to even 2 */
        {0x34200000, 0x0002}, /* 5*2^-25: tie, to even 2 */
        {0x387fe000, 0x0400}, /* 1023.5*2^-24: tie, up to the smallest normal */
        {0x387fa000, 0x03fe}, /* 1022.5*2^-24: tie, stays even */
        {0x387fc000, 0x03ff}, {0x38800000, 0x0400}, {0x80000000, 0x8000},
        {0x8d8a2e2a, 0x8000}, {0x00000001, 0x0000}, {0x7fc00000, 0x7e00},
        {0x7f800001, 0x7e00}, /* signaling NaN: quiet, never Inf */
        {0xffc02000, 0xfe01},
    };
    for (size_t i = 0; i < sizeof(half_cases) / sizeof(half_cases[0]); i++) {
        uint16_t h = float_to_half(bitsf(half_cases[i][0]));
        CHECK(h == half_cases[i][1], "float_to_half(%08x) = %04x, want %04x", half_cases[i][0], h,
              half_cases[i][1]);
    }
    static const uint32_t bf16_cases[][2] = {
        {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82}, {0x3f808001, 0x3f81},
        {0x3f807fff, 0x3f80}, {0x7f7fffff, 0x7f80}, /* FLT_MAX rounds to Inf */
        {0x7f7f7fff, 0x7f7f}, {0x7f7f8000, 0x7f80}, {0x00008000, 0x0000},
        {0x00018000, 0x0002}, {0x00008001, 0x0001}, {0x007fffff, 0x0080},
        {0x80000000, 0x8000}, {0x7f800001, 0x7fc0}, /* signaling NaN: quiet, never Inf */
        {0xff800001, 0xffc0}, {0x7fffffff, 0x7fff}, {0xff800000, 0xff80},
    };
    for (size_t i = 0; i < sizeof(bf16_cases) / sizeof(bf16_cases[0]); i++) {
        uint16_t b = float_to_bf16(bitsf(bf16_cases[i][0]));
        CHECK(b == bf16_cases[i][1], "float_to_bf16(%08x) = %04x, want %04x", bf16_cases[i][0], b,
              bf16_cases[i][1]);
    }
    harness_report(before,
                   "round-to-nearest-even ties, overflow, subnormals, NaN on hand-picked floats");

    /* Every sign and exponent, with mantissas that put a tie, near-tie or random bits at every
     * rounding position a half or bf16 result can have. */
    before = harness_failures;
    long swept = 0;
    for (uint32_t se = 0; se < 512; se++) {
        for (uint32_t s = 1; s < 24; s++) {
            uint32_t halfway = 1u << (s - 1), low = (1u << s) - 1;
            uint32_t tails[] = {0, 1, halfway - 1, halfway, halfway + 1, low};
            for (uint32_t k = 0; k < 4; k++) {
                uint32_t hi = (uint32_t)harness_splitmix(se * 97 + s * 7 + k) << s;
                for (int j = 0; j < 6; j++) {
                    uint32_t u = (se << 23) | ((hi | tails[j]) & 0x7fffff);
                    float f = bitsf(u);
                    swept++;
                    if (isnan(f))
                        continue; /* NaN handled by the hand-picked and round-trip checks */
                    CHECK(float_to_half(f) == ref_encode(f, HALF),
                          "float_to_half(%08x) = %04x want %04x", u, float_to_half(f),
                          ref_encode(f, HALF));
                    CHECK(float_to_bf16(f) == ref_encode(f, BF16),
                          "float_to_bf16(%08x) = %04x want %04x", u, float_to_bf16(f),
                          ref_encode(f, BF16));
                }
            }
        }
    }
    printf("  %ld floats swept\n", swept);
    harness_report(before,
                   "float_to_half and float_to_bf16 equal the rint reference on the float sweep");
}

/* ---- float16/bfloat16 reduce and divide over all values, through each conversion path ---- */

static void test_16bit_all_values(const char *path)
{
    long before = harness_failures;
    static uint16_t a[65536], b[65536], d[65536];
    for (int is_half = 1; is_half >= 0; is_half--) {
        chorusDataType_t dt = is_half ? chorusFloat16 : chorusBfloat16;
        fmt16_t fmt = is_half ? HALF : BF16;
        for (uint32_t pairing = 0; pairing < 8; pairing++) {
            for (uint32_t i = 0; i < 65536; i++) {
                a[i] = (uint16_t)i;
                b[i] = (uint16_t)(i * (2 * pairing + 40503) + pairing * 12345);
            }
            for (int op = 0; op < chorusNumOps; op++) {
                host_memops.reduce(d, a, b, 65536, dt, (chorusRedOp_t)op);
                for (uint32_t i = 0; i < 65536; i++) {
                    /* Sums and products of two halves are exact in double; for bf16 the double
                     * rounding is harmless (53 >= 2*8+2), so encode() gives the right answer. */
                    double x = ref_value(a[i], fmt), y = ref_value(b[i], fmt);
                    uint16_t want;
                    if (op == chorusMax || op == chorusMin) {
                        int first = op == chorusMax ? x > y : x < y;
                        want = first ? a[i] : b[i];
                        if (is_nan16(want, fmt))
                            want = quiet16(want, fmt);
                    } else {
                        want = ref_encode(op == chorusProd ? x * y : x + y, fmt);
                    }
                    int exact_nan = op == chorusMax || op == chorusMin;
                    int ok = is_nan16(want, fmt)
                                 ? is_nan16(d[i], fmt) && (!exact_nan || d[i] == want)
                                 : d[i] == want;
                    CHECK(ok, "%s %s %s(%04x, %04x) = %04x, want %04x", path, dtype_name(dt),
                          op_names[op], a[i], b[i], d[i], want);
                }
            }
        }
        uint64_t divisors[] = {1, 2, 3, 5, 7, 8, 1000};
        for (int k = 0; k < 7; k++) {
            host_memops.divide(d, a, 65536, dt, divisors[k]);
            memcpy(b, a, sizeof(b));
            host_memops.divide(b, b, 65536, dt, divisors[k]); /* in place */
            for (uint32_t i = 0; i < 65536; i++) {
                uint16_t want = ref_encode(ref_value(a[i], fmt) / (double)divisors[k], fmt);
                int ok = is_nan16(want, fmt) ? is_nan16(d[i], fmt) : d[i] == want;
                CHECK(ok && d[i] == b[i],
                      "%s %s divide %04x / %llu = %04x (in place %04x), want %04x", path,
                      dtype_name(dt), a[i], (unsigned long long)divisors[k], d[i], b[i], want);
            }
        }
    }
    char what[200];
    snprintf(what, sizeof(what),
             "float16/bf16 reduce (5 ops x 8 pairings) and divide (7 divisors, in place too) on "
             "all 65536 values equal the reference, %s path",
             path);
    harness_report(before, "%s", what);
}

/* ---- Integer and float divide ---- */

static void test_divide(void)
{
    long before = harness_failures;
    /* small values of both signs, and each type's extremes (filtered per type below) */
    static const int64_t sv[] = {0, 1, -1, 7, -7, 100, -100, 127, -128, -3, 3};
    static const int64_t extremes[] = {INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN};
    static const uint64_t divisors[] = {1, 2, 3, 7, 255, 1ull << 31, 1ull << 63, UINT64_MAX};
    static unsigned char src[8 * 16 + 8], dst[8 * 16 + 8];
    for (size_t t = 0; t < NTYPES; t++) {
        if (types[t].kind != KIND_SIGNED && types[t].kind != KIND_UNSIGNED)
            continue;
        int bits = (int)types[t].nbytes * 8;
        size_t es = types[t].nbytes, n = 0;
        int is_unsigned = types[t].kind == KIND_UNSIGNED;
        int64_t vals[16];
        for (size_t i = 0; i < 15; i++) {
            int64_t v = i < 11 ? sv[i] : extremes[i - 11];
            if (bits < 64) { /* keep what the type holds; in uint64 a negative means >= 2^63 */
                if (is_unsigned && v < 0)
                    v = -(v + 1); /* non-negative values with the same spread */
                int64_t lo = is_unsigned ? 0 : -(1ll << (bits - 1));
                int64_t hi = is_unsigned ? (1ll << bits) - 1 : (1ll << (bits - 1)) - 1;
                if (v < lo || v > hi)
                    continue;
            }
            vals[n++] = v;
        }
        for (size_t k = 0; k < sizeof(divisors) / sizeof(divisors[0]); k++) {
            for (size_t off = 0; off < 2; off++) { /* aligned, then misaligned by one byte */
                val_t x = {0, 0, 0};
                for (size_t i = 0; i < n; i++) {
                    x.i = vals[i];
                    x.u = (uint64_t)vals[i];
                    store(t, src + off + i * es, x);
                }
                host_memops.divide(dst + off, src + off, n, types[t].dtype, divisors[k]);
                host_memops.divide(src + off, src + off, n, types[t].dtype, divisors[k]);
                for (size_t i = 0; i < n; i++) {
                    /* Truncation: |x| / d in unsigned arithmetic, then x's sign. */
                    int neg = types[t].kind == KIND_SIGNED && vals[i] < 0;
                    uint64_t mag = neg ? 0 - (uint64_t)vals[i] : (uint64_t)vals[i];
                    uint64_t q = mag / divisors[k];
                    val_t w = {0, q, 0}; /* uint64: negative vals stand for values >= 2^63 */
                    w.i = !neg ? (int64_t)q : q == 0 ? 0 : -(int64_t)(q - 1) - 1;
                    unsigned char want[8];
                    store(t, want, w);
                    CHECK(memcmp(dst + off + i * es, want, es) == 0 &&
                              memcmp(src + off + i * es, want, es) == 0,
                          "%s divide %lld / %llu", types[t].name, (long long)vals[i],
                          (unsigned long long)divisors[k]);
                }
            }
        }
    }
    harness_report(
        before, "integer divide truncates toward zero (negatives, MIN/MAX, divisors up to 2^64-1, "
                "in place, misaligned)");

    before = harness_failures;
    float f[64], fq[64];
    double g[64], gq[64];
    for (int i = 0; i < 64; i++) {
        f[i] = (float)(harness_splitmix((uint64_t)i) % 2000001) / 1000.0f - 1000.0f;
        g[i] = (double)(harness_splitmix((uint64_t)i + 99) % 2000001) / 997.0 - 1000.0;
    }
    uint64_t dv[] = {1, 3, 7, 10, 1u << 20};
    for (int k = 0; k < 5; k++) {
        host_memops.divide(fq, f, 64, chorusFloat32, dv[k]);
        host_memops.divide(gq, g, 64, chorusFloat64, dv[k]);
        for (int i = 0; i < 64; i++) {
            /* A double quotient rounded to float is the correctly rounded float quotient. */
            CHECK(fbits(fq[i]) == fbits((float)((double)f[i] / (double)dv[k])),
                  "float32 %a / %llu = %a", f[i], (unsigned long long)dv[k], fq[i]);
            double back = gq[i] * (double)dv[k];
            CHECK(fabs(back - g[i]) <= fabs(g[i]) * 0x1p-52, "float64 %a / %llu = %a", g[i],
                  (unsigned long long)dv[k], gq[i]);
        }
    }
    double third = 1.0, six = 6.0;
    host_memops.divide(&third, &third, 1, chorusFloat64, 3);
    host_memops.divide(&six, &six, 1, chorusFloat64, 3);
    CHECK(third == 0x1.5555555555555p-2 && six == 2.0, "float64 1/3 = %a, 6/3 = %a", third, six);
    float one = 1.0f;
    host_memops.divide(&one, &one, 1, chorusFloat32, 0);
    CHECK(isinf(one), "float32 1 / 0 = %a", one);
    int32_t keep[] = {5, -5}, copied[2] = {0, 0};
    host_memops.divide(copied, keep, 2, chorusInt32, 0);
    host_memops.divide(keep, keep, 2, chorusInt32, 0);
    CHECK(keep[0] == 5 && keep[1] == -5 && copied[0] == 5 && copied[1] == -5,
          "int32 divide by 0 leaves values (in place and copied)");
    harness_report(before, "float32/float64 divide in their own precision; divisor 0");
}

/* ---- F16C hardware against the portable conversions ---- */

#if TEST_HAVE_X86
/* vcvtps2ph against float_to_half on the floats i * stride (mod 2^32), i < n, n a multiple of 8. */
__attribute__((target("avx,f16c"))) static void f16c_compare_floats(uint64_t stride, uint64_t n)
{
    for (uint64_t i = 0; i < n; i += 8) {
        float in[8];
        uint16_t hw[8];
        for (uint64_t j = 0; j < 8; j++)
            in[j] = bitsf((uint32_t)((i + j) * stride));
        _mm_storeu_si128((__m128i *)hw, _mm256_cvtps_ph(_mm256_loadu_ps(in), 0));
        for (int j = 0; j < 8; j++)
            CHECK(hw[j] == float_to_half(in[j]), "F16C float %08x -> %04x, portable %04x",
                  fbits(in[j]), hw[j], float_to_half(in[j]));
    }
}

/* vcvtph2ps on all halves; vcvtps2ph on all 2^32 floats if asked, else on every 251st float and
 * every float whose low 16 bits are zero. */
__attribute__((target("avx,f16c"))) static void f16c_compare(int exhaustive)
{
    for (uint32_t h = 0; h < 65536; h++)
        CHECK(fbits(_cvtsh_ss((uint16_t)h)) == fbits(half_to_float((uint16_t)h)),
              "F16C half %04x -> %08x, portable %08x", h, fbits(_cvtsh_ss((uint16_t)h)),
              fbits(half_to_float((uint16_t)h)));
    if (exhaustive) {
        f16c_compare_floats(1, 1ull << 32);
    } else {
        f16c_compare_floats(251, ((1ull << 32) / 251) & ~7ull);
        f16c_compare_floats(65536, 65536);
    }
}
#endif

int main(int argc, char **argv)
{
    int exhaustive = argc > 1 && strcmp(argv[1], "--exhaustive") == 0;
    test_names_and_copy();
    test_copy_out_dup();
    test_copy_skewed();
    test_reduce_matrix();
    test_reduce_n();
    test_corners();
    test_conversions();
    test_divide();
#if TEST_HAVE_X86
    /* The library picks F16C for float16 and AVX2 for bfloat16 when the CPU has them; the hook
     * then forces the portable loops so both paths are proven on this machine. */
    unsigned eax, ebx, ecx, edx;
    __builtin_cpu_init();
    int f16c =
        __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    int avx2 = __builtin_cpu_supports("avx2");
    char path[64];
    snprintf(path, sizeof(path), "default (float16 %s, bfloat16 %s)", f16c ? "F16C" : "portable",
             avx2 ? "AVX2" : "SSE2");
    test_16bit_all_values(path);
    host_reduce_force_portable(1);
    test_reduce_matrix();
    test_reduce_n();
    test_16bit_all_values("forced portable");
    host_reduce_force_portable(0);
    if (f16c) {
        long before = harness_failures;
        f16c_compare(exhaustive);
        harness_report(
            before, exhaustive
                        ? "F16C equals the portable conversions on all halves and all 2^32 floats"
                        : "F16C equals the portable conversions on all halves and a float sweep");
    } else {
        printf("SKIP F16C comparison: this CPU has no F16C (portable path tested above)\n");
    }
#else
    (void)exhaustive;
    test_16bit_all_values("portable");
    printf("SKIP F16C comparison: not an x86 build (portable path tested above)\n");
#endif
    return harness_finish("%ld failed checks", harness_failures);
}
