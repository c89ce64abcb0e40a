/*
 * cuda_p2p.c: the transport between ranks on one machine whose buffers are on CUDA devices.
 *
 * The FIFO contract (fifo.h) with the slots in the receiver's GPU memory: the receiver allocates
 * STEPS x slot bytes with cuMemAlloc and exports them with cuIpcGetMemHandle; the sender opens
 * the handle (cuIpcOpenMemHandle, peer access enabled lazily when the two ranks sit on different
 * GPUs) and its copies and reduction kernels write straight into the receiver's slots. Ranks of
 * one process (chorusCommInitAll) use the pointer itself: a process cannot open its own handle,
 * and unified addressing makes the pointer valid in every context of the process.
 *
 * The counters and sizes stay in host memory (a shm segment owned by the receiver, as in shm.c):
 * the executor that polls them runs on a host thread, and it publishes a slot only after the
 * stream that filled it has finished (cuda_dev.c), so a counter never runs ahead of its data.
 * (DESIGN section 5 had the counters in GPU memory too, for a device executor polling them; the
 * host executor would pay a PCIe round trip per poll there.)
 *
 * Every CUDA call runs in the context current on the calling thread at setup, saved for close.
 */
#define _GNU_SOURCE
#include "transport.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_drv.h"
#include "debug.h"

typedef struct cuda_p2p_handle {
    char name[64]; /* the counters' shm segment */
    uint64_t map_nbytes;
    uint64_t slot_nbytes;
    uint32_t steps;
    int32_t pid; /* the owner of the slots */
    uint64_t dptr; /* the slots as the owner addresses them */
    cu_ipc_handle_t ipc;
} cuda_p2p_handle_t;
_Static_assert(sizeof(cuda_p2p_handle_t) <= TRANSPORT_HANDLE_BYTES, "cuda_p2p handle too large");

typedef struct cuda_p2p_res {
    cu_context_t ctx; /* current at setup: close pushes it */
    cu_ptr_t owned; /* recv end: the slots it allocated */
    cu_ptr_t opened; /* send end: the peer's slots opened by IPC (0: same process, or none) */
    int peer_pid; /* recv end: the sender's process */
} cuda_p2p_res_t;

/* After the FIFO control block, in the same shm page: whether the sender has the receiver's
 * memory open. cuMemFree of exported memory before the importer's cuIpcCloseMemHandle is
 * undefined behaviour, and the two ends close in two processes at their own pace. */
enum { IMPORT_NONE = 0, IMPORT_OPEN = 1, IMPORT_CLOSED = 2 };
#define IMPORT_WAIT_NS (10LL * 1000 * 1000 * 1000)

static uint32_t *import_state(const transport_res_t *res)
{
    return (uint32_t *)((char *)res->map + sizeof(fifo_ctrl_t));
}

static int cuda_p2p_can_connect(const peer_info_t *self, const peer_info_t *peer)
{
    /* Two devices of one process would need peer access enabled between their contexts. */
    return self->machine_hash == peer->machine_hash && self->pid_ns == peer->pid_ns &&
           self->cuda_dev >= 0 && peer->cuda_dev >= 0 &&
           (self->pid != peer->pid || self->cuda_dev == peer->cuda_dev);
}

static size_t ctrl_nbytes(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (sizeof(fifo_ctrl_t) + sizeof(uint32_t) + page - 1) / page * page;
}

static void bind_conn(transport_res_t *res, const conn_setup_t *s, conn_t *conn, cu_ptr_t slots)
{
    conn->ctrl = res->map;
    conn->slots = (char *)(uintptr_t)slots;
    conn->slot_nbytes = s->slot_nbytes;
    conn->steps = s->steps;
    conn->step = 0;
    conn->head_seen = 0;
    conn->peer = s->peer->rank;
    conn->transport = "cuda_p2p";
}

static void cuda_p2p_close(transport_res_t *res, conn_t *conn);

