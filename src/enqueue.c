/*
 * enqueue.c: the collective and point-to-point entry points: argument checks, then the call is
 * run now (NULL stream), queued on a host stream, or held for chorusGroupEnd.
 *
 * An invalid argument is refused before anything is touched: no buffer changes, the communicator
 * stays usable, and chorusGetLastError says which argument is wrong and what is allowed.
 * Execution turns one call into one task per channel (the channel program over its ring's
 * connections) run by the executor; grouped sends and receives run as one progress loop.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "cuda_drv.h"
#include "cuda_stage.h"
#include "debug.h"

/* Send and receive: matched in issue order per peer, a group's all progressed together after its
 * collectives (comm_exec). An all-to-all is a collective: run in issue order with the others, as
 * its own send/recv loop or through the windows (run_alltoall), so a group's sends and receives
 * to the same peers match among themselves whatever all-to-alls stand between them. */
static int is_p2p(coll_kind_t kind)
{
    return kind == COLL_SEND || kind == COLL_RECV;
}

/* A build without CUDA refuses device buffers; a CUDA build stages them (cuda_stage.c). */
#define DEVICE_BUFFER_HINT                                                                         \
    "but this build of Chorus has no CUDA support (rebuild with -DCHORUS_ENABLE_CUDA=ON, or pass " \
    "host memory)"

/* dev/host count the buffers of each kind the call passes (for the mixing check); *cuda is the
 * call's mem_cuda_possible(), -1 until a buffer needs it. A buffer this communicator found host
 * memory in one of its last calls (host_seen) is taken as host again without asking: it could be
 * device memory now only if the application freed it and a CUDA driver gave out the same address
 * since. Any other buffer is asked about, with a look for a driver loaded since the last look
 * (mem.c): about 11 ns a call here, 15 ns of a 2-rank 8 B broadcast's 80 when every call paid
 * it. */
HOT_PATH static inline __attribute__((always_inline)) chorusResult_t
check_buffer(chorusComm_t comm, const char *fn, const char *name, const void *buf, size_t count,
             int rank, int *cuda, int *dev, int *host)
{
    if (count == 0)
        return chorusSuccess;
    if (buf == NULL)
        return ERR(chorusInvalidArgument, SUB_COLL, "%s (rank %d): %s is NULL with count %zu", fn,
                   rank, name, count);
    /* Relaxed atomics: threads may call on one communicator at once (the exec lock orders the
     * runs, not these checks), and only pointers found host memory are ever stored. */
    for (int i = 0; i < HOST_SEEN; i++)
        if (__atomic_load_n(&comm->host_seen[i], __ATOMIC_RELAXED) == buf) {
            (*host)++;
            return chorusSuccess;
        }
    if (*cuda < 0)
        *cuda = mem_cuda_possible();
    if (!*cuda || !mem_is_device(buf)) {
        unsigned k = __atomic_load_n(&comm->host_seen_next, __ATOMIC_RELAXED);
        __atomic_store_n(&comm->host_seen_next, k + 1, __ATOMIC_RELAXED);
        __atomic_store_n(&comm->host_seen[k % HOST_SEEN], buf, __ATOMIC_RELAXED);
        (*host)++;
        return chorusSuccess;
    }
    if (!CHORUS_HAVE_CUDA)
        return ERR(chorusInvalidArgument, SUB_COLL, "%s (rank %d): %s is CUDA device memory, %s",
                   fn, rank, name, DEVICE_BUFFER_HINT);
    if (cuda_drv_missing() != NULL)
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s (rank %d): %s is CUDA device memory, but the loaded CUDA driver lacks %s "
                   "(pass host memory, or update the driver)",
                   fn, rank, name, cuda_drv_missing());
    (*dev)++;
    return chorusSuccess;
}

/* Buffers that overlap without being in place as NCCL lays it out (the same pointer; an
 * all-gather's sendbuff at recvbuff + rank * count elements; a reduce-scatter's recvbuff at
 * sendbuff + rank * count): a call would read input it has overwritten (an all-reduce with
 * recvbuff = sendbuff + 1 element lost 6127 of 100003), so it is refused. Called only where the
 * byte ranges overlap and the pointers differ. */
static __attribute__((noinline, cold)) chorusResult_t
check_overlap(const char *fn, const coll_args_t *a, int rank, size_t esize, size_t in, size_t out)
{
    uintptr_t s = (uintptr_t)a->sendbuff, r = (uintptr_t)a->recvbuff;
    size_t part = a->count * esize * (size_t)rank;
    if ((a->kind == COLL_ALLGATHER && s == r + part) ||
        (a->kind == COLL_REDUCESCATTER && r == s + part))
        return chorusSuccess;
    const char *layout = a->kind == COLL_ALLGATHER       ? "sendbuff = recvbuff + rank * sendcount"
                         : a->kind == COLL_REDUCESCATTER ? "recvbuff = sendbuff + rank * recvcount"
                                                         : "sendbuff = recvbuff";
    return ERR(chorusInvalidArgument, SUB_COLL,
               "%s (rank %d): sendbuff %p (%zu bytes) and recvbuff %p (%zu bytes) overlap, but "
               "the call is not in place (%s): pass separate buffers, or that layout",
               fn, rank, a->sendbuff, in, a->recvbuff, out, layout);
}

/* Validate op completely; on success it may run. */
/* on_device_p: set to 1 when the buffers are CUDA device memory, or the call moves no bytes here
 * and names a cudaStream_t. */
