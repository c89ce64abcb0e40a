/*
 * cuda_dev.c: collectives on CUDA device buffers moved GPU to GPU (issue 8's device path).
 *
 * When every rank of the communicator is on one machine with a CUDA device, no two share a GPU
 * (GPUs known by PCI bus id; CHORUS_CUDA_P2P=1 allows sharing too; 0 turns the path off), and no
 * rank's GPU lacks peer access to another's (cuDeviceCanAccessPeer, where the process sees both:
 * NCCL's rule for its P2P transport), a collective whose buffers are device memory
 * runs its ring program (DESIGN section 6) on the host executor with two differences from a host
 * call:
 *   - the connections are the ring of channel 0 over cuda_p2p (FIFO slots in the receiver's GPU
 *     memory, opened by CUDA IPC), built on the first such call;
 *   - the memops backend is the CUDA one below: copies are cuMemcpyAsync, reductions and avg's
 *     division are the kernels of kernels/cuda_memops.cu, loaded from the embedded fatbin
 *     (cuda_module.h) and launched with cuLaunchKernel, all on the communicator's own
 *     non-blocking stream. Each memops call waits for an event recorded behind its work before
 *     it returns, so the primitive publishes a slot only once its bytes are in the peer's
 *     memory.
 * No byte crosses PCIe. Every rank runs the same ring (one channel), so results are identical on
 * every rank and bitwise reproducible, and equal to the host backend's (same arithmetic).
 *
 * Ordering with the caller's stream is cuda_stage.c's: the asynchronous way queues [ready]
 * [wait done] on it and the CUDA worker runs the collective here (op->cuda_ordered); the blocking
 * way waits for the caller's stream first. In the asynchronous way the caller's stream waits
 * (cuStreamWaitValue32) while the internal stream runs the collective: CUDA does not promise
 * that two streams of a context progress together, so a GPU whose queues were all held by
 * waiting streams would end the call in chorusTimeout, not a hang (CHORUS_CUDA_ASYNC=0 avoids the
 * question). Whatever may synchronize the context (stream creation, module and kernel loading,
 * FIFO allocation and IPC) runs in the calling thread before the wait is queued
 * (cuda_dev_prepare). A CUDA error in a memops call stops the operation: the call fails with
 * chorusUnhandledCudaError and the communicator is aborted (peers learn it as any failure),
 * since a peer's slot may hold half-written data.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "cuda_drv.h"
#include "cuda_module.h"
#include "cuda_stage.h"
#include "debug.h"

#define NKOPS 5 /* kernel operations: sum prod max min div */

typedef struct cuda_dev {
    cu_context_t ctx; /* of the first device call; later calls must use the same */
    cu_stream_t stream; /* non-blocking: never waits for the legacy default stream */
    cu_event_t event; /* recorded after each memops call's work on stream */
    cu_module_t module;
    cu_function_t fns[chorusNumTypes][NKOPS][2];
    int sms;
    comm_conn_t send, recv; /* ring of channel 0 over cuda_p2p */
    int connected;
} cuda_dev_t;

/* The operation running on this thread: the backend's calls find their stream here. */
typedef struct dev_run {
    chorusComm_t comm;
    cuda_dev_t *d;
    cu_result_t err; /* first failure, or CU_SUCCESS */
    const char *what; /* which memops call failed */
    int timed_out;
} dev_run_t;
static __thread dev_run_t *run;

static void dev_fail(cu_result_t r, const char *what)
{
    if (run->err == CU_SUCCESS && !run->timed_out) {
        run->err = r;
        run->what = what;
    }
    __atomic_store_n(&run->comm->abort_flag, 1, __ATOMIC_RELEASE);
}

/* Wait for the work just queued on the communicator's stream: an event recorded behind it,
 * polled with cuEventQuery (a copy of a slot takes a few us), yielding; the communicator's
 * deadline and abort flag apply. */
static void dev_sync(const char *what)
{
    chorusComm_t comm = run->comm;
    int64_t deadline = fifo_now_ns() + comm->timeout_ms * 1000000;
    cu_result_t r = cudrv.event_record(run->d->event, run->d->stream);
    if (r != CU_SUCCESS) {
        dev_fail(r, "cuEventRecord");
        return;
    }
    for (;;) {
        r = cudrv.event_query(run->d->event);
        if (r == CU_SUCCESS)
            return;
        if (r != CU_ERROR_NOT_READY) {
            dev_fail(r, what);
            return;
        }
        if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE))
            return; /* the waits of the primitive report why */
        if (fifo_now_ns() > deadline) {
            dev_fail(CU_ERROR_NOT_READY, what);
            run->timed_out = 1;
            return;
        }
        sched_yield();
    }
}

