/*
 * comm.c: a communicator's life after init: queries, errors, finalize, destroy and abort.
 *
 * Destroy waits for the communicator's queued operations (host streams) to finish; Abort raises
 * the abort flag first, so every wait in flight returns within one sleep slice (20 ms), then does
 * the same. Neither can hang: operations have deadlines, and the idle wait has one too.
 *
 * Handles are looked up in a registry of live communicators before anything is read through
 * them, and the last few thousand that were destroyed or aborted are remembered: a call on an
 * aborted handle is chorusInvalidUsage and a stale or foreign pointer chorusInvalidArgument,
 * without touching freed memory.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "comm.h"
#include "debug.h"

#define GONE_MAX 4096

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static chorusComm_t *live;
static int nlive, live_cap;
/* Destroyed handles, a ring of GONE_MAX allocated at the first destroy: 64 KiB in .bss would
 * put the words every call reads (mem.c's, past this file's) a page further (debug.h's
 * HOT_PATH). Out of memory, destroys go unrecorded and a later call names the handle unknown. */
typedef struct gone_entry {
    const void *ptr;
    int aborted;
} gone_entry_t;
static gone_entry_t *gone;
static int gone_next;
/* Bumped whenever a handle leaves the live set: a thread's last "live" answer for a handle
 * stands until then (the check every call makes takes no lock). */
uint64_t comm_registry_gen; /* comm.h */
__thread const void *comm_checked TLS_HOT; /* comm.h */
__thread uint64_t comm_checked_gen TLS_HOT; /* comm.h */

chorusResult_t comm_register(chorusComm_t comm)
{
    chorusResult_t res = chorusSuccess;
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; gone != NULL && i < GONE_MAX; i++)
        if (gone[i].ptr == comm)
            gone[i].ptr = NULL; /* the address is reused: it names the new one now */
    if (nlive == live_cap) {
        int cap = live_cap ? live_cap * 2 : 16;
        chorusComm_t *l = realloc(live, sizeof(*l) * cap);
        if (l == NULL)
            res = ERR(chorusSystemError, SUB_INIT, "out of memory");
        else {
            live = l;
            live_cap = cap;
        }
    }
    if (res == chorusSuccess)
        live[nlive++] = comm;
    pthread_mutex_unlock(&registry_lock);
    return res;
}

void comm_unregister(chorusComm_t comm, int aborted)
{
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < nlive; i++)
        if (live[i] == comm) {
            __atomic_add_fetch(&comm_registry_gen, 1, __ATOMIC_ACQ_REL);
            live[i] = live[--nlive];
            if (gone == NULL)
                gone = calloc(GONE_MAX, sizeof(*gone));
            if (gone != NULL) {
                gone[gone_next].ptr = comm;
                gone[gone_next].aborted = aborted;
                gone_next = (gone_next + 1) % GONE_MAX;
            }
            break;
        }
    if (nlive == 0) {
        free(live);
        live = NULL;
        live_cap = 0;
    }
    pthread_mutex_unlock(&registry_lock);
}

/* comm_state past this thread's last answer: the registry under its lock. */
static __attribute__((noinline)) int comm_state_slow(const void *comm, uint64_t gen)
{
    int state = 0;
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < nlive && state == 0; i++)
        if (live[i] == comm)
            state = 1;
    for (int i = 0; gone != NULL && i < GONE_MAX && state == 0; i++)
        if (gone[i].ptr == comm)
            state = gone[i].aborted ? 2 : 3;
    pthread_mutex_unlock(&registry_lock);
    if (state == 1) {
        comm_checked = comm;
        comm_checked_gen = gen;
    }
    return state;
}

/* 1: live; 2: aborted; 3: destroyed; 0: never a communicator (as far as memory goes). Inline:
 * every call asks, and the answer this thread had last stands while no communicator came or went
 * (out of line, its prologue for the registry's lock cost as much as the test). */
HOT_PATH static inline int comm_state(const void *comm)
{
    uint64_t gen = __atomic_load_n(&comm_registry_gen, __ATOMIC_ACQUIRE);
    if (comm == comm_checked && gen == comm_checked_gen && comm != NULL)
        return 1;
    return comm_state_slow(comm, gen);
}

chorusResult_t chorusGetVersion(int *version)
{
    if (version == NULL)
        return ERR(chorusInvalidArgument, SUB_INIT, "chorusGetVersion: version is NULL");
    *version = CHORUS_VERSION_CODE;
    return chorusSuccess;
}