HOT_PATH static chorusResult_t check_op(const comm_op_t *op, int *on_device_p)
{
    const coll_args_t *a = &op->args;
    const char *fn = coll_name(a->kind);
    chorusComm_t comm = op->comm;
    /* issue() counted the call on a live handle (comm_op_started): no registry lookup again. */
    debug_clear_error();
    debug_set_rank(comm->rank);
    int rank = comm->rank, n = comm->nranks;
    if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE)) {
        chorusResult_t first = health_report_once(comm, fn, !is_p2p(a->kind) && a->count > 0);
        if (first != chorusSuccess)
            return first;
        char cause[HEALTH_TEXT_BYTES];
        comm_failure_text(comm, cause, sizeof(cause));
        return ERR(chorusInvalidUsage, SUB_COLL,
                   "%s (rank %d): the communicator was aborted after an earlier error (%s); "
                   "destroy it and create a new one",
                   fn, rank, cause);
    }
    if ((unsigned)a->dtype >= chorusNumTypes)
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s (rank %d): datatype %d is not a chorusDataType_t (allowed 0..%d)", fn, rank,
                   (int)a->dtype, chorusNumTypes - 1);
    int reduces =
        a->kind == COLL_ALLREDUCE || a->kind == COLL_REDUCE || a->kind == COLL_REDUCESCATTER;
    if (reduces && (unsigned)a->op >= chorusNumOps)
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s (rank %d): op %d is not a chorusRedOp_t (allowed 0..%d: sum, prod, max, "
                   "min, avg)",
                   fn, rank, (int)a->op, chorusNumOps - 1);
    if ((a->kind == COLL_BROADCAST || a->kind == COLL_REDUCE) && (a->root < 0 || a->root >= n))
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s (rank %d): root %d is outside 0..%d (nranks-1)", fn, rank, a->root, n - 1);
    if ((a->kind == COLL_SEND || a->kind == COLL_RECV) && (a->root < 0 || a->root >= n))
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s (rank %d): peer %d is outside 0..%d (nranks-1)", fn, rank, a->root, n - 1);
    /* A send to this rank itself meets only a receive of the same group: alone it could never
     * complete (it ran, failed and aborted the communicator on every rank). */
    if ((a->kind == COLL_SEND || a->kind == COLL_RECV) && a->root == rank && a->count > 0 &&
        !group_active())
        return ERR(chorusInvalidUsage, SUB_COLL,
                   "%s (rank %d): %s this rank itself outside a group: post it with its "
                   "matching %s between chorusGroupStart and chorusGroupEnd",
                   fn, rank, a->kind == COLL_SEND ? "a send to" : "a receive from",
                   a->kind == COLL_SEND ? "chorusRecv" : "chorusSend");
    size_t esize = dtype_nbytes(a->dtype);
    int many =
        a->kind == COLL_ALLGATHER || a->kind == COLL_REDUCESCATTER || a->kind == COLL_ALLTOALL;
    /* No division: a 64-bit divide costs more than the rest of a call with no elements. */
    size_t nall, nbytes;
    if (__builtin_mul_overflow(a->count, many ? (size_t)n : 1, &nall) ||
        __builtin_mul_overflow(nall, esize, &nbytes) || nbytes > (SIZE_MAX >> 2))
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s (rank %d): count %zu times the %zu-byte datatype%s overflows size_t", fn,
                   rank, a->count, esize, many ? " times nranks" : "");
    if (nall == 0 && op->stream == NULL) { /* no bytes and no stream: nothing more to check */
        *on_device_p = 0;
        return chorusSuccess;
    }
    int dev = 0, host = 0, cuda = -1;
    switch (a->kind) {
    case COLL_ALLREDUCE:
        CHECK(check_buffer(comm, fn, "sendbuff", a->sendbuff, a->count, rank, &cuda, &dev, &host));
        CHECK(check_buffer(comm, fn, "recvbuff", a->recvbuff, a->count, rank, &cuda, &dev, &host));
        break;
    case COLL_BROADCAST:
        if (rank == a->root)
            CHECK(check_buffer(comm, fn, "sendbuff", a->sendbuff, a->count, rank, &cuda, &dev,
                               &host));
        CHECK(check_buffer(comm, fn, "recvbuff", a->recvbuff, a->count, rank, &cuda, &dev, &host));
        break;
    case COLL_REDUCE:
        CHECK(check_buffer(comm, fn, "sendbuff", a->sendbuff, a->count, rank, &cuda, &dev, &host));
        if (rank == a->root)
            CHECK(check_buffer(comm, fn, "recvbuff", a->recvbuff, a->count, rank, &cuda, &dev,
                               &host));
        break;
    case COLL_ALLGATHER:
        CHECK(check_buffer(comm, fn, "sendbuff", a->sendbuff, a->count, rank, &cuda, &dev, &host));
        CHECK(check_buffer(comm, fn, "recvbuff", a->recvbuff, nall, rank, &cuda, &dev, &host));
        break;
    case COLL_REDUCESCATTER:
        CHECK(check_buffer(comm, fn, "sendbuff", a->sendbuff, nall, rank, &cuda, &dev, &host));
        CHECK(check_buffer(comm, fn, "recvbuff", a->recvbuff, a->count, rank, &cuda, &dev, &host));
        break;
    case COLL_ALLTOALL:
        CHECK(check_buffer(comm, fn, "sendbuff", a->sendbuff, nall, rank, &cuda, &dev, &host));
        CHECK(check_buffer(comm, fn, "recvbuff", a->recvbuff, nall, rank, &cuda, &dev, &host));
        break;
    case COLL_SEND:
        CHECK(check_buffer(comm, fn, "sendbuff", a->sendbuff, a->count, rank, &cuda, &dev, &host));
        break;
    case COLL_RECV:
        CHECK(check_buffer(comm, fn, "recvbuff", a->recvbuff, a->count, rank, &cuda, &dev, &host));
        break;
    }
    /* Equal pointers are in place, except for an all-gather's or reduce-scatter's rank other
     * than 0: there in place is this rank's slice (check_overlap), and sendbuff == recvbuff
     * overlaps it another way (a 2-rank all-gather so returned rank 0's slice on both). */
    int same = a->sendbuff == a->recvbuff &&
               !((a->kind == COLL_ALLGATHER || a->kind == COLL_REDUCESCATTER) && rank != 0);
    if (a->kind != COLL_SEND && a->kind != COLL_RECV &&
        !(a->kind == COLL_BROADCAST && rank != a->root) &&
        !(a->kind == COLL_REDUCE && rank != a->root) && !same) {
        size_t one = a->count * esize;
        size_t in = a->kind == COLL_REDUCESCATTER || a->kind == COLL_ALLTOALL ? nbytes : one;
        size_t out = a->kind == COLL_ALLGATHER || a->kind == COLL_ALLTOALL ? nbytes : one;
        uintptr_t s = (uintptr_t)a->sendbuff, r = (uintptr_t)a->recvbuff;
        if (s < r + out && r < s + in)
            CHECK(check_overlap(fn, a, rank, esize, in, out));
    }
    if (dev > 0 && host > 0)
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s (rank %d): sendbuff and recvbuff mix CUDA device memory and host memory; "
                   "pass both of one kind",
                   fn, rank);
    if (dev > 0 && op->stream != NULL && stream_is_host(op->stream))
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s (rank %d): device buffers take a cudaStream_t (or NULL), not a host stream "
                   "made by chorusStreamCreate",
                   fn, rank);
    /* No bytes on this rank (count 0) with a stream that is not a host one: in a CUDA build, a
     * cudaStream_t of an empty call (an empty gradient bucket), taken as a device call: it
     * returns at once and leaves a group of device calls the asynchronous way. */
    int cuda_empty = CHORUS_HAVE_CUDA && dev == 0 && host == 0;
    if (dev == 0 && !cuda_empty && op->stream != NULL && !stream_is_host(op->stream))
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s (rank %d): stream is neither NULL nor a host stream made by "
                   "chorusStreamCreate (a cudaStream_t goes with device buffers)",
                   fn, rank);
    *on_device_p = dev > 0 || (cuda_empty && op->stream != NULL && !stream_is_host(op->stream));
    return chorusSuccess;
}

