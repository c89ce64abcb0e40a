/*
 * ring_allgather.c: ring all-gather; block b of recvbuff comes from rank b.
 *
 * Per loop chunk, ring position i does:
 *
 *   step 0        copy_send       own block (sendbuff -> its place in recvbuff, and -> next)
 *   steps 1..n-2  recv_copy_send  block of position i-s
 *   last          recv            block of position i+1
 *
 * n-1 communication steps; chunks are at most half the FIFO so step 0 always fits.
 */
#include "algo.h"
#include "debug.h"

chorusResult_t ring_allgather_program(const channel_work_t *w)
{
    prims_t p = w->prims;
    const coll_args_t *a = w->args;
    const int n = w->ring->nranks, idx = w->ring->index;
    const int *ranks = w->ring->ranks;
    size_t choff, chlen;
    algo_part(a->count, w->nchannels, w->channel, &choff, &chlen);
    const char *in = (const char *)a->sendbuff + choff * p.esize;
    char *out = a->recvbuff;
#define BLOCK(pos) (out + ((size_t)ranks[pos] * a->count + choff + off) * p.esize)
    if (n == 1) {
        size_t off = 0;
        prims_local_copy(&p, in, BLOCK(idx), chlen, 0);
        return chorusSuccess;
    }
    const size_t chunk = ring_chunk_elems(&p);
    for (size_t off = 0; off < chlen; off += chunk) {
        size_t real = chlen - off < chunk ? chlen - off : chunk;
        CHECK(prims_copy_send(&p, in + off * p.esize, BLOCK(idx), real));
        for (int s = 1; s <= n - 2; s++)
            CHECK(prims_recv_copy_send(&p, BLOCK(ring_mod(idx - s, n)), real));
        CHECK(prims_recv(&p, BLOCK(ring_mod(idx + 1, n)), real));
    }
#undef BLOCK
    return chorusSuccess;
}
