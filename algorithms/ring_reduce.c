/*
 * ring_reduce.c: pipelined chain reduce along the ring, ending at the root.
 *
 * With d = distance from the root along the ring (root d=0, its next d=1, ...):
 *
 *   d = 1          send              sendbuff            (the chain starts after the root)
 *   d = 2..n-1     recv_reduce_send  sendbuff
 *   d = 0 (root)   recv_reduce_copy  sendbuff -> recvbuff (final: avg divides here)
 *
 * Slot-sized slices flow down the chain without waiting for whole buffers: latency n-1 slices plus
 * the buffer once. The chain is not a cycle, so it needs no chunking to stay deadlock-free.
 */
#include "algo.h"
#include "debug.h"

chorusResult_t ring_reduce_program(const channel_work_t *w)
{
    prims_t p = w->prims;
    const coll_args_t *a = w->args;
    const int n = w->ring->nranks, d = ring_distance(w->ring, a->root);
    size_t choff, chlen;
    algo_part(a->count, w->nchannels, w->channel, &choff, &chlen);
    const char *in = (const char *)a->sendbuff + choff * p.esize;
    char *out = d == 0 ? (char *)a->recvbuff + choff * p.esize : NULL;
    if (n == 1)
        prims_local_copy(&p, in, out, chlen, 1);
    else if (d == 1)
        CHECK(prims_send(&p, in, chlen));
    else if (d == 0)
        CHECK(prims_recv_reduce_copy(&p, in, out, chlen, 1));
    else
        CHECK(prims_recv_reduce_send(&p, in, chlen));
    return chorusSuccess;
}