typedef struct coll_task {
    channel_work_t work;
    channel_program_t program;
    uint32_t *abort_flag;
} coll_task_t;

static chorusResult_t run_channel(void *arg)
{
    coll_task_t *t = arg;
    chorusResult_t res = t->program(&t->work);
    /* One failed channel leaves the communicator unusable anyway: raise the flag now so the
     * other channels stop within a sleep slice instead of waiting out their deadlines. */
    if (res != chorusSuccess)
        __atomic_store_n(t->abort_flag, 1, __ATOMIC_RELEASE);
    return res;
}

/* Every field stored one by one: a zeroing initializer of the 128-byte struct compiled to `rep
 * stos`, whose start-up took 57% of this function's samples on a 2-rank 8 B broadcast's root
 * (perf record, AMD VM of 2026-12-07). A field added to prims_t or wait_ctx_t must be set here:
 * the size checks below fail until it is. */
_Static_assert(sizeof(prims_t) == 136 && sizeof(wait_ctx_t) == 72,
               "fill_prims stores every field of prims_t and wait_ctx_t: add the new one there");
HOT_PATH static void fill_prims(chorusComm_t comm, const coll_args_t *a, prims_t *p)
{
    int64_t nt = comm->nt_min;
    int big = nt > 0 && coll_out_nbytes(comm, a) >= (uint64_t)nt;
    p->send = NULL;
    p->recv = NULL;
    p->ops = &host_memops;
    p->dtype = a->dtype;
    p->op = a->op;
    p->esize = dtype_nbytes(a->dtype);
    p->wait.abort_flag = &comm->abort_flag;
    p->wait.timeout_ns = comm->timeout_ms * 1000000;
    p->wait.spin = comm->spin;
    p->wait.peer = 0;
    p->wait.peer_alive = health_peer_alive;
    p->wait.arg = comm;
    p->wait.fail = &comm->op_fail;
    p->wait.other_gone = health_other_gone;
    p->wait.gate = NULL;
    p->divisor = a->op == chorusAvg ? (uint64_t)comm->nranks : 0;
    p->stream_out = big && !coll_in_place(comm, a);
    p->stream_send = big;
    p->win_copy_ns = -1;
}

/* fill_prims for the direct algorithms, whose waits have a gate (comm->direct_spin). */
static void fill_direct_prims(chorusComm_t comm, const coll_args_t *a, prims_t *p)
{
    fill_prims(comm, a, p);
    p->wait.spin = comm->direct_spin;
}

static conn_req_t tree_req(conn_dir_t dir, int peer, int tag, size_t slot, comm_conn_t *cc)
{
    return (conn_req_t){.dir = dir, .peer = peer, .tag = tag, .slot_nbytes = slot, .cc = cc};
}

/* Connect every channel's tree on first use (all ranks reach this in the same call: they run the
 * same collective and the tuner picks the same algorithm everywhere). */
static chorusResult_t connect_trees(chorusComm_t comm)
{
    if (comm->trees_connected || comm->nranks == 1)
        return chorusSuccess;
    conn_req_t reqs[MAX_CHANNELS * 2 * (TREE_MAX_DOWN + 1)];
    int n = 0;
    size_t slot = (size_t)(comm->params.buffsize / comm->params.steps);
    for (int c = 0; c < comm->nchannels; c++) {
        channel_t *ch = &comm->channels[c];
        if (ch->tree.up >= 0) {
            reqs[n++] = tree_req(CONN_SEND, ch->tree.up, TREE_UP_TAG(c), slot, &ch->tree_up_send);
            reqs[n++] =
                tree_req(CONN_RECV, ch->tree.up, TREE_DOWN_TAG(c), slot, &ch->tree_down_recv);
        }
        for (int i = 0; i < ch->tree.ndown; i++) {
            reqs[n++] =
                tree_req(CONN_RECV, ch->tree.down[i], TREE_UP_TAG(c), slot, &ch->tree_up_recv[i]);
            reqs[n++] = tree_req(CONN_SEND, ch->tree.down[i], TREE_DOWN_TAG(c), slot,
                                 &ch->tree_down_send[i]);
        }
    }
    CHECK(comm_connect(comm, reqs, n));
    comm->trees_connected = 1;
    return chorusSuccess;
}

static void tree_view(const tree_t *t, comm_conn_t *up_send, comm_conn_t *down_recv,
                      comm_conn_t *const *up_recv, comm_conn_t *const *down_send, tree_conns_t *v)
{
    memset(v, 0, sizeof(*v));
    v->up_send = t->up >= 0 ? &up_send->conn : NULL;
    v->down_recv = t->up >= 0 ? &down_recv->conn : NULL;
    v->ndown = t->ndown;
    for (int i = 0; i < t->ndown; i++) {
        v->up_recv[i] = &up_recv[i]->conn;
        v->down_send[i] = &down_send[i]->conn;
    }
}

static void want_conn(chorusComm_t comm, conn_dir_t dir, int peer, int sendrecv, conn_req_t *reqs,
                      int *n);

/* Broadcast or Reduce over a tree rooted at the call's root (tree.c), on one channel made of the
 * point-to-point connections of its edges (built on first contact, as for send/recv). */
