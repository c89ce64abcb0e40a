/*
 * cuda_memops_perf.c: the CUDA memops kernels' speed against the device's own copy bandwidth.
 *
 * For each size (bytes per buffer) it times a device-to-device cudaMemcpyAsync (the copy engine's
 * or driver's best) and cuda_memops_reduce (sum; float32, bfloat16, float16, float64) on the same
 * buffers, back to back in one run, with CUDA events over -n calls after -w warm-up calls. Rates
 * count memory traffic: a copy moves 2 x size (read + write), a reduce 3 x size (two reads, one
 * write); "vs copy" is the reduce's traffic rate over the copy's. Needs a CUDA device (exits 77
 * without one).
 *
 *   cuda_memops_perf [-b minbytes] [-e maxbytes] [-f factor] [-n iters] [-w warmup]
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_memops.h"

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K':
        v *= 1024;
        break;
    case 'M':
        v *= 1024 * 1024;
        break;
    case 'G':
        v *= 1024.0 * 1024 * 1024;
        break;
    default:
        break;
    }
    return (size_t)v;
}

static int ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "cuda_memops_perf: %s: %s\n", what, cudaGetErrorString(e));
        return 0;
    }
    return 1;
}

/* Mean microseconds per call of one operation (0: copy, else a reduce of dtype). */
static double time_op(int reduce, chorusDataType_t dtype, size_t es, void *d, void *a, void *b,
                      size_t nbytes, int iters, int warmup, cudaStream_t s, cudaEvent_t ev[2])
{
    for (int i = -warmup; i < iters; i++) {
        if (i == 0)
            cudaEventRecord(ev[0], s);
        int err = reduce ? cuda_memops_reduce(d, a, b, nbytes / es, dtype, chorusSum, s)
                         : cuda_memops_copy(d, a, nbytes, s);
        if (err != 0) {
            fprintf(stderr, "cuda_memops_perf: %s\n", cuda_memops_error_string(err));
            return -1;
        }
    }
    cudaEventRecord(ev[1], s);
    float ms = 0;
    if (!ok(cudaEventSynchronize(ev[1]), "run") ||
        !ok(cudaEventElapsedTime(&ms, ev[0], ev[1]), "events"))
        return -1;
    return ms * 1000.0 / iters;
}

int main(int argc, char **argv)
{
    size_t minb = 1 << 20, maxb = (size_t)1 << 30;
    double factor = 4;
    int iters = 20, warmup = 3, c;
    while ((c = getopt(argc, argv, "b:e:f:n:w:")) != -1) {
        switch (c) {
        case 'b':
            minb = parse_size(optarg);
            break;
        case 'e':
            maxb = parse_size(optarg);
            break;
        case 'f':
            factor = atof(optarg);
            break;
        case 'n':
            iters = atoi(optarg);
            break;
        case 'w':
            warmup = atoi(optarg);
            break;
        default:
            fprintf(stderr, "usage: %s [-b min] [-e max] [-f factor] [-n iters] [-w warmup]\n",
                    argv[0]);
            return 2;
        }
    }
    if (minb < 16 || maxb < minb || factor <= 1 || iters < 1 || warmup < 0) {
        fprintf(stderr, "cuda_memops_perf: need 16 <= -b <= -e, -f > 1, -n >= 1, -w >= 0\n");
        return 2;
    }
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device here (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0");
        return 77;
    }
    struct cudaDeviceProp prop;
    if (!ok(cudaGetDeviceProperties(&prop, 0), "properties"))
        return 1;
    printf("# device 0: %s, %d multiprocessors, %.1f GiB\n", prop.name, prop.multiProcessorCount,
           prop.totalGlobalMem / 1073741824.0);
    printf("# rates are memory traffic (copy: 2 x bytes, reduce: 3 x bytes) in GB/s; sum\n");

    void *a, *b, *d;
    cudaStream_t s;
    cudaEvent_t ev[2];
    if (!ok(cudaMalloc(&a, maxb), "alloc") || !ok(cudaMalloc(&b, maxb), "alloc") ||
        !ok(cudaMalloc(&d, maxb), "alloc") || !ok(cudaStreamCreate(&s), "stream") ||
        !ok(cudaEventCreate(&ev[0]), "event") || !ok(cudaEventCreate(&ev[1]), "event"))
        return 1;
    /* Small finite values everywhere (bytes 0x01: no NaN, no denormal slow path in any dtype). */
    if (!ok(cudaMemset(a, 1, maxb), "memset") || !ok(cudaMemset(b, 1, maxb), "memset"))
        return 1;

    static const struct {
        chorusDataType_t dtype;
        size_t es;
        const char *name;
    } types[] = {{chorusFloat32, 4, "float32"},
                 {chorusBfloat16, 2, "bfloat16"},
                 {chorusFloat16, 2, "float16"},
                 {chorusFloat64, 8, "float64"}};
    printf("%12s %10s %9s", "bytes", "copy_us", "copy_GBs");
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
        printf(" %9s_us %6s_GBs %5s", types[t].name, "", "vs_cp");
    printf("\n");
    double best_ratio = 0, worst_ratio = 1e9;
    for (size_t nbytes = minb; nbytes <= maxb; nbytes = (size_t)(nbytes * factor)) {
        nbytes &= ~(size_t)15;
        double cu = time_op(0, chorusUint8, 1, d, a, b, nbytes, iters, warmup, s, ev);
        if (cu < 0)
            return 1;
        double cbw = 2.0 * nbytes / cu / 1e3;
        printf("%12zu %10.2f %9.1f", nbytes, cu, cbw);
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            double ru =
                time_op(1, types[t].dtype, types[t].es, d, a, b, nbytes, iters, warmup, s, ev);
            if (ru < 0)
                return 1;
            double rbw = 3.0 * nbytes / ru / 1e3, ratio = rbw / cbw;
            printf(" %12.2f %10.1f %5.2f", ru, rbw, ratio);
            if (nbytes >= (64u << 20)) {
                best_ratio = ratio > best_ratio ? ratio : best_ratio;
                worst_ratio = ratio < worst_ratio ? ratio : worst_ratio;
            }
        }
        printf("\n");
        fflush(stdout);
    }
    if (best_ratio > 0)
        printf("# from 64 MiB: reduce traffic rate %.2f-%.2f x the copy's\n", worst_ratio,
               best_ratio);
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    return 0;
}
