/*
 * test_cuda_memops.c: every CUDA memops kernel against the host backend (its CPU reference), bit
 * for bit: reduce for every dtype x op, divide for every dtype and awkward divisors, and copy;
 * counts from 0 to past a million (heads, 16-byte packs and tails of every length), pointers
 * equally and unequally misaligned, misaligned to the element size, and in place (dst == a, dst ==
 * b). Guard bytes around each output catch writes outside it. Inputs are random bits (NaN and
 * Inf encodings moved into the largest finite binade) with signed zeros, the largest finite value
 * and the smallest subnormal planted among them, so overflow to Inf, subnormal arithmetic and
 * max/min of +0 and -0 are checked too. Only NaN payloads may differ (x / 0 with x = 0): two NaNs
 * count as equal. Without a CUDA device it prints SKIP and exits 77.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_memops.h"
#include "memops.h"
#include "support/cuda_skip.h"

#define GUARD 64 /* bytes checked on each side of an output */
#define SLACK 128 /* room for offsets and guards in every buffer */
#define MAX_COUNT ((1u << 20) + 3)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int is_float(chorusDataType_t dtype)
{
    return dtype == chorusFloat16 || dtype == chorusFloat32 || dtype == chorusFloat64 ||
           dtype == chorusBfloat16;
}

/* Bit patterns planted at fixed places among the random ones, for input `which` (0: a, 1: b):
 * +0 op -0 and -0 op +0 (max/min keep the second operand when neither is greater), the largest
 * finite value twice (sums and products overflow to Inf), the smallest subnormal twice; for
 * integers 0, -1/all ones, the most negative value (INT64_MIN / 2^63 for divide) and 1. */
static uint64_t planted(chorusDataType_t dtype, int slot, int which)
{
    size_t bits = dtype_nbytes(dtype) * 8;
    uint64_t sign = 1ull << (bits - 1), ones = bits == 64 ? ~0ull : (1ull << bits) - 1;
    uint64_t maxf = dtype == chorusFloat16    ? 0x7bff
                    : dtype == chorusBfloat16 ? 0x7f7f
                    : dtype == chorusFloat32  ? 0x7f7fffffull
                                              : 0x7fefffffffffffffull;
    if (is_float(dtype)) {
        uint64_t v[4][2] = {{0, sign}, {sign, 0}, {maxf, maxf}, {1, 1}};
        return v[slot][which];
    }
    uint64_t v[4][2] = {{0, ones}, {ones, sign}, {sign, 1}, {1, sign}};
    return v[slot][which];
}

/* Random bits; a NaN (or Inf) encoding loses the lowest exponent bit, so it becomes finite; then
 * the planted patterns at every element i with i % 61 in 5..8. */
static void fill(unsigned char *p, size_t count, chorusDataType_t dtype, int which)
{
    size_t es = dtype_nbytes(dtype);
    for (size_t i = 0; i < count * es; i += 8) {
        uint64_t r = rng();
        memcpy(p + i, &r, count * es - i < 8 ? count * es - i : 8);
    }
    for (size_t i = 0; i < count; i++) {
        unsigned char *e = p + i * es;
        if (i % 61 >= 5 && i % 61 <= 8) {
            uint64_t v = planted(dtype, (int)(i % 61 - 5), which);
            memcpy(e, &v, es); /* little-endian: the low bytes */
            continue;
        }
        if (dtype == chorusFloat32) {
            uint32_t u;
            memcpy(&u, e, 4);
            if (((u >> 23) & 0xff) == 0xff)
                u &= ~(1u << 23);
            memcpy(e, &u, 4);
        } else if (dtype == chorusFloat64) {
            uint64_t u;
            memcpy(&u, e, 8);
            if (((u >> 52) & 0x7ff) == 0x7ff)
                u &= ~(1ull << 52);
            memcpy(e, &u, 8);
        } else if (dtype == chorusFloat16 || dtype == chorusBfloat16) {
            uint16_t u;
            memcpy(&u, e, 2);
            int shift = dtype == chorusFloat16 ? 10 : 7;
            uint16_t mask = dtype == chorusFloat16 ? 0x1f : 0xff;
            if (((u >> shift) & mask) == mask)
                u &= (uint16_t) ~(1u << shift);
            memcpy(e, &u, 2);
        }
    }
}