const char *chorusGetErrorString(chorusResult_t result)
{
    switch (result) {
    case chorusSuccess:
        return "no error";
    case chorusUnhandledCudaError:
        return "unhandled cuda error (run with CHORUS_DEBUG=INFO for details)";
    case chorusSystemError:
        return "unhandled system error (run with CHORUS_DEBUG=INFO for details)";
    case chorusInternalError:
        return "internal error - please report this issue to the Chorus developers";
    case chorusInvalidArgument:
        return "invalid argument (chorusGetLastError has the details)";
    case chorusInvalidUsage:
        return "invalid usage (chorusGetLastError has the details)";
    case chorusRemoteError:
        return "remote process exited or there was a network error";
    case chorusInProgress:
        return "Chorus operation in progress";
    case chorusTimeout:
        return "timeout: a peer did not answer within CHORUS_TIMEOUT_MS";
    default:
        return "unknown result code";
    }
}

const char *chorusGetLastError(chorusComm_t comm)
{
    if (comm != NULL && comm_state(comm) == 1) {
        const char *mine = debug_last_error();
        return mine[0] != '\0' ? mine : comm->last_error;
    }
    return debug_last_error();
}

chorusResult_t comm_check(chorusComm_t comm, const char *fn)
{
    debug_clear_error();
    if (comm == NULL)
        return ERR(chorusInvalidArgument, SUB_COLL, "%s: comm is NULL%s", fn,
                   group_inits_held() > 0
                       ? " (a communicator this thread's open group initializes exists only once "
                         "chorusGroupEnd returns)"
                       : "");
    switch (comm_state(comm)) {
    case 1:
        break;
    case 2:
        return ERR(chorusInvalidUsage, SUB_COLL,
                   "%s: the communicator was aborted (chorusCommAbort); create a new one", fn);
    case 3:
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s: comm was destroyed (chorusCommDestroy); create a new one", fn);
    default:
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s: comm is not a live communicator (destroyed, or not made by Chorus)", fn);
    }
    debug_set_rank(comm->rank);
    return chorusSuccess;
}

chorusResult_t comm_api_return(chorusComm_t comm, chorusResult_t res)
{
    if (res != chorusSuccess && comm != NULL && comm_state(comm) == 1) {
        pthread_mutex_lock(&comm->state_lock);
        snprintf(comm->last_error, sizeof(comm->last_error), "%s", debug_last_error());
        pthread_mutex_unlock(&comm->state_lock);
    }
    return res;
}

void comm_failure_text(chorusComm_t comm, char *buf, size_t len)
{
    pthread_mutex_lock(&comm->state_lock);
    if (comm->failure.set)
        snprintf(buf, len, "%s", comm->failure.text);
    else if (comm->last_error[0] != '\0')
        snprintf(buf, len, "%s", comm->last_error);
    else
        snprintf(buf, len, "%s", "a failed or aborted call");
    pthread_mutex_unlock(&comm->state_lock);
}

/*
 * Call slots. The common call (one under way on its thread) is counted in its thread's slot,
 * which names the communicator: a store and a compiler barrier instead of registry_lock and two
 * locked adds on comm->queued (about 20 of the 90 ns a 1-rank call cost). The slot is stored
 * before the call checks the handle is live (comm_state reads comm_registry_gen), and
 * comm_wait_idle passes the heavy barrier (fifo_fence_heavy) after chorusCommAbort unregistered the
 * handle and before it reads the slots: either the call sees the handle gone, or the wait sees the
 * slot. Other counts (groups, streams, the CUDA worker, a second call under way on a thread) go to
 * comm->queued as below. Slots are never freed; a thread's goes back to the pool when it exits.
 */
static call_slot_t *slot_list; /* grows under registry_lock */
/* The first threads' slots: in .bss, beside the words every call reads, not in a heap page of
 * their own (debug.h's HOT_PATH); later threads' are allocated. */
#define SLOT_POOL 4
static call_slot_t slot_pool[SLOT_POOL];
static int slot_pool_used;
__thread call_slot_t *comm_my_slot TLS_HOT; /* comm.h */
static pthread_key_t slot_key;
static int slot_key_ok;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;

static void slot_put(void *arg)
{
    call_slot_t *sl = arg;
    pthread_mutex_lock(&registry_lock);
    sl->taken = 0;
    pthread_mutex_unlock(&registry_lock);
}

