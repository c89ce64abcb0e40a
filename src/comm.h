/*
 * comm.h: the communicator and the pieces of the core that share it.
 *
 * A communicator owns its bootstrap, the peer table, its channels (one ring each, with a send
 * connection to the ring's next rank and a recv connection from its previous rank), lazily built
 * point-to-point connections, and the executor pool. Operations on one communicator run one at a
 * time (exec_lock), in the order they were issued on each thread or stream.
 */
#ifndef CHORUS_COMM_H
#define CHORUS_COMM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "algo.h"
#include "bootstrap.h"
#include "executor.h"
#include "fifo.h"
#include "health.h"
#include "params.h"
#include "slot_adapt.h"
#include "topo.h"
#include "transport.h"
#include "tuning.h"

#define COMM_MAGIC 0x43484f52u /* "CHOR" */
#define COMM_DEAD_MAGIC 0xdeadc0deu
#define MAX_CHANNELS 32
#define P2P_TAG 0x7fff
#define DEVICE_RING_TAG 0x7ffe
#define SENDRECV_TAG 0x7ffd
/* Connection tags: ring of channel c: c; tree of channel c: TREE_UP_TAG(c) for child -> parent,
 * TREE_DOWN_TAG(c) for parent -> child; the rooted trees' pairs: P2P_TAG; send/recv and
 * all-to-all: SENDRECV_TAG (inside a host their slots carry headers, fifo_slot_hdr_t, which
 * only those calls' progress loop reads); the ring of device-buffer collectives over cuda_p2p
 * (cuda_dev.c): DEVICE_RING_TAG. */
#define TREE_UP_TAG(c) (64 + 2 * (c))
#define TREE_DOWN_TAG(c) (65 + 2 * (c))

/* Memory an operation needs for its own lists, kept for the next one (issue 6: no allocation on
 * the hot path once a call as large has run): grown, never shrunk, freed with its owner. */
typedef struct scratch {
    void *ptr;
    size_t cap;
} scratch_t;

/* At least nbytes of s's memory (what it held is not kept when it grows); NULL: out of memory. */
static inline void *scratch_get(scratch_t *s, size_t nbytes)
{
    if (nbytes > s->cap) {
        size_t cap = nbytes < 2 * s->cap ? 2 * s->cap : nbytes;
        void *p = malloc(cap);
        if (p == NULL)
            return NULL;
        free(s->ptr);
        s->ptr = p;
        s->cap = cap;
    }
    return s->ptr;
}

static inline void scratch_free(scratch_t *s)
{
    free(s->ptr);
    s->ptr = NULL;
    s->cap = 0;
}

/* One end of a connection with the transport that built it. */
typedef struct comm_conn {
    conn_t conn;
    transport_res_t res;
    const transport_ops_t *tp;
    int ready;
} comm_conn_t;

typedef struct channel {
    ring_t ring;
    comm_conn_t send; /* to ring.ranks[index + 1] */
    comm_conn_t recv; /* from ring.ranks[index - 1] */
    tree_t tree; /* tree c % 2 of the double binary tree */
    comm_conn_t tree_up_send; /* to tree.up */
    comm_conn_t tree_down_recv; /* from tree.up */
    comm_conn_t tree_up_recv[TREE_MAX_DOWN]; /* from tree.down[i] */
    comm_conn_t tree_down_send[TREE_MAX_DOWN]; /* to tree.down[i] */
} channel_t;

#define WIN_INLINE_RANKS 8

#define HOST_SEEN 4

