/*
 * window.c: the node-local windows of the direct algorithms (algorithms/direct.c).
 *
 * Made during init, where every rank can map every other's (one host, shm): each rank creates
 * a shm segment of the flags header and two buffers, the names go round the bootstrap, every
 * rank maps every other's, and once all say so each unlinks its own, so a job killed after init
 * leaves nothing in /dev/shm. Where some rank cannot (a small /dev/shm), all of them learn it in
 * the same exchange and the communicator runs without the direct algorithms.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "comm.h"
#include "debug.h"

#define WINDOW_NAME_BYTES 64
#define WINDOW_TAG 0x77696e /* "win": the name's tag field */

int window_possible(chorusComm_t comm)
{
    if (comm->nranks < 2 || comm->nranks > DIRECT_MAX_RANKS || comm->nhosts != 1)
        return 0;
    const peer_info_t *self = &comm->peers[comm->rank];
    for (int r = 0; r < comm->nranks; r++)
        if (r != comm->rank && !shm_transport.can_connect(self, &comm->peers[r]))
            return 0;
    return 1;
}

static void unmap_all(chorusComm_t comm)
{
    for (int r = 0; comm->win_base != NULL && r < comm->nranks; r++)
        if (comm->win_base[r] != NULL)
            munmap(comm->win_base[r], comm->win_map_nbytes);
    free(comm->win_base);
    comm->win_base = NULL;
    free(comm->win_done_seen);
    comm->win_done_seen = NULL;
}

/* Every rank's yes or no: 1 when all said yes (a collective over the bootstrap). */
static chorusResult_t all_agree(chorusComm_t comm, int yes, int *all_p)
{
    int32_t *v = calloc((size_t)comm->nranks, sizeof(int32_t));
    if (v == NULL)
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    v[comm->rank] = yes;
    chorusResult_t res = boot_allgather(comm->boot, v, sizeof(int32_t));
    int all = 1;
    for (int r = 0; r < comm->nranks; r++)
        all &= v[r] != 0;
    free(v);
    *all_p = all;
    return res;
}

/* The windows could not be made on some rank: every rank stops using the direct algorithms on
 * this communicator (they all learn it in the same exchange, so the tuner stays agreed). */
static void disable(chorusComm_t comm, const char *why)
{
    unmap_all(comm);
    comm->tuner.topo.direct = 0;
    memset(comm->tune_cache, 0, sizeof(comm->tune_cache));
    if (comm->rank == 0)
        WARN(SUB_INIT,
             "direct algorithms off on this communicator: a rank could not make or map its "
             "node-local window (2 x %lld bytes, CHORUS_DIRECT_BUFFSIZE)%s%s; one-shot and "
             "two-shot calls run the ring instead (give /dev/shm more room or lower "
             "CHORUS_DIRECT_BUFFSIZE)",
             (long long)comm->params.direct_buffsize, why[0] ? ": " : "", why);
}

chorusResult_t window_connect(chorusComm_t comm)
{
    if (comm->win_base != NULL || !comm->tuner.topo.direct)
        return chorusSuccess;
    chorusResult_t res = chorusSuccess;
    int n = comm->nranks, me = comm->rank, all = 0;
    size_t bufsz = ((size_t)comm->params.direct_buffsize + 4095) & ~(size_t)4095;
    size_t map_nbytes = DIRECT_HDR_NBYTES + 2 * bufsz;
    char name[WINDOW_NAME_BYTES], why[768] = "";
    char *names = calloc((size_t)n, WINDOW_NAME_BYTES);
    comm->win_base = calloc((size_t)n, sizeof(char *));
    comm->win_map_nbytes = map_nbytes;
    if (names == NULL || comm->win_base == NULL) {
        free(names);
        free(comm->win_base);
        comm->win_base = NULL;
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    }
    /* A window that does not fit is not this call's failure: the ring runs instead. */
    int quiet = debug_set_quiet_errors(1);
    shm_segment_name(name, sizeof(name), me, me, WINDOW_TAG);
    void *mine = NULL;
    int made = shm_segment_map(name, map_nbytes, 1, me, 1, &mine) == chorusSuccess;
    if (!made)
        snprintf(why, sizeof(why), "rank %d: %s", me, debug_last_error());
    comm->win_base[me] = made ? mine : NULL;
    if (made)
        memcpy(names + (size_t)me * WINDOW_NAME_BYTES, name, WINDOW_NAME_BYTES);
    CHECK_GOTO(boot_allgather(comm->boot, names, WINDOW_NAME_BYTES), res, out);
    int mapped = made;
    for (int r = 0; r < n; r++) {
        char *peer_name = names + (size_t)r * WINDOW_NAME_BYTES;
        peer_name[WINDOW_NAME_BYTES - 1] = '\0';
        if (r == me || peer_name[0] == '\0')
            continue;
        void *map = NULL;
        if (shm_segment_map(peer_name, map_nbytes, 0, r, 1, &map) != chorusSuccess) {
            if (why[0] == '\0')
                snprintf(why, sizeof(why), "rank %d: %s", me, debug_last_error());
            mapped = 0;
            break;
        }
        comm->win_base[r] = map;
    }
    /* Instead of a barrier: once every rank has answered, every window is mapped (or none is
     * used); the names can go. */
    CHECK_GOTO(all_agree(comm, mapped, &all), res, out);
    for (int r = 0; r < n && all; r++)
        all = names[(size_t)r * WINDOW_NAME_BYTES] != '\0';
out:
    debug_set_quiet_errors(quiet);
    if (made)
        shm_unlink(name);
    free(names);
    if (res != chorusSuccess) {
        unmap_all(comm);
        return res;
    }
    if (!all) {
        disable(comm, why);
        return chorusSuccess;
    }
    comm->win_done_seen = calloc((size_t)n, sizeof(uint64_t));
    if (comm->win_done_seen == NULL) {
        unmap_all(comm);
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    }
    comm->win_view =
        (direct_view_t){n, me, comm->win_base, bufsz, &comm->win_seq, comm->win_done_seen};
    INFO(SUB_INIT, "direct windows: %d ranks x 2 buffers of %zu bytes", n, bufsz);
    return chorusSuccess;
}

void window_close(chorusComm_t comm)
{
    unmap_all(comm);
}
