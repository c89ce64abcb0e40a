/*
 * tree.c: the trees (DESIGN section 4) and the channel programs that run over them.
 *
 * Across hosts a binary tree over host positions; inside each host a chain from the host's leader
 * (its first rank) through its other ranks in rank order. The leader's parent is the parent host's
 * leader; its children are the next rank of its chain and the leaders of its child hosts (at most
 * three children in all).
 *
 * Host tree over positions 0..H-1: position 0 is the root with one child; positions 1..H-1 form an
 * in-order binary tree where each subrange's node is the position with the most trailing zero
 * bits, so every odd position is a leaf:
 *
 *        H = 8:      0
 *                    |
 *                    4
 *                  /   \
 *                 2     6
 *                / \   / \
 *               1   3 5   7
 *
 * Double binary tree: tree 1 shifts the hosts by one position (host h at position h-1 mod H), so
 * tree 0's leaves (odd positions) sit at even positions and the other way round. Each host is then
 * interior in at most one of the two trees, except host 0, which is tree 0's root with a single
 * child (NCCL mirrors the numbering for an odd host count instead; for this layout that makes the
 * middle host interior in both trees, which test_graph catches). Channel c runs on tree c % 2.
 *
 * A rooted tree (Broadcast, Reduce) puts the root's host at position 0 and the root first in its
 * host's chain; `which` does not apply to it.
 */
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "debug.h"

/* Parent of every position in [lo, hi] under parent, by the most-trailing-zeros rule. */
static void btree_range(int lo, int hi, int parent, int *up)
{
    if (lo > hi)
        return;
    int best = lo, best_tz = -1;
    for (int p = lo; p <= hi; p++) {
        int tz = __builtin_ctz((unsigned)p);
        if (tz > best_tz) {
            best_tz = tz;
            best = p;
        }
    }
    up[best] = parent;
    btree_range(lo, best - 1, best, up);
    btree_range(best + 1, hi, best, up);
}

chorusResult_t graph_build_tree(int nranks, int rank, const int *host_of, int which, int root,
                                tree_t *tree_p)
{
    int nhosts = 0;
    for (int r = 0; r < nranks; r++)
        if (host_of[r] + 1 > nhosts)
            nhosts = host_of[r] + 1;
    int *up = malloc(sizeof(int) * (nhosts + 1));
    int *leader = calloc(nhosts + 1, sizeof(int));
    int *pos_host = malloc(sizeof(int) * nhosts); /* position -> host */
    if (up == NULL || leader == NULL || pos_host == NULL) {
        free(up);
        free(leader);
        free(pos_host);
        return ERR(chorusSystemError, SUB_GRAPH, "out of memory");
    }
    int root_host = root >= 0 ? host_of[root] : 0;
    for (int pos = 0; pos < nhosts; pos++) {
        int h = (pos + root_host) % nhosts;
        if (which == 1 && root < 0)
            h = (h + 1) % nhosts;
        pos_host[pos] = h;
    }
    up[0] = -1;
    btree_range(1, nhosts - 1, 0, up);
    /* Chains: the leader is the first rank of the host (the root in the root's host). */
    for (int h = 0; h < nhosts; h++)
        leader[h] = -1;
    for (int r = 0; r < nranks; r++)
        if (leader[host_of[r]] < 0)
            leader[host_of[r]] = r;
    if (root >= 0)
        leader[root_host] = root;
    /* Chain order inside a host: leader, then the others in rank order. */
    int me_host = host_of[rank];
    int prev = -1, next = -1, seen_me = 0, last = leader[me_host];
    if (rank != leader[me_host]) {
        for (int r = 0; r < nranks; r++) {
            if (host_of[r] != me_host || r == leader[me_host])
                continue;
            if (r == rank) {
                prev = last;
                seen_me = 1;
            } else if (seen_me) {
                next = r;
                break;
            }
            last = r;
        }
    } else {
        for (int r = 0; r < nranks; r++)
            if (host_of[r] == me_host && r != rank) {
                next = r;
                break;
            }
    }
    tree_t t;
    memset(&t, 0, sizeof(t));
    t.up = prev;
    if (next >= 0)
        t.down[t.ndown++] = next;
    if (rank == leader[me_host]) {
        int my_pos = 0;
        for (int pos = 0; pos < nhosts; pos++)
            if (pos_host[pos] == me_host)
                my_pos = pos;
        if (up[my_pos] >= 0)
            t.up = leader[pos_host[up[my_pos]]];
        for (int pos = 0; pos < nhosts; pos++)
            if (up[pos] == my_pos && t.ndown < TREE_MAX_DOWN)
                t.down[t.ndown++] = leader[pos_host[pos]];
    }
    *tree_p = t;
    free(up);
    free(leader);
    free(pos_host);
    return chorusSuccess;
}