/* Whether the element at p is a NaN (float dtypes; x / 0 with x = 0 makes one). */
static int elem_is_nan(const unsigned char *p, chorusDataType_t dtype)
{
    uint64_t u = 0;
    memcpy(&u, p, dtype_nbytes(dtype));
    switch (dtype) {
    case chorusFloat16:
        return (u & 0x7c00) == 0x7c00 && (u & 0x3ff) != 0;
    case chorusBfloat16:
        return (u & 0x7f80) == 0x7f80 && (u & 0x7f) != 0;
    case chorusFloat32:
        return (u & 0x7f800000) == 0x7f800000 && (u & 0x7fffff) != 0;
    case chorusFloat64:
        return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull &&
               (u & 0xfffffffffffffull) != 0;
    default:
        return 0;
    }
}

static int check_cuda(int err, const char *what)
{
    if (err != 0) {
        fprintf(stderr, "FAIL: %s: %s\n", what, cuda_memops_error_string(err));
        return 1;
    }
    return 0;
}

/* Device and host images of three buffers (a, b, d), each MAX_COUNT * 8 + SLACK bytes. */
typedef struct {
    unsigned char *dev[3], *host[3], *got, *in[2]; /* in: the inputs as filled */
    size_t nbytes;
    cudaStream_t stream;
} bufs_t;

enum { A, B, D };
enum { DISTINCT, INTO_A, INTO_B };

typedef struct {
    const char *kind; /* "reduce" or "divide" */
    chorusDataType_t dtype;
    chorusRedOp_t op;
    uint64_t divisor;
    size_t count, off[3];
    int alias;
} case_t;

static int run_case(bufs_t *bf, const case_t *c)
{
    size_t es = dtype_nbytes(c->dtype), n = c->count * es;
    /* The output buffer: d itself, or a or b when in place. */
    int out = c->alias == INTO_A ? A : c->alias == INTO_B ? B : D;
    size_t span = n + c->off[out] + GUARD;
    for (int i = 0; i < 3; i++) {
        memset(bf->host[i], 0xa5, span + GUARD);
        if (i != D)
            fill(bf->host[i] + c->off[i], c->count, c->dtype, i == B);
        if (check_cuda(cudaMemcpy(bf->dev[i], bf->host[i], span + GUARD, cudaMemcpyHostToDevice),
                       "copy inputs"))
            return 1;
    }
    memcpy(bf->in[0], bf->host[A] + c->off[A], n);
    memcpy(bf->in[1], bf->host[B] + c->off[B], n);
    unsigned char *hd = bf->host[out] + c->off[out], *dd = bf->dev[out] + c->off[out];
    int err;
    if (strcmp(c->kind, "reduce") == 0) {
        host_memops.reduce(hd, bf->host[A] + c->off[A], bf->host[B] + c->off[B], c->count, c->dtype,
                           c->op);
        err = cuda_memops_reduce(dd, bf->dev[A] + c->off[A], bf->dev[B] + c->off[B], c->count,
                                 c->dtype, c->op, bf->stream);
    } else {
        host_memops.divide(hd, bf->host[A] + c->off[A], c->count, c->dtype, c->divisor);
        err = cuda_memops_divide(dd, bf->dev[A] + c->off[A], c->count, c->dtype, c->divisor,
                                 bf->stream);
    }
    if (check_cuda(err, "launch") || check_cuda(cudaStreamSynchronize(bf->stream), "run") ||
        check_cuda(cudaMemcpy(bf->got, bf->dev[out], span + GUARD, cudaMemcpyDeviceToHost),
                   "copy result"))
        return 1;
    for (size_t i = 0; i < span + GUARD; i++) {
        if (bf->got[i] != bf->host[out][i]) {
            /* Inside the output, two NaNs are equal whatever their payloads. */
            size_t first = i - (i - c->off[out]) % es;
            if (i >= c->off[out] && i < c->off[out] + n && elem_is_nan(bf->got + first, c->dtype) &&
                elem_is_nan(bf->host[out] + first, c->dtype)) {
                i = first + es - 1;
                continue;
            }
            long at = (long)i - (long)c->off[out];
            fprintf(stderr,
                    "FAIL: %s %s %s divisor %llu count %zu offsets a %zu b %zu d %zu alias %d: "
                    "byte %ld (element %ld%s) is 0x%02x, the host backend gives 0x%02x\n",
                    c->kind, dtype_name(c->dtype), redop_name(c->op),
                    (unsigned long long)c->divisor, c->count, c->off[A], c->off[B], c->off[D],
                    c->alias, at, at / (long)es,
                    at < 0 || (size_t)at >= n ? ", outside the output" : "", bf->got[i],
                    bf->host[out][i]);
            if (at >= 0 && (size_t)at < n) {
                uint64_t v[4] = {0};
                size_t e0 = (size_t)at / es * es;
                memcpy(&v[0], bf->in[0] + e0, es);
                memcpy(&v[1], bf->in[1] + e0, es);
                memcpy(&v[2], bf->got + c->off[out] + e0, es);
                memcpy(&v[3], bf->host[out] + c->off[out] + e0, es);
                fprintf(stderr, "      a 0x%llx b 0x%llx: device 0x%llx, host 0x%llx\n",
                        (unsigned long long)v[0], (unsigned long long)v[1],
                        (unsigned long long)v[2], (unsigned long long)v[3]);
            }
            return 1;
        }
    }
    return 0;
}

