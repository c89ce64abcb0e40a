/*
 * ring_allreduce.c: bandwidth-optimal ring all-reduce = reduce-scatter then all-gather.
 *
 * The channel's share is cut into loop iterations of nranks chunks; chunk j of an iteration is
 * finished by the rank at ring position j. With n ranks, position i does, per iteration:
 *
 *   step 0        send                   chunk i-1          (start a partial sum)
 *   steps 1..n-2  recv_reduce_send       chunk i-1-s        (add mine, pass on)
 *   step n-1      recv_reduce_copy_send  chunk i   -> out   (final: avg divides here)
 *   steps 1..n-2  recv_copy_send         chunk i-s -> out   (pass finished chunks on)
 *   last          recv                   chunk i+1 -> out
 *
 * 2(n-1) steps. A chunk is at most half the FIFO (steps/2 slots), so step 0's sends always fit and
 * the ring cannot deadlock. Every element's final value is computed once, by one rank, and copied
 * to the others: the result is identical on every rank and reproducible run to run.
 */
#include "algo.h"
#include "debug.h"

size_t ring_chunk_elems(const prims_t *p)
{
    size_t slice = p->send->slot_nbytes / p->esize;
    size_t chunk = slice * (size_t)(p->send->steps / 2);
    return chunk > 0 ? chunk : 1;
}

chorusResult_t ring_allreduce_program(const channel_work_t *w)
{
    prims_t p = w->prims;
    const coll_args_t *a = w->args;
    const int n = w->ring->nranks, idx = w->ring->index;
    size_t choff, chlen;
    algo_part(a->count, w->nchannels, w->channel, &choff, &chlen);
    const char *in = (const char *)a->sendbuff + choff * p.esize;
    char *out = (char *)a->recvbuff + choff * p.esize;
    if (n == 1) {
        prims_local_copy(&p, in, out, chlen, 1);
        return chorusSuccess;
    }
    const size_t chunk = ring_chunk_elems(&p);
    for (size_t off = 0; off < chlen; off += (size_t)n * chunk) {
        size_t left = chlen - off;
        size_t real = (left + n - 1) / n < chunk ? (left + n - 1) / n : chunk;
#define CHUNK_OFF(j) (off + (size_t)(j)*real)
#define CHUNK_LEN(j)                                                                               \
    (CHUNK_OFF(j) >= chlen ? 0 : (chlen - CHUNK_OFF(j) < real ? chlen - CHUNK_OFF(j) : real))
        int j = ring_mod(idx - 1, n);
        CHECK(prims_send(&p, in + CHUNK_OFF(j) * p.esize, CHUNK_LEN(j)));
        for (int s = 1; s <= n - 2; s++) {
            j = ring_mod(idx - 1 - s, n);
            CHECK(prims_recv_reduce_send(&p, in + CHUNK_OFF(j) * p.esize, CHUNK_LEN(j)));
        }
        j = idx;
        CHECK(prims_recv_reduce_copy_send(&p, in + CHUNK_OFF(j) * p.esize,
                                          out + CHUNK_OFF(j) * p.esize, CHUNK_LEN(j), 1));
        for (int s = 1; s <= n - 2; s++) {
            j = ring_mod(idx - s, n);
            CHECK(prims_recv_copy_send(&p, out + CHUNK_OFF(j) * p.esize, CHUNK_LEN(j)));
        }
        j = ring_mod(idx + 1, n);
        CHECK(prims_recv(&p, out + CHUNK_OFF(j) * p.esize, CHUNK_LEN(j)));
#undef CHUNK_OFF
#undef CHUNK_LEN
    }
    return chorusSuccess;
}
