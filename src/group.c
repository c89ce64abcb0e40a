/*
 * group.c: chorusGroupStart/End. Calls issued inside a group are checked at once and held; at the
 * outermost GroupEnd they run together: the sends and receives of one communicator as one
 * progress loop (so a rank may send to and receive from any peers, itself included, without
 * deadlock), and the work of different communicators on different threads at the same time (one
 * thread driving several ranks, NCCL's single-process multi-device pattern). Initializations in a
 * group (chorusCommInitRank, chorusCommSplit) are held too and run first, all at once, one thread
 * each: one thread making several ranks of a communicator so waited at its first init, for the
 * whole CHORUS_TIMEOUT_MS, for ranks it had yet to start.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "debug.h"

__thread int group_depth TLS_HOT;

/* A thread's group memory, kept from one group to the next (no allocation once a group as large
 * has run; comm.h's scratch_t) and freed when the thread ends. */
typedef struct group_mem {
    comm_op_t *ops; /* the calls held: nops of cap */
    int nops, cap;
    group_init_t *inits; /* the initializations held: ninits of icap */
    int ninits, icap;
    scratch_t end; /* chorusGroupEnd's partition: sorted calls, parts, threads */
} group_mem_t;

/* Allocated by the thread's first group_add; a pointer in the initial-exec model (debug.h's
 * TLS_HOT: no __tls_get_addr call on each use). */
static __thread group_mem_t *group_mem TLS_HOT;
static pthread_key_t group_key;
static pthread_once_t group_key_once = PTHREAD_ONCE_INIT;
static int group_key_ok;

static void group_mem_free(void *arg)
{
    group_mem_t *g = arg;
    free(g->ops);
    free(g->inits);
    scratch_free(&g->end);
    free(g);
    group_mem = NULL;
}

static void group_key_make(void)
{
    group_key_ok = pthread_key_create(&group_key, group_mem_free) == 0;
}

/* This thread's group memory, made at its first use (NULL: out of memory). */
static group_mem_t *group_mem_get(void)
{
    group_mem_t *g = group_mem;
    if (g == NULL) { /* this thread's first group: its memory is freed when the thread ends */
        if ((g = calloc(1, sizeof(*g))) == NULL)
            return NULL;
        pthread_once(&group_key_once, group_key_make);
        if (group_key_ok)
            pthread_setspecific(group_key, g);
        group_mem = g;
    }
    return g;
}

chorusResult_t group_add_init(const group_init_t *gi)
{
    group_mem_t *g = group_mem_get();
    if (g == NULL)
        return ERR(chorusSystemError, SUB_INIT, "out of memory for a group");
    if (g->ninits == g->icap) {
        int cap = g->icap ? g->icap * 2 : 4;
        group_init_t *inits = realloc(g->inits, sizeof(group_init_t) * cap);
        if (inits == NULL)
            return ERR(chorusSystemError, SUB_INIT, "out of memory for a group of %d inits", cap);
        g->inits = inits;
        g->icap = cap;
    }
    g->inits[g->ninits++] = *gi;
    return chorusSuccess;
}

int group_inits_held(void)
{
    return group_depth > 0 && group_mem != NULL ? group_mem->ninits : 0;
}

/* The inits' threads start only once all of them exist (as chorusCommInitAll's): where one
 * cannot be made, the others give up at once rather than wait their deadline for its rank. */
typedef struct init_start {
    group_init_t *gi;
    pthread_mutex_t *lock;
    pthread_cond_t *cv;
    int *state; /* 0: wait; 1: go; 2: give up */
} init_start_t;

static void *init_thread(void *arg)
{
    init_start_t *st = arg;
    pthread_mutex_lock(st->lock);
    while (*st->state == 0)
        pthread_cond_wait(st->cv, st->lock);
    int go = *st->state == 1;
    pthread_mutex_unlock(st->lock);
    if (go) {
        group_init_run(st->gi);
    } else {
        st->gi->res = chorusSystemError;
        snprintf(st->gi->error, sizeof(st->gi->error),
                 "not started: a thread for another init of the group could not be made");
    }
    return NULL;
}

