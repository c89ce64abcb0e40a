/*
 * check_args.c: CHORUS_CHECK_ARGS=1. Before a collective runs, every rank's collective, count,
 * datatype, op and root go round the bootstrap (boot_allgather, about 60 us a call on one host),
 * and where any rank's differ from rank 0's every rank refuses the call alike: nothing runs, and
 * the communicator stays usable (comm.c's op_failed leaves it unaborted). NCCL and MPI compare
 * nothing: an all-reduce of 1000 floats against one of 100000 returned success with every element
 * wrong, a float32 against a float64 garbage.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "debug.h"
#include "memops.h"

typedef struct call_card {
    int32_t kind, dtype, op, root; /* op and root -1 where the collective has none */
    uint64_t count;
} call_card_t;

static void call_text(const call_card_t *c, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s of %llu %s", coll_name((coll_kind_t)c->kind),
                     (unsigned long long)c->count, dtype_name((chorusDataType_t)c->dtype));
    if (c->op >= 0 && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " (%s)", redop_name((chorusRedOp_t)c->op));
    if (c->root >= 0 && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " from root %d", c->root);
}

chorusResult_t args_agree(chorusComm_t comm, const coll_args_t *a, uint64_t seq)
{
    int n = comm->nranks, me = comm->rank;
    int reduces =
        a->kind == COLL_ALLREDUCE || a->kind == COLL_REDUCE || a->kind == COLL_REDUCESCATTER;
    int rooted = a->kind == COLL_BROADCAST || a->kind == COLL_REDUCE;
    call_card_t *all = calloc((size_t)n, sizeof(*all));
    if (all == NULL)
        return ERR(chorusSystemError, SUB_COLL, "out of memory for %d argument cards", n);
    all[me] = (call_card_t){(int32_t)a->kind, (int32_t)a->dtype, reduces ? (int32_t)a->op : -1,
                            rooted ? a->root : -1, (uint64_t)a->count};
    chorusResult_t res = boot_allgather(comm->boot, all, sizeof(*all));
    int differ = 0, first = -1;
    for (int r = 1; res == chorusSuccess && r < n; r++)
        if (memcmp(&all[r], &all[0], sizeof(*all)) != 0) {
            differ++;
            first = first < 0 ? r : first;
        }
    if (res == chorusSuccess && differ > 0) {
        char zero[160], other[160];
        __atomic_store_n(&comm->args_refused, 1, __ATOMIC_RELEASE);
        call_text(&all[0], zero, sizeof(zero));
        call_text(&all[first], other, sizeof(other));
        res = ERR(chorusInvalidUsage, SUB_COLL,
                  "%s #%llu (rank %d): the ranks called different collectives or arguments "
                  "(CHORUS_CHECK_ARGS): rank 0 %s, rank %d %s (%d rank%s differ from rank 0); "
                  "nothing ran, and the communicator stays usable",
                  coll_name(a->kind), (unsigned long long)seq, me, zero, first, other, differ,
                  differ > 1 ? "s" : "");
    }
    free(all);
    return res;
}