static void dev_copy(void *dst, const void *src, size_t nbytes)
{
    if (run->err != CU_SUCCESS || nbytes == 0 || dst == src)
        return;
    cu_result_t r = cudrv.memcpy_async((cu_ptr_t)(uintptr_t)dst, (cu_ptr_t)(uintptr_t)src, nbytes,
                                       run->d->stream);
    if (r != CU_SUCCESS)
        dev_fail(r, "cuMemcpyAsync");
    else
        dev_sync("a copy");
}

/* Look up every kernel of the module now: with lazy loading (CUDA 12.2+), this is when the
 * driver loads them, and loading may synchronize the context (cuda_dev_prepare). */
static cu_result_t load_kernels(cuda_dev_t *d, char *name, size_t len)
{
    static const char *const kops[NKOPS] = {"sum", "prod", "max", "min", "div"};
    for (int t = 0; t < chorusNumTypes; t++)
        for (int k = 0; k < NKOPS; k++)
            for (int b = 0; b < 2; b++) {
                snprintf(name, len, "chorus_map_%s_%s_%s", dtype_name((chorusDataType_t)t), kops[k],
                         b ? "byte" : "vec");
                cu_result_t r = cudrv.module_function(&d->fns[t][k][b], d->module, name);
                if (r != CU_SUCCESS)
                    return r;
            }
    return CU_SUCCESS;
}

/* dst[i] = a[i] kop b[i]: split as cuda_module.h says, a grid of at most 8 blocks per SM. */
static void dev_map(void *dst, const void *a, const void *b, size_t count, chorusDataType_t dtype,
                    int kop, uint64_t divisor)
{
    if (run->err != CU_SUCCESS || count == 0)
        return;
    size_t es = dtype_nbytes(dtype), per_pack = 16 / es;
    uintptr_t d = (uintptr_t)dst, x = (uintptr_t)a, y = (uintptr_t)b;
    int bytes = ((d | x | y) & (es - 1)) != 0;
    size_t head = count, npacks = 0;
    if (!bytes && ((d ^ x) & 15) == 0 && ((d ^ y) & 15) == 0) {
        size_t lead = ((16 - (d & 15)) & 15) / es;
        head = lead < count ? lead : count;
        npacks = (count - head) / per_pack;
    }
    size_t single = count - npacks * per_pack;
    size_t items = npacks > single ? npacks : single;
    size_t want = (items + CUDA_MODULE_THREADS - 1) / CUDA_MODULE_THREADS;
    size_t cap = (size_t)run->d->sms * 8;
    unsigned grid = (unsigned)(want < 1 ? 1 : want > cap ? cap : want);
    cu_function_t fn = run->d->fns[dtype][kop][bytes];
    void *args[] = {&dst, &a, &b, &count, &head, &npacks, &divisor};
    cu_result_t r =
        cudrv.launch(fn, grid, 1, 1, CUDA_MODULE_THREADS, 1, 1, 0, run->d->stream, args, NULL);
    if (r != CU_SUCCESS)
        dev_fail(r, "cuLaunchKernel");
    else
        dev_sync("a reduction kernel");
}

static void dev_reduce(void *dst, const void *a, const void *b, size_t count,
                       chorusDataType_t dtype, chorusRedOp_t op)
{
    int kop = op == chorusProd ? 1 : op == chorusMax ? 2 : op == chorusMin ? 3 : 0;
    dev_map(dst, a, b, count, dtype, kop, 0);
}

static void dev_divide(void *dst, const void *src, size_t count, chorusDataType_t dtype,
                       uint64_t divisor)
{
    dev_map(dst, src, src, count, dtype, 4, divisor);
}

static const memops_ops_t dev_memops = {
    .name = "cuda",
    .copy = dev_copy,
    .copy_out = dev_copy,
    .reduce = dev_reduce,
    .divide = dev_divide,
};

/* Two ranks on one GPU: the same machine and bus id (device numbers differ between processes
 * whose CUDA_VISIBLE_DEVICES differ), or the same device number where the driver gave no bus id. */
static int same_gpu(const peer_info_t *a, const peer_info_t *b)
{
    if (a->machine_hash != b->machine_hash)
        return 0;
    if (a->cuda_busid[0] != '\0' && b->cuda_busid[0] != '\0')
        return strcmp(a->cuda_busid, b->cuda_busid) == 0;
    return a->cuda_dev == b->cuda_dev;
}