/* The group's initializations, all at once (one thread each; one alone on this thread); where
 * any failed, none of their communicators is kept (as chorusCommInitAll) and the first error is
 * returned. */
static chorusResult_t run_inits(group_init_t *inits, int n)
{
    pthread_t *threads = calloc((size_t)n, sizeof(*threads));
    char *started = calloc((size_t)n, 1);
    init_start_t *starts = calloc((size_t)n, sizeof(*starts));
    if (threads == NULL || started == NULL || starts == NULL) {
        free(threads);
        free(started);
        free(starts);
        return ERR(chorusSystemError, SUB_INIT, "out of memory for a group of %d inits", n);
    }
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    int state = 0, made = 1;
    for (int i = 0; i < n; i++) {
        *inits[i].comm_p = NULL;
        starts[i] = (init_start_t){&inits[i], &lock, &cv, &state};
        if (n == 1) {
            group_init_run(&inits[i]);
        } else if (made && pthread_create(&threads[i], NULL, init_thread, &starts[i]) == 0) {
            started[i] = 1;
        } else {
            made = 0;
            inits[i].res = ERR(chorusSystemError, SUB_INIT,
                               "chorusGroupEnd: cannot start a thread for the group's init %d of "
                               "%d: raise the process's thread or memory limits",
                               i + 1, n);
            snprintf(inits[i].error, sizeof(inits[i].error), "%s", debug_last_error());
        }
    }
    pthread_mutex_lock(&lock);
    state = made ? 1 : 2;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&lock);
    chorusResult_t res = chorusSuccess;
    int failed = -1;
    for (int i = 0; i < n; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        if (inits[i].res != chorusSuccess && failed < 0)
            failed = i;
    }
    if (failed >= 0) {
        const group_init_t *f = &inits[failed];
        for (int i = 0; i < n; i++) {
            comm_free(*inits[i].comm_p);
            *inits[i].comm_p = NULL;
        }
        if (f->parent != NULL)
            res = ERR(f->res, SUB_INIT,
                      "chorusGroupEnd: the group's chorusCommSplit %d of %d failed (no "
                      "communicator of the group's inits is kept): %s",
                      failed + 1, n, f->error);
        else
            res = ERR(f->res, SUB_INIT,
                      "chorusGroupEnd: the group's chorusCommInitRank of rank %d of %d failed (no "
                      "communicator of the group's inits is kept): %s",
                      f->rank, f->nranks, f->error);
    }
    free(threads);
    free(started);
    free(starts);
    return res;
}

chorusResult_t group_add(const comm_op_t *op)
{
    group_mem_t *g = group_mem_get();
    if (g == NULL)
        return ERR(chorusSystemError, SUB_COLL, "out of memory for a group");
    if (g->nops == g->cap) {
        int cap = g->cap ? g->cap * 2 : 16;
        comm_op_t *ops = realloc(g->ops, sizeof(comm_op_t) * cap);
        if (ops == NULL)
            return ERR(chorusSystemError, SUB_COLL, "out of memory for a group of %d calls", cap);
        g->ops = ops;
        g->cap = cap;
    }
    g->ops[g->nops++] = *op;
    return chorusSuccess;
}

int group_held(chorusComm_t comm)
{
    const group_mem_t *g = group_mem;
    int n = 0;
    for (int i = 0; group_depth > 0 && g != NULL && i < g->nops; i++)
        n += g->ops[i].comm == comm;
    for (int i = 0; group_depth > 0 && g != NULL && i < g->ninits; i++)
        n += g->inits[i].parent == comm;
    return n;
}

chorusResult_t chorusGroupStart(void)
{
    debug_clear_error();
    group_depth++;
    return chorusSuccess;
}

typedef struct part {
    chorusComm_t comm;
    chorusStream_t stream;
    comm_op_t *ops;
    int n;
    chorusResult_t res;
    char error[1024];
} part_t;

static void *part_thread(void *arg)
{
    part_t *p = arg;
    p->res = comm_exec(p->comm, p->ops, p->n);
    comm_op_finished(p->comm, p->res);
    if (p->res != chorusSuccess)
        memcpy(p->error, debug_last_error(), sizeof(p->error) - 1);
    return NULL;
}

