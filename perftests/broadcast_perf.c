/*
 * broadcast_perf.c: nccl-tests' broadcast_perf for Chorus (chorusBroadcast) from each root of -r
 * (-1: every rank in turn). busbw = algbw.
 */
#include "common.h"

static void bc_get_counts(size_t count, int nranks, perf_counts_t *counts_p)
{
    (void)nranks;
    counts_p->sendcount = count;
    counts_p->recvcount = count;
    counts_p->paramcount = count;
    counts_p->send_inplace_offset = 0;
    counts_p->recv_inplace_offset = 0;
}

static void bc_get_bw(size_t count, size_t eltsize, double sec, int nranks, double *algbw_p,
                      double *busbw_p)
{
    (void)nranks;
    *algbw_p = (double)(count * eltsize) / 1.0e9 / sec;
    *busbw_p = *algbw_p;
}

static chorusResult_t bc_run(const void *sendbuff, void *recvbuff, const perf_case_t *c,
                             chorusComm_t comm, chorusStream_t stream)
{
    return chorusBroadcast(sendbuff, recvbuff, c->counts.paramcount, c->dtype, c->root, comm,
                           stream);
}

/* The root sends its pattern; other ranks' inputs (what in place leaves in their buffers before
 * the call) are their own patterns, so a rank that receives nothing is caught. */
static size_t bc_init(const perf_case_t *c, void *sendbuff, void *expected)
{
    size_t n = c->counts.paramcount;
    for (size_t i = 0; i < n; i++) {
        perf_store(sendbuff, i, c->dtype, perf_value(c->dtype, chorusMax, c->nranks, c->rank, i));
    }
    for (size_t i = 0; expected != NULL && i < n; i++) {
        perf_store(expected, i, c->dtype, perf_value(c->dtype, chorusMax, c->nranks, c->root, i));
    }
    return n;
}

static int bc_mpi_run(const void *sendbuff, void *recvbuff, const perf_case_t *c, MPI_Datatype dt,
                      MPI_Op op, MPI_Comm comm)
{
    (void)sendbuff;
    (void)op;
    return MPI_Bcast(recvbuff, (int)c->counts.paramcount, dt, c->root, comm);
}

static const perf_coll_t bc_coll = {
    .tuning_name = "broadcast",
    .name = "broadcast",
    .rooted = 1,
    .mpi_in_place = 1,
    .get_counts = bc_get_counts,
    .get_bw = bc_get_bw,
    .run = bc_run,
    .init = bc_init,
    .mpi_run = bc_mpi_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &bc_coll);
}