static const size_t counts[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 127, 1000, 4099, 65541};

/* Offsets in bytes of a, b, d: aligned, equally misaligned by whole elements, unequally, and
 * (for elements wider than a byte) not aligned to the element size. */
static int layouts(size_t es, size_t off[][3])
{
    int n = 0;
    size_t set[][3] = {{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 2}, {2, 0, 1}};
    for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++, n++)
        for (int k = 0; k < 3; k++)
            off[n][k] = set[i][k] * es;
    if (es > 1) {
        off[n][0] = 1, off[n][1] = es + 1, off[n][2] = 0, n++;
        off[n][0] = 0, off[n][1] = 0, off[n][2] = 3, n++;
    }
    return n;
}

/* Each dtype runs to its first failure; the next dtype runs all the same. */
static int test_reduce(bufs_t *bf, int *cases)
{
    int fails = 0;
    for (int dt = 0; dt < chorusNumTypes; dt++) {
        size_t es = dtype_nbytes((chorusDataType_t)dt), off[8][3];
        int nl = layouts(es, off);
        for (int op = 0; op < chorusNumOps; op++) {
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                for (int l = 0; l < nl; l++) {
                    for (int alias = DISTINCT; alias <= INTO_B; alias++) {
                        case_t c = {
                            "reduce", (chorusDataType_t)dt, (chorusRedOp_t)op,
                            0,        counts[ci],           {off[l][0], off[l][1], off[l][2]},
                            alias};
                        if (run_case(bf, &c)) {
                            fails++;
                            goto next_dtype;
                        }
                        (*cases)++;
                    }
                }
            }
            /* Past a million elements: many packs per thread, aligned and in place. */
            case_t big = {
                "reduce", (chorusDataType_t)dt, (chorusRedOp_t)op, 0, MAX_COUNT, {0, 0, 0},
                DISTINCT};
            case_t big_in = {
                "reduce", (chorusDataType_t)dt, (chorusRedOp_t)op, 0, MAX_COUNT, {es, 0, es},
                INTO_A};
            if (run_case(bf, &big) || run_case(bf, &big_in)) {
                fails++;
                goto next_dtype;
            }
            *cases += 2;
        }
        printf("reduce %-8s: every op, %d layouts x 3 aliasings x %zu counts: identical\n",
               dtype_name((chorusDataType_t)dt), nl, sizeof(counts) / sizeof(counts[0]) + 1);
    next_dtype:;
    }
    return fails;
}

static int test_divide(bufs_t *bf, int *cases)
{
    int fails = 0;
    static const uint64_t divisors[] = {0, 1, 2, 3, 7, 8, 1000003, 1ull << 63, UINT64_MAX};
    for (int dt = 0; dt < chorusNumTypes; dt++) {
        size_t es = dtype_nbytes((chorusDataType_t)dt), off[8][3];
        int nl = layouts(es, off);
        for (size_t di = 0; di < sizeof(divisors) / sizeof(divisors[0]); di++) {
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci += 2) {
                for (int l = 0; l < nl; l++) {
                    for (int alias = DISTINCT; alias <= INTO_A; alias++) {
                        case_t c = {"divide",   (chorusDataType_t)dt,
                                    chorusAvg,  divisors[di],
                                    counts[ci], {off[l][0], off[l][0], off[l][2]},
                                    alias};
                        if (run_case(bf, &c)) {
                            fails++;
                            goto next_dtype;
                        }
                        (*cases)++;
                    }
                }
            }
        }
        printf("divide %-8s: %zu divisors (0, 2^63 and 2^64-1 among them): identical\n",
               dtype_name((chorusDataType_t)dt), sizeof(divisors) / sizeof(divisors[0]));
    next_dtype:;
    }
    return fails;
}

