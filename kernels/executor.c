/*
 * executor.c: a small persistent thread pool, one worker per extra channel.
 *
 * Workers sleep on a condition variable between operations, so an idle communicator burns no
 * CPU. Each worker's error is kept; the caller returns the first one.
 */
#include "executor.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

typedef struct worker {
    pthread_t thread;
    struct exec_pool *pool;
    int index;
} worker_t;

struct exec_pool {
    int nworkers;
    worker_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    uint64_t generation; /* bumped per operation */
    int ntasks; /* tasks of the current operation, task 0 in the caller */
    exec_fn_t fn;
    char *args;
    size_t stride;
    int pending; /* worker tasks not yet finished */
    chorusResult_t first_error;
    int stop;
    int debug_rank;
};

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    exec_pool_t *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    debug_set_rank(p->debug_rank);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        int task = w->index + 1;
        if (task >= p->ntasks)
            continue;
        exec_fn_t fn = p->fn;
        void *a = p->args + (size_t)task * p->stride;
        debug_set_rank(p->debug_rank);
        pthread_mutex_unlock(&p->mu);
        chorusResult_t res = fn(a);
        pthread_mutex_lock(&p->mu);
        if (res != chorusSuccess && p->first_error == chorusSuccess)
            p->first_error = res;
        if (--p->pending == 0)
            pthread_cond_broadcast(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

chorusResult_t exec_pool_create(int nworkers, exec_pool_t **pool_p)
{
    exec_pool_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    p->workers = calloc(nworkers > 0 ? nworkers : 1, sizeof(worker_t));
    if (p->workers == NULL) {
        free(p);
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->debug_rank = debug_get_rank();
    for (int i = 0; i < nworkers; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i;
        int rc = pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]);
        if (rc != 0) {
            p->nworkers = i;
            exec_pool_destroy(p);
            return ERR(chorusSystemError, SUB_INIT, "pthread_create for a channel worker: %s",
                       strerror(rc));
        }
        p->nworkers = i + 1;
    }
    *pool_p = p;
    return chorusSuccess;
}

chorusResult_t exec_pool_run(exec_pool_t *p, int n, exec_fn_t fn, void *args, size_t stride)
{
    if (n <= 1 || p->nworkers == 0) {
        chorusResult_t res = chorusSuccess;
        for (int i = 0; i < n; i++) {
            chorusResult_t r = fn((char *)args + (size_t)i * stride);
            if (r != chorusSuccess && res == chorusSuccess)
                res = r;
        }
        return res;
    }
    if (n > p->nworkers + 1)
        return ERR(chorusInternalError, SUB_COLL, "%d channel tasks for %d workers", n,
                   p->nworkers);
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->args = args;
    p->stride = stride;
    p->ntasks = n;
    p->pending = n - 1;
    p->first_error = chorusSuccess;
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);

    chorusResult_t res = fn(args);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done_cv, &p->mu);
    if (res == chorusSuccess)
        res = p->first_error;
    pthread_mutex_unlock(&p->mu);
    return res;
}

void exec_pool_destroy(exec_pool_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i].thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p->workers);
    free(p);
}