static chorusResult_t run_rooted_tree(chorusComm_t comm, const coll_args_t *a)
{
    tree_t t;
    CHECK(graph_build_tree(comm->nranks, comm->rank, comm->host_of, 0, a->root, &t));
    conn_req_t reqs[2 * (TREE_MAX_DOWN + 1)];
    int nreq = 0;
    if (t.up >= 0) {
        want_conn(comm, CONN_SEND, t.up, 0, reqs, &nreq);
        want_conn(comm, CONN_RECV, t.up, 0, reqs, &nreq);
    }
    for (int i = 0; i < t.ndown; i++) {
        want_conn(comm, CONN_SEND, t.down[i], 0, reqs, &nreq);
        want_conn(comm, CONN_RECV, t.down[i], 0, reqs, &nreq);
    }
    if (nreq > 0)
        CHECK(comm_connect(comm, reqs, nreq));
    comm_conn_t *up_recv[TREE_MAX_DOWN], *down_send[TREE_MAX_DOWN];
    for (int i = 0; i < t.ndown; i++) {
        up_recv[i] = &comm->p2p_recv[t.down[i]];
        down_send[i] = &comm->p2p_send[t.down[i]];
    }
    int up = t.up >= 0 ? t.up : comm->rank;
    tree_conns_t view;
    tree_view(&t, &comm->p2p_send[up], &comm->p2p_recv[up], up_recv, down_send, &view);
    channel_work_t w;
    memset(&w, 0, sizeof(w));
    fill_prims(comm, a, &w.prims);
    w.tree = &view;
    w.args = a;
    w.nchannels = 1;
    return algo_program(a->kind, 1)(&w);
}

static chorusResult_t run_channels(chorusComm_t comm, const coll_args_t *a, tune_choice_t choice);
static chorusResult_t run_zc_vote(chorusComm_t comm, const coll_args_t *a, tune_choice_t choice);
static chorusResult_t run_p2p(chorusComm_t comm, const comm_op_t *ops, int nops);

/* An all-to-all: through the node-local windows (direct.c) up to comm->alltoall_direct_max bytes
 * a rank (CHORUS_ALLTOALL_DIRECT_MAX; by default only where ranks outnumber cores) on one host,
 * else as one send/recv loop (p2p.c). Every rank decides alike: the size, the ranks and what
 * they agreed (the windows too: where a rank could not make its window, all learn it in the same
 * exchange and use send/recv). */
static __attribute__((noinline)) chorusResult_t run_alltoall(chorusComm_t comm,
                                                             const coll_args_t *a)
{
    size_t nbytes = a->count * dtype_nbytes(a->dtype) * (size_t)comm->nranks;
    if (comm->alltoall_direct_max > 0 && nbytes <= (uint64_t)comm->alltoall_direct_max &&
        comm->nranks > 1 && comm->nranks <= DIRECT_MAX_RANKS && comm->tuner.topo.direct) {
        CHECK(window_connect(comm));
        if (comm->tuner.topo.direct) {
            prims_t p;
            fill_direct_prims(comm, a, &p);
            return direct_program(&p, &comm->win_view, a, 0);
        }
    }
    comm_op_t op;
    memset(&op, 0, sizeof(op));
    op.comm = comm;
    op.args = *a;
    return run_p2p(comm, &op, 1);
}

/* A collective by the direct program (one-shot, two-shot; direct.c). How a rank copies its input
 * into its window (CHORUS_WINDOW_ADAPT): plainly below 32 KiB (slots: window.c's rule), streamed
 * from 32 KiB, and chosen by win_plan from 32 KiB for all-reduces, reduces and reduce-scatters
 * where ranks share cores. A copy over lines a peer read the call before takes them back first
 * where plain, which costs 5-24x a private write in some minutes on this VM. Measured on the AMD
 * VM of 2026-12-07, both ways alternated (four to six rounds of all_reduce_perf or broadcast_perf
 * -b 32K -e 4M -f 4 -w 10 -n 50, median and range of each way's times):
 *   - 2 ranks, all-reduce: even (512 KiB 62.2 us, 60.4-69.4, streamed, 62.6 plain, 54.6-335.1);
 *     plain stores ran 4-5x slower in the runs that met the state in which a write over lines a
 *     peer has read costs 7-24x a private one (take_back), streaming never;
 *   - 4 ranks on 2 cores, broadcast: streamed as fast or faster (2 MiB 286 us against 301, and
 *     212-376 against 246-1261);
 *   - 4 ranks on 2 cores, all-reduce: plain stores won by 1.3-1.5x where they did not collapse
 *     (128 KiB 37 us against 52; a reader on the writer's core reads them from its cache) and
 *     lost by 4x where they did (151.7 against 52): there the plan chooses, by what the rank's
 *     own copies cost, not by the call's time, which waits for the others and for their turns on
 *     the cores (chosen by call times, the way it chose cost more than either). */
static chorusResult_t run_direct(chorusComm_t comm, const coll_args_t *a, int twoshot)
{
    prims_t p;
    fill_direct_prims(comm, a, &p);
    /* Small calls first, by a bound on the call's larger buffer. The all-gather chooses its
     * window copies by rules of its own (window.c); fill_prims streams calls from
     * CHORUS_NT_MIN_BYTES. */
    if (a->count * p.esize * (size_t)comm->nranks < SLOT_ADAPT_MIN_NBYTES ||
        a->kind == COLL_ALLGATHER || comm->win_adapt == 0 || p.stream_send ||
        a->count * p.esize * (a->kind == COLL_REDUCESCATTER ? (size_t)comm->nranks : 1) <
            SLOT_ADAPT_MIN_NBYTES)
        return direct_program(&p, &comm->win_view, a, twoshot);
    if (comm->win_adapt == 1 && (!comm->over || a->kind == COLL_BROADCAST)) {
        p.stream_send = 1;
        return direct_program(&p, &comm->win_view, a, twoshot);
    }
    adapt_call_t adapt;
    adapt_begin(comm, 1, &comm->win_plan, a, &adapt);
    if (adapt.k >= 0) {
        p.stream_send = adapt.stream;
        p.win_copy_ns = 0;
    }
    CHECK(direct_program(&p, &comm->win_view, a, twoshot));
    if (p.win_copy_ns > 0) /* a broadcast's other ranks, or inputs read in place, copy none */
        adapt_end(comm, a, &adapt, p.win_copy_ns, "window copies");
    return chorusSuccess;
}