struct chorusComm {
    uint32_t magic;
    int rank, nranks;
    int64_t timeout_ms;
    /* The last buffers this communicator's calls found host memory (enqueue.c check_buffer):
     * one passed again skips the look for a CUDA driver and the driver's question. */
    const void *host_seen[HOST_SEEN];
    unsigned host_seen_next;
    boot_t *boot;
    peer_info_t *peers;
    int nchannels;
    int nchannels_forced; /* CHORUS_NCHANNELS was set: use every channel for every size */
    int *host_of; /* [nranks]: host index of each rank (order of first appearance) */
    int nhosts;
    int max_local; /* most ranks on one host */
    int machine_ranks; /* most ranks on one physical machine (CHORUS_HOSTID aside) */
    topo_t *topo; /* this rank's host; NULL when the live machine could not be read */
    transport_comm_t tc; /* what transports share (net plugin, proxy thread) */
    int64_t spin; /* polls before a wait yields: CHORUS_SPIN, or a few when the machine's ranks
                   * outnumber its cores (a spinning waiter holds the core its peer needs) */
    int64_t direct_spin; /* the same for the direct algorithms' waits: none where ranks outnumber
                          * cores (their gate decides from the first poll), unless set */
    int over; /* the machine's ranks outnumber its cores */
    int args_refused; /* CHORUS_CHECK_ARGS refused the running call: nothing ran, nothing aborts
                       * (comm.c op_failed clears it) */
    int64_t nt_min; /* calls with outputs of this many bytes get streaming stores, out of place
                     * into the output and into send slots (prims_t's stream_out, stream_send):
                     * CHORUS_NT_MIN_BYTES; 0 (never) when the machine's ranks outnumber its
                     * cores, unless set */
    int64_t zc_allreduce_min; /* all-reduces this big vote for two-shot zero-copy (enqueue.c):
                               * CHORUS_ZCOPY_ALLREDUCE_MIN; 0 (never) when the machine's ranks
                               * outnumber its cores, unless set (every rank decides alike) */
    int64_t zc_broadcast_min; /* broadcasts this big vote (the root decides) for direct
                               * zero-copy: CHORUS_ZCOPY_BROADCAST_MIN, as set everywhere */
    int64_t zc_reducescatter_min; /* and reduce-scatters, output bytes (every rank votes); the
                                   * three are CHORUS_ZCOPY_MIN at least where not 0 (init.c) */
    int64_t zc_allgather_min; /* direct all-gathers this big (output) vote to push into
                               * chorusMemAlloc outputs: CHORUS_ZCOPY_ALLGATHER_MIN; 0 (never)
                               * when the machine's ranks outnumber its cores, unless set */
    int64_t zc_arpush_min; /* direct two-shot all-reduces this big vote to push into
                            * chorusMemAlloc outputs: CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN; 0 (never)
                            * when the machine's ranks outnumber its cores, unless set */
    int64_t alltoall_direct_max; /* all-to-alls of up to this many bytes a rank run direct
                                  * (enqueue.c): CHORUS_ALLTOALL_DIRECT_MAX, or ALLTOALL_OVER_MAX
                                  * where the machine's ranks outnumber its cores, unless set */
    tuner_t tuner;
    struct {
        size_t nbytes; /* the last call's size per collective, and the tuner's choice for it */
        tune_choice_t choice;
        int valid;
    } tune_cache[TUNE_NCOLLS];
    int trees_connected; /* channel trees are connected on their first use */
    char **win_base; /* [nranks]: direct windows, mapped on first use (window.c); else NULL */
    size_t win_map_nbytes;
    uint64_t win_seq; /* direct pieces run so far */
    uint64_t *win_done_seen; /* [nranks]: done flags as last read (direct.c) */
    direct_done_t win_done; /* this rank's done flag: published, pending (direct.c) */
    size_t win_slot; /* the slot size of the last piece through the window buffers (direct.c) */
    /* win_base and win_done_seen for up to WIN_INLINE_RANKS ranks: here, in the page every call
     * reads, not in heap blocks of their own (window.c) */
    char *win_base_inline[WIN_INLINE_RANKS];
    uint64_t win_done_inline[WIN_INLINE_RANKS];
    direct_view_t win_view;
    direct_gate_t win_gate; /* the gate of its waits, when win_view.gate points here */
    struct zc_map *zc_maps; /* [ZC_MAX_MAPS]: peers' chorusMemAlloc regions mapped (window.c) */
    uint64_t zc_clock;
    uint64_t zc_reads; /* pieces read in place from peers' chorusMemAlloc memory (direct.c) */
    uint64_t zc_pushes; /* inputs written straight into peers' chorusMemAlloc outputs (direct.c) */
    uint64_t zc_allreduce_pushed; /* all-reduces run by push (direct.c; tests look) */
    uint64_t cma_reads; /* peers' inputs read where they lie with process_vm_readv (direct.c) */
    /* peers' outputs written by process_vm_writev, by what wrote them (algo.h CMA_W_*) */
    uint64_t cma_writes[CMA_W_KINDS];
    uint64_t cma_cookie; /* read by the peers at window setup: may they read this process? */
    int64_t cma_adapt; /* CHORUS_CMA_ADAPT as taken: 0 where CHORUS_CMA_MIN is set, and
                        * where the machine's ranks outnumber its cores unless it is set */
    direct_adapt_t cma_plan; /* all-gathers' choice of path (direct_adapt.c), where on */
    uint64_t zc_allreduce_won; /* all-reduces whose zero-copy vote won (enqueue.c; tests look) */
    uint64_t zc_broadcast_won; /* broadcasts whose zero-copy vote won */
    uint64_t zc_reducescatter_won; /* reduce-scatters whose zero-copy vote won */
    comm_conn_t *p2p_send; /* [nranks], built on first use: the rooted trees' */
    comm_conn_t *p2p_recv;
    comm_conn_t *sr_send; /* [nranks], built on first use: send/recv and all-to-all */
    comm_conn_t *sr_recv;
    exec_pool_t *pool;
    fifo_excl_t exec_lock; /* one operation at a time */
    /* Waits stop while non-zero: 1 this rank stopped (chorusCommAbort, its own failure), 2 a
     * failure this rank learned of (health.c). */
    uint32_t abort_flag;
    uint32_t user_abort; /* chorusCommAbort was called: bootstrap waits stop too */
    chorusResult_t async_error; /* sticky error of a failed operation or a peer's notice */
    fail_record_t op_fail; /* what the running operation's waits saw first */
    uint64_t coll_entered, coll_completed; /* collectives entered / completed (status queries) */
    uint64_t p2p_calls; /* point-to-point batches run, for error messages */
    int in_op; /* an operation is running */
    uint32_t status_queries; /* status exchanges this rank started */
    int queued; /* operations issued and not yet finished (streams included) but for those
                 * counted in call slots (comm.c); atomic reads, counted up under the registry
                 * lock; the decrement is a call's last touch */
    scratch_t exec_scratch; /* comm_exec's lists of a batch (staged copies, sends and receives) */
    scratch_t p2p_scratch; /* run_p2p's send, receive and connection lists, in-place all-to-all's
                            * copies of its input; both under exec_lock */
    void *stage_base; /* pinned arena for device buffers (cuda_stage.c), under exec_lock */
    size_t stage_nbytes;
    void *stage_ctx; /* the CUDA context that allocated it */
    void *stage_busy; /* a stream whose wait failed: it may still copy into or out of the arena */
    struct cuda_async *cuda_async; /* the asynchronous way's worker and slots (cuda_stage.c) */
    int cuda_direct; /* device-buffer collectives run GPU to GPU over cuda_p2p (cuda_dev.c) */
    struct cuda_dev *cuda_dev; /* its stream, kernels and ring, from the first such call */
    pthread_mutex_t state_lock; /* guards async_error, last_error, failure */
    /* From here on, what calls do not read: the fields above (1.2 KiB on x86-64) lie in the
     * first page of the communicator, which comm_init aligns to a page (a process switch empties
     * the TLB here, so every page a call touches costs it again; debug.h's HOT_PATH). */
    char last_error[1024];
    comm_failure_t failure; /* the first failure this rank learned of (health.c) */
    params_t params;
    channel_t channels[MAX_CHANNELS];
    /* CHORUS_SLOT_ADAPT as taken: 0 where the machine's ranks outnumber its cores unless set,
     * and on more than one host; else the ring's and trees' slot stores are chosen in slot_plan
     * (slot_adapt.c, enqueue.c run_channels) */
    int64_t slot_adapt;
    slot_adapt_t slot_plan;
    /* CHORUS_WINDOW_ADAPT as taken (0 on more than one host): the direct algorithms' copies into
     * a rank's own window, where ranks share cores, are chosen in win_plan as slot_plan chooses
     * the slots' (enqueue.c run_direct; algorithms/direct_win.h direct_window_copy) */
    int64_t win_adapt;
    slot_adapt_t win_plan;
};
#define WIN_STREAM_PCT 70 /* win_plan's stream_pct (slot_adapt.h; init.c says why) */
_Static_assert(offsetof(struct chorusComm, last_error) <= 4096,
               "the fields every call reads fit the communicator's first page");

