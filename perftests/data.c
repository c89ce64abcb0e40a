/*
 * data.c: what the *_perf benchmarks compute on and how a result is judged (see common.h).
 *
 * The dtype table (nccl-tests' names, sizes, exactness limits) and the names -d and -o accept;
 * the exact-by-construction inputs (perf_value) and their host-side reduction (perf_reduced);
 * conversion to and from every dtype, half and bfloat16 included; and the bit-exact comparison of
 * a receive buffer against the expected one. No timing, no communication: the driver (common.c)
 * owns the buffers and the communicator and calls in here.
 */
#include "data.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PERF_MAX_SHOWN_ERRORS 3

/* Per dtype: nccl-tests' name, bytes, float?, signed?, the largest magnitude up to which every
 * integer (so every partial sum) is exact, the most factors of two a product may hold. */
static const struct {
    const char *name;
    size_t nbytes;
    int is_float, is_signed;
    int64_t exact_max;
    int max_twos;
} perf_types[chorusNumTypes] = {
    [chorusInt8] = {"int8", 1, 0, 1, 127, 6},
    [chorusUint8] = {"uint8", 1, 0, 0, 255, 7},
    [chorusInt32] = {"int32", 4, 0, 1, 1 << 20, 30},
    [chorusUint32] = {"uint32", 4, 0, 0, 1 << 20, 30},
    [chorusInt64] = {"int64", 8, 0, 1, 1 << 20, 62},
    [chorusUint64] = {"uint64", 8, 0, 0, 1 << 20, 62},
    [chorusFloat16] = {"half", 2, 1, 1, 2048, 15}, /* 11 significant bits */
    [chorusFloat32] = {"float", 4, 1, 1, 1 << 20, 30}, /* 24 */
    [chorusFloat64] = {"double", 8, 1, 1, 1 << 20, 62},
    [chorusBfloat16] = {"bfloat16", 2, 1, 1, 256, 15}, /* 8 */
};
/* What -d and -o accept: nccl-tests' names and common aliases. */
typedef struct perf_name {
    const char *name;
    int value;
} perf_name_t;
static const perf_name_t perf_type_names[] = {
    {"int8", chorusInt8},       {"char", chorusInt8},     {"uint8", chorusUint8},
    {"int32", chorusInt32},     {"int", chorusInt32},     {"uint32", chorusUint32},
    {"int64", chorusInt64},     {"uint64", chorusUint64}, {"half", chorusFloat16},
    {"float16", chorusFloat16}, {"fp16", chorusFloat16},  {"float", chorusFloat32},
    {"float32", chorusFloat32}, {"fp32", chorusFloat32},  {"double", chorusFloat64},
    {"float64", chorusFloat64}, {"fp64", chorusFloat64},  {"bfloat16", chorusBfloat16},
    {"bf16", chorusBfloat16},
};
static const perf_name_t perf_op_table[] = {
    {"sum", chorusSum}, {"prod", chorusProd}, {"max", chorusMax},
    {"min", chorusMin}, {"avg", chorusAvg},
};

/* Dtypes and their names ----------------------------------------------------------------------- */

size_t perf_dtype_size(chorusDataType_t dtype)
{
    return (unsigned)dtype < chorusNumTypes ? perf_types[dtype].nbytes : 0;
}

const char *perf_type_name(chorusDataType_t dtype)
{
    return (unsigned)dtype < chorusNumTypes ? perf_types[dtype].name : "?";
}

const char *perf_op_name(chorusRedOp_t op)
{
    return perf_op_table[op].name;
}

/* The value of name in table, or -1. */
static int perf_lookup(const char *name, const perf_name_t *table, size_t ntable)
{
    for (size_t k = 0; k < ntable; k++) {
        if (strcmp(name, table[k].name) == 0) {
            return table[k].value;
        }
    }
    return -1;
}

int perf_type_lookup(const char *name)
{
    return perf_lookup(name, perf_type_names, sizeof(perf_type_names) / sizeof(perf_type_names[0]));
}

int perf_op_lookup(const char *name)
{
    return perf_lookup(name, perf_op_table, sizeof(perf_op_table) / sizeof(perf_op_table[0]));
}

/* Verifiable values ---------------------------------------------------------------------------- */

int64_t perf_value(chorusDataType_t dtype, chorusRedOp_t pattern_op, int nranks, int rank, size_t i)
{
    uint64_t h = (uint64_t)i * 7u + (uint64_t)rank * 13u + 1u;
    int64_t emax = perf_types[dtype].exact_max;
    int sgn = perf_types[dtype].is_signed;

    switch (pattern_op) {
    case chorusSum: {
        /* Every |partial sum| <= nranks * b <= emax. */
        int64_t b = emax / nranks;
        return sgn ? (int64_t)(h % (uint64_t)(2 * b + 1)) - b : (int64_t)(h % (uint64_t)(b + 1));
    }
    case chorusAvg: {
        /* Ranks < n-1 give [0, b]; the last rank tops the sum up to a multiple of n, so sum / n
         * is exact whatever the dtype; the total stays <= emax. */
        int64_t b = nranks > 1 ? (emax - (nranks - 1)) / (nranks - 1) : emax;
        int64_t s = 0;
        b = b < 0 ? 0 : b;
        if (nranks == 1 || rank < nranks - 1) {
            return (int64_t)(h % (uint64_t)(b + 1));
        }
        for (int r = 0; r < nranks - 1; r++) {
            s += perf_value(dtype, pattern_op, nranks, r, i);
        }
        return (nranks - s % nranks) % nranks;
    }
    case chorusProd: {
        /* Rank r gives 2 when (i + r) % p == 0, else 1: at most ceil(n / p) <= k twos. */
        int k = perf_types[dtype].max_twos;
        uint64_t p = (uint64_t)((nranks + k - 1) / k);
        int64_t v;
        p = p < 2 ? 2 : p;
        v = ((uint64_t)i + (uint64_t)rank) % p == 0 ? 2 : 1;
        return sgn && ((uint64_t)i * 3u + (uint64_t)rank * 5u) % 7u == 0 ? -v : v;
    }
    default: /* max, min, and the collectives that only move data */
        return sgn ? (int64_t)(h % 201u) - 100 : (int64_t)(h % 201u);
    }
}