HOT_PATH static chorusResult_t run_coll(chorusComm_t comm, const coll_args_t *a)
{
    size_t esize = dtype_nbytes(a->dtype);
    if (a->kind == COLL_ALLTOALL)
        return run_alltoall(comm, a);
    /* The model prices every algorithm at every channel count: calls of one size ask it once. */
    tune_choice_t choice;
    if ((unsigned)a->kind < TUNE_NCOLLS && comm->tune_cache[a->kind].valid &&
        comm->tune_cache[a->kind].nbytes == a->count * esize) {
        choice = comm->tune_cache[a->kind].choice;
    } else {
        choice = tune_pick(&comm->tuner, a->kind, a->count * esize);
        if ((unsigned)a->kind < TUNE_NCOLLS) {
            comm->tune_cache[a->kind].nbytes = a->count * esize;
            comm->tune_cache[a->kind].choice = choice;
            comm->tune_cache[a->kind].valid = 1;
        }
    }
    if ((choice.algo == ALGO_ONESHOT || choice.algo == ALGO_TWOSHOT) && comm->nranks > 1) {
        TRACE(SUB_TUNING, "%s of %zu bytes: %s, model %.1f us", coll_name(a->kind),
              a->count * esize, algo_name(choice.algo), choice.predicted_us);
        CHECK(window_connect(comm));
        return run_direct(comm, a, choice.algo == ALGO_TWOSHOT);
    }
    int64_t zc_min = a->kind == COLL_ALLREDUCE       ? comm->zc_allreduce_min
                     : a->kind == COLL_BROADCAST     ? comm->zc_broadcast_min
                     : a->kind == COLL_REDUCESCATTER ? comm->zc_reducescatter_min
                                                     : 0;
    if (zc_min > 0 && a->count * esize >= (uint64_t)zc_min && comm->nranks > 1 &&
        comm->params.algo[0] == '\0' && comm->tuner.topo.direct)
        return run_zc_vote(comm, a, choice);
    return run_channels(comm, a, choice);
}

/* A large all-reduce, broadcast or reduce-scatter inside one host (CHORUS_ZCOPY_*_MIN,
 * CHORUS_ALGO unset) that the tuner gives the ring: the direct program reading chorusMemAlloc
 * memory in place when the buffers allow it (direct_zc_vote), else the tuner's choice. Every
 * rank gets here in the same call (the test above reads only what every rank shares) and the
 * vote's answer is the same everywhere. 2 ranks, chorusMemAlloc buffers: all-reduce 16 MiB
 * 1.07-1.09 ms against the ring's 1.40-1.57, 64 MiB 5.3-6.1 against 7.8-8.4; broadcast 1-16 MiB
 * 1.4-2.5x the chain, 64 MiB 1.03-1.21x; reduce-scatter 2-32 MiB 1.6-2.4x the ring
 * (perftests/HISTORY.md), with inputs written once; written before each call, broadcasts below
 * 64 MiB and reduce-scatters below 16 MiB of output lost, hence their defaults
 * (perftests/README.md, "chorusMemAlloc buffers"). */
static __attribute__((noinline)) chorusResult_t run_zc_vote(chorusComm_t comm, const coll_args_t *a,
                                                            tune_choice_t choice)
{
    CHECK(window_connect(comm));
    if (comm->tuner.topo.direct && comm->win_view.zc_find != NULL) {
        prims_t p;
        int won = 0;
        fill_direct_prims(comm, a, &p);
        CHECK(direct_zc_vote(&p, &comm->win_view, a, &won));
        TRACE(SUB_TUNING, "%s of %zu bytes: zero-copy vote %s", coll_name(a->kind),
              a->count * p.esize, won ? "won: direct, in place" : "lost: the tuner's choice");
        if (won && a->kind == COLL_ALLREDUCE) {
            comm->zc_allreduce_won++;
            return direct_allreduce_zc(&p, &comm->win_view, a);
        }
        if (won) {
            if (a->kind == COLL_BROADCAST)
                comm->zc_broadcast_won++;
            else
                comm->zc_reducescatter_won++;
            return direct_program(&p, &comm->win_view, a, 0);
        }
    }
    return run_channels(comm, a, choice);
}

/* A collective on the channels (ring or tree): apart from run_coll, whose direct calls then need
 * neither its code nor its 12 KiB of stack (tasks, views). */
static __attribute__((noinline)) chorusResult_t
run_channels(chorusComm_t comm, const coll_args_t *a, tune_choice_t choice)
{
    size_t esize = dtype_nbytes(a->dtype);
    int tree = choice.algo == ALGO_TREE && comm->nranks > 1;
    int nch = comm->nchannels;
    if (!comm->nchannels_forced && choice.nchannels < nch)
        nch = choice.nchannels < 1 ? 1 : choice.nchannels;
    TRACE(SUB_TUNING, "%s of %zu bytes: %s on %d channel(s), model %.1f us", coll_name(a->kind),
          a->count * esize, algo_name(choice.algo), nch, choice.predicted_us);
    if (tree && a->kind != COLL_ALLREDUCE)
        return run_rooted_tree(comm, a);
    if (tree)
        CHECK(connect_trees(comm));
    coll_task_t tasks[MAX_CHANNELS];
    tree_conns_t views[MAX_CHANNELS];
    adapt_call_t adapt;
    adapt_begin(comm, comm->slot_adapt, &comm->slot_plan, a, &adapt);
    for (int c = 0; c < nch; c++) {
        channel_t *ch = &comm->channels[c];
        fill_prims(comm, a, &tasks[c].work.prims);
        if (adapt.k >= 0)
            tasks[c].work.prims.stream_send = adapt.stream;
        tasks[c].work.prims.send = comm->nranks > 1 ? &ch->send.conn : NULL;
        tasks[c].work.prims.recv = comm->nranks > 1 ? &ch->recv.conn : NULL;
        tasks[c].work.ring = &ch->ring;
        tasks[c].work.tree = NULL;
        if (tree) {
            comm_conn_t *up_recv[TREE_MAX_DOWN], *down_send[TREE_MAX_DOWN];
            for (int i = 0; i < TREE_MAX_DOWN; i++) {
                up_recv[i] = &ch->tree_up_recv[i];
                down_send[i] = &ch->tree_down_send[i];
            }
            tree_view(&ch->tree, &ch->tree_up_send, &ch->tree_down_recv, up_recv, down_send,
                      &views[c]);
            tasks[c].work.tree = &views[c];
        }
        tasks[c].work.args = a;
        tasks[c].work.channel = c;
        tasks[c].work.nchannels = nch;
        tasks[c].program = algo_program(a->kind, tree);
        tasks[c].abort_flag = &comm->abort_flag;
    }
    CHECK(exec_pool_run(comm->pool, nch, run_channel, tasks, sizeof(coll_task_t)));
    adapt_end(comm, a, &adapt, -1, "send slots");
    return chorusSuccess;
}

