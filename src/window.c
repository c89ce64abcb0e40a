/*
 * window.c: the node-local windows of the direct algorithms (algorithms/direct.c).
 *
 * Made on the first direct call (every rank reaches it in the same call: the tuner's choice is
 * the same everywhere): each rank creates a shm segment of the flags header and two buffers,
 * the names go round the bootstrap, every rank maps every other's, and once all have (a
 * barrier) each unlinks its own, so a crash from then on leaves nothing in /dev/shm.
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
}

chorusResult_t window_connect(chorusComm_t comm)
{
    if (comm->win_base != NULL)
        return chorusSuccess;
    chorusResult_t res = chorusSuccess;
    int n = comm->nranks, me = comm->rank;
    size_t bufsz = ((size_t)comm->params.direct_buffsize + 4095) & ~(size_t)4095;
    size_t map_nbytes = DIRECT_HDR_NBYTES + 2 * bufsz;
    char name[WINDOW_NAME_BYTES];
    char *names = calloc((size_t)n, WINDOW_NAME_BYTES);
    comm->win_base = calloc((size_t)n, sizeof(char *));
    comm->win_map_nbytes = map_nbytes;
    if (names == NULL || comm->win_base == NULL) {
        free(names);
        free(comm->win_base);
        comm->win_base = NULL;
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    }
    shm_segment_name(name, sizeof(name), me, me, WINDOW_TAG);
    void *mine = NULL;
    res = shm_segment_map(name, map_nbytes, 1, me, &mine);
    if (res != chorusSuccess) {
        free(names);
        free(comm->win_base);
        comm->win_base = NULL;
        return res;
    }
    comm->win_base[me] = mine;
    memcpy(names + (size_t)me * WINDOW_NAME_BYTES, name, WINDOW_NAME_BYTES);
    CHECK_GOTO(boot_allgather(comm->boot, names, WINDOW_NAME_BYTES), res, fail);
    for (int r = 0; r < n; r++) {
        if (r == me)
            continue;
        char *peer_name = names + (size_t)r * WINDOW_NAME_BYTES;
        peer_name[WINDOW_NAME_BYTES - 1] = '\0';
        void *map = NULL;
        CHECK_GOTO(shm_segment_map(peer_name, map_nbytes, 0, r, &map), res, fail);
        comm->win_base[r] = map;
    }
    /* Every rank has mapped every window: the names can go. */
    CHECK_GOTO(boot_barrier(comm->boot), res, fail);
    shm_unlink(name);
    free(names);
    comm->win_view = (direct_view_t){n, me, comm->win_base, bufsz, &comm->win_seq};
    INFO(SUB_INIT, "direct windows: %d ranks x 2 buffers of %zu bytes", n, bufsz);
    return chorusSuccess;
fail:
    shm_unlink(name);
    free(names);
    unmap_all(comm);
    return res;
}

void window_close(chorusComm_t comm)
{
    unmap_all(comm);
}
