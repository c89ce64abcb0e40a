/*
 * test_cuda_coll.c: every collective on CUDA device buffers, run by mpirun ranks sharing one GPU
 * (or each on its own), checked bit for bit against closed-form values: all-reduce (sum of
 * float32, bfloat16 and int32, max, avg; out of place and in place), broadcast, reduce,
 * all-gather (also in place), reduce-scatter, all-to-all, a send/recv ring in a group, and two
 * all-reduces in one group, over counts 1, 1000 and 2^20 + 3. Stream order: each input is written
 * on the caller's CUDA stream by a compute kernel queued behind one busy for 20 ms, so a call that
 * did not wait for the stream would read the stale pattern; each result is read by a compute
 * kernel queued on the same stream right after the call (support/cuda_order_kernels.cu; the fake
 * driver's runs use copies: it runs no kernel but its own). Also: device
 * and host buffers mixed in one call, and a host stream with device buffers, are
 * chorusInvalidArgument. Without a CUDA device every rank prints SKIP and exits 77.
 * Whichever way the environment asks: GPU to GPU over cuda_p2p (the default inside a machine),
 * staged through host memory (CHORUS_CUDA_P2P=0), returning at once or waiting
 * (CHORUS_CUDA_ASYNC).
 *
 * Built a second time as test_cuda_stage (TEST_FAKE_CUDA) against the fake driver of
 * tests/support/fake_cuda_stage.c (its path in argv[1]), so that every machine runs both paths:
 * the fake's device memory faults on any direct access, every copy must be on the caller's
 * stream or one the library created, in a context, kernels run as the host backend's arithmetic,
 * IPC handles open across processes, and a stream that never drains must end in chorusTimeout.
 * There the test also checks which path ran (kernel launches happen on the GPU-to-GPU path only).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "chorus_mpi.h"

static int rank, nranks;
static void *hbuf; /* host buffer for inputs and results (pinned with real CUDA) */

/* ---- Device memory: alloc, a write in stream order, a read that waits, a fill ---- */
#ifdef TEST_FAKE_CUDA
#include <dlfcn.h>

#include "support/devbuf.h"

static void *stream; /* the fake's declared one (devbuf_stream) */
static void (*fake_stuck)(int on);
static int (*cu_query)(void *stream);
static int (*fake_launches)(void);
static void (*fake_fail_launch)(int nth);

/* Load the fake driver (argv[1]); 0 devices and the reason if it cannot be. */
static int dev_setup(int argc, char **argv, const char **why)
{
    if (devbuf_setup(rank, argc > 1 ? argv[1] : NULL, why) == 0)
        return 0;
    stream = devbuf_stream();
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
    fake_stuck = lib ? (void (*)(int))dlsym(lib, "fake_cuda_stream_stuck") : NULL;
    cu_query = lib ? (int (*)(void *))dlsym(lib, "cuStreamQuery") : NULL;
    fake_launches = lib ? (int (*)(void))dlsym(lib, "fake_cuda_launches") : NULL;
    fake_fail_launch = lib ? (void (*)(int))dlsym(lib, "fake_cuda_fail_launch") : NULL;
    void (*gpus)(const char *const *, int, int, int) =
        lib ? (void (*)(const char *const *, int, int, int))dlsym(lib, "fake_cuda_gpus") : NULL;
    if (!fake_stuck || !cu_query || !fake_launches || !fake_fail_launch || !gpus) {
        *why = "the fake driver lacks a fake_cuda_* entry point (usage: test_cuda_stage "
               "path/to/fake/libcuda.so.1)";
        return 0;
    }
    /* The GPUs the ranks play (TEST_CUDA_GPUS): one shared by all (unset), one each ("separate"),
     * one each but all numbered 0 in their own process ("rotated": CUDA_VISIBLE_DEVICES=r,r+1,..
     * per rank, only bus ids tell them apart), one each without peer access ("nopeer"), or one
     * each that no other rank sees ("isolated": CUDA_VISIBLE_DEVICES=r per rank). Set before
     * init, which records them. */
    const char *mode = getenv("TEST_CUDA_GPUS");
    static char ids[8][16];
    const char *list[8];
    for (int i = 0; i < 8; i++) {
        snprintf(ids[i], sizeof(ids[i]), "0000:%02x:00.0", i + 1);
        list[i] = ids[i];
    }
    if (mode != NULL && (strcmp(mode, "separate") == 0 || strcmp(mode, "nopeer") == 0))
        gpus(list, nranks < 8 ? nranks : 8, rank % 8, strcmp(mode, "separate") == 0);
    else if (mode != NULL && strcmp(mode, "rotated") == 0) {
        int n = nranks < 8 ? nranks : 8;
        const char *rot[8];
        for (int i = 0; i < n; i++)
            rot[i] = ids[(rank + i) % n];
        gpus(rot, n, 0, 1);
    } else if (mode != NULL && strcmp(mode, "isolated") == 0)
        gpus(&list[rank % 8], 1, 0, 1);
    return 1;
}