static chorusResult_t run_dev(chorusComm_t comm, const comm_op_t *op)
{
    prims_t p;
    fill_prims(comm, &op->args, &p);
    return cuda_dev_coll(comm, op, &p, coll_name(op->args.kind));
}

/* Add the connection end for (dir, peer) to reqs unless it exists or is already listed: a
 * send/recv one (sendrecv) or a rooted tree's. */
static void want_conn(chorusComm_t comm, conn_dir_t dir, int peer, int sendrecv, conn_req_t *reqs,
                      int *n)
{
    comm_conn_t *send = sendrecv ? comm->sr_send : comm->p2p_send;
    comm_conn_t *recv = sendrecv ? comm->sr_recv : comm->p2p_recv;
    comm_conn_t *cc = dir == CONN_SEND ? &send[peer] : &recv[peer];
    if (peer == comm->rank || cc->ready)
        return;
    for (int i = 0; i < *n; i++)
        if (reqs[i].cc == cc)
            return;
    size_t slot = (size_t)(comm->params.p2p_buffsize / comm->params.steps);
    reqs[(*n)++] = (conn_req_t){dir, peer, sendrecv ? SENDRECV_TAG : P2P_TAG, slot, cc, NULL};
}

static chorusResult_t run_p2p(chorusComm_t comm, const comm_op_t *ops, int nops)
{
    int n = comm->nranks, me = comm->rank;
    /* The lists, then a copy of an in-place all-to-all's input (run_alltoall passes one alone,
     * whose bytes check_op bounded), in the communicator's scratch memory (kept between calls). */
    size_t cap = 0, copies = 0;
    for (int i = 0; i < nops; i++) {
        const coll_args_t *a = &ops[i].args;
        cap += a->kind == COLL_ALLTOALL ? (size_t)n : 1;
        if (a->kind == COLL_ALLTOALL && a->sendbuff == a->recvbuff)
            copies += (a->count * dtype_nbytes(a->dtype) * n + 63) & ~(size_t)63;
    }
    size_t lists = (2 * cap * sizeof(p2p_op_t) + 2 * cap * sizeof(conn_req_t) +
                    2 * (size_t)n * sizeof(int) + 63) &
                   ~(size_t)63;
    char *mem = scratch_get(&comm->p2p_scratch, lists + copies);
    if (mem == NULL)
        return ERR(chorusSystemError, SUB_P2P,
                   "out of memory for %zu bytes of send/recv lists and in-place all-to-all copies",
                   lists + copies);
    p2p_op_t *sends = (p2p_op_t *)mem, *recvs = sends + cap;
    conn_req_t *reqs = (conn_req_t *)(recvs + cap);
    int *last_send = (int *)(reqs + 2 * cap), *last_recv = last_send + n; /* by peer: prev */
    char *copy = mem + lists;
    int ns = 0, nr = 0, nreq = 0;
    for (int p = 0; p < n; p++)
        last_send[p] = last_recv[p] = -1;
    for (int i = 0; i < nops; i++) {
        const coll_args_t *a = &ops[i].args;
        size_t nbytes = a->count * dtype_nbytes(a->dtype);
        if (nbytes == 0)
            continue;
        if (a->kind == COLL_SEND || a->kind == COLL_RECV) {
            int send = a->kind == COLL_SEND;
            comm_conn_t *cc = send ? &comm->sr_send[a->root] : &comm->sr_recv[a->root];
            int *last = send ? &last_send[a->root] : &last_recv[a->root];
            p2p_op_t o = {a->root == me ? NULL : &cc->conn,
                          a->root,
                          send ? (char *)a->sendbuff : a->recvbuff,
                          nbytes,
                          0,
                          *last,
                          -1,
                          -1};
            *last = send ? ns : nr;
            if (send)
                sends[ns++] = o;
            else
                recvs[nr++] = o;
            /* Both directions on first contact: a pair's connections are then built by the
             * first p2p call of each side with the other, whatever those calls are. Building only
             * the direction in use needs the matching call to run now, so Send-then-Recv on both
             * ranks (or a grouped Recv+Send against a Send, then a Recv) hung in comm_connect. */
            want_conn(comm, CONN_SEND, a->root, 1, reqs, &nreq);
            want_conn(comm, CONN_RECV, a->root, 1, reqs, &nreq);
            continue;
        }
        /* All-to-all: block p of sendbuff to rank p, block p of recvbuff from rank p. In place,
         * the send blocks are copied aside first so receiving cannot overwrite them. */
        const char *src = a->sendbuff;
        if (a->sendbuff == a->recvbuff) {
            memcpy(copy, a->sendbuff, nbytes * n);
            src = copy;
            copy += (nbytes * n + 63) & ~(size_t)63;
        }
        for (int k = 0; k < n; k++) {
            int p = (me + k) % n; /* start with self, then spread over peers */
            sends[ns] = (p2p_op_t){p == me ? NULL : &comm->sr_send[p].conn,
                                   p,
                                   (char *)src + nbytes * p,
                                   nbytes,
                                   0,
                                   last_send[p],
                                   -1,
                                   -1};
            recvs[nr] = (p2p_op_t){p == me ? NULL : &comm->sr_recv[p].conn,
                                   p,
                                   (char *)a->recvbuff + nbytes * p,
                                   nbytes,
                                   0,
                                   last_recv[p],
                                   -1,
                                   -1};
            last_send[p] = ns++;
            last_recv[p] = nr++;
            want_conn(comm, CONN_SEND, p, 1, reqs, &nreq);
            want_conn(comm, CONN_RECV, p, 1, reqs, &nreq);
        }
    }
    if (nreq > 0)
        CHECK(comm_connect(comm, reqs, nreq));
    /* No other_gone: a send/recv waits only on its own peers. */
    wait_ctx_t w = {.abort_flag = &comm->abort_flag,
                    .timeout_ns = comm->timeout_ms * 1000000,
                    .spin = comm->spin,
                    .peer = -1,
                    .peer_alive = health_peer_alive,
                    .arg = comm,
                    .fail = &comm->op_fail};
    return p2p_run(sends, ns, recvs, nr, &host_memops, &w);
}

/* An operation that found its communicator aborted before it ran: the error every rank reports
 * first (health_report_once), or why this one is refused. */
