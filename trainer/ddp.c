/*
 * ddp.c: gradient buckets overlapped with backward, SyncBN's all-reduce, broadcasts and the
 * cross-rank checksum, over Chorus or (the reference) MPI. See ddp.h for the two communicators.
 *
 * Buckets, cut once from the layout of model.grads and identical on every rank:
 *
 *   grads:  [ layer 0: w b gamma beta ][ layer 1: ... ][ layer 2: w b ]
 *   cut from the end, whole layers merged while they fit in --bucket-bytes, big layers sliced:
 *           [ bucket 1 (ready at 0)   ][ bucket 0 (ready at layer 1)    ]
 *   backward finishes layer 2, then 1: bucket 0 goes to the host stream and is summed while
 *   backward computes layer 0; after layer 0 bucket 1 goes; the optimizer waits for the stream.
 *
 * A bucket is ready at the lowest layer it touches, since backward finishes layers from the last
 * to the first. Issue order follows the on_layer_done calls, which are the same on every rank,
 * so every rank issues the same all-reduces in the same order.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chorus_mpi.h"
#include "ddp.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A failed collective leaves the other ranks waiting in theirs: say where, then stop them all. */
static void fatal(const ddp_t *d, const char *call, const char *why)
{
    fprintf(stderr, "chorus-train: rank %d: %s failed: %s\n", d->rank, call, why);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1); /* not reached */
}

static void check_chorus(const ddp_t *d, chorusComm_t comm, const char *call, chorusResult_t res)
{
    if (res != chorusSuccess) {
        char why[1100];
        snprintf(why, sizeof(why), "%s: %s", chorusGetErrorString(res), chorusGetLastError(comm));
        fatal(d, call, why);
    }
}

static void check_mpi(const ddp_t *d, const char *call, int rc)
{
    if (rc != MPI_SUCCESS) {
        char why[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, why, &len);
        fatal(d, call, why);
    }
}

static MPI_Datatype mpi_type(chorusDataType_t t)
{
    switch (t) {
    case chorusUint8:
        return MPI_UINT8_T;
    case chorusInt32:
        return MPI_INT32_T;
    case chorusInt64:
        return MPI_INT64_T;
    case chorusUint64:
        return MPI_UINT64_T;
    case chorusFloat64:
        return MPI_DOUBLE;
    default:
        return MPI_FLOAT;
    }
}

static MPI_Op mpi_op(chorusRedOp_t op)
{
    return op == chorusMax ? MPI_MAX : op == chorusMin ? MPI_MIN : MPI_SUM;
}

static int mpi_count(const ddp_t *d, size_t count)
{
    if (count > INT_MAX)
        fatal(d, "MPI call", "more than INT_MAX elements in one call");
    return (int)count;
}

int ddp_init(ddp_t *d, ddp_backend_t backend, int overlap)
{
    memset(d, 0, sizeof(*d));
    d->backend = backend;
    d->overlap = overlap;
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->nranks);
    if (backend == DDP_MPI)
        return 0;
    /* Every rank learns whether all of them got a communicator, so none waits for a dead one. */
    chorusResult_t res = chorusCommInitMPI(&d->comm, MPI_COMM_WORLD);
    const char *what = "chorusCommInitMPI";
    if (res == chorusSuccess) {
        what = "chorusCommSplit (the gradient communicator)";
        res = chorusCommSplit(d->comm, 0, d->rank, &d->grad_comm, NULL);
    }
    if (res == chorusSuccess) {
        what = "chorusStreamCreate";
        res = chorusStreamCreate(&d->stream);
    }
    int bad = res != chorusSuccess, anybad = 0;
    if (bad)
        fprintf(stderr, "chorus-train: rank %d: %s failed: %s: %s\n", d->rank, what,
                chorusGetErrorString(res), chorusGetLastError(d->comm));
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (anybad) {
        ddp_free(d);
        return -1;
    }
    return 0;
}

void ddp_free(ddp_t *d)
{
    if (d->stream)
        chorusStreamDestroy(d->stream);
    if (d->grad_comm)
        chorusCommDestroy(d->grad_comm);
    if (d->comm)
        chorusCommDestroy(d->comm);
    free(d->buckets);
    d->stream = NULL;
    d->grad_comm = d->comm = NULL;
    d->buckets = NULL;
}