static void *dev_alloc(size_t nbytes)
{
    return devbuf_alloc(nbytes);
}

static int dev_write(void *dst, const void *src, size_t nbytes)
{
    return devbuf_put(dst, src, nbytes);
}

/* Queued behind the call's own copies; the stream drained before the bytes are looked at. */
static int dev_read(void *dst, const void *src, size_t nbytes)
{
    return devbuf_get(dst, src, nbytes);
}

/* The stale pattern every input overwrites (NaN in float32, large in the others), landed before
 * hbuf is written again. */
static int dev_fill_stale(void *p, size_t nbytes)
{
    memset(hbuf, 0x7f, nbytes);
    return devbuf_put(p, hbuf, nbytes) && devbuf_get(hbuf, p, 0);
}

static void *host_alloc(size_t nbytes)
{
    return malloc(nbytes);
}
#else
#include <cuda_runtime_api.h>

#include "support/cuda_order_kernels.h"
#include "support/cuda_skip.h"

static cudaStream_t stream;

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "rank %d: FAIL: %s: %s\n", rank, what, cudaGetErrorString(e));
        return 0;
    }
    return 1;
}

/* One device per rank (rank % count); 0 devices and the reason without CUDA. */
static int dev_setup(int argc, char **argv, const char **why)
{
    (void)argc, (void)argv;
    int ndev = cuda_devices(why);
    if (ndev > 0 && (!cuda_ok(cudaSetDevice(rank % ndev), "set device") ||
                     !cuda_ok(cudaStreamCreate(&stream), "stream")))
        MPI_Abort(MPI_COMM_WORLD, 1);
    return ndev;
}

static void *dev_alloc(size_t nbytes)
{
    void *p = NULL;
    return cuda_ok(cudaMalloc(&p, nbytes), "alloc") ? p : NULL;
}

/* The stale pattern, landed at once; then, in order on the stream, a compute kernel busy for
 * 20 ms and one that writes the input from src (pinned host memory). A call that did not wait
 * for the kernels reads the stale pattern, whatever the buffer held before. */
static int dev_write(void *dst, const void *src, size_t nbytes)
{
    return cuda_ok(cudaMemsetAsync(dst, 0x7f, nbytes, stream), "stale fill") &&
           cuda_ok(cudaStreamSynchronize(stream), "stream") &&
           cuda_ok(order_kernel_write(dst, src, nbytes, 20, stream), "input kernels");
}

/* The stale pattern every input overwrites: NaN in float32, large in the others. */
static int dev_fill_stale(void *p, size_t nbytes)
{
    return cuda_ok(cudaMemsetAsync(p, 0x7f, nbytes, stream), "stale fill") &&
           cuda_ok(cudaStreamSynchronize(stream), "stream");
}

