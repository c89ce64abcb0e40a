/*
 * all_gather_perf.c: nccl-tests' all_gather_perf for Chorus (chorusAllGather). Every rank ends
 * with the n slices of sendcount elements in rank order; busbw = algbw * (n-1)/n.
 */
#include "common.h"

static void ag_get_counts(size_t count, int nranks, perf_counts_t *counts_p)
{
    counts_p->sendcount = count / (size_t)nranks;
    counts_p->recvcount = counts_p->sendcount * (size_t)nranks;
    counts_p->paramcount = counts_p->sendcount;
    counts_p->send_inplace_offset = counts_p->sendcount;
    counts_p->recv_inplace_offset = 0;
}

static void ag_get_bw(size_t count, size_t eltsize, double sec, int nranks, double *algbw_p,
                      double *busbw_p)
{
    double base = (double)(count * eltsize) * nranks / 1.0e9 / sec;
    *algbw_p = base;
    *busbw_p = base * ((double)(nranks - 1) / nranks);
}

static chorusResult_t ag_run(const void *sendbuff, void *recvbuff, const perf_case_t *c,
                             chorusComm_t comm, chorusStream_t stream)
{
    return chorusAllGather(sendbuff, recvbuff, c->counts.paramcount, c->dtype, comm, stream);
}

/* Element j of the gathered buffer comes from rank j / sendcount, at global index j. */
static size_t ag_init(const perf_case_t *c, void *sendbuff, void *expected)
{
    size_t sc = c->counts.sendcount;
    for (size_t i = 0; i < sc; i++) {
        perf_store(sendbuff, i, c->dtype,
                   perf_value(c->dtype, chorusMax, c->nranks, c->rank, (size_t)c->rank * sc + i));
    }
    for (size_t j = 0; expected != NULL && j < c->counts.recvcount; j++) {
        perf_store(expected, j, c->dtype,
                   perf_value(c->dtype, chorusMax, c->nranks, (int)(j / sc), j));
    }
    return c->counts.recvcount;
}

static int ag_mpi_run(const void *sendbuff, void *recvbuff, const perf_case_t *c, MPI_Datatype dt,
                      MPI_Op op, MPI_Comm comm)
{
    int n = (int)c->counts.paramcount;
    (void)op;
    return MPI_Allgather(sendbuff, n, dt, recvbuff, n, dt, comm);
}

static const perf_coll_t ag_coll = {
    .tuning_name = "allgather",
    .name = "all_gather",
    .get_counts = ag_get_counts,
    .get_bw = ag_get_bw,
    .run = ag_run,
    .init = ag_init,
    .mpi_run = ag_mpi_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &ag_coll);
}
