/*
 * prims.h: the primitives every channel program is written with (DESIGN section 6).
 *
 * A primitive moves `count` elements through the channel's connections, split into FIFO slots
 * (slices) and pipelined: slice k of a recv_reduce_send goes out as soon as slice k came in, while
 * the peer is already filling slice k+1. Data movement goes through a memops backend, so the same
 * primitives serve host and device buffers. Both ends of a connection slice a length the same way
 * (slot_nbytes / element size), and the receiver checks each slot's size against the one it
 * expects: a mismatch means the ranks passed different arguments and is reported, not ignored.
 */
#ifndef CHORUS_PRIMS_H
#define CHORUS_PRIMS_H

#include <stddef.h>
#include <stdint.h>

#include "fifo.h"
#include "memops.h"

typedef struct prims {
    conn_t *send; /* to the next rank of the schedule; NULL when unused */
    conn_t *recv; /* from the previous rank; NULL when unused */
    const memops_ops_t *ops;
    chorusDataType_t dtype;
    chorusRedOp_t op;
    size_t esize;
    wait_ctx_t wait; /* abort flag, deadline, spin; peer is filled per connection */
    uint64_t divisor; /* avg: the rank count, applied where a result becomes final; else 0 */
    int stream_out; /* the call's output outgrows the caches: copies into it stream (copy_out) */
    /* Copies into send slots stream (copy_out), so the writer takes no line back from the
     * reader of the slot's last slice: the call outgrows the caches (CHORUS_NT_MIN_BYTES, in
     * place too), or src/slot_adapt.c chose it for the call's class; see prims.c slot_copy.
     * The direct algorithms: the same for copies into this rank's window (direct_copy_in). */
    int stream_send;
    /* The direct algorithms: ns this call has spent copying into this rank's window, where its
     * plan times them (src/enqueue.c run_coll); -1: not timed. */
    int64_t win_copy_ns;
} prims_t;

/* A step's copy into the caller's output buffer. */
static inline void prims_copy_out(const prims_t *p, void *dst, const void *src, size_t nbytes)
{
    memops_copy(p->ops, p->stream_out, dst, src, nbytes);
}

/* send: src -> next. */
chorusResult_t prims_send(prims_t *p, const void *src, size_t count);
/* recv: prev -> dst. */
chorusResult_t prims_recv(prims_t *p, void *dst, size_t count);
/* recv_reduce_send: (prev op src) -> next. */
chorusResult_t prims_recv_reduce_send(prims_t *p, const void *src, size_t count);
/* recv_reduce_copy: (prev op src) -> dst; final applies avg's division. */
chorusResult_t prims_recv_reduce_copy(prims_t *p, const void *src, void *dst, size_t count,
                                      int final);
/* recv_reduce_copy_send: (prev op src) -> dst and -> next; final applies avg's division. */
chorusResult_t prims_recv_reduce_copy_send(prims_t *p, const void *src, void *dst, size_t count,
                                           int final);
/* recv_copy_send: prev -> dst and -> next. */
chorusResult_t prims_recv_copy_send(prims_t *p, void *dst, size_t count);
/* copy_send: src -> dst (unless dst is NULL or src) and src -> next. */
chorusResult_t prims_copy_send(prims_t *p, const void *src, void *dst, size_t count);
/* Local step of a schedule: dst = src (no connection); final applies avg's division. */
void prims_local_copy(prims_t *p, const void *src, void *dst, size_t count, int final);

/* Tree step over several connections (all with one slot size): receive a slice from each of
 * recvs[0..nrecv) and reduce them, in that order, with src (src NULL: the first received slice is
 * the start value; nrecv 0: src is the data); then write the result to dst (unless NULL) and to
 * every sends[0..nsend). final applies avg's division to the result. */
chorusResult_t prims_tree(prims_t *p, conn_t *const *recvs, int nrecv, conn_t *const *sends,
                          int nsend, const void *src, void *dst, size_t count, int final);
/* Elements per slot of connection c (the slice a tree program steps by). */
size_t prims_slice_elems(const prims_t *p, const conn_t *c);

/* Non-blocking halves for progress loops over many connections (send/recv, all-to-all): move as
 * many whole slots as are available now, advance *done_p (bytes), never wait. */
chorusResult_t prims_try_send(conn_t *c, const memops_ops_t *ops, const char *src, size_t nbytes,
                              size_t *done_p);
chorusResult_t prims_try_recv(conn_t *c, const memops_ops_t *ops, char *dst, size_t nbytes,
                              size_t *done_p);

#endif /* CHORUS_PRIMS_H */