/* window.c: the direct algorithms' node-local windows. possible: every rank on this host and
 * reachable over shm. connect (collective, at init): map them where the tuner allows direct
 * algorithms; where a rank cannot, every rank turns them off (tuner.topo.direct = 0). */
int window_possible(chorusComm_t comm);
chorusResult_t window_connect(chorusComm_t comm);
void window_close(chorusComm_t comm);

/* One issued operation. */
typedef struct comm_op {
    chorusComm_t comm;
    chorusStream_t stream; /* NULL (run by the caller) or a host stream */
    coll_args_t args;
    int on_device; /* the buffers are CUDA device memory (cuda_stage.c) */
    void *cuda_stream; /* then: the caller's cudaStream_t (NULL: the legacy default stream) */
    int cuda_ordered; /* the CUDA worker runs it: the stream already waits for it (cuda_dev.c) */
} comm_op_t;

/* connect.c: build the given connection ends with the matching peers (collective over the ranks
 * involved: each end's peer calls this for the opposite end at the same point). */
typedef struct conn_req {
    conn_dir_t dir;
    int peer;
    int tag;
    size_t slot_nbytes;
    comm_conn_t *cc;
    const transport_ops_t *tp; /* NULL: the first of transport_table that can connect */
} conn_req_t;
chorusResult_t comm_connect(chorusComm_t comm, conn_req_t *reqs, int n);
void comm_conn_close(comm_conn_t *cc);