/* copy: device to device at byte offsets, and host to device and back through cudaMemcpyDefault. */
static int test_copy(bufs_t *bf)
{
    static const size_t sizes[] = {0, 1, 15, 16, 17, 4097, (1u << 20) + 7};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        for (size_t o = 0; o < 4; o++) {
            size_t n = sizes[si];
            memset(bf->host[D], 0x5a, n + SLACK);
            fill(bf->host[A], n + SLACK, chorusUint8, 0);
            if (check_cuda(cudaMemcpy(bf->dev[A], bf->host[A], n + SLACK, cudaMemcpyHostToDevice),
                           "copy in") ||
                check_cuda(cudaMemcpy(bf->dev[D], bf->host[D], n + SLACK, cudaMemcpyHostToDevice),
                           "copy in") ||
                check_cuda(
                    cuda_memops_copy(bf->dev[D] + GUARD + o, bf->dev[A] + 3 * o, n, bf->stream),
                    "copy") ||
                check_cuda(cudaStreamSynchronize(bf->stream), "copy run") ||
                check_cuda(cudaMemcpy(bf->got, bf->dev[D], n + SLACK, cudaMemcpyDeviceToHost),
                           "copy out"))
                return 1;
            memcpy(bf->host[D] + GUARD + o, bf->host[A] + 3 * o, n);
            if (memcmp(bf->got, bf->host[D], n + SLACK) != 0) {
                fprintf(stderr, "FAIL: copy of %zu bytes at offset %zu differs\n", n, o);
                return 1;
            }
            /* Host memory in, device out: the same call, the other direction of the bus. */
            memset(bf->got, 0, n + SLACK);
            if (check_cuda(cuda_memops_copy(bf->dev[B], bf->host[A] + o, n, bf->stream),
                           "copy from host") ||
                check_cuda(cuda_memops_copy(bf->got, bf->dev[B], n, bf->stream), "copy to host") ||
                check_cuda(cudaStreamSynchronize(bf->stream), "copy run"))
                return 1;
            if (memcmp(bf->got, bf->host[A] + o, n) != 0) {
                fprintf(stderr, "FAIL: host->device->host copy of %zu bytes differs\n", n);
                return 1;
            }
        }
    }
    printf("copy: device, host->device and device->host, %zu sizes x 4 offsets: identical\n",
           sizeof(sizes) / sizeof(sizes[0]));
    return 0;
}

int main(void)
{
    const char *why;
    if (cuda_devices(&why) == 0) {
        printf("SKIP: no CUDA device here (%s)\n", why);
        return 77;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("device 0: %s, %d multiprocessors\n", prop.name, prop.multiProcessorCount);

    bufs_t bf = {.nbytes = (size_t)MAX_COUNT * 8 + 2 * SLACK};
    int fails = 0, cases = 0;
    for (int i = 0; i < 3; i++) {
        bf.host[i] = malloc(bf.nbytes);
        if (bf.host[i] == NULL || check_cuda(cudaMalloc((void **)&bf.dev[i], bf.nbytes), "alloc"))
            return 1;
    }
    bf.got = malloc(bf.nbytes);
    bf.in[0] = malloc(bf.nbytes);
    bf.in[1] = malloc(bf.nbytes);
    if (bf.got == NULL || bf.in[0] == NULL || bf.in[1] == NULL ||
        check_cuda(cudaStreamCreate(&bf.stream), "stream"))
        return 1;

    fails += test_reduce(&bf, &cases);
    fails += test_divide(&bf, &cases);
    fails += test_copy(&bf);

    /* An invalid dtype or op is refused and writes nothing. */
    if (cuda_memops_reduce(bf.dev[D], bf.dev[A], bf.dev[B], 4, chorusNumTypes, chorusSum,
                           bf.stream) != cudaErrorInvalidValue ||
        cuda_memops_reduce(bf.dev[D], bf.dev[A], bf.dev[B], 4, chorusFloat32, chorusNumOps,
                           bf.stream) != cudaErrorInvalidValue) {
        fprintf(stderr, "FAIL: an invalid dtype or op was not refused\n");
        fails++;
    }

    cudaStreamDestroy(bf.stream);
    for (int i = 0; i < 3; i++) {
        cudaFree(bf.dev[i]);
        free(bf.host[i]);
    }
    free(bf.got);
    free(bf.in[0]);
    free(bf.in[1]);
    if (fails == 0)
        printf("PASS: %d kernel cases identical to the host backend\n", cases);
    return fails == 0 ? 0 : 1;
}
