/*
 * group.c: chorusGroupStart/End. Calls issued inside a group are checked at once and held; at the
 * outermost GroupEnd they run together: the sends and receives of one communicator as one
 * progress loop (so a rank may send to and receive from any peers, itself included, without
 * deadlock), and the work of different communicators on different threads at the same time (one
 * thread driving several ranks, NCCL's single-process multi-device pattern).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "debug.h"

__thread int group_depth TLS_HOT;
static __thread comm_op_t *group_ops;
static __thread int group_nops, group_cap;

chorusResult_t group_add(const comm_op_t *op)
{
    if (group_nops == group_cap) {
        int cap = group_cap ? group_cap * 2 : 16;
        comm_op_t *ops = realloc(group_ops, sizeof(comm_op_t) * cap);
        if (ops == NULL)
            return ERR(chorusSystemError, SUB_COLL, "out of memory for a group of %d calls", cap);
        group_ops = ops;
        group_cap = cap;
    }
    group_ops[group_nops++] = *op;
    return chorusSuccess;
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
    comm_op_t *ops = group_ops;
    int nops = group_nops;
    group_ops = NULL;
    group_nops = group_cap = 0;
    if (nops <= 0) {
        free(ops);
        return chorusSuccess;
    }
    /* Partition by (comm, stream), keeping each partition in issue order. */
    part_t *parts = calloc((size_t)nops, sizeof(part_t));
    comm_op_t *sorted = malloc(sizeof(comm_op_t) * (size_t)nops);
    if (parts == NULL || sorted == NULL) {
        free(parts);
        free(sorted);
        free(ops);
        return ERR(chorusSystemError, SUB_COLL, "out of memory");
    }
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
        p->ops = sorted + k;
        for (int j = i; j < nops; j++)
            if (ops[j].comm == p->comm && ops[j].stream == p->stream)
                sorted[k++] = ops[j];
        p->n = (int)(sorted + k - p->ops);
    }
    free(ops);

    chorusResult_t res = chorusSuccess;
    int nblocking = 0;
    for (int p = 0; p < nparts; p++)
        nblocking += parts[p].stream == NULL;
    pthread_t *threads = calloc((size_t)nops, sizeof(pthread_t)); /* nparts <= nops */
    char *started = calloc((size_t)nops, 1);
    for (int p = 0; p < nparts && threads && started; p++) {
        if (parts[p].stream != NULL) {
            chorusResult_t r = stream_enqueue(parts[p].stream, parts[p].ops, parts[p].n);
            if (r != chorusSuccess && res == chorusSuccess)
                res = r;
            continue;
        }
        parts[p].res = comm_op_started(parts[p].comm, "chorusGroupEnd");
        if (parts[p].res != chorusSuccess) {
            memcpy(parts[p].error, debug_last_error(), sizeof(parts[p].error) - 1);
            continue;
        }
        if (nblocking == 1) {
            part_thread(&parts[p]);
        } else if (pthread_create(&threads[p], NULL, part_thread, &parts[p]) == 0) {
            started[p] = 1;
        } else {
            part_thread(&parts[p]); /* cannot make a thread: run here (may then time out) */
        }
    }
    for (int p = 0; p < nparts && threads && started; p++) {
        if (started[p])
            pthread_join(threads[p], NULL);
        /* part_thread recorded the error in the communicator; it is not touched after that. */
        if (parts[p].stream == NULL && parts[p].res != chorusSuccess) {
            if (res == chorusSuccess)
                res = ERR(parts[p].res, SUB_COLL, "%s",
                          parts[p].error[0] ? parts[p].error : debug_last_error());
        }
    }
    if (threads == NULL || started == NULL)
        res = ERR(chorusSystemError, SUB_COLL, "out of memory");
    free(threads);
    free(started);
    free(sorted);
    free(parts);
    return res;
}