static void slot_key_make(void)
{
    slot_key_ok = pthread_key_create(&slot_key, slot_put) == 0;
}

/* This thread's slot, NULL if none could be had (the call is counted the locked way). */
static call_slot_t *slot_get(void)
{
    if (comm_my_slot != NULL)
        return comm_my_slot;
    pthread_once(&slot_once, slot_key_make);
    if (!slot_key_ok)
        return NULL;
    call_slot_t *sl;
    pthread_mutex_lock(&registry_lock);
    for (sl = slot_list; sl != NULL && sl->taken; sl = sl->next)
        ;
    int fresh = sl == NULL;
    if (fresh && slot_pool_used < SLOT_POOL)
        sl = &slot_pool[slot_pool_used++];
    else if (fresh && posix_memalign((void **)&sl, 64, sizeof(*sl)) != 0)
        sl = NULL;
    if (fresh && sl != NULL) {
        memset(sl, 0, sizeof(*sl));
        sl->next = slot_list;
        slot_list = sl;
    }
    if (sl != NULL)
        sl->taken = 1;
    pthread_mutex_unlock(&registry_lock);
    if (sl != NULL && pthread_setspecific(slot_key, sl) != 0) {
        slot_put(sl);
        sl = NULL;
    }
    comm_my_slot = sl;
    return sl;
}

/* How many threads' slots name comm. */
static int slots_holding(const void *comm)
{
    int n = 0;
    pthread_mutex_lock(&registry_lock);
    for (call_slot_t *sl = slot_list; sl != NULL; sl = sl->next)
        n += __atomic_load_n(&sl->comm, __ATOMIC_ACQUIRE) == comm;
    pthread_mutex_unlock(&registry_lock);
    return n;
}

int comm_calls_running(chorusComm_t comm)
{
    return __atomic_load_n(&comm->queued, __ATOMIC_ACQUIRE) + slots_holding(comm);
}

HOT_PATH chorusResult_t comm_call_enter(chorusComm_t comm, const char *fn, int *held)
{
    *held = 0;
    call_slot_t *sl = slot_get();
    if (sl != NULL && comm != NULL && sl->comm == NULL) {
        __atomic_store_n(&sl->comm, comm, __ATOMIC_RELAXED);
        fifo_fence_light();
        if (comm_state(comm) == 1) {
            *held = 1;
            return chorusSuccess;
        }
        __atomic_store_n(&sl->comm, NULL, __ATOMIC_RELEASE);
    }
    return comm_op_started(comm, fn);
}

/* Counting a call and checking its handle are one step under registry_lock, the lock
 * chorusCommAbort unregisters under before it waits for the count to drain: a call is either
 * counted (and waited for) or refused without touching the communicator. */
chorusResult_t comm_op_started(chorusComm_t comm, const char *fn)
{
    pthread_mutex_lock(&registry_lock);
    int is_live = 0;
    for (int i = 0; i < nlive && !is_live; i++)
        is_live = live[i] == comm;
    if (is_live)
        __atomic_add_fetch(&comm->queued, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&registry_lock);
    if (is_live)
        return chorusSuccess;
    chorusResult_t res = comm_check(comm, fn); /* aborted meanwhile: chorusInvalidUsage */
    return res != chorusSuccess
               ? res
               : ERR(chorusInvalidUsage, SUB_COLL, "%s: the communicator was aborted", fn);
}

/* A failed call leaves the communicator unusable: recorded under state_lock. */
static void op_failed(chorusComm_t comm, chorusResult_t res)
{
    if (res != chorusSuccess && __atomic_exchange_n(&comm->args_refused, 0, __ATOMIC_ACQ_REL)) {
        /* Refused before anything ran, alike on every rank: the error text only. */
        pthread_mutex_lock(&comm->state_lock);
        snprintf(comm->last_error, sizeof(comm->last_error), "%s", debug_last_error());
        pthread_mutex_unlock(&comm->state_lock);
    } else if (res != chorusSuccess) {
        pthread_mutex_lock(&comm->state_lock);
        /* The FIFOs are mid-message: the communicator cannot be used again. */
        if (comm->async_error == chorusSuccess)
            comm->async_error = res;
        snprintf(comm->last_error, sizeof(comm->last_error), "%s", debug_last_error());
        __atomic_store_n(&comm->abort_flag, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&comm->state_lock);
    }
}

/* The decrement is the call's last touch of comm: a waiter in comm_wait_idle that sees the count
 * reach 0 may free the communicator at once. A failure is recorded before it. */
