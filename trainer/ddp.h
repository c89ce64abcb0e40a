/*
 * ddp.h: the data-parallel plumbing of chorus-train, everything that talks to other ranks.
 *
 * Two backends behind one face: "chorus" (the library under test) and "mpi" (MPI_Allreduce and
 * friends, the reference). With chorus, gradient buckets go to a host stream on their own
 * communicator while the main thread goes on with backward; everything else (SyncBN statistics,
 * broadcasts, checksums, metrics) is blocking on a second communicator, so the two never race for
 * one communicator's issue order. A failed collective is fatal: the message names the rank and
 * the call, then MPI_Abort stops every rank (a rank that stops alone would hang the others).
 */
#ifndef CHORUS_TRAIN_DDP_H
#define CHORUS_TRAIN_DDP_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "nn.h"

typedef enum { DDP_CHORUS, DDP_MPI } ddp_backend_t;

/* A contiguous slice of model.grads, all-reduced as one call once its gradients are final.
 * Buckets are numbered from the end of grads and issued in index order. */
typedef struct ddp_bucket {
    size_t offset, count; /* floats */
    int ready_layer; /* final once backward has finished this layer (the lowest it touches) */
} ddp_bucket_t;

typedef struct ddp {
    ddp_backend_t backend;
    int rank, nranks;
    int overlap; /* 1: a bucket's all-reduce starts as soon as backward has produced it */
    chorusComm_t comm; /* blocking calls on the NULL stream: SyncBN, broadcast, checks, metrics */
    chorusComm_t grad_comm; /* gradient buckets, queued on stream */
    chorusStream_t stream;
    float *grads;
    ddp_bucket_t *buckets;
    int nbuckets;
    int issued; /* buckets issued in the current step, in index order */
    /* Counters for the epoch table and the tests. */
    int64_t grad_allreduces; /* bucket all-reduces issued since start */
    double grad_wait_s; /* time the main thread waited for gradient buckets */
    double bn_wait_s; /* time in SyncBN all-reduces (blocking by nature) */
} ddp_t;

/* Collective over MPI_COMM_WORLD (MPI initialized): set up the backend. Returns 0, or -1 after
 * printing why (every rank returns -1 together when Chorus cannot start). */
int ddp_init(ddp_t *d, ddp_backend_t backend, int overlap);
void ddp_free(ddp_t *d);

/* Cut m->grads into buckets of about bucket_bytes (a layer's gradients are never waited for by
 * a bucket of another layer's unless they share one), the same on every rank. */
int ddp_buckets(ddp_t *d, const model_t *m, size_t bucket_bytes);
/* Before the backward pass whose gradients are to be all-reduced. */
void ddp_grads_begin(ddp_t *d);
/* model_backward's on_layer_done: issue (queue) every bucket that layer made final. */
void ddp_on_layer_done(int layer, void *ctx);
/* Issue the buckets not issued yet and wait until every bucket is summed across ranks. */
void ddp_grads_finish(ddp_t *d);

/* SyncBatchNorm's hook (allreduce_fn_t): sum count floats in place across ranks, blocking. */
int ddp_bn_allreduce(float *buf, int count, void *ctx);

/* Blocking collectives on the side communicator. */
void ddp_allreduce(ddp_t *d, void *buf, size_t count, chorusDataType_t dtype, chorusRedOp_t op);
void ddp_broadcast(ddp_t *d, void *buf, size_t count, chorusDataType_t dtype, int root);
void ddp_allgather(ddp_t *d, const void *mine, void *all, size_t count, chorusDataType_t dtype);

/* Compare parameters, optimizer state and (with_buffers) BN buffers across ranks: a checksum of
 * every tensor, MAX-all-reduced with its complement (so max and min in one call). Returns 0 when
 * every rank holds the same bits, 1 on a mismatch with msg naming the rank(s) and the tensor. */
int ddp_check(ddp_t *d, const model_t *m, const optim_t *o, int with_buffers, char *msg,
              size_t msglen);

#endif /* CHORUS_TRAIN_DDP_H */
