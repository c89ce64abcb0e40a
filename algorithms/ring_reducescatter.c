/*
 * ring_reducescatter.c: ring reduce-scatter; rank r ends with block r of the reduction.
 *
 * Input block b (b = 0..n-1) is sendbuff + b*recvcount. Per loop chunk, ring position i does:
 *
 *   step 0        send              block of position i-1
 *   steps 1..n-2  recv_reduce_send  block of position i-1-s
 *   step n-1      recv_reduce_copy  own block -> recvbuff   (final: avg divides here)
 *
 * n-1 communication steps; chunks are at most half the FIFO so step 0 always fits.
 */
#include "algo.h"
#include "debug.h"

chorusResult_t ring_reducescatter_program(const channel_work_t *w)
{
    prims_t p = w->prims;
    const coll_args_t *a = w->args;
    const int n = w->ring->nranks, idx = w->ring->index;
    const int *ranks = w->ring->ranks;
    size_t choff, chlen;
    algo_part(a->count, w->nchannels, w->channel, &choff, &chlen);
    const char *in = a->sendbuff;
    char *out = (char *)a->recvbuff + choff * p.esize;
    if (n == 1) {
        prims_local_copy(&p, in + choff * p.esize, out, chlen, 1);
        return chorusSuccess;
    }
    const size_t chunk = ring_chunk_elems(&p);
    for (size_t off = 0; off < chlen; off += chunk) {
        size_t real = chlen - off < chunk ? chlen - off : chunk;
#define BLOCK(pos) (in + ((size_t)ranks[pos] * a->count + choff + off) * p.esize)
        CHECK(prims_send(&p, BLOCK(ring_mod(idx - 1, n)), real));
        for (int s = 1; s <= n - 2; s++)
            CHECK(prims_recv_reduce_send(&p, BLOCK(ring_mod(idx - 1 - s, n)), real));
        CHECK(prims_recv_reduce_copy(&p, BLOCK(idx), out + off * p.esize, real, 1));
#undef BLOCK
    }
    return chorusSuccess;
}