void comm_op_finished(chorusComm_t comm, chorusResult_t res)
{
    op_failed(comm, res);
    __atomic_sub_fetch(&comm->queued, 1, __ATOMIC_RELEASE);
}

/* As comm_op_finished; the slot's release is the call's last touch of comm. */
HOT_PATH void comm_call_leave(chorusComm_t comm, chorusResult_t res, int held)
{
    if (!held) {
        comm_op_finished(comm, res);
        return;
    }
    op_failed(comm, res);
    __atomic_store_n(&comm_my_slot->comm, NULL, __ATOMIC_RELEASE);
}

/* Polls (no condition variable: signalling one would touch comm after the decrement). The first
 * polls are 50 us apart, so a destroy right after the last call returns at once. */
chorusResult_t comm_wait_idle(chorusComm_t comm, int64_t timeout_ms)
{
    /* timeout_ms in whole seconds, plus one (900 ms: 1 s), as the timed wait before it had. */
    int64_t deadline = fifo_now_ns() + (timeout_ms / 1000 + 1) * 1000000000, nap_ns = 50000;
    fifo_fence_heavy(); /* see call slots: after Abort's unregister, before the slots are read */
    while (comm_calls_running(comm) > 0) {
        if (fifo_now_ns() > deadline)
            return ERR(chorusTimeout, SUB_INIT,
                       "%d operation(s) of the communicator did not finish within %lld ms",
                       comm_calls_running(comm), (long long)timeout_ms);
        struct timespec ts = {0, nap_ns};
        nanosleep(&ts, NULL);
        if (nap_ns < 1000000)
            nap_ns *= 2;
    }
    return chorusSuccess;
}

chorusResult_t chorusCommFinalize(chorusComm_t comm)
{
    CHECK(comm_check(comm, "chorusCommFinalize"));
    /* Its calls held by this thread's open group run only at chorusGroupEnd: "finished" now
     * would be false. */
    int held = group_held(comm);
    if (held > 0)
        return comm_api_return(
            comm, ERR(chorusInvalidUsage, SUB_INIT,
                      "chorusCommFinalize (rank %d): this thread's open group (chorusGroupStart "
                      "without chorusGroupEnd yet) holds %d call(s) on this communicator, which "
                      "run only at chorusGroupEnd; call it first, then finalize",
                      comm->rank, held));
    chorusResult_t res = comm_wait_idle(comm, comm->timeout_ms);
    if (res == chorusSuccess)
        res = comm->async_error;
    return comm_api_return(comm, res);
}

chorusResult_t chorusCommDestroy(chorusComm_t comm)
{
    if (comm == NULL)
        return chorusSuccess; /* as NCCL: nothing to destroy */
    CHECK(comm_check(comm, "chorusCommDestroy"));
    /* Freed now, the calls would fail at chorusGroupEnd while the group's calls on the other
     * ranks' communicators wait for this rank's part until their deadline (10 minutes by
     * default): one thread driving every rank of a clique hung so. */
    int held = group_held(comm);
    if (held > 0)
        return ERR(chorusInvalidUsage, SUB_INIT,
                   "chorusCommDestroy (rank %d): this thread's open group (chorusGroupStart "
                   "without chorusGroupEnd yet) holds %d call(s) on this communicator; call "
                   "chorusGroupEnd first (it runs them), then destroy it",
                   comm->rank, held);
    chorusResult_t res = comm_wait_idle(comm, comm->timeout_ms);
    if (res != chorusSuccess) {
        /* Still busy after the deadline: stop what runs rather than free it under its feet. */
        __atomic_store_n(&comm->abort_flag, 1, __ATOMIC_RELEASE);
        if (comm_wait_idle(comm, 1000) != chorusSuccess)
            return comm_api_return(comm, res);
    }
    comm_unregister(comm, 0);
    comm_free(comm);
    return chorusSuccess;
}

chorusResult_t chorusCommAbort(chorusComm_t comm)
{
    if (comm == NULL)
        return chorusSuccess; /* as NCCL: nothing to abort */
    CHECK(comm_check(comm, "chorusCommAbort"));
    __atomic_store_n(&comm->user_abort, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&comm->abort_flag, 1, __ATOMIC_RELEASE);
    /* Unregistered before the wait: from here every call on the handle is chorusInvalidUsage
     * without touching it (comm_op_started), and the calls counted before are waited for. */
    comm_unregister(comm, 1);
    /* Waits poll the flag at least every 20 ms (bootstrap waits every 50 ms); queued stream work
     * returns at its first wait. */
    chorusResult_t res = comm_wait_idle(comm, 900);
    if (res != chorusSuccess)
        return res; /* a call still runs: leave comm allocated rather than free it under it */
    /* comm_free joins the service, proxy and executor threads and frees the rest (no drain once
     * aborted). */
    comm_free(comm);
    return chorusSuccess;
}