/* In order on the stream: a compute kernel that reads the result into dst (pinned). */
static int dev_read(void *dst, const void *src, size_t nbytes)
{
    return cuda_ok(order_kernel_read(dst, src, nbytes, stream), "result kernel") &&
           cuda_ok(cudaStreamSynchronize(stream), "stream");
}

static void *host_alloc(size_t nbytes)
{
    void *p = NULL;
    return cuda_ok(cudaMallocHost(&p, nbytes), "pinned alloc") ? p : NULL;
}
#endif

static size_t esize(chorusDataType_t t)
{
    return t == chorusBfloat16 ? 2 : 4;
}

/* Element i of rank r's input: a small integer, exact in every dtype used and in any sum order. */
static double input_value(int r, size_t i)
{
    return (double)((r + 1) * (int)(i % 7 + 1));
}

static void put(void *buf, size_t i, chorusDataType_t t, double v)
{
    if (t == chorusFloat32) {
        ((float *)buf)[i] = (float)v;
    } else if (t == chorusInt32) {
        ((int32_t *)buf)[i] = (int32_t)v;
    } else {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)buf)[i] = (uint16_t)(u >> 16); /* exact: small integers */
    }
}

static double get(const void *buf, size_t i, chorusDataType_t t)
{
    if (t == chorusFloat32)
        return ((const float *)buf)[i];
    if (t == chorusInt32)
        return ((const int32_t *)buf)[i];
    uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Write n elements (value(first + i)) into device memory dst, in order on the stream. */
static int write_input(void *dst, size_t n, chorusDataType_t t, int r, size_t first)
{
    for (size_t i = 0; i < n; i++)
        put(hbuf, i, t, input_value(r, first + i));
    return dev_write(dst, hbuf, n * esize(t));
}

/* Read n elements of src back (on the stream) and compare with want(i). */
typedef double (*want_fn)(size_t i, const void *ctx);

static int check_output(const char *what, const void *src, size_t n, chorusDataType_t t,
                        want_fn want, const void *ctx)
{
    if (!dev_read(hbuf, src, n * esize(t)))
        return 1;
    for (size_t i = 0; i < n; i++) {
        double w = want(i, ctx), g = get(hbuf, i, t);
        if (g != w) {
            fprintf(stderr, "rank %d: FAIL: %s, %zu elements: element %zu is %g, want %g\n", rank,
                    what, n, i, g, w);
            return 1;
        }
    }
    return 0;
}

typedef struct {
    size_t count;
    chorusRedOp_t op;
    int from; /* the rank whose data lands here (broadcast root, send/recv peer) */
} ctx_t;

static double sum_ranks(void)
{
    return nranks * (nranks + 1) / 2.0;
}

static double want_reduced(size_t i, const void *c)
{
    const ctx_t *x = c;
    double k = (double)(i % 7 + 1);
    switch (x->op) {
    case chorusMax:
        return nranks * k;
    case chorusAvg:
        return sum_ranks() * k / nranks;
    default:
        return sum_ranks() * k;
    }
}

static double want_from(size_t i, const void *c)
{
    return input_value(((const ctx_t *)c)->from, i);
}

/* all-gather: block r holds rank r's elements 0..count-1. */
static double want_gathered(size_t i, const void *c)
{
    size_t count = ((const ctx_t *)c)->count;
    return input_value((int)(i / count), i % count);
}

/* reduce-scatter: this rank's block, element j = global element rank * count + j, summed. */
static double want_scattered(size_t i, const void *c)
{
    size_t count = ((const ctx_t *)c)->count;
    return sum_ranks() * (double)((rank * count + i) % 7 + 1);
}

/* all-to-all: block r holds what rank r sent to this rank: its elements rank*count + j. */
static double want_alltoall(size_t i, const void *c)
{
    size_t count = ((const ctx_t *)c)->count;
    return input_value((int)(i / count), rank * count + i % count);
}

static int run_count(chorusComm_t comm, size_t count, char *d_send, char *d_recv)
{
    int fails = 0;
    char what[128];
    static const struct {
        chorusDataType_t t;
        chorusRedOp_t op;
        const char *name;
    } ar[] = {{chorusFloat32, chorusSum, "float32 sum"},
              {chorusBfloat16, chorusSum, "bfloat16 sum"},
              {chorusInt32, chorusSum, "int32 sum"},
              {chorusFloat32, chorusMax, "float32 max"},
              {chorusFloat32, chorusAvg, "float32 avg"}};
    for (size_t k = 0; k < sizeof(ar) / sizeof(ar[0]); k++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            ctx_t c = {count, ar[k].op, 0};
            char *out = inplace ? d_send : d_recv;
            snprintf(what, sizeof(what), "AllReduce %s%s", ar[k].name, inplace ? " in place" : "");
            if (!write_input(d_send, count, ar[k].t, rank, 0))
                return 1;
            chorusResult_t r = chorusAllReduce(d_send, out, count, ar[k].t, ar[k].op, comm,
                                               (chorusStream_t)stream);
            if (r != chorusSuccess) {
                fprintf(stderr, "rank %d: FAIL: %s: %s\n", rank, what, chorusGetLastError(comm));
                return 1;
            }
            fails += check_output(what, out, count, ar[k].t, want_reduced, &c);
        }
    }
    chorusDataType_t t = chorusFloat32;
    int root = 1 % nranks;
    ctx_t c = {count, chorusSum, root};
    /* Broadcast in place from root: the others' buffers hold the stale pattern before. */
    if (rank == root && !write_input(d_recv, count, t, rank, 0))
        return 1;
    if (chorusBroadcast(d_recv, d_recv, count, t, root, comm, (chorusStream_t)stream) !=
        chorusSuccess)
        return fprintf(stderr, "rank %d: FAIL: Broadcast: %s\n", rank, chorusGetLastError(comm)), 1;
    fails += check_output("Broadcast", d_recv, count, t, want_from, &c);

    int rroot = nranks - 1;
    if (!write_input(d_send, count, t, rank, 0))
        return 1;
    if (chorusReduce(d_send, d_recv, count, t, chorusSum, rroot, comm, (chorusStream_t)stream) !=
        chorusSuccess)
        return fprintf(stderr, "rank %d: FAIL: Reduce: %s\n", rank, chorusGetLastError(comm)), 1;
    if (rank == rroot)
        fails += check_output("Reduce", d_recv, count, t, want_reduced, &c);

    for (int inplace = 0; inplace < 2; inplace++) {
        char *in = inplace ? d_recv + (size_t)rank * count * 4 : d_send;
        if (!write_input(in, count, t, rank, 0))
            return 1;
        if (chorusAllGather(in, d_recv, count, t, comm, (chorusStream_t)stream) != chorusSuccess)
            return fprintf(stderr, "rank %d: FAIL: AllGather: %s\n", rank,
                           chorusGetLastError(comm)),
                   1;
        fails += check_output(inplace ? "AllGather in place" : "AllGather", d_recv, count * nranks,
                              t, want_gathered, &c);
    }

    if (!write_input(d_send, count * nranks, t, rank, 0))
        return 1;
    if (chorusReduceScatter(d_send, d_recv, count, t, chorusSum, comm, (chorusStream_t)stream) !=
        chorusSuccess)
        return fprintf(stderr, "rank %d: FAIL: ReduceScatter: %s\n", rank,
                       chorusGetLastError(comm)),
               1;
    fails += check_output("ReduceScatter", d_recv, count, t, want_scattered, &c);

    if (!write_input(d_send, count * nranks, t, rank, 0))
        return 1;
    if (chorusAlltoAll(d_send, d_recv, count, t, comm, (chorusStream_t)stream) != chorusSuccess)
        return fprintf(stderr, "rank %d: FAIL: AlltoAll: %s\n", rank, chorusGetLastError(comm)), 1;
    fails += check_output("AlltoAll", d_recv, count * nranks, t, want_alltoall, &c);

    /* A ring of send/recv in one group: receive from rank - 1. */
    ctx_t p = {count, chorusSum, (rank + nranks - 1) % nranks};
    if (!write_input(d_send, count, t, rank, 0))
        return 1;
    chorusGroupStart();
    chorusSend(d_send, count, t, (rank + 1) % nranks, comm, (chorusStream_t)stream);
    chorusRecv(d_recv, count, t, p.from, comm, (chorusStream_t)stream);
    if (chorusGroupEnd() != chorusSuccess)
        return fprintf(stderr, "rank %d: FAIL: send/recv: %s\n", rank, chorusGetLastError(comm)), 1;
    fails += check_output("Send/Recv ring", d_recv, count, t, want_from, &p);

    /* Two all-reduces in one group: one staging batch, two arena regions, in place and not. */
    ctx_t s = {count, chorusSum, 0};
    char *second = d_send + count * 4;
    if (!write_input(d_send, count, t, rank, 0) || !write_input(second, count, t, rank, 0))
        return 1;
    chorusGroupStart();
    chorusAllReduce(d_send, d_recv, count, t, chorusSum, comm, (chorusStream_t)stream);
    chorusAllReduce(second, second, count, t, chorusSum, comm, (chorusStream_t)stream);
    if (chorusGroupEnd() != chorusSuccess)
        return fprintf(stderr, "rank %d: FAIL: grouped AllReduce: %s\n", rank,
                       chorusGetLastError(comm)),
               1;
    fails += check_output("grouped AllReduce", d_recv, count, t, want_reduced, &s);
    fails += check_output("grouped AllReduce in place", second, count, t, want_reduced, &s);
    return fails;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The call returns while the stream is still busy with what came before it (CHORUS_CUDA_ASYNC,
 * the default): with the fake, the stream is stopped outright until the call has returned; with
 * a GPU, the input's kernel waits behind one busy for 20 ms. The result is still exact. */
static int check_returns_at_once(chorusComm_t comm, char *d_send, char *d_recv)
{
    size_t count = 1000;
    ctx_t c = {count, chorusSum, 0};
    const char *async = getenv("CHORUS_CUDA_ASYNC");
    if (async != NULL && strcmp(async, "0") == 0) {
        if (rank == 0)
            printf("CHORUS_CUDA_ASYNC=0: calls wait for their stream; not checked here\n");
        return 0;
    }
#ifdef TEST_FAKE_CUDA
    fake_stuck(1);
#endif
    if (!write_input(d_send, count, chorusFloat32, rank, 0))
        return 1;
    /* In a group with an empty call (count 0: an empty gradient bucket), which must not make
     * the group wait either. */
    double t0 = now_s();
    chorusGroupStart();
    chorusAllReduce(d_send, d_recv, count, chorusFloat32, chorusSum, comm, (chorusStream_t)stream);
    chorusAllReduce(d_send, d_recv, 0, chorusFloat32, chorusSum, comm, (chorusStream_t)stream);
    chorusResult_t r = chorusGroupEnd();
    double dt = now_s() - t0;
    /* The proof is not a time: the stream has not yet run the call's input copy when it returns
     * (the fake's is stopped; a GPU's waits behind the kernel busy for 20 ms). */
#ifdef TEST_FAKE_CUDA
    int busy = cu_query(stream) != 0;
    fake_stuck(0);
#else
    int busy = cudaStreamQuery(stream) == cudaErrorNotReady;
#endif
    int bad = r != chorusSuccess || !busy;
    if (bad)
        fprintf(
            stderr,
            "rank %d: FAIL: AllReduce (and an empty one) behind busy stream work: %d after %.1f "
            "ms, the stream "
            "%s: %s\n",
            rank, r, dt * 1e3, busy ? "still busy" : "already idle (the call waited for it)",
            chorusGetLastError(comm));
    else if (rank == 0)
        printf("a call behind busy stream work returned in %.2f ms, its stream still busy\n",
               dt * 1e3);
    return bad + check_output("AllReduce queued behind busy stream work", d_recv, count,
                              chorusFloat32, want_reduced, &c);
}

#ifdef TEST_FAKE_CUDA
/* Whether device buffers should run GPU to GPU here. CHORUS_CUDA_P2P unset or -1: unless ranks
 * share a GPU (by bus id, whatever the device numbers or which GPUs a process sees); 1: also
 * then; 0: never. Never where a GPU has no peer access to another. */
static int gpu_to_gpu_expected(void)
{
    const char *p2p = getenv("CHORUS_CUDA_P2P"), *gmode = getenv("TEST_CUDA_GPUS");
    int forced = p2p != NULL && strcmp(p2p, "1") == 0, off = p2p != NULL && strcmp(p2p, "0") == 0;
    int own = gmode != NULL && (strcmp(gmode, "separate") == 0 || strcmp(gmode, "rotated") == 0 ||
                                strcmp(gmode, "isolated") == 0);
    return gmode == NULL ? forced : own && !off;
}

/* A stream that never drains. The blocking way (CHORUS_CUDA_ASYNC=0): the call ends in
 * chorusTimeout at the deadline. The asynchronous way: the call returns at once, and the
 * communicator's async error becomes chorusTimeout at the deadline (the worker never saw the
 * inputs); once the stream moves again, destroy finds every slot released. 1-rank comms. */
static int check_stuck_stream(char *d_buf)
{
    int bad = 0;
    setenv("CHORUS_TIMEOUT_MS", "500", 1);
    for (int async = 0; async < 2; async++) {
        chorusComm_t one;
        setenv("CHORUS_CUDA_ASYNC", async ? "1" : "0", 1);
        if (chorusCommInitAll(&one, 1, NULL) != chorusSuccess) {
            fprintf(stderr, "rank %d: FAIL: 1-rank init: %s\n", rank, chorusGetLastError(NULL));
            return 1;
        }
        fake_stuck(1);
        double t0 = now_s();
        chorusResult_t r = chorusAllReduce(d_buf, d_buf, 16, chorusFloat32, chorusSum, one,
                                           (chorusStream_t)stream);
        double call = now_s() - t0, sec = call;
        chorusResult_t e = chorusSuccess;
        if (async) {
            while (e == chorusSuccess && now_s() - t0 < 5)
                chorusCommGetAsyncError(one, &e);
            sec = now_s() - t0;
        }
        fake_stuck(0);
        chorusResult_t got = async ? e : r;
        int b = got != chorusTimeout || strstr(chorusGetLastError(one), "CUDA stream") == NULL ||
                sec < 0.45 || sec > 5 || (async && r != chorusSuccess);
        if (b)
            fprintf(stderr,
                    "rank %d: FAIL: stuck stream (%s): call %d after %.1f ms, error %d after "
                    "%.2f s: \"%s\"\n",
                    rank, async ? "async" : "blocking", r, call * 1e3, got, sec,
                    chorusGetLastError(one));
        else if (rank == 0)
            printf("a stream that never drains (%s): chorusTimeout after %.2f s (deadline "
                   "0.5 s)%s\n",
                   async ? "async" : "blocking", sec,
                   async ? ", reported by chorusCommGetAsyncError; the call returned at once" : "");
        bad += b;
        if (chorusCommDestroy(one) != chorusSuccess) {
            fprintf(stderr, "rank %d: FAIL: destroy after the stuck stream: %s\n", rank,
                    chorusGetLastError(NULL));
            bad++;
        }
    }
    unsetenv("CHORUS_CUDA_ASYNC");
    return bad;
}

/* GPU to GPU, a kernel launch fails on rank 0 in the middle of an all-reduce: rank 0 reports
 * chorusUnhandledCudaError naming the launch, every other rank an error too (the communicator is
 * aborted, as a peer's FIFO may hold half-written data); nobody hangs, and the caller's stream
 * goes on. The last use of comm. */
static int check_launch_failure(chorusComm_t comm, char *d_send, char *d_recv)
{
    if (!gpu_to_gpu_expected())
        return 0;
    size_t count = 100000;
    if (rank == 0)
        fake_fail_launch(1); /* 2 ranks run one reduction kernel per call */
    chorusResult_t r = chorusAllReduce(d_send, d_recv, count, chorusFloat32, chorusSum, comm,
                                       (chorusStream_t)stream);
    double t0 = now_s();
    chorusResult_t e = r;
    while (e == chorusSuccess && now_s() - t0 < 20)
        chorusCommGetAsyncError(comm, &e);
    double sec = now_s() - t0;
    int stream_moves = 0;
    while (!stream_moves && now_s() - t0 < 25)
        stream_moves = cu_query(stream) == 0;
    const char *msg = chorusGetLastError(comm);
    int bad = rank == 0 ? e != chorusUnhandledCudaError || strstr(msg, "cuLaunchKernel") == NULL
                        : e == chorusSuccess;
    bad |= !stream_moves;
    if (bad)
        fprintf(stderr,
                "rank %d: FAIL: a failed kernel launch on rank 0: error %d after %.2f s, stream "
                "%s: \"%s\"\n",
                rank, e, sec, stream_moves ? "idle" : "stuck", msg);
    else
        printf("rank %d: a failed launch on rank 0: error %d after %.2f s (\"%.120s\")\n", rank, e,
               sec, msg);
    fake_fail_launch(0);
    return bad;
}
#endif

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *why = "";
    int ndev = dev_setup(argc, argv, &why);
#ifdef TEST_FAKE_CUDA
    if (ndev == 0) { /* the fake is part of the build: not having it is a failure, not a SKIP */
        fprintf(stderr, "rank %d: FAIL: %s\n", rank, why);
        MPI_Finalize();
        return 1;
    }
#endif
    if (ndev == 0) {
        if (rank == 0)
            printf("SKIP: no CUDA device here (%s)\n", why);
        MPI_Finalize();
        return 77;
    }
    int fails = 0;
    const size_t max_count = (1u << 20) + 3;
    size_t nbytes = max_count * 4 * (size_t)nranks;
    char *d_send = dev_alloc(nbytes), *d_recv = dev_alloc(nbytes), *d_other = dev_alloc(4096);
    chorusComm_t comm;
    hbuf = host_alloc(nbytes);
    if (d_send == NULL || d_recv == NULL || d_other == NULL || hbuf == NULL ||
        chorusCommInitMPI(&comm, MPI_COMM_WORLD) != chorusSuccess) {
        fprintf(stderr, "rank %d: FAIL: setup: %s\n", rank, chorusGetLastError(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
#ifndef TEST_FAKE_CUDA
    int cudev = -2;
    if (chorusCommCuDevice(comm, &cudev) != chorusSuccess || cudev != rank % ndev) {
        fprintf(stderr, "rank %d: FAIL: chorusCommCuDevice gave %d, want %d\n", rank, cudev,
                rank % ndev);
        fails++;
    }
#endif
    static const size_t counts[] = {1, 1000, (1u << 20) + 3};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]) && fails == 0; k++) {
        if (!dev_fill_stale(d_send, nbytes) || !dev_fill_stale(d_recv, nbytes))
            MPI_Abort(MPI_COMM_WORLD, 1);
        fails += run_count(comm, counts[k], d_send, d_recv);
        if (rank == 0 && fails == 0)
            printf("count %zu: every collective exact on device buffers, in stream order\n",
                   counts[k]);
    }

    /* chorusMemAllocDevice memory is device memory like any other, and chorusMemFree frees it. */
    void *m = NULL;
    if (fails == 0) {
        size_t count = 1000;
        ctx_t c = {count, chorusSum, 0};
        if (chorusMemAllocDevice(&m, count * 4) != chorusSuccess) {
            fprintf(stderr, "rank %d: FAIL: chorusMemAllocDevice: %s\n", rank,
                    chorusGetLastError(NULL));
            fails++;
        } else if (!write_input(m, count, chorusFloat32, rank, 0) ||
                   chorusAllReduce(m, m, count, chorusFloat32, chorusSum, comm,
                                   (chorusStream_t)stream) != chorusSuccess) {
            fprintf(stderr, "rank %d: FAIL: AllReduce on chorusMemAllocDevice memory: %s\n", rank,
                    chorusGetLastError(comm));
            fails++;
        } else {
            fails += check_output("AllReduce in place on chorusMemAllocDevice memory", m, count,
                                  chorusFloat32, want_reduced, &c);
            if (chorusMemFree(m) != chorusSuccess) {
                fprintf(stderr, "rank %d: FAIL: chorusMemFree of device memory: %s\n", rank,
                        chorusGetLastError(NULL));
                fails++;
            }
        }
    }
#ifdef TEST_FAKE_CUDA
    /* The path taken: GPU to GPU launches reduction kernels; staging reduces on the host. */
    const char *p2p = getenv("CHORUS_CUDA_P2P"), *gmode = getenv("TEST_CUDA_GPUS");
    int want_kernels = gpu_to_gpu_expected();
    if (fails == 0 && (fake_launches() > 0) != want_kernels) {
        fprintf(stderr, "rank %d: FAIL: %d kernel launches, but CHORUS_CUDA_P2P=%s, GPUs %s\n",
                rank, fake_launches(), p2p ? p2p : "(unset)", gmode ? gmode : "shared");
        fails++;
    } else if (fails == 0 && rank == 0) {
        printf("path: %s (%d kernel launches on rank 0)\n",
               want_kernels ? "GPU to GPU over cuda_p2p" : "staged through host memory",
               fake_launches());
    }
#endif
    if (fails == 0)
        fails += check_returns_at_once(comm, d_send, d_recv);

    /* Refusals: mixed memory kinds, and a host stream with device buffers. */
    float host[16] = {0};
    if (chorusAllReduce(host, d_other, 4, chorusFloat32, chorusSum, comm, (chorusStream_t)stream) !=
            chorusInvalidArgument ||
        strstr(chorusGetLastError(comm), "mix") == NULL) {
        fprintf(stderr, "rank %d: FAIL: host sendbuff with device recvbuff: \"%s\"\n", rank,
                chorusGetLastError(comm));
        fails++;
    }
    chorusStream_t hs;
    if (chorusStreamCreate(&hs) == chorusSuccess) {
        if (chorusAllReduce(d_other, d_other, 4, chorusFloat32, chorusSum, comm, hs) !=
            chorusInvalidArgument) {
            fprintf(stderr, "rank %d: FAIL: a host stream with device buffers was taken\n", rank);
            fails++;
        }
        chorusStreamDestroy(hs);
    }
#ifdef TEST_FAKE_CUDA
    fails += check_stuck_stream(d_other);
    if (devbuf_faults() != 0) {
        fprintf(stderr, "rank %d: FAIL: %d copies outside a context or off the caller's stream\n",
                rank, devbuf_faults());
        fails++;
    }
#endif

    int all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
#ifdef TEST_FAKE_CUDA
    if (all == 0) { /* every rank, or none: it is a collective */
        fails += check_launch_failure(comm, d_send, d_recv);
        MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    }
#endif
    chorusCommDestroy(comm);
#ifndef TEST_FAKE_CUDA
    cudaFree(d_send);
    cudaFree(d_recv);
    cudaFree(d_other);
    cudaFreeHost(hbuf);
#else
    free(hbuf);
#endif
    if (rank == 0)
        printf("%s: %d ranks, %d failures\n", all == 0 ? "PASS" : "FAIL", nranks, all);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