/* init.c */
chorusResult_t comm_init(chorusComm_t *comm_p, int nranks, const boot_id_t *id, int rank,
                         const chorusConfig_t *config);
void comm_free(chorusComm_t comm);

/* enqueue.c: run ops (all of one comm) now, in this thread. */
chorusResult_t comm_exec(chorusComm_t comm, comm_op_t *ops, int n);
/* comm.c: the registry of live handles (comm_check looks there before reading one). */
chorusResult_t comm_register(chorusComm_t comm);
void comm_unregister(chorusComm_t comm, int aborted);
/* Check the communicator handle at an API entry; sets the thread's log rank. */
chorusResult_t comm_check(chorusComm_t comm, const char *fn);
/* Record this thread's last error into comm (so chorusGetLastError(comm) finds it). */
chorusResult_t comm_api_return(chorusComm_t comm, chorusResult_t res);
/* Count an operation on comm as running; chorusInvalidUsage once comm is aborted. */
chorusResult_t comm_op_started(chorusComm_t comm, const char *fn);
/* Why comm stopped: the first failure it learned of, else its last error (under state_lock). */
void comm_failure_text(chorusComm_t comm, char *buf, size_t len);
void comm_op_finished(chorusComm_t comm, chorusResult_t res);
/* As comm_op_started/finished for a call run at once on this thread: counted in the thread's call
 * slot (no lock, no locked add) when it has no other call under way; held says how to finish. */
chorusResult_t comm_call_enter(chorusComm_t comm, const char *fn, int *held);
/* Call slots (comm.c): the one call under way on a thread is counted in its slot. */
typedef struct call_slot {
    _Alignas(64) const void *comm; /* the call under way in the owner thread, or NULL */
    int taken; /* owned by a live thread (under registry_lock) */
    struct call_slot *next;
} call_slot_t;
/* This thread's slot (NULL before its first call); the handle this thread last found live and
 * comm_registry_gen then (it stands until comm_registry_gen moves: a handle left the live set). */