/* owner[i]: the layer whose gradient grads[i] is; INT_MAX for none (padding, never written by
 * backward, so it holds no bucket back). */
static void mark(int *owner, const model_t *m, const float *g, size_t count, int layer)
{
    if (g == NULL)
        return;
    size_t off = (size_t)(g - m->grads);
    for (size_t i = 0; i < count && off + i < m->nparams; i++)
        owner[off + i] = layer;
}

static int add_bucket(ddp_t *d, size_t lo, size_t hi, const int *owner, int *cap)
{
    if (d->nbuckets == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        ddp_bucket_t *b = realloc(d->buckets, sizeof(*b) * *cap);
        if (b == NULL)
            return -1;
        d->buckets = b;
    }
    int ready = INT_MAX;
    for (size_t i = lo; i < hi; i++)
        ready = owner[i] < ready ? owner[i] : ready;
    d->buckets[d->nbuckets++] = (ddp_bucket_t){lo, hi - lo, ready};
    return 0;
}

int ddp_buckets(ddp_t *d, const model_t *m, size_t bucket_bytes)
{
    size_t cap_floats = bucket_bytes / sizeof(float);
    if (cap_floats == 0)
        cap_floats = 1;
    if (cap_floats > INT_MAX)
        cap_floats = INT_MAX; /* one MPI call's count */
    int *owner = malloc(sizeof(int) * (m->nparams ? m->nparams : 1));
    if (owner == NULL)
        return -1;
    for (size_t i = 0; i < m->nparams; i++)
        owner[i] = INT_MAX;
    for (int l = 0; l < m->nlayers; l++) {
        const layer_t *L = &m->layers[l];
        mark(owner, m, L->dw, (size_t)L->out * L->in, l);
        mark(owner, m, L->db, L->out, l);
        if (L->bn) {
            mark(owner, m, L->dgamma, L->out, l);
            mark(owner, m, L->dbeta, L->out, l);
        }
    }
    d->grads = m->grads;
    d->nbuckets = 0;
    int cap = 0;
    /* Walk runs of one owner from the end; close the bucket when the next run does not fit. */
    size_t hi = m->nparams, bucket_hi = m->nparams;
    while (hi > 0) {
        size_t lo = hi;
        while (lo > 0 && owner[lo - 1] == owner[hi - 1])
            lo--;
        if (bucket_hi - hi > 0 && bucket_hi - lo > cap_floats) {
            if (add_bucket(d, hi, bucket_hi, owner, &cap) != 0)
                goto err;
            bucket_hi = hi;
        }
        while (bucket_hi - lo > cap_floats) { /* a run bigger than a bucket: full slices */
            if (add_bucket(d, bucket_hi - cap_floats, bucket_hi, owner, &cap) != 0)
                goto err;
            bucket_hi -= cap_floats;
        }
        hi = lo;
    }
    if (bucket_hi > 0 && add_bucket(d, 0, bucket_hi, owner, &cap) != 0)
        goto err;
    free(owner);
    return 0;
err:
    free(owner);
    return -1;
}

void ddp_grads_begin(ddp_t *d)
{
    d->issued = 0;
}

/* Bucket all-reduces are issued in index order; a bucket waits for the ones before it. */
static void issue(ddp_t *d, int b)
{
    float *g = d->grads + d->buckets[b].offset;
    size_t count = d->buckets[b].count;
    d->grad_allreduces++;
    if (d->backend == DDP_MPI) {
        double t0 = now_s();
        check_mpi(d, "MPI_Allreduce (gradient bucket)",
                  MPI_Allreduce(MPI_IN_PLACE, g, mpi_count(d, count), MPI_FLOAT, MPI_SUM,
                                MPI_COMM_WORLD));
        d->grad_wait_s += now_s() - t0;
        return;
    }
    check_chorus(d, d->grad_comm, "chorusAllReduce (gradient bucket)",
                 chorusAllReduce(g, g, count, chorusFloat32, chorusSum, d->grad_comm, d->stream));
}