static __attribute__((noinline, cold)) chorusResult_t refuse_aborted(chorusComm_t comm,
                                                                     const coll_args_t *a)
{
    chorusResult_t res =
        health_report_once(comm, coll_name(a->kind), !is_p2p(a->kind) && a->count > 0);
    if (res != chorusSuccess)
        return res;
    char cause[HEALTH_TEXT_BYTES];
    comm_failure_text(comm, cause, sizeof(cause));
    return ERR(chorusInvalidUsage, SUB_COLL,
               "%s (rank %d): the communicator was aborted before the call ran: %s",
               coll_name(a->kind), comm->rank, cause);
}

/* op, the collective numbered seq, failed: the error every rank reports (health_explain). */
static __attribute__((noinline, cold)) chorusResult_t
explain_coll(chorusComm_t comm, const comm_op_t *op, uint64_t seq, chorusResult_t res)
{
    char what[96];
    snprintf(what, sizeof(what), "%s #%llu", coll_name(op->args.kind), (unsigned long long)seq);
    return health_explain(comm, what, seq, res);
}

HOT_PATH chorusResult_t comm_exec(chorusComm_t comm, comm_op_t *ops, int n)
{
    chorusResult_t res = chorusSuccess;
    debug_set_rank(comm->rank);
    int any_dev = 0;
    for (int i = 0; i < n; i++)
        any_dev |= ops[i].on_device;
    if ((any_dev || comm->cuda_async != NULL) && !cuda_stage_is_worker()) {
        /* Device buffers on one stream: queued there and on the CUDA worker, returns at once.
         * Anything else waits for what that worker still holds, so every rank runs its
         * operations in the order it issued them. */
        int taken = 0;
        if (any_dev)
            res = cuda_stage_async(comm, ops, n, coll_name(ops[0].args.kind), &taken);
        if (taken)
            return res;
        if (comm->cuda_async != NULL)
            CHECK(cuda_stage_drain(comm));
    }
    fifo_excl_lock(&comm->exec_lock);
    /* Collectives in issue order, then every send/recv of the batch as one progress loop: a
     * group's point-to-point calls must all progress together (their connections too), whatever
     * collectives stand between them. Every rank orders its group the same way. */
    comm_op_t *p2p = NULL;
    int np2p = 0;
    uint64_t seq = 0;
    int last = -1; /* the collective that ran last (its name is formatted only on failure) */
    int ran = 0; /* res is the result of running an operation (not of refusing one) */
    memset(&comm->op_fail, 0, sizeof(comm->op_fail));
    __atomic_store_n(&comm->in_op, 1, __ATOMIC_RELEASE);
    /* Device buffers: run on pinned host copies of them (cuda_stage.c). */
    comm_op_t *user = ops, *staged = NULL;
    int direct = any_dev && cuda_dev_wanted(comm, ops, n); /* or GPU to GPU (cuda_dev.c) */
    for (int i = 0; any_dev && i < n && !direct && staged == NULL && res == chorusSuccess; i++) {
        if (!ops[i].on_device)
            continue;
        if ((staged = scratch_get(&comm->exec_scratch, 2 * sizeof(comm_op_t) * n)) == NULL) {
            res = ERR(chorusSystemError, SUB_COLL, "out of memory for a batch of %d calls", n);
            break;
        }
        memcpy(staged, ops, sizeof(comm_op_t) * n);
        res = cuda_stage_in(comm, staged, n, coll_name(ops[i].args.kind));
        ops = staged;
    }
    transport_ops_begin(&comm->tc);
    for (int i = 0; i < n && res == chorusSuccess; i++) {
        if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE)) {
            res = refuse_aborted(comm, &ops[i].args);
            break;
        }
        if (is_p2p(ops[i].args.kind)) {
            /* The batch's sends and receives after its staged copies (the same size asked:
             * the same memory). */
            comm_op_t *mem =
                p2p == NULL ? scratch_get(&comm->exec_scratch, 2 * sizeof(comm_op_t) * n) : NULL;
            if (mem != NULL)
                p2p = mem + n;
            if (p2p == NULL)
                res = ERR(chorusSystemError, SUB_P2P, "out of memory for a batch of %d calls", n);
            else
                p2p[np2p++] = ops[i];
        } else if (ops[i].args.count > 0) {
            /* Every rank numbers its collectives alike: the number names the stuck one. */
            /* One writer (under exec_lock): a store, not a locked add. */
            seq = __atomic_load_n(&comm->coll_entered, __ATOMIC_RELAXED) + 1;
            __atomic_store_n(&comm->coll_entered, seq, __ATOMIC_RELEASE);
            last = i;
            if (comm->params.check_args && (res = args_agree(comm, &ops[i].args, seq)) != 0) {
                ran = res != chorusInvalidUsage; /* a refusal aborts nothing; a timeout does */
                break;
            }
            res = direct ? run_dev(comm, &ops[i]) : run_coll(comm, &ops[i].args);
            ran = 1;
            if (res == chorusSuccess)
                __atomic_store_n(&comm->coll_completed, seq, __ATOMIC_RELEASE);
        }
    }
    uint64_t batch = 0; /* the point-to-point batch's number (named only on failure) */
    if (res == chorusSuccess && np2p > 0) {
        batch = ++comm->p2p_calls;
        seq = 0;
        res = run_p2p(comm, p2p, np2p);
        ran = 1;
    }
    transport_ops_end(&comm->tc);
    if (res == chorusSuccess && staged != NULL)
        res = cuda_stage_out(comm, user, staged, n, coll_name(user[0].args.kind));
    /* Turn what the waits saw into the error every rank reports, and tell the others. */
    if (res != chorusSuccess && ran) {
        if (seq != 0 && last >= 0) {
            res = explain_coll(comm, &ops[last], seq, res);
        } else {
            char what[96]; /* the failed batch, named only on failure */
            what[0] = '\0';
            if (batch != 0)
                snprintf(what, sizeof(what), "%s%s (point-to-point batch #%llu)",
                         coll_name(p2p[0].args.kind), np2p > 1 ? " and others" : "",
                         (unsigned long long)batch);
            res = health_explain(comm, what, seq, res);
        }
    }
    __atomic_store_n(&comm->in_op, 0, __ATOMIC_RELEASE);
    fifo_excl_unlock(&comm->exec_lock);
    return res;
}

/* comm_exec for one host collective of some elements outside a group and a stream, issue's
 * common case: the same steps in the same order without the batch's loops, its device staging
 * and its point-to-point batch (a 2-rank 8 B broadcast's root ran 945 instructions a call through
 * comm_exec, 834 through this, callgrind). check_op has set the rank for the log. */
