/*
 * chain_broadcast.c: pipelined chain broadcast along the ring, starting at the root.
 *
 * With d = distance from the root along the ring:
 *
 *   d = 0 (root)   copy_send       sendbuff -> recvbuff (if out of place) and -> next
 *   d = 1..n-2     recv_copy_send  -> recvbuff and -> next
 *   d = n-1        recv            -> recvbuff
 *
 * Slot-sized slices flow down the chain, so a large broadcast costs the buffer once plus n-2
 * slices of latency. Only the root reads sendbuff.
 */
#include "algo.h"
#include "debug.h"

chorusResult_t chain_broadcast_program(const channel_work_t *w)
{
    prims_t p = w->prims;
    const coll_args_t *a = w->args;
    const int n = w->ring->nranks, d = ring_distance(w->ring, a->root);
    size_t choff, chlen;
    algo_part(a->count, w->nchannels, w->channel, &choff, &chlen);
    char *out = (char *)a->recvbuff + choff * p.esize;
    if (d == 0) {
        const char *in = (const char *)a->sendbuff + choff * p.esize;
        if (n == 1)
            prims_local_copy(&p, in, out, chlen, 0);
        else
            CHECK(prims_copy_send(&p, in, out, chlen));
    } else if (d == n - 1) {
        CHECK(prims_recv(&p, out, chlen));
    } else {
        CHECK(prims_recv_copy_send(&p, out, chlen));
    }
    return chorusSuccess;
}