void ddp_on_layer_done(int layer, void *ctx)
{
    ddp_t *d = ctx;
    while (d->issued < d->nbuckets && d->buckets[d->issued].ready_layer >= layer)
        issue(d, d->issued++);
}

void ddp_grads_finish(ddp_t *d)
{
    while (d->issued < d->nbuckets)
        issue(d, d->issued++);
    if (d->backend == DDP_MPI)
        return;
    double t0 = now_s();
    check_chorus(d, d->grad_comm, "chorusStreamSynchronize (gradient buckets)",
                 chorusStreamSynchronize(d->stream));
    d->grad_wait_s += now_s() - t0;
}

int ddp_bn_allreduce(float *buf, int count, void *ctx)
{
    ddp_t *d = ctx;
    double t0 = now_s();
    ddp_allreduce(d, buf, (size_t)count, chorusFloat32, chorusSum);
    d->bn_wait_s += now_s() - t0;
    return 0;
}

void ddp_allreduce(ddp_t *d, void *buf, size_t count, chorusDataType_t dtype, chorusRedOp_t op)
{
    if (d->backend == DDP_MPI)
        check_mpi(d, "MPI_Allreduce",
                  MPI_Allreduce(MPI_IN_PLACE, buf, mpi_count(d, count), mpi_type(dtype), mpi_op(op),
                                MPI_COMM_WORLD));
    else
        check_chorus(d, d->comm, "chorusAllReduce",
                     chorusAllReduce(buf, buf, count, dtype, op, d->comm, NULL));
}

void ddp_broadcast(ddp_t *d, void *buf, size_t count, chorusDataType_t dtype, int root)
{
    if (d->backend == DDP_MPI)
        check_mpi(d, "MPI_Bcast",
                  MPI_Bcast(buf, mpi_count(d, count), mpi_type(dtype), root, MPI_COMM_WORLD));
    else
        check_chorus(d, d->comm, "chorusBroadcast",
                     chorusBroadcast(buf, buf, count, dtype, root, d->comm, NULL));
}

void ddp_allgather(ddp_t *d, const void *mine, void *all, size_t count, chorusDataType_t dtype)
{
    if (d->backend == DDP_MPI)
        check_mpi(d, "MPI_Allgather",
                  MPI_Allgather(mine, mpi_count(d, count), mpi_type(dtype), all,
                                mpi_count(d, count), mpi_type(dtype), MPI_COMM_WORLD));
    else
        check_chorus(d, d->comm, "chorusAllGather",
                     chorusAllGather(mine, all, count, dtype, d->comm, NULL));
}

/* ---- the cross-rank checksum ---- */

typedef struct tensor {
    char name[48];
    const float *x;
    size_t count;
} tensor_t;

/* Sum of bits[i] * (2i + 1) mod 2^64: a change of any one element changes it (odd factors are
 * invertible mod 2^64), and so does moving a value to another position. */
static uint64_t checksum(const float *x, size_t n)
{
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof(bits));
        h += (uint64_t)bits * (2 * (uint64_t)i + 1);
    }
    return h;
}

static void add_tensor(tensor_t *t, int *n, const char *name, int layer, const float *x,
                       size_t count)
{
    if (x == NULL || count == 0)
        return;
    snprintf(t[*n].name, sizeof(t[*n].name), "layer%d.%s", layer, name);
    t[*n].x = x;
    t[*n].count = count;
    (*n)++;
}

/* Every tensor of the model, its optimizer state, and (with_buffers) BN running statistics. */
static int list_tensors(const model_t *m, const optim_t *o, int with_buffers, tensor_t *t)
{
    int n = 0;
    const char *m_name = o->kind == OPT_SGD ? "momentum" : "adam_m";
    for (int l = 0; l < m->nlayers; l++) {
        const layer_t *L = &m->layers[l];
        const float *p[4] = {L->w, L->b, L->bn ? L->gamma : NULL, L->bn ? L->beta : NULL};
        const char *names[4] = {"w", "b", "gamma", "beta"};
        size_t counts[4] = {(size_t)L->out * L->in, L->out, L->out, L->out};
        for (int i = 0; i < 4; i++) {
            if (p[i] == NULL)
                continue;
            size_t off = (size_t)(p[i] - m->params);
            char name[40];
            add_tensor(t, &n, names[i], l, p[i], counts[i]);
            snprintf(name, sizeof(name), "%s.%s", names[i], m_name);
            add_tensor(t, &n, name, l, o->m ? o->m + off : NULL, counts[i]);
            snprintf(name, sizeof(name), "%s.adam_v", names[i]);
            add_tensor(t, &n, name, l, o->v ? o->v + off : NULL, counts[i]);
        }
        if (with_buffers && L->bn) {
            add_tensor(t, &n, "run_mean", l, L->run_mean, L->out);
            add_tensor(t, &n, "run_var", l, L->run_var, L->out);
        }
    }
    return n;
}

