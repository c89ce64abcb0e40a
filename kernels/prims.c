/*
 * prims.c: the primitives over the FIFO contract, with the memops backend doing the bytes.
 *
 * Every primitive walks its range slot by slot: wait for the input slot (recv) and/or the output
 * slot (send), do one memops call per slot, then publish. Reductions write straight into the
 * next rank's slot, so a recv_reduce_send costs one pass over the data.
 */
#include "prims.h"

#include <string.h>

#include "debug.h"

static inline size_t slice_count(const prims_t *p, const conn_t *c)
{
    return c->slot_nbytes / p->esize;
}

/* Wait for the next filled slot of c and check it holds count elements. */
static chorusResult_t wait_recv_on(prims_t *p, conn_t *c, void **slot_p, size_t count)
{
    uint32_t nbytes = 0;
    p->wait.peer = c->peer;
    CHECK(fifo_wait_recv(c, &p->wait, slot_p, &nbytes));
    if (nbytes != count * p->esize)
        return ERR(chorusInvalidUsage, SUB_COLL,
                   "peer rank %d sent a %u-byte slice where %zu bytes were expected: the ranks "
                   "called the collective with different counts, datatypes or roots",
                   c->peer, nbytes, count * p->esize);
    return chorusSuccess;
}

static chorusResult_t wait_recv(prims_t *p, void **slot_p, size_t count)
{
    return wait_recv_on(p, p->recv, slot_p, count);
}

static chorusResult_t wait_send(prims_t *p, void **slot_p)
{
    p->wait.peer = p->send->peer;
    return fifo_wait_send(p->send, &p->wait, slot_p);
}

/* A copy into a send slot, whose lines the peer read a few slices ago: plain stores take each line
 * back from the peer's cache first, streaming stores do not. On the AMD VM of 2026-12-07 (a plain
 * write over lines the other vCPU had just read 6-24x a private one, `take_back`; streaming 1.7x)
 * 2-rank rings with plain stores ran at a third of their speed in 2 of 3 runs, streamed in none
 * (three alternated runs each, all_reduce_perf / reduce_scatter_perf / broadcast_perf -w 2 -n 8):
 * all-reduce 64 MiB 9.8-13.4 ms streamed against 9.8, 32.4, 32.3; 256 MiB 37-59 against 38, 129,
 * 127; broadcast 64 MiB 5.8-8.7 against 29, 29, 6.3 out of place, 4.8-8.3 against 16, 16, 4.3 in
 * place. From 4 to 32 MiB, where plain stores did not collapse in those runs, streaming cost up
 * to 1.4x (32 MiB 7.6 ms against 5.5):
 * calls past CHORUS_NT_MIN_BYTES stream, and below it each rank chooses per class of calls from
 * its own call times (src/slot_adapt.c; prims_t.stream_send either way). */
static void slot_copy(const prims_t *p, void *out, const void *src, size_t nbytes)
{
    memops_copy(p->ops, p->stream_send, out, src, nbytes);
}

static void finalize(prims_t *p, void *dst, size_t n, int final)
{
    if (final && p->op == chorusAvg && p->divisor > 1)
        p->ops->divide(dst, dst, n, p->dtype, p->divisor);
}

/* The slice length at offset off of a count-element range over connection c. */
#define FOR_SLICES(p, c, count, off, n)                                                            \
    for (size_t off = 0, n = 0, step_ = slice_count(p, c);                                         \
         off < (count) && ((n = ((count)-off < step_ ? (count)-off : step_)), 1); off += n)

chorusResult_t prims_send(prims_t *p, const void *src, size_t count)
{
    const char *s = src;
    FOR_SLICES(p, p->send, count, off, n)
    {
        void *out;
        CHECK(wait_send(p, &out));
        slot_copy(p, out, s + off * p->esize, n * p->esize);
        fifo_post_send(p->send, (uint32_t)(n * p->esize));
    }
    return chorusSuccess;
}

chorusResult_t prims_recv(prims_t *p, void *dst, size_t count)
{
    char *d = dst;
    FOR_SLICES(p, p->recv, count, off, n)
    {
        void *in;
        CHECK(wait_recv(p, &in, n));
        prims_copy_out(p, d + off * p->esize, in, n * p->esize);
        fifo_post_recv(p->recv);
    }
    return chorusSuccess;
}