/*
 * Tree all-reduce on one channel (its share of the buffer), in slices of one FIFO slot:
 *
 *   up(k):    leaf      src[k]                               -> parent
 *             interior  src[k] + child0[k] + child1[k] ...   -> parent
 *             root      src[k] + children[k] (final)         -> dst[k], every child
 *   down(k):  non-root  parent[k]                            -> dst[k], every child
 *
 * Every rank runs up(0..L-1), then up(k) and down(k-L) alternately, then the remaining downs. Up
 * goes bottom-up and down top-down for one slice, and no step waits on a later one, so any lag L is
 * deadlock-free; L = CHORUS_STEPS keeps the up stream flowing while results come back down.
 */
chorusResult_t tree_allreduce_program(const channel_work_t *w)
{
    const coll_args_t *a = w->args;
    prims_t p = w->prims;
    const tree_conns_t *tc = w->tree;
    size_t off, len;
    algo_part(a->count, w->nchannels, w->channel, &off, &len);
    const char *src = (const char *)a->sendbuff + off * p.esize;
    char *dst = (char *)a->recvbuff + off * p.esize;
    if (len == 0)
        return chorusSuccess;
    conn_t *c0 = tc->up_send != NULL ? tc->up_send : tc->ndown > 0 ? tc->down_send[0] : NULL;
    if (c0 == NULL) { /* a tree of one rank */
        prims_local_copy(&p, src, dst, len, 1);
        return chorusSuccess;
    }
    size_t slice = prims_slice_elems(&p, c0);
    size_t nslices = (len + slice - 1) / slice;
    size_t lag = (size_t)c0->steps;
    int is_root = tc->up_send == NULL;
    for (size_t k = 0; k < nslices + lag; k++) {
        if (k < nslices) {
            size_t o = k * slice, n = len - o < slice ? len - o : slice;
            if (is_root)
                CHECK(prims_tree(&p, tc->up_recv, tc->ndown, tc->down_send, tc->ndown,
                                 src + o * p.esize, dst + o * p.esize, n, 1));
            else
                CHECK(prims_tree(&p, tc->up_recv, tc->ndown, &tc->up_send, 1, src + o * p.esize,
                                 NULL, n, 0));
        }
        if (!is_root && k >= lag) {
            size_t o = (k - lag) * slice, n = len - o < slice ? len - o : slice;
            CHECK(prims_tree(&p, &tc->down_recv, 1, tc->down_send, tc->ndown, NULL,
                             dst + o * p.esize, n, 0));
        }
    }
    return chorusSuccess;
}

/*
 * Tree broadcast from the tree's root, one channel, slice by slice:
 *   root      src[k] -> dst[k] (unless in place), every child
 *   others    parent[k] -> dst[k], every child
 */
chorusResult_t tree_broadcast_program(const channel_work_t *w)
{
    const coll_args_t *a = w->args;
    prims_t p = w->prims;
    const tree_conns_t *tc = w->tree;
    conn_t *c0 = tc->down_recv != NULL ? tc->down_recv : tc->ndown > 0 ? tc->down_send[0] : NULL;
    if (c0 == NULL) {
        prims_local_copy(&p, a->sendbuff, a->recvbuff, a->count, 0);
        return chorusSuccess;
    }
    size_t slice = prims_slice_elems(&p, c0);
    for (size_t o = 0; o < a->count; o += slice) {
        size_t n = a->count - o < slice ? a->count - o : slice;
        char *dst = (char *)a->recvbuff + o * p.esize;
        if (tc->down_recv == NULL)
            CHECK(prims_tree(&p, NULL, 0, tc->down_send, tc->ndown,
                             (const char *)a->sendbuff + o * p.esize, dst, n, 0));
        else
            CHECK(prims_tree(&p, &tc->down_recv, 1, tc->down_send, tc->ndown, NULL, dst, n, 0));
    }
    return chorusSuccess;
}

/*
 * Tree reduce to the tree's root, one channel, slice by slice:
 *   leaf/interior   src[k] + children[k] -> parent
 *   root            src[k] + children[k] -> dst[k] (final)
 */
chorusResult_t tree_reduce_program(const channel_work_t *w)
{
    const coll_args_t *a = w->args;
    prims_t p = w->prims;
    const tree_conns_t *tc = w->tree;
    conn_t *c0 = tc->up_send != NULL ? tc->up_send : tc->ndown > 0 ? tc->up_recv[0] : NULL;
    if (c0 == NULL) {
        prims_local_copy(&p, a->sendbuff, a->recvbuff, a->count, 1);
        return chorusSuccess;
    }
    size_t slice = prims_slice_elems(&p, c0);
    for (size_t o = 0; o < a->count; o += slice) {
        size_t n = a->count - o < slice ? a->count - o : slice;
        const char *src = (const char *)a->sendbuff + o * p.esize;
        if (tc->up_send == NULL)
            CHECK(prims_tree(&p, tc->up_recv, tc->ndown, NULL, 0, src,
                             (char *)a->recvbuff + o * p.esize, n, 1));
        else
            CHECK(prims_tree(&p, tc->up_recv, tc->ndown, &tc->up_send, 1, src, NULL, n, 0));
    }
    return chorusSuccess;
}