chorusResult_t chorusCommGetAsyncError(chorusComm_t comm, chorusResult_t *asyncError)
{
    CHECK(comm_check(comm, "chorusCommGetAsyncError"));
    if (asyncError == NULL)
        return ERR(chorusInvalidArgument, SUB_INIT, "chorusCommGetAsyncError: asyncError is NULL");
    pthread_mutex_lock(&comm->state_lock);
    *asyncError = comm->async_error;
    pthread_mutex_unlock(&comm->state_lock);
    if (*asyncError == chorusSuccess) {
        /* A failure the net proxy saw between operations counts too. */
        *asyncError = transport_comm_error(&comm->tc);
        debug_clear_error();
    }
    return chorusSuccess;
}

chorusResult_t chorusCommCount(const chorusComm_t comm, int *count)
{
    CHECK(comm_check(comm, "chorusCommCount"));
    if (count == NULL)
        return ERR(chorusInvalidArgument, SUB_INIT, "chorusCommCount: count is NULL");
    *count = comm->nranks;
    return chorusSuccess;
}

chorusResult_t chorusCommUserRank(const chorusComm_t comm, int *rank)
{
    CHECK(comm_check(comm, "chorusCommUserRank"));
    if (rank == NULL)
        return ERR(chorusInvalidArgument, SUB_INIT, "chorusCommUserRank: rank is NULL");
    *rank = comm->rank;
    return chorusSuccess;
}

chorusResult_t chorusCommCuDevice(const chorusComm_t comm, int *device)
{
    CHECK(comm_check(comm, "chorusCommCuDevice"));
    if (device == NULL)
        return ERR(chorusInvalidArgument, SUB_INIT, "chorusCommCuDevice: device is NULL");
    *device = comm->peers[comm->rank].cuda_dev;
    return chorusSuccess;
}

/* The tuner's pick for a call of count elements (tuning.c), by NCCL's name of the collective. */
chorusResult_t chorusCommTuningInfo(chorusComm_t comm, const char *coll, size_t count,
                                    chorusDataType_t datatype, const char **algo,
                                    double *predictedUs)
{
    static const char *names[] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter"};
    CHECK(comm_check(comm, "chorusCommTuningInfo"));
    int kind = -1;
    for (int i = 0; coll != NULL && i < 5; i++)
        if (strcasecmp(coll, names[i]) == 0)
            kind = i;
    if (kind < 0)
        return comm_api_return(
            comm, ERR(chorusInvalidArgument, SUB_TUNING,
                      "chorusCommTuningInfo (rank %d): coll \"%s\" is not one of allreduce, "
                      "broadcast, reduce, allgather, reducescatter",
                      comm->rank, coll ? coll : "(null)"));
    if ((unsigned)datatype >= chorusNumTypes)
        return comm_api_return(
            comm, ERR(chorusInvalidArgument, SUB_TUNING,
                      "chorusCommTuningInfo (rank %d): datatype %d is not a chorusDataType_t "
                      "(allowed 0..%d)",
                      comm->rank, (int)datatype, chorusNumTypes - 1));
    if (algo == NULL || predictedUs == NULL)
        return comm_api_return(comm, ERR(chorusInvalidArgument, SUB_TUNING,
                                         "chorusCommTuningInfo (rank %d): %s is NULL", comm->rank,
                                         algo == NULL ? "algo" : "predictedUs"));
    if (count > SIZE_MAX / dtype_nbytes(datatype))
        return comm_api_return(comm, ERR(chorusInvalidArgument, SUB_TUNING,
                                         "chorusCommTuningInfo (rank %d): count %zu of %zu-byte "
                                         "elements overflows size_t",
                                         comm->rank, count, dtype_nbytes(datatype)));
    tune_choice_t c = tune_pick(&comm->tuner, (coll_kind_t)kind, count * dtype_nbytes(datatype));
    *algo = algo_name(c.algo);
    *predictedUs = c.predicted_us;
    return chorusSuccess;
}