HOT_PATH static chorusResult_t exec_one(chorusComm_t comm, comm_op_t *op)
{
    if (comm->cuda_async != NULL) /* device calls still queued: comm_exec waits for them */
        return comm_exec(comm, op, 1);
    fifo_excl_lock(&comm->exec_lock);
    memset(&comm->op_fail, 0, sizeof(comm->op_fail));
    __atomic_store_n(&comm->in_op, 1, __ATOMIC_RELEASE);
    transport_ops_begin(&comm->tc);
    chorusResult_t res;
    uint64_t seq = 0;
    if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE)) {
        res = refuse_aborted(comm, &op->args);
    } else {
        /* One writer (under exec_lock): a store, not a locked add. */
        seq = __atomic_load_n(&comm->coll_entered, __ATOMIC_RELAXED) + 1;
        __atomic_store_n(&comm->coll_entered, seq, __ATOMIC_RELEASE);
        res = comm->params.check_args ? args_agree(comm, &op->args, seq) : chorusSuccess;
        if (res == chorusSuccess)
            res = run_coll(comm, &op->args);
        else if (res == chorusInvalidUsage)
            seq = 0; /* refused, not run: nothing to explain, nothing aborted */
        if (res == chorusSuccess)
            __atomic_store_n(&comm->coll_completed, seq, __ATOMIC_RELEASE);
    }
    transport_ops_end(&comm->tc);
    if (res != chorusSuccess && seq != 0)
        res = explain_coll(comm, op, seq, res);
    __atomic_store_n(&comm->in_op, 0, __ATOMIC_RELEASE);
    fifo_excl_unlock(&comm->exec_lock);
    return res;
}

HOT_PATH static chorusResult_t issue(comm_op_t *op)
{
    /* Counted before anything reads the communicator: a concurrent chorusCommAbort either
     * refuses this call here or waits for it before freeing the communicator. */
    int held;
    CHECK(comm_call_enter(op->comm, coll_name(op->args.kind), &held));
    int on_device = 0;
    chorusResult_t res = check_op(op, &on_device);
    if (res == chorusSuccess && on_device) {
        /* Staged through host memory in the caller's thread, in order on the CUDA stream. */
        op->on_device = 1;
        op->cuda_stream = op->stream;
        op->stream = NULL;
    }
    if (res == chorusSuccess && !on_device && op->stream == NULL && op->args.count == 0 &&
        !is_p2p(op->args.kind) && !group_active()) {
        /* A collective of no elements (the same count on every rank): checked, nothing to run
         * (comm_exec would run nothing either); 4 ranks, 8 B all-gather: 0.01 us for Open MPI. */
        comm_call_leave(op->comm, res, held);
        return res;
    }
    if (res == chorusSuccess && !group_active() && op->stream == NULL) {
        res = on_device || is_p2p(op->args.kind) ? comm_exec(op->comm, op, 1)
                                                 : exec_one(op->comm, op);
        /* Records the error text in the communicator; after it, a concurrent chorusCommAbort
         * may free the communicator, so it is not touched again. */
        comm_call_leave(op->comm, res, held);
        return res;
    }
    if (res == chorusSuccess) /* a group or a stream counts the operation again when it runs */
        res = group_active() ? group_add(op) : stream_enqueue(op->stream, op, 1);
    res = comm_api_return(op->comm, res);
    comm_call_leave(op->comm, chorusSuccess, held); /* this call's count: nothing ran */
    return res;
}

/* A collective of no elements, no stream, outside a group, on a communicator this thread has
 * used: its arguments checked and nothing else, without building the call (4 ranks, an 8 B
 * all-gather has no element per rank: Open MPI returns such a call in 3 ns, the general way here
 * took 13-18). Anything else, or anything wrong, goes the general way, which reports it. */
HOT_PATH static inline int empty_done(chorusComm_t comm, coll_kind_t kind, chorusDataType_t dtype,
                                      chorusRedOp_t op, int root)
{
    int reduces = kind == COLL_ALLREDUCE || kind == COLL_REDUCE || kind == COLL_REDUCESCATTER;
    if (is_p2p(kind) || group_active() || debug_has_error || (unsigned)dtype >= chorusNumTypes ||
        (reduces && (unsigned)op >= chorusNumOps))
        return 0;
    return comm_call_empty(comm, root);
}

#define OP(kind_, send_, recv_, count_, dtype_, op_, root_)                                        \
    if ((count_) == 0 && stream == NULL && empty_done(comm, kind_, dtype_, op_, root_))            \
        return chorusSuccess;                                                                      \
    comm_op_t o = {comm, stream, {kind_, send_, recv_, count_, dtype_, op_, root_}, 0, NULL, 0};   \
    return issue(&o)

HOT_PATH chorusResult_t chorusAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                        chorusDataType_t datatype, chorusRedOp_t op,
                                        chorusComm_t comm, chorusStream_t stream)
{
    OP(COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0);
}

HOT_PATH chorusResult_t chorusBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                        chorusDataType_t datatype, int root, chorusComm_t comm,
                                        chorusStream_t stream)
{
    OP(COLL_BROADCAST, sendbuff, recvbuff, count, datatype, chorusSum, root);
}

HOT_PATH chorusResult_t chorusReduce(const void *sendbuff, void *recvbuff, size_t count,
                                     chorusDataType_t datatype, chorusRedOp_t op, int root,
                                     chorusComm_t comm, chorusStream_t stream)
{
    OP(COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root);
}

HOT_PATH chorusResult_t chorusAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                        chorusDataType_t datatype, chorusComm_t comm,
                                        chorusStream_t stream)
{
    OP(COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, chorusSum, 0);
}

HOT_PATH chorusResult_t chorusReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                            chorusDataType_t datatype, chorusRedOp_t op,
                                            chorusComm_t comm, chorusStream_t stream)
{
    OP(COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0);
}

chorusResult_t chorusAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                              chorusDataType_t datatype, chorusComm_t comm, chorusStream_t stream)
{
    OP(COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, chorusSum, 0);
}

chorusResult_t chorusSend(const void *sendbuff, size_t count, chorusDataType_t datatype, int peer,
                          chorusComm_t comm, chorusStream_t stream)
{
    OP(COLL_SEND, sendbuff, NULL, count, datatype, chorusSum, peer);
}

chorusResult_t chorusRecv(void *recvbuff, size_t count, chorusDataType_t datatype, int peer,
                          chorusComm_t comm, chorusStream_t stream)
{
    OP(COLL_RECV, NULL, recvbuff, count, datatype, chorusSum, peer);
}