static chorusResult_t setup_end(const conn_setup_t *s, transport_res_t *res, conn_t *conn,
                                transport_handle_t *handle_p)
{
    const char *missing = cuda_drv_missing_dev();
    if (missing != NULL)
        return ERR(chorusInvalidUsage, SUB_INIT,
                   "cuda_p2p (rank %d): the loaded CUDA driver lacks %s", s->self->rank, missing);
    cuda_p2p_res_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return ERR(chorusSystemError, SUB_ALLOC, "out of memory");
    res->priv = p;
    cu_result_t r = cudrv.ctx_current(&p->ctx);
    if (r != CU_SUCCESS || p->ctx == NULL)
        return ERR(chorusInternalError, SUB_INIT,
                   "cuda_p2p (rank %d): no current CUDA context to allocate FIFOs in",
                   s->self->rank);
    if (s->dir == CONN_SEND)
        return chorusSuccess; /* the sender owns nothing: it opens the receiver's memory */
    p->peer_pid = s->peer->pid;
    size_t nbytes = s->slot_nbytes * (size_t)s->steps;
    r = cudrv.mem_alloc(&p->owned, nbytes);
    if (r != CU_SUCCESS)
        return ERR(chorusUnhandledCudaError, SUB_ALLOC,
                   "cuda_p2p (rank %d): FIFO of %zu bytes in GPU memory for rank %d (cuMemAlloc): "
                   "%s (lower CHORUS_BUFFSIZE?)",
                   s->self->rank, nbytes, s->peer->rank, cuda_drv_str(r));
    cuda_p2p_handle_t h;
    memset(&h, 0, sizeof(h));
    r = cudrv.ipc_get(&h.ipc, p->owned);
    if (r != CU_SUCCESS)
        return ERR(chorusUnhandledCudaError, SUB_INIT,
                   "cuda_p2p (rank %d): cuIpcGetMemHandle for the FIFO from rank %d: %s",
                   s->self->rank, s->peer->rank, cuda_drv_str(r));
    shm_segment_name(res->name, sizeof(res->name), s->peer->rank, s->self->rank, s->tag);
    res->map_nbytes = ctrl_nbytes();
    CHECK(shm_segment_map(res->name, res->map_nbytes, 1, s->peer->rank, 0, &res->map));
    bind_conn(res, s, conn, p->owned);
    snprintf(h.name, sizeof(h.name), "%s", res->name);
    h.map_nbytes = res->map_nbytes;
    h.slot_nbytes = s->slot_nbytes;
    h.steps = (uint32_t)s->steps;
    h.pid = (int32_t)getpid();
    h.dptr = p->owned;
    memcpy(handle_p->bytes, &h, sizeof(h));
    TRACE(SUB_INIT, "cuda_p2p: %zu bytes of GPU memory at 0x%llx for recv from rank %d", nbytes,
          (unsigned long long)p->owned, s->peer->rank);
    return chorusSuccess;
}

