/*
 * test_graph.c: the rings and trees of algorithms/ (graph.c, tree.c) for many host layouts.
 *
 * For every layout of 1..12 hosts with 1..4 ranks each (and uneven layouts), every rank computes
 * its own view independently, as on a real job, and the views must agree:
 *   rings   each host's ranks are contiguous (the ring crosses each host boundary once);
 *   trees   a rank is its parent's child exactly once and vice versa; one root; every rank reaches
 *           the root; at most TREE_MAX_DOWN children; inside a host the ranks form a chain from
 *           the leader, and only leaders have parents or children on other hosts;
 *   double  with two hosts or more, no host leader is interior (has a child host) in both trees;
 *   rooted  the tree built for root r has r as its root, for every r.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"

static int failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            printf("FAIL: " __VA_ARGS__);                                                          \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

static int cross_host_children(const tree_t *t, const int *host_of, int r)
{
    int n = 0;
    for (int i = 0; i < t->ndown; i++)
        n += host_of[t->down[i]] != host_of[r];
    return n;
}

static void check_tree(int n, const int *host_of, int which, int root, const char *what)
{
    tree_t *t = calloc(n, sizeof(tree_t));
    for (int r = 0; r < n; r++)
        graph_build_tree(n, r, host_of, which, root, &t[r]);
    int roots = 0;
    for (int r = 0; r < n; r++) {
        EXPECT(t[r].ndown <= TREE_MAX_DOWN, "%s: rank %d has %d children", what, r, t[r].ndown);
        if (t[r].up < 0) {
            roots++;
            if (root >= 0)
                EXPECT(r == root, "%s: root is %d, wanted %d", what, r, root);
        } else {
            int found = 0;
            for (int i = 0; i < t[t[r].up].ndown; i++)
                found += t[t[r].up].down[i] == r;
            EXPECT(found == 1, "%s: rank %d's parent %d lists it %d times", what, r, t[r].up,
                   found);
        }
        for (int i = 0; i < t[r].ndown; i++)
            EXPECT(t[t[r].down[i]].up == r, "%s: rank %d's child %d has parent %d", what, r,
                   t[r].down[i], t[t[r].down[i]].up);
        /* Reach the root in at most n steps. */
        int x = r, steps = 0;
        while (t[x].up >= 0 && steps <= n) {
            x = t[x].up;
            steps++;
        }
        EXPECT(steps <= n, "%s: rank %d never reaches the root", what, r);
        /* Only a host's first rank on the chain talks to other hosts. */
        int up_remote = t[r].up >= 0 && host_of[t[r].up] != host_of[r];
        int remote = up_remote || cross_host_children(&t[r], host_of, r) > 0;
        int local_children = t[r].ndown - cross_host_children(&t[r], host_of, r);
        EXPECT(local_children <= 1, "%s: rank %d has %d children on its host (a chain has 1)", what,
               r, local_children);
        if (remote)
            EXPECT(t[r].up < 0 || up_remote,
                   "%s: rank %d talks to other hosts but is not its "
                   "host's leader",
                   what, r);
    }
    EXPECT(roots == 1, "%s: %d roots", what, roots);
    free(t);
}

int main(void)
{
    int layouts = 0;
    for (int hosts = 1; hosts <= 12; hosts++)
        for (int per = 1; per <= 4; per++)
            for (int uneven = 0; uneven < 2; uneven++) {
                int n = 0, host_of[64];
                for (int h = 0; h < hosts; h++) {
                    int k = per + (uneven && h % 3 == 1 ? 1 : 0);
                    for (int i = 0; i < k; i++)
                        host_of[n++] = h;
                }
                /* Interleave ranks over hosts when uneven, so host order != rank order. */
                if (uneven)
                    for (int r = 0; r + 1 < n; r += 2) {
                        int tmp = host_of[r];
                        host_of[r] = host_of[r + 1];
                        host_of[r + 1] = tmp;
                    }
                char what[128];
                for (int r = 0; r < n; r++) {
                    ring_t ring;
                    graph_build_ring(n, r, host_of, &ring);
                    int crossings = 0;
                    for (int i = 0; i < n; i++)
                        crossings += host_of[ring.ranks[i]] != host_of[ring.ranks[(i + 1) % n]];
                    EXPECT(crossings == (hosts > 1 ? hosts : 0),
                           "ring of %d hosts x %d crosses %d host boundaries", hosts, per,
                           crossings);
                    EXPECT(ring.ranks[ring.index] == r, "ring index of rank %d", r);
                    graph_free_ring(&ring);
                }
                for (int which = 0; which < 2; which++) {
                    snprintf(what, sizeof(what), "%d hosts x %d%s tree %d", hosts, per,
                             uneven ? " uneven" : "", which);
                    check_tree(n, host_of, which, -1, what);
                    for (int root = 0; root < n; root++) {
                        snprintf(what, sizeof(what), "%d hosts x %d%s tree %d root %d", hosts, per,
                                 uneven ? " uneven" : "", which, root);
                        check_tree(n, host_of, which, root, what);
                    }
                }
                /* Double binary tree: a leader with child hosts in tree 0 has none in tree 1. */
                if (hosts > 2) {
                    for (int r = 0; r < n; r++) {
                        tree_t t0, t1;
                        graph_build_tree(n, r, host_of, 0, -1, &t0);
                        graph_build_tree(n, r, host_of, 1, -1, &t1);
                        int c0 = cross_host_children(&t0, host_of, r);
                        int c1 = cross_host_children(&t1, host_of, r);
                        EXPECT(!(c0 > 0 && c1 > 0) || (t0.up < 0 || t1.up < 0),
                               "%d hosts x %d: rank %d is interior in both trees (%d and %d "
                               "child hosts)",
                               hosts, per, r, c0, c1);
                    }
                }
                layouts++;
            }
    if (failures) {
        printf("FAIL: %d check(s) failed\n", failures);
        return 1;
    }
    printf("PASS: rings and trees agree across ranks for %d host layouts\n", layouts);
    return 0;
}