chorusResult_t prims_recv_reduce_send(prims_t *p, const void *src, size_t count)
{
    const char *s = src;
    FOR_SLICES(p, p->recv, count, off, n)
    {
        void *in, *out;
        CHECK(wait_recv(p, &in, n));
        CHECK(wait_send(p, &out));
        p->ops->reduce(out, in, s + off * p->esize, n, p->dtype, p->op);
        fifo_post_send(p->send, (uint32_t)(n * p->esize));
        fifo_post_recv(p->recv);
    }
    return chorusSuccess;
}

chorusResult_t prims_recv_reduce_copy(prims_t *p, const void *src, void *dst, size_t count,
                                      int final)
{
    const char *s = src;
    char *d = dst;
    FOR_SLICES(p, p->recv, count, off, n)
    {
        void *in;
        CHECK(wait_recv(p, &in, n));
        p->ops->reduce(d + off * p->esize, in, s + off * p->esize, n, p->dtype, p->op);
        finalize(p, d + off * p->esize, n, final);
        fifo_post_recv(p->recv);
    }
    return chorusSuccess;
}

chorusResult_t prims_recv_reduce_copy_send(prims_t *p, const void *src, void *dst, size_t count,
                                           int final)
{
    const char *s = src;
    char *d = dst;
    FOR_SLICES(p, p->recv, count, off, n)
    {
        void *in, *out;
        CHECK(wait_recv(p, &in, n));
        CHECK(wait_send(p, &out));
        p->ops->reduce(d + off * p->esize, in, s + off * p->esize, n, p->dtype, p->op);
        finalize(p, d + off * p->esize, n, final);
        slot_copy(p, out, d + off * p->esize, n * p->esize);
        fifo_post_send(p->send, (uint32_t)(n * p->esize));
        fifo_post_recv(p->recv);
    }
    return chorusSuccess;
}

chorusResult_t prims_recv_copy_send(prims_t *p, void *dst, size_t count)
{
    char *d = dst;
    FOR_SLICES(p, p->recv, count, off, n)
    {
        void *in, *out;
        CHECK(wait_recv(p, &in, n));
        CHECK(wait_send(p, &out));
        slot_copy(p, out, in, n * p->esize);
        prims_copy_out(p, d + off * p->esize, in, n * p->esize);
        fifo_post_send(p->send, (uint32_t)(n * p->esize));
        fifo_post_recv(p->recv);
    }
    return chorusSuccess;
}

chorusResult_t prims_copy_send(prims_t *p, const void *src, void *dst, size_t count)
{
    const char *s = src;
    char *d = dst;
    FOR_SLICES(p, p->send, count, off, n)
    {
        void *out;
        CHECK(wait_send(p, &out));
        slot_copy(p, out, s + off * p->esize, n * p->esize);
        if (d != NULL && d != s)
            prims_copy_out(p, d + off * p->esize, s + off * p->esize, n * p->esize);
        fifo_post_send(p->send, (uint32_t)(n * p->esize));
    }
    return chorusSuccess;
}

size_t prims_slice_elems(const prims_t *p, const conn_t *c)
{
    return slice_count(p, c);
}

chorusResult_t prims_tree(prims_t *p, conn_t *const *recvs, int nrecv, conn_t *const *sends,
                          int nsend, const void *src, void *dst, size_t count, int final)
{
    const conn_t *c0 = nrecv > 0 ? recvs[0] : nsend > 0 ? sends[0] : NULL;
    if (c0 == NULL) {
        if (src != NULL && dst != NULL)
            prims_local_copy(p, src, dst, count, final);
        return chorusSuccess;
    }
    const char *s = src;
    char *d = dst;
    void *in[8], *out[8];
    if (nrecv > 8 || nsend > 8 || (src == NULL && nrecv == 0))
        return ERR(chorusInternalError, SUB_COLL,
                   "prims_tree: %d inputs and %d outputs (at most 8 each), src %s", nrecv, nsend,
                   src ? "given" : "NULL");
    FOR_SLICES(p, c0, count, off, n)
    {
        size_t nb = n * p->esize;
        for (int i = 0; i < nrecv; i++)
            CHECK(wait_recv_on(p, recvs[i], &in[i], n));
        for (int i = 0; i < nsend; i++) {
            p->wait.peer = sends[i]->peer;
            CHECK(fifo_wait_send(sends[i], &p->wait, &out[i]));
        }
        /* The result is built in the first output (a send slot, else dst), then copied on; a
         * pure forward (one input, no src) copies the received slot itself. */
        char *t = nsend > 0 ? out[0] : d + off * p->esize;
        const char *sv = s != NULL ? s + off * p->esize : NULL;
        if (sv == NULL && nrecv == 1) {
            t = in[0];
        } else {
            const char *a = sv != NULL ? sv : in[0]; /* start value */
            int first = sv != NULL ? 0 : 1; /* first received slice still to reduce */
            if (first == nrecv) {
                if (t != a)
                    p->ops->copy(t, a, nb);
            } else {
                p->ops->reduce(t, in[first], a, n, p->dtype, p->op);
                for (int i = first + 1; i < nrecv; i++)
                    p->ops->reduce(t, t, in[i], n, p->dtype, p->op);
            }
            finalize(p, t, n, final);
        }
        if (d != NULL && t != d + off * p->esize)
            prims_copy_out(p, d + off * p->esize, t, nb);
        for (int i = 0; i < nsend; i++)
            if (out[i] != t)
                p->ops->copy(out[i], t, nb);
        for (int i = 0; i < nsend; i++)
            fifo_post_send(sends[i], (uint32_t)nb);
        for (int i = 0; i < nrecv; i++)
            fifo_post_recv(recvs[i]);
    }
    return chorusSuccess;
}