chorusResult_t chorusGroupEnd(void)
{
    debug_clear_error();
    if (group_depth == 0)
        return ERR(chorusInvalidUsage, SUB_COLL, "chorusGroupEnd without chorusGroupStart");
    if (--group_depth > 0)
        return chorusSuccess;
    group_mem_t *g = group_mem;
    chorusResult_t init_res = chorusSuccess;
    if (g != NULL && g->ninits > 0) {
        int n = g->ninits;
        g->ninits = 0;
        init_res = run_inits(g->inits, n);
    }
    if (g == NULL || g->nops <= 0)
        return init_res;
    comm_op_t *ops = g->ops;
    int nops = g->nops;
    g->nops = 0; /* the calls stay in g->ops until the next group's first call */
    /* Partition by (comm, stream), keeping each partition in issue order. nparts <= nops. */
    size_t n = (size_t)nops;
    char *mem =
        scratch_get(&g->end, (sizeof(comm_op_t) + sizeof(part_t) + sizeof(pthread_t) + 1) * n);
    if (mem == NULL)
        return ERR(chorusSystemError, SUB_COLL, "out of memory for a group of %d calls", nops);
    part_t *parts = (part_t *)mem;
    comm_op_t *sorted = (comm_op_t *)(parts + n);
    pthread_t *threads = (pthread_t *)(sorted + n);
    char *started = (char *)(threads + n);
    int nparts = 0, k = 0;
    for (int i = 0; i < nops; i++) {
        int seen = 0;
        for (int p = 0; p < nparts; p++)
            seen |= parts[p].comm == ops[i].comm && parts[p].stream == ops[i].stream;
        if (seen)
            continue;
        part_t *p = &parts[nparts++];
        p->comm = ops[i].comm;
        p->stream = ops[i].stream;
        p->res = chorusSuccess;
        p->error[0] = p->error[sizeof(p->error) - 1] = '\0';
        p->ops = sorted + k;
        for (int j = i; j < nops; j++)
            if (ops[j].comm == p->comm && ops[j].stream == p->stream)
                sorted[k++] = ops[j];
        p->n = (int)(sorted + k - p->ops);
    }

    chorusResult_t res = init_res;
    int nblocking = 0;
    for (int p = 0; p < nparts; p++)
        nblocking += parts[p].stream == NULL;
    memset(started, 0, n);
    for (int p = 0; p < nparts; p++) {
        if (parts[p].stream != NULL) {
            chorusResult_t r = stream_enqueue(parts[p].stream, parts[p].ops, parts[p].n);
            if (r != chorusSuccess && res == chorusSuccess)
                res = r;
            continue;
        }
        if (nblocking == 1) {
            /* The one part that blocks runs on this thread, counted in its call slot as a single
             * call is (comm.c: no registry lock). */
            int held;
            part_t *pt = &parts[p];
            pt->res = comm_call_enter(pt->comm, "chorusGroupEnd", &held);
            if (pt->res == chorusSuccess) {
                pt->res = comm_exec(pt->comm, pt->ops, pt->n);
                comm_call_leave(pt->comm, pt->res, held);
            }
            if (pt->res != chorusSuccess)
                memcpy(pt->error, debug_last_error(), sizeof(pt->error) - 1);
            continue;
        }
        parts[p].res = comm_op_started(parts[p].comm, "chorusGroupEnd");
        if (parts[p].res != chorusSuccess) {
            memcpy(parts[p].error, debug_last_error(), sizeof(parts[p].error) - 1);
            continue;
        }
        if (pthread_create(&threads[p], NULL, part_thread, &parts[p]) == 0) {
            started[p] = 1;
        } else {
            part_thread(&parts[p]); /* cannot make a thread: run here (may then time out) */
        }
    }
    for (int p = 0; p < nparts; p++) {
        if (started[p])
            pthread_join(threads[p], NULL);
        /* part_thread recorded the error in the communicator; it is not touched after that. */
        if (parts[p].stream == NULL && parts[p].res != chorusSuccess) {
            if (res == chorusSuccess)
                res = ERR(parts[p].res, SUB_COLL, "%s",
                          parts[p].error[0] ? parts[p].error : debug_last_error());
        }
    }
    return res;
}
