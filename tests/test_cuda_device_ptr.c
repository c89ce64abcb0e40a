/*
 * test_cuda_device_ptr.c: memory-type detection with the real CUDA driver, on one rank. A
 * cudaMalloc'd buffer is taken as device memory (a call on the legacy stream, 1 rank: GPU to GPU
 * unless CHORUS_CUDA_P2P=0 stages it; exact either way); a host buffer and a device buffer in one
 * call are chorusInvalidArgument naming the mix; host memory the driver knows (cudaMallocHost
 * pinned, cudaMallocManaged) and plain malloc'd memory in a process where CUDA is loaded work as
 * host buffers, with exact results. chorusCommCuDevice gives the device current at init, or
 * chorusCommInitAll's device list entry; a list naming a device that does not exist is refused.
 * Last, a call on a created stream read back by a synchronous cudaMemcpy. Without a CUDA device it
 * prints SKIP and exits 77.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "support/cuda_skip.h"

static int expect_mix_refused(chorusComm_t comm, const void *send, void *recv)
{
    chorusResult_t res = chorusAllReduce(send, recv, 4, chorusFloat32, chorusSum, comm, NULL);
    const char *msg = chorusGetLastError(comm);
    if (res != chorusInvalidArgument || strstr(msg, "mix") == NULL) {
        fprintf(stderr, "FAIL: host and device buffers in one call gave %d, \"%s\"\n", res, msg);
        return 1;
    }
    printf("host and device buffers in one call refused: %s\n", msg);
    return 0;
}

/* Device buffers: 1-rank all-reduce out of place and in place, results read back. */
static int expect_device_works(chorusComm_t comm, float *dev)
{
    float in[8], out[8];
    for (int i = 0; i < 8; i++)
        in[i] = (float)(i + 1);
    if (cudaMemcpy(dev, in, sizeof(in), cudaMemcpyHostToDevice) != cudaSuccess ||
        chorusAllReduce(dev, dev + 8, 8, chorusFloat32, chorusSum, comm, NULL) != chorusSuccess ||
        chorusAllReduce(dev + 8, dev + 8, 8, chorusFloat32, chorusMax, comm, NULL) !=
            chorusSuccess ||
        cudaMemcpy(out, dev + 8, sizeof(out), cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "FAIL: device buffers: %s\n", chorusGetLastError(comm));
        return 1;
    }
    if (memcmp(in, out, sizeof(in)) != 0) {
        fprintf(stderr, "FAIL: device buffers: results differ from the input\n");
        return 1;
    }
    printf("cudaMalloc memory: taken as device memory, exact\n");
    return 0;
}

/* A call on a created (blocking) stream whose result is read by a synchronous cudaMemcpy into
 * pageable memory, with no synchronization first: a training loop reading its loss. That copy
 * runs on the legacy stream, which waits for the created one. The same read after calls on the
 * legacy stream itself hung on the H200 with the device path's asynchronous way (the calls there
 * now wait instead); this is its neighbour, last in the test so that a hang is seen as this. */
static int expect_created_stream_read(chorusComm_t comm, float *dev)
{
    float in[8], out[8];
    cudaStream_t s;
    for (int i = 0; i < 8; i++)
        in[i] = (float)(3 * i + 1);
    printf("a call on a created stream, read by a synchronous cudaMemcpy: ...\n");
    fflush(stdout);
    if (cudaStreamCreate(&s) != cudaSuccess ||
        cudaMemcpy(dev, in, sizeof(in), cudaMemcpyHostToDevice) != cudaSuccess)
        return fprintf(stderr, "FAIL: created stream: setup\n"), 1;
    chorusResult_t r = chorusAllReduce(dev, dev + 8, 8, chorusFloat32, chorusSum, comm, s);
    cudaError_t e = cudaMemcpy(out, dev + 8, sizeof(out), cudaMemcpyDeviceToHost);
    cudaStreamDestroy(s);
    if (r != chorusSuccess || e != cudaSuccess || memcmp(in, out, sizeof(in)) != 0) {
        fprintf(stderr, "FAIL: created stream: call %d (%s), copy %s, results %s\n", r,
                chorusGetLastError(comm), cudaGetErrorString(e),
                memcmp(in, out, sizeof(in)) ? "differ" : "exact");
        return 1;
    }
    printf("a call on a created stream, read by a synchronous cudaMemcpy: exact\n");
    return 0;
}

