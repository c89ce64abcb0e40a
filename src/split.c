/*
 * split.c: chorusCommSplit. Every rank of the parent all-gathers (color, key); the ranks of one
 * color form a communicator ordered by (key, parent rank). Its first member makes a unique id and
 * hands it to the others over the parent's bootstrap; then they initialize as usual. A negative
 * color takes part in the exchange and gets NULL.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "debug.h"

typedef struct split_entry {
    int32_t color, key, rank, pad;
} split_entry_t;

chorusResult_t chorusCommSplit(chorusComm_t comm, int color, int key, chorusComm_t *newcomm,
                               chorusConfig_t *config)
{
    CHECK(comm_check(comm, "chorusCommSplit"));
    if (newcomm == NULL)
        return comm_api_return(
            comm, ERR(chorusInvalidArgument, SUB_INIT, "chorusCommSplit: newcomm is NULL"));
    if (group_active()) { /* held for chorusGroupEnd, as NCCL's (comm.h: group_init_t) */
        chorusResult_t res = config_check(config);
        group_init_t gi;
        memset(&gi, 0, sizeof(gi));
        gi.comm_p = newcomm;
        gi.parent = comm;
        gi.color = color;
        gi.key = key;
        gi.dev = comm->peers[comm->rank].cuda_dev; /* a rank keeps its parent's device */
        if (res == chorusSuccess) {
            group_init_keep_config(&gi, config);
            res = group_add_init(&gi);
        }
        if (res == chorusSuccess)
            *newcomm = NULL;
        return comm_api_return(comm, res);
    }
    return comm_api_return(comm, comm_split(comm, color, key, newcomm, config));
}

chorusResult_t comm_split(chorusComm_t comm, int color, int key, chorusComm_t *newcomm,
                          const chorusConfig_t *config)
{
    chorusResult_t res = chorusSuccess;
    int n = comm->nranks;
    split_entry_t *all = calloc(n, sizeof(*all));
    int *members = malloc(sizeof(int) * n);
    if (all == NULL || members == NULL) {
        res = ERR(chorusSystemError, SUB_INIT, "out of memory");
        goto out;
    }
    all[comm->rank] = (split_entry_t){color < 0 ? -1 : color, key, comm->rank, 0};
    fifo_excl_lock(&comm->exec_lock);
    res = boot_allgather(comm->boot, all, sizeof(*all));
    fifo_excl_unlock(&comm->exec_lock);
    if (res != chorusSuccess) {
        /* The exchange passes each rank's entry along the ranks, so a rank that never calls
         * is reported as a silent neighbour: say what the exchange was. */
        char cause[1024];
        snprintf(cause, sizeof(cause), "%s", debug_last_error());
        res = ERR(res, SUB_INIT,
                  "chorusCommSplit (rank %d of %d): the exchange of colors and keys failed: do "
                  "all %d ranks of the communicator call chorusCommSplit? (%s)",
                  comm->rank, n, n, cause);
        goto out;
    }
    *newcomm = NULL;
    if (color < 0)
        goto out;
    /* Members of my color ordered by (key, rank): insertion sort, n is small. */
    int m = 0;
    for (int r = 0; r < n; r++) {
        if (all[r].color != color)
            continue;
        int i = m++;
        while (i > 0 && (all[members[i - 1]].key > all[r].key))
            members[i] = members[i - 1], i--;
        members[i] = r;
    }
    int newrank = 0;
    for (int i = 0; i < m; i++)
        if (members[i] == comm->rank)
            newrank = i;
    boot_id_t id;
    uint32_t tag = BOOT_TAG_SPLIT | ((uint32_t)color & 0xffffff);
    if (newrank == 0) {
        CHECK_GOTO(boot_new_id(comm->params.socket_ifname, comm->timeout_ms, &id), res, out);
        for (int i = 1; i < m; i++)
            CHECK_GOTO(boot_send(comm->boot, members[i], tag, &id, sizeof(id)), res, out);
    } else {
        CHECK_GOTO(boot_recv(comm->boot, members[0], tag, &id, sizeof(id)), res, out);
    }
    res = comm_init(newcomm, m, &id, newrank, config);
    debug_set_rank(comm->rank);
out:
    free(all);
    free(members);
    return res;
}
