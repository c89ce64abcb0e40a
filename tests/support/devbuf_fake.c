/*
 * devbuf_fake.c: devbuf.h on the fake driver (fake_cuda_stage.c and its files), loaded from the
 * path the test is given: buffers that fault on direct access, copies queued on the test's
 * declared stream in a pushed context, and a wait that polls the stream idle.
 */
#include <dlfcn.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>

#include "devbuf.h"

#define CTX ((void *)(uintptr_t)0xc0de)

static void *stream = (void *)(uintptr_t)0x51; /* any handle: the fake checks copies name it */
static void *(*fake_alloc)(size_t nbytes);
static int (*fake_faults)(void);
static int (*cu_copy)(uintptr_t dst, uintptr_t src, size_t nbytes, void *stream);
static int (*cu_push)(void *ctx);
static int (*cu_pop)(void **ctx);
static int (*cu_query)(void *stream);

int devbuf_setup(int rank, const char *driver, const char **why)
{
    (void)rank;
    void *lib = driver != NULL ? dlopen(driver, RTLD_NOW | RTLD_GLOBAL) : NULL;
    void (*expect)(void *) = lib ? (void (*)(void *))dlsym(lib, "fake_cuda_expect_stream") : NULL;
    int (*set_current)(void *) = lib ? (int (*)(void *))dlsym(lib, "cuCtxSetCurrent") : NULL;
    fake_alloc = lib ? (void *(*)(size_t))dlsym(lib, "fake_cuda_alloc") : NULL;
    fake_faults = lib ? (int (*)(void))dlsym(lib, "fake_cuda_faults") : NULL;
    cu_copy =
        lib ? (int (*)(uintptr_t, uintptr_t, size_t, void *))dlsym(lib, "cuMemcpyAsync") : NULL;
    cu_push = lib ? (int (*)(void *))dlsym(lib, "cuCtxPushCurrent_v2") : NULL;
    cu_pop = lib ? (int (*)(void **))dlsym(lib, "cuCtxPopCurrent_v2") : NULL;
    cu_query = lib ? (int (*)(void *))dlsym(lib, "cuStreamQuery") : NULL;
    if (!expect || !set_current || !fake_alloc || !fake_faults || !cu_copy || !cu_push || !cu_pop ||
        !cu_query) {
        static char msg[512];
        snprintf(msg, sizeof(msg), "cannot use the fake driver %s: %s",
                 driver != NULL ? driver : "(none given: --driver PATH)",
                 lib              ? "a symbol is missing"
                 : driver != NULL ? dlerror()
                                  : "no path");
        *why = msg;
        return 0;
    }
    expect(stream);
    /* As cudaSetDevice leaves it: the rank's device current, so init records it. */
    if (set_current(CTX) != 0) {
        *why = "cuCtxSetCurrent failed";
        return 0;
    }
    return 1;
}

void *devbuf_stream(void)
{
    return stream;
}

void *devbuf_alloc(size_t nbytes)
{
    return fake_alloc(nbytes);
}

void devbuf_free(void *p)
{
    (void)p; /* the fake's test buffers live as long as the process */
}

static int copy(void *dst, const void *src, size_t nbytes, const char *what)
{
    void *ctx;
    if (cu_push(CTX) != 0 || cu_copy((uintptr_t)dst, (uintptr_t)src, nbytes, stream) != 0 ||
        cu_pop(&ctx) != 0) {
        fprintf(stderr, "devbuf: %s through the fake driver failed\n", what);
        return 0;
    }
    return 1;
}

int devbuf_put(void *dev, const void *host, size_t nbytes)
{
    return copy(dev, host, nbytes, "copy in");
}

int devbuf_get(void *host, const void *dev, size_t nbytes)
{
    if (!copy(host, dev, nbytes, "copy out"))
        return 0;
    while (cu_query(stream) != 0)
        sched_yield();
    return 1;
}

int devbuf_faults(void)
{
    return fake_faults();
}
