/*
 * stream.c: host streams. A host stream is a worker thread with a FIFO of tasks; calls queued on
 * it run in order, each as if it were called with a NULL stream on that thread. CPU users get the
 * overlap GPU users get from CUDA streams (the trainer overlaps bucket all-reduces with backward).
 * Live streams are kept in a registry, so a pointer that is not one is refused, not dereferenced.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "debug.h"

#define STREAM_MAGIC 0x5354524du

typedef struct stream_task {
    struct stream_task *next;
    chorusComm_t comm;
    int n, cap; /* ops[cap], the first n queued */
    comm_op_t ops[];
} stream_task_t;

/* Finished tasks a stream keeps for its next calls (no allocation on the hot path once the queue
 * has been this deep), at most this many. */
#define STREAM_SPARE_MAX 64

typedef struct host_stream {
    uint32_t magic;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, idle_cv;
    stream_task_t *head, *tail;
    stream_task_t *spare; /* finished tasks kept (STREAM_SPARE_MAX), under mu */
    int nspare;
    int busy, stop;
    int64_t progress_ns; /* when the worker last started or finished a task */
    int64_t timeout_ms; /* CHORUS_TIMEOUT_MS when the stream was made */
    chorusResult_t error;
    char error_text[1024];
    struct host_stream *next_live;
} host_stream_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static host_stream_t *registry;

int stream_is_host(chorusStream_t stream)
{
    int found = 0;
    pthread_mutex_lock(&registry_lock);
    for (host_stream_t *s = registry; s && !found; s = s->next_live)
        found = s == (host_stream_t *)stream;
    pthread_mutex_unlock(&registry_lock);
    return found;
}

/* Writes the next STREAM_STACK_TOUCH bytes of this thread's stack once, so the first call that
 * runs deeper than the ones before (a slow wait's checks) takes no page fault. */
#define STREAM_STACK_TOUCH (64 * 1024)
static __attribute__((noinline)) void touch_stack(void)
{
    volatile char pad[STREAM_STACK_TOUCH];
    for (size_t i = 0; i < sizeof(pad); i += 4096)
        pad[i] = 0;
    pad[sizeof(pad) - 1] = 0;
}