/* A host buffer the driver may know: 1-rank all-reduce out of place, then in place. */
static int expect_works(chorusComm_t comm, float *buf, const char *what)
{
    for (int i = 0; i < 8; i++)
        buf[i] = (float)(i + 1), buf[8 + i] = -1;
    if (chorusAllReduce(buf, buf + 8, 8, chorusFloat32, chorusSum, comm, NULL) != chorusSuccess ||
        chorusAllReduce(buf, buf, 8, chorusFloat32, chorusMax, comm, NULL) != chorusSuccess) {
        fprintf(stderr, "FAIL: %s: %s\n", what, chorusGetLastError(comm));
        return 1;
    }
    for (int i = 0; i < 8; i++) {
        if (buf[8 + i] != (float)(i + 1) || buf[i] != (float)(i + 1)) {
            fprintf(stderr, "FAIL: %s: element %d is %g/%g, want %d\n", what, i, buf[i], buf[8 + i],
                    i + 1);
            return 1;
        }
    }
    printf("%s: used as host memory, exact\n", what);
    return 0;
}

int main(void)
{
    const char *why;
    int ndev = cuda_devices(&why);
    if (ndev == 0) {
        printf("SKIP: no CUDA device here (%s)\n", why);
        return 77;
    }
    float *dev = NULL, *pinned = NULL, *managed = NULL, *plain = malloc(16 * sizeof(float));
    if (cudaMalloc((void **)&dev, 16 * sizeof(float)) != cudaSuccess ||
        cudaMallocHost((void **)&pinned, 16 * sizeof(float)) != cudaSuccess ||
        cudaMallocManaged((void **)&managed, 16 * sizeof(float), cudaMemAttachGlobal) !=
            cudaSuccess ||
        plain == NULL) {
        fprintf(stderr, "FAIL: allocations\n");
        return 1;
    }
    chorusComm_t comm;
    if (chorusCommInitAll(&comm, 1, NULL) != chorusSuccess) {
        fprintf(stderr, "FAIL: init: %s\n", chorusGetLastError(NULL));
        return 1;
    }
    int fails = 0, cudev = -2;
    /* The rank's device: the one current at init (0 here), or the device list's. */
    if (chorusCommCuDevice(comm, &cudev) != chorusSuccess || cudev != 0) {
        fprintf(stderr, "FAIL: chorusCommCuDevice gave %d, want 0 (current at init)\n", cudev);
        fails++;
    }
    int list[2] = {0, 0}, bad[1];
    chorusComm_t pair[2];
    bad[0] = ndev;
    if (chorusCommInitAll(pair, 2, list) != chorusSuccess) {
        fprintf(stderr, "FAIL: chorusCommInitAll(2, {0, 0}): %s\n", chorusGetLastError(NULL));
        fails++;
    } else {
        int d0 = -2, d1 = -2;
        chorusCommCuDevice(pair[0], &d0);
        chorusCommCuDevice(pair[1], &d1);
        if (d0 != 0 || d1 != 0) {
            fprintf(stderr, "FAIL: devlist {0, 0} gave devices %d, %d\n", d0, d1);
            fails++;
        }
        chorusCommDestroy(pair[0]);
        chorusCommDestroy(pair[1]);
    }
    if (chorusCommInitAll(pair, 1, bad) != chorusInvalidArgument ||
        strstr(chorusGetLastError(NULL), "devlist[0]") == NULL) {
        fprintf(stderr, "FAIL: devlist {%d} (no such device): \"%s\"\n", ndev,
                chorusGetLastError(NULL));
        fails++;
    }
    printf("chorusCommCuDevice: %d; devlist {0, 0} taken, {%d} refused\n", cudev, ndev);
    fails += expect_mix_refused(comm, plain, dev);
    fails += expect_device_works(comm, dev);
    fails += expect_works(comm, pinned, "cudaMallocHost memory");
    fails += expect_works(comm, managed, "cudaMallocManaged memory");
    fails += expect_works(comm, plain, "malloc'd memory");
    fails += expect_created_stream_read(comm, dev);
    if (chorusCommDestroy(comm) != chorusSuccess) {
        fprintf(stderr, "FAIL: destroy\n");
        fails++;
    }
    cudaFree(dev);
    cudaFreeHost(pinned);
    cudaFree(managed);
    free(plain);
    if (fails == 0)
        printf("PASS: device buffers exact, mixing refused, driver-known host buffers used\n");
    return fails == 0 ? 0 : 1;
}