extern __thread call_slot_t *comm_my_slot __attribute__((tls_model("initial-exec")));
extern __thread const void *comm_checked __attribute__((tls_model("initial-exec")));
extern __thread uint64_t comm_checked_gen __attribute__((tls_model("initial-exec")));
extern uint64_t comm_registry_gen;
/*
 * A call of no elements on comm, counted and checked at once: 1 when comm is the live
 * communicator this thread last checked, not aborted, and root (0 where none) names a rank; 0
 * sends the call the general way, which reports what is wrong. Inline and free of calls, so the
 * API function's quick path saves no registers (a count-0 all-gather: 3.6 ns a call with this
 * out of line, against Open MPI's 2.8); before the fence mode is decided it answers 0.
 */
static inline int comm_call_empty(chorusComm_t comm, int root)
{
    call_slot_t *sl = comm_my_slot;
    int m = __atomic_load_n(&fifo_fence_mode, __ATOMIC_ACQUIRE);
    if (sl == NULL || comm == NULL || sl->comm != NULL || m == 0)
        return 0;
    /* comm_call_enter's protocol: held in the slot, a concurrent chorusCommAbort cannot free it. */
    __atomic_store_n(&sl->comm, comm, __ATOMIC_RELAXED);
    if (m == 1)
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
    else
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    int done = comm == comm_checked &&
               __atomic_load_n(&comm_registry_gen, __ATOMIC_ACQUIRE) == comm_checked_gen &&
               !__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE) &&
               (unsigned)root < (unsigned)comm->nranks;
    __atomic_store_n(&sl->comm, NULL, __ATOMIC_RELEASE);
    return done;
}
void comm_call_leave(chorusComm_t comm, chorusResult_t res, int held);
/* Operations of comm queued or running (counted either way). */
int comm_calls_running(chorusComm_t comm);
/* Wait until no operation of comm is queued or running. */
chorusResult_t comm_wait_idle(chorusComm_t comm, int64_t timeout_ms);

/* The API name of a call kind: "chorusAllReduce", ... (error texts). */
static inline const char *coll_name(coll_kind_t kind)
{
    /* Rows of chars, not pointers: every call takes a name (read only on failure), and a table
     * of pointers sits in .data.rel.ro, one more page a call would read (debug.h's HOT_PATH). */
    static const char names[][20] = {"chorusAllReduce", "chorusBroadcast",     "chorusReduce",
                                     "chorusAllGather", "chorusReduceScatter", "chorusAlltoAll",
                                     "chorusSend",      "chorusRecv"};
    return names[kind];
}

/* Bytes a call writes into this rank's output buffer. */
static inline size_t coll_out_nbytes(chorusComm_t comm, const coll_args_t *a)
{
    size_t nb = a->count * dtype_nbytes(a->dtype);
    return a->kind == COLL_ALLGATHER || a->kind == COLL_ALLTOALL ? nb * (size_t)comm->nranks : nb;
}

/* The output overlaps the input: its lines were just read, and stores that hit them beat
 * streaming them out (2 ranks, 64 MiB all-reduce in place: 6.5-8.6 ms streamed, 6.1-6.7 not). */
static inline int coll_in_place(chorusComm_t comm, const coll_args_t *a)
{
    size_t in = a->count * dtype_nbytes(a->dtype);
    if (a->kind == COLL_REDUCESCATTER || a->kind == COLL_ALLTOALL)
        in *= (size_t)comm->nranks;
    uintptr_t s = (uintptr_t)a->sendbuff, r = (uintptr_t)a->recvbuff;
    return s < r + coll_out_nbytes(comm, a) && r < s + in;
}

/* A call whose copies into memory a peer reads (the ring's and trees' send slots, a rank's
 * window) a plan chooses plain or streaming stores for (slot_adapt.c). k: its class, -1 where the
 * plan does not choose (off, one rank, below SLOT_ADAPT_MIN_NBYTES, or from CHORUS_NT_MIN_BYTES,
 * where fill_prims streams). */