static void *stream_main(void *arg)
{
    host_stream_t *s = arg;
    touch_stack();
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->work_cv, &s->mu);
        if (s->head == NULL && s->stop)
            break;
        stream_task_t *t = s->head;
        s->head = t->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->busy = 1;
        s->progress_ns = fifo_now_ns();
        pthread_mutex_unlock(&s->mu);
        debug_clear_error();
        chorusResult_t res = comm_exec(t->comm, t->ops, t->n);
        comm_op_finished(t->comm, res);
        pthread_mutex_lock(&s->mu);
        if (res != chorusSuccess && s->error == chorusSuccess) {
            s->error = res;
            snprintf(s->error_text, sizeof(s->error_text), "%s", debug_last_error());
        }
        if (s->nspare < STREAM_SPARE_MAX) {
            t->next = s->spare;
            s->spare = t;
            s->nspare++;
        } else {
            free(t);
        }
        s->busy = 0;
        s->progress_ns = fifo_now_ns();
        if (s->head == NULL)
            pthread_cond_broadcast(&s->idle_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

chorusResult_t stream_enqueue(chorusStream_t stream, comm_op_t *ops, int n)
{
    host_stream_t *s = stream;
    pthread_mutex_lock(&s->mu);
    stream_task_t *t = s->spare;
    if (t != NULL && t->cap >= n) {
        s->spare = t->next;
        s->nspare--;
    } else {
        t = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (t == NULL) {
        int cap = n > 4 ? n : 4; /* a single call, or a small group */
        if ((t = malloc(sizeof(*t) + sizeof(comm_op_t) * cap)) == NULL)
            return ERR(chorusSystemError, SUB_COLL, "out of memory queueing on a host stream");
        t->cap = cap;
    }
    t->next = NULL;
    t->comm = ops[0].comm;
    t->n = n;
    memcpy(t->ops, ops, sizeof(comm_op_t) * n);
    chorusResult_t res = comm_op_started(t->comm, "a call queued on a host stream");
    if (res != chorusSuccess) {
        free(t); /* the stream keeps the tasks its worker finished only */
        return res;
    }
    pthread_mutex_lock(&s->mu);
    if (s->head == NULL && !s->busy)
        s->progress_ns = fifo_now_ns();
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    return chorusSuccess;
}

chorusResult_t chorusStreamCreate(chorusStream_t *stream)
{
    debug_clear_error();
    if (stream == NULL)
        return ERR(chorusInvalidArgument, SUB_COLL, "chorusStreamCreate: stream is NULL");
    host_stream_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return ERR(chorusSystemError, SUB_COLL, "out of memory");
    s->magic = STREAM_MAGIC;
    params_t p;
    chorusResult_t pres = params_load(&p);
    if (pres != chorusSuccess) {
        free(s);
        return pres;
    }
    s->timeout_ms = p.timeout_ms;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->idle_cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&s->thread, NULL, stream_main, s);
    if (rc != 0) {
        free(s);
        return ERR(chorusSystemError, SUB_COLL, "pthread_create for a host stream: %s",
                   strerror(rc));
    }
    pthread_mutex_lock(&registry_lock);
    s->next_live = registry;
    registry = s;
    pthread_mutex_unlock(&registry_lock);
    *stream = s;
    return chorusSuccess;
}

static chorusResult_t check_stream(chorusStream_t stream, const char *fn)
{
    debug_clear_error();
    if (stream == NULL)
        return chorusSuccess;
    if (!stream_is_host(stream))
        return ERR(chorusInvalidArgument, SUB_COLL,
                   "%s: stream is not a live host stream made by chorusStreamCreate", fn);
    return chorusSuccess;
}

chorusResult_t chorusStreamSynchronize(chorusStream_t stream)
{
    CHECK(check_stream(stream, "chorusStreamSynchronize"));
    if (stream == NULL)
        return chorusSuccess; /* NULL-stream calls complete before they return */
    host_stream_t *s = stream;
    /* Each queued call has its own deadline, so this wait ends; the backstop below only catches
     * a call that outlives its deadline (plus the failure report) by far. */
    int64_t backstop_ns = (s->timeout_ms + 10000) * 1000000;
    pthread_mutex_lock(&s->mu);
    while (s->head != NULL || s->busy) {
        if (fifo_now_ns() - s->progress_ns > backstop_ns) {
            pthread_mutex_unlock(&s->mu);
            return ERR(chorusTimeout, SUB_COLL,
                       "chorusStreamSynchronize: the host stream's current call has run %lld ms "
                       "past CHORUS_TIMEOUT_MS without ending (please report this)",
                       (long long)(backstop_ns / 1000000));
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->idle_cv, &s->mu, &ts);
    }
    chorusResult_t res = s->error;
    char text[1024];
    memcpy(text, s->error_text, sizeof(text));
    s->error = chorusSuccess;
    s->error_text[0] = '\0';
    pthread_mutex_unlock(&s->mu);
    if (res != chorusSuccess)
        return ERR(res, SUB_COLL, "a call queued on the host stream failed: %s", text);
    return chorusSuccess;
}

chorusResult_t chorusStreamQuery(chorusStream_t stream)
{
    CHECK(check_stream(stream, "chorusStreamQuery"));
    if (stream == NULL)
        return chorusSuccess;
    host_stream_t *s = stream;
    pthread_mutex_lock(&s->mu);
    int idle = s->head == NULL && !s->busy;
    pthread_mutex_unlock(&s->mu);
    return idle ? chorusSuccess : chorusInProgress;
}

chorusResult_t chorusStreamDestroy(chorusStream_t stream)
{
    CHECK(check_stream(stream, "chorusStreamDestroy"));
    if (stream == NULL)
        return ERR(chorusInvalidArgument, SUB_COLL, "chorusStreamDestroy: stream is NULL");
    host_stream_t *s = stream;
    pthread_mutex_lock(&registry_lock);
    for (host_stream_t **pp = &registry; *pp; pp = &(*pp)->next_live)
        if (*pp == s) {
            *pp = s->next_live;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    pthread_mutex_lock(&s->mu);
    s->stop = 1; /* the worker drains the queue first */
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    while (s->spare != NULL) {
        stream_task_t *t = s->spare;
        s->spare = t->next;
        free(t);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->idle_cv);
    s->magic = 0;
    free(s);
    return chorusSuccess;
}