int cuda_dev_decide(chorusComm_t comm)
{
    if (!CHORUS_HAVE_CUDA || comm->params.cuda_p2p == 0 || cuda_drv_missing_dev() != NULL)
        return 0;
    const peer_info_t *self = &comm->peers[comm->rank];
    for (int r = 0; r < comm->nranks; r++)
        if (!cuda_p2p_transport.can_connect(self, &comm->peers[r]))
            return 0;
    /* Unset (-1): not where ranks share a GPU. There the processes' contexts time-slice the one
     * GPU and a slot's round trip took about 1 ms on an H200 (2 ranks, 8 B: 1.0 ms against 0.2 ms
     * staged; 2 MiB: 2.2 against 0.6 ms); CHORUS_CUDA_P2P=1 still forces it (the tests do). */
    for (int r = 0; r < comm->nranks && comm->params.cuda_p2p < 0; r++)
        for (int q = 0; q < r; q++)
            if (same_gpu(&comm->peers[q], &comm->peers[r]))
                return 0;
    return 1;
}

/* The device of this process that is peer's GPU, or -1 where this process does not see it (its
 * CUDA_VISIBLE_DEVICES leaves it out: CUDA IPC still opens memory of such a GPU, since CUDA 10.1,
 * as NCCL's P2P transport relies on). */
static int device_of(const peer_info_t *self, const peer_info_t *peer)
{
    int dev = -1;
    if (same_gpu(self, peer))
        return self->cuda_dev;
    if (peer->cuda_busid[0] == '\0' || cudrv.device_by_busid == NULL)
        return peer->cuda_dev; /* no bus ids: the device numbers are all there is */
    return cudrv.device_by_busid(&dev, peer->cuda_busid) == CU_SUCCESS ? dev : -1;
}

int cuda_dev_reachable(chorusComm_t comm, int *peer_p)
{
    const peer_info_t *self = &comm->peers[comm->rank];
    for (int r = 0; r < comm->nranks; r++) {
        const peer_info_t *peer = &comm->peers[r];
        int dev = device_of(self, peer), can = 1;
        if (dev == self->cuda_dev || dev < 0)
            continue; /* the same GPU, or one this process does not see (peer access unknown) */
        if (cudrv.can_access_peer != NULL &&
            (cudrv.can_access_peer(&can, self->cuda_dev, dev) != CU_SUCCESS || !can)) {
            INFO(SUB_INIT,
                 "rank %d cannot open rank %d's GPU memory (GPU %s has no peer access from this "
                 "one): device-buffer collectives stage through host memory",
                 comm->rank, r, peer->cuda_busid[0] ? peer->cuda_busid : "?");
            *peer_p = r;
            return 0;
        }
    }
    return 1;
}

int cuda_dev_wanted(chorusComm_t comm, const comm_op_t *ops, int n)
{
    if (!comm->cuda_direct || n == 0)
        return 0;
    for (int i = 0; i < n; i++) {
        coll_kind_t k = ops[i].args.kind;
        if (!ops[i].on_device || k == COLL_SEND || k == COLL_RECV || k == COLL_ALLTOALL)
            return 0;
    }
    return 1;
}