void prims_local_copy(prims_t *p, const void *src, void *dst, size_t count, int final)
{
    if (dst != src)
        prims_copy_out(p, dst, src, count * p->esize);
    finalize(p, dst, count, final);
}

/* The bytes of the next slice (of nbytes - done left) and where its data lies in the slot. */
static size_t slice_nbytes(const conn_t *c, size_t left)
{
    size_t cap = c->slot_hdr ? c->slot_nbytes - 64 : c->slot_nbytes;
    return left < cap ? left : cap;
}

static char *slice_data(const conn_t *c, size_t n)
{
    char *slot = c->slots + (c->step % c->steps) * c->slot_nbytes;
    if (!c->slot_hdr)
        return slot;
    return n <= FIFO_SLOT_INLINE ? (char *)((fifo_slot_hdr_t *)slot)->data : slot + 64;
}

/* Consumer: the next slot holds a slice (its header's seq, or tail). */
static int recv_ready(const conn_t *c)
{
    if (!c->slot_hdr)
        return fifo_can_recv(c);
    const fifo_slot_hdr_t *h =
        (const fifo_slot_hdr_t *)(c->slots + (c->step % c->steps) * c->slot_nbytes);
    return __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) == c->step + 1;
}

chorusResult_t prims_try_send(conn_t *c, const memops_ops_t *ops, const char *src, size_t nbytes,
                              size_t *done_p)
{
    /* The failure flag first, then the counter: the proxy publishes what the wire finished
     * before it fails the connection, so data that came in ahead of a failure is still used. */
    if (*done_p < nbytes && fifo_failed(c) && !fifo_can_send(c))
        return ERR(chorusRemoteError, SUB_P2P, "the connection to peer rank %d failed", c->peer);
    while (*done_p < nbytes && fifo_can_send(c)) {
        size_t n = slice_nbytes(c, nbytes - *done_p);
        ops->copy(slice_data(c, n), src + *done_p, n);
        if (c->slot_hdr) {
            fifo_slot_hdr_t *h =
                (fifo_slot_hdr_t *)(c->slots + (c->step % c->steps) * c->slot_nbytes);
            h->nbytes = (uint32_t)n;
            __atomic_store_n(&h->seq, c->step + 1, __ATOMIC_RELEASE);
            c->step++;
        } else {
            fifo_post_send(c, (uint32_t)n);
        }
        *done_p += n;
    }
    return chorusSuccess;
}

chorusResult_t prims_try_recv(conn_t *c, const memops_ops_t *ops, char *dst, size_t nbytes,
                              size_t *done_p)
{
    if (*done_p < nbytes && fifo_failed(c) && !recv_ready(c)) /* in that order: see above */
        return ERR(chorusRemoteError, SUB_P2P, "the connection from peer rank %d failed", c->peer);
    while (*done_p < nbytes && recv_ready(c)) {
        size_t want = slice_nbytes(c, nbytes - *done_p);
        const char *slot = c->slots + (c->step % c->steps) * c->slot_nbytes;
        uint32_t got = c->slot_hdr ? ((const fifo_slot_hdr_t *)slot)->nbytes
                                   : c->ctrl->sizes[c->step % c->steps];
        if (got != want)
            return ERR(chorusInvalidUsage, SUB_P2P,
                       "peer rank %d sent a %u-byte slice where %zu bytes were expected: the "
                       "chorusSend count does not match the chorusRecv count",
                       c->peer, got, want);
        ops->copy(dst + *done_p, slice_data(c, want), want);
        fifo_post_recv(c);
        *done_p += want;
    }
    return chorusSuccess;
}