static chorusResult_t cuda_p2p_connect(const conn_setup_t *s, const transport_handle_t *peer_handle,
                                       transport_res_t *res, conn_t *conn)
{
    if (s->dir == CONN_RECV) {
        shm_res_unlink(res);
        return chorusSuccess;
    }
    cuda_p2p_res_t *p = res->priv;
    cuda_p2p_handle_t h;
    memcpy(&h, peer_handle->bytes, sizeof(h));
    h.name[sizeof(h.name) - 1] = '\0';
    if (h.map_nbytes != ctrl_nbytes() || h.slot_nbytes != s->slot_nbytes ||
        h.steps != (uint32_t)s->steps)
        return ERR(chorusInvalidUsage, SUB_INIT,
                   "rank %d offers a GPU FIFO of %u x %llu bytes where %d x %zu were expected: "
                   "the ranks run with different CHORUS_BUFFSIZE or CHORUS_STEPS",
                   s->peer->rank, h.steps, (unsigned long long)h.slot_nbytes, s->steps,
                   s->slot_nbytes);
    cu_ptr_t slots = h.dptr;
    if (h.pid != (int32_t)getpid()) {
        cu_result_t r = cudrv.ipc_open(&p->opened, h.ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (r != CU_SUCCESS)
            return ERR(chorusUnhandledCudaError, SUB_INIT,
                       "cuda_p2p (rank %d): opening rank %d's GPU FIFO (cuIpcOpenMemHandle): %s "
                       "(CUDA IPC needs both processes on this machine, with peer access "
                       "between their GPUs; set CHORUS_CUDA_P2P=0 to stage through host memory)",
                       s->self->rank, s->peer->rank, cuda_drv_str(r));
        slots = p->opened;
    }
    snprintf(res->name, sizeof(res->name), "%s", h.name);
    res->map_nbytes = h.map_nbytes;
    CHECK(shm_segment_map(res->name, res->map_nbytes, 0, s->peer->rank, 0, &res->map));
    res->unlinked = 1; /* the owner unlinks */
    if (p->opened != 0)
        __atomic_store_n(import_state(res), IMPORT_OPEN, __ATOMIC_RELEASE);
    bind_conn(res, s, conn, slots);
    return chorusSuccess;
}

/* Receiver: 1 once the sender has closed its mapping of our memory (or never opened it, or its
 * process is gone); waits up to IMPORT_WAIT_NS. */
static int importer_done(const transport_res_t *res, int pid)
{
    int64_t deadline = fifo_now_ns() + IMPORT_WAIT_NS;
    while (__atomic_load_n(import_state(res), __ATOMIC_ACQUIRE) == IMPORT_OPEN) {
        if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
            return 1; /* gone, and its mappings with it */
        if (fifo_now_ns() > deadline)
            return 0;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 1;
}

static void cuda_p2p_close(transport_res_t *res, conn_t *conn)
{
    cuda_p2p_res_t *p = res->priv;
    if (p != NULL && (p->owned != 0 || p->opened != 0)) {
        int pushed = p->ctx != NULL && cudrv.ctx_push(p->ctx) == CU_SUCCESS;
        if (p->opened != 0 && cudrv.ipc_close(p->opened) != CU_SUCCESS)
            WARN(SUB_INIT, "cuda_p2p: cuIpcCloseMemHandle failed (was CUDA torn down first?)");
        if (p->opened != 0 && res->map != NULL)
            __atomic_store_n(import_state(res), IMPORT_CLOSED, __ATOMIC_RELEASE);
        if (p->owned != 0 && res->map != NULL && !importer_done(res, p->peer_pid))
            WARN(SUB_INIT,
                 "cuda_p2p: rank %d still has this rank's FIFO open after %lld s: its GPU memory "
                 "is left allocated",
                 conn->peer, IMPORT_WAIT_NS / 1000000000);
        else if (p->owned != 0 && cudrv.mem_free(p->owned) != CU_SUCCESS)
            WARN(SUB_INIT, "cuda_p2p: cuMemFree of a FIFO failed (was CUDA torn down first?)");
        if (pushed)
            cuda_pop_ctx();
    }
    shm_res_release(res);
    free(p);
    res->priv = NULL;
    memset(conn, 0, sizeof(*conn));
}

static chorusResult_t cuda_p2p_setup(const conn_setup_t *s, transport_res_t *res, conn_t *conn,
                                     transport_handle_t *handle_p)
{
    memset(res, 0, sizeof(*res));
    memset(handle_p, 0, sizeof(*handle_p));
    chorusResult_t r = setup_end(s, res, conn, handle_p);
    if (r != chorusSuccess) /* the core calls close only for ends that were set up */
        cuda_p2p_close(res, conn);
    return r;
}

const transport_ops_t cuda_p2p_transport = {
    .name = "cuda_p2p",
    .can_connect = cuda_p2p_can_connect,
    .setup = cuda_p2p_setup,
    .connect = cuda_p2p_connect,
    .close = cuda_p2p_close,
};