typedef struct adapt_call {
    slot_adapt_t *plan;
    int key, k, stream;
    int64_t t0;
} adapt_call_t;
/* The way plan gives call a (on: the plan is in use), its clock started (slot_adapt.c). */
void adapt_begin(chorusComm_t comm, int64_t on, slot_adapt_t *plan, const coll_args_t *a,
                 adapt_call_t *c);
/* Call a, begun with adapt_begin, ended well: ns (the call's time where -1) counts in the plan.
 * what: the copies the plan chooses for (a log line where their way changes). */
void adapt_end(chorusComm_t comm, const coll_args_t *a, const adapt_call_t *c, int64_t ns,
               const char *what);

/* check_args.c: CHORUS_CHECK_ARGS's comparison of collective number seq's arguments across the
 * ranks; chorusInvalidUsage (comm->args_refused set) where they differ. */
chorusResult_t args_agree(chorusComm_t comm, const coll_args_t *a, uint64_t seq);

/* group.c: 1 while inside chorusGroupStart/End on this thread; ops queue there. */
/* chorusGroupStart nesting of this thread (initial-exec: TLS_HOT of debug.h) */
extern __thread int group_depth __attribute__((tls_model("initial-exec")));
static inline int group_active(void)
{
    return group_depth > 0;
}
chorusResult_t group_add(const comm_op_t *op);
/* The calls and chorusCommSplits this thread's open group holds on comm (0 outside a group). */
int group_held(chorusComm_t comm);

/* A communicator's initialization held by an open group (chorusCommInitRank or chorusCommSplit
 * inside chorusGroupStart/End, NCCL's way for one thread to make several ranks): it runs at the
 * outermost chorusGroupEnd, all of the group's at once, one thread each, before the group's
 * calls; *comm_p is NULL until then. */
typedef struct group_init {
    chorusComm_t *comm_p;
    chorusComm_t parent; /* chorusCommSplit's communicator; NULL: chorusCommInitRank's */
    int nranks, rank; /* InitRank */
    int color, key; /* Split */
    int dev; /* the CUDA device current at the call (-1: none), as NCCL takes it */
    boot_id_t id;
    int has_config;
    chorusConfig_t config;
    chorusResult_t res;
    char error[1024];
} group_init_t;
chorusResult_t group_add_init(const group_init_t *gi);
/* The initializations this thread's open group holds (0 outside a group). */
int group_inits_held(void);
/* init.c: a copy of config (checked by config_check; NULL: none) into gi. */
void group_init_keep_config(group_init_t *gi, const chorusConfig_t *config);
/* init.c: run gi (on any thread): its result in gi->res, its error text in gi->error. */
void group_init_run(group_init_t *gi);
/* init.c: the checks of a config that init makes, without a communicator (the environment
 * loaded as init would). */
chorusResult_t config_check(const chorusConfig_t *config);
/* split.c: chorusCommSplit's work on an open communicator. */
chorusResult_t comm_split(chorusComm_t comm, int color, int key, chorusComm_t *newcomm,
                          const chorusConfig_t *config);

/* stream.c */
int stream_is_host(chorusStream_t stream);
/* Queue ops (all of one comm) on a host stream; they run in order on its worker. */
chorusResult_t stream_enqueue(chorusStream_t stream, comm_op_t *ops, int n);

/* mem.c: 1 when ptr is CUDA device memory (only possible where libcuda is loaded). */
int mem_is_device(const void *ptr);
/* 0 while libcuda is not in the process (asked at most every 100 ms): no pointer is a device
 * one; a call asks once, then mem_is_device per buffer. */
int mem_cuda_possible(void);
/* mem.c: 1 and *ref filled when [ptr, ptr + nbytes) lies in one chorusMemAlloc region that local
 * peers can map (ref->pid is left 0: the caller knows its own). */
int mem_find_region(const void *ptr, size_t nbytes, mem_ref_t *ref);

#endif /* CHORUS_COMM_H */
