/*
 * test_device_ptr.c: a build without CUDA, or a CUDA build whose loaded driver lacks what staging
 * needs (this fake one has only cuPointerGetAttribute), refuses a CUDA device pointer with
 * chorusInvalidArgument and a message naming the buffer, changes nothing, and stays usable; a
 * chorusCommInitAll device list is refused there too.
 *
 * The driver is played by tests/support/fake_libcuda.c (soname libcuda.so.1), loaded first the
 * way a CUDA application would have loaded the real one; Chorus never loads it itself. With
 * "late", it is loaded only after the communicator's host calls, and the device pointer comes at
 * once: an application that starts CUDA after its first collectives (the driver is looked for
 * on every call; a look every 100 ms until 2026-12-07 read such a pointer as host memory).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "chorus.h"

#define FAKE_DEVICE_PTR ((void *)(uintptr_t)0x7e0000001000ull)

int main(int argc, char **argv)
{
    if (argc < 2 || (argc > 2 && strcmp(argv[2], "late") != 0)) {
        fprintf(stderr, "usage: %s path/to/fake/libcuda.so.1 [late]\n", argv[0]);
        return 2;
    }
    int late = argc > 2;
    if (!late && dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) == NULL) {
        fprintf(stderr, "FAIL: cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    chorusComm_t comm;
    if (chorusCommInitAll(&comm, 1, NULL) != chorusSuccess) {
        fprintf(stderr, "FAIL: init: %s\n", chorusGetLastError(NULL));
        return 1;
    }
    int fails = 0;
    float host[4] = {1, 2, 3, 4}, out[4] = {0};
    if (late) { /* host calls first, the driver's load right after */
        for (int i = 0; i < 3; i++)
            if (chorusAllReduce(host, out, 4, chorusFloat32, chorusSum, comm, NULL) !=
                chorusSuccess) {
                fprintf(stderr, "FAIL: host call before the load: %s\n", chorusGetLastError(comm));
                return 1;
            }
        memset(out, 0, sizeof(out));
        if (dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) == NULL) {
            fprintf(stderr, "FAIL: cannot load %s: %s\n", argv[1], dlerror());
            return 1;
        }
    }
    chorusResult_t res =
        chorusAllReduce(FAKE_DEVICE_PTR, out, 4, chorusFloat32, chorusSum, comm, NULL);
    const char *msg = chorusGetLastError(comm);
    if (res != chorusInvalidArgument || strstr(msg, "sendbuff") == NULL ||
        strstr(msg, "CUDA") == NULL) {
        fprintf(stderr, "FAIL: device sendbuff gave %d, \"%s\"\n", res, msg);
        fails++;
    }
    res = chorusAllReduce(host, FAKE_DEVICE_PTR, 4, chorusFloat32, chorusSum, comm, NULL);
    msg = chorusGetLastError(comm);
    if (res != chorusInvalidArgument || strstr(msg, "recvbuff") == NULL) {
        fprintf(stderr, "FAIL: device recvbuff gave %d, \"%s\"\n", res, msg);
        fails++;
    }
    for (int i = 0; i < 4; i++)
        if (out[i] != 0 || host[i] != i + 1) {
            fprintf(stderr, "FAIL: a refused call changed a buffer\n");
            fails++;
            break;
        }
    res = chorusAllReduce(host, out, 4, chorusFloat32, chorusSum, comm, NULL);
    if (res != chorusSuccess || memcmp(host, out, sizeof(out)) != 0) {
        fprintf(stderr, "FAIL: host buffers after the refusals: %d\n", res);
        fails++;
    }
    chorusCommDestroy(comm);
    /* A device list where CUDA cannot be used (no CUDA build, or this driver: no device count). */
    chorusComm_t listed = NULL;
    int devlist[1] = {0};
    res = chorusCommInitAll(&listed, 1, devlist);
    msg = chorusGetLastError(NULL);
    if (res != chorusInvalidArgument || strstr(msg, "devlist") == NULL) {
        fprintf(stderr, "FAIL: chorusCommInitAll with a devlist gave %d, \"%s\"\n", res, msg);
        fails++;
        if (res == chorusSuccess)
            chorusCommDestroy(listed);
    }
    printf("%s: device pointers refused with a clear error; host buffers still work\n",
           fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