int64_t perf_reduced(chorusDataType_t dtype, chorusRedOp_t op, int nranks, size_t i)
{
    int64_t acc = perf_value(dtype, op, nranks, 0, i);
    for (int r = 1; r < nranks; r++) {
        int64_t v = perf_value(dtype, op, nranks, r, i);
        switch (op) {
        case chorusProd:
            acc *= v;
            break;
        case chorusMax:
            acc = v > acc ? v : acc;
            break;
        case chorusMin:
            acc = v < acc ? v : acc;
            break;
        default: /* sum, avg */
            acc += v;
            break;
        }
    }
    return op == chorusAvg ? acc / nranks : acc;
}

static uint16_t perf_float_to_half(float f)
{
    uint32_t x, mant, m, rem, shift;
    int32_t e;
    uint16_t sign;
    memcpy(&x, &f, sizeof(x));
    sign = (uint16_t)((x >> 16) & 0x8000u);
    e = (int32_t)((x >> 23) & 0xffu) - 112; /* the half exponent field */
    if (e >= 31) { /* overflow, inf, NaN */
        return (uint16_t)(sign | 0x7c00u | (e == 143 && (x & 0x7fffffu) ? 0x200u : 0u));
    }
    if (e < -10) {
        return sign;
    }
    /* The 24-bit significand down to 11 bits (fewer below the normal range), rounded to even. */
    mant = (x & 0x7fffffu) | 0x800000u;
    shift = e > 0 ? 13u : (uint32_t)(14 - e);
    m = mant >> shift;
    rem = mant & ((1u << shift) - 1u);
    m += rem > (1u << (shift - 1)) || (rem == (1u << (shift - 1)) && (m & 1u));
    /* Normal: exponent plus fraction, where a rounding carry correctly bumps the exponent. */
    return (uint16_t)(sign | (e > 0 ? ((uint32_t)e << 10) + m - 0x400u : m));
}

static float perf_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    float f;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        x = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        x = sign;
    } else { /* subnormal: normalize */
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    memcpy(&f, &x, sizeof(f));
    return f;
}

static uint16_t perf_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    }
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float perf_bf16_to_float(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

void perf_store(void *buf, size_t idx, chorusDataType_t dtype, int64_t v)
{
    size_t nbytes = perf_types[dtype].nbytes;
    int8_t i8 = (int8_t)v; /* same bits as the uint8_t / uint32_t values */
    int32_t i32 = (int32_t)v;
    float f = (float)v;
    double d = (double)v;
    uint16_t h = dtype == chorusFloat16 ? perf_float_to_half(f) : perf_float_to_bf16(f);
    const void *src = nbytes == 1 ? (const void *)&i8 : nbytes == 2 ? (const void *)&h : NULL;
    if (nbytes >= 4) {
        src = perf_types[dtype].is_float ? (nbytes == 4 ? (const void *)&f : (const void *)&d)
                                         : (nbytes == 4 ? (const void *)&i32 : (const void *)&v);
    }
    memcpy((char *)buf + idx * nbytes, src, nbytes);
}

static double perf_load(const void *buf, size_t idx, chorusDataType_t dtype)
{
    switch (dtype) {
    case chorusInt8:
        return ((const int8_t *)buf)[idx];
    case chorusUint8:
        return ((const uint8_t *)buf)[idx];
    case chorusInt32:
        return ((const int32_t *)buf)[idx];
    case chorusUint32:
        return ((const uint32_t *)buf)[idx];
    case chorusInt64:
        return (double)((const int64_t *)buf)[idx];
    case chorusUint64:
        return (double)((const uint64_t *)buf)[idx];
    case chorusFloat16:
        return perf_half_to_float(((const uint16_t *)buf)[idx]);
    case chorusFloat32:
        return ((const float *)buf)[idx];
    case chorusFloat64:
        return ((const double *)buf)[idx];
    default:
        return perf_bf16_to_float(((const uint16_t *)buf)[idx]);
    }
}

/* Checking ------------------------------------------------------------------------------------- */

/* Wrong elements of got against want: integers bit for bit, floats by value (so +0 == -0 and
 * NaN is always wrong). The first few mismatches go to stderr. */
long long perf_compare(const perf_coll_t *coll, const char *host, const perf_case_t *c,
                       int in_place, const void *got, const void *want, size_t count)
{
    size_t es = perf_dtype_size(c->dtype);
    long long wrong = 0;
    for (size_t i = 0; i < count; i++) {
        int bad = perf_types[c->dtype].is_float
                      ? !(perf_load(got, i, c->dtype) == perf_load(want, i, c->dtype))
                      : memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0;
        if (bad && wrong++ < PERF_MAX_SHOWN_ERRORS) {
            fprintf(stderr,
                    "%s:%d: rank %d: %s %s %s root %d count %zu %s: element %zu is %.17g, "
                    "expected %.17g\n",
                    host, (int)getpid(), c->rank, coll->name, perf_type_name(c->dtype),
                    coll->reduces ? perf_op_name(c->op) : "none", c->root, c->counts.paramcount,
                    in_place ? "in-place" : "out-of-place", i, perf_load(got, i, c->dtype),
                    perf_load(want, i, c->dtype));
        }
    }
    return wrong;
}
