/*
 * graph.c: ring construction. On one host the ring is rank order; across hosts it is node-major,
 * so each host boundary is crossed once per ring. All ranks compute the same ring from the same
 * all-gathered host ids.
 */
#include <stdlib.h>

#include "algo.h"
#include "debug.h"

chorusResult_t graph_build_ring(int nranks, int rank, const int *host_of, ring_t *ring_p)
{
    int *ranks = malloc(sizeof(int) * nranks);
    if (ranks == NULL)
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    int n = 0, maxhost = 0;
    for (int r = 0; r < nranks; r++)
        if (host_of[r] > maxhost)
            maxhost = host_of[r];
    for (int h = 0; h <= maxhost; h++)
        for (int r = 0; r < nranks; r++)
            if (host_of[r] == h)
                ranks[n++] = r;
    ring_p->nranks = nranks;
    ring_p->ranks = ranks;
    ring_p->index = 0;
    for (int i = 0; i < nranks; i++)
        if (ranks[i] == rank)
            ring_p->index = i;
    return chorusSuccess;
}

void graph_free_ring(ring_t *ring)
{
    free(ring->ranks);
    ring->ranks = NULL;
}

channel_program_t algo_program(coll_kind_t kind, int tree)
{
    if (tree) {
        switch (kind) {
        case COLL_ALLREDUCE:
            return tree_allreduce_program;
        case COLL_REDUCE:
            return tree_reduce_program;
        case COLL_BROADCAST:
            return tree_broadcast_program;
        default:
            return NULL;
        }
    }
    switch (kind) {
    case COLL_ALLREDUCE:
        return ring_allreduce_program;
    case COLL_REDUCESCATTER:
        return ring_reducescatter_program;
    case COLL_ALLGATHER:
        return ring_allgather_program;
    case COLL_REDUCE:
        return ring_reduce_program;
    case COLL_BROADCAST:
        return chain_broadcast_program;
    default:
        return NULL;
    }
}
