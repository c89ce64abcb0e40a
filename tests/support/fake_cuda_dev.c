/*
 * fake_cuda_dev.c: the GPUs of the stand-in CUDA driver (fake_cuda_stage.c says what the whole
 * driver does): the bus ids this process sees, in device-number order (as CUDA_VISIBLE_DEVICES
 * leaves them), its current one and whether two distinct GPUs have peer access, set by the test
 * (fake_cuda_gpus; one GPU, 0000:01:00.0, by default); the device facts and error strings.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "fake_cuda_int.h"

/* Test side: the GPUs. */
#pragma GCC visibility push(default)
void fake_cuda_gpus(const char *const *busids, int n, int current, int peer_access);
/* The driver's entry points (their CUDA names and the ABI src/cuda_drv.c expects). */
int cuGetErrorString(int err, const char **str);
int cuDeviceGetCount(int *count);
int cuDeviceGetAttribute(int *value, int attribute, int device);
int cuDeviceGetPCIBusId(char *busid, int len, int device);
int cuDeviceGetByPCIBusId(int *device, const char *busid);
int cuDeviceCanAccessPeer(int *can, int device, int peer_device);
#pragma GCC visibility pop

#define MAX_GPUS 8
static char gpus[MAX_GPUS][BUSID_BYTES] = {"0000:01:00.0"};
static int ngpus = 1, cur_gpu, peer_ok = 1;

int gpu_current(void)
{
    return cur_gpu;
}

/* ---- Device facts and errors ---- */

int cuGetErrorString(int err, const char **str)
{
    *str = err == CUDA_ERROR_NOT_READY ? "fake: not ready" : "fake: error";
    return 0;
}

int cuDeviceGetCount(int *count)
{
    *count = ngpus;
    return 0;
}

int cuDeviceGetAttribute(int *value, int attribute, int device)
{
    if (device < 0 || device >= ngpus)
        return CUDA_ERROR_INVALID_DEVICE;
    *value = attribute == 16 ? 4 : 0; /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 4 */
    return 0;
}

/* ---- GPUs: which this process sees, and peer access between them ---- */

void fake_cuda_gpus(const char *const *busids, int n, int current, int peer_access)
{
    ngpus = n < 1 ? 1 : n > MAX_GPUS ? MAX_GPUS : n;
    for (int i = 0; i < ngpus; i++)
        snprintf(gpus[i], BUSID_BYTES, "%s", busids[i]);
    cur_gpu = current >= 0 && current < ngpus ? current : 0;
    peer_ok = peer_access;
}

const char *gpu_busid(void)
{
    return gpus[cur_gpu];
}

int cuDeviceGetPCIBusId(char *busid, int len, int device)
{
    if (device < 0 || device >= ngpus)
        return CUDA_ERROR_INVALID_DEVICE;
    if (len < 13)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(busid, (size_t)len, "%s", gpus[device]);
    return 0;
}

int cuDeviceGetByPCIBusId(int *device, const char *busid)
{
    for (int i = 0; i < ngpus; i++)
        if (strcasecmp(gpus[i], busid) == 0) {
            *device = i;
            return 0;
        }
    return CUDA_ERROR_INVALID_DEVICE;
}

int cuDeviceCanAccessPeer(int *can, int device, int peer_device)
{
    if (device < 0 || device >= ngpus || peer_device < 0 || peer_device >= ngpus)
        return CUDA_ERROR_INVALID_DEVICE;
    *can = device != peer_device && peer_ok;
    return 0;
}

int gpu_reach(const char *busid)
{
    if (strcmp(busid, gpus[cur_gpu]) == 0)
        return 0;
    /* A GPU this process does not see: peer access as between the ones it sees. */
    return peer_ok ? 0 : CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
}