/* The communicator's stream and kernels, in ctx (current). */
static chorusResult_t dev_state(chorusComm_t comm, const char *fn, cu_context_t ctx)
{
    cuda_dev_t *d = comm->cuda_dev;
    if (d != NULL) {
        if (d->ctx != ctx)
            return ERR(chorusInvalidUsage, SUB_COLL,
                       "%s (rank %d): device buffers of another CUDA context than this "
                       "communicator's earlier device calls (one device per rank, as in NCCL)",
                       fn, comm->rank);
        return chorusSuccess;
    }
    if ((d = calloc(1, sizeof(*d))) == NULL)
        return ERR(chorusSystemError, SUB_ALLOC, "out of memory");
    d->ctx = ctx;
    int dev = -1;
    cu_result_t r = cudrv.ctx_device(&dev);
    if (r == CU_SUCCESS)
        r = cudrv.device_attr(&d->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (r == CU_SUCCESS && d->sms <= 0)
        d->sms = 16;
    if (r == CU_SUCCESS &&
        (r = cudrv.stream_create(&d->stream, CU_STREAM_NON_BLOCKING)) != CU_SUCCESS)
        d->stream = NULL;
    if (r == CU_SUCCESS &&
        (r = cudrv.event_create(&d->event, CU_EVENT_DISABLE_TIMING)) != CU_SUCCESS)
        d->event = NULL;
    if (r == CU_SUCCESS && (r = cudrv.module_load(&d->module, chorus_cuda_fatbin)) != CU_SUCCESS)
        d->module = NULL;
    char name[64] = "";
    if (r == CU_SUCCESS)
        r = load_kernels(d, name, sizeof(name));
    if (r != CU_SUCCESS) {
        if (d->module != NULL)
            cudrv.module_unload(d->module);
        if (d->event != NULL)
            cudrv.event_destroy(d->event);
        if (d->stream != NULL)
            cudrv.stream_destroy(d->stream);
        free(d);
        return ERR(chorusUnhandledCudaError, SUB_INIT,
                   "%s (rank %d): setting up the device path (stream, event, kernels of %zu "
                   "bytes%s%s): "
                   "%s (CHORUS_CUDA_P2P=0 stages through host memory instead)",
                   fn, comm->rank, chorus_cuda_fatbin_nbytes, name[0] ? ", " : "", name,
                   cuda_drv_str(r));
    }
    comm->cuda_dev = d;
    return chorusSuccess;
}

static chorusResult_t dev_connect(chorusComm_t comm)
{
    cuda_dev_t *d = comm->cuda_dev;
    int n = comm->nranks;
    if (d->connected || n == 1)
        return chorusSuccess;
    const ring_t *ring = &comm->channels[0].ring;
    int next = ring->ranks[(ring->index + 1) % n], prev = ring->ranks[(ring->index - 1 + n) % n];
    size_t slot = (size_t)(comm->params.buffsize / comm->params.steps);
    conn_req_t reqs[2] = {{CONN_SEND, next, DEVICE_RING_TAG, slot, &d->send, &cuda_p2p_transport},
                          {CONN_RECV, prev, DEVICE_RING_TAG, slot, &d->recv, &cuda_p2p_transport}};
    CHECK(comm_connect(comm, reqs, 2));
    d->connected = 1;
    INFO(SUB_INIT, "device-buffer collectives run GPU to GPU: FIFO %lld x %zu bytes in GPU memory",
         (long long)comm->params.steps, slot);
    return chorusSuccess;
}

chorusResult_t cuda_dev_prepare(chorusComm_t comm, const char *fn, void *ctx)
{
    cuda_dev_t *d = comm->cuda_dev;
    if (d != NULL && (d->connected || comm->nranks == 1))
        return dev_state(comm, fn, ctx); /* made: only checks the context */
    /* Earlier batches may still use the bootstrap on the worker (their connections). */
    CHECK(cuda_stage_drain(comm));
    fifo_excl_lock(&comm->exec_lock);
    chorusResult_t res = dev_state(comm, fn, ctx);
    if (res == chorusSuccess)
        res = dev_connect(comm);
    fifo_excl_unlock(&comm->exec_lock);
    return res;
}

chorusResult_t cuda_dev_coll(chorusComm_t comm, const comm_op_t *op, prims_t *p, const char *fn)
{
    const coll_args_t *a = &op->args;
    const void *any = a->recvbuff != NULL ? a->recvbuff : a->sendbuff;
    if (!mem_is_device(any))
        any = a->sendbuff; /* a non-root's unused recvbuff */
    cu_context_t ctx;
    CHECK(cuda_push_ctx(fn, comm->rank, any, &ctx));
    chorusResult_t res = dev_state(comm, fn, ctx);
    if (res == chorusSuccess && !op->cuda_ordered)
        res = cuda_wait_stream(comm, fn, op->cuda_stream); /* inputs written */
    if (res == chorusSuccess)
        res = dev_connect(comm);
    if (res == chorusSuccess) {
        dev_run_t r = {comm, comm->cuda_dev, CU_SUCCESS, NULL, 0};
        channel_work_t w;
        memset(&w, 0, sizeof(w));
        w.prims = *p;
        w.prims.ops = &dev_memops;
        w.prims.send = comm->nranks > 1 ? &r.d->send.conn : NULL;
        w.prims.recv = comm->nranks > 1 ? &r.d->recv.conn : NULL;
        w.ring = &comm->channels[0].ring;
        w.args = a;
        w.nchannels = 1;
        run = &r;
        res = algo_program(a->kind, 0)(&w);
        run = NULL;
        if (r.timed_out)
            res = ERR(chorusTimeout, SUB_COLL,
                      "%s (rank %d): %s on the communicator's CUDA stream did not finish within "
                      "%lld ms (CHORUS_TIMEOUT_MS)",
                      fn, comm->rank, r.what, (long long)comm->timeout_ms);
        else if (r.err != CU_SUCCESS)
            res = ERR(chorusUnhandledCudaError, SUB_COLL, "%s (rank %d): %s failed: %s", fn,
                      comm->rank, r.what, cuda_drv_str(r.err));
    }
    cuda_pop_ctx();
    return res;
}

void cuda_dev_free(chorusComm_t comm)
{
    cuda_dev_t *d = comm->cuda_dev;
    if (d == NULL)
        return;
    comm_conn_close(&d->send);
    comm_conn_close(&d->recv);
    int pushed = cudrv.ctx_push(d->ctx) == CU_SUCCESS;
    if (d->module != NULL && cudrv.module_unload(d->module) != CU_SUCCESS)
        WARN(SUB_INIT, "cuModuleUnload failed (was CUDA torn down first?)");
    if (cudrv.event_destroy(d->event) != CU_SUCCESS)
        WARN(SUB_INIT, "cuEventDestroy failed (was CUDA torn down first?)");
    if (cudrv.stream_destroy(d->stream) != CU_SUCCESS)
        WARN(SUB_INIT, "cuStreamDestroy failed (was CUDA torn down first?)");
    if (pushed)
        cuda_pop_ctx();
    free(d);
    comm->cuda_dev = NULL;
}

/* ---- chorusMemAllocDevice ---- */

chorusResult_t chorusMemAllocDevice(void **ptr, size_t nbytes)
{
    debug_clear_error();
    if (ptr == NULL)
        return ERR(chorusInvalidArgument, SUB_ALLOC, "chorusMemAllocDevice: ptr is NULL");
    if (nbytes == 0)
        return ERR(chorusInvalidArgument, SUB_ALLOC, "chorusMemAllocDevice: nbytes is 0");
    if (!CHORUS_HAVE_CUDA)
        return ERR(chorusInvalidUsage, SUB_ALLOC,
                   "chorusMemAllocDevice: this build of Chorus has no CUDA support (rebuild with "
                   "-DCHORUS_ENABLE_CUDA=ON)");
    return cuda_mem_alloc(ptr, nbytes);
}

chorusResult_t cuda_mem_alloc(void **ptr, size_t nbytes)
{
    const char *missing = cuda_drv_missing_dev();
    cu_context_t ctx = NULL;
    if (!cuda_drv_loaded())
        return ERR(chorusInvalidUsage, SUB_ALLOC,
                   "chorusMemAllocDevice: this process has not loaded CUDA (initialise it and pick "
                   "a device first, e.g. cudaSetDevice; Chorus never loads it)");
    if (missing != NULL)
        return ERR(chorusInvalidUsage, SUB_ALLOC,
                   "chorusMemAllocDevice: the loaded CUDA driver lacks %s (update the driver)",
                   missing);
    if (cudrv.ctx_current(&ctx) != CU_SUCCESS || ctx == NULL)
        return ERR(chorusInvalidUsage, SUB_ALLOC,
                   "chorusMemAllocDevice: no current CUDA context on this thread (pick a device "
                   "first, e.g. cudaSetDevice)");
    cu_ptr_t d = 0;
    cu_result_t r = cudrv.mem_alloc(&d, nbytes);
    if (r != CU_SUCCESS)
        return ERR(chorusUnhandledCudaError, SUB_ALLOC,
                   "chorusMemAllocDevice of %zu bytes (cuMemAlloc): %s", nbytes, cuda_drv_str(r));
    *ptr = (void *)(uintptr_t)d;
    return chorusSuccess;
}

chorusResult_t cuda_mem_free(void *ptr)
{
    cu_context_t ctx;
    CHECK(cuda_push_ctx("chorusMemFree", -1, ptr, &ctx));
    cu_result_t r = cudrv.mem_free((cu_ptr_t)(uintptr_t)ptr);
    cuda_pop_ctx();
    if (r != CU_SUCCESS)
        return ERR(chorusInvalidArgument, SUB_ALLOC,
                   "chorusMemFree: %p is device memory that cuMemFree refuses (%s): pass the "
                   "pointer chorusMemAllocDevice returned",
                   ptr, cuda_drv_str(r));
    return chorusSuccess;
}