/* all[r * n + i]: rank r's checksum of tensor i, for the tensor bad. Names the ranks that differ
 * from the majority (or from rank 0 when there is no majority, e.g. with 2 ranks). */
static void describe(const ddp_t *d, const uint64_t *all, int n, int bad, const char *names,
                     char *msg, size_t msglen)
{
    uint64_t ref = all[bad];
    int best = 0;
    for (int r = 0; r < d->nranks; r++) {
        int same = 0;
        for (int q = 0; q < d->nranks; q++)
            same += all[(size_t)q * n + bad] == all[(size_t)r * n + bad];
        if (same > best)
            best = same, ref = all[(size_t)r * n + bad];
    }
    int majority = 2 * best > d->nranks;
    if (!majority)
        ref = all[bad]; /* rank 0's */
    size_t len = (size_t)snprintf(msg, msglen, "checksum mismatch in %s: ", names);
    int nodd = 0;
    for (int r = 0; r < d->nranks && len < msglen; r++) {
        if (all[(size_t)r * n + bad] == ref)
            continue;
        len += (size_t)snprintf(msg + len, msglen - len, "%srank %d", nodd ? ", " : "", r);
        nodd++;
    }
    if (len < msglen)
        snprintf(msg + len, msglen - len, " %s %s", nodd > 1 ? "differ from" : "differs from",
                 majority ? "the other ranks" : "rank 0");
}

int ddp_check(ddp_t *d, const model_t *m, const optim_t *o, int with_buffers, char *msg,
              size_t msglen)
{
    int max_tensors = 14 * m->nlayers; /* w b gamma beta, each with m and v; 2 buffers */
    tensor_t *t = calloc((size_t)max_tensors, sizeof(*t));
    uint64_t *h = calloc((size_t)2 * max_tensors, sizeof(*h));
    if (t == NULL || h == NULL)
        fatal(d, "checksum", "out of memory");
    int n = list_tensors(m, o, with_buffers, t);
    /* One MAX all-reduce of {h, ~h} gives the max and (complemented) the min of every tensor. */
    for (int i = 0; i < n; i++) {
        h[i] = checksum(t[i].x, t[i].count);
        h[n + i] = ~h[i];
    }
    ddp_allreduce(d, h, (size_t)2 * n, chorusUint64, chorusMax);
    int bad = -1, nbad = 0;
    char names[256] = "";
    for (int i = 0; i < n; i++) {
        if (h[i] == ~h[n + i])
            continue;
        size_t len = strlen(names);
        if (nbad < 4)
            snprintf(names + len, sizeof(names) - len, "%s%s", nbad ? ", " : "", t[i].name);
        else if (nbad == 4)
            snprintf(names + len, sizeof(names) - len, ", ...");
        nbad++;
        bad = bad < 0 ? i : bad;
    }
    if (nbad > 0) { /* rare: gather every rank's checksums to say who differs */
        uint64_t *all = calloc((size_t)n * d->nranks, sizeof(*all));
        if (all == NULL)
            fatal(d, "checksum", "out of memory");
        for (int i = 0; i < n; i++)
            h[i] = checksum(t[i].x, t[i].count);
        ddp_allgather(d, h, all, (size_t)n, chorusUint64);
        size_t len = strlen(names);
        snprintf(names + len, sizeof(names) - len, " (%d of %d tensors)", nbad, n);
        describe(d, all, n, bad, names, msg, msglen);
        free(all);
    }
    free(h);
    free(t);
    return nbad > 0;
}
